"""`python -m helpers.grade`: the grader's command, kept under its old name. The grader is the
package helpers.grading (one concern per module); these are the names its users import."""

import os
import sys

from helpers.grading.__main__ import main, parse_chapters
from helpers.grading.batch import grade_many, grade_notebook, grade_notebook_async
from helpers.grading.collect import Found, class_chapters, collect, detect_chapters, read_submission, report_names
from helpers.grading.limits import FILE_MB, PROCESS_LIMIT
from helpers.grading.reports import (
    RENDER,
    for_students,
    report_gradescope,
    report_markdown,
    summarize,
    summary_csv,
    summary_markdown,
    summary_text,
)
from helpers.grading.sandbox import PACKAGE_DIR, Scratch, bwrap_command, sandbox_problem
from helpers.grading.submission import ExerciseInfo, Submission, exercise_table

__all__ = [
    "FILE_MB", "PACKAGE_DIR", "PROCESS_LIMIT", "RENDER", "ExerciseInfo", "Found", "Scratch", "Submission", "bwrap_command",
    "class_chapters", "collect", "detect_chapters", "exercise_table", "for_students", "grade_many", "grade_notebook", "grade_notebook_async",
    "main", "parse_chapters", "read_submission", "report_gradescope", "report_markdown", "report_names", "sandbox_problem",
    "summarize", "summary_csv", "summary_markdown", "summary_text",
]  # fmt: skip

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Every report and summary is written and closed: what is left is tearing down torch and the catalogue's
    # modules, 1-2 s of an instructor's wait that saves nothing.
    os._exit(code)
