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


# LearnedPositionalEmbedding: each takes the input x (B, T, d) and the
# module's (max_len, d) table, and returns what the mistaken module outputs.


def learned_same_row(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """Every position got the same vector: you looked up a single position id
    (0, or T) instead of one id per position. Look up
    `torch.arange(T, device=x.device)`, which gives a (T, d_model) block of
    rows, and add it to x."""
    T = x.shape[1]
    return [x + table[0], x + table[T - 1], x + table[min(T, len(table) - 1)]]


def learned_batch_seq_confusion(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """You counted positions along the batch axis: x.size(0) is the batch
    size B here, not the sequence length (the layout is (B, T, d), batch
    first; the PyTorch tutorial's seq-first (T, B, d) layout is not). Take
    T = x.size(1) and add the (T, d_model) rows to every sequence."""
    B = x.shape[0]
    return [x + table[:B].unsqueeze(1)]  # (B, T, d) + (B, 1, d): sequence b gets position b everywhere


def learned_position_offset(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """Your positions start at 1 (or 2, RoBERTa's padding_idx + 1 offset),
    not at 0: the first token must get row 0 of the table. Use
    torch.arange(T), which counts 0, 1, ..., T-1."""
    T = x.shape[1]
    return [x + table[k : k + T] for k in (1, 2) if k + T <= len(table)]


# BertEmbeddings: each takes the pretrained weights (the five `embeddings.*`
# tensors, keyed as in HF's state_dict), input_ids (B, T), token_type_ids
# (B, T) and the eps the module was built with.


def _bert_parts(w: dict[str, torch.Tensor], ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor | None = None):
    """(word, position, segment) vectors, each broadcastable to (B, T, d)."""
    positions = torch.arange(ids.shape[1], device=ids.device) if positions is None else positions
    return w["word_embeddings.weight"][ids], w["position_embeddings.weight"][positions], w["token_type_embeddings.weight"][types]


def _bert_norm(w: dict[str, torch.Tensor], x: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], w["LayerNorm.weight"], w["LayerNorm.bias"], eps)


def bert_layernorm_eps(w, ids, types, eps) -> list[torch.Tensor]:
    """Your LayerNorm's eps is not the `layer_norm_eps` you were given. BERT
    uses 1e-12; `nn.LayerNorm(hidden_size)` quietly uses PyTorch's default,
    1e-5. LayerNorm divides by sqrt(var + eps), and the variance of the summed
    embeddings is small (about 0.002 to 0.03 in MiniLM), so 1e-5 is not
    negligible. Write `nn.LayerNorm(hidden_size, eps=layer_norm_eps)`."""
    word, pos, seg = _bert_parts(w, ids, types)
    return [_bert_norm(w, word + pos + seg, other) for other in (1e-5, 1e-6, 1e-3, 1e-12) if other != eps]


def bert_missing_token_type(w, ids, types, eps) -> list[torch.Tensor]:
    """The segment (token type) embedding is missing from your sum, or you
    ignore the `token_type_ids` you are given. BERT adds
    token_type_embeddings(token_type_ids), 0 for sentence A and 1 for
    sentence B, to the word and position vectors before the LayerNorm;
    only when token_type_ids is None do you use all zeros."""
    word, pos, seg = _bert_parts(w, ids, types)
    segment_a = w["token_type_embeddings.weight"][0]
    return [_bert_norm(w, word + pos, eps), _bert_norm(w, word + pos + segment_a, eps)]


def bert_missing_layernorm(w, ids, types, eps) -> list[torch.Tensor]:
    """You return the raw sum of the three embeddings: the LayerNorm is
    missing. BERT normalises the sum, self.LayerNorm(word + position +
    segment), and only then applies dropout."""
    word, pos, seg = _bert_parts(w, ids, types)
    return [word + pos + seg]


def bert_layernorm_order(w, ids, types, eps) -> list[torch.Tensor]:
    """Your LayerNorm sees only part of the sum: you normalise before adding
    everything (e.g. LayerNorm(word) + position + segment). Add the three
    embeddings first, then apply self.LayerNorm to the whole sum, then
    dropout."""
    word, pos, seg = _bert_parts(w, ids, types)
    return [
        _bert_norm(w, word, eps) + pos + seg,
        _bert_norm(w, word + pos, eps) + seg,
        _bert_norm(w, word + seg, eps) + pos,
        _bert_norm(w, word, eps) + _bert_norm(w, pos, eps).expand_as(word) + _bert_norm(w, seg, eps),
    ]


def bert_unbiased_variance(w, ids, types, eps) -> list[torch.Tensor]:
    """Your hand-written LayerNorm divides by the unbiased variance
    (`x.var(-1)` divides by d - 1, that is torch.var's default). LayerNorm
    uses the biased one, dividing by d: `x.var(-1, unbiased=False)`, or
    simply nn.LayerNorm(hidden_size, eps=layer_norm_eps)."""
    word, pos, seg = _bert_parts(w, ids, types)
    x = word + pos + seg
    normed = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps)
    return [normed * w["LayerNorm.weight"] + w["LayerNorm.bias"]]


def bert_scaled_tokens(w, ids, types, eps) -> list[torch.Tensor]:
    """You multiplied the word embeddings by sqrt(hidden_size), as the
    original Transformer does (chapter 02). BERT does not scale: it adds the
    three embeddings as they are and lets the LayerNorm fix the scale."""
    word, pos, seg = _bert_parts(w, ids, types)
    root = math.sqrt(word.shape[-1])
    return [_bert_norm(w, word * root + pos + seg, eps), _bert_norm(w, (word + pos + seg) * root, eps)]


def bert_same_row(w, ids, types, eps) -> list[torch.Tensor]:
    """Every token got the same position vector: you looked up one position
    id instead of `torch.arange(T, device=input_ids.device)`."""
    zeros = torch.zeros(ids.shape[1], dtype=torch.long, device=ids.device)
    word, pos, seg = _bert_parts(w, ids, types, positions=zeros)
    return [_bert_norm(w, word + pos + seg, eps)]


def bert_batch_seq_confusion(w, ids, types, eps) -> list[torch.Tensor]:
    """You counted positions along the batch axis: input_ids.size(0) is the
    batch size B; the sequence length is input_ids.size(1)."""
    word, _, seg = _bert_parts(w, ids, types)
    pos = w["position_embeddings.weight"][: ids.shape[0]].unsqueeze(1)  # (B, 1, d)
    return [_bert_norm(w, word + pos + seg, eps)]


def bert_position_offset(w, ids, types, eps) -> list[torch.Tensor]:
    """Your positions start at 1 (or at 2, RoBERTa's padding_idx + 1), not
    at 0: BERT's first token, [CLS], takes row 0 of position_embeddings."""
    T = ids.shape[1]
    faces = []
    for k in (1, 2):
        if k + T > len(w["position_embeddings.weight"]):
            continue
        word, pos, seg = _bert_parts(w, ids, types, positions=torch.arange(k, k + T, device=ids.device))
        faces.append(_bert_norm(w, word + pos + seg, eps))
    return faces


# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# (end of chapter 05)
