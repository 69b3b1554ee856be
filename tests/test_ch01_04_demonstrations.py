"""Chapters 01-04: the cells that run the student's code outside its check can fail.

Chapter 04's GPT-2 cell runs the student's `LearnedPositionalEmbedding` itself (not
`solution_or_reference`, which hands a failing module's cell the reference and so printed ✓
for any forward): a wrong forward must print ✗, a stub must say it does not run, and
neither may raise. The cell is taken from the master and run as the notebook runs it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import library, reference

ROOT = Path(__file__).resolve().parent.parent


def notebook_cell(chapter: str, marker: str) -> str:
    """The code of the one cell of a chapter's master that contains `marker`."""
    text = (ROOT / "solutions" / chapter).read_text()
    (cell,) = [c for c in re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, re.S) if marker in c]
    return cell


class StartsAtRowOne(reference.LearnedPositionalEmbedding):
    """Adds rows 1..T: every token one position too far."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.position_embeddings(
            torch.arange(1, x.shape[1] + 1, device=x.device).clamp(max=self.max_len - 1)
        )


class BatchAxisAsLength(reference.LearnedPositionalEmbedding):
    """Reads x.shape[0] (B = 1 here) as the length: adds row 0 to every token."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.position_embeddings(torch.arange(x.shape[0], device=x.device))


class Stub(nn.Module):
    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        raise NotImplementedError("your code here")


def your_forward_line(cls: type[nn.Module], capsys) -> str:
    """Chapter 04's left-padding cell run with `cls` as the student's class: its last line."""
    cell = notebook_cell("04_learned.md", "your forward from each row's first real token")
    namespace = {"torch": torch, "nn": nn, "F": F, "library": library, "LearnedPositionalEmbedding": cls}
    exec(cell, namespace)
    lines = capsys.readouterr().out.strip().splitlines()
    if lines and lines[-1].startswith("skipped"):
        pytest.skip(lines[-1])
    return lines[-1]


def test_a_right_forward_prints_a_tick(capsys):
    assert your_forward_line(reference.LearnedPositionalEmbedding, capsys).startswith("✓ your forward")


@pytest.mark.parametrize("wrong", [StartsAtRowOne, BatchAxisAsLength])
def test_a_wrong_forward_prints_a_cross_and_the_difference(wrong, capsys):
    line = your_forward_line(wrong, capsys)
    assert line.startswith("✗ your forward") and "max |difference|" in line, line


def test_a_stub_says_it_does_not_run_and_the_cell_does_not_raise(capsys):
    line = your_forward_line(Stub, capsys)
    assert line.startswith("✗ your forward in GPT-2 does not run: NotImplementedError"), line
