"""Issue 45's new hostile round: new variants in each class of attack, graded in one batch (--jobs 2) beside an honest
classmate, and the rules and exports they aimed at checked without a kernel. Each attack gains nothing (its exercise
scores 0, as the same wrong code without it does), the honest notebooks score full marks, the batch exits 0, and
every export of what the attacks wrote is clean for where it is shown.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from helpers import check, export, grade
from helpers.grading import wire
from helpers.grading.code import code_only, reaches_grader
from helpers.grading.collect import suspicious
from helpers.grading.escape import clean, csv_field, markdown, plain
from helpers.grading.reports import report_gradescope, report_markdown
from helpers.grading.submission import DISPATCH_OFF
from tests.grading_support import (
    BLINDING_INIT,
    HEAD,
    NO_SANDBOX,
    RIGHT_LOOKUP,
    RIGHT_ONE_HOT,
    RIGHT_SCALE,
    by_id,
    once_per_run,
    write_notebook,
)
from tests.test_forgery import RIGHT_BACKWARD, RIGHT_HEAD

# A forbidden call behind a switch Python reads but a rule on text does not: a fullwidth identifier (NFKC makes it
# DisableTorchFunction), and a switch entered inside an f-string's replacement field (code, not text).
FULLWIDTH_SWITCH = """\
import torch
import torch.nn.functional as F


def lookup(weight, ids):
    with torch._C.\uff24\uff49\uff53ableTorchFunction():
        return F.embedding(ids, weight)"""
FSTRING_SWITCH = """\
import torch
import torch.nn.functional as F


def lookup(weight, ids):
    held = [None]
    f"{held.__setitem__(0, torch._C.DisableTorchFunction())}"
    with held[0]:
        return F.embedding(ids, weight)"""
# The mode that watches torch calls, fetched and exited around a forbidden call (no switch named).
MODE_EXITED = """\
import torch
import torch.nn.functional as F


def lookup(weight, ids):
    mode = torch.overrides._get_current_function_mode()
    if mode is None:
        return F.embedding(ids, weight)
    mode.__exit__(None, None, None)
    try:
        return F.embedding(ids, weight)
    finally:
        mode.__enter__()"""
# Wrong ScaledEmbeddings (tanh) whose tables the grader must own whatever they claim: kept in bfloat16; frozen at
# zeros and one subnormal when built, unfrozen in forward.
BF16_TABLE = """\
import math
import torch
from torch import nn


class ScaledEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model).to(torch.bfloat16)
        self.d_model = d_model

    def forward(self, ids):
        return torch.tanh(self.emb(ids).float()) * math.sqrt(self.d_model)"""
FROZEN_THEN_THAWED = BLINDING_INIT.replace(  # the same table, frozen until forward thaws it
    "        self.d_model = d_model\n",
    "        self.emb.weight.requires_grad_(False)\n        self.d_model = d_model\n",
).replace(
    "    def forward(self, ids):\n", "    def forward(self, ids):\n        self.emb.weight.requires_grad_(True)\n"
)
# A TiedLMHead with a bias (has_bias), whose kernel hides the bias from the module's record, reaching the server
# by a bracketed import that a rule on one line of text missed.
BIAS_HEAD = """\
from torch import nn


