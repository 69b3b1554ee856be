"""Grades that cannot be forged: one hostile notebook for each class of attack that gained points
when the checks ran inside the student's kernel, graded in one batch (--jobs 2) beside an honest
classmate. The verdict is now computed in the grader's process from data alone, so every attack
scores 0 for the exercise it attacks (or is flagged, where a property can only be seen inside the
kernel), the batch finishes, every report is written under a safe, unique name, and every text
from a submission is escaped where it is shown.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import grade
from tests.grading_support import (
    BLINDING_INIT,
    FORGED_SCALE,
    HEAD,
    NO_SANDBOX,
    RIGHT_ONE_HOT,
    RIGHT_SCALE,
    WRONG_LOOKUP,
    by_id,
    forging,
    once_per_run,
    write_notebook,
)

# Each attack: a wrong lookup (columns, not rows) and one last cell that tries to make it pass.
ATTACKS = {
    # Hooks on the standard modules and on IPython's own expression evaluation.
    "hook_serialisation": """\
import base64, json, zlib
base64.b64encode = lambda data: b"forged"
json.dumps = lambda *args, **kwargs: '{"passed": true}'
zlib.decompress = lambda data: data""",
    "hook_user_expressions": """\
shell = get_ipython()
shell.user_expressions = lambda expressions: {name: {"status": "ok", "data": {"text/plain": "'passed'"}} for name in expressions}""",
    "hook_imports": """\
import sys, types
sys.modules["helpers.grading.serve"] = types.SimpleNamespace(answer=lambda path: "passed")
sys.meta_path.insert(0, type("Finder", (), {"find_spec": staticmethod(lambda *args, **kwargs: None)})())
import dataclasses
dataclasses.replace = lambda obj, **changes: obj""",
    # A tensor whose every comparison is true, and __torch_function__ that hides what it holds.
    "tensor_subclass": """\
import torch


class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose", "eq", "__eq__"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


_wrong = lookup


def lookup(weight, ids):
    return _wrong(weight, ids).as_subclass(Agreeable)""",
    # An object whose signature and attributes run code, and a thread racing the check.
    "tricky_object": """\
import threading, time


class Lookup:
    @property
    def __signature__(self):
        time.sleep(0.5)
        raise RuntimeError("no signature for you")

    def __call__(self, weight, ids):
        return weight.T[ids]


def race():
    while True:
        globals()["lookup"] = Lookup()
        time.sleep(0.001)


lookup = Lookup()
threading.Thread(target=race, daemon=True).start()""",
    # Forbidden torch functions reached by indirection: seen in the kernel, best effort, flagged.
    "forbidden_indirect": """\
import importlib

_functional = importlib.import_module("torch.nn." + "functional")


def lookup(weight, ids):
    return getattr(_functional, "emb" + "edding")(ids, weight)""",
    # The reference, reached for by every route: not in the sandbox at all.
    "copy_the_reference": """\
import pathlib
import helpers

source = (pathlib.Path(helpers.__file__).parent / "reference.py").read_text()
namespace = {}
exec(source, namespace)
lookup = namespace.get("lookup", lookup)
probes = (pathlib.Path(helpers.__file__).parent / "exercises" / "ch01_lookup_tables.py").exists()
print("private probes readable:", probes)""",
    # A reply far larger than any answer: the kernel's server refuses to pack it, and where the
    # notebook lifts that limit, the grader drops the message unread.
    "huge_reply": """\
