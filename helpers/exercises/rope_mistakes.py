"""The known mistakes of chapter 05's rotary exercises, each one RoPE of helpers.exercises.rope with one knob
turned (moved out of ch05_rope, which declares the exercises, their checks and their contracts).

The mistakes of each exercise share its arguments and return what the mistaken code outputs:
    rope_cache        (head_dim, max_len, base) -> (cos, sin)
    rotate_half       (x) -> the turned x
    apply_rope        (q, k, cos, sin, positions) -> (q_rot, k_rot)
    rope_interleaved  (x, positions, base) -> the rotated x
    RotaryEmbedding   (x, positions, base) -> x rotated as the module would (q and k alike)
    apply_partial_rope  as apply_rope
"""

from __future__ import annotations

import torch
from torch import Tensor

from helpers.exercises import partial_rope, rope
from helpers.exercises.common import (
    WRONG_BASE,
    says,
)
from helpers.exercises.rope import Tables

# --- known mistakes (each one RoPE of helpers.exercises.rope with one knob turned) ---

# rope_cache ------------------------------------------------------------------


def rope_cache_interleaved(head_dim: int, max_len: int, base: float = 10000.0) -> Tables:
    """Your tables repeat each angle in adjacent columns (2i, 2i+1): that is
    the interleaved (Meta/GPT-J) layout, and this exercise uses the half-split
    (HF/NeoX) one.

    Hint: in the half-split layout pair i is components i and i + head_dim/2, so
    angle i belongs in column i and again in column i + head_dim/2: the second
    half of every row repeats the first.

    Fix: lay the (max_len, head_dim/2) angles out as two copies side by side,
    `torch.cat([angles, angles], dim=-1)`, instead of
    `angles.repeat_interleave(2, dim=-1)`."""
    return rope.cache(head_dim, max_len, base, layout="adjacent")


@says(WRONG_BASE)
def rope_cache_wrong_base(head_dim: int, max_len: int, base: float = 10000.0) -> list[Tables]:
    return [rope.cache(head_dim, max_len, b) for b in rope.OTHER_BASES]


@says(rope.WRONG_EXPONENT)
def rope_cache_wrong_exponent(head_dim: int, max_len: int, base: float = 10000.0) -> list[Tables]:
    return [rope.cache(head_dim, max_len, base, exponent=e) for e in rope.OTHER_EXPONENTS]


def rope_cache_mixed_pairing(head_dim: int, max_len: int, base: float = 10000.0) -> Tables:
    """Your columns j and j + head_dim/2 do not hold the same angle: the two
    members of a half-split pair would turn at different speeds, which is no
    rotation (norms change).

    Hint: there are head_dim/2 frequencies, one per pair, not one per column;
    each row holds those head_dim/2 angles twice, the second half a copy of
    the first.

    Fix: `angles = torch.outer(positions, theta)` with theta of length
    head_dim/2, then `torch.cat([angles, angles], dim=-1)` before cos and sin."""
    return rope.cache(head_dim, max_len, base, layout="columns")  # "adjacent" is rope_interleaved_convention


def rope_cache_low_precision(head_dim: int, max_len: int, base: float = 10000.0) -> list[Tables]:
    """Your angles were computed in half precision (bfloat16 or float16):
    nearby positions collapse onto the same angle.

    Hint: bfloat16 keeps 8 bits of mantissa, so 256 and 257 are the same number,
    and float16 merges positions past 2048. An angle m·θ_i needs every bit of m:
    which of positions, frequencies and their product was in a half dtype?

    Fix: `positions = torch.arange(max_len, dtype=torch.float32)`, frequencies in
    float32 too, and their product kept in float32: no `.half()` or
    `.to(torch.bfloat16)` anywhere on the way."""
    return [rope.cache_rounded(head_dim, max_len, base, steps) for steps in rope.HALF_STEPS]


