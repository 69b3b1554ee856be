"""Chapter 04's catalogue of known mistakes (its probes are in ch04_learned.py).

LearnedPositionalEmbedding's own (chapter 03's are common.POSITION_ADDING_MISTAKES) take x (B, T, d)
and the module's table, and return its output. BertEmbeddings' take the pretrained weights (the five
`embeddings.*` tensors, keyed as in HF's state_dict), input_ids (B, T), token_type_ids (B, T) and the
eps the module was built with, and return what the mistaken module outputs in eval mode."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# --- LearnedPositionalEmbedding's own mistake (the others are chapter 03's) ----------------------


def learned_input_scaled(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Your forward multiplies x by sqrt(d_model) before it adds the position
    rows (the TensorFlow tutorial's `x *= tf.math.sqrt(d_model)`, chapter 03's
    input_scaled). LearnedPositionalEmbedding adds its rows to x as it comes.

    Hint: BERT and GPT-2 scale nothing: they add the learned position rows to
    the token vectors as they are, and the table learns whatever size fits
    them. The factor sqrt(d_model) belongs to chapter 02's ScaledEmbedding.

    Fix: return `x + self.position_embeddings(torch.arange(T, device=x.device))`,
    with no sqrt(d_model) in this module."""
    return x * math.sqrt(x.shape[-1]) + table[: x.shape[1]]


# --- known mistakes of BertEmbeddings -------------------------------------------------

Weights = dict[str, torch.Tensor]  # BertEmbeddings' pretrained tensors, keyed as in HF's state_dict


