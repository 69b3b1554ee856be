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


class LearnedPositionalEmbedding(nn.Module):
    """Learned absolute positions, as in BERT and GPT-2: a trainable
    (max_len, d_model) table with one row per position, added to the input.
    The table has no row past max_len - 1, so a longer input is refused."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.position_embeddings = nn.Embedding(max_len, d_model)  # a Parameter: trained like the token table

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]  # x: (B, T, d)
        if T > self.max_len:
            raise ValueError(f"Cannot forward a sequence of length {T}: max_len is only {self.max_len}. Build the module with a larger max_len.")
        positions = torch.arange(T, device=x.device)  # on x's device: a bare torch.arange(T) lives on the CPU
        return x + self.position_embeddings(positions)  # (B, T, d) + (T, d): the same rows for every sequence


class BertEmbeddings(nn.Module):
    """BERT's embedding block (Devlin et al. 2019, §3.2 and Figure 2):
    dropout(LayerNorm(token + position + segment)). The submodule names are
    HF transformers' own, so a pretrained `embeddings.*` state_dict loads."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        layer_norm_eps: float = 1e-12,
        hidden_dropout_prob: float = 0.1,
        pad_token_id: int = 0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)  # [PAD]'s row gets no gradient
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)  # segment A = 0, segment B = 1
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)  # BERT's eps is 1e-12, PyTorch's default 1e-5
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.shape[1]  # input_ids: (B, T)
        if T > self.position_embeddings.num_embeddings:
            raise ValueError(f"Cannot embed {T} tokens: max_position_embeddings is only {self.position_embeddings.num_embeddings}.")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # one segment: every token belongs to sentence A
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)  # (B, T, d)
        return self.dropout(self.LayerNorm(x))  # dropout after the norm; a no-op in eval()


# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# (end of chapter 05)