def lookup(weight, ids):
    import torch

    return torch.zeros(1).expand(200_000_000)  # 800 MB of float32 once packed""",
    # (This batch's grader reads at most SMALL_MESSAGE of a reply: the same refusal as at 512 MB, for 50 MB.)
    "huge_reply_forced": """\
import helpers.grading.wire

helpers.grading.wire.MAX_MESSAGE = 2**40


def lookup(weight, ids):
    import torch

    return torch.zeros(12_500_000)""",
    # The disk: the kernel's writable folders are capped, the host's are out of reach.
    "fill_the_disk": """\
import os, tempfile

for folder in (os.getcwd(), tempfile.gettempdir(), "/dev/shm"):
    try:
        with open(os.path.join(folder, "filler"), "wb") as f:
            while True:
                f.write(b"x" * 2**20)
    except OSError:
        pass""",
    # A busy loop meant to slow down the classmate graded beside it.
    # Replies that cost the grader more than they weigh (issue 34): one tensor the grader sent, named
    # by thousands of entries (each a copy: terabytes); one tensor laid out again with other strides.
    "names_a_sent_tensor_again": """\
import dataclasses
from helpers.grading import serve

_call = serve.Server.call


def call(self, request, decoder, out):
    reply, sent = _call(self, request, decoder, out), request.args[0]
    again = [{**sent, "tensor": "", "token": f"k{i}", "same_as": sent["token"]} for i in range(9000)]
    return dataclasses.replace(reply, value={"list": again})


serve.Server.call = call""",
    "lays_out_again": """\
import dataclasses
import torch
from helpers.grading import serve

_call = serve.Server.call


def call(self, request, decoder, out):
    reply = _call(self, request, decoder, out)
    out["x"] = torch.zeros(64, 4096)
    entry = {"tensor": "x", "dtype": "float32", "shape": [64, 4096], "device": "cpu", "rg": False}
    again = [{**entry, "token": f"k{i}", "stride": [1, 64 + i % 3]} for i in range(5000)]
    return dataclasses.replace(reply, value={"list": again})


serve.Server.call = call""",
    # A forbidden call hidden from what watches torch calls in the kernel: it scores nothing.
    "dispatch_off": """\
import torch
import torch.nn.functional as F


def lookup(weight, ids):
    with torch._C.DisableTorchFunction():
        return F.embedding(ids, weight)""",
    # A module that forgets sqrt(d_model), whose kernel reports its tables divided by it (issue 34).
    "forged_scale": FORGED_SCALE,
    # The same, its table said to be complex (or on meta) so that the grader would not own it (issue 45).
    "complex_table": forging("complex"),
    "meta_table": forging("meta"),
    # A table of zeros and one subnormal: draws at the kernel's scale would be zeros, and tanh(x) look like x.
    "blinding_init": BLINDING_INIT,
    # A reply the grader cannot decode (a graph id of Infinity): that submission's exercises, never the batch.
    "reply_infinity": """\
import dataclasses
from helpers.grading import serve

_describe = serve.Server.describe_name


def describe_name(self, name, out):
    return dataclasses.replace(_describe(self, name, out), graph=float("inf"))


serve.Server.describe_name = describe_name""",
    "busy_neighbour": """\
import threading, time

end = time.monotonic() + 4  # bounded, as every attack in the suite: long enough to overlap its classmates' grading


def spin():
    while time.monotonic() < end:
        pass


for _ in range(8):
    threading.Thread(target=spin, daemon=True).start()""",
}
ATTACKED = {
    name: "ScaledEmbedding" for name in ("forged_scale", "complex_table", "meta_table", "blinding_init")
}  # the exercise an attack is after; lookup where not named
# Attacks that cut their own kernel off from the grader, or slow their own kernel (on cores of its own:
# its classmates run beside it on others), or forge every reply, or hide every torch call: they may lose more.
LOSE_MORE = (
    "hook_user_expressions",
    "busy_neighbour",
    "names_a_sent_tensor_again",
    "lays_out_again",
    "dispatch_off",
    "forged_scale",
    "complex_table",
    "meta_table",
    "reply_infinity",
)
# Attacks whose code reaches into the grader's machinery in the kernel (helpers.grading), which reports the torch
# functions a call ran: one_hot_lookup's pass reads them (method_seen), so it is not counted there.
REACHES_THE_GRADER = ("huge_reply_forced",)
# The honest classmate's other exercises of chapters 01 and 02: full marks.
RIGHT_BACKWARD = """\
def embedding_backward(grad_out, ids, vocab_size, padding_idx=None):
    grad = torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device)
    grad.index_add_(0, ids.flatten(), grad_out.reshape(-1, grad_out.shape[-1]))
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad"""
RIGHT_HEAD = """\
class TiedLMHead(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = embedding.weight

    def forward(self, h):
        return F.linear(h, self.weight)"""
# Names that must not break or deceive the batch: escapes, Markdown, HTML, a formula, a reserved
# name, a classmate's name in another folder, a non-UTF-8 byte and a name near the file system's limit.
ODD_NAMES = {
    "escapes": "ev\x1b[31mil\nname|<b>x<i>`.ipynb",
    "formula": "=HYPERLINK(1).ipynb",
    "reserved": "summary.ipynb",
    "classmate": "other/classmate.ipynb",
    "long": "x" * 240 + ".ipynb",
}
NOT_UTF8 = b"caf\xe9.ipynb"
# Graded in a kernel of their own; the others only need a report and a summary row, and get them unread
# (NotebookFormatError), without a kernel.
RUN_UNDER_ODD_NAMES = ("escapes", "long")
# Right, but odd: one Parameter under two names, a comment that names a dispatch switch, a large blank cell.
HONEST_ODD = [
    HEAD,
    "def lookup(weight, ids):\n    return weight[ids]  # not torch._C.DisableTorchFunction(), which hides calls",
    RIGHT_ONE_HOT,
    RIGHT_BACKWARD,
    "\n" * 50_000
    + RIGHT_SCALE.replace("math.sqrt(d_model)\n", "math.sqrt(d_model)\n        self.table = self.emb.weight\n"),
    RIGHT_HEAD,
]
SMALL_MESSAGE = 32 * 2**20  # what this batch's grader reads of one reply (512 MB in use)


