"""The checkers, tested against a catalogue of right and wrong code.

Every correct implementation in tests/submissions must pass; every wrong one
must fail with exactly its diagnosis code, and a message that names the
student's function or tells them what to do."""

import re

import pytest

from helpers import check, checking
from helpers.exercises import all_exercises
from helpers.registry import DIAGNOSES
from tests.conftest import submission_modules

RIGHT = [(ex, fn) for m in submission_modules() for ex, fns in m.RIGHT.items() for fn in fns]
WRONG = [case for m in submission_modules() for case in m.WRONG]
ALSO = [case for m in submission_modules() for case in getattr(m, "ALSO", [])]


@pytest.mark.parametrize("exercise, fn", RIGHT, ids=[f"{ex}-{fn.__name__}" for ex, fn in RIGHT])
def test_correct_code_passes(exercise, fn):
    result = check(exercise, fn)
    assert result.passed, str(result)
    assert result.diagnosis is None and result.score == result.max_score > 0


@pytest.mark.parametrize("exercise, code, fn", WRONG, ids=[f"{ex}-{code}-{fn.__name__}" for ex, code, fn in WRONG])
def test_wrong_code_gets_its_diagnosis(exercise, code, fn):
    result = check(exercise, fn)
    assert not result.passed
    assert (result.diagnosis, result.score) == (code, 0), str(result)
    assert len(result.message) > 20


@pytest.mark.parametrize("exercise, code, also, fn", ALSO, ids=[f"{ex}-{code}-{also}-{fn.__name__}" for ex, code, also, fn in ALSO])
def test_secondary_findings_are_listed(exercise, code, also, fn):
    """Two independent mistakes: the first is the diagnosis, the other is listed in result.also."""
    result = check(exercise, fn)
    assert result.diagnosis == code, str(result)
    assert any(finding.startswith(also) for finding in result.also), str(result)


def code_spans(text: str) -> set[str]:
    return {span for span in re.findall(r"`([^`]+)`", text) if len(span) > 12}


@pytest.mark.parametrize("exercise, code, fn", WRONG, ids=[f"{ex}-{code}-{fn.__name__}" for ex, code, fn in WRONG])
def test_every_failure_stages_its_help(exercise, code, fn):
    """The message says what is wrong; the hint gives the idea; the fix the change. Never the fix in the message."""
    result = check(exercise, fn)
    assert len(result.hint) > 20 and len(result.fix) > 20, f"{exercise}/{code}: no hint or no fix\n{result}"
    assert result.hint != result.fix and result.fix not in result.message and result.hint not in result.message
    assert not code_spans(result.fix) & code_spans(result.message), f"{exercise}/{code}: the message gives the fix away\n{result}"


def test_every_diagnosis_code_has_wrong_code_that_gets_it():
    covered = {code for _, code, _ in WRONG}
    assert set(DIAGNOSES) - covered == set()


def test_every_declared_mistake_is_diagnosed_in_its_own_exercise():
    """A mistake declared with an exercise must name some real wrong code: else it is dead, or never reached."""
    wrong = {(exercise, code) for exercise, code, _ in WRONG}
    undiagnosed = [f"{e.id}: {code}" for e in all_exercises().values() for code in e.mistakes if (e.id, code) not in wrong]
    assert undiagnosed == []


def test_every_exercise_runs_a_device_pass_or_says_why(monkeypatch):
    """Code that makes a tensor on the CPU passes on a CPU-only machine and breaks on a GPU:
    only a device pass sees it there. An exercise without tensors to follow says why it needs none."""
    ran = []
    device_pass = checking.Probe.device_pass
    monkeypatch.setattr(checking.Probe, "device_pass", lambda probe, *args, **kwargs: (ran.append(probe.exercise.id), device_pass(probe, *args, **kwargs))[1])
    for exercise in all_exercises().values():
        right = next(fn for ex, fn in RIGHT if ex == exercise.id)
        assert check(exercise.id, right).passed
        assert (exercise.id in ran) != bool(exercise.no_device_pass), f"{exercise.id}: a device pass, or a reason in no_device_pass (not both)"


def test_every_exercise_has_two_different_correct_implementations():
    for exercise in all_exercises():
        passing = {fn for ex, fn in RIGHT if ex == exercise}
        assert len(passing) >= 2, f"{exercise} has {len(passing)} correct implementations in tests/submissions"
