"""Chapter 03's catalogue of known mistakes (its probes are in ch03_sinusoidal.py).

The mistakes of each exercise share its arguments:
    sinusoidal_encoding        (max_len, d_model, base) -> the mistaken table
    relative_shift_matrix      (k, d_model, base) -> the mistaken (d, d) matrix
    PositionalEncoding         (x (B, T, d), the right table) -> the module's output in eval mode
    TokenAndPositionEmbedding  (token table, ids, the right table, fitted scale) -> the same
The two modules' mistakes are the table's mistakes and the scale's, seen
through what the module adds them to (`added_to_input`, `added_to_tokens`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch

from helpers import reference
from helpers.exercises.common import POSITION_ADDING_MISTAKES, SCALE_MISTAKES, WRONG_BASE, frequencies, says

# --- known mistakes: the table -----------------------------------------------------


def mistaken_table(
    max_len: int,
    d_model: int,
    base: float = 10000.0,
    *,
    layout: str = "interleaved",
    exponent: str = "2i/d",
    first: int = 0,
) -> torch.Tensor:
    """A sinusoidal table built with one mistake: another layout, exponent or first position."""
    positions = torch.arange(first, first + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    if exponent == "column/d":  # the column index j in the exponent: the cos partner gets (2i + 1)/d
        j = torch.arange(d_model, dtype=torch.float64)
        angles = positions / base ** (j / d_model)  # (max_len, d): one frequency per column
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = angles[:, 0::2].sin(), angles[:, 1::2].cos()
        return pe.float()
    angles = positions * frequencies(d_model, base, exponent)  # (max_len, ceil(d/2))
    sin, cos = angles.sin(), angles.cos()[:, : d_model // 2]
    if layout == "halves":  # sin block, then cos block
        return torch.cat([sin[:, : d_model - d_model // 2], cos], dim=-1).float()
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    if layout == "swapped":  # cos in even columns, sin in odd ones
        pe[:, 0::2], pe[:, 1::2] = angles.cos(), angles.sin()[:, : d_model // 2]
    else:
        pe[:, 0::2], pe[:, 1::2] = sin, cos
    return pe.float()


def table_sin_cos_swapped(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Your sin and cos columns are swapped: cos is in the even columns and
    sin in the odd ones.

    Hint: Vaswani et al. (§3.5) put sin first: PE[pos, 2i] = sin(pos /
    base^(2i/d)) and PE[pos, 2i+1] = cos of the same angle. Row 0 is a quick
    test: position 0 must read 0, 1, 0, 1, ...

    Fix: Write sin into the even columns and cos into the odd ones:
    `pe[:, 0::2] = torch.sin(angles)` and `pe[:, 1::2] = torch.cos(angles)`."""
    return mistaken_table(max_len, d_model, base, layout="swapped")


