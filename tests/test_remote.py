"""The grader's remote checks without a kernel: the function server (serve.Server) answers in this
process, through the same bytes as over a kernel's messages, so the whole protocol is exercised
here in milliseconds. The point: a check run outside the student's process reaches the same
verdict, with the same words, as `check()` in a notebook; and nothing a kernel sends is more
than data."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from helpers import check, safety
from helpers.exercises import all_exercises
from helpers.grading import wire
from helpers.grading.remote import MISSING, Session
from helpers.grading.serve import Server
from tests.conftest import submission_modules

RIGHT = {}
WRONG = {}
for module in submission_modules():
    for exercise_id, functions in module.RIGHT.items():
        RIGHT.setdefault(exercise_id, functions[0])
    for exercise_id, code, function in module.WRONG:
        WRONG.setdefault((exercise_id, code), function)
CASES = [(ex, None, fn) for ex, fn in RIGHT.items()] + [(ex, code, fn) for (ex, code), fn in WRONG.items()]


def graded(function, exercise_id: str, salt: int = 0):
    """check() as the grader runs it: the submission lives in a 'kernel' (a Server) of its own."""
    server = Server({function.__name__: function})
    session = Session(lambda request, timeout: server.reply(request))
    with session.active(salt):
        return check(exercise_id, session.stand_in(function.__name__))


@pytest.mark.parametrize("exercise, code, fn", CASES, ids=[f"{ex}-{code}-{fn.__name__}" for ex, code, fn in CASES])
def test_the_grader_reaches_the_verdict_check_reaches(exercise, code, fn):
    """Every exercise's first right submission and one wrong submission per code: the same
    diagnosis outside the process, and the same message on the same probes (salt 0)."""
    remote = graded(fn, exercise)
    assert remote.diagnosis == code, str(remote)
    if code is not None:
        assert remote.message == check(exercise, fn).message


@pytest.mark.parametrize("exercise", sorted(RIGHT))
def test_right_code_passes_on_a_secret_seed(exercise):
    """The grader draws each submission's probes from a seed of its own: right code passes on any."""
    assert graded(RIGHT[exercise], exercise, salt=20261125).passed


def test_a_name_the_notebook_lacks_and_other_objects():
    server = Server({"answer": 42, "nothing": None})
    session = Session(lambda request, timeout: server.reply(request))
    with session.active(0):
        assert session.stand_in("missing") is MISSING
        assert session.stand_in("nothing") is None
        result = check("lookup", session.stand_in("answer"))
    assert (result.diagnosis, type(session.stand_in("answer")).__name__) == ("wrong_type", "int")


def test_every_forbidden_function_is_found_again_in_a_kernel():
    for exercise in all_exercises().values():
        for function in exercise.forbidden:
            assert safety.from_torch_path(safety._torch_path(function)) is function, function


# ---- the wire: data only, checked before it is used -------------------------------------


def test_values_travel_as_they_are():
    tensors: dict[str, torch.Tensor] = {}
    sent = {
        "transposed": torch.arange(12.0).view(3, 4).T,
        "complex": torch.polar(torch.ones(3), torch.arange(3.0)),
        "bf16": torch.randn(5).to(torch.bfloat16),
        "meta": torch.empty(2, 3, device="meta"),
    }
    entries = {name: wire.tensor_entry(t, name, tensors, token=name) for name, t in sent.items()}
    tree, got = wire.unpack(wire.pack(entries, tensors))
    for name, tensor in sent.items():
        back = wire.tensor_from(tree[name], got, {"cpu", "meta"})
        assert (back.shape, back.dtype, back.device) == (tensor.shape, tensor.dtype, tensor.device)
        assert tensor.is_meta or torch.equal(back, tensor)
    assert (
        wire.tensor_from(tree["transposed"], got, {"cpu"}).stride() == sent["transposed"].stride()
    )  # views fail or copy alike


def test_expanded_tensors_travel_contiguous():
    """Strides that share memory (an expand) are not reproduced: a backward into them would fail."""
    tensors: dict[str, torch.Tensor] = {}
    entry = wire.tensor_entry(torch.ones(3).expand(4, 3), "x", tensors)
    assert "stride" not in entry


@pytest.mark.parametrize(
    "message",
    [
        b"",
        struct.pack("<Q", 2**40) + b"{}",  # a header larger than the message
        struct.pack("<Q", 2) + b"{}",  # no metadata
        struct.pack("<Q", 5) + b"nojso",
    ],
)
def test_malformed_messages_are_refused(message):
    with pytest.raises(wire.ProtocolError):
        wire.unpack(message)


def test_a_tensor_that_is_not_what_it_claims_is_refused():
    tensors = {"x": torch.zeros(3)}
    for lie in (
        {"dtype": "float32", "shape": [4]},
        {"dtype": "int64", "shape": [3]},
        {"dtype": "object", "shape": [3]},
        {"dtype": "float32", "shape": [3], "stride": [0]},
    ):
        with pytest.raises(wire.ProtocolError):
            wire.tensor_from({"tensor": "x", "device": "cpu", **lie}, tensors, {"cpu"})
    with pytest.raises(wire.ProtocolError):  # a device the grader does not use
        wire.tensor_from({"tensor": "x", "device": "cuda:7", "dtype": "float32", "shape": [3]}, tensors, {"cpu"})


def test_a_reply_that_lies_costs_the_submission_not_the_grader():
    """A kernel that answers nonsense (no outcome, a value said to equal a tensor the grader
    does not hold, a huge nested value) fails that check with a ProtocolError, nothing else."""
    replies = [
        {"kind": "function", "params": []},
        {
            "outcome": {"kind": "ok"},
            "value": {
                "tensor": "k0",
                "token": "k0",
                "dtype": "float32",
                "shape": [3],
                "device": "cpu",
                "rg": False,
                "same_as": "g99",
            },
        },
        {"outcome": {"kind": "ok"}, "value": json.loads("[" * 50 + "]" * 50)},
    ]
    answers = iter(replies)
    session = Session(lambda request, timeout: wire.pack(next(answers), {}))
    with session.active(0):
        result = check("lookup", session.stand_in("lookup"))
    assert not result.passed and "ProtocolError" in result.message


def test_a_large_tensor_the_grader_holds_already_travels_as_a_reference():
    """A kernel names the token of a large tensor the grader already has (same values) instead of
    sending it again: MiniLM's 47 MB table loaded into a student's module goes back as a name."""
    table = torch.randn(1024, 512)  # 2 MB
    assert wire.digest(table) == wire.digest(table.clone()) and wire.digest(table[:100]) is None  # small: sent
    changed = table.clone()
    changed[-1, -1] += 1
    assert wire.digest(changed) != wire.digest(table)
    assert wire.digest(table.view(512, 1024)) != wire.digest(table)  # the shape counts
    assert wire.digest(table.T) == wire.digest(table.T.contiguous())
    server = Server({})
    assert server.remember("sent", table) is None
    assert server.remember("loaded", table.clone()) == "sent" and server.remember("other", changed) is None


def test_a_result_larger_than_the_grader_reads_is_refused_in_the_kernel_with_its_size(monkeypatch):
    """Not packed, sent and dropped unread (the check would wait for its time limit): the kernel
    answers at once that the result is too large, and how large."""
    monkeypatch.setattr(wire, "MAX_MESSAGE", 2**20)

    def lookup(weight, ids):
        return torch.zeros(2**19)  # 2 MB of float32

    result = graded(lookup, "lookup")
    assert (result.passed, result.diagnosis) == (False, "raised")
    assert "the result takes 2 MB; the grader reads at most 1 MB" in result.message
