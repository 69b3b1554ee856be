"""The checkers, tested against a catalogue of right and wrong code.

Every correct implementation in tests/submissions must pass; every wrong one
must fail with exactly its diagnosis code, and a message that names the
student's function or tells them what to do."""

import dataclasses
import functools
import inspect
import re

import pytest
import torch
from torch import nn

from helpers import check
from helpers.exercises import all_exercises, get
from helpers.probe import Length, Probe
from helpers.registry import DIAGNOSES, EDGE_KINDS, RETIRED
from helpers.safety import tensors_in
from tests.conftest import checked_with, submission_modules

RIGHT = [(ex, fn) for m in submission_modules() for ex, fns in m.RIGHT.items() for fn in fns]
WRONG = [case for m in submission_modules() for case in m.WRONG]
ALSO = [case for m in submission_modules() for case in getattr(m, "ALSO", [])]
RIGHT_BY_ID = {ex: fn for ex, fn in reversed(RIGHT)}  # the first right submission of each exercise
# What a wrong submission may be told under "Also wrong": the second mistakes its ALSO entries say it makes.
SECOND_MISTAKES: dict[object, set[str]] = {}
for _exercise, _code, _also, _fn in ALSO:
    SECOND_MISTAKES.setdefault(_fn, set()).add(_also)


@functools.cache
def checked(exercise: str, fn):
    """check()'s result, once per submission: a wrong one listed in WRONG and in ALSO is checked once."""
    return check(exercise, fn)


def also_codes(result) -> set[str]:
    return {finding.split(":", 1)[0] for finding in result.also}


@pytest.mark.parametrize("exercise, fn", RIGHT, ids=[f"{ex}-{fn.__name__}" for ex, fn in RIGHT])
def test_correct_code_passes(exercise, fn):
    result = check(exercise, fn)
    assert result.passed, str(result)
    assert result.diagnosis is None and result.score == result.max_score > 0


@pytest.mark.parametrize("exercise, code, fn", WRONG, ids=[f"{ex}-{code}-{fn.__name__}" for ex, code, fn in WRONG])
def test_wrong_code_gets_its_diagnosis_and_staged_help(exercise, code, fn):
    """Exactly its code; the message says what is wrong, the hint gives the idea, the fix
    the change, and the message never gives the fix away; "Also wrong" lists only mistakes the code
    makes (its ALSO entries). (One check per wrong submission serves all: the catalogue is the
    largest part of the unit tests' time.)"""
    result = checked(exercise, fn)
    assert not result.passed
    assert (result.diagnosis, result.score) == (code, 0), str(result)
    if get(exercise).chapter in (1, 2, 3, 4, 5, 6, 8):  # chapter 07 comes under this rule with its part of issue 32
        assert also_codes(result) <= SECOND_MISTAKES.get(fn, set()), f"a false 'also' entry\n{result}"
    assert len(result.message) > 20
    assert len(result.hint) > 20 and len(result.fix) > 20, f"{exercise}/{code}: no hint or no fix\n{result}"
    assert result.hint != result.fix and result.fix not in result.message and result.hint not in result.message
    assert not code_spans(result.fix) & code_spans(result.message), (
        f"{exercise}/{code}: the message gives the fix away\n{result}"
    )


@pytest.mark.parametrize(
    "exercise, code, also, fn", ALSO, ids=[f"{ex}-{code}-{also}-{fn.__name__}" for ex, code, also, fn in ALSO]
)
def test_secondary_findings_are_listed(exercise, code, also, fn):
    """Two independent mistakes: the first is the diagnosis, the other is listed in result.also, by its own
    code: never as wrong_values (tests/test_also_wrong.py says which pairs are independent)."""
    result = checked(exercise, fn)
    assert result.diagnosis == code, str(result)
    assert any(finding.startswith(f"{also}:") for finding in result.also), str(result)
    assert not [finding for finding in result.also if finding.startswith("wrong_values:")], str(result)


def code_spans(text: str) -> set[str]:
    return {span for span in re.findall(r"`([^`]+)`", text) if len(span) > 12}