def bert_parts(
    w: Weights, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(word, position, segment) vectors, each broadcastable to (B, T, d)."""
    positions = torch.arange(ids.shape[1], device=ids.device) if positions is None else positions
    return (
        w["word_embeddings.weight"][ids],
        w["position_embeddings.weight"][positions],
        w["token_type_embeddings.weight"][types],
    )


def bert_norm(w: Weights, x: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], w["LayerNorm.weight"], w["LayerNorm.bias"], eps)


def bert_layernorm_eps(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """Your LayerNorm's eps is not the `layer_norm_eps` you were given
    (PyTorch's default is 1e-5, BERT's 1e-12). The difference is small (with
    MiniLM, 1e-5 moves the embeddings by about 0.1% and the final hidden
    states by 0.05%; the mean-pooled sentence vectors keep a cosine of
    0.99999994), but your outputs no longer match the pretrained model's
    exactly, and an exact match is what this check asks for.

    Hint: LayerNorm divides by sqrt(var + eps), so eps is part of the
    model's definition, stored in its config next to the sizes; nn.LayerNorm
    knows nothing of that config unless you pass the value on.

    Fix: `self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)`."""
    word, pos, seg = bert_parts(w, ids, types)
    return [bert_norm(w, word + pos + seg, other) for other in (1e-5, 1e-6, 1e-3, 1e-12) if other != eps]


def bert_missing_token_type(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """The segment (token type) embedding is missing from your sum, or you
    ignore the token_type_ids you are given.

    Hint: BERT tells sentence A from sentence B by adding a third vector to
    each token, looked up by its segment id (0 for A, 1 for B); when no
    token_type_ids are given, every token is in segment 0.

    Fix: Add `self.token_type_embeddings(token_type_ids)` to the word and
    position vectors before the LayerNorm, with
    `token_type_ids = torch.zeros_like(input_ids)` when it is None."""
    word, pos, seg = bert_parts(w, ids, types)
    segment_a = w["token_type_embeddings.weight"][0]
    return [bert_norm(w, word + pos, eps), bert_norm(w, word + pos + segment_a, eps)]


def bert_missing_layernorm(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """You return the raw sum of the three embeddings: the LayerNorm is missing.

    Hint: BERT normalises the sum of the word, position and segment vectors
    before anything else sees it; the pretrained weights include that
    LayerNorm's weight and bias.

    Fix: In __init__, `self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)`;
    in forward, `self.dropout(self.LayerNorm(words + positions + segments))`."""
    word, pos, seg = bert_parts(w, ids, types)
    return [word + pos + seg]


def bert_layernorm_order(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """Your LayerNorm or your dropout sees only part of the sum, or comes in
    the wrong place (e.g. LayerNorm(word) + position + segment).

    Hint: BERT's order is fixed: add the three embeddings, normalise the whole
    sum, then apply dropout, each step to the previous one's full result.

    Fix: In forward, `x = self.LayerNorm(words + positions + segments)`, then
    `return self.dropout(x)`."""
    word, pos, seg = bert_parts(w, ids, types)
    return [
        bert_norm(w, word, eps) + pos + seg,
        bert_norm(w, word + pos, eps) + seg,
        bert_norm(w, word + seg, eps) + pos,
        bert_norm(w, word, eps) + bert_norm(w, pos, eps).expand_as(word) + bert_norm(w, seg, eps),
    ]


def bert_unbiased_variance(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """Your hand-written LayerNorm divides by the unbiased variance: `x.var(-1)`
    divides by d - 1, torch.var's default.

    Hint: LayerNorm normalises with the population variance of the d entries,
    the mean of the squared deviations: divided by d, not d - 1.

    Fix: `x.var(-1, keepdim=True, unbiased=False)`, or simply
    `nn.LayerNorm(hidden_size, eps=layer_norm_eps)`."""
    word, pos, seg = bert_parts(w, ids, types)
    x = word + pos + seg
    normed = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps)
    return [normed * w["LayerNorm.weight"] + w["LayerNorm.bias"]]


def bert_eps_outside_sqrt(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """Your hand-written LayerNorm adds eps to the standard deviation,
    (x - mean) / (std + eps), as the Annotated Transformer's LayerNorm does;
    nn.LayerNorm, and the checkpoints BERT was trained with, add it to the
    variance, under the square root: (x - mean) / sqrt(var + eps).

    Hint: The two agree while the variance is far above eps and part where it
    is not: with MiniLM's eps of 1e-12 you cannot see it, but this check's small
    config (eps = 1e-7, sums whose variance is about 3e-6) can.

    Fix: Use `nn.LayerNorm(hidden_size, eps=layer_norm_eps)`, or by hand
    `(x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps)`."""
    word, pos, seg = bert_parts(w, ids, types)
    x = word + pos + seg
    std = x.std(-1, keepdim=True, unbiased=False)
    return [(x - x.mean(-1, keepdim=True)) / (std + eps) * w["LayerNorm.weight"] + w["LayerNorm.bias"]]


def bert_scaled_tokens(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """You multiplied the word embeddings by sqrt(hidden_size), as the
    original Transformer does (chapter 02).

    Hint: BERT does not scale: it adds the three embeddings as they are and
    lets the LayerNorm set the scale. Its pretrained tables were trained
    that way.

    Fix: Remove the factor: `self.LayerNorm(self.word_embeddings(input_ids) + positions + segments)`."""
    word, pos, seg = bert_parts(w, ids, types)
    root = math.sqrt(word.shape[-1])
    return [bert_norm(w, word * root + pos + seg, eps), bert_norm(w, (word + pos + seg) * root, eps)]


def bert_same_row(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """Every token got the same position vector: you looked up one position
    id for all of them.

    Hint: Token t of a sequence is at position t: the ids to look up run
    0, 1, ..., T-1, one per token, the same for every sequence in the batch.

    Fix: `self.position_embeddings(torch.arange(T, device=input_ids.device))`,
    with T = input_ids.size(1)."""
    zeros = torch.zeros(ids.shape[1], dtype=torch.long, device=ids.device)
    word, pos, seg = bert_parts(w, ids, types, positions=zeros)
    return [bert_norm(w, word + pos + seg, eps)]


def bert_batch_seq_confusion(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """You counted positions along the batch axis: input_ids.size(0) is the
    batch size B, not the sequence length.

    Hint: BERT's input_ids are (B, T), batch first: the positions run along the
    second axis, and every sequence of the batch gets the same T rows.

    Fix: Take `T = input_ids.size(1)` and look up
    `self.position_embeddings(torch.arange(T, device=input_ids.device))`."""
    word, _, seg = bert_parts(w, ids, types)
    pos = w["position_embeddings.weight"][: ids.shape[0]].unsqueeze(1)  # (B, 1, d)
    return [bert_norm(w, word + pos + seg, eps)]


def bert_position_offset(w: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float) -> list[torch.Tensor]:
    """Your positions start at 1 (or at 2, RoBERTa's padding_idx + 1), not at 0.

    Hint: BERT's first token, [CLS], takes row 0 of position_embeddings; the
    offset of 2 belongs to RoBERTa's checkpoints, not BERT's.

    Fix: Look up `torch.arange(T, device=input_ids.device)`, not
    `torch.arange(1, T + 1)` or positions shifted by padding_idx + 1."""
    T = ids.shape[1]
    faces = []
    for k in (1, 2):
        if k + T > len(w["position_embeddings.weight"]):
            continue
        word, pos, seg = bert_parts(w, ids, types, positions=torch.arange(k, k + T, device=ids.device))
        faces.append(bert_norm(w, word + pos + seg, eps))
    return faces


BERT_MISTAKES = {
    "layernorm_eps": bert_layernorm_eps,
    "missing_token_type": bert_missing_token_type,
    "missing_layernorm": bert_missing_layernorm,
    "layernorm_order": bert_layernorm_order,
    "layernorm_unbiased_var": bert_unbiased_variance,
    "layernorm_eps_outside_sqrt": bert_eps_outside_sqrt,
    "unexpected_scale": bert_scaled_tokens,
    "same_row_every_position": bert_same_row,
    "batch_seq_confusion": bert_batch_seq_confusion,
    "position_offset": bert_position_offset,
}
