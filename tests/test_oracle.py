"""The library as a second oracle (helpers/exercises/oracle.py).

tests/test_checks.py runs the catalogue: right code passes the oracle too, and
the wrong code in tests/submissions that only a real model exposes gets
library_mismatch or library_raised. Here: the oracle alone, with the direct
probes bypassed, names the model for a mistake they would have caught first
(so every exercise's oracle is shown to fail, not only to pass); and a
transformers that lacks something makes it skip, said in one line, never crash.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from helpers import check, checking, exercises, library
from helpers.exercises import get, oracle
from helpers.library import LibraryUnavailable
from helpers.probe import Probe
from helpers.safety import Failure
from tests.submissions import ch02, ch04, ch05, ch06

# exercise -> (a right submission, a wrong one the direct probes catch first); the oracle is the exercise's own
ORACLES = {
    "RotaryEmbedding": (ch05.RotaryCached, ch05.RotaryMinusSin),
    "apply_rope": (ch05.apply_rope_hf, ch05.apply_rope_minus_sin),
    "apply_partial_rope": (ch05.partial_neox, ch05.partial_tiles_tables),
    "rope_interleaved": (ch05.interleaved_gptj, ch05.interleaved_conjugate),
    "rope_from_shift_matrix": (ch05.shift_rope_einsum, ch05.shift_rope_matrix_times_column),
    "alibi_slopes": (ch06.RIGHT["alibi_slopes"][0], ch06.slopes_negative),
    "alibi_bias": (ch06.RIGHT["alibi_bias"][0], ch06.bias_plus_sign),
    "LearnedPositionalEmbedding": (ch04.RIGHT["LearnedPositionalEmbedding"][0], ch04.LearnedStartsAtOne),
    "TiedLMHead": (ch02.RIGHT["TiedLMHead"][0], ch02.Softmaxed),
}
MODEL = {
    "RotaryEmbedding": "Llama",
    "apply_rope": "Llama",
    "apply_partial_rope": "GPT-NeoX",
    "rope_interleaved": "GPT-J",
    "rope_from_shift_matrix": "GPT-J",
}


def run_oracle(exercise_id: str, submission) -> Failure | None:
    probe = Probe(get(exercise_id), submission.__name__, torch.device("cpu"))  # the CPU pass, where the oracle runs
    try:
        get(exercise_id).oracle(probe, submission)
    except Failure as failure:
        return failure
    return None


@pytest.mark.parametrize("exercise_id", ORACLES)
def test_the_oracle_alone_names_the_model(exercise_id):
    """Direct probes bypassed: the wrong code gets library_mismatch, with the model's name; the right code nothing."""
    right, wrong = ORACLES[exercise_id]
    assert run_oracle(exercise_id, right) is None
    failure = run_oracle(exercise_id, wrong)
    assert failure is not None and failure.code == "library_mismatch", failure
    family = MODEL.get(exercise_id, "BLOOM" if exercise_id.startswith("alibi") else "GPT-2")
    assert f"Inside transformers' {family}" in failure.message and failure.hint and failure.fix


def test_every_exercise_with_a_model_as_its_oracle_is_tested_here():
    """Chapter 7's oracles, transformers' own RoPE functions, are tested in tests/test_long_context.py."""
    declared = {e.id for e in exercises.all_exercises().values() if e.oracle is not None and e.chapter != 7}
    assert declared == set(ORACLES)


def test_every_check_with_an_oracle_runs_it(monkeypatch):
    """Each of these checks reaches its oracle, after the direct probes, and only then."""
    ran = []
    monkeypatch.setattr(oracle, "inside", lambda probe, *args, **kwargs: ran.append(probe.exercise.id))
    for exercise_id, (right, wrong) in ORACLES.items():
        assert check(exercise_id, right).passed
        assert not check(exercise_id, wrong).passed
    assert ran == list(ORACLES)  # once per right submission, never for the wrong ones


def test_the_declared_oracle_runs_once_after_the_check_and_not_in_the_device_pass(monkeypatch):
    ran = []
    spied = dataclasses.replace(get("lookup"), oracle=lambda probe, fn: ran.append((probe.exercise.id, fn)))
    monkeypatch.setattr(exercises, "get", lambda exercise_id: spied)
    right = lambda weight, ids: weight[ids]
    assert check("lookup", right).passed and not check("lookup", lambda weight, ids: weight.T[ids]).passed
    assert ran == [("lookup", right)]
    checking.on_device(spied, right, "right", torch.device("cpu"))  # what a GPU's second pass runs
    assert ran == [("lookup", right)]


def unavailable(*args, **kwargs):
    raise LibraryUnavailable("transformers 0.0 has no transformers.models.llama (a test's stand-in)")


@pytest.mark.parametrize("where", ["their_logits", "the swap"])
@pytest.mark.parametrize("exercise_id", ORACLES)
def test_a_library_that_lacks_something_is_skipped_in_one_line(monkeypatch, exercise_id, where):
    if where == "their_logits":
        monkeypatch.setattr(oracle, "their_logits", unavailable)
    else:  # the model layout moved: what library's lookups raise when a module or attribute is missing
        oracle.their_logits(oracle.LLAMA), oracle.batch(oracle.LLAMA)  # cached before the library breaks
        monkeypatch.setattr(library, "library_attr", unavailable)
        monkeypatch.setattr(library, "_path", unavailable)
    right, wrong = ORACLES[exercise_id]
    result = check(exercise_id, right)
    assert result.passed, str(result)
    skipped = [line for line in result.message.split("(") if "was skipped" in line]
    assert len(skipped) == 1 and "\n" not in result.message and "a test's stand-in" in result.message
    assert check(exercise_id, wrong).diagnosis != "library_mismatch"  # the direct probes still decide


def test_a_pass_with_the_oracle_says_nothing_more():
    result = check("apply_rope", ch05.apply_rope_hf)
    assert result.passed and result.message == "All probes passed: shapes, dtypes, devices, values and properties."


def test_the_students_code_meets_the_model_on_the_cpu(monkeypatch):
    """The tiny models live on the CPU: whatever probe.device is, the oracle feeds them CPU tensors."""
    devices = []

    def rotate(q, k, cos, sin, positions=None):
        devices.extend({q.device.type, k.device.type, cos.device.type, positions.device.type})
        return ch05.apply_rope_hf(q, k, cos, sin, positions)

    monkeypatch.setattr(checking, "check_device", lambda: torch.device("meta"))
    assert run_oracle("apply_rope", rotate) is None
    assert set(devices) == {"cpu"}