def test_every_diagnosis_code_has_wrong_code_that_gets_it():
    covered = {code for _, code, _ in WRONG}
    assert set(DIAGNOSES) - covered - set(RETIRED) == set()
    assert covered & set(RETIRED) == set() and set(RETIRED) <= set(DIAGNOSES)  # a retired code is given by no check


def test_every_declared_mistake_is_diagnosed_in_its_own_exercise():
    """A mistake declared with an exercise must name some real wrong code: else it is dead, or never reached."""
    wrong = {(exercise, code) for exercise, code, _ in WRONG}
    undiagnosed = [
        f"{e.id}: {code}" for e in all_exercises().values() for code in e.mistakes if (e.id, code) not in wrong
    ]
    assert undiagnosed == []


def test_every_exercise_runs_a_device_pass_or_says_why_and_declares_the_calls_it_reads(monkeypatch):
    """Code that makes a tensor on the CPU passes on a CPU-only machine and breaks on a GPU:
    only a device pass sees it there. An exercise without tensors to follow says why it needs none.
    And a check whose pass reads which torch functions the code called (`calls_of`: graded, the kernel's
    word) declares it in `method_seen`, so that the grader marks that pass best effort."""
    import sys

    from helpers.exercises import common

    ran, read = [], []
    device_pass = Probe.device_pass
    monkeypatch.setattr(
        Probe,
        "device_pass",
        lambda probe, *args, **kwargs: (ran.append(probe.exercise.id), device_pass(probe, *args, **kwargs))[1],
    )
    calls_of = common.calls_of
    for module in [m for name, m in sys.modules.items() if name.startswith("helpers.exercises")]:
        if getattr(module, "calls_of", None) is calls_of:
            monkeypatch.setattr(
                module, "calls_of", lambda probe, *a: (read.append(probe.exercise.id), calls_of(probe, *a))[1]
            )
    for exercise in all_exercises().values():
        right = next(fn for ex, fn in RIGHT if ex == exercise.id)
        assert check(exercise.id, right).passed
        assert (exercise.id in ran) != bool(exercise.no_device_pass), (
            f"{exercise.id}: a device pass, or a reason in no_device_pass (not both)"
        )
        assert (exercise.id in read) == bool(exercise.method_seen), f"{exercise.id}: reads the calls, says method_seen"
    assert read, "no check read the calls: the test lost what it watches"


def test_every_exercise_has_two_different_correct_implementations():
    for exercise in all_exercises():
        passing = {fn for ex, fn in RIGHT if ex == exercise}
        assert len(passing) >= 2, f"{exercise} has {len(passing)} correct implementations in tests/submissions"


# --- every probe reaches the edges of its inputs, and every trained table gets a gradient probe ---

# The arguments whose values have edges: an exercise that takes one declares its kind in `edges`.
EDGES_BY_ARGUMENT = {
    "ids": "ids",
    "input_ids": "ids",
    "positions": "positions",
    "token_type_ids": "segments",
    "max_len": "lengths",
    "seq_len": "lengths",
    "max_position_embeddings": "lengths",
}


def edges_by_signature(exercise) -> set[str]:
    targets = (
        [exercise.reference.__init__, exercise.reference.forward] if exercise.kind == "module" else [exercise.reference]
    )
    return {
        EDGES_BY_ARGUMENT[name]
        for target in targets
        for name in inspect.signature(target).parameters
        if name in EDGES_BY_ARGUMENT
    }


