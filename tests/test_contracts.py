"""Contracts and their axes (helpers/contracts.py, issue 41): every exercise declares a contract and walks
every axis it admits, each axis can fail, and every code an axis gives has two or more wrong submissions of
its own.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from helpers import check, contracts
from helpers.exercises import all_exercises, get
from helpers.probe import Probe
from tests.conftest import checked_with, submission_modules
from tests.test_remote import CASES as THROUGH_THE_GRADER
from tests.test_remote import graded

ROOT = Path(__file__).resolve().parent.parent
RIGHT = [(ex, fn) for m in submission_modules() for ex, fns in m.RIGHT.items() for fn in fns]
WRONG = [case for m in submission_modules() for case in m.WRONG]

AXIS_CODES = (  # what the axes diagnose (registry.DIAGNOSES' block for helpers/contracts.py)
    "squeezed_size_one",
    "contiguity_assumed",
    "gradient_cut",
    "fixed_dtype",
    "precision_lost",
    "default_changed",
    "size_from_ids",
)


def walked(monkeypatch, exercise_id: str, submission) -> tuple[set[str], object]:
    """The axes a check of `submission` walked to the end, and its result."""
    probe, result = checked_with(monkeypatch, exercise_id, submission)
    return probe.axes_walked, result


def test_every_exercise_declares_its_contract():
    assert [e.id for e in all_exercises().values() if e.contract is None] == []


@pytest.mark.parametrize("exercise", list(all_exercises()))
def test_every_axis_a_contract_admits_is_walked(monkeypatch, exercise):
    """Every right submission of the exercise passes; the first walks every axis its contract admits."""
    right = [fn for ex, fn in RIGHT if ex == exercise]
    axes, result = walked(monkeypatch, exercise, right[0])
    assert result.passed, str(result)
    assert set(contracts.applicable(get(exercise).contract)) - axes == set()


def test_the_walk_test_fails_when_an_axis_is_not_walked(monkeypatch):
    """The test above can fail: an axis that returns without comparing anything is not walked."""
    right = next(fn for ex, fn in RIGHT if ex == "embedding_backward")
    with monkeypatch.context() as patch:
        patch.setitem(contracts.AXES, "rows", dataclasses.replace(contracts.AXES["rows"], walk=lambda *args: None))
        axes, result = walked(monkeypatch, "embedding_backward", right)
    assert result.passed and "rows" in contracts.applicable(get("embedding_backward").contract) and "rows" not in axes


def test_an_axis_applies_by_the_contract_alone():
    """No list of exercises: what a contract declares decides the axes, and not_walked says why one is left out."""
    table = contracts.Arg("table", "V d", dtypes=contracts.FLOATS, grad=True)
    ids = contracts.Arg("ids", "...", bound="V")
    bare = contracts.Contract(
        args={"weight": contracts.Arg("table", "V d"), "ids": ids}, result=contracts.Result("... d")
    )
    assert contracts.applicable(bare) == ["views"]
    full = dataclasses.replace(bare, args={"weight": table, "ids": ids}, ones="B T")
    assert contracts.applicable(full) == ["ones", "views", "dtypes", "gradient"]
    assert contracts.applicable(dataclasses.replace(full, not_walked={"dtypes": "why"})) == [
        "ones",
        "views",
        "gradient",
    ]
    with pytest.raises(ValueError, match="unknown axes"):
        dataclasses.replace(full, not_walked={"sideways": "no such axis"})


@pytest.mark.parametrize("code", AXIS_CODES)
def test_every_axis_code_has_two_different_wrong_submissions(code):
    wrong = {fn for _, got, fn in WRONG if got == code}
    assert len(wrong) >= 2, f"{code}: {len(wrong)} wrong submission(s) in tests/submissions"


def test_axis_codes_are_documented():
    from helpers.registry import DIAGNOSES, GENERIC_ADVICE

    assert set(AXIS_CODES) <= set(DIAGNOSES)
    assert {"squeezed_size_one", "contiguity_assumed", "gradient_cut", "fixed_dtype", "precision_lost"} <= set(
        GENERIC_ADVICE
    )


def test_noncontiguous_views_keep_their_values():
    x = torch.arange(24.0).reshape(2, 3, 4)
    for t in (x, x[0, 0], torch.arange(5)):
        view = contracts.noncontiguous(t)
        assert torch.equal(view, t) and not view.is_contiguous()


def test_nothing_is_declared_outside_its_domain():
    """A number's values and default lie in its domain, so no axis calls outside it."""
    assert contracts.within(">= 1", 1) and not contracts.within(">= 1", 0.5)
    assert contracts.within("> 0 and < 1", 0.1) and not contracts.within("> 0 and < 1", 1)
    with pytest.raises(ValueError, match="outside the domain"):
        contracts.Arg("number", domain=">= 1", values=(4.0, 0.5))


