"""Reference implementations: what "right" means for every exercise.

Each one is meant to be read in a minute, top to bottom, as teaching code.
Sources: Vaswani et al. 2017 ("Attention Is All You Need", §3.4-3.5),
Press & Wolf 2017 (weight tying), Devlin et al. 2019 (BERT), Su et al. 2021
(RoFormer), Press et al. 2022 (ALiBi), and HF transformers' conventions.
Shapes: B batch, T sequence length, d (d_model), V vocabulary, H heads.
"""

from __future__ import annotations

import math  # noqa: F401  (used by later chapters)

import torch
import torch.nn.functional as F  # noqa: F401
from torch import nn  # noqa: F401

# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def lookup(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """out[..., :] = weight[ids[...]]: an embedding is row selection."""
    return weight[ids]  # (V, d) indexed by (...) -> (..., d)


def one_hot_lookup(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The same rows, as a matrix product: one_hot(ids) @ weight."""
    one_hot = torch.nn.functional.one_hot(ids, num_classes=weight.shape[0])  # (...) -> (..., V)
    return one_hot.to(weight.dtype) @ weight  # (..., V) @ (V, d) -> (..., d)


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
