"""The course on a GPU: the check suites with every probe's GPU pass, and every solution notebook executed with
its models and checks on the GPU. `python3 course.py gpu` runs it on a machine with a CUDA (or MPS) torch in
.venv; `bash .gpu/run` on a lent machine without network (tests/gpu/prepare packs what it lacks).

It prints the versions and the device, pytest's summary, one line per notebook (time, first error) with the
lines it printed that name a device, and a verdict: every notebook ran, every training chapter trained on the
GPU, the suites passed. Exit status 0 only then; 2 where there is no GPU to test. With --outputs FILE it also
writes what every notebook printed, cell by cell (the GPU-only cells' results among it), to read there."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITES = ["tests/test_checks.py", "tests/test_devices.py", "tests/test_check_messages.py", "tests/test_remote.py"]
SUITES += [
    "tests/test_oracle.py",
    "tests/test_long_context.py",
    "tests/test_library.py",
    "tests/test_positions_in_practice.py",
]
DEVICE_LINE = re.compile(r"\b(cuda|mps|cpu|GPU)\b|trained on|device")
TRAINING_LINE = re.compile(r"\b(trained|fine-tuned)\b.*\bon (cpu|cuda|mps)\b")  # "18 models trained on cuda in 8 s"


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def printed(cell: dict) -> str:
    """What one executed code cell printed: its streams, plain-text results and the end of its traceback if it
    raised (colours dropped), pictures left out."""
    return "".join(
        "".join(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
        + ANSI.sub("", "\n".join(output.get("traceback", [])[-3:]))
        for output in cell.get("outputs", [])
    )


def first_line(cell: dict) -> str:
    return "".join(cell.get("source", "")).strip().splitlines()[0][:100]


def transcript(name: str, cells: list[dict]) -> str:
    """A notebook's printed text as markdown: each code cell that printed, by its first line, then what it printed."""
    parts = [f"## {name}\n"]
    for cell in cells:
        if cell.get("cell_type") == "code" and printed(cell).strip():
            parts.append(f"### `{first_line(cell)}`\n```\n{printed(cell).rstrip()}\n```\n")
    return "\n".join(parts)


def run_notebook(path: Path, timeout: int) -> tuple[float, str, list[str], str]:
    """Execute one notebook in a fresh kernel: seconds, its first error ('' if none), its lines naming a device,
    and its transcript."""
    import nbformat
    from nbclient import NotebookClient

    notebook, start, error = nbformat.read(path, as_version=4), time.perf_counter(), ""
    try:  # every cell runs, a failing one too: one run on a lent machine shows every failure, not the first
        NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
    except Exception as exc:  # a timeout or a dead kernel: report it, go on with the next notebook
        error = f"{type(exc).__name__}: {str(exc)[-800:]}"
    errors = [cell for cell in notebook.cells if any(o.get("output_type") == "error" for o in cell.get("outputs", []))]
    if errors and not error:
        first = next(o for o in errors[0].outputs if o.get("output_type") == "error")
        error = f"{len(errors)} cells raised; the first, `{first_line(errors[0])}`: {first.ename}: {first.evalue[:300]}"
    lines = [line for cell in notebook.cells for line in printed(cell).splitlines() if DEVICE_LINE.search(line)]
    return time.perf_counter() - start, error, lines, transcript(path.name, notebook.cells)


def notebook_failed(error: str, lines: list[str], device_type: str) -> bool:
    """A notebook fails on the GPU if it raised, or if a chapter that trains says it trained anywhere else."""
    return bool(error) or any(match.group(2) != device_type for match in map(TRAINING_LINE.search, lines) if match)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers for the check suites")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per notebook cell")
    parser.add_argument("--notebooks", type=int, default=1, help="notebooks run at once, beside the check suites")
    parser.add_argument("--chapters", nargs="+", help="only these chapters' notebooks (e.g. 07 08), no check suites")
    parser.add_argument("--outputs", type=Path, help="write what every notebook printed to this markdown file")
    parser.add_argument("pytest_args", nargs="*", help="what pytest runs instead of the check suites")
    args = parser.parse_args()
    os.environ.pop("COURSE_DEVICE", None)  # the device the course would choose for a student
    import torch
    import transformers

    from helpers import check_device

    device = check_device()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, check_device() = {device}", flush=True)
    if device.type == "cpu":
        print("No GPU: check_device() answered cpu. Install a CUDA (or MPS) torch into .venv (README, Using a GPU).")
        return 2
    if device.type == "cuda":
        print(f"card: {torch.cuda.get_device_name(device)}", flush=True)
    tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(args.workers)]
    suites = None if args.chapters else subprocess.Popen([*tests, *(args.pytest_args or SUITES)], cwd=ROOT)
    paths = sorted(p for p in (ROOT / "solutions").glob("*.ipynb") if not args.chapters or p.name[:2] in args.chapters)
    # spawn, not fork: this process has initialised CUDA, which a forked child cannot use
    with ProcessPoolExecutor(args.notebooks, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(run_notebook, paths, [args.timeout] * len(paths)))
    failed = []
    if args.outputs:
        args.outputs.write_text("\n".join(text for *_, text in results))
    for path, (seconds, error, lines, _) in zip(paths, results):
        if notebook_failed(error, lines, device.type):
            failed.append(path.name)
        print(f"== {path.name}: {seconds:.1f} s, {'ERROR ' + error if error else 'ok'}", flush=True)
        for line in lines:
            print("   ", line[:200])
    suites_failed = suites is not None and suites.wait() != 0  # they ran while the notebooks ran
    print(
        f"check suites: {'not run' if suites is None else 'FAILED' if suites_failed else 'passed'}; notebooks: "
        + (", ".join(failed) + " FAILED" if failed else "all ran, every training chapter on the GPU")
    )
    return 1 if suites_failed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
