"""Two independent mistakes of one exercise's catalogue in one submission (issue 22, item 4).

ALSO: (exercise id, the diagnosis, the other mistake that must be listed under "Also wrong"
by its own code, the code). tests/test_also_wrong.py says which pairs of each exercise's
catalogue are independent aspects, and why the others are not.

Module exercises are combined by class: two wrong subclasses of one right base that
override different methods (combined() refuses any other pair) make a class with both
mistakes, each where its own class put it."""

import torch

from tests.submissions import ch03, ch04, ch05


def combined(first: type, second: type) -> type:
    """A class with `first`'s and `second`'s mistakes: they must change different methods of their common base."""
    own = lambda cls: {name for name in vars(cls) if callable(vars(cls)[name])}
    if own(first) & own(second):
        raise ValueError(f"{first.__name__} and {second.__name__} change the same methods: not independent")
    return type(
        f"{first.__name__}And{second.__name__}",
        (first, second),
        {"__doc__": f"{first.__doc__ or first.__name__} + {second.__doc__ or second.__name__}"},
    )


# --- embedding_backward: rows assigned (one use per id) and the padding row left in -------------


def backward_assigns_and_trains_padding(grad_out, ids, vocab_size, padding_idx=None):
    d = grad_out.shape[-1]
    grad = torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)
    grad[ids.reshape(-1)] = grad_out.reshape(-1, d)  # the last use of a repeated id wins; padding_idx forgotten
    return grad


# --- sinusoidal_encoding, relative_shift_matrix: the layout (halves) and the frequencies (base 1000) ---


def table_halves_base_1000(max_len, d_model, base=10000.0):
    omega = 1000.0 ** (-torch.arange(0, d_model, 2) / d_model)
    angles = torch.arange(max_len)[:, None] * omega
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def shift_halves_base_1000(k, d_model, base=10000.0):
    return ch03.shift_halves(k, d_model, 1000.0)


# --- TokenAndPositionEmbedding: the scale (combine) and the table's layout (__init__) -------------

TokenAndPositionNoScaleSwapped = combined(ch03.TokenAndPositionNoScale, ch03.TokenAndPositionSwapped)


# --- rope_from_shift_matrix: the turn's direction (M @ x) and the positions (ignored) ------------


def shift_rope_column_rows_in_order(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    M = torch.stack([ch05.my_shift_matrix(t, d, base) for t in range(T)]).float().to(x.device)  # positions ignored
    return torch.einsum("tij,...tj->...ti", M, x.float()).to(x.dtype)  # M @ x: the turn the other way


# --- apply_partial_rope: where the turned part goes (last) and the turn's direction (-sin) -------


def partial_pass_first_minus_sin(q, k, cos, sin, positions=None):
    r = cos.shape[-1]
    c, s = ch05._rows(cos, sin, q.shape[-2], positions)
    return tuple(
        torch.cat(
            [x[..., r:], (x[..., :r].float() * c - ch05.rotate_half_hf(x[..., :r].float()) * s).to(x.dtype)], dim=-1
        )
        for x in (q, k)
    )


ALSO = [
    ("embedding_backward", "no_accumulation", "padding_row_updated", backward_assigns_and_trains_padding),
    ("sinusoidal_encoding", "concatenated_halves", "wrong_base", table_halves_base_1000),
    ("relative_shift_matrix", "concatenated_halves", "wrong_base", shift_halves_base_1000),
    ("TokenAndPositionEmbedding", "sin_cos_swapped", "missing_scale", TokenAndPositionNoScaleSwapped),
    ("rope_from_shift_matrix", "rope_sign_flip", "rope_ignores_positions", shift_rope_column_rows_in_order),
    ("apply_partial_rope", "partial_rope_last_dims", "rope_sign_flip", partial_pass_first_minus_sin),
]
RIGHT: dict = {}
WRONG: list = []


# --- BertEmbeddings: the sum (no segment, forward) and the LayerNorm's eps (written into __init__) --------

BertHardcodedEpsNoSegment = combined(ch04.BertIgnoresTokenTypes, ch04.BertHardcodedEps)
ALSO.append(("BertEmbeddings", "missing_token_type", "layernorm_eps", BertHardcodedEpsNoSegment))
