"""The grader's remote checks without a kernel: the function server (serve.Server) answers in this
process, through the same bytes as over a kernel's messages, so the whole protocol is exercised
here in milliseconds. The point: a check run outside the student's process reaches the same
verdict, with the same words, as `check()` in a notebook; and nothing a kernel sends is more
than data."""

from __future__ import annotations

import dataclasses
import json
import struct
import time

import pytest
import torch

from helpers import check, safety
from helpers.exercises import all_exercises
from helpers.grading import wire
from helpers.grading.remote import MISSING, Session
from helpers.grading.serve import Server
from tests.conftest import submission_modules
from tests.grading_support import FORGED_SCALE, RIGHT_SCALE

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
        return session.overrule(check(exercise_id, session.stand_in(function.__name__)))


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


def decoded(entry: dict, tensors: dict, devices: set[str]) -> torch.Tensor | None:
    """One tensor of a message, as the grader reads it."""
    return wire.Decoder(tensors, devices, [wire.Budget(wire.REPLY_BUDGET)], {}).tensor(entry)


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
        back = decoded(tree[name], got, {"cpu", "meta"})
        assert (back.shape, back.dtype, back.device) == (tensor.shape, tensor.dtype, tensor.device)
        assert tensor.is_meta or torch.equal(back, tensor)
    assert decoded(tree["transposed"], got, {"cpu"}).stride() == sent["transposed"].stride()  # views fail or copy alike


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
            decoded({"tensor": "x", "device": "cpu", **lie}, tensors, {"cpu"})
    with pytest.raises(wire.ProtocolError):  # a device the grader does not use
        decoded({"tensor": "x", "device": "cuda:7", "dtype": "float32", "shape": [3]}, tensors, {"cpu"})


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
    server.remember("sent", table)
    assert server.holder("loaded", table.clone()) == "sent" and server.holder("other", changed) is None
    assert server.holder("again", table.clone()) is None  # a reply names each at most once


def test_a_result_larger_than_the_grader_reads_is_refused_in_the_kernel_with_its_size(monkeypatch):
    """Not packed, sent and dropped unread (the check would wait for its time limit): the kernel
    answers at once that the result is too large, and how large."""
    monkeypatch.setattr(wire, "MAX_MESSAGE", 2**20)

    def lookup(weight, ids):
        return torch.zeros(2**19)  # 2 MB of float32

    result = graded(lookup, "lookup")
    assert (result.passed, result.diagnosis) == (False, "raised")
    assert "the result takes 2 MB; the grader reads at most 1 MB" in result.message


# ---- replies that lie about the kernel's state, or cost the grader more than they weigh -----------


def kernel_running(cell: str):
    """The transport to a 'kernel' that ran `cell`: what the cell patched in `wire` holds only while
    that kernel answers (in a real kernel it is another process)."""
    original = dict(vars(wire))
    namespace: dict = {}
    exec(cell, namespace)
    patched = {k: v for k, v in vars(wire).items() if original.get(k) is not v}
    vars(wire).update({k: original[k] for k in patched})
    server = Server(namespace)

    def send(request: bytes, timeout: float) -> bytes:
        vars(wire).update(patched)
        try:
            return server.reply(request)
        finally:
            vars(wire).update({k: original[k] for k in patched})

    return send


def test_a_kernel_that_reports_its_tables_scaled_to_hide_a_missing_scale_scores_nothing():
    """The grader draws the table's values itself and computes the reference from its own copy; a table
    reported otherwise than the grader set it is a finding, and the probe, which compares a module's
    tables before and after each call, names it first (as check() names a forward that rescales its own
    table). Either way, what the kernel reports is never the reference."""
    session = Session(kernel_running(FORGED_SCALE))
    with session.active(20261126):
        result = session.overrule(check("ScaledEmbedding", session.stand_in("ScaledEmbedding")))
    assert (result.passed, result.diagnosis) == (False, "changes_own_weights"), str(result)
    assert session.findings, "the table reported divided by sqrt(d) is a claim the grader's copy contradicts"
    honest: dict = {}
    exec(RIGHT_SCALE, honest)
    assert graded(honest["ScaledEmbedding"], "ScaledEmbedding", salt=20261126).passed


class Flooding(Server):
    """A kernel whose answer to a call is `many` entries made by `entry(i, sent)`, where `sent` is
    the first tensor the grader sent with the call; `values` go with the reply."""

    def __init__(self, namespace, entry, many, values=None):
        super().__init__(namespace)
        self.entry, self.many, self.values = entry, many, values or {}

    def call(self, request, decoder, out):
        reply = super().call(request, decoder, out)
        out.update(self.values)
        value = {"list": [self.entry(i, request.args[0]) for i in range(self.many)]}
        return dataclasses.replace(reply, value=value)


def flooded(entry, many, values=None):
    def lookup(weight, ids):
        return weight[ids]

    server = Flooding({"lookup": lookup}, entry, many, values)
    session = Session(lambda request, timeout: server.reply(request))
    started = time.perf_counter()
    with session.active(0):
        result = check("lookup", session.stand_in("lookup"))
    return result, time.perf_counter() - started


def test_a_reply_that_names_a_tensor_the_grader_sent_again_and_again_is_refused_at_once():
    """Once cloned per entry, 100 bytes of JSON each would ask the grader for terabytes: a reply may name
    a tensor the grader sent once, and a tensor the grader never sent not at all."""

    def again(i, sent):
        return {**sent, "tensor": "", "token": f"k{i}", "same_as": sent["token"]}

    result, seconds = flooded(again, 9_000)
    assert not result.passed and "names one tensor twice" in result.message, str(result)
    assert seconds < 10, seconds
    result, _ = flooded(lambda i, sent: {**again(i, sent), "same_as": "k0"}, 1)  # a kernel's own tensor
    assert not result.passed and "never sent" in result.message, str(result)


def test_a_reply_that_lays_one_tensor_out_again_and_again_is_refused_at_once():
    """Each entry naming the same values with other strides would be a copy of its own (90 s of the
    grader's CPU for one reply): each value of a reply is used at most once."""
    values = {"x": torch.zeros(64, 4096)}

    def strided(i, sent):
        return {"tensor": "x", "token": f"k{i}", "dtype": "float32", "shape": [64, 4096], "device": "cpu",
                "rg": False, "stride": [1, 64 + i % 3]}  # fmt: skip

    result, seconds = flooded(strided, 5_000, values)
    assert not result.passed and "names one tensor twice" in result.message, str(result)
    assert seconds < 10, seconds


def test_bytes_materialised_while_decoding_count_against_the_budget(monkeypatch):
    """Copies made while decoding (a layout, a device move, a clone) are counted before they are made."""
    monkeypatch.setattr(wire, "REPLY_BUDGET", 2**20)
    values = {"x": torch.zeros(1024, 1024)}  # 4 MB laid out with its strides: over a 1 MB budget

    def transposed(i, sent):
        return {"tensor": "x", "token": "k9", "dtype": "float32", "shape": [1024, 1024], "device": "cpu",
                "rg": False, "stride": [1, 1024]}  # fmt: skip

    result, _ = flooded(transposed, 1, values)
    assert not result.passed and "more memory than the grader allows" in result.message, str(result)
