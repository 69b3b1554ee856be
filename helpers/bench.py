"""The course's budgets (README, "Benchmark"), measured on this machine (a benchmark, never a test).

    python -m helpers.bench                  # everything, as a table
    python -m helpers.bench --json out.json  # also write the figures as JSON
    python -m helpers.bench --quick          # skip executing the notebooks
    python -m helpers.bench --grading        # only grading: its overhead and the sandbox's cost

Measures: `import helpers` beyond torch; the median time of one check() of a
correct submission per exercise (the reference, compiled again as a student's
own copy), and its first call; the execution time of every solution notebook;
grading vs executing; and what the sandbox costs: the six solution notebooks
graded with and without it, --jobs 1 and 2, in this one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {
    "import_s": 0.3,
    "check_median_s": 0.5,
    "bert_first_check_s": 5.0,
    "notebook_s": 20.0,
    "notebook_06_s": 60.0,
    "notebook_07_s": 180.0,
    "grade_ratio": 1.3,
    "sandbox_ratio": 1.1,
}


def import_seconds(repeats: int = 5) -> float:
    """Median time of `import helpers` in a fresh interpreter that has already imported torch."""

    def timed() -> float:
        code = "import torch, time; t = time.perf_counter(); import helpers; print(time.perf_counter() - t)"
        return float(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        )

    timed()  # warm the file cache
    return statistics.median(timed() for _ in range(repeats))


def reference_copies() -> dict[str, Any]:
    """The references compiled again under another file name: what a student who wrote exactly
    the reference submits (checking `helpers.reference` itself fails with uses_reference)."""
    from helpers import reference

    copies: dict[str, Any] = {"__name__": "bench_reference"}
    source = Path(reference.__file__).read_text(encoding="utf-8")
    exec(compile(source, "<a copy of helpers/reference.py>", "exec"), copies)
    return copies


def check_seconds(repeats: int = 7) -> dict[str, dict[str, float]]:
    from helpers import check
    from helpers.exercises import all_exercises

    copies = reference_copies()
    figures = {}
    for exercise_id, exercise in all_exercises().items():
        submission = copies[exercise.reference.__name__]
        start = time.perf_counter()
        first = check(exercise_id, submission)
        first_s = time.perf_counter() - start
        assert first.passed, f"the reference fails its own check: {first}"
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            check(exercise_id, submission)
            times.append(time.perf_counter() - start)
        figures[exercise_id] = {"first_s": first_s, "median_s": statistics.median(times)}
    return figures


def notebook_seconds() -> dict[str, float]:
    import jupytext

    from helpers.release import SOLUTIONS, execute

    figures = {}
    for path in sorted(SOLUTIONS.glob("[0-9][0-9]_*.md")):
        notebook = jupytext.read(path)
        start = time.perf_counter()
        execute(notebook, cwd=SOLUTIONS)
        figures[path.stem] = time.perf_counter() - start
    return figures


OVERHEAD_BUDGET = 1.0  # grading over plain execution of the same notebook, --jobs 1 (shared/COURSE.md)


def execute_plainly(path: str | Path, timeout: float = 600.0) -> float:
    """Seconds to execute a notebook top to bottom with nbclient (kernel start included), as a
    teacher would without the grader: same Python, same environment, errors allowed, no sandbox."""
    import nbclient
    import nbformat

    notebook = nbformat.reads(Path(path).read_bytes().decode("utf-8"), as_version=4)
    cwd = tempfile.mkdtemp(prefix="plain-")
    try:
        started = time.perf_counter()
        client = nbclient.NotebookClient(
            notebook,
            timeout=int(timeout),
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": cwd}},
        )
        from helpers.grading.kernel import kernel_env

        client.execute(env=kernel_env())
        return time.perf_counter() - started
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def measure_overhead(notebook: str | Path, repeats: int = 1, sandbox: bool = True) -> dict[str, Any]:
    """Grading time over plain execution time for one notebook (budget: 1.3x).
    With repeats > 1, the fastest of each is kept (the machine's noise is one-sided)."""
    plain, graded = [], []
    report: dict[str, Any] = {}
    for _ in range(max(1, repeats)):
        plain.append(execute_plainly(notebook))
        started = time.perf_counter()
        from helpers.grading.batch import grade_notebook

        report = grade_notebook(notebook, sandbox=sandbox)
        graded.append(time.perf_counter() - started)
    ratio = min(graded) / min(plain)
    return {
        "notebook": str(notebook),
        "sandbox": sandbox,
        "execute_s": round(min(plain), 2),
        "grade_s": round(min(graded), 2),
        "ratio": round(ratio, 3),
        "budget": OVERHEAD_BUDGET,
        "within_budget": ratio <= OVERHEAD_BUDGET,
        "score": report.get("score"),
        "max_score": report.get("max_score"),
        "timings": report.get("timings"),  # the last graded run: start, execute, grade (the checks alone)
    }


def grading_ratio() -> dict[str, Any]:
    return measure_overhead(ROOT / "solutions" / "01_lookup_tables.ipynb")


def sandbox_cost() -> dict[str, Any]:
    """The six solution notebooks graded with and without the sandbox, --jobs 1 (one notebook at
    a time) and --jobs 2 (two at a time, in pairs), and executed plainly. Each notebook, or pair,
    runs in the order plain, off, on, on, off, plain (plain: --jobs 1 only) and the fastest run of
    each kind counts: interleaved this finely, a machine whose load comes and goes favours none,
    and other work only ever adds time. Grading gives the same scores with the sandbox as without."""
    from helpers import grade

    def timed(kind: str, unit: list[grade.Found], jobs: int) -> tuple[float, tuple]:
        start = time.perf_counter()
        if kind == "plain":
            execute_plainly(unit[0].path)
            return time.perf_counter() - start, ()
        with tempfile.TemporaryDirectory() as out:
            reports = asyncio.run(grade.grade_many(unit, Path(out), jobs=jobs, sandbox=kind == "on", progress=False))
        return time.perf_counter() - start, tuple((r["submission"], r["score"], r["max_score"]) for r in reports)

    submissions, _ = grade.collect([str(p) for p in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))])
    figures: dict[str, Any] = {"notebooks": len(submissions)}
    for jobs, order in ((1, ("plain", "off", "on", "on", "off", "plain")), (2, ("off", "on", "on", "off"))):
        best = dict.fromkeys(order, 0.0)
        for unit in (submissions[i : i + jobs] for i in range(0, len(submissions), jobs)):
            runs = [(kind, *timed(kind, unit, jobs)) for kind in order]
            assert len({scores for kind, _, scores in runs if kind != "plain"}) == 1, (
                f"the sandbox changed the scores: {runs}"
            )
            for kind in best:
                best[kind] += min(seconds for k, seconds, _ in runs if k == kind)
        figures[f"jobs{jobs}"] = {
            "unsandboxed_s": best["off"],
            "sandboxed_s": best["on"],
            "ratio": best["on"] / best["off"],
        }
        if jobs == 1:
            figures["execute_s"] = best["plain"]
            figures["grade_vs_execute"] = best["on"] / best["plain"]
    return figures


