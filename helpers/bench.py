"""The budgets of COURSE.md, measured on this machine (a benchmark, never a test).

    python -m helpers.bench                  # everything, as a table
    python -m helpers.bench --json out.json  # also write the figures as JSON
    python -m helpers.bench --quick          # skip executing the notebooks

Measures: `import helpers` beyond torch; the median time of one check() of a
correct submission per exercise (the reference itself), and its first call;
the execution time of every solution notebook; and grading vs executing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"import_s": 0.3, "check_median_s": 0.5, "bert_first_check_s": 5.0, "notebook_s": 20.0, "notebook_06_s": 60.0, "grade_ratio": 1.3}


def import_seconds(repeats: int = 5) -> float:
    """Median time of `import helpers` in a fresh interpreter that has already imported torch."""

    def timed() -> float:
        code = "import torch, time; t = time.perf_counter(); import helpers; print(time.perf_counter() - t)"
        return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip())

    timed()  # warm the file cache
    return statistics.median(timed() for _ in range(repeats))


def check_seconds(repeats: int = 7) -> dict[str, dict[str, float]]:
    from helpers import check
    from helpers.exercises import all_exercises

    figures = {}
    for exercise_id, exercise in all_exercises().items():
        start = time.perf_counter()
        first = check(exercise_id, exercise.reference)
        first_s = time.perf_counter() - start
        assert first.passed, f"the reference fails its own check: {first}"
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            check(exercise_id, exercise.reference)
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


def grading_ratio() -> dict[str, float] | None:
    try:
        from helpers import grade
    except ImportError:
        return None
    measure = getattr(grade, "measure_overhead", None)
    return measure(ROOT / "solutions" / "01_lookup_tables.ipynb") if measure else None


def verdict(value: float, budget: float) -> str:
    return "ok" if value <= budget else "OVER BUDGET"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="skip executing notebooks and grading")
    args = parser.parse_args(argv)

    import torch

    from helpers.checking import check_device

    report: dict = {"machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, checks on {check_device()}", "budgets": BUDGETS}
    report["import_s"] = import_seconds()
    report["checks"] = check_seconds()
    if not args.quick:
        report["notebooks_s"] = notebook_seconds()
        report["grading"] = grading_ratio()

    rows = [("import helpers beyond torch", f"{report['import_s']:.3f} s", f"≤ {BUDGETS['import_s']} s", verdict(report["import_s"], BUDGETS["import_s"]))]
    for exercise_id, figures in report["checks"].items():
        ok = verdict(figures["median_s"], BUDGETS["check_median_s"])
        if exercise_id == "BertEmbeddings" and figures["first_s"] > BUDGETS["bert_first_check_s"]:
            ok = "FIRST CALL OVER BUDGET"
        rows.append((f"check {exercise_id}", f"{figures['median_s']:.3f} s median (first {figures['first_s']:.2f} s)", f"≤ {BUDGETS['check_median_s']} s", ok))
    for name, seconds in report.get("notebooks_s", {}).items():
        budget = BUDGETS["notebook_06_s"] if name.startswith("06") else BUDGETS["notebook_s"]
        rows.append((f"execute solutions/{name}", f"{seconds:.1f} s", f"≤ {budget:g} s", verdict(seconds, budget)))
    if report.get("grading"):
        ratio = report["grading"]["ratio"]
        rows.append(("grading vs executing", f"{ratio:.2f}×", f"≤ {BUDGETS['grade_ratio']}×", verdict(ratio, BUDGETS["grade_ratio"])))
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