def grade_the_attacks(root: Path) -> dict:
    folder, out = root / "class", root / "out"
    (folder / "other").mkdir(parents=True)
    write_notebook(
        folder / "classmate.ipynb",
        [
            HEAD,
            "def lookup(weight, ids):\n    return weight[ids]",
            RIGHT_ONE_HOT,
            RIGHT_BACKWARD,
            RIGHT_SCALE,
            RIGHT_HEAD,
        ],
    )
    write_notebook(folder / "honest_odd.ipynb", HONEST_ODD)
    for name, attack in ATTACKS.items():
        write_notebook(folder / f"{name}.ipynb", [HEAD, WRONG_LOOKUP, RIGHT_ONE_HOT, attack])
    for key, name in ODD_NAMES.items():  # a kernel for the names its scratch copy must make safe, no more
        if key in RUN_UNDER_ODD_NAMES:
            write_notebook(folder / name, [HEAD, WRONG_LOOKUP])
        else:
            (folder / name).write_bytes(b"not a notebook")
    Path(os.fsdecode(os.fsencode(folder) + b"/" + NOT_UTF8)).write_bytes(b"not a notebook")
    env_secret = os.environ.setdefault("COURSE_GRADER_SECRET", "s3cret-token")
    # Each call into a kernel: 3 s, not the students' 10 s (a dropped reply is waited for that long).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COURSE_CHECK_TIMEOUT", "3")
        patch.setattr("helpers.grading.wire.MAX_MESSAGE", SMALL_MESSAGE)
        patch.setattr("helpers.grading.kernel.INTERRUPT_GRACE", 1.0)  # hook_serialisation's cell is killed sooner
        arguments = [
            "--out",
            str(out),
            "--jobs",
            "2",
            "--timeout",
            "6",
            "--notebook-timeout",
            "120",
            "--chapter",
            "01,02",
        ]
        code = grade.main([str(folder), *arguments, "--quiet", *NO_SANDBOX])
    reports = {p.name: json.loads(p.read_text()) for p in out.glob("*.json") if p.name != "summary.json"}
    return {
        "code": code,
        "reports": reports,
        "files": sorted(p.name for p in out.iterdir()),
        "summary_md": (out / "summary.md").read_text(),
        "summary_csv": (out / "summary.csv").read_text(),
        "secret": env_secret,
    }


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return once_per_run(tmp_path_factory, "forgery", grade_the_attacks)


def report(batch: dict, stem: str) -> dict:
    """The report of the notebook named `stem`, or else of the first whose escaped name starts with it."""
    exact = batch["reports"].get(f"{stem}.json")
    return exact or next(r for name, r in batch["reports"].items() if name.startswith(stem))


def test_the_batch_finishes_with_a_report_for_everyone(batch):
    assert batch["code"] == 0
    assert len(batch["reports"]) == 2 + len(ATTACKS) + len(ODD_NAMES) + 1, batch["files"]


def test_right_code_that_looks_odd_scores_full_marks(batch):
    """A Parameter kept under a second name, a comment naming a dispatch switch, a large blank cell: all right."""
    honest = batch["reports"]["honest_odd.json"]
    assert honest["score"] == honest["max_score"] > 0, honest["exercises"]
    assert not any("switches off" in w["message"] for w in honest["warnings"]), honest["warnings"]


def test_the_honest_classmate_scores_as_alone(batch):
    classmate = by_id(batch["reports"]["class__classmate.json"])  # other/classmate.ipynb is another
    assert classmate["lookup"]["passed"] and classmate["one_hot_lookup"]["passed"]
    assert classmate["ScaledEmbedding"]["passed"] and classmate["ScaledEmbedding"]["score"] == 2
    assert batch["reports"]["class__classmate.json"]["score"] == batch["reports"]["class__classmate.json"]["max_score"]


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_no_attack_earns_the_points_it_attacks(batch, name):
    if name == "copy_the_reference" and NO_SANDBOX:
        pytest.skip(
            "unsandboxed (--no-sandbox) a kernel reads any file, the reference's too: only the sandbox hides it"
        )
    results = by_id(report(batch, name))
    attacked = results[ATTACKED.get(name, "lookup")]
    assert (attacked["passed"], attacked["score"]) == (False, 0), attacked
    if name in REACHES_THE_GRADER:  # a pass that reads the calls its kernel reports is not counted there
        assert "reaches into the grader's machinery" in results["one_hot_lookup"]["message"], results["one_hot_lookup"]
    elif name not in LOSE_MORE:
        assert results["one_hot_lookup"]["passed"], results["one_hot_lookup"]  # grading still works in that kernel


