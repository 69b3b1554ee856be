"""What the grader's tests share: notebooks made from cells, and a batch graded once per run.

A batch of notebooks costs tens of seconds of both cores; pytest-xdist would
grade it once per worker that runs one of its tests. `once_per_run` grades it
in whichever worker asks first, and the others read its result (JSON).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from filelock import FileLock

from helpers import grade

# Where the machine cannot sandbox, the grader's other tests run without the sandbox (tests/test_sandbox.py skips).
NO_SANDBOX = [] if grade.sandbox_problem() is None else ["--no-sandbox"]
ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "01_lookup_tables.ipynb"
# Cells of tiny chapter 01 notebooks: they do lookup and one_hot_lookup, and nothing else.
HEAD = "import torch\nimport torch.nn.functional as F\n\nfrom helpers import check"
RIGHT_LOOKUP = "def lookup(weight, ids):\n    return weight[ids]"
WRONG_LOOKUP = "def lookup(weight, ids):\n    return weight.T[ids]  # columns, not rows"
RIGHT_ONE_HOT = "def one_hot_lookup(weight, ids):\n    return F.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight"


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {ex["id"]: ex for ex in report["exercises"]}


def passed(report: dict[str, Any]) -> set[str]:
    return {ex["id"] for ex in report["exercises"] if ex["passed"]}


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook whose first cell is text, so that code cell k is notebook cell k + 1."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# A submission")] + [
        nbformat.v4.new_code_cell(source) for source in cells
    ]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)
    return path


def fingerprint(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def tree(folder: Path) -> dict[str, str]:
    """Every entry under `folder`: a file's hash, a link's target, or the kind of thing it is."""
    entries = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            entries[str(path)] = f"link to {os.readlink(path)}"
        elif path.is_file():
            entries[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            entries[str(path)] = "folder" if path.is_dir() else "other"
    return entries


def once_per_run(tmp_path_factory: Any, name: str, compute: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """`compute(folder)` once per test run, whichever xdist worker asks first; its result, as JSON."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # one process: nothing to share
        return json.loads(json.dumps(compute(tmp_path_factory.mktemp(name))))
    shared = tmp_path_factory.getbasetemp().parent  # the workers' common temporary folder
    result = shared / f"{name}-{run}.json"
    with FileLock(str(result) + ".lock"):
        if not result.exists():
            folder = shared / f"{name}-{run}"
            folder.mkdir()
            result.write_text(json.dumps(compute(folder)))
    return json.loads(result.read_text())


# A notebook's last cell that forges its kernel's replies (issue 34): a ScaledEmbedding that forgets
# sqrt(d_model), whose server reports each table divided by sqrt(d) and each gradient times sqrt(d), so
# that a grader computing its reference from what the kernel reports would find nothing wrong.
FORGED_SCALE = """\
import math
import torch
from torch import nn
from helpers.grading import wire


class ScaledEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)

    def forward(self, ids):
        with torch.no_grad():
            self.emb.weight.mul_(1.0)  # a new version: the table is reported again after every call
        return self.emb(ids)  # no * sqrt(d_model)


_entry = wire.tensor_entry


def tensor_entry(tensor, key, tensors, token=None, data=True):
    if isinstance(tensor, nn.Parameter) and tensor.dim() == 2:  # the table, as the grader would expect it
        tensor = nn.Parameter(tensor.detach() / math.sqrt(tensor.shape[1]))
    elif token is None and tensor.dim() == 2:  # a gradient
        tensor = tensor * math.sqrt(tensor.shape[1])
    return _entry(tensor, key, tensors, token, data)


wire.tensor_entry = tensor_entry"""
RIGHT_SCALE = """\
import math
from torch import nn


class ScaledEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb, self.scale = nn.Embedding(vocab_size, d_model), math.sqrt(d_model)

    def forward(self, ids):
        return self.emb(ids) * self.scale"""


# A ScaledEmbedding that forgets sqrt(d_model), honestly: issue 45's forgeries build on it.
NO_SCALE = """\
import math
import torch
from torch import nn


class ScaledEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)

    def forward(self, ids):
        return self.emb(ids)  # no * sqrt(d_model)
"""


def forging(kind: str) -> str:
    """NO_SCALE, its kernel reporting every 2-D Parameter as `kind` ("complex": real parts the table divided by
    sqrt(d), as round 3's forgery; "meta": shapes alone), so that the grader would neither own nor draw it."""
    said = {
        "complex": "nn.Parameter(torch.complex(tensor.detach() / math.sqrt(tensor.shape[1]), torch.zeros_like(tensor.detach())))",
        "meta": "nn.Parameter(tensor.detach().to('meta'))",
    }[kind]
    return (
        NO_SCALE
        + f"""
from helpers.grading import wire

_entry = wire.tensor_entry


def tensor_entry(tensor, key, tensors, token=None, data=True):
    if isinstance(tensor, nn.Parameter) and tensor.dim() == 2 and tensor.is_floating_point():
        tensor = {said}
    return _entry(tensor, key, tensors, token, data)


wire.tensor_entry = tensor_entry
"""
    )


# A wrong ScaledEmbedding (tanh) whose table starts as zeros and one subnormal: draws at the kernel's scale blind the values probe.
BLINDING_INIT = """\
import math
import torch
from torch import nn


class ScaledEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        with torch.no_grad():
            self.emb.weight.zero_()
            self.emb.weight[0, 0] = 1e-40
        self.d_model = d_model

    def forward(self, ids):
        return torch.tanh(self.emb(ids)) * math.sqrt(self.d_model)
"""
