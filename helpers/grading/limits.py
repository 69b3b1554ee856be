"""Every limit of a graded kernel, and what of the grader's environment it may see."""

from __future__ import annotations

CELL_TIMEOUT = 60.0  # seconds per cell, --timeout
NOTEBOOK_TIMEOUT = 600.0  # seconds for cells, restarts and checks together, --notebook-timeout
CHECK_TIMEOUT = 60.0  # seconds per exercise's check, at least
CHECK_RESERVE = 15.0  # seconds of the notebook's limit kept for each exercise's check (at most a quarter of it)
STARTUP_TIMEOUT = 120.0  # kernel start plus the grader's set-up (imports torch)
INTERRUPT_GRACE = 5.0  # after an interrupt, how long a cell may take to stop before its kernel is killed
MAX_RESTARTS = 3  # kernel deaths/hangs while executing before the grader stops running more cells
GRADING_RESTARTS = 3  # checks that kill the kernel before the grader stops checking
POLL = 0.5  # seconds between "is the kernel still alive?" checks while waiting
# The grader's own work for one submission, in a worker process (helpers.grading.worker).
GRADER_MEMORY_MB = 6144  # beyond what the worker holds when it starts: decoding and checks (MiniLM's tables: 47 MB)
WORKER_GRACE = 60.0  # seconds after the kernel's start and the notebook's limit for the last check and the report
# The sandbox. Its limits are hard (soft = hard), so a notebook cannot raise them again.
PROCESS_LIMIT = 512  # processes and threads in one sandbox (torch and ipykernel need a few dozen)
OPEN_FILES = 1024
FILE_MB = 256  # the largest file a notebook may write
SCRATCH_MB = 512  # the scratch folder and /tmp, each (memory-backed, gone with the sandbox)
SUBMISSION_MB = 64  # the largest notebook `collect` reads; a larger one is reported, not graded
# Executing notebooks must not download anything; the device is NOT forced (a GPU grades on the GPU).
KERNEL_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "COURSE_PROGRESS_FILE": "",
}  # graded kernels keep no progress file
# A graded kernel's outputs are never kept: its figures are drawn (a cell's code runs as written) but not
# rendered to images, which took a second or more of a notebook with a few plots.
# Idle OpenMP threads sleep instead of spinning (results are the same): a graded kernel shares the cores with its
# grader and, at --jobs N, with other kernels; spinning, a training loop took 64 s instead of 19 on a loaded machine.
GRADED_ENV = {**KERNEL_ENV, "MPLBACKEND": "agg", "OMP_WAIT_POLICY": "PASSIVE"}
# What a sandboxed kernel inherits from the grader's environment, by exact name: nothing else
# (tokens, keys and the grader's own settings stay out). The checks read none of the kernel's.
SANDBOX_ENV = (
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "COURSE_DEVICE", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
)  # fmt: skip
