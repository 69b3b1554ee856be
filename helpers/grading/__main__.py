"""python -m helpers.grading (or python -m helpers.grade): grade a class's notebooks. See the README."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from helpers.grading import __doc__ as DESCRIPTION
from helpers.grading.batch import grade_many
from helpers.grading.collect import collect
from helpers.grading.limits import CELL_TIMEOUT, NOTEBOOK_TIMEOUT
from helpers.grading.reports import FEEDBACK, FORMATS, summarize, summary_text
from helpers.grading.sandbox import sandbox_problem
from helpers.grading.submission import exercise_table


def parse_chapters(values: list[str] | None) -> set[int] | None:
    if not values:
        return None
    parts = [p for v in values for p in v.split(",") if p.strip()]
    if any(p.strip().lower() == "all" for p in parts):
        return {e.chapter for e in exercise_table()}
    return {int(p) for p in parts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.grade", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("submissions", nargs="+", help="notebooks, or folders searched recursively for *.ipynb")
    parser.add_argument(
        "--out", default="grades", help="folder for the reports and the class summary (default: grades)"
    )
    parser.add_argument(
        "--format", default="json", choices=FORMATS, help="per-submission report format (default: json)"
    )
    parser.add_argument(
        "--feedback",
        default="hint",
        choices=FEEDBACK,
        help="what each report shows of a failure: the diagnosis only, or also the hint, or also the fix (default: hint)",
    )
    parser.add_argument(
        "--timeout", type=float, default=CELL_TIMEOUT, help=f"seconds per cell (default: {CELL_TIMEOUT:g})"
    )
    parser.add_argument(
        "--notebook-timeout",
        type=float,
        default=NOTEBOOK_TIMEOUT,
        help=f"seconds for a whole notebook, cells and checks (default: {NOTEBOOK_TIMEOUT:g})",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="notebooks executing at once (default: 1); up to 2N sandboxes alive, each on cores of its own, "
        "the next one starting while one executes",
    )
    parser.add_argument(
        "--chapter",
        action="append",
        help="grade these chapters' exercises, e.g. 01 or 01,02 or all (default: detected per notebook)",
    )
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=0,
        help="cap each kernel's memory, hard (RLIMIT_DATA; CPU-only machines); default: no cap",
    )
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run kernels without the sandbox: only for notebooks you trust, or inside a container of their own",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        submissions, skipped = collect(args.submissions, exclude=out)
        chapters = parse_chapters(args.chapter)
    except (FileNotFoundError, ValueError) as error:
        print(f"grade: no such submission or bad --chapter: {error}", file=sys.stderr)
        return 2
    if not submissions:
        print("grade: no notebooks found", file=sys.stderr)
        return 2
    if not args.no_sandbox and sandbox_problem():
        print(f"grade: {sandbox_problem()}", file=sys.stderr)
        return 2
    reports = asyncio.run(
        grade_many(
            submissions,
            out,
            fmt=args.format,
            feedback=args.feedback,
            jobs=args.jobs,
            chapters=chapters,
            cell_timeout=args.timeout,
            notebook_timeout=args.notebook_timeout,
            memory_mb=args.memory_mb,
            sandbox=not args.no_sandbox,
            skipped=skipped,
            progress=not args.quiet,
        )
    )
    if not args.quiet:
        print(summary_text(summarize(reports, skipped)), end="")
        print(f"reports in {out}/ (summary.md, summary.csv, summary.json)")
    return 0 if all(r["graded"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
