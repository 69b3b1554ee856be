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
from tests.grading_support import BLINDING_INIT, FORGED_SCALE, RIGHT_SCALE, forging

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
            assert safety.from_torch_path(safety.torch_path(function)) is function, function


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


# ---- what the grader owns: every Parameter, at a scale it fixes (issue 45) ------------------------


def kernel_graded(cell: str, exercise_id: str, salt: int = 20261127) -> tuple:
    """(the result, the session) of `exercise_id` graded in a 'kernel' that ran `cell`."""
    session = Session(kernel_running(cell))
    with session.active(salt):
        return session.overrule(check(exercise_id, session.stand_in(exercise_id))), session


def test_a_table_that_starts_as_zeros_and_one_subnormal_does_not_blind_the_values_probe():
    """The grader's draws are at a scale it fixes: from the kernel's (here about 1e-40) they would be zeros, or under
    float32's tolerance, and tanh(x) * sqrt(d) would look like x * sqrt(d)."""
    result, _ = kernel_graded(BLINDING_INIT, "ScaledEmbedding")
    assert (result.passed, result.diagnosis) == (False, "wrong_values"), str(result)


@pytest.mark.parametrize("kind", ["complex", "meta"])
def test_a_parameter_said_complex_or_on_meta_is_still_the_graders(kind):
    """Ownership is the grader's, whatever dtype or device the kernel claims: the claim is a finding (or the values
    the grader draws for it contradict what the module computes), never a table the reference is computed from."""
    result, session = kernel_graded(forging(kind), "ScaledEmbedding")
    assert not result.passed, str(result)
    parameters = [t for t, v in session.local.items() if isinstance(v, torch.nn.Parameter)]
    assert parameters and all(t in session.owned for t in parameters), "every Parameter is the grader's"


def test_every_module_exercise_grades_a_tied_or_aliased_parameter_as_one_tensor():
    """A right module that also keeps one of its Parameters under a second name (`self.table =
    self.embedding.weight`): the kernel reports the Parameter twice, the grader draws it once and sends it once,
    and the module computes with the grader's values: full marks, as without the alias."""
    from tests.conftest import submission_modules

    passed: list[str] = []
    for module in submission_modules():
        for exercise_id, classes in module.RIGHT.items():
            right = classes[0]
            if not isinstance(right, type) or not issubclass(right, torch.nn.Module):
                continue

            def __init__(self, *args, _base=right, **kwargs):
                _base.__init__(self, *args, **kwargs)
                for name, parameter in list(self.named_parameters()):
                    setattr(self, "alias_" + name.replace(".", "_"), parameter)  # registered again, same object

            aliased = type(exercise_id, (right,), {"__init__": __init__})
            result, alone = graded(aliased, exercise_id, salt=20261127), check(exercise_id, aliased)
            assert (result.passed, result.diagnosis) == (alone.passed, alone.diagnosis), f"{right.__name__}: {result}"
            if result.passed:
                passed.append(exercise_id)
    # BertEmbeddings alone fails as check() fails it: its aliases are extra names in its state_dict (HF's has none)
    assert len(passed) >= 6 and "ScaledEmbedding" in passed and "TiedLMHead" in passed, passed


# A RopeKVCache whose positions come from its cache's length (its values right) and whose offset never moves,
# with a kernel that reports the offset the check expects: only the kernel knows its Python attributes.
FORGED_OFFSET = """\
import torch
from torch import nn
from helpers.grading import serve


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class RopeKVCache(nn.Module):
    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__()
        self.max_len, self.offset, self.k, self.v = max_len, 0, None, None
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim), persistent=False)

    def forward(self, q, k, v):
        T, seen = q.shape[-2], 0 if self.k is None else self.k.shape[-2]
        if seen + T > self.max_len:
            raise ValueError("past max_len")
        angles = torch.arange(seen, seen + T, device=q.device).float()[:, None] * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        q, k = ((x.float() * angles.cos() + rotate_half(x.float()) * angles.sin()).to(x.dtype) for x in (q, k))
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return q, self.k, self.v  # self.offset stays 0
"""
REPORTS_OFFSET = """
_describe = serve.Server.describe


def describe(self, module, out, depth):
    record = _describe(self, module, out, depth)
    if isinstance(module, RopeKVCache):
        record.attrs["offset"] = 0 if module.k is None else module.k.shape[-2]
    return record


serve.Server.describe = describe
"""


