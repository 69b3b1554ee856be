"""What the grader decides and writes without a kernel (issue 45): the assignment (one vote per student), reports
bounded before they leave the worker, every export escaped for where it is shown and saying what is best effort."""

from __future__ import annotations

import csv
import io
import json

import pytest

from helpers import export, grade
from helpers.grading.reports import MAX_MESSAGE, MAX_NOTES, bounded, report_gradescope, summarize, summary_csv
from tests.grading_support import HEAD, RIGHT_LOOKUP, RIGHT_ONE_HOT, RIGHT_SCALE, write_notebook

HOSTILE = "ev\x1b[2J\x1b]0;owned\x07il \u202egnp.exe\u202c <b>bold</b>"


def test_one_students_copies_of_a_solution_do_not_decide_the_classs_chapter(tmp_path):
    """Three copies of a chapter 01 solution in one student's folder (and three in the class folder, byte for byte)
    are one vote each: the two classmates who did chapter 02 decide, and are graded for it."""
    cells = [HEAD, RIGHT_LOOKUP, RIGHT_ONE_HOT]
    (tmp_path / "mallory").mkdir()
    for i in range(3):
        write_notebook(tmp_path / "mallory" / f"copy{i}.ipynb", cells)
        write_notebook(tmp_path / f"public{i}.ipynb", cells)
    for name in ("alice", "bob", "carol"):  # their own code: two of the same code would be one vote
        write_notebook(tmp_path / f"{name}.ipynb", [HEAD, f"{RIGHT_SCALE}  # {name}'s"])
    found, _ = grade.collect([str(tmp_path)])
    assert len(found) == 9
    assert grade.class_chapters(found, grade.exercise_table()) == {2}
    assert all(f.notes for f in found if f.path.stem.startswith(("copy", "public")))


def test_a_gradescope_autograder_carries_its_chapters(tmp_path):
    with pytest.raises(ValueError, match="name its chapters"):
        export.build_gradescope_zip(tmp_path / "autograder.zip")
    with pytest.raises(SystemExit):
        export.main(["gradescope", str(tmp_path / "autograder.zip")])


def huge_report() -> dict:
    """A report as a hostile notebook can make it: 100,000 long names in one message, 100,000 failing cells."""
    names = ", ".join(f"`layer.{'x' * 200}.{i}`" for i in range(100_000))
    exercise = {"id": "lookup", "passed": False, "score": 0, "max_score": 2, "diagnosis": "raised",
                "message": f"load_state_dict fails: {names}", "also": [names] * 1000, "hint": "", "fix": ""}  # fmt: skip
    long_message = "x" * 10_000  # one string, 100,000 references: the test's own memory stays small
    errors = [{"cell": i, "type": "ZeroDivisionError", "message": long_message} for i in range(100_000)]
    return {"submission": "a.ipynb", "score": 0, "max_score": 2, "exercises": [exercise], "errors": errors,
            "warnings": [], "flag": None, "chapters": [1], "graded": True, "seconds": 1.0, "timings": {}}  # fmt: skip


def test_a_report_is_bounded_as_a_whole_before_it_travels():
    report = bounded(huge_report())
    assert len(json.dumps(report)) < 3 * 2**20
    ex = report["exercises"][0]
    assert len(ex["message"]) == MAX_MESSAGE and ex["message"].endswith("…")
    assert len(ex["also"]) == MAX_NOTES + 1 and ex["also"][-1] == "... and 800 more"
    assert len(report["errors"]) == MAX_NOTES + 1 and "99800 more" in report["errors"][-1]["message"]


@pytest.mark.parametrize("length", [MAX_MESSAGE - 1, MAX_MESSAGE, MAX_MESSAGE + 1, 10 * MAX_MESSAGE])
def test_a_message_is_cut_as_if_cleaned_whole(length):
    """`bounded` cuts before it cleans (its work bounded by what it keeps): what it shows is what cleaning the
    whole text and then cutting it would show, escapes and lone surrogates included."""
    from helpers.grading.escape import clean

    message = ("ab\x1b[2J\ud800\udcff\u202e" * length)[:length]  # \udcff is shown as \\xff: longer
    whole = clean(message)
    expected = whole[: MAX_MESSAGE - 1] + "…" if len(whole) > MAX_MESSAGE else whole
    assert bounded(report_with(message))["exercises"][0]["message"] == expected


def report_with(message: str, best_effort: str | None = None) -> dict:
    exercise = {"id": "lookup", "passed": True, "score": 2, "max_score": 2, "diagnosis": None, "message": message,
                "also": [], "hint": "", "fix": ""}  # fmt: skip
    if best_effort:
        exercise["best_effort"] = best_effort
    return {"submission": HOSTILE, "score": 2, "max_score": 2, "exercises": [exercise],
            "errors": [{"cell": 3, "type": "E", "message": HOSTILE}], "warnings": [], "flag": None, "chapters": [1],
            "graded": True, "seconds": 1.0, "timings": {}}  # fmt: skip


def test_the_gradescope_export_is_escaped_and_says_what_is_best_effort():
    results = json.loads(report_gradescope(report_with(HOSTILE, "that it calls none of the forbidden functions")))
    shown = [results["output"], *(t["output"] for t in results["tests"])]
    for text in shown:
        assert not any(c in text for c in "\x1b\x07\u202e\u202c"), text
    assert results["output_format"] == "text" and all(t["output_format"] == "text" for t in results["tests"])
    assert "Best effort: that it calls none of the forbidden functions" in results["tests"][0]["output"]


def test_the_csv_says_which_verdicts_are_best_effort():
    reports = [report_with("ok", "autograd"), {**report_with("ok"), "submission": "=cmd|' /C calc'!A0"}]
    rows = list(csv.reader(io.StringIO(summary_csv(summarize(reports)))))
    assert rows[0][-1] == "best_effort" and rows[1][-1] == "lookup" and rows[2][-1] == ""
    assert rows[2][0].startswith("'=")  # a formula stays text
    assert "\x1b" not in rows[1][0] and "\u202e" not in rows[1][0]