def rope_cache_position_offset(head_dim: int, max_len: int, base: float = 10000.0) -> Tables:
    """Your table starts at position 1: row m holds the angles of position
    m + 1, so row 0 of your cos table is not all ones.

    Hint: the first token sits at position 0, where every angle is 0 (cos 1,
    sin 0); row m of the tables is position m.

    Fix: count positions from 0: `torch.arange(max_len)`, not
    `torch.arange(1, max_len + 1)`."""
    return rope.cache(head_dim, max_len, base, start=1)


# rotate_half -----------------------------------------------------------------


def rotate_half_sign_flip(x: Tensor) -> Tensor:
    """Your rotate_half turns the pairs the other way: it returns
    cat(x2, -x1), a turn by -90 degrees.

    Hint: a turn by +90 degrees takes (a, b) to (-b, a): the minus sign goes on
    the half that moves to the front. With it on the other half, q_m·k_n
    depends on n − m instead of m − n.

    Fix: `x1, x2 = x.chunk(2, dim=-1)`, then `return torch.cat((-x2, x1), dim=-1)`."""
    return -rope.turn(x)


def rotate_half_interleaved(x: Tensor) -> Tensor:
    """Your rotate_half turns adjacent pairs (x[2i], x[2i+1]) into
    (-x[2i+1], x[2i]), as GPT-J's rotate_every_two does: that is the
    interleaved (Meta/GPT-J) layout, and this exercise uses the half-split
    (HF/NeoX) one.

    Hint: in the half-split layout pair i is components i and i + d/2: the turn
    moves whole halves of the last axis, not neighbours.

    Fix: split the last axis in halves, `x1, x2 = x.chunk(2, dim=-1)`, and
    `return torch.cat((-x2, x1), dim=-1)`."""
    return rope.turn(x, "adjacent")


def rotate_half_mixed_pairing(x: Tensor) -> list[Tensor]:
    """Your rotate_half mixes the two layouts: it reads adjacent components
    (x[2i], x[2i+1]) and writes them out as halves, or reads the halves and
    writes them out interleaved.

    Hint: read and write in the same layout: half-split pairs component i with
    component i + d/2, on the way in and on the way out.

    Fix: halves on both sides: `x1, x2 = x.chunk(2, dim=-1)`, then
    `torch.cat((-x2, x1), dim=-1)`; no 0::2 / 1::2 slicing and no
    stack-and-flatten."""
    return [rope.turn(x, "adjacent", "half"), rope.turn(x, "half", "adjacent")]


# apply_rope ------------------------------------------------------------------


