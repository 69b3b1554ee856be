"""The grader's results, declared once: an exercise's verdict, a submission's report, the class summary.

They are JSON as written (`reports.report_json`, summary.json), so they are TypedDicts: plain dicts to
json and to the worker's pipe, typed records to the code and to mypy. The keys' order here is their
order in every report.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class Verdict(TypedDict):
    """One exercise of one submission."""

    id: str
    passed: bool
    score: float
    max_score: float
    diagnosis: str | None
    message: str
    also: list[str]
    hint: NotRequired[str]  # a student's report leaves the help out above its feedback level (reports.for_students)
    fix: NotRequired[str]
    best_effort: NotRequired[str]  # what the verdict takes on the kernel's word (submission.kernel_said)


class CellError(TypedDict):
    """An error while running the notebook (cell None: the whole notebook's, or the grader's)."""

    cell: int | None
    type: str
    message: str


class Note(TypedDict):
    """Something for a person to look at (a suspicious cell, a chapter graded other than shown)."""

    cell: int | None
    message: str
    type: NotRequired[str]  # only the note that says how many more were cut (reports.bounded)


class Report(TypedDict):
    """One submission's report."""

    submission: str
    score: float
    max_score: float
    exercises: list[Verdict]
    errors: list[CellError]
    warnings: list[Note]
    flag: str | None  # why it is not graded as anyone's work (batch.NOT_GRADED), else None
    chapters: list[int]
    graded: bool  # False: the grader failed, not the student
    seconds: float
    timings: dict[str, float]


class Skipped(TypedDict):
    """A file found among the submissions that is not graded."""

    path: str
    reason: str


class StudentLine(TypedDict):
    """One submission in the class summary."""

    submission: str
    score: float
    max_score: float
    errors: int
    graded: bool
    flag: str | None
    exercises: dict[str, float]  # exercise id -> score
    best_effort: list[str]  # the exercises whose verdict rests on the kernel's word


class ExerciseLine(TypedDict):
    """One exercise in the class summary."""

    id: str
    max_score: float
    submissions: int
    passed: int
    diagnoses: dict[str | None, int]  # code -> how many, most common first
    pass_rate: float
    most_common_diagnosis: str | None
    most_common_count: int
    meaning: str


class Summary(TypedDict):
    submissions: int
    students: list[StudentLine]
    exercises: list[ExerciseLine]
    skipped: list[Skipped]


class GradescopeTest(TypedDict):
    """One exercise in Gradescope's results.json."""

    name: str
    score: float
    max_score: float
    status: str  # passed | failed
    output: str
    output_format: str
    visibility: NotRequired[str]  # helpers.export's autograder makes it "visible"


class GradescopeResults(TypedDict):
    """Gradescope's autograder results.json (reports.report_gradescope; helpers.export's run_autograder)."""

    score: float
    execution_time: NotRequired[float]
    output: str
    output_format: NotRequired[str]
    visibility: NotRequired[str]
    stdout_visibility: NotRequired[str]
    tests: list[GradescopeTest]