def test_a_python_attribute_only_the_kernel_reports_makes_the_verdict_best_effort():
    """Without the forgery, the offset that never moves fails; with it, the values pass and the verdict reads
    `RopeKVCache.offset`, the kernel's word: best effort, and not counted in a notebook whose code reaches the
    grader's machinery in its kernel (which is how that word is forged)."""
    from helpers.grading.submission import ExerciseInfo, Submission

    honest, _ = kernel_graded(FORGED_OFFSET, "RopeKVCache")
    assert (honest.passed, honest.diagnosis) == (False, "offset_not_advanced"), str(honest)
    forged, session = kernel_graded(FORGED_OFFSET + REPORTS_OFFSET, "RopeKVCache")
    assert forged.passed and "RopeKVCache.offset" in session.attributes_read, str(forged)
    exercise = ExerciseInfo("RopeKVCache", 8, 7)
    verdict = Submission.verdict(exercise, True, None, forged.message)
    cells = [(1, FORGED_OFFSET + REPORTS_OFFSET)]
    said = Submission(cells, [exercise], cell_timeout=1, notebook_timeout=1)
    judged = said.kernel_said(exercise, dict(verdict), 0, list(session.attributes_read))
    assert (judged["passed"], judged["score"], judged["diagnosis"]) == (False, 0, "forbidden_api"), judged
    assert "RopeKVCache.offset" in judged["best_effort"]
    innocent = Submission(
        [(1, "# helpers.grading is the grader's\nx = 'helpers.grading'")],
        [exercise],
        cell_timeout=1,
        notebook_timeout=1,
    )
    kept = innocent.kernel_said(exercise, dict(verdict), 0, ["RopeKVCache.offset"])
    assert kept["passed"] and "RopeKVCache.offset" in kept["best_effort"], kept


# ---- whatever a reply makes the grader raise costs that exercise (issue 45) ---------------------------


def checked_in_a_submission(reply: dict, values: dict | None = None) -> tuple:
    """Submission.check_one of `lookup` against a 'kernel' that answers every request with `reply`."""
    import asyncio

    from helpers.grading.submission import ExerciseInfo, Submission

    class Kernel:
        async def ask(self, request: bytes, timeout: float) -> bytes:
            return wire.pack(reply, values or {})

    exercise = ExerciseInfo("lookup", 1, 2)
    submission = Submission([], [exercise], cell_timeout=5, notebook_timeout=60)

    async def run():
        loop = asyncio.get_running_loop()
        return await asyncio.to_thread(submission.check_one, exercise, Kernel(), time.monotonic() + 30, 0, loop)

    return asyncio.run(run())


META = {"tensor": "", "token": "k1", "dtype": "float32", "device": "meta", "rg": False}


@pytest.mark.parametrize(
    "reply, values",
    [
        ({"kind": "function", "params": [], "graph": float("inf")}, None),  # JSON's Infinity
        ({"kind": "function", "params": [], "graph": 2**70}, None),
        ({"kind": "module", "value": {**META, "shape": [2**62, 2**62]}}, None),
        ({"kind": "module", "value": {**META, "shape": [2**40, 2**40, 0]}}, None),  # empty, yet each size too large
        ({"kind": "module", "value": {**META, "dtype": "int64", "complex": True, "shape": [3]}}, None),
        (
            {
                "kind": "module",
                "value": {**META, "tensor": "x", "device": "cpu", "dtype": "int64", "complex": True, "shape": [3]},
            },
            {"x": torch.zeros(3, 2, dtype=torch.int64)},
        ),
        ({"kind": "module", "value": {"module": "k0", "nn": None}}, None),
    ],
    ids=[
        "graph_infinity",
        "graph_huge",
        "meta_2e62_squared",
        "meta_huge_sizes",
        "meta_int_complex",
        "int_complex",
        "module_unknown",
    ],
)
def test_a_reply_the_grader_cannot_decode_costs_that_exercise_only(reply, values):
    """Shapes, ids and flags are checked before torch sees them; and anything else a reply makes the grader
    raise is the kernel's: that exercise scores 0 ("no valid answer"), the submission is graded."""
    result, gone = checked_in_a_submission(reply, values)
    assert gone is None and (result["passed"], result["score"], result["diagnosis"]) == (False, 0, "raised"), result
    assert "no valid answer from the kernel" in result["message"]


def test_the_tensors_a_checks_replies_carry_count_against_its_budget(monkeypatch):
    """Kept, mirrored, until the check ends: each reply under its own limit, together past the check's (one check
    reached 4.1 GB under a stated 2 GB when only copies counted)."""
    monkeypatch.setattr(wire, "CHECK_BUDGET", 3 * 2**20)

    class Carrying(Server):
        def reply(self, request):
            tree, tensors = wire.unpack(super().reply(request))
            return wire.pack(tree, {**tensors, "ballast": torch.zeros(2**18)})  # 1 MB with every reply

    def lookup(weight, ids):
        return weight[ids]

    server = Carrying({"lookup": lookup})
    session = Session(lambda request, timeout: server.reply(request))
    with session.active(0):
        result = check("lookup", session.stand_in("lookup"))
    assert not result.passed and "more memory than the grader allows" in result.message, str(result)


def test_an_output_made_under_inference_mode_is_graded_as_check_grades_it():
    """Inference tensors keep no version counter: the kernel's bookkeeping must not raise on them, so the verdict is
    check()'s (gradient_cut), not `raised`."""
    from tests.submissions.ch05 import apply_rope_in_inference_mode

    remote = graded(apply_rope_in_inference_mode, "apply_rope")
    assert remote.diagnosis == check("apply_rope", apply_rope_in_inference_mode).diagnosis == "gradient_cut", str(
        remote
    )