@pytest.mark.parametrize(
    "exercise, code, fn",
    [case for case in WRONG if case[1] in AXIS_CODES and case not in THROUGH_THE_GRADER],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_the_grader_walks_the_axes_too(exercise, code, fn):
    """Through the grader (the submission in a kernel of its own, its objects stand-ins), every wrong
    submission of an axis gets the verdict and the words check() gives it in a notebook. The first of each
    code is tests/test_remote.py's case, with these very assertions: it is not graded twice."""
    remote = graded(fn, exercise)
    assert remote.diagnosis == code, str(remote)
    assert remote.message == check(exercise, fn).message


def exercise_docstring(text: str, exercise_id: str) -> str | None:
    """The docstring of the exercise's def or class in a chapter's markdown, its whitespace collapsed."""
    found = re.search(rf'(?ms)^(?:def|class) {exercise_id}\b.*?"""(.*?)"""', text)
    return " ".join(found.group(1).split()) if found else None


@pytest.mark.parametrize("folder", ["solutions", "chapters"])
def test_every_docstring_states_its_contract(folder):
    """What the student reads is what the axes probe: each exercise's docstring holds its contract's
    summary (helpers.contracts.summary) word for word, in the solution and in the chapter made from it."""
    missing = []
    for exercise in all_exercises().values():
        if exercise.contract is None:
            continue
        (path,) = (ROOT / folder).glob(f"{exercise.chapter:02d}_*.md")
        docstring = exercise_docstring(path.read_text(encoding="utf-8"), exercise.id)
        if docstring is None or contracts.summary(exercise.contract) not in docstring:
            missing.append(f"{path.name}: {exercise.id}")
    assert missing == [], "run the lines of helpers.contracts.summary into these docstrings: " + ", ".join(missing)


def test_views_whose_last_axis_stays_contiguous():
    """A domain of views with a contiguous last axis (view_as_complex refuses any other) gets such views."""
    for t in (torch.arange(24.0).reshape(2, 3, 4), torch.arange(12.0).reshape(3, 4)):
        view = contracts.noncontiguous(t, last_contiguous=True)
        assert torch.equal(view, t) and not view.is_contiguous() and view.stride(-1) == 1


def test_tuple_results_and_signed_ranges_are_stated():
    """Several results are said by name, a Python number as a float, a signed range as an open interval."""
    contract = contracts.Contract(
        args={"relative_position": contracts.Arg("relative", "Tq Tk", bound="R")},
        result=(contracts.Result("d/2", name="inv_freq"), contracts.Result("", float, name="attention_scale")),
        sizes={"Tq": 2, "Tk": 3, "R": 5},
    )
    said = contracts.summary(contract)
    assert "relative_position (Tq, Tk) int64 in (-R, R)" in said
    assert "Returns (inv_freq (d/2) in float32, attention_scale a float)." in said
    drawn = contracts.make_call(contract, Probe(get("t5_relative_bucket"), "x", torch.device("cpu")))
    assert int(drawn.inputs["relative_position"].min()) == -4 and int(drawn.inputs["relative_position"].max()) == 4


def test_the_interleaved_domain_leaves_out_a_strided_last_axis():
    """Meta's view_as_complex refuses a view whose last axis is strided: right code, so the contract excludes such
    views (last_contiguous) and the views axis hands it the views a model makes, heads transposed."""
    from tests.submissions.ch05 import interleaved_complex

    x = torch.randn(2, 3, 5, 8)
    assert get("rope_interleaved").contract.args["x"].last_contiguous
    with pytest.raises(RuntimeError, match="stride 1"):
        interleaved_complex(contracts.noncontiguous(x))
    kept = contracts.noncontiguous(x, last_contiguous=True)
    assert torch.allclose(interleaved_complex(kept), interleaved_complex(x))