def verdict(value: float, budget: float) -> str:
    return "ok" if value <= budget else "OVER BUDGET"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="skip executing notebooks and grading")
    parser.add_argument("--grading", action="store_true", help="only grading: its overhead and what the sandbox costs")
    args = parser.parse_args(argv)

    import torch

    from helpers.probe import check_device

    report: dict = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, checks on {check_device()}",
        "budgets": BUDGETS,
    }
    if not args.grading:
        report["import_s"] = import_seconds()
        report["checks"] = check_seconds()
    if not args.quick:
        report["notebooks_s"] = {} if args.grading else notebook_seconds()
        report["grading"] = grading_ratio()
        report["sandbox"] = sandbox_cost()

    rows = []
    if "import_s" in report:
        rows.append(
            (
                "import helpers beyond torch",
                f"{report['import_s']:.3f} s",
                f"≤ {BUDGETS['import_s']} s",
                verdict(report["import_s"], BUDGETS["import_s"]),
            )
        )
    for exercise_id, figures in report.get("checks", {}).items():
        ok = verdict(figures["median_s"], BUDGETS["check_median_s"])
        if exercise_id == "BertEmbeddings" and figures["first_s"] > BUDGETS["bert_first_check_s"]:
            ok = "FIRST CALL OVER BUDGET"
        rows.append(
            (
                f"check {exercise_id}",
                f"{figures['median_s']:.3f} s median (first {figures['first_s']:.2f} s)",
                f"≤ {BUDGETS['check_median_s']} s",
                ok,
            )
        )
    for name, seconds in report.get("notebooks_s", {}).items():
        budget = {"06": BUDGETS["notebook_06_s"], "07": BUDGETS["notebook_07_s"]}.get(
            name[:2], BUDGETS["notebook_s"]
        )  # the chapters that train models
        rows.append((f"execute solutions/{name}", f"{seconds:.1f} s", f"≤ {budget:g} s", verdict(seconds, budget)))
    if report.get("grading"):
        ratio = report["grading"]["ratio"]
        rows.append(
            (
                "grading vs executing",
                f"{ratio:.2f}×",
                f"≤ {BUDGETS['grade_ratio']}×",
                verdict(ratio, BUDGETS["grade_ratio"]),
            )
        )
    if report.get("sandbox"):
        sandbox = report["sandbox"]
        for jobs in (1, 2):
            figures = sandbox[f"jobs{jobs}"]
            measured = f"{figures['sandboxed_s']:.1f} s / {figures['unsandboxed_s']:.1f} s = {figures['ratio']:.3f}×"
            rows.append(
                (
                    f"grading 6 notebooks --jobs {jobs}, sandboxed / not",
                    measured,
                    f"≤ {BUDGETS['sandbox_ratio']}×",
                    verdict(figures["ratio"], BUDGETS["sandbox_ratio"]),
                )
            )
        measured = f"{sandbox['jobs1']['sandboxed_s']:.1f} s / {sandbox['execute_s']:.1f} s = {sandbox['grade_vs_execute']:.2f}×"
        rows.append(
            (
                "grading 6 notebooks (sandboxed) / executing them",
                measured,
                "< 1×",
                verdict(sandbox["grade_vs_execute"], 1.0),
            )
        )
    width = max(len(r[0]) for r in rows)
    print(f"Machine: {report['machine']}\n")
    print(f"| {'what'.ljust(width)} | measured | budget | verdict |\n|{'-' * (width + 2)}|---|---|---|")
    for what, measured, budget, ok in rows:
        print(f"| {what.ljust(width)} | {measured} | {budget} | {ok} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