class Recording(Probe):
    """A Probe that keeps what the probes reached: the edges of the inputs each call into student
    code received, the modules it built, and the tables its gradient probes compared."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.edges_reached: dict[str, set[str]] = {}  # kind -> the edges ("first", "last") some call received
        self.edges_lost: list[str] = []  # tagged inputs that reached student code without one of their edges
        self.built: list[nn.Module] = []  # every module Probe.build made
        self.gradients: list[tuple[torch.Tensor, torch.Tensor]] = []  # (a trained table, the rows its probe used)
        self.bases: set[float] = set()  # every `base` a call into student code received

    def call(self, fn, *args, what=None, **kwargs):
        self.record_edges(args, kwargs)
        try:
            self.bases.add(inspect.signature(fn).bind_partial(*args, **kwargs).arguments["base"])
        except (KeyError, TypeError, ValueError):
            pass  # no base in this call
        return super().call(fn, *args, what=what, **kwargs)

    def build(self, cls, *args, **kwargs):
        module = super().build(cls, *args, **kwargs)
        self.built.append(module)
        return module

    def record_gradient(self, table, rows_used):
        self.gradients.append((table, rows_used.detach().to("cpu", torch.bool)))

    def record_edges(self, args: tuple, kwargs: dict) -> None:
        """Which edges the tagged inputs (Probe.tag, Probe.length) of one call into student code hold."""

        def reached(kind: str, first: bool, last: bool) -> None:
            self.edges_reached.setdefault(kind, set()).update(
                edge for edge, hit in (("first", first), ("last", last)) if hit
            )

        for value in (*args, *kwargs.values()):
            if isinstance(value, Length):
                reached("lengths", value == 1, value.max_len in (None, value))
        for tensor in tensors_in([args, kwargs]):
            for kind, bound, dim in getattr(tensor, "_course_edges", ()):
                if kind == "lengths":
                    size = tensor.shape[dim]
                    reached(kind, size == 1, bound in (None, size))
                elif not tensor.is_meta:
                    first, last = bool((tensor == 0).any()), bool((tensor == bound - 1).any())
                    reached(kind, first, last)
                    if tensor.numel() >= 2 and not (first and last):
                        self.edges_lost.append(
                            f"{kind} below {bound}, shape {tuple(tensor.shape)}, without {0 if not first else bound - 1}"
                        )


def probed(monkeypatch, exercise_id: str, submission) -> tuple[Recording, object]:
    """Check `submission`; return the probe, with what it recorded, and the result."""
    return checked_with(monkeypatch, exercise_id, submission, Recording)


def test_recording_probe_call_records_edges_and_hands_plain_ints():
    probe = Recording(get("sinusoidal_encoding"), "x")
    received = probe.call(lambda n, ids: (type(n), ids), probe.length(1), probe.ids(9, 4))
    assert received[0] is int
    assert probe.edges_reached == {"lengths": {"first", "last"}, "ids": {"first", "last"}}
    ids = probe.ids(9, 4)
    ids[ids == 0] = 1  # an edge lost after the maker put it there
    probe.call(lambda ids: ids, ids)
    assert probe.edges_lost and "without 0" in probe.edges_lost[0]


def edges_missed(exercise, probe: Recording) -> list[str]:
    """The edges of the exercise's kinds of input that no call into student code reached."""
    missed = [
        f"{kind}: taken (by the signature) but not declared in edges"
        for kind in sorted(edges_by_signature(exercise) - set(exercise.edges))
    ]
    for kind in exercise.edges:
        lacking = {"first", "last"} - probe.edges_reached.get(kind, set())
        missed += [f"{kind}: no call reached the {edge} edge of {EDGE_KINDS[kind]}" for edge in sorted(lacking)]
    return missed + [f"an input lost its edge: {lost}" for lost in probe.edges_lost]


def tables_unprobed(exercise, probe: Recording) -> list[str]:
    """A module exercise's trainable Parameters that no gradient probe compared over every row:
    at least one module the check built must have them all covered."""
    if exercise.kind != "module":
        return []
    covered = {id(table): rows for table, rows in probe.gradients}
    fewest = None
    for module in probe.built:
        missing = []
        for name, parameter in module.named_parameters():
            rows = covered.get(id(parameter))
            if rows is None:
                missing.append(f"{name}: no gradient probe")
            elif not rows.all():
                missing.append(f"{name}: rows {(~rows).nonzero().flatten().tolist()[:8]} unused by its gradient probe")
        if not missing:
            return []
        fewest = missing if fewest is None or len(missing) < len(fewest) else fewest
    return fewest or []


