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

from helpers import reference

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


def _frequencies(d: int, base: float, exponent: str = "2i/d", dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """ω_i = base^(-2i/d), one per (sin, cos) or rotated pair, i < ceil(d/2), with the
    exponent written right ("2i/d") or in one of the usual wrong ways. Chapters 03 and 05."""
    i = torch.arange((d + 1) // 2, dtype=dtype, device=device)
    exponents = {
        "2i/d": -2 * i / d,
        "i/d": -i / d,  # forgot the 2
        "4i/d": -4 * i / d,  # arange(0, d, 2) / (d/2)
        "+2i/d": 2 * i / d,  # base ** (2i/d) used as the frequency: 1/ forgotten
        "integer": torch.zeros_like(i),  # arange(0, d, 2) // d: integer division, all zeros
    }
    return base ** exponents[exponent]


def _table(max_len: int, d_model: int, base: float = 10000.0, *, layout: str = "interleaved", exponent: str = "2i/d", first: int = 0) -> torch.Tensor:
    """A sinusoidal table built with one mistake: another layout, exponent or first position."""
    positions = torch.arange(first, first + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    if exponent == "column/d":  # the column index j in the exponent: the cos partner gets (2i + 1)/d
        j = torch.arange(d_model, dtype=torch.float64)
        angles = positions / base ** (j / d_model)  # (max_len, d): one frequency per column
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = angles[:, 0::2].sin(), angles[:, 1::2].cos()
        return pe.float()
    angles = positions * _frequencies(d_model, base, exponent)  # (max_len, ceil(d/2))
    sin, cos = angles.sin(), angles.cos()[:, : d_model // 2]
    if layout == "halves":  # sin block, then cos block
        return torch.cat([sin[:, : d_model - d_model // 2], cos], dim=-1).float()
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    if layout == "swapped":  # cos in even columns, sin in odd ones
        pe[:, 0::2], pe[:, 1::2] = angles.cos(), angles.sin()[:, : d_model // 2]
    else:
        pe[:, 0::2], pe[:, 1::2] = sin, cos
    return pe.float()


def sinusoidal_sin_cos_swapped(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Your sin and cos columns are swapped: cos is in the even columns and
    sin in the odd ones. Vaswani et al. (§3.5) put sin first:
    PE[pos, 2i] = sin(pos / base^(2i/d)) and PE[pos, 2i+1] = cos(pos / base^(2i/d)).
    (Row 0 is a quick test: it must read 0, 1, 0, 1, ...)"""
    return _table(max_len, d_model, base, layout="swapped")


def sinusoidal_concatenated_halves(max_len: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """You laid out sin in the first half of the columns and cos in the second
    (torch.cat([sin, cos], dim=-1), the fairseq/tensor2tensor layout); this
    exercise interleaves them: sin in even columns, cos in odd ones, so each
    wave's (sin, cos) pair sits in adjacent columns (2i, 2i+1). Fill them with
    `pe[:, 0::2] = sin` and `pe[:, 1::2] = cos`."""
    table = _table(max_len, d_model, base, layout="halves")
    half = d_model - d_model // 2
    return [table, torch.cat([table[:, half:], table[:, :half]], dim=-1)]  # sin first or cos first


def sinusoidal_wrong_base(max_len: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your frequencies use the wrong base: 1000 instead of 10000 (a typo
    that a popular tutorial carries), or a hard-coded 10000 where the
    `base` argument asked for another. The wavelengths run from 2π up to
    base·2π: compute ω_i = base^(-2i/d_model) from the argument."""
    return [_table(max_len, d_model, 1000.0), _table(max_len, d_model, 10000.0)]


def sinusoidal_wrong_exponent(max_len: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your frequency exponent is off. The paper's is 2i/d_model, where i
    counts the (sin, cos) PAIRS: columns 2i and 2i+1 share the frequency
    base^(-2i/d). Common slips: i/d (the 2 dropped), the column index j in
    the exponent (so the cos column gets (2i+1)/d), 4i/d (`arange(0, d, 2)`
    times 2 again), or an integer division `2 * i // d` that rounds every
    exponent to 0."""
    return [_table(max_len, d_model, base, exponent=e) for e in ("i/d", "column/d", "4i/d", "integer")]


def sinusoidal_all_zeros(max_len: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your table is all zeros (or its sin or its cos columns are): were the
    values computed and never stored? JAX's `pe.at[:, 0::2].set(...)` and
    torch's `pe.index_copy(...)`, `pe.index_put(...)`, `pe.scatter(...)`
    return a NEW array and leave `pe` as it was: assign the result
    (`pe = pe.at[...].set(...)`), or write in place in torch
    (`pe[:, 0::2] = ...`)."""
    table = _table(max_len, d_model, base)
    sin_only, cos_only = table.clone(), table.clone()
    sin_only[:, 1::2], cos_only[:, 0::2] = 0.0, 0.0  # the other half was never stored
    return [torch.zeros(max_len, d_model), sin_only, cos_only]


def sinusoidal_position_offset(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Your positions start at 1: row pos holds the encoding of pos + 1.
    The first token is position 0, whose row reads sin 0 = 0, cos 0 = 1:
    use torch.arange(max_len), not torch.arange(1, max_len + 1)."""
    return _table(max_len, d_model, base, first=1)


SINUSOIDAL_TABLE_MISTAKES = {  # code -> a mistaken table(max_len, d_model, base)
    "sin_cos_swapped": sinusoidal_sin_cos_swapped,
    "concatenated_halves": sinusoidal_concatenated_halves,
    "wrong_base": sinusoidal_wrong_base,
    "wrong_exponent": sinusoidal_wrong_exponent,
    "all_zeros": sinusoidal_all_zeros,
    "position_offset": sinusoidal_position_offset,
}


# relative_shift_matrix -------------------------------------------------------
# Each takes (k, d_model, base) and returns the mistaken (d, d) matrix.


def _shift_matrix(k: float, d_model: int, base: float = 10000.0, *, exponent: str = "2i/d", layout: str = "interleaved") -> torch.Tensor:
    """A block-diagonal rotation like the reference's, with one mistake."""
    b = k * _frequencies(d_model, base, exponent)  # (d/2,) the angle each pair turns by
    i = torch.arange(d_model // 2)
    first, second = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d_model // 2)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[first, first], M[first, second], M[second, first], M[second, second] = b.cos(), b.sin(), -b.sin(), b.cos()
    return M.float()


def shift_sin_cos_swapped(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Each of your 2×2 blocks is the transpose of the right one: it is the
    matrix for a table with cos in the even columns (or, what is the same,
    the shift by -k: it maps PE[pos] to PE[pos - k]). With sin in column 2i
    and cos in 2i+1: new sin = cos(kω)·sin + sin(kω)·cos and
    new cos = -sin(kω)·sin + cos(kω)·cos, so the block is
    [[cos kω, sin kω], [-sin kω, cos kω]]."""
    return _shift_matrix(-k, d_model, base)


def shift_concatenated_halves(k: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your matrix rotates column i with column i + d/2: that is the
    matrix for a table laid out as two halves (sin block, cos block). This
    exercise's table interleaves: each (sin, cos) pair sits in columns
    (2i, 2i+1), so each 2×2 block sits on the diagonal at rows and columns
    2i and 2i+1."""
    return [_shift_matrix(k, d_model, base, layout="halves"), _shift_matrix(-k, d_model, base, layout="halves")]


def shift_wrong_base(k: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your rotation angles use the wrong base: 1000 instead of 10000, or a
    hard-coded 10000 where the `base` argument asked for another. Pair i
    turns by k·ω_i with ω_i = base^(-2i/d_model)."""
    return [_shift_matrix(k, d_model, 1000.0), _shift_matrix(k, d_model, 10000.0)]


def shift_wrong_exponent(k: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your rotation angles have the wrong exponent: pair i (columns 2i and
    2i+1) turns by k·base^(-2i/d_model), with i counting pairs, not columns
    (i/d, 4i/d or an integer division that rounds to 0 are the usual slips)."""
    return [_shift_matrix(k, d_model, base, exponent=e) for e in ("i/d", "4i/d", "integer")]


def shift_all_zeros(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Your matrix is all zeros: were the blocks computed and never stored?
    `M.index_put(...)`, `M.scatter(...)` or JAX's `M.at[...].set(...)` return
    a new array; assign their result, or write into M in place
    (`M[2*i, 2*i] = ...`)."""
    return torch.zeros(d_model, d_model)


def shift_off_by_one(k: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your matrix shifts by k + 1 or k - 1 positions instead of k: the angle
    of pair i must be exactly k·ω_i (a position offset crept in: arange(1, ...)
    or a k + 1 somewhere?)."""
    return [_shift_matrix(k + 1, d_model, base), _shift_matrix(k - 1, d_model, base)]


# PositionalEncoding, TokenAndPositionEmbedding ---------------------------------
# Each takes the input x (B, T, d) and the right (max_len, d) table and returns
# what the mistaken module outputs (in eval mode: no dropout).


def positional_same_row(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """Every position got the same vector: you added a single row of the
    table (PE[0], or PE[T]) instead of the first T rows. Slice the rows:
    `x + self.pe[:T]`, with T = x.size(1)."""
    T = x.shape[1]
    return [x + table[0], x + table[T - 1], x + table[min(T, len(table) - 1)]]


def positional_batch_seq_confusion(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """You counted positions along the batch axis: x.size(0) is the batch
    size B here, not the sequence length. The PyTorch tutorial's
    PositionalEncoding expects (T, B, d), sequence first; this course's
    modules take (B, T, d), batch first. Take T = x.size(1) and add
    `self.pe[:T]` (shape (T, d)), which broadcasts over the batch."""
    B = x.shape[0]
    return [x + table[:B].unsqueeze(1)]  # (B, T, d) + (B, 1, d): sequence b gets position b everywhere


def positional_offset(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Your positions start at 1: the first token got row 1 of the table.
    The first token is position 0: add `self.pe[:T]`, not `self.pe[1:T + 1]`."""
    return x + table[1 : x.shape[1] + 1]


def token_and_position_scaled_both(weight: torch.Tensor, ids: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """You multiplied the positional encoding by sqrt(d_model) too:
    (embedding(ids) + PE) * sqrt(d_model). Only the token vectors are scaled
    (chapter 02: the factor brings small token rows up to the size of the
    encoding, which is already of size 1 per entry). Scale first, then add:
    `embedding(ids) * math.sqrt(d_model) + pe[:T]`."""
    return (weight[ids] + pe) * math.sqrt(weight.shape[1])


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

# Shared machinery first: one RoPE with a knob per mistake, so each mistake
# below reads as "the right thing, with this one thing changed".


def _rotate_adjacent(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): adjacent pairs turned by 90 degrees."""
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    base: float = 10000.0,
    *,
    pairing: str = "half",
    frequencies: str | None = None,
    sign: float = 1.0,
    exponent: str = "2i/d",
    angle_dtype: torch.dtype = torch.float32,
    ignore_positions: bool = False,
) -> torch.Tensor:
    """RoPE on x (..., T, d) with one knob turned.
    pairing: which components form a pair ("half": i, i+d/2; "adjacent": 2i, 2i+1);
    frequencies: how the d/2 angles are laid over the d columns (default: the same as pairing)."""
    T, d = x.shape[-2], x.shape[-1]
    if positions is None or ignore_positions:
        positions = torch.arange(T, device=x.device)
    theta = _frequencies(d, base, exponent, torch.float32, x.device)
    angles = positions.to(angle_dtype)[..., None] * theta.to(angle_dtype)  # (T, d/2) or (B, T, d/2)
    if angles.dim() == 3:
        angles = angles.unsqueeze(1)  # (B, 1, T, d/2)
    if (frequencies or pairing) == "half":
        angles = torch.cat([angles, angles], dim=-1)
    else:
        angles = angles.repeat_interleave(2, dim=-1)
    cos, sin = angles.cos().float(), angles.sin().float()
    turn = _rotate_half if pairing == "half" else _rotate_adjacent
    return (x.float() * cos + sign * turn(x.float()) * sin).to(x.dtype)


def _cache(head_dim: int, max_len: int, base: float = 10000.0, *, layout: str = "half", exponent: str = "2i/d") -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), _frequencies(head_dim, base, exponent))
    angles = torch.cat([angles, angles], dim=-1) if layout == "half" else angles.repeat_interleave(2, dim=-1)
    return angles.cos().float(), angles.sin().float()


# rope_cache ------------------------------------------------------------------


def rope_cache_interleaved(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Your tables repeat each angle in adjacent columns (2i, 2i+1): this is
    the interleaved (Meta/GPT-J) layout; this exercise uses half-split
    (HF/NeoX): pair i's angle goes in column i and again in column
    i + head_dim/2, i.e. `torch.cat([angles, angles], dim=-1)`, not
    `angles.repeat_interleave(2, dim=-1)`."""
    return _cache(head_dim, max_len, base, layout="adjacent")


def rope_cache_wrong_base(head_dim: int, max_len: int, base: float = 10000.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Your frequencies use the wrong base: 1000 instead of 10000 (a typo
    that popular tutorials carry), or a hard-coded 10000 where another base
    was asked for (Llama 3 uses 500000). Compute θ_i = base^(-2i/head_dim)
    from the `base` argument."""
    return [_cache(head_dim, max_len, 1000.0), _cache(head_dim, max_len, 10000.0)]


def rope_cache_wrong_exponent(head_dim: int, max_len: int, base: float = 10000.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Your frequencies have the wrong exponent. RoFormer's is
    θ_i = base^(-2i/head_dim) for i = 0 .. head_dim/2 - 1, i.e.
    `base ** (-torch.arange(0, head_dim, 2) / head_dim)`: mind the 2, the
    minus sign (or the 1/), and an integer `//` that rounds every exponent
    to zero."""
    return [_cache(head_dim, max_len, base, exponent=e) for e in ("i/d", "4i/d", "+2i/d", "integer")]


def rope_cache_mixed_pairing(head_dim: int, max_len: int, base: float = 10000.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Your columns j and j + head_dim/2 do not hold the same angle, so the
    two members of a half-split pair would turn at different speeds: that is
    not a rotation any more (norms change). Compute head_dim/2 angles, one
    per pair, and lay them out twice: `torch.cat([angles, angles], dim=-1)`."""
    j = torch.arange(head_dim, dtype=torch.float64)
    positions = torch.arange(max_len, dtype=torch.float64)
    faces = []
    for exponent in (-j / head_dim, -2 * (j // 2) / head_dim):  # one frequency per column; the interleaved repeat read as halves
        angles = torch.outer(positions, base**exponent)
        faces.append((angles.cos().float(), angles.sin().float()))
    return faces


def rope_cache_low_precision(head_dim: int, max_len: int, base: float = 10000.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Your angles were computed in half precision (bfloat16 or float16), so
    nearby positions collapse onto the same angle: bfloat16 has 8 bits of
    mantissa, so 256 and 257 are the same number, and float16 merges
    positions past 2048. Build positions and frequencies in float32 (or
    float64) and multiply them in that precision."""
    faces = []
    for half in (torch.bfloat16, torch.float16):
        positions = torch.arange(max_len, dtype=torch.float32)
        theta = _frequencies(head_dim, base, dtype=torch.float32)
        for p, t, out in ((half, half, half), (half, torch.float32, torch.float32), (torch.float32, half, torch.float32), (torch.float32, torch.float32, half)):
            angles = torch.outer(positions.to(p).to(torch.float32), theta.to(t).to(torch.float32)).to(out)
            angles = torch.cat([angles, angles], dim=-1)
            faces.append((angles.cos().float(), angles.sin().float()))
    return faces


def rope_cache_position_offset(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Your table starts at position 1: row m holds the angles of position
    m + 1. Row 0 is position 0, whose angles are all 0 (cos 1, sin 0):
    use torch.arange(max_len), not torch.arange(1, max_len + 1)."""
    angles = torch.outer(torch.arange(1, max_len + 1, dtype=torch.float64), _frequencies(head_dim, base))
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


# rotate_half -----------------------------------------------------------------


def rotate_half_sign_flip(x: torch.Tensor) -> torch.Tensor:
    """Your rotate_half turns the pairs the other way: it returns
    cat(x2, -x1), a turn by -90 degrees. HF's is cat(-x2, x1): the minus
    sign goes on the second half, which moves to the front. With the wrong
    sign, q_m·k_n depends on n − m instead of m − n."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x2, -x1], dim=-1)


def rotate_half_interleaved(x: torch.Tensor) -> torch.Tensor:
    """Your code turns adjacent pairs (x[2i], x[2i+1]) into (-x[2i+1], x[2i]):
    this is the interleaved (Meta/GPT-J) layout, GPT-J's
    `rotate_every_two`; this exercise uses half-split (HF/NeoX): the pairs
    are (x[i], x[i + d/2]) and the result is cat(-x[..., d/2:], x[..., :d/2])."""
    return _rotate_adjacent(x)


def rotate_half_mixed_pairing(x: torch.Tensor) -> list[torch.Tensor]:
    """Your code mixes the two layouts: it takes adjacent components
    (x[2i], x[2i+1]) but writes them out as halves, or takes the halves
    but writes them out interleaved. Half-split throughout:
    cat(-x[..., d/2:], x[..., :d/2])."""
    x1, x2 = x.chunk(2, dim=-1)
    return [torch.cat([-x[..., 1::2], x[..., 0::2]], dim=-1), torch.stack([-x2, x1], dim=-1).flatten(-2)]


# apply_rope ------------------------------------------------------------------


def _gather(cos: torch.Tensor, sin: torch.Tensor, T: int, positions: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = (cos[:T], sin[:T]) if positions is None else (cos[positions], sin[positions])
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return cos, sin


def _as_interleaved(table: torch.Tensor) -> torch.Tensor:
    """A half-split cos/sin table re-laid out with each angle in two adjacent columns."""
    return table[..., : table.shape[-1] // 2].repeat_interleave(2, dim=-1)


def _table_rope(q, k, cos, sin, positions, *, pairing="half", frequencies="half", sign=1.0, ignore_positions=False):
    c, s = _gather(cos, sin, q.shape[-2], None if ignore_positions else positions)
    if frequencies == "adjacent":
        c, s = _as_interleaved(c), _as_interleaved(s)
    turn = _rotate_half if pairing == "half" else _rotate_adjacent
    return tuple((x.float() * c + sign * turn(x.float()) * s).to(x.dtype) for x in (q, k))


def apply_rope_interleaved(q, k, cos, sin, positions=None):
    """Your output turns adjacent pairs (x[2i], x[2i+1]) by angle i: this is
    the interleaved (Meta/GPT-J) layout; this exercise uses half-split
    (HF/NeoX): pair i is (x[i], x[i + d/2]), and the tables already hold
    angle i in columns i and i + d/2, so the whole rotation is
    x * cos + rotate_half(x) * sin."""
    return _table_rope(q, k, cos, sin, positions, pairing="adjacent", frequencies="adjacent")


def apply_rope_sign_flip(q, k, cos, sin, positions=None):
    """Your rotation goes the wrong way: x * cos - rotate_half(x) * sin
    turns position m by -m·θ. Norms are kept and q_m·k_n still depends only
    on the offset, but on n − m instead of m − n, so a model trained the
    other way sees every offset mirrored. Use x * cos + rotate_half(x) * sin."""
    return _table_rope(q, k, cos, sin, positions, sign=-1.0)


def apply_rope_mixed_pairing(q, k, cos, sin, positions=None):
    """Your code pairs components in one layout and takes angles in the other
    (rotate_half with repeat_interleave'd cos/sin, or adjacent pairs with the
    half-split tables), so the two members of a pair turn by different
    angles: norms change and q_m·k_n no longer depends on m − n alone. In the
    half-split layout use the tables as given with rotate_half."""
    return [
        _table_rope(q, k, cos, sin, positions, pairing="adjacent", frequencies="half"),
        _table_rope(q, k, cos, sin, positions, pairing="half", frequencies="adjacent"),
    ]


def apply_rope_ignores_positions(q, k, cos, sin, positions=None):
    """Your code ignores `positions` and always uses rows 0..T-1 of the
    tables (`cos[:T]`). When positions are given (decoding with a KV cache,
    packed or left-padded batches) gather those rows: cos[positions], then
    unsqueeze(1) for the heads when positions is (B, T)."""
    return _table_rope(q, k, cos, sin, positions, ignore_positions=True)


# rope_interleaved ------------------------------------------------------------


def rope_interleaved_half_split(x, positions=None, base=10000.0):
    """Your output turns the pairs (x[i], x[i + d/2]): this is the half-split
    (HF/NeoX) layout; this exercise uses interleaved (Meta/GPT-J): pair i is
    (x[2i], x[2i+1]), e.g. x[..., 0::2] and x[..., 1::2], or
    torch.view_as_complex(x.reshape(..., d // 2, 2))."""
    return _rope(x, positions, base, pairing="half")


def rope_interleaved_sign_flip(x, positions=None, base=10000.0):
    """Your rotation goes the wrong way: each pair is turned by -m·θ_i
    (x0·cos + x1·sin, x1·cos - x0·sin, or multiplying by e^(-i·m·θ)). Norms
    and the dependence on the offset alone survive, but q_m·k_n depends on
    n − m instead of m − n. Turn by +m·θ_i: (x0·cos - x1·sin, x0·sin + x1·cos)."""
    return _rope(x, positions, base, pairing="adjacent", sign=-1.0)


def rope_interleaved_mixed_pairing(x, positions=None, base=10000.0):
    """Your code pairs components in one layout and lays the angles out in
    the other (adjacent pairs with torch.cat([angles, angles]), or halves with
    repeat_interleave), so the two members of a pair turn by different angles:
    norms change and q_m·k_n no longer depends on m − n alone. In the
    interleaved layout, pair (x[2i], x[2i+1]) turns by angle m·θ_i."""
    return [_rope(x, positions, base, pairing="adjacent", frequencies="half"), _rope(x, positions, base, pairing="half", frequencies="adjacent")]


def rope_interleaved_ignores_positions(x, positions=None, base=10000.0):
    """Your code ignores `positions` and always rotates by 0..T-1. When
    positions are given (decoding with a KV cache, where one new token sits
    at position 3000) use them."""
    return _rope(x, positions, base, pairing="adjacent", ignore_positions=True)


def rope_interleaved_wrong_base(x, positions=None, base=10000.0):
    """Your frequencies use the wrong base: 1000 instead of 10000 (a typo
    that popular tutorials carry), or a hard-coded 10000 where another base was
    asked for (Llama 3 uses 500000). Compute θ_i = base^(-2i/d) from the
    `base` argument."""
    return [_rope(x, positions, b, pairing="adjacent") for b in (1000.0, 10000.0)]


def rope_interleaved_wrong_exponent(x, positions=None, base=10000.0):
    """Your frequencies have the wrong exponent. RoFormer's is
    θ_i = base^(-2i/d) for i = 0 .. d/2 - 1, i.e.
    `base ** (-torch.arange(0, d, 2) / d)` with d the head dimension:
    mind the 2, the minus sign (or the 1/), and an integer `//`."""
    return [_rope(x, positions, base, pairing="adjacent", exponent=e) for e in ("i/d", "4i/d", "+2i/d", "integer")]


def rope_interleaved_low_precision(x, positions=None, base=10000.0):
    """Right in float32, wrong in bfloat16: your angles m·θ_i are computed in
    the input's dtype. bfloat16 has 8 bits of mantissa: positions 256 and 257
    are the same number, and at position 4000 the angle is off by radians.
    Compute positions, frequencies and angles in float32 whatever x's dtype
    (`positions.float()`), then cast only the result back to x.dtype."""
    return _rope(x, positions, base, pairing="adjacent", angle_dtype=x.dtype)


# RotaryEmbedding (one tensor at a time: the check applies them to q and to k) --


def rotary_interleaved(x, positions=None, base=10000.0):
    """Your module turns adjacent pairs (x[2i], x[2i+1]): this is the
    interleaved (Meta/GPT-J) layout; this exercise uses half-split (HF/NeoX),
    like rope_cache and apply_rope: pair i is (x[i], x[i + d/2]),
    x * cos + rotate_half(x) * sin with angle i in columns i and i + d/2."""
    return _rope(x, positions, base, pairing="adjacent")


def rotary_sign_flip(x, positions=None, base=10000.0):
    """Your module rotates the wrong way (x * cos - rotate_half(x) * sin, or
    rotate_half with the minus on the wrong half): q_m·k_n depends on n − m
    instead of m − n. Use x * cos + rotate_half(x) * sin."""
    return _rope(x, positions, base, sign=-1.0)


def rotary_mixed_pairing(x, positions=None, base=10000.0):
    """Your module pairs components in one layout and lays the angles out in
    the other (rotate_half with repeat_interleave'd angles, or adjacent pairs
    with cat([angles, angles])): the two members of a pair turn by different
    angles, so norms change. Half-split throughout: cat([angles, angles]) and
    rotate_half."""
    return [_rope(x, positions, base, pairing="half", frequencies="adjacent"), _rope(x, positions, base, pairing="adjacent", frequencies="half")]


def rotary_ignores_positions(x, positions=None, base=10000.0):
    """Your module ignores `positions` and always uses rows 0..T-1 of its
    tables. Gather the rows of the given positions: cos[positions] ((T, Dh)
    or (B, T, Dh); unsqueeze(1) for the heads in the second case)."""
    return _rope(x, positions, base, ignore_positions=True)


def rotary_wrong_base(x, positions=None, base=10000.0):
    """Your module's frequencies use the wrong base: 1000 instead of 10000,
    or a hard-coded 10000 that ignores the `base` argument. Build the tables
    from θ_i = base^(-2i/head_dim) with the base you were given."""
    return [_rope(x, positions, b) for b in (1000.0, 10000.0)]


def rotary_wrong_exponent(x, positions=None, base=10000.0):
    """Your module's frequencies have the wrong exponent. RoFormer's is
    θ_i = base^(-2i/head_dim) for i = 0 .. head_dim/2 - 1 (from the head
    dimension): mind the 2, the minus sign (or the 1/), and an integer `//`."""
    return [_rope(x, positions, base, exponent=e) for e in ("i/d", "4i/d", "+2i/d", "integer")]


def rotary_low_precision(x, positions=None, base=10000.0):
    """Right in float32, wrong in bfloat16: your module computes the angles
    m·θ_i in the input's dtype. bfloat16 has 8 bits of mantissa, so
    positions 256 and 257 collide and late positions are off by radians.
    Build the tables in float32 (once, in __init__, whatever the input) and
    cast only cos/sin or the result to the input's dtype."""
    return _rope(x, positions, base, angle_dtype=x.dtype)


# (end of chapter 05)


# ---------------------------------------------------------------------------
# Chapter 06: comparing, and ALiBi
# ---------------------------------------------------------------------------


def _naive_slopes(n_heads: int) -> torch.Tensor:
    return torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])


def alibi_slopes_naive(n_heads: int) -> torch.Tensor:
    """Your slopes follow 2^(-8(h+1)/n) for every head count. That is the
    rule for a power of two only. For another n, Press et al. take the n'
    slopes of the closest smaller power of two n' = 2^floor(log2 n), then
    every other slope of 2n' heads ([0::2]) for the remaining n - n' heads.
    (For 12 heads: the 8 slopes of 8 heads, then the 1st, 3rd, 5th and 7th
    of 16 heads.)"""
    return _naive_slopes(n_heads)


def alibi_slopes_wrong_sign(n_heads: int) -> torch.Tensor:
    """Your slopes are negative. The slopes m_h are positive numbers,
    2^(-8/n), 2^(-16/n), ...; the minus sign belongs to the bias,
    -m_h · (i - j), which penalises distant keys."""
    return -reference.alibi_slopes(n_heads)


def alibi_bias_naive(n_heads: int, seq_len: int) -> torch.Tensor:
    """Your bias is right for a power-of-two head count but not for another
    one: its slopes follow 2^(-8(h+1)/n) for every n. Press et al. take the
    slopes of the closest smaller power of two n', then every other slope
    of 2n' heads for the rest (see alibi_slopes)."""
    return _bias(_naive_slopes(n_heads), seq_len)


def alibi_bias_wrong_sign(n_heads: int, seq_len: int) -> list[torch.Tensor]:
    """Your bias rewards distance instead of penalising it: the score of
    query i for key j must get -m_h · (i - j), which is 0 for the token
    itself and more and more negative further back. (j - i with a plus sign
    is the same thing; i - j with a plus sign is not.)"""
    slopes = reference.alibi_slopes(n_heads)
    return [_bias(-slopes, seq_len), _bias(-slopes, seq_len, causal=False)]


def alibi_bias_missing_causal_mask(n_heads: int, seq_len: int) -> list[torch.Tensor]:
    """Your bias lets a query see the keys after it: above the diagonal
    (j > i) it must be -inf, so that softmax gives the future zero weight.
    Use `bias.masked_fill(j > i, float("-inf"))` (0 there is not a mask:
    it is the largest bias of all). Without a mask the distance is |i - j|,
    the bidirectional form, which this causal exercise does not use."""
    slopes = reference.alibi_slopes(n_heads)
    return [_bias(slopes, seq_len, causal=False), _bias(slopes, seq_len, causal=False, absolute=True), _bias(slopes, seq_len, masked_with=0.0)]


def _bias(slopes: torch.Tensor, seq_len: int, *, causal: bool = True, absolute: bool = False, masked_with: float = float("-inf")) -> torch.Tensor:
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    distance = (i - j).abs().float() if absolute else (i - j).float()
    bias = -slopes[:, None, None] * distance
    return bias.masked_fill(j > i, masked_with) if causal else bias


# (end of chapter 06)
