"""The grader's feedback level: what its three report formats show students of a failure."""

import json

import pytest

from helpers import grade

REPORT = {
    "submission": "alice.ipynb",
    "score": 2,
    "max_score": 4,
    "errors": [],
    "exercises": [
        {
            "id": "lookup",
            "passed": True,
            "score": 2,
            "max_score": 2,
            "diagnosis": None,
            "message": "All probes passed.",
            "also": [],
            "hint": "",
            "fix": "",
        },
        {
            "id": "one_hot_lookup",
            "passed": False,
            "score": 0,
            "max_score": 2,
            "diagnosis": "transposed_weight",
            "message": "You read the table as (d_model, vocab).",
            "also": ["no_gradient: the output is cut off from the weight."],
            "hint": "HINT-TEXT: one row per token.",
            "fix": "FIX-TEXT: index rows, weight[ids].",
        },
    ],
}


@pytest.mark.parametrize("fmt", sorted(grade.RENDER))
@pytest.mark.parametrize(
    "feedback, shows", [("diagnosis", set()), ("hint", {"HINT-TEXT"}), ("fix", {"HINT-TEXT", "FIX-TEXT"})]
)
def test_each_format_shows_what_the_feedback_level_allows(fmt, feedback, shows):
    text = grade.RENDER[fmt][1](grade.for_students(REPORT, feedback))
    assert (
        "transposed_weight" in text and "You read the table" in text and "no_gradient" in text
    )  # the diagnosis, always
    assert {marker for marker in ("HINT-TEXT", "FIX-TEXT") if marker in text} == shows


def test_the_report_itself_is_untouched():
    before = json.dumps(REPORT, sort_keys=True)
    grade.for_students(REPORT, "diagnosis")
    assert json.dumps(REPORT, sort_keys=True) == before
