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


def scaled_embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The lookup of chapter 01, times sqrt(d_model) (Vaswani et al. 2017, §3.4)."""
    return weight[ids] * math.sqrt(weight.shape[1])  # (V, d)[(...)] -> (..., d)


class ScaledEmbedding(nn.Module):
    """Token embedding multiplied by sqrt(d_model), as in Vaswani et al. 2017, §3.4.

    The factor matters when the table starts small (std 1/sqrt(d), as when it
    is tied to the output layer): it brings the token vectors up to the size of
    the positional encodings they are added to. Chapter 02 shows the numbers."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)  # the (V, d) table, a trainable Parameter
        self.scale = math.sqrt(d_model)  # a Python float: no device to keep in sync

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids) * self.scale  # (...) -> (..., d)


def tied_logits(weight: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Logits of a head tied to an embedding table: one score per vocabulary row."""
    return h @ weight.T  # (..., d) @ (d, V) -> (..., V)


class TiedLMHead(nn.Module):
    """The pre-softmax projection that shares the embedding's matrix
    (Vaswani et al. 2017, §3.4; Press & Wolf 2017). No bias, no copy: the
    head's weight IS the embedding's Parameter, so one gradient step moves both."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.weight = embedding.weight  # the same Parameter object, registered here too (not a copy)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.weight)  # (..., d) -> (..., V): h @ weight.T


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