@pytest.mark.parametrize("exercise", list(all_exercises()))
def test_every_probe_reaches_the_edges_and_every_trained_table(monkeypatch, exercise):
    """Id 0 and V - 1, position 0 and max_len - 1, segment 0 and the last, T = 1 and T = max_len:
    on purpose, in every exercise that takes them, not by the luck of a seed; and every table the
    module trains has its gradient compared, over every row."""
    right = next(fn for ex, fn in RIGHT if ex == exercise)
    probe, result = probed(monkeypatch, exercise, right)
    assert result.passed, str(result)
    assert edges_missed(get(exercise), probe) == []
    assert tables_unprobed(get(exercise), probe) == []
    assert base_never_changed(get(exercise), probe) is None


def base_never_changed(exercise, probe: Recording) -> float | None:
    """An exercise that takes a base with a default must be probed with another one too: code that drops the
    base it is given (a hard-coded 10000, a base not passed on to a helper) gives the default's values, and
    only a call with another base tells it apart. The default, when no call gave another; else None."""
    target = exercise.reference.__init__ if exercise.kind == "module" else exercise.reference
    default = inspect.signature(target).parameters.get("base", inspect.Parameter("base", 1)).default
    if default is inspect.Parameter.empty or probe.bases - {default}:
        return None
    return default


def test_the_edge_test_fails_when_an_edge_is_left_out(monkeypatch):
    """The test above can fail: ids that never hold 0, a kind declared and never probed, a kind
    taken and not declared."""
    exercise, right = get("ScaledEmbedding"), RIGHT_BY_ID["ScaledEmbedding"]

    def without_zero(self, high, *shape, device=None, kind="ids", every=False):
        return self.tag(torch.randint(1, high, shape, generator=self.generator).to(device or self.device), kind, high)

    with monkeypatch.context() as patch:
        patch.setattr(Probe, "ids", without_zero)
        probe, _ = probed(monkeypatch, exercise.id, right)
    missed = edges_missed(exercise, probe)
    assert any(m.startswith("ids: no call reached the first edge") for m in missed) and any(
        "lost its edge" in m for m in missed
    )
    probe, _ = probed(monkeypatch, exercise.id, right)
    assert edges_missed(dataclasses.replace(exercise, edges=(*exercise.edges, "segments")), probe) == [
        f"segments: no call reached the {edge} edge of {EDGE_KINDS['segments']}" for edge in ("first", "last")
    ]
    assert edges_missed(dataclasses.replace(exercise, edges=()), probe) == [
        "ids: taken (by the signature) but not declared in edges"
    ]


def test_the_gradient_test_fails_when_a_table_is_unprobed(monkeypatch):
    """The test above can fail: a module with a trained Parameter no gradient probe looks at,
    and a check whose gradient probes record nothing."""

    class WithGain(RIGHT_BY_ID["ScaledEmbedding"]):
        def __init__(self, vocab_size, d_model):
            super().__init__(vocab_size, d_model)
            self.gain = nn.Parameter(torch.ones(()))

        def forward(self, ids):
            return super().forward(ids) * self.gain

    exercise = get("ScaledEmbedding")
    probe, result = probed(monkeypatch, exercise.id, WithGain)
    assert result.passed and tables_unprobed(exercise, probe) == ["gain: no gradient probe"]
    with monkeypatch.context() as patch:
        patch.setattr(Recording, "record_gradient", Probe.record_gradient)  # the production hook records nothing
        probe, _ = probed(monkeypatch, exercise.id, RIGHT_BY_ID["ScaledEmbedding"])
    assert tables_unprobed(exercise, probe) != []


def test_the_base_test_fails_when_no_call_changes_the_base():
    """The test above can fail: calls that only ever use the default base."""
    probe = Recording(get("rope_cache"), "x")
    cache = lambda head_dim, max_len, base=10000.0: None
    probe.call(cache, 8, 16)
    probe.call(cache, 8, 16, 10000.0)
    assert base_never_changed(get("rope_cache"), probe) == 10000.0
    probe.call(cache, 8, 16, base=500000.0)
    assert base_never_changed(get("rope_cache"), probe) is None