class TiedLMHead(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = embedding.weight
        self.bias = nn.Parameter(torch.zeros(embedding.weight.shape[0]))

    def forward(self, h):
        return F.linear(h, self.weight, self.bias)"""
HIDE_THE_BIAS = """\
import dataclasses
from helpers import (
    grading,
)

_describe = grading.serve.Server.describe


def describe(self, module, out, depth):
    record = _describe(self, module, out, depth)
    return dataclasses.replace(record, params={n: e for n, e in record.params.items() if n != "bias"})


grading.serve.Server.describe = describe"""
# What a student's own exception carries into every export: a terminal escape, bidirectional and invisible
# characters, hidden tag text, a lone surrogate, Markdown that would end a table cell or fetch an image, a formula.
HOSTILE = (
    "\\x1b[2J\\u202e\\u061c\\U000E0041\\u200b\\ud800 ![x](http://evil.example/p.png) "
    "[click](http://evil.example) a\\\\|b =cmd|' /C calc'!A0 <b>x</b>"
)
RAISES_HOSTILE = f'def one_hot_lookup(weight, ids):\n    raise ValueError("{HOSTILE}")'
# Right, in odd shapes: the table under several names (a ModuleDict, a ModuleList, a non-persistent buffer), the
# head's matrix shared by an nn.Linear and a second attribute, its embedding kept as a submodule.
ALIASED_SCALE = """\
import math
import torch
from torch import nn


class ScaledEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.parts = nn.ModuleDict({"tok": self.emb})
        self.stack = nn.ModuleList([self.emb, nn.Identity()])
        self.register_buffer("tied", self.emb.weight, persistent=False)
        self.scale = math.sqrt(d_model)

    def forward(self, ids):
        return self.parts["tok"](ids) * self.scale"""
ALIASED_HEAD = """\
class TiedLMHead(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding
        self.proj = nn.Linear(embedding.weight.shape[1], embedding.weight.shape[0], bias=False)
        self.proj.weight = embedding.weight
        self.w = embedding.weight

    def forward(self, h):
        return self.proj(h)"""
NOTEBOOKS = {
    "classmate": [HEAD, RIGHT_LOOKUP, RIGHT_ONE_HOT, RIGHT_BACKWARD, RIGHT_SCALE, RIGHT_HEAD],
    "aliased": [HEAD, RIGHT_LOOKUP, RIGHT_ONE_HOT, RIGHT_BACKWARD, ALIASED_SCALE, ALIASED_HEAD],
    "fullwidth_switch": [HEAD, FULLWIDTH_SWITCH, RIGHT_ONE_HOT, BF16_TABLE],
    "fstring_switch": [HEAD, FSTRING_SWITCH, RIGHT_ONE_HOT, FROZEN_THEN_THAWED],
    "hidden_bias": [HEAD, MODE_EXITED, RAISES_HOSTILE, BIAS_HEAD, HIDE_THE_BIAS, f'raise ValueError("{HOSTILE}")'],
}


def grade_the_round(root: Path) -> dict:
    folder, out = root / "class", root / "out"
    folder.mkdir()
    for name, cells in NOTEBOOKS.items():
        write_notebook(folder / f"{name}.ipynb", cells)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COURSE_CHECK_TIMEOUT", "5")
        arguments = ["--out", str(out), "--jobs", "2", "--timeout", "20", "--chapter", "01,02", "--quiet"]
        code = grade.main([str(folder), *arguments, *NO_SANDBOX])
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json") if p.name != "summary.json"}
    return {
        "code": code,
        "reports": reports,
        "summary_csv": (out / "summary.csv").read_text(),
    }


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return once_per_run(tmp_path_factory, "hostile_round", grade_the_round)


def test_the_batch_finishes_and_the_honest_score_full_marks(batch):
    assert batch["code"] == 0 and sorted(batch["reports"]) == sorted(NOTEBOOKS), batch["reports"].keys()
    for name in ("classmate", "aliased"):
        report = batch["reports"][name]
        assert report["score"] == report["max_score"] == 11, report["exercises"]


@pytest.mark.parametrize(
    ("name", "exercise", "diagnosis"),
    [
        ("fullwidth_switch", "lookup", "forbidden_api"),  # the same call with the switch in ASCII scores 0
        ("fstring_switch", "lookup", "forbidden_api"),
        ("fullwidth_switch", "ScaledEmbedding", "wrong_values"),  # the grader's draws, whatever dtype the table has
        ("fstring_switch", "ScaledEmbedding", "no_gradient"),  # frozen when first seen: not the grader's to draw
        ("hidden_bias", "TiedLMHead", "forbidden_api"),  # without the server hook: has_bias, 0
        ("hidden_bias", "lookup", "forbidden_api"),
    ],
)
def test_no_attack_gains(batch, name, exercise, diagnosis):
    result = by_id(batch["reports"][name])[exercise]
    assert (result["passed"], result["score"], result["diagnosis"]) == (False, 0, diagnosis), result
    if exercise == "TiedLMHead":
        assert "reaches into the grader's machinery" in result["message"]
        assert "what its modules hold" in result["best_effort"]
    elif diagnosis == "forbidden_api":
        assert "switches off torch's function dispatch" in result["message"]


def test_a_module_pass_says_its_structure_is_the_kernels_word(batch):
    classmate = by_id(batch["reports"]["classmate"])
    assert all("what its modules hold" in classmate[e]["best_effort"] for e in ("ScaledEmbedding", "TiedLMHead"))
    assert "what its modules hold" not in classmate["lookup"]["best_effort"]


def test_what_a_student_raises_is_clean_in_every_export(batch):
    report = batch["reports"]["hidden_bias"]
    said = by_id(report)["one_hot_lookup"]["message"] + report["errors"][0]["message"]
    assert "ValueError" in said and "evil.example" in said
    for bad in ("\x1b", "\u202e", "\u061c", "\U000e0041", "\u200b", "\ud800"):
        assert bad not in said
    table = report_markdown(report)
    assert "![x](" not in table and "[click](" not in table and "a\\\\\\|b" in table and "<b>" not in table
    gradescope = report_gradescope(report)
    assert "\\u001b" not in gradescope and "\u202e" not in gradescope
    json.dumps(report, ensure_ascii=False).encode("utf-8")  # every text encodes: no lone surrogate


# ---- without a kernel ------------------------------------------------------------------------------------

REACHES = [
    "from helpers import (\n    grading,\n)",
    "from \uff48\uff45\uff4c\uff50\uff45\uff52\uff53.\uff47\uff52\uff41\uff44\uff49\uff4e\uff47 import serve",
    "import helpers as h\nserver = h.grading.serve",
    "from helpers import \\\n    grading",
    "x = 1; from helpers import grading",
    "import helpers.grading",
    "get_ipython().course_answer",
    'f"{helpers.grading}"',
]
INNOCENT = [
    "# from helpers import grading",
    "text = 'helpers.grading'",
    "grading_scale = 1.0  # degrading",
    "from helpers import check",
]
SWITCHES = [
    "torch._C.\uff24isableTorchFunction()",
    'f"{torch._C.DisableTorchFunction().__enter__()}"',
    MODE_EXITED,
    "with torch._C._ExcludeDispatchKeyGuard(keys):\n    pass",
]


@pytest.mark.parametrize("source", REACHES)
def test_a_reach_into_the_grader_is_seen_as_python_reads_it(source):
    assert reaches_grader(code_only(source))


@pytest.mark.parametrize("source", INNOCENT)
def test_a_comment_a_string_or_a_name_is_no_reach(source):
    assert not reaches_grader(code_only(source))


@pytest.mark.parametrize("source", SWITCHES)
def test_a_switch_is_seen_as_python_reads_it(source):
    assert DISPATCH_OFF.search(code_only(source))


def test_the_rules_stay_linear():
    for source in (
        "\n" * 200_000,
        "import " * 100_000,
        "(" * 100_000 + "from a import b " * 10_000,
        'f"' + "{" * 10**5,
    ):
        started = time.perf_counter()
        reaches_grader(code_only(source))
        DISPATCH_OFF.search(code_only(source))
        assert time.perf_counter() - started < 2.0


def test_escapes_for_each_export():
    hostile = "\x1b[31m\u202e\u061c\U000e0041\u200b\ud800 ![x](http://e/p.png) a\\|b"
    for text in (plain(hostile), clean(hostile), markdown(hostile)):
        assert not any(c in text for c in "\x1b\u202e\u061c\U000e0041\u200b\ud800")
        text.encode("utf-8")
    assert "\\[" in markdown(hostile) and "a\\\\\\|b" in markdown(hostile)
    assert clean("two\nlines") == "two\nlines" and plain("caf\udce9") == "caf\\xe9"  # a file name's byte
    assert csv_field("\t=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0"


def test_several_folders_named_are_one_vote_each(tmp_path):
    """`grade submissions/*`: a student's folder is one vote, its loose notebooks included."""
    (tmp_path / "mallory").mkdir()
    for i in range(3):  # three different chapter 01 notebooks, loose in her folder
        write_notebook(tmp_path / "mallory" / f"v{i}.ipynb", [HEAD, RIGHT_LOOKUP, f"{RIGHT_ONE_HOT}  # {i}"])
    for name in ("alice", "bob"):
        (tmp_path / name).mkdir()
        write_notebook(tmp_path / name / "02.ipynb", [HEAD, f"{RIGHT_SCALE}  # {name}'s"])
    found, _ = grade.collect([str(tmp_path / name) for name in ("mallory", "alice", "bob")])
    assert grade.class_chapters(found, grade.exercise_table()) == {2}


def test_aten_s_own_embedding_backward_is_forbidden():
    """`torch.ops.aten.embedding_dense_backward(grad_out, ids, V, -1, False)` is the answer, not an implementation."""
    import torch

    def aten_backward(grad_out, ids, vocab_size, padding_idx=None):
        pad = -1 if padding_idx is None else padding_idx
        return torch.ops.aten.embedding_dense_backward(grad_out, ids, vocab_size, pad, False)

    result = check("embedding_backward", aten_backward)
    assert not result.passed and result.diagnosis == "forbidden_api", result


def test_a_reply_naming_many_types_makes_few_classes():
    """200,000 objects of distinct type names (or namedtuples) in one reply: a class each would cost the grader
    tens of seconds per reply; past MAX_KINDS classes they are plain Opaque objects and tuples."""
    tree = {"list": [{"list": [{"object": f"T{i}_{j}"} for i in range(9_000)]} for j in range(3)]}
    tree["list"].append({"list": [{"named": f"N{i}", "fields": ["a"], "values": [i]} for i in range(2_000)]})
    decoded = wire.Decoder({}, {"cpu"}, [wire.Budget(2**30)], {}).value(tree, lambda e: None, lambda e, d: None)
    assert type(decoded[2][-1]) is wire.Opaque and decoded[3][-1] == (1999,)
    assert len({type(v) for part in decoded[:3] for v in part}) <= wire.MAX_KINDS + 1
    # the allowance is the reply's: the next reply's ndarray is still an ndarray, whatever this one named
    honest = wire.Decoder({}, {"cpu"}, [wire.Budget(2**30)], {}).value(
        {"object": "ndarray"}, lambda e: None, lambda e, d: None
    )
    assert type(honest).__name__ == "ndarray"


def test_the_cells_for_a_person_to_look_at_read_code_as_python_does():
    cells = [
        "from helpers import (\n    grading,\n)",
        "m = importlib.import_module(name)",
        "f = inspect.currentframe().f_back",
    ]
    notes = suspicious(list(enumerate(cells, 1)))
    assert [n["cell"] for n in notes] == [1, 2, 3], notes
    assert not suspicious([(3, "model.eval()\nfast = torch.compile(model)  # eval(...)")])


def test_gradescope_names_the_graded_notebook_escaped(tmp_path, monkeypatch):
    """Several notebooks uploaded: the output names the one graded, as plain text."""
    (tmp_path / "submission").mkdir()
    for name in ("a\u202eevil\x1b[2J.ipynb", "z.ipynb"):
        write_notebook(tmp_path / "submission" / name, [HEAD])

    def graded(command, **kwargs):  # what helpers.grade writes, without a kernel
        (tmp_path / "results" / "results.json").write_text(json.dumps({"score": 0, "output": "ran", "tests": []}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(export.subprocess, "run", graded)
    monkeypatch.setattr(export, "sandbox_works", lambda: True)
    output = export.run_autograder(tmp_path, ["01"])["output"]
    assert output.startswith("Graded a evil [2J.ipynb;") and "\x1b" not in output and "\u202e" not in output


DECOY_PRODUCT = """\
def rope_from_shift_matrix(x, positions=None, base=10000.0):
    d, T = x.shape[-1], x.shape[-2]
    torch.eye(d, device=x.device) @ torch.eye(d, device=x.device)  # a decoy (d, d) product, its result unused
    positions = torch.arange(T, device=x.device) if positions is None else positions
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = positions.to(torch.float64)[:, None] * theta
    cos, sin = angles.cos().float(), angles.sin().float()
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2).to(x.dtype)"""


DECOY_ONE_HOT = """\
def one_hot_lookup(weight, ids):
    spare = torch.eye(2) @ torch.eye(2)  # a decoy product, never used
    return weight[ids]"""
FED_BACK_ONE_HOT = """\
def one_hot_lookup(weight, ids):
    unused = (weight[:2] @ weight[:2].T).sum()  # a product of the table that feeds nothing returned
    return weight[ids] + 0 * ids[..., None]"""


@pytest.mark.parametrize(
    "exercise, code, words",
    [
        ("rope_from_shift_matrix", DECOY_PRODUCT, "their result is not what it returns"),
        ("one_hot_lookup", DECOY_ONE_HOT, "its products (matmul) never multiply"),
        ("one_hot_lookup", FED_BACK_ONE_HOT, "never multiply the ids' one-hot or the table into the rows it returns"),
    ],
)
def test_a_decoy_matrix_product_is_not_the_method(exercise, code, words):
    """An exercise whose point is a matrix product (RoPE as x @ M_m; a lookup as one-hot @ table) counts only a
    product one of whose operands is made from the inputs and whose result is what the call returns: a product
    made beside the real work and thrown away is named, and fails."""
    import torch

    namespace = {"torch": torch}
    exec(code, namespace)
    result = check(exercise, namespace[exercise])
    assert not result.passed and result.diagnosis in ("method_not_used", "not_a_matrix_product"), str(result)
    assert words in result.message, result.message
