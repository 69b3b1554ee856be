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