def table_concatenated_halves(max_len: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your table holds sin in the first half of the columns and cos in the
    second (the fairseq/tensor2tensor layout, `torch.cat([sin, cos], dim=-1)`);
    this exercise interleaves them.

    Hint: Each wave's sin and cos sit side by side, in columns 2i and 2i+1:
    that is what lets one 2×2 rotation per pair shift the whole table
    (relative_shift_matrix, in this chapter).

    Fix: Fill the even and the odd columns instead of concatenating:
    `pe[:, 0::2] = torch.sin(angles)` and `pe[:, 1::2] = torch.cos(angles)`."""
    table = mistaken_table(max_len, d_model, base, layout="halves")
    half = d_model - d_model // 2
    return [table, torch.cat([table[:, half:], table[:, :half]], dim=-1)]  # sin first or cos first


@says(WRONG_BASE)
def table_wrong_base(max_len: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    return [mistaken_table(max_len, d_model, 1000.0), mistaken_table(max_len, d_model, 10000.0)]


def table_wrong_exponent(max_len: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your frequency exponent is off: the frequencies in your columns are
    not base^(-2i/d_model), with i counting the (sin, cos) pairs. The usual
    slips: i/d (the 2 dropped), the column index in place of 2i (so the cos
    column gets (2i+1)/d), 4i/d, the minus sign (or the 1/) dropped, so that
    pos is multiplied by base^(2i/d) and the pairs speed up instead of slowing
    down, or an integer division that rounds every exponent to 0.

    Hint: Columns 2i and 2i+1 share one frequency. Work out the exponents for
    d_model = 8 by hand: 0, 0.25, 0.5, 0.75, each used by two adjacent
    columns; then print yours.

    Fix: One frequency per pair, from the even column indices, with true
    division: `omega = base ** (-torch.arange(0, d_model, 2) / d_model)`;
    pair i's sin and cos both use `pos * omega[i]`."""
    return [mistaken_table(max_len, d_model, base, exponent=e) for e in ("i/d", "column/d", "4i/d", "+2i/d", "integer")]


def table_all_zeros(max_len: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your table is all zeros (or its sin or its cos columns are): the values
    were computed but never stored in it.

    Hint: Some operations return a new array and leave the old one as it was:
    JAX's .at[...].set(...), and torch's index_copy, index_put and scatter
    (the names without a trailing underscore). What do you do with their
    result?

    Fix: Keep the result, `pe = pe.at[:, 0::2].set(...)` in JAX, or write in
    place in torch: `pe[:, 0::2] = torch.sin(angles)` and
    `pe[:, 1::2] = torch.cos(angles)`."""
    table = mistaken_table(max_len, d_model, base)
    sin_only, cos_only = table.clone(), table.clone()
    sin_only[:, 1::2], cos_only[:, 0::2] = 0.0, 0.0  # the other half was never stored
    return [torch.zeros(max_len, d_model), sin_only, cos_only]


def table_position_offset(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Your positions start at 1: row pos holds the encoding of pos + 1.

    Hint: The first token is position 0, and sin 0 = 0, cos 0 = 1: your row 0
    must read 0, 1, 0, 1, ...

    Fix: Count positions from 0, `torch.arange(max_len)`, not
    `torch.arange(1, max_len + 1)`."""
    return mistaken_table(max_len, d_model, base, first=1)


TABLE_MISTAKES = {
    "sin_cos_swapped": table_sin_cos_swapped,
    "concatenated_halves": table_concatenated_halves,
    "wrong_base": table_wrong_base,
    "wrong_exponent": table_wrong_exponent,
    "all_zeros": table_all_zeros,
    "position_offset": table_position_offset,
}


# --- known mistakes: the shift matrix ------------------------------------------------


def mistaken_shift(
    k: float, d_model: int, base: float = 10000.0, *, exponent: str = "2i/d", layout: str = "interleaved"
) -> torch.Tensor:
    """A block-diagonal rotation like the reference's, with one mistake."""
    b = k * frequencies(d_model, base, exponent)  # (d/2,) the angle each pair turns by
    i = torch.arange(d_model // 2)
    first, second = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d_model // 2)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[first, first], M[first, second], M[second, first], M[second, second] = b.cos(), b.sin(), -b.sin(), b.cos()
    return M.float()


def shift_sin_cos_swapped(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Each of your 2×2 blocks is the transpose of the right one: your matrix
    maps PE[pos] to PE[pos - k], the shift the other way (it is also the
    matrix for a table with cos in the even columns).

    Hint: Take one pair, sin a in column 2i and cos a in column 2i+1, and
    move it by b = k·ω_i with the angle-addition formulas:
    sin(a + b) = cos b·sin a + sin b·cos a and
    cos(a + b) = -sin b·sin a + cos b·cos a. Row 2i of M holds the
    coefficients of the first line, row 2i+1 those of the second.

    Fix: On rows and columns (2i, 2i+1) write the block
    [[cos b, sin b], [-sin b, cos b]]: `M[2*i, 2*i+1] = torch.sin(b)` and
    `M[2*i+1, 2*i] = -torch.sin(b)`, the cosines on the diagonal."""
    return mistaken_shift(-k, d_model, base)


def shift_concatenated_halves(k: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your matrix rotates column i with column i + d_model/2: that is the
    matrix for a table laid out as two halves (sin block, cos block), and
    this exercise's table interleaves them.

    Hint: In the interleaved table each (sin, cos) pair sits in adjacent
    columns, 2i and 2i+1, so each 2×2 rotation sits on the diagonal: M is
    block-diagonal, zero everywhere else.

    Fix: Write pair i's four entries at rows and columns 2i and 2i+1:
    `M[2*i, 2*i]`, `M[2*i, 2*i+1]`, `M[2*i+1, 2*i]` and `M[2*i+1, 2*i+1]`,
    not at i and i + d_model // 2."""
    return [mistaken_shift(k, d_model, base, layout="halves"), mistaken_shift(-k, d_model, base, layout="halves")]


@says(WRONG_BASE)
def shift_wrong_base(k: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    return [mistaken_shift(k, d_model, 1000.0), mistaken_shift(k, d_model, 10000.0)]


def shift_wrong_exponent(k: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your rotation angles have the wrong exponent: pair i does not turn by
    k·base^(-2i/d_model), with i counting the pairs (i/d, 4i/d, or an integer
    division that rounds every exponent to 0, are the usual slips).

    Hint: The angles are the table's frequencies times k. For d_model = 8
    the exponents must read 0, 0.25, 0.5, 0.75, one per 2×2 block.

    Fix: `omega = base ** (-torch.arange(0, d_model, 2) / d_model)`, with
    true division, and block i turns by `b = k * omega[i]`."""
    return [mistaken_shift(k, d_model, base, exponent=e) for e in ("i/d", "4i/d", "integer")]


def shift_all_zeros(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Your matrix is all zeros: the blocks were computed but never stored in it.

    Hint: Some operations return a new array and leave the old one as it was:
    index_put, scatter and add (the names without a trailing underscore),
    JAX's .at[...].set(...). What do you do with their result?

    Fix: Keep the result (`M = M.index_put(...)`), or write into M in place:
    `M[2*i, 2*i] = torch.cos(b)`, and likewise the other three entries of
    each block."""
    return torch.zeros(d_model, d_model)


def shift_off_by_one(k: int, d_model: int, base: float = 10000.0) -> list[torch.Tensor]:
    """Your matrix shifts by k + 1 or k - 1 positions instead of k.

    Hint: M turns pair i by exactly k·ω_i: an offset crept in somewhere
    between k and the angle (a range that starts at 1, a k + 1, a k - 1?).

    Fix: Compute the angles from k as given, `b = k * omega`, with
    `omega = base ** (-torch.arange(0, d_model, 2) / d_model)`."""
    return [mistaken_shift(k + 1, d_model, base), mistaken_shift(k - 1, d_model, base)]


def base_said(asked: float, used: float) -> str:
    """WRONG_BASE's message said of the one base the code used, 1000 or 10000 (review E8: the probe knows which)."""
    if used == 10000.0:
        return (
            f"Your frequencies use base 10000 where the `base` argument asked for {asked:g}: the argument is ignored "
            "(10000 written into the formula, or `base` not passed on to where the frequencies are made)."
        )
    if asked == 10000.0:
        return "Your frequencies use base 1000 instead of 10000: a typo that popular tutorials carry."
    return (
        f"Your frequencies use base 1000 where the `base` argument asked for {asked:g}: 1000 is written into the "
        "formula (a typo of 10000 that popular tutorials carry), and the argument is ignored."
    )


SHIFT_MISTAKES = {
    "shift_reversed": shift_sin_cos_swapped,  # its own code: "sin and cos swapped" is not what a student reads it as
    "concatenated_halves": shift_concatenated_halves,
    "wrong_base": shift_wrong_base,
    "wrong_exponent": shift_wrong_exponent,
    "all_zeros": shift_all_zeros,
    "position_offset": shift_off_by_one,
}


# --- known mistakes: the modules -------------------------------------------------------


def added_to_input(table_mistake: Callable[..., Any]) -> Callable[..., Any]:
    """A table mistake as PositionalEncoding shows it: x + the mistaken table's first T rows."""

    @functools.wraps(table_mistake)
    def added(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
        found = table_mistake(len(table), table.shape[1])
        return [x + face.to(x.device)[: x.shape[1]] for face in (found if isinstance(found, list) else [found])]

    return added


def added_to_tokens(mistake: Callable[..., Any], scale_mistake: bool) -> Callable[..., Any]:
    """A mistake as TokenAndPositionEmbedding shows it: of the scale (the mistaken
    token rows + the table) or of the table and its slicing (the scaled rows + a mistaken table)."""

    @functools.wraps(mistake)
    def added(weight: torch.Tensor, ids: torch.Tensor, table: torch.Tensor, scale: float | None) -> list[torch.Tensor]:
        T = ids.shape[1]
        if scale_mistake:
            found = mistake(weight, ids, scale)
            return [face + table[:T] for face in (found if isinstance(found, list) else [found])]
        faces: list[torch.Tensor] = mistake(reference.scaled_embedding(weight, ids), table)
        return faces

    return added


def scaled_position_too(
    weight: torch.Tensor, ids: torch.Tensor, table: torch.Tensor, scale: float | None
) -> torch.Tensor:
    """You multiplied the positional encoding by sqrt(d_model) too: your
    module returns (embedding(ids) + PE) * sqrt(d_model).

    Hint: Only the token vectors need the factor (chapter 02): it brings small
    token rows up to the size of the encoding, whose entries already lie
    between -1 and 1.

    Fix: Scale first, then add: `self.embedding(ids) * math.sqrt(self.d_model) + self.pe[:T]`,
    with your own names for the table and the buffer."""
    return (weight[ids] + table[: ids.shape[1]]) * weight.shape[1] ** 0.5


def either(table_mistake: Callable[..., Any], slicing_mistake: Callable[..., Any]) -> Callable[..., Any]:
    """One code, two ways to make it: in the stored table, or in the rows added (pe[1:T+1])."""

    @functools.wraps(slicing_mistake)
    def made_either_way(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
        faces: list[torch.Tensor] = added_to_input(table_mistake)(x, table) + slicing_mistake(x, table)
        return faces

    return made_either_way


def input_scaled(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Your forward multiplies x by sqrt(d_model) before it adds the table
    (the TensorFlow tutorial's `x *= tf.math.sqrt(d_model)`). PositionalEncoding
    adds the table to x as it comes.

    Hint: the factor sqrt(d_model) belongs to the token embedding (chapter 02's
    ScaledEmbedding); what reaches PositionalEncoding is already scaled, and a
    second factor here scales it again. TokenAndPositionEmbedding, the next
    exercise, is where the two meet.

    Fix: return `self.dropout(x + self.pe[:T])`, with no sqrt(d_model) in
    PositionalEncoding."""
    return x * math.sqrt(x.shape[-1]) + table.to(x.device)[: x.shape[1]]


def sum_scaled(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Your forward returns (x + PE[:T]) * sqrt(d_model): the sum is scaled, so
    the positions are multiplied by sqrt(d_model) too, and so is x, which
    PositionalEncoding should pass on as it comes.

    Hint: only the token vectors need the factor (chapter 02), and they get it
    in the token embedding, before they reach PositionalEncoding; the
    encoding's entries already lie between -1 and 1.

    Fix: return `self.dropout(x + self.pe[:T])`, with no sqrt(d_model) in
    PositionalEncoding."""
    return (x + table.to(x.device)[: x.shape[1]]) * math.sqrt(x.shape[-1])


# The modules take no base: a wrong base in their table is one written into the code (review E8).
MODULE_WRONG_BASE = """Your table's frequencies use base 1000 where the exercise's is 10000
(Vaswani et al. §3.5): a typo that popular tutorials carry.

Hint: Pair i's frequency is 10000^(-2i/d_model), so every column but the
first pair's depends on the base. Print row 1 of your table: its second pair
must read sin(10000^(-2/d_model)) and cos of the same angle.

Fix: Write 10000.0 into the formula:
`torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2) / d_model)`."""

POSITIONAL_ENCODING_MISTAKES = {
    **{code: added_to_input(m) for code, m in TABLE_MISTAKES.items()},
    **POSITION_ADDING_MISTAKES,
    "position_offset": either(table_position_offset, POSITION_ADDING_MISTAKES["position_offset"]),
    "wrong_base": says(MODULE_WRONG_BASE)(added_to_input(table_wrong_base)),
}
TOKEN_AND_POSITION_MISTAKES = {
    **{code: added_to_tokens(m, scale_mistake=False) for code, m in POSITIONAL_ENCODING_MISTAKES.items()},
    **{code: added_to_tokens(m, scale_mistake=True) for code, m in SCALE_MISTAKES.items()},
    "scaled_position_too": scaled_position_too,
}