def test_what_each_attack_is_told(batch):
    assert by_id(report(batch, "tensor_subclass"))["lookup"]["diagnosis"] == "transposed_weight"
    forbidden = by_id(report(batch, "forbidden_indirect"))["lookup"]
    assert forbidden["diagnosis"] == "forbidden_api" and "seen inside the student's kernel" in forbidden["best_effort"]
    if not NO_SANDBOX:  # what it copied is a stub (unsandboxed, the real file: see above)
        assert by_id(report(batch, "copy_the_reference"))["lookup"]["diagnosis"] == "uses_reference"
    # Refused in the kernel before it is copied; on a busy machine that kernel may also run out of time, or die:
    # what is guaranteed is no points and a true message, never which of them.
    huge = by_id(report(batch, "huge_reply"))["lookup"]
    assert (huge["passed"], huge["score"], huge["diagnosis"]) == (False, 0, "raised"), huge
    assert any(said in huge["message"] for said in ("the grader reads at most 512 MB", "killed the kernel")), huge
    forced = by_id(report(batch, "huge_reply_forced"))["lookup"]  # dropped unread by the grader
    assert forced["diagnosis"] in ("raised", "timeout", "out_of_memory"), forced
    for name in ("names_a_sent_tensor_again", "lays_out_again"):  # refused at once, as a ProtocolError
        flooded = by_id(report(batch, name))["lookup"]
        assert flooded["diagnosis"] == "raised" and "names one tensor twice" in flooded["message"], flooded
    hidden = by_id(report(batch, "dispatch_off"))["lookup"]
    assert hidden["diagnosis"] == "forbidden_api" and "switches off torch's function dispatch" in hidden["message"]
    assert "seen inside the student's kernel" in hidden["best_effort"]
    forged = by_id(report(batch, "forged_scale"))["ScaledEmbedding"]  # the reference is the grader's own table
    assert forged["diagnosis"] in ("divided_by_scale", "missing_scale", "mutated_input", "changes_own_weights"), forged
    assert by_id(report(batch, "blinding_init"))["ScaledEmbedding"]["diagnosis"] == "wrong_values"
    undecodable = report(batch, "reply_infinity")
    assert undecodable["graded"] and all("no valid answer" in ex["message"] for ex in undecodable["exercises"])


def test_best_effort_marks_the_results_that_rest_on_the_kernels_word(batch):
    """A result whose verdict comes from values alone carries no best_effort; a pass of an exercise that
    forbids functions, that requires one (a matrix product), or that gradients decide, says what in it is the
    kernel's word."""
    classmate = by_id(batch["reports"]["class__classmate.json"])
    assert "forbids" in classmate["lookup"]["best_effort"]  # no forbidden call seen: the kernel's word
    # its rows out of a product of its inputs (the point of the exercise): which torch functions ran, its word too
    assert (
        "matrix product of its inputs, from the torch functions it calls" in classmate["one_hot_lookup"]["best_effort"]
    )
    assert "autograd" in classmate["ScaledEmbedding"]["best_effort"]
    assert "best_effort" not in by_id(report(batch, "tensor_subclass"))["lookup"]  # transposed_weight: values


def test_secrets_stay_outside(batch):
    """Only named variables reach a kernel, and the private probes are not in its sandbox."""
    everything = json.dumps(batch["reports"])
    assert batch["secret"] not in everything
    if not NO_SANDBOX:
        errors = report(batch, "copy_the_reference")["errors"]
        assert not any("private probes readable: True" in e["message"] for e in errors)


def test_names_are_escaped_unique_and_never_reserved(batch):
    files = batch["files"]
    assert len(files) == len(set(files))
    assert files.count("summary.json") == 1 and files.count("summary.md") == 1 and files.count("summary.csv") == 1
    assert all(len(name.encode()) < 255 and name.isascii() and name.isprintable() for name in files)
    assert "\x1b" not in batch["summary_md"] and "<b>" not in batch["summary_md"]  # Markdown renders HTML
    assert "\\u001b" not in json.dumps(batch["reports"])  # no control character, even escaped, in the data
    assert "\n=HYPERLINK" not in batch["summary_csv"] and ",=HYPERLINK" not in batch["summary_csv"]
    assert "caf\\xe9" in batch["summary_md"]  # the undecodable byte, shown escaped