def apply_rope_interleaved(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> Tables:
    """Your output turns adjacent pairs (x[2i], x[2i+1]) by angle i: that is
    the interleaved (Meta/GPT-J) layout, and this exercise uses the half-split
    (HF/NeoX) one.

    Hint: in the half-split layout pair i is components i and i + d/2, and the
    tables you are given already hold angle i in columns i and i + d/2: nothing
    needs laying out again.

    Fix: use the tables as they come: `q * cos + rotate_half(q) * sin`, the same
    for k, with no repeat_interleave and no 0::2 / 1::2 slicing."""
    return rope.applied(q, k, cos, sin, positions, pairing="adjacent", angle_layout="adjacent")


def apply_rope_sign_flip(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> Tables:
    """Your rotation goes the wrong way: it turns position m by -m·θ_i, as
    x * cos - rotate_half(x) * sin does.

    Hint: norms are kept and q_m·k_n still depends on the offset only, but on
    n − m instead of m − n, so a model trained the other way sees every offset
    mirrored. Compare with RoFormer's rotation matrix, whose first row is
    (cos, -sin).

    Fix: a plus sign: `q * cos + rotate_half(q) * sin`, the same for k (the minus
    lives inside rotate_half)."""
    return rope.applied(q, k, cos, sin, positions, sign=-1.0)


def apply_rope_mixed_pairing(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> list[Tables]:
    """Your code pairs components in one layout and takes the angles in the
    other (rotate_half with repeat_interleave'd cos/sin, or adjacent pairs with
    the half-split tables): the two members of a pair turn by different
    angles, so norms change and q_m·k_n no longer depends on m − n alone.

    Hint: a pair turns as one, so both its components must meet the same angle.
    The half-split tables hold angle i in columns i and i + d/2, exactly the
    components rotate_half pairs.

    Fix: keep the tables as given and turn with rotate_half:
    `q * cos + rotate_half(q) * sin`, the same for k."""
    return [rope.applied(q, k, cos, sin, positions, **knobs) for knobs in rope.MIXED_PAIRINGS]


def apply_rope_ignores_positions(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> Tables:
    """Your code ignores `positions` and always uses rows 0..T-1 of the tables,
    as cos[:T] does.

    Hint: when positions are given (decoding with a KV cache, packed or
    left-padded batches), a token sits at the position given for it, not at
    its index t: its row of the table is that one.

    Fix: gather the rows, `cos[positions]` and `sin[positions]`, then
    `.unsqueeze(1)` when positions is (B, T), so they broadcast over the heads;
    slice `[:T]` only when positions is None."""
    return rope.applied(q, k, cos, sin, positions, ignore_positions=True)


def apply_rope_first_row_positions(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> Tables | None:
    """Your code turns every sequence of the batch at the first sequence's positions: positions of shape (B, T)
    are read as their first row (`positions[0]`, or the first T of them flattened), where each sequence has its own (a left-padded batch, packed rows, a decode
    step per sequence). Layout, direction, base and exponent are right; the rows of the tables are not.

    Hint: (B, T) positions give each sequence its own rows: `cos[positions]` is (B, T, Dh), one table per
    sequence, which broadcasts over the heads once it is (B, 1, T, Dh).

    Fix: Gather with the whole tensor, `cos[positions].unsqueeze(1)` for (B, T) positions, with no `[0]`,
    `.squeeze(0)` or reshape that keeps one row of it."""
    if positions is None or positions.dim() < 2:
        return None
    return rope.applied(q, k, cos, sin, positions[0])


def apply_rope_position_offset(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> Tables:
    """Your rows of the tables are one position off: position m reads row m + 1 (`cos[positions + 1]`, or
    `cos[1:T + 1]`), so every token is turned as if it stood one place further on. Layout, direction, base and
    exponent are right.

    Hint: Row m of rope_cache's tables holds the angles of position m: row 0 is position 0 (cos 1, sin 0), and
    the first token of a sequence is not turned at all.

    Fix: Index the tables with the positions as they are, `cos[positions]`, or `cos[:T]` when positions is
    None: no + 1."""
    given = torch.arange(q.shape[-2], device=q.device) if positions is None else positions
    return rope.applied(q, k, cos, sin, given + 1)


def apply_rope_tables_ignored(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> Tables:
    """Your code ignores the cos and sin tables it is handed: it builds angles of its own, with
    base 10000, and turns by those. Handed the tables of another base (Llama 3's 500000, or any
    scaled RoPE's), it still turns as base 10000 does.

    Hint: the tables are the whole description of the rotation: rope_cache, or a model's own
    config (its base, a YaRN or Llama 3.1 scaling), chose every angle in them. apply_rope only
    picks their rows and turns; it never computes a frequency.

    Fix: drop your own frequencies and angles: take the rows of the given tables,
    `cos[positions]` and `sin[positions]` (`[:T]` when positions is None), and turn with
    `x * cos + rotate_half(x) * sin`."""
    cos, sin = (t.to(q.device) for t in rope.reference_tables(q.shape[-1]))
    return rope.applied(q, k, cos, sin, positions)


# rope_interleaved ------------------------------------------------------------


def rope_interleaved_half_split(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Your output turns the pairs (x[i], x[i + d/2]): that is the half-split
    (HF/NeoX) layout, and this exercise uses the interleaved (Meta/GPT-J) one.

    Hint: in the interleaved layout pair i is components 2i and 2i+1, neighbours,
    as in RoFormer's block-diagonal rotation matrix and in Meta's complex-number
    code.

    Fix: take the pairs as `x0, x1 = x[..., 0::2], x[..., 1::2]`, turn them, and
    interleave them back with `torch.stack((y0, y1), dim=-1).flatten(-2)`; or
    `torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))`."""
    return rope.rotated(x, positions, base, pairing="half")


def rope_interleaved_sign_flip(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Your rotation goes the wrong way: each pair is turned by -m·θ_i
    (x0·cos + x1·sin, x1·cos - x0·sin, or a product with e^(-i·m·θ)).

    Hint: norms and the offset-only dependence survive a mirrored turn, but
    q_m·k_n then depends on n − m instead of m − n; compare with RoFormer's
    rotation matrix, whose first row is (cos, -sin).

    Fix: turn by +m·θ_i: `(x0 * cos - x1 * sin, x0 * sin + x1 * cos)`, or
    multiply by `torch.polar(torch.ones_like(angles), angles)`, not its
    conjugate."""
    return rope.rotated(x, positions, base, pairing="adjacent", sign=-1.0)


def rope_interleaved_mixed_pairing(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> list[Tensor]:
    """Your code pairs components in one layout and lays the angles out in the
    other (adjacent pairs with the angles written twice as halves, or halves
    with repeat_interleave'd angles): the two members of a pair turn by
    different angles, so norms change and q_m·k_n no longer depends on m − n
    alone.

    Hint: a pair turns as one: in the interleaved layout components 2i and 2i+1
    must both meet angle m·θ_i, so angle i belongs in columns 2i and 2i+1.

    Fix: keep one angle per pair, (..., d/2), and turn `x[..., 0::2]` and
    `x[..., 1::2]` with it; or widen the angles with
    `angles.repeat_interleave(2, dim=-1)`, never `torch.cat([angles, angles], dim=-1)`."""
    return [rope.rotated(x, positions, base, **knobs) for knobs in rope.MIXED_PAIRINGS]


def rope_interleaved_ignores_positions(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Your code ignores `positions` and always turns token t by t·θ_i.

    Hint: when positions are given (decoding with a KV cache, where one new token
    sits at position 3000), each token turns by its given position times θ_i;
    only positions=None means 0..T-1.

    Fix: `if positions is None: positions = torch.arange(T, device=x.device)`,
    then build the angles from them: `positions.float()[..., None] * theta`."""
    return rope.rotated(x, positions, base, pairing="adjacent", ignore_positions=True)


@says(WRONG_BASE)
def rope_interleaved_wrong_base(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> list[Tensor]:
    return [rope.rotated(x, positions, b, pairing="adjacent") for b in rope.OTHER_BASES]


@says(rope.WRONG_EXPONENT)
def rope_interleaved_wrong_exponent(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> list[Tensor]:
    return [rope.rotated(x, positions, base, pairing="adjacent", exponent=e) for e in rope.OTHER_EXPONENTS]


def rope_interleaved_low_precision(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Right in float32, wrong in bfloat16: your angles m·θ_i are computed in
    the input's dtype.

    Hint: bfloat16 keeps 8 bits of mantissa: positions 256 and 257 are the same
    number, and at position 4000 an angle is off by radians. The angles need
    float32 whatever x's dtype; only the result goes back to it.

    Fix: `angles = positions.float()[..., None] * theta.float()`, rotate
    `x.float()`, and cast the result with `.to(x.dtype)`."""
    return rope.rotated(x, positions, base, pairing="adjacent", angle_dtype=x.dtype)


# rope_from_shift_matrix (as rope_interleaved) --------------------------------


def shift_matrix_not_transposed(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Your rotation goes the wrong way: you applied M_m to the column vector (M_m @ x),
    which turns every pair by -m·θ_i.

    Hint: chapter 03's M_m moves a (sin, cos) pair forward; a RoPE pair (x[2i], x[2i+1]) sits in
    the opposite order, so the same turn is M_m's transpose. Check on d = 2, m = 1: x = (1, 0)
    must become (cos θ_0, sin θ_0).

    Fix: multiply the row vector by M_m: `x[..., t, :] @ relative_shift_matrix(m, d, base)`
    (or `M.T @ x` for a column vector)."""
    return rope.rotated(x, positions, base, pairing="adjacent", sign=-1.0)


def shift_matrix_ignores_positions(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Your code ignores `positions` and turns row t by M_t whatever position it holds.

    Hint: with positions given (decoding with a cache, one new token at position 3000), row t
    holds position positions[t], and that is the m of its matrix.

    Fix: build one matrix per given position: `relative_shift_matrix(int(m), d, base) for m in positions`."""
    return rope.rotated(x, positions, base, pairing="adjacent", ignore_positions=True)


def shift_matrix_base_not_passed(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> list[Tensor]:
    """Your rotation ignores the `base` it was given: `relative_shift_matrix(m, d)` is called
    without it, so every matrix is built with its default, 10000 (or your chapter 03 function
    writes a base of its own into the formula).

    Hint: the angles m·θ_i depend on the base through θ_i = base^(-2i/d). Llama 3 uses 500000:
    run yours with base=500000.0 and base=10000.0; do the results differ?

    Fix: pass it on, `relative_shift_matrix(int(m), d, base)`, and inside that function
    compute the frequencies from its `base` argument."""
    return [rope.rotated(x, positions, b, pairing="adjacent") for b in rope.OTHER_BASES]


# RotaryEmbedding (one tensor at a time: the check applies them to q and to k) --


def rotary_interleaved(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Your module turns adjacent pairs (x[2i], x[2i+1]): that is the
    interleaved (Meta/GPT-J) layout, and this exercise uses the half-split
    (HF/NeoX) one, like rope_cache and apply_rope.

    Hint: half-split pairs component i with component i + d/2; rope_cache's
    tables hold angle i in columns i and i + d/2, so those tables and
    rotate_half go together.

    Fix: build the tables as rope_cache does and turn with
    `q * cos + rotate_half(q) * sin` (k likewise); no 0::2 / 1::2 slicing, no
    repeat_interleave."""
    return rope.rotated(x, positions, base, pairing="adjacent")


def rotary_sign_flip(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Your module rotates the wrong way (a minus before rotate_half(x) * sin,
    or rotate_half with the minus on the wrong half): q_m·k_n depends on
    n − m instead of m − n.

    Hint: norms survive a mirrored turn, which is why it hides. Take one pair,
    (1, 0), at position m: a turn by +m·θ must give (cos mθ, sin mθ).

    Fix: `x * cos + rotate_half(x) * sin`, with rotate_half returning
    `torch.cat((-x2, x1), dim=-1)` for the halves x1, x2."""
    return rope.rotated(x, positions, base, sign=-1.0)


def rotary_mixed_pairing(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> list[Tensor]:
    """Your module pairs components in one layout and lays the angles out in
    the other (rotate_half with repeat_interleave'd angles, or adjacent pairs
    with the angles written twice as halves): the two members of a pair turn
    by different angles, so norms change.

    Hint: a pair turns as one: half-split pairs component i with i + d/2, so
    angle i must sit in columns i and i + d/2.

    Fix: half-split throughout: `torch.cat([angles, angles], dim=-1)` for the
    tables, and rotate_half for the turn."""
    return [rope.rotated(x, positions, base, **knobs) for knobs in rope.MIXED_PAIRINGS]


def rotary_ignores_positions(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Your module ignores `positions` and always uses rows 0..T-1 of its
    tables.

    Hint: with positions given, a token sits at the position given for it, not
    at its index t; the tables have a row per position, so the rows to use are
    the ones positions names.

    Fix: gather `cos[positions]` and `sin[positions]`: (T, Dh), or (B, T, Dh)
    followed by `.unsqueeze(1)` for the heads; slice `[:T]` only when positions
    is None."""
    return rope.rotated(x, positions, base, ignore_positions=True)


@says(WRONG_BASE)
def rotary_wrong_base(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> list[Tensor]:
    return [rope.rotated(x, positions, b) for b in rope.OTHER_BASES]


@says(rope.WRONG_EXPONENT)
def rotary_wrong_exponent(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> list[Tensor]:
    return [rope.rotated(x, positions, base, exponent=e) for e in rope.OTHER_EXPONENTS]


def rotary_low_precision(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Right in float32, wrong in bfloat16: your module computes the angles
    m·θ_i in the input's dtype.

    Hint: bfloat16 keeps 8 bits of mantissa, so positions 256 and 257 collide and
    late positions are off by radians. The tables depend on head_dim, max_len
    and base only: nothing about them needs the input's dtype.

    Fix: build the tables once, in `__init__`, in float32; in forward cast only
    what you multiply with, `cos[positions].to(q.dtype)`, or compute in float32
    and cast the result."""
    return rope.rotated(x, positions, base, angle_dtype=x.dtype)


# apply_partial_rope (as apply_rope): only the first r = cos.shape[-1] dims of each head turn ---


def partial_interleaved(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> Tables:
    """Your code turns adjacent pairs (x[2i], x[2i+1]) within the rotated part:
    that is the interleaved (Meta/GPT-J) layout, and this exercise uses the
    half-split (GPT-NeoX) one.

    Hint: with r = cos.shape[-1] rotated dims, half-split pair i is components i
    and i + r/2, and the given tables already hold angle i in columns i and
    i + r/2.

    Fix: turn `x[..., :r]` with the tables as they come,
    `x_rot * cos + rotate_half(x_rot) * sin`: no 0::2 / 1::2 slicing, no
    repeat_interleave."""
    return partial_rope.partial(q, k, cos, sin, positions, pairing="adjacent", angle_layout="adjacent")


def partial_sign_flip(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> Tables:
    """Your rotation of the first r dims goes the wrong way: position m turns by
    -m·θ_i, as `x_rot * cos - rotate_half(x_rot) * sin` does.

    Hint: a mirrored turn keeps norms and the offset-only dependence, so it
    hides; but q_m·k_n then depends on n − m instead of m − n.

    Fix: a plus sign, `x_rot * cos + rotate_half(x_rot) * sin` (the minus lives
    inside rotate_half)."""
    return partial_rope.partial(q, k, cos, sin, positions, sign=-1.0)


def partial_mixed_pairing(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> list[Tables]:
    """Your code pairs the rotated components in one layout and takes the angles
    in the other: the two members of a pair turn by different angles, so norms
    change.

    Hint: the tables hold angle i in columns i and i + r/2, exactly the two
    components rotate_half pairs within the r rotated dims.

    Fix: keep the tables as given and turn `x_rot = x[..., :r]` with
    `x_rot * cos + rotate_half(x_rot) * sin`."""
    return [partial_rope.partial(q, k, cos, sin, positions, **knobs) for knobs in rope.MIXED_PAIRINGS]


def partial_ignores_positions(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> Tables:
    """Your code ignores `positions` and always uses rows 0..T-1 of the tables.

    Hint: in a left-padded batch or while decoding with a cache, a token sits at
    the position given for it, not at its index t.

    Fix: gather `cos[positions]` and `sin[positions]`, then `.unsqueeze(1)` when
    positions is (B, T); slice `[:T]` only when positions is None."""
    return partial_rope.partial(q, k, cos, sin, positions, ignore_positions=True)


def partial_tables_ignored(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> Tables:
    """Your code ignores the cos and sin tables it is handed: it turns the first r = cos.shape[-1]
    dims by angles of its own, with base 10000. Handed the tables of another base (Llama 3's
    500000), it still turns as base 10000 does.

    Hint: the tables say everything about the rotation, its width r and every angle (the base and
    any scaling were chosen when they were built); apply_partial_rope only picks their rows.

    Fix: take the rows of the given tables, `cos[positions]` and `sin[positions]` (`[:T]` when
    positions is None), and turn `x[..., :r]` with `x_rot * cos + rotate_half(x_rot) * sin`."""
    own_cos, own_sin = (t.to(q.device) for t in rope.reference_tables(cos.shape[-1]))
    return partial_rope.partial(q, k, own_cos, own_sin, positions)


def partial_whole_head(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> list[Tables]:
    """Your code turns the whole head, every one of its head_dim dims, where only
    the first r = cos.shape[-1] should turn and the other head_dim - r pass
    through unchanged.

    Hint: partial RoPE (GPT-NeoX's rotary_pct, GPT-J's rotary_dim) puts position
    into part of each head only; the tables you are handed are r wide, built
    with an r-dim head's frequencies, and no column of them belongs to the rest.

    Fix: split each head: `x_rot, x_pass = x[..., :r], x[..., r:]` with
    `r = cos.shape[-1]`; turn x_rot only, then `torch.cat([x_rot_turned,
    x_pass], dim=-1)`."""
    return [rope.applied(q, k, *tables, positions) for tables in partial_rope.whole_head_tables(cos, sin, q.shape[-1])]


def partial_pairs_across_head(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> list[Tables]:
    """Your pairs span the whole head: component i is paired with i + head_dim/2,
    where within the r rotated dims it must be paired with i + r/2.

    Hint: `rotate_half` splits whatever it is given in two halves: given the whole
    head it pairs i with i + head_dim/2, given the first r dims it pairs i with
    i + r/2. Which one did your code hand it?

    Fix: slice first, rotate after: `x_rot = x[..., :r]`, then
    `x_rot * cos + rotate_half(x_rot) * sin`, never `rotate_half(x)[..., :r]`."""
    return partial_rope.pairs_across_head(q, k, cos, sin, positions)


def partial_last_dims(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> list[Tables]:
    """The turned part of your output sits in the last r dims of each head: you
    rotated `x[..., -r:]`, or put the turned part after the pass-through one.

    Hint: GPT-NeoX and GPT-J rotate the first r = cos.shape[-1] dims of each
    head and leave them in front: `torch.cat` keeps the order you give it.

    Fix: rotate `x[..., :r]` and join in that order,
    `torch.cat([x_rot_turned, x[..., r:]], dim=-1)`."""
    if cos.shape[-1] == q.shape[-1]:
        return []  # the whole head turns: no dims to misplace
    return [
        partial_rope.partial(q, k, cos, sin, positions, part="last", rest="before"),  # x[..., -r:] turned in place
        partial_rope.partial(q, k, cos, sin, positions, rest="before"),  # the turned part put after the rest
    ]


def partial_width_guessed(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> list[Tables]:
    """Your code turns fewer dims than the tables are wide, with the tables cut
    to its width: a width it worked out itself (a share of head_dim such as
    GPT-NeoX's rotary_pct = 0.25, or half the tables), where all
    r = cos.shape[-1] dims should turn.

    Hint: the tables you are handed already say how many dims turn: they are
    built for an r-dim head, r = cos.shape[-1], whatever share of head_dim that
    is (a quarter in GPT-NeoX, 64 of 256 in GPT-J).

    Fix: read the width from the tables, `r = cos.shape[-1]`, and use all of
    cos and sin: `x_rot, x_pass = x[..., :r], x[..., r:]`."""
    r = cos.shape[-1]
    widths = [w for w in range(2, r, 2)]  # every even width short of the tables', the tables cut to it
    return [partial_rope.partial(q, k, cos[..., :w], sin[..., :w], positions) for w in widths]


def partial_pass_dropped(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> list[Tables]:
    """Your output loses the last head_dim - r dims of each head: they are
    dropped (the output is r wide) or zeroed, where they must pass through
    unchanged.

    Hint: those dims carry no position, but they carry the rest of the head's
    content: attention still needs them, exactly as they came in.

    Fix: join them back after the turned part:
    `torch.cat([x_rot_turned, x[..., r:]], dim=-1)`, for q and for k."""
    return [partial_rope.partial(q, k, cos, sin, positions, rest=rest) for rest in ("dropped", "zeroed")]
