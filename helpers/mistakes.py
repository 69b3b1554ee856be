"""The catalogue of known-wrong code: how a check names a mistake.

Each function here is a real mistake, written the way students (and popular
tutorials) write it. When a submission's output is wrong, the check runs the
exercise's mistakes on the same inputs; the one that reproduces the output
names the diagnosis, and its docstring is the message the student reads.
So every docstring speaks to the student and says what to do instead.
"""

from __future__ import annotations

import math  # noqa: F401  (used by later chapters)

import torch
import torch.nn.functional as F  # noqa: F401
from torch import nn  # noqa: F401

# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def lookup_transposed(weight: torch.Tensor, ids: torch.Tensor) -> list[torch.Tensor]:
    """You read the table as (d_model, vocab): you picked columns of the
    weight, not rows. nn.Embedding stores one row per token, shape
    (vocab_size, d_model), so token i's vector is weight[i]."""
    columns_last = weight.T[ids]  # (..., V): weight.T[ids] or one_hot(ids, d) @ weight.T
    columns_first = weight[:, ids]  # (V, ...)
    return [columns_last, columns_first]


# ---------------------------------------------------------------------------
# Chapter 02: scaling and weight tying
# ---------------------------------------------------------------------------


def scaled_embedding_missing_scale(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Your module returns the embedding rows as they are: the factor
    sqrt(d_model) is missing. Vaswani et al. (§3.4) multiply the looked-up
    vectors by sqrt(d_model) in forward: `return self.embedding(ids) *
    math.sqrt(self.d_model)`. (Scaling the weight once in __init__ is not the
    same: the optimizer then trains the scaled table.)"""
    return weight[ids]


def scaled_embedding_divided_by_scale(weight: torch.Tensor, ids: torch.Tensor) -> list[torch.Tensor]:
    """Your module divides the embedding rows by sqrt(d_model) (or multiplies
    by d_model ** -0.5); Vaswani et al. multiply by it. The factor makes
    small token vectors bigger, to match the positional encodings: use
    `* math.sqrt(d_model)`."""
    rows = weight[ids]
    return [rows / math.sqrt(weight.shape[1]), rows * weight.shape[1] ** -0.5]


def scaled_embedding_wrong_scale(weight: torch.Tensor, ids: torch.Tensor, scale: float) -> torch.Tensor:
    """Your module multiplies the embedding rows by a constant, but not by
    sqrt(d_model): d_model itself, sqrt(vocab_size), sqrt(d_model / 2), a
    log, a rounded number...? The factor is `math.sqrt(d_model)`, where
    d_model is the width of each vector (the embedding's second dimension)."""
    return weight[ids] * scale  # `scale` is fitted to the student's output by least squares


def tied_head_with_bias(weight: torch.Tensor, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Your head adds a bias: its logits are h @ W.T plus a constant vector of
    V numbers (nn.Linear adds one unless you pass bias=False). This exercise
    asks for a bias-free head, like GPT-2's lm_head: `F.linear(h,
    self.weight)`, or `nn.Linear(d_model, vocab_size, bias=False)` whose
    weight you then replace by the embedding's."""
    return h @ weight.T + bias  # `bias` is fitted to the student's output (its mean offset)


def tied_head_probabilities(weight: torch.Tensor, h: torch.Tensor) -> list[torch.Tensor]:
    """Your head applies a softmax (or log_softmax): it returns probabilities,
    not logits. A language-model head returns the raw scores h @ W.T;
    `F.cross_entropy` applies log_softmax itself, and sampling code applies
    softmax where it needs it."""
    logits = h @ weight.T
    return [logits.softmax(-1), logits.log_softmax(-1)]


def tied_head_copied(weight: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Your head does not use the embedding's Parameter itself but a copy of
    it (`.clone()`, `.detach()`, `.data`, `.T`, `nn.Parameter(embedding.weight)`,
    `copy_` into a new nn.Linear...). A copy is two matrices that start equal
    and then drift apart: training updates one, not the other. Tie by
    assignment, so both names point to ONE Parameter: `self.weight =
    embedding.weight` (or `self.proj.weight = embedding.weight`)."""
    return h @ weight.detach().clone().T


# (end of chapter 02)


# ---------------------------------------------------------------------------
# Chapter 03: sinusoidal encodings
# ---------------------------------------------------------------------------

# (end of chapter 03)


# ---------------------------------------------------------------------------
# Chapter 04: learned positions and BERT
# ---------------------------------------------------------------------------

# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# (end of chapter 05)
