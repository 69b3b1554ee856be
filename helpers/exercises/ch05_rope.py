"""Chapter 05, rotary embeddings (Su et al. 2021, RoFormer): `rope_cache`,
`rotate_half`, `apply_rope`, `rope_interleaved` and `RotaryEmbedding`.

The mistakes of each exercise share its arguments and return what the mistaken code outputs:
    rope_cache        (head_dim, max_len, base) -> (cos, sin)
    rotate_half       (x) -> the turned x
    apply_rope        (q, k, cos, sin, positions) -> (q_rot, k_rot)
    rope_interleaved  (x, positions, base) -> the rotated x
    RotaryEmbedding   (x, positions, base) -> x rotated as the module would (q and k alike)
    apply_partial_rope  as apply_rope"""

from __future__ import annotations

import torch

from helpers import reference
from helpers.exercises import oracle, structure
from helpers.exercises.common import (
    WRONG_BASE,
    angle_tolerance,
    expect_cases,
    expect_then,
    frequencies,
    module_device_pass,
    plain_tensors,
    raised,
    refuses,
    refuses_past_max_len,
    says,
)
from helpers.exercises.rope import (
    ROPE_MAX_LEN,
    angles_precision_first,
    cache_with,
    further_findings,
    gather_rows,
    reference_tables,
    rope64,
    rope_angles,
    rope_cases,
    rope_positions,
    rope_properties,
    rope_tolerance,
    rope_with,
    table_rope_with,
    turn_adjacent,
    turn_half,
    two_tensors,
)
from helpers.probe import Probe, advice, close
from helpers.registry import Exercise
from helpers.safety import Failure

# --- known mistakes (each one RoPE of helpers.exercises.rope with one knob turned) ---

ROPE_WRONG_EXPONENT = """Your frequencies have the wrong exponent: θ_i is not
base^(-2i/d) for i = 0 .. d/2 - 1, with d the head dimension.

Hint: check the two ends by hand: θ_0 must be 1 and the last θ just above
1/base. The usual slips are a missing 2, a missing minus sign (or 1/), and
an integer division that rounds every exponent to zero.

Fix: `theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)`,
with d = head_dim (x.shape[-1]): true division `/`, never `//`."""


# rope_cache ------------------------------------------------------------------


def rope_cache_interleaved(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Your tables repeat each angle in adjacent columns (2i, 2i+1): that is
    the interleaved (Meta/GPT-J) layout, and this exercise uses the half-split
    (HF/NeoX) one.

    Hint: in the half-split layout pair i is components i and i + head_dim/2, so
    angle i belongs in column i and again in column i + head_dim/2: the second
    half of every row repeats the first.

    Fix: lay the (max_len, head_dim/2) angles out as two copies side by side,
    `torch.cat([angles, angles], dim=-1)`, instead of
    `angles.repeat_interleave(2, dim=-1)`."""
    return cache_with(head_dim, max_len, base, layout="adjacent")


@says(WRONG_BASE)
def rope_cache_wrong_base(
    head_dim: int, max_len: int, base: float = 10000.0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [cache_with(head_dim, max_len, 1000.0), cache_with(head_dim, max_len, 10000.0)]


@says(ROPE_WRONG_EXPONENT)
def rope_cache_wrong_exponent(
    head_dim: int, max_len: int, base: float = 10000.0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [cache_with(head_dim, max_len, base, exponent=e) for e in ("i/d", "4i/d", "+2i/d", "integer")]


def rope_cache_mixed_pairing(
    head_dim: int, max_len: int, base: float = 10000.0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Your columns j and j + head_dim/2 do not hold the same angle: the two
    members of a half-split pair would turn at different speeds, which is no
    rotation (norms change).

    Hint: there are head_dim/2 frequencies, one per pair, not one per column;
    each row holds those head_dim/2 angles twice, the second half a copy of
    the first.

    Fix: `angles = torch.outer(positions, theta)` with theta of length
    head_dim/2, then `torch.cat([angles, angles], dim=-1)` before cos and sin."""
    j = torch.arange(head_dim, dtype=torch.float64)
    positions = torch.arange(max_len, dtype=torch.float64)
    faces = []
    for exponent in (
        -j / head_dim,
        -2 * (j // 2) / head_dim,
    ):  # one frequency per column; the interleaved repeat read as halves
        angles = torch.outer(positions, base**exponent)
        faces.append((angles.cos().float(), angles.sin().float()))
    return faces


def rope_cache_low_precision(
    head_dim: int, max_len: int, base: float = 10000.0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Your angles were computed in half precision (bfloat16 or float16):
    nearby positions collapse onto the same angle.

    Hint: bfloat16 keeps 8 bits of mantissa, so 256 and 257 are the same number,
    and float16 merges positions past 2048. An angle m·θ_i needs every bit of m:
    which of positions, frequencies and their product was in a half dtype?

    Fix: `positions = torch.arange(max_len, dtype=torch.float32)`, frequencies in
    float32 too, and their product kept in float32: no `.half()` or
    `.to(torch.bfloat16)` anywhere on the way."""
    faces = []
    for half in (torch.bfloat16, torch.float16):
        positions = torch.arange(max_len, dtype=torch.float32)
        theta = frequencies(head_dim, base, dtype=torch.float32)
        for p, t, out in (
            (half, half, half),
            (half, torch.float32, torch.float32),
            (torch.float32, half, torch.float32),
            (torch.float32, torch.float32, half),
        ):
            angles = torch.outer(positions.to(p).to(torch.float32), theta.to(t).to(torch.float32)).to(out)
            angles = torch.cat([angles, angles], dim=-1)
            faces.append((angles.cos().float(), angles.sin().float()))
    return faces


def rope_cache_position_offset(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Your table starts at position 1: row m holds the angles of position
    m + 1, so row 0 of your cos table is not all ones.

    Hint: the first token sits at position 0, where every angle is 0 (cos 1,
    sin 0); row m of the tables is position m.

    Fix: count positions from 0: `torch.arange(max_len)`, not
    `torch.arange(1, max_len + 1)`."""
    angles = torch.outer(torch.arange(1, max_len + 1, dtype=torch.float64), frequencies(head_dim, base))
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


# rotate_half -----------------------------------------------------------------


def rotate_half_sign_flip(x: torch.Tensor) -> torch.Tensor:
    """Your rotate_half turns the pairs the other way: it returns
    cat(x2, -x1), a turn by -90 degrees.

    Hint: a turn by +90 degrees takes (a, b) to (-b, a): the minus sign goes on
    the half that moves to the front. With it on the other half, q_m·k_n
    depends on n − m instead of m − n.

    Fix: `x1, x2 = x.chunk(2, dim=-1)`, then `return torch.cat((-x2, x1), dim=-1)`."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x2, -x1], dim=-1)


def rotate_half_interleaved(x: torch.Tensor) -> torch.Tensor:
    """Your rotate_half turns adjacent pairs (x[2i], x[2i+1]) into
    (-x[2i+1], x[2i]), as GPT-J's rotate_every_two does: that is the
    interleaved (Meta/GPT-J) layout, and this exercise uses the half-split
    (HF/NeoX) one.

    Hint: in the half-split layout pair i is components i and i + d/2: the turn
    moves whole halves of the last axis, not neighbours.

    Fix: split the last axis in halves, `x1, x2 = x.chunk(2, dim=-1)`, and
    `return torch.cat((-x2, x1), dim=-1)`."""
    return turn_adjacent(x)


def rotate_half_mixed_pairing(x: torch.Tensor) -> list[torch.Tensor]:
    """Your rotate_half mixes the two layouts: it reads adjacent components
    (x[2i], x[2i+1]) and writes them out as halves, or reads the halves and
    writes them out interleaved.

    Hint: read and write in the same layout: half-split pairs component i with
    component i + d/2, on the way in and on the way out.

    Fix: halves on both sides: `x1, x2 = x.chunk(2, dim=-1)`, then
    `torch.cat((-x2, x1), dim=-1)`; no 0::2 / 1::2 slicing and no
    stack-and-flatten."""
    x1, x2 = x.chunk(2, dim=-1)
    return [torch.cat([-x[..., 1::2], x[..., 0::2]], dim=-1), torch.stack([-x2, x1], dim=-1).flatten(-2)]


# apply_rope ------------------------------------------------------------------


def apply_rope_interleaved(q, k, cos, sin, positions=None):
    """Your output turns adjacent pairs (x[2i], x[2i+1]) by angle i: that is
    the interleaved (Meta/GPT-J) layout, and this exercise uses the half-split
    (HF/NeoX) one.

    Hint: in the half-split layout pair i is components i and i + d/2, and the
    tables you are given already hold angle i in columns i and i + d/2: nothing
    needs laying out again.

    Fix: use the tables as they come: `q * cos + rotate_half(q) * sin`, the same
    for k, with no repeat_interleave and no 0::2 / 1::2 slicing."""
    return table_rope_with(q, k, cos, sin, positions, pairing="adjacent", angle_layout="adjacent")


def apply_rope_sign_flip(q, k, cos, sin, positions=None):
    """Your rotation goes the wrong way: it turns position m by -m·θ_i, as
    x * cos - rotate_half(x) * sin does.

    Hint: norms are kept and q_m·k_n still depends on the offset only, but on
    n − m instead of m − n, so a model trained the other way sees every offset
    mirrored. Compare with RoFormer's rotation matrix, whose first row is
    (cos, -sin).

    Fix: a plus sign: `q * cos + rotate_half(q) * sin`, the same for k (the minus
    lives inside rotate_half)."""
    return table_rope_with(q, k, cos, sin, positions, sign=-1.0)


def apply_rope_mixed_pairing(q, k, cos, sin, positions=None):
    """Your code pairs components in one layout and takes the angles in the
    other (rotate_half with repeat_interleave'd cos/sin, or adjacent pairs with
    the half-split tables): the two members of a pair turn by different
    angles, so norms change and q_m·k_n no longer depends on m − n alone.

    Hint: a pair turns as one, so both its components must meet the same angle.
    The half-split tables hold angle i in columns i and i + d/2, exactly the
    components rotate_half pairs.

    Fix: keep the tables as given and turn with rotate_half:
    `q * cos + rotate_half(q) * sin`, the same for k."""
    return [
        table_rope_with(q, k, cos, sin, positions, pairing="adjacent", angle_layout="half"),
        table_rope_with(q, k, cos, sin, positions, pairing="half", angle_layout="adjacent"),
    ]


def apply_rope_ignores_positions(q, k, cos, sin, positions=None):
    """Your code ignores `positions` and always uses rows 0..T-1 of the tables,
    as cos[:T] does.

    Hint: when positions are given (decoding with a KV cache, packed or
    left-padded batches), a token sits at the position given for it, not at
    its index t: its row of the table is that one.

    Fix: gather the rows, `cos[positions]` and `sin[positions]`, then
    `.unsqueeze(1)` when positions is (B, T), so they broadcast over the heads;
    slice `[:T]` only when positions is None."""
    return table_rope_with(q, k, cos, sin, positions, ignore_positions=True)


# rope_interleaved ------------------------------------------------------------


def rope_interleaved_half_split(x, positions=None, base=10000.0):
    """Your output turns the pairs (x[i], x[i + d/2]): that is the half-split
    (HF/NeoX) layout, and this exercise uses the interleaved (Meta/GPT-J) one.

    Hint: in the interleaved layout pair i is components 2i and 2i+1, neighbours,
    as in RoFormer's block-diagonal rotation matrix and in Meta's complex-number
    code.

    Fix: take the pairs as `x0, x1 = x[..., 0::2], x[..., 1::2]`, turn them, and
    interleave them back with `torch.stack((y0, y1), dim=-1).flatten(-2)`; or
    `torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))`."""
    return rope_with(x, positions, base, pairing="half")


def rope_interleaved_sign_flip(x, positions=None, base=10000.0):
    """Your rotation goes the wrong way: each pair is turned by -m·θ_i
    (x0·cos + x1·sin, x1·cos - x0·sin, or a product with e^(-i·m·θ)).

    Hint: norms and the offset-only dependence survive a mirrored turn, but
    q_m·k_n then depends on n − m instead of m − n; compare with RoFormer's
    rotation matrix, whose first row is (cos, -sin).

    Fix: turn by +m·θ_i: `(x0 * cos - x1 * sin, x0 * sin + x1 * cos)`, or
    multiply by `torch.polar(torch.ones_like(angles), angles)`, not its
    conjugate."""
    return rope_with(x, positions, base, pairing="adjacent", sign=-1.0)


def rope_interleaved_mixed_pairing(x, positions=None, base=10000.0):
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
    return [
        rope_with(x, positions, base, pairing="adjacent", angle_layout="half"),
        rope_with(x, positions, base, pairing="half", angle_layout="adjacent"),
    ]


def rope_interleaved_ignores_positions(x, positions=None, base=10000.0):
    """Your code ignores `positions` and always turns token t by t·θ_i.

    Hint: when positions are given (decoding with a KV cache, where one new token
    sits at position 3000), each token turns by its given position times θ_i;
    only positions=None means 0..T-1.

    Fix: `if positions is None: positions = torch.arange(T, device=x.device)`,
    then build the angles from them: `positions.float()[..., None] * theta`."""
    return rope_with(x, positions, base, pairing="adjacent", ignore_positions=True)


@says(WRONG_BASE)
def rope_interleaved_wrong_base(x, positions=None, base=10000.0):
    return [rope_with(x, positions, b, pairing="adjacent") for b in (1000.0, 10000.0)]


@says(ROPE_WRONG_EXPONENT)
def rope_interleaved_wrong_exponent(x, positions=None, base=10000.0):
    return [rope_with(x, positions, base, pairing="adjacent", exponent=e) for e in ("i/d", "4i/d", "+2i/d", "integer")]


def rope_interleaved_low_precision(x, positions=None, base=10000.0):
    """Right in float32, wrong in bfloat16: your angles m·θ_i are computed in
    the input's dtype.

    Hint: bfloat16 keeps 8 bits of mantissa: positions 256 and 257 are the same
    number, and at position 4000 an angle is off by radians. The angles need
    float32 whatever x's dtype; only the result goes back to it.

    Fix: `angles = positions.float()[..., None] * theta.float()`, rotate
    `x.float()`, and cast the result with `.to(x.dtype)`."""
    return rope_with(x, positions, base, pairing="adjacent", angle_dtype=x.dtype)


# RotaryEmbedding (one tensor at a time: the check applies them to q and to k) --


def rotary_interleaved(x, positions=None, base=10000.0):
    """Your module turns adjacent pairs (x[2i], x[2i+1]): that is the
    interleaved (Meta/GPT-J) layout, and this exercise uses the half-split
    (HF/NeoX) one, like rope_cache and apply_rope.

    Hint: half-split pairs component i with component i + d/2; rope_cache's
    tables hold angle i in columns i and i + d/2, so those tables and
    rotate_half go together.

    Fix: build the tables as rope_cache does and turn with
    `q * cos + rotate_half(q) * sin` (k likewise); no 0::2 / 1::2 slicing, no
    repeat_interleave."""
    return rope_with(x, positions, base, pairing="adjacent")


def rotary_sign_flip(x, positions=None, base=10000.0):
    """Your module rotates the wrong way (a minus before rotate_half(x) * sin,
    or rotate_half with the minus on the wrong half): q_m·k_n depends on
    n − m instead of m − n.

    Hint: norms survive a mirrored turn, which is why it hides. Take one pair,
    (1, 0), at position m: a turn by +m·θ must give (cos mθ, sin mθ).

    Fix: `x * cos + rotate_half(x) * sin`, with rotate_half returning
    `torch.cat((-x2, x1), dim=-1)` for the halves x1, x2."""
    return rope_with(x, positions, base, sign=-1.0)


def rotary_mixed_pairing(x, positions=None, base=10000.0):
    """Your module pairs components in one layout and lays the angles out in
    the other (rotate_half with repeat_interleave'd angles, or adjacent pairs
    with the angles written twice as halves): the two members of a pair turn
    by different angles, so norms change.

    Hint: a pair turns as one: half-split pairs component i with i + d/2, so
    angle i must sit in columns i and i + d/2.

    Fix: half-split throughout: `torch.cat([angles, angles], dim=-1)` for the
    tables, and rotate_half for the turn."""
    return [
        rope_with(x, positions, base, pairing="half", angle_layout="adjacent"),
        rope_with(x, positions, base, pairing="adjacent", angle_layout="half"),
    ]


def rotary_ignores_positions(x, positions=None, base=10000.0):
    """Your module ignores `positions` and always uses rows 0..T-1 of its
    tables.

    Hint: with positions given, a token sits at the position given for it, not
    at its index t; the tables have a row per position, so the rows to use are
    the ones positions names.

    Fix: gather `cos[positions]` and `sin[positions]`: (T, Dh), or (B, T, Dh)
    followed by `.unsqueeze(1)` for the heads; slice `[:T]` only when positions
    is None."""
    return rope_with(x, positions, base, ignore_positions=True)


@says(WRONG_BASE)
def rotary_wrong_base(x, positions=None, base=10000.0):
    return [rope_with(x, positions, b) for b in (1000.0, 10000.0)]


@says(ROPE_WRONG_EXPONENT)
def rotary_wrong_exponent(x, positions=None, base=10000.0):
    return [rope_with(x, positions, base, exponent=e) for e in ("i/d", "4i/d", "+2i/d", "integer")]


def rotary_low_precision(x, positions=None, base=10000.0):
    """Right in float32, wrong in bfloat16: your module computes the angles
    m·θ_i in the input's dtype.

    Hint: bfloat16 keeps 8 bits of mantissa, so positions 256 and 257 collide and
    late positions are off by radians. The tables depend on head_dim, max_len
    and base only: nothing about them needs the input's dtype.

    Fix: build the tables once, in `__init__`, in float32; in forward cast only
    what you multiply with, `cos[positions].to(q.dtype)`, or compute in float32
    and cast the result."""
    return rope_with(x, positions, base, angle_dtype=x.dtype)


# --- probes (the shared RoPE kit is helpers.exercises.rope) ---------------------------


# rope_cache -------------------------------------------------------------------


def collisions(probe: Probe, tables: tuple[torch.Tensor, torch.Tensor]):
    """Column 0 has θ_0 = 1, so its angle is the position itself: two equal rows
    past 255 (none before) mean positions were rounded to a low precision."""

    def fallback(failure: Failure) -> None:
        cos, sin = (t.detach().to("cpu", torch.float32) for t in tables)
        if cos.dim() != 2 or cos.shape[0] < 300:
            return
        same = (cos[1:, 0] == cos[:-1, 0]) & (sin[1:, 0] == sin[:-1, 0])  # row r == row r + 1
        if same.any() and not same[:255].any():
            row = int(same.nonzero()[0])
            message, hint, fix = advice(probe.exercise, "low_precision_angles")
            probe.fail(
                "low_precision_angles",
                f"{message} (Rows {row} and {row + 1} of your tables are identical.)",
                hint=hint,
                fix=fix,
            )

    return fallback


def cache_structure(probe: Probe, tables: tuple[torch.Tensor, torch.Tensor], base: float):
    """Rounded positions first (collisions), then what the tables themselves show:
    layout, direction, first position and per-pair frequencies (structure.rope_findings)."""
    rounded = collisions(probe, tables)

    def fallback(failure: Failure) -> None:
        rounded(failure)
        structure.name_what_is_wrong(probe, failure, structure.rope_findings(*tables, base))

    return fallback


CACHE_HELP = {
    "wrong_shape": (
        "Each table is (max_len, head_dim): a row per position, and in each row the head_dim/2 angles, one per pair, written twice.",
        "Make `angles = torch.outer(positions, theta)`, (max_len, head_dim/2), then lay it out twice with `torch.cat([angles, angles], dim=-1)`: (max_len, head_dim).",
    ),
    "wrong_values": (
        "Check two places by hand: row 0 is position 0, all angles 0 (cos 1, sin 0); column 0 has θ_0 = 1, so its angle is the position itself.",
        "For head_dim 8 and base 10000, θ = (1, 0.1, 0.01, 0.001): print `cos[1]`, which must be `torch.cos(theta)` written twice, and compare entry by entry.",
    ),
    "wrong_dtype": (
        "The tables are float32, the dtype q and k are turned in: float64 is fine while building them, not for what you return.",
        "Cast once, at the end: `return cos.float(), sin.float()`.",
    ),
    "rope_sign_flip": (
        "Row m holds the angles m·θ_i, which grow with m: sin(m·θ_0) starts positive at row 1. A minus sign on the angles, or on the sin table, turns every pair backwards.",
        "Build both tables from the same positive angles, `angles = torch.outer(positions, theta)`, and return `angles.cos()` and `angles.sin()` as they are.",
    ),
}


def check_rope_cache(fn, probe: Probe) -> None:
    for head_dim, max_len, *base in ((8, ROPE_MAX_LEN), (6, 40, 500000.0), (8, 1)):  # max_len = 1: tables of one row
        args = (head_dim, probe.length(max_len), *base)
        call = f"rope_cache({', '.join(repr(a) for a in args)})"
        tables = two_tensors(probe, probe.call(fn, *args, what=f"`{call}`"), f"`{call}`", "(cos, sin)")
        expected = reference.rope_cache(*args)  # float64, cast to float32 at the end
        base = args[2] if len(args) > 2 else 10000.0
        angles, theta = rope_angles(args[1], args[0], None, base, "half")
        tight = {"rtol": 0.0, "atol": angle_tolerance(torch.float32, angles, theta)}
        loose = {
            "atol": angle_tolerance(torch.bfloat16, angles, torch.ones_like(theta), angle_dtype=torch.bfloat16),
            "size": 1.0,
        }
        if all(close(t, e, **tight) for t, e in zip(tables, expected[::-1])):
            probe.fail(
                "wrong_values",
                f"`{call}` returns the sin table first and the cos table second.",
                hint="The docstring's order is (cos, sin), as HF's rotary embeddings return them: row 0 of the first table must be all ones.",
                fix="Swap the two in your return statement: `return cos, sin`.",
            )
        for index, name in enumerate(("cos", "sin")):
            mistakes = probe.known_mistakes(*args, index=index)
            with further_findings(probe, lambda tables=tables, base=base: structure.rope_findings(*tables, base)):
                expect_then(
                    probe,
                    angles_precision_first(
                        probe, tables[index], expected[index], tight, loose, cache_structure(probe, tables, base)
                    ),
                    tables[index],
                    expected[index],
                    what=f"the {name} table of {call}",
                    mistakes=mistakes,
                    **tight,
                )


# rotate_half ------------------------------------------------------------------

ROTATE_HALF_HELP = {
    "wrong_values": (
        "rotate_half turns each pair (a, b) = (x[i], x[i + d/2]) into (-b, a): the second half, negated, comes first, then the first half unchanged.",
        "`return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)` with `d = x.shape[-1]`.",
    ),
    "wrong_shape": (
        "rotate_half only moves and negates entries: its output has exactly x's shape, two halves of d/2 joined along the last axis.",
        "Split and join along the last axis only: `x.chunk(2, dim=-1)` and `torch.cat(..., dim=-1)`.",
    ),
    "wrong_dtype": (
        "rotate_half only moves and negates entries: it needs no new dtype, and its output has x's.",
        "Build the result from x's own halves (no `.float()`, no new float32 tensors), or cast it back with `.to(x.dtype)`.",
    ),
}


def quarter_turn_findings(out: torch.Tensor) -> list[tuple[str, str]]:
    """What rotate_half makes of the one-hot vectors e_0 .. e_(d-1), rows of out: each must
    land, whole, on its partner e_(j ± d/2), with a minus on the ones from the second half."""
    out = out.detach().to("cpu", torch.float64)
    d = out.shape[-1]
    if out.shape != (d, d) or d % 2 or not torch.isfinite(out).all():
        return []
    j, target = torch.arange(d), out.abs().argmax(1)
    sign = out[j, target]
    if not (torch.allclose(out.abs(), torch.eye(d, dtype=out.dtype)[target]) and (target[target] == j).all()):
        return []  # not a signed permutation of pairs: the catalogue's mixes, or something else
    findings = []
    if (target == j ^ 1).all():
        findings.append(
            (
                "rope_interleaved_convention",
                f"Your rotate_half moves e_0 to component {int(target[0])}: it turns adjacent pairs (2i, 2i+1), where pairs (i, i + d/2) are asked for.",
            )
        )
    elif not (target == (j + d // 2) % d).all():
        return []
    first = j < target  # the first member of each pair goes forward with a plus, the second back with a minus
    if (sign[first] < 0).all() and (sign[~first] > 0).all():
        findings.append(
            (
                "rope_sign_flip",
                "Your rotate_half puts the minus sign on the wrong member of each pair: e_0 comes out as minus its partner.",
            )
        )
    return findings


def quarter_turns(probe: Probe, fn, d: int = 8):
    def fallback(failure: Failure) -> None:
        try:
            out = probe.call(fn, torch.eye(d, device=probe.device))
        except Failure:
            return
        if isinstance(out, torch.Tensor):
            structure.name_what_is_wrong(probe, failure, quarter_turn_findings(out))

    return fallback


def check_rotate_half(fn, probe: Probe) -> None:
    for shape, dtype in (
        ((2, 3, 5, 8), torch.float32),
        ((7, 6), torch.float16),
        ((4, 10), torch.bfloat16),
    ):  # no float64: MPS lacks it
        x = probe.randn(*shape, dtype=dtype)
        out = probe.call(fn, x)
        mistakes = probe.known_mistakes(x)
        expect_then(
            probe,
            quarter_turns(probe, fn),
            out,
            reference.rotate_half(x),
            what=f"rotate_half of a {tuple(shape)} {str(dtype).replace('torch.', '')} tensor",
            mistakes=mistakes,
        )
    # Device: a sign vector or a mask made on the CPU inside would break on a GPU.
    probe.device_pass(lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device)))


# apply_rope -------------------------------------------------------------------

APPLY_ROPE_HELP = {
    "wrong_dtype": (
        "q_rot and k_rot come back in q's and k's dtype: the float32 arithmetic stays inside, and the model downstream expects bfloat16.",
        "Cast the results back: `q_rot.to(q.dtype)` and `k_rot.to(k.dtype)`.",
    ),
    "wrong_shape": (
        "Each output has its input's shape: q (B, Hq, T, Dh) and k (B, Hk, T, Dh), with the cos and sin rows broadcast over batch and heads.",
        "Make cos and sin (T, Dh), or (B, 1, T, Dh) when positions is (B, T), and keep q's and k's shapes: no reshape of q or k.",
    ),
}


# apply_rope is handed its tables: frequencies of its own (read by rope_properties) are not in its catalogue.
TABLES_GIVEN = (
    "apply_rope gets its angles from the cos and sin tables it is handed: rope_cache already chose the base and each pair's frequency θ_i, and nothing here should compute them again.",
    "Drop your own frequencies and angles: take the rows of the given tables, `cos[positions]` and `sin[positions]` (`[:T]` when positions is None), and turn with `x * cos + rotate_half(x) * sin`.",
)
APPLY_ROPE_OWN_HELP = {**APPLY_ROPE_HELP, "wrong_base": TABLES_GIVEN, "wrong_exponent": TABLES_GIVEN}


def check_apply_rope(fn, probe: Probe) -> None:
    d, B, Hq, Hk, T = 8, 3, 4, 2, 5  # GQA: 4 query heads share 2 key heads
    cos, sin = (t.to(probe.device, copy=True) for t in reference_tables(d))
    cases = rope_cases(probe, B, T)
    for what, dtype, positions in cases:
        length = T if positions is None else positions.shape[-1]
        q, k = (probe.sequence(probe.randn(B, H, length, d, dtype=dtype), None, dim=-2) for H in (Hq, Hk))
        args = (q, k, cos, sin) if positions is None else (q, k, cos, sin, positions)
        try:
            out = probe.call(fn, *args)
        except Failure as failure:
            if (
                failure.code == "raised"
                and positions is not None
                and "IndexError" in failure.message
                and int(positions.max()) >= length
            ):
                probe.fail(
                    "raised",
                    f"{failure.message.rstrip('.')}. That was with positions up to {int(positions.max())} for a sequence of T = {length} tokens, "
                    "as when decoding at an offset with a cache: were the cos/sin rows cut to the first T before the positions picked from them (cos[:T][positions])?",
                    hint="The positions index the whole cache of max_len rows: a token at position 3999 needs row 3999, whatever the sequence's length T.",
                    fix="Gather from the full tables, `cos[positions]` and `sin[positions]`, and slice `cos[:T]` only when positions is None.",
                )
            if failure.code == "raised" and positions is not None and positions.dim() == 2:
                probe.fail(
                    "raised",
                    f"{failure.message.rstrip('.')}. That was with positions of shape (B, T), a row per sequence.",
                    hint="With positions of shape (B, T) the gathered rows are (B, T, Dh), but q is (B, H, T, Dh): without a head axis, broadcasting lines up B with H.",
                    fix="Insert the head axis: `cos[positions].unsqueeze(1)` and `sin[positions].unsqueeze(1)`, (B, 1, T, Dh).",
                )
            raise
        out = two_tensors(probe, out, f"`{probe.name}`", "(q_rot, k_rot)")
        expected = rope64(q, positions, 10000.0), rope64(k, positions, 10000.0)  # the tables' base

        for index, name in enumerate(("q_rot", "k_rot")):

            def rotate(x, p, index=index):
                return probe.call(fn, x, x, cos, sin, p)[index]

            mistakes = probe.known_mistakes(*args, index=index)
            shape = f"{tuple(expected[index].shape)} {str(dtype).replace('torch.', '')}"
            x = args[index]
            tight, loose = rope_tolerance(x, positions), rope_tolerance(x, positions, half=True)
            fallback = (
                bf16_arithmetic(probe)
                if dtype == torch.bfloat16
                else angles_precision_first(
                    probe, out[index], expected[index], tight, loose, rope_properties(probe, rotate, d)
                )
            )
            expect_then(
                probe,
                fallback,
                out[index],
                expected[index],
                what=f"{name} {shape}, {what},",
                mistakes=mistakes,
                **tight,
            )
    # Device: tables, positions and q, k on the device; anything made on the CPU inside shows.
    for positions in (None, torch.arange(5)):
        probe.device_pass(
            lambda device, positions=positions: probe.call(
                fn,
                probe.randn(B, Hq, T, d, device=device),
                probe.randn(B, Hk, T, d, device=device),
                *(t.to(device) for t in reference_tables(d)),
                *(() if positions is None else (positions.to(device),)),
            )
        )
    oracle.llama_apply_rope(probe, fn)  # the second oracle: inside transformers' Llama


def bf16_arithmetic(probe: Probe):
    def fallback(failure: Failure) -> None:  # the float32 probes passed: the precision is what differs
        probe.fail(
            "wrong_values",
            f"{failure.message} Your code is right in float32 but not in bfloat16.",
            hint="bfloat16 keeps 8 bits of mantissa: a product and a sum each rounded in bfloat16 drift away from the reference, which computes in float32 and rounds once, at the end.",
            fix="Compute in float32 and cast once: `(q.float() * cos + rotate_half(q.float()) * sin).to(q.dtype)`, the same for k.",
        )

    return fallback


# rope_interleaved -------------------------------------------------------------


def low_precision(probe: Probe):
    def fallback(failure: Failure) -> None:  # the float32 probes passed: the precision is what differs
        message, hint, fix = advice(probe.exercise, "low_precision_angles")
        probe.fail("low_precision_angles", message, hint=hint, fix=fix)

    return fallback


INTERLEAVED_HELP = {
    "wrong_shape": (
        "The output has x's shape: the pairs are turned in place, components 2i and 2i+1 back in columns 2i and 2i+1.",
        "Put the turned pairs back with `torch.stack((y0, y1), dim=-1).flatten(-2)`, (..., d/2, 2) to (..., d).",
    ),
    "wrong_dtype": (
        "The angles need float32, but the result comes back in x's dtype: only the arithmetic is done in float32.",
        "Cast the result at the end: `.to(x.dtype)`.",
    ),
}


def check_rope_interleaved(fn, probe: Probe) -> None:
    positions = rope_positions(probe, 6)
    sequence = lambda x: probe.sequence(x, None, dim=-2)  # noqa: E731 (the length of x is its axis -2)
    cases = (  # (what, x, extra arguments)
        ("x (2, 3, 7, 8), default positions and base", sequence(probe.randn(2, 3, 7, 8)), ()),
        (
            "x (2, 3, 6, 12), positions up to 3999, base=500000.0",
            sequence(probe.randn(2, 3, 6, 12)),
            (positions, 500000.0),
        ),
        (
            "x (2, 3, 6, 12) in bfloat16, positions up to 3999",
            sequence(probe.randn(2, 3, 6, 12, dtype=torch.bfloat16)),
            (positions,),
        ),
        (
            "x (2, 3, 1, 8), one token (T = 1) at position 3999",
            sequence(probe.randn(2, 3, 1, 8)),
            (probe.positions(ROPE_MAX_LEN, 1),),
        ),
    )

    def expect(out, what: str, x: torch.Tensor, extra: tuple) -> None:
        positions, base = (list(extra) + [None, 10000.0][len(extra) :])[:2]
        expected = rope64(x, positions, base, "adjacent")
        mistakes = probe.known_mistakes(x, *extra)

        def rotate(x, p, fn=fn):
            return probe.call(fn, x, p)

        tight, loose = (
            rope_tolerance(x, positions, base, "adjacent"),
            rope_tolerance(x, positions, base, "adjacent", half=True),
        )
        as_halves = torch.cat(
            [expected[..., 0::2], expected[..., 1::2]], dim=-1
        )  # the right pairs, written back as two halves
        if (
            isinstance(out, torch.Tensor)
            and out.shape == expected.shape
            and not close(out, expected, **tight)
            and close(out, as_halves, **tight)
        ):
            probe.fail(
                "wrong_values",
                f"For {what}, your pairs are turned right, but the output lays them out as two halves, all first components then all second ones, "
                "instead of interleaving them again: component 2i and 2i + 1 of the output must be pair i.",
                hint="torch.cat joins whole blocks one after the other; the output needs pair i back in columns 2i and 2i + 1, as it came in.",
                fix="Interleave the turned components: `torch.stack((y0, y1), dim=-1).flatten(-2)` instead of `torch.cat((y0, y1), dim=-1)`.",
            )
        fallback = (
            low_precision(probe)
            if x.dtype == torch.bfloat16
            else angles_precision_first(
                probe, out, expected, tight, loose, rope_properties(probe, rotate, x.shape[-1], "adjacent")
            )
        )
        expect_then(probe, fallback, out, expected, what=f"the output for {what},", mistakes=mistakes, **tight)

    runs = [
        (
            (x, *extra),
            lambda x=x, extra=extra: probe.call(fn, x, *extra),
            lambda out, what=what, x=x, extra=extra: expect(out, what, x, extra),
        )
        for what, x, extra in cases
    ]
    positions_ignored = lambda args: [(args[0], None, *args[2:])] if len(args) > 1 and args[1] is not None else []  # noqa: E731
    expect_cases(
        probe,
        runs,
        {"rope_ignores_positions": positions_ignored} if "rope_ignores_positions" in probe.exercise.mistakes else {},
    )
    probe.device_pass(lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device)))
    probe.device_pass(
        lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device), torch.arange(5, device=device), 500000.0)
    )
    oracle.gptj_interleaved(probe, fn)  # the second oracle: inside transformers' GPT-J


# rope_from_shift_matrix: its mistakes take (x, positions, base) -------------------


def shift_matrix_not_transposed(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """Your rotation goes the wrong way: you applied M_m to the column vector (M_m @ x),
    which turns every pair by -m·θ_i.

    Hint: chapter 03's M_m moves a (sin, cos) pair forward; a RoPE pair (x[2i], x[2i+1]) sits in
    the opposite order, so the same turn is M_m's transpose. Check on d = 2, m = 1: x = (1, 0)
    must become (cos θ_0, sin θ_0).

    Fix: multiply the row vector by M_m: `x[..., t, :] @ relative_shift_matrix(m, d, base)`
    (or `M.T @ x` for a column vector)."""
    return rope_with(x, positions, base, pairing="adjacent", sign=-1.0)


def shift_matrix_ignores_positions(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """Your code ignores `positions` and turns row t by M_t whatever position it holds.

    Hint: with positions given (decoding with a cache, one new token at position 3000), row t
    holds position positions[t], and that is the m of its matrix.

    Fix: build one matrix per given position: `relative_shift_matrix(int(m), d, base) for m in positions`."""
    return rope_with(x, positions, base, pairing="adjacent", ignore_positions=True)


# RotaryEmbedding --------------------------------------------------------------

LENGTH_HINT = (
    "Check the input before the lookup: the largest position (T - 1 when positions is None) against max_len. A ValueError that names "
    "max_len tells the user what to change; an IndexError, an assert (which optimised Python skips) or a device-side assert does not."
)
LENGTH_FIX = (
    "At the top of forward: `last = T - 1 if positions is None else int(positions.max())`, then `if last >= self.max_len: "
    "raise ValueError(f'position {last} is past max_len={self.max_len}: build the module with a larger max_len')`."
)
DEVICE_HINT = "Buffers registered in __init__ follow the module through .to(device); a tensor made in forward lands on the CPU unless you say where."
DEVICE_FIX = "Build the tables in `__init__` and register them as buffers; in forward make positions with `torch.arange(T, device=q.device)`."


def check_rotary_embedding(cls, probe: Probe) -> None:
    """Four independent aspects, all run (probe.independent): buffers, values, what
    state_dict saves, the length check; then the device pass. A module with a
    Parameter cache and no length check hears of both at once."""
    module = probe.build(cls, 8, ROPE_MAX_LEN)
    plain = plain_tensors(module)

    def values() -> None:
        try:
            rotary_values(cls, probe, module)
        except Failure as failure:
            if raised(failure, "ValueError"):  # a position the tables hold was refused: an off-by-one there says why
                try:
                    length_checked(cls, probe)
                except Failure as found:  # anything else it finds, its own probe below says
                    if found.code == "length_check_off_by_one":
                        raise found from None
            if not (plain and failure.code == "raised" and "device" in failure.message.lower()):
                raise  # a device clash from the plain attributes is that finding, said once

    probe.independent(
        lambda: plain_attributes(probe, module, plain),
        values,
        lambda: nothing_saved(probe, module),
        lambda: length_checked(cls, probe),
    )
    if plain:
        return  # the device pass would only find the plain attributes again
    # Device: every tensor on the meta device; a table or position made on the CPU shows.
    module_device_pass(
        probe,
        cls,
        (8, 16),
        lambda device: (probe.randn(1, 2, 4, 8, device=device), probe.randn(1, 1, 4, 8, device=device)),
        hint=DEVICE_HINT,
        fix=DEVICE_FIX,
    )
    oracle.llama_rotary_module(probe, cls)  # the second oracle: inside transformers' Llama


def plain_attributes(probe: Probe, module, plain: list[str]) -> None:
    """A tensor kept as a plain attribute stays behind when .to(device) moves the module."""
    if plain:
        probe.fail(
            "pe_not_buffer",
            f"`{probe.name}` keeps {', '.join(plain)} as plain tensor attributes: module.to('cuda') does not move those, so on a GPU your forward mixes devices.",
            hint="Only parameters and registered buffers follow a module through .to(), .cuda() and .half(); a plain tensor attribute stays where it was made.",
            fix=f"Register each table in `__init__` instead: `self.register_buffer('{plain[0]}', table, persistent=False)`"
            + (f", and likewise for {', '.join(plain[1:])}." if plain[1:] else "."),
        )


def rotary_values(cls, probe: Probe, module) -> None:
    """The same cases as apply_rope, then a module with another head size and base."""
    d, B, Hq, Hk, T = 8, 3, 4, 2, 5
    cases = rope_cases(probe, B, T)
    runs = [(module, d, 10000.0, ROPE_MAX_LEN, f"{probe.name}({d}, {ROPE_MAX_LEN})", case) for case in cases]
    runs.append(  # T = max_len: every row of the tables
        (
            probe.build(cls, 12, 64, 500.0),
            12,
            500.0,
            64,
            f"{probe.name}(12, 64, 500.0)",
            ("positions=None and T = max_len = 64", torch.float32, None),
        )
    )
    for built, head_dim, base, max_len, made, (what, dtype, positions) in runs:
        length = (
            (T if max_len == ROPE_MAX_LEN else max_len) if positions is None else positions.shape[-1]
        )  # the small module: T = max_len
        q, k = (probe.sequence(probe.randn(B, H, length, head_dim, dtype=dtype), max_len, dim=-2) for H in (Hq, Hk))
        extra = () if positions is None else (positions,)
        call = f"`{made}` called with {what}"
        out = two_tensors(probe, probe.call(built, q, k, *extra, what=call), call, "(q_rot, k_rot)")
        expected = rope64(q, positions, base), rope64(k, positions, base)

        for index, (x, got, want, name) in enumerate(zip((q, k), out, expected, ("q_rot", "k_rot"))):

            def rotate(x, p, built=built, index=index):
                return probe.call(built, x, x, p)[index]

            mistakes = probe.known_mistakes(x, positions, base)
            tight, loose = rope_tolerance(x, positions, base), rope_tolerance(x, positions, base, half=True)
            fallback = (
                low_precision(probe)
                if dtype == torch.bfloat16
                else angles_precision_first(
                    probe, got, want, tight, loose, rope_properties(probe, rotate, head_dim, base=base)
                )
            )
            expect_then(
                probe,
                fallback,
                got,
                want,
                what=f"{name} {tuple(want.shape)} from {made} with {what},",
                mistakes=mistakes,
                **tight,
            )


def nothing_saved(probe: Probe, module) -> None:
    """Nothing to train, nothing to save: the tables are rebuilt from the arguments."""
    saved = list(module.state_dict())
    if saved:
        kinds = {
            name: "an nn.Parameter" if name in dict(module.named_parameters()) else "a persistent buffer"
            for name in saved
        }
        listed = ", ".join(f"{name} ({kind})" for name, kind in kinds.items())
        probe.fail(
            "cache_is_parameter",
            f"`{probe.name}` saves {listed} in its state_dict.",
            hint="The cos/sin tables are fixed and rebuilt from (head_dim, max_len, base): an optimizer must never train them, and checkpoints must not carry them (a model built with another max_len could not load one).",
            fix=f"Register each as a non-persistent buffer, not a Parameter: `self.register_buffer('{saved[0]}', table, persistent=False)`.",
        )


def length_checked(cls, probe: Probe) -> None:
    """Refuse positions past the table, on the CPU (see common.refuses)."""
    small = probe.call(cls, 8, 16, what=f"`{probe.name}(8, 16)`")
    q, k = probe.randn(1, 2, 4, 8, device="cpu"), probe.randn(1, 1, 4, 8, device="cpu")
    last = probe.positions(16, 4, device="cpu")  # the last position, 15, has its row: it must work
    try:
        probe.call(small, q, k, last)
    except Failure as failure:
        if raised(failure, "ValueError"):
            probe.fail(
                "length_check_off_by_one",
                f"`{probe.name}(8, max_len=16)` refused positions {last.tolist()}, yet the tables have a row for every position up to 15.",
                hint="Count the rows: a table of max_len rows holds positions 0 .. max_len - 1. Which positions really lie past it?",
                fix="Refuse only positions past the table: `if last >= self.max_len: raise ValueError(...)`, with last = positions.max() (or T - 1 when positions is None).",
            )
        raise
    refuses(
        probe,
        lambda: probe.call(small, q, k, torch.tensor([0, 5, 16, 3])),
        f"`{probe.name}(8, max_len=16)` called with positions [0, 5, 16, 3]",
        LENGTH_FIX,
        hint=LENGTH_HINT,
    )
    # positions=None: T = max_len = 16 tokens must work, 17 must be refused.
    tokens = lambda T, H: probe.sequence(probe.randn(1, H, T, 8, device="cpu"), 16, dim=-2)  # noqa: E731
    refuses_past_max_len(
        probe, lambda T: probe.call(small, tokens(T, 2), tokens(T, 1)), 16, hint=LENGTH_HINT, fix=LENGTH_FIX
    )


# apply_partial_rope: its mistakes take apply_rope's arguments ----------------------
# Partial RoPE (GPT-NeoX's rotary_pct, GPT-J's rotary_dim): only the first r =
# cos.shape[-1] dims of each head turn, half-split within them; the rest pass through.


def _partial(q, k, cos, sin, positions, **knobs):
    """The right partial RoPE with one of table_rope_with's knobs turned on the rotated part."""
    r = cos.shape[-1]
    turned = table_rope_with(q[..., :r], k[..., :r], cos, sin, positions, **knobs)
    return tuple(torch.cat([y, x[..., r:]], dim=-1) for y, x in zip(turned, (q, k)))


def partial_interleaved(q, k, cos, sin, positions=None):
    """Your code turns adjacent pairs (x[2i], x[2i+1]) within the rotated part:
    that is the interleaved (Meta/GPT-J) layout, and this exercise uses the
    half-split (GPT-NeoX) one.

    Hint: with r = cos.shape[-1] rotated dims, half-split pair i is components i
    and i + r/2, and the given tables already hold angle i in columns i and
    i + r/2.

    Fix: turn `x[..., :r]` with the tables as they come,
    `x_rot * cos + rotate_half(x_rot) * sin`: no 0::2 / 1::2 slicing, no
    repeat_interleave."""
    return _partial(q, k, cos, sin, positions, pairing="adjacent", angle_layout="adjacent")


def partial_sign_flip(q, k, cos, sin, positions=None):
    """Your rotation of the first r dims goes the wrong way: position m turns by
    -m·θ_i, as `x_rot * cos - rotate_half(x_rot) * sin` does.

    Hint: a mirrored turn keeps norms and the offset-only dependence, so it
    hides; but q_m·k_n then depends on n − m instead of m − n.

    Fix: a plus sign, `x_rot * cos + rotate_half(x_rot) * sin` (the minus lives
    inside rotate_half)."""
    return _partial(q, k, cos, sin, positions, sign=-1.0)


def partial_mixed_pairing(q, k, cos, sin, positions=None):
    """Your code pairs the rotated components in one layout and takes the angles
    in the other: the two members of a pair turn by different angles, so norms
    change.

    Hint: the tables hold angle i in columns i and i + r/2, exactly the two
    components rotate_half pairs within the r rotated dims.

    Fix: keep the tables as given and turn `x_rot = x[..., :r]` with
    `x_rot * cos + rotate_half(x_rot) * sin`."""
    return [
        _partial(q, k, cos, sin, positions, pairing="adjacent", angle_layout="half"),
        _partial(q, k, cos, sin, positions, pairing="half", angle_layout="adjacent"),
    ]


def partial_ignores_positions(q, k, cos, sin, positions=None):
    """Your code ignores `positions` and always uses rows 0..T-1 of the tables.

    Hint: in a left-padded batch or while decoding with a cache, a token sits at
    the position given for it, not at its index t.

    Fix: gather `cos[positions]` and `sin[positions]`, then `.unsqueeze(1)` when
    positions is (B, T); slice `[:T]` only when positions is None."""
    return _partial(q, k, cos, sin, positions, ignore_positions=True)


def partial_whole_head(q, k, cos, sin, positions=None):
    """Your code turns the whole head, every one of its head_dim dims, where only
    the first r = cos.shape[-1] should turn and the other head_dim - r pass
    through unchanged.

    Hint: partial RoPE (GPT-NeoX's rotary_pct, GPT-J's rotary_dim) puts position
    into part of each head only; the tables you are handed are r wide, built
    with an r-dim head's frequencies, and no column of them belongs to the rest.

    Fix: split each head: `x_rot, x_pass = x[..., :r], x[..., r:]` with
    `r = cos.shape[-1]`; turn x_rot only, then `torch.cat([x_rot_turned,
    x_pass], dim=-1)`."""
    r, d, T = cos.shape[-1], q.shape[-1], cos.shape[0]
    if d % r:
        return []
    tiled = (cos.repeat(1, d // r), sin.repeat(1, d // r))  # the r-wide tables repeated to fit the head
    own = reference.rope_cache(d, T)  # the head's own frequencies, as if r were head_dim
    return [table_rope_with(q, k, *tables, positions) for tables in (tiled, own)]


def partial_pairs_across_head(q, k, cos, sin, positions=None):
    """Your pairs span the whole head: component i is paired with i + head_dim/2,
    where within the r rotated dims it must be paired with i + r/2.

    Hint: `rotate_half` splits whatever it is given in two halves: given the whole
    head it pairs i with i + head_dim/2, given the first r dims it pairs i with
    i + r/2. Which one did your code hand it?

    Fix: slice first, rotate after: `x_rot = x[..., :r]`, then
    `x_rot * cos + rotate_half(x_rot) * sin`, never `rotate_half(x)[..., :r]`."""
    r, d = cos.shape[-1], q.shape[-1]
    if 2 * r > d or d % 2:
        return []
    c, s = gather_rows(cos, sin, q.shape[-2], positions)
    pairs = torch.cat([torch.arange(r // 2), d // 2 + torch.arange(r // 2)]).to(q.device)  # (i, i + d/2), i < r/2

    def sliced_after(x):  # rotate_half of the whole head, cut to r
        return torch.cat([(x[..., :r].float() * c + turn_half(x.float())[..., :r] * s).to(x.dtype), x[..., r:]], dim=-1)

    def spread(x):  # the pairs (i, i + d/2) turned, i < r/2, the rest left
        out = x.clone()
        picked = x[..., pairs].float()
        out[..., pairs] = (picked * c + turn_half(picked) * s).to(x.dtype)
        return out

    return [(sliced_after(q), sliced_after(k)), (spread(q), spread(k))]


def partial_last_dims(q, k, cos, sin, positions=None):
    """The turned part of your output sits in the last r dims of each head: you
    rotated `x[..., -r:]`, or put the turned part after the pass-through one.

    Hint: GPT-NeoX and GPT-J rotate the first r = cos.shape[-1] dims of each
    head and leave them in front: `torch.cat` keeps the order you give it.

    Fix: rotate `x[..., :r]` and join in that order,
    `torch.cat([x_rot_turned, x[..., r:]], dim=-1)`."""
    r = cos.shape[-1]
    if r == q.shape[-1]:
        return []
    in_place = table_rope_with(q[..., -r:], k[..., -r:], cos, sin, positions)
    at_end = table_rope_with(q[..., :r], k[..., :r], cos, sin, positions)
    return [
        tuple(torch.cat([x[..., :-r], y], dim=-1) for x, y in zip((q, k), in_place)),
        tuple(torch.cat([x[..., r:], y], dim=-1) for x, y in zip((q, k), at_end)),
    ]


def partial_pass_dropped(q, k, cos, sin, positions=None):
    """Your output loses the last head_dim - r dims of each head: they are
    dropped (the output is r wide) or zeroed, where they must pass through
    unchanged.

    Hint: those dims carry no position, but they carry the rest of the head's
    content: attention still needs them, exactly as they came in.

    Fix: join them back after the turned part:
    `torch.cat([x_rot_turned, x[..., r:]], dim=-1)`, for q and for k."""
    r = cos.shape[-1]
    turned = table_rope_with(q[..., :r], k[..., :r], cos, sin, positions)
    zeroed = tuple(torch.cat([y, torch.zeros_like(x[..., r:])], dim=-1) for x, y in zip((q, k), turned))
    return [turned, zeroed]


PARTIAL_HELP = {
    **APPLY_ROPE_OWN_HELP,
    "wrong_shape": (
        "Each output has its input's shape, q (B, Hq, T, Dh) and k (B, Hk, T, Dh): the first r = cos.shape[-1] dims turned, the other Dh - r as they came.",
        "Join the two parts back: `torch.cat([x_rot_turned, x[..., r:]], dim=-1)`, with the cos and sin rows (T, r), or (B, 1, T, r) for positions (B, T).",
    ),
}


def pass_through_kept(probe: Probe, x: torch.Tensor, got: torch.Tensor, r: int, inner):
    """When no known mistake reproduces the output: first the dims past r, which must
    come out as they went in; then `inner`, the reading of the turned part."""

    def fallback(failure: Failure) -> None:
        if got.shape == x.shape and not close(got[..., r:], x[..., r:], **rope_tolerance(x)):
            probe.fail(
                "wrong_values",
                f"{failure.message} Dims {r}..{x.shape[-1] - 1} of each head, which must pass through unchanged, changed.",
                hint="Only the first r = cos.shape[-1] dims of each head turn; the other head_dim - r carry no position and come out exactly as they went in.",
                fix="Split each head, `x_rot, x_pass = x[..., :r], x[..., r:]`, turn x_rot only, and `torch.cat([x_rot_turned, x_pass], dim=-1)`.",
            )
        inner(failure)

    return fallback


def turned_part(probe: Probe, fn, index: int, d: int, cos: torch.Tensor, sin: torch.Tensor):
    """The student's rotation of the first r dims alone, for rope_properties: rotate(x (..., r), positions)."""
    r = cos.shape[-1]

    def rotate(part, p):
        whole = torch.cat([part, part.new_zeros(*part.shape[:-1], d - r)], dim=-1)  # the dims past r: zeros
        return probe.call(fn, whole, whole, cos, sin, p)[index][..., :r]

    return rotate


def check_apply_partial_rope(fn, probe: Probe) -> None:
    """apply_rope's cases (GQA, positions None / offset / (T,) / (B, T), bfloat16) with
    GPT-NeoX's split, a quarter of each head turned; then half (GPT-J's share) and all of it."""
    B, Hq, Hk, T = 3, 4, 2, 5
    runs = [(16, 4, case) for case in rope_cases(probe, B, T)]
    runs += [
        (16, 8, ("positions of shape (T,) up to 3999", torch.float32, rope_positions(probe, T))),
        (8, 8, ("positions=None", torch.float32, None)),
    ]

    def expect(out, args: tuple, d: int, r: int, what: str, dtype: torch.dtype) -> None:
        q, k, cos, sin = args[:4]
        expected = reference.apply_partial_rope(*args)
        for index, (x, name) in enumerate(zip((q, k), ("q_rot", "k_rot"))):
            inner = (
                bf16_arithmetic(probe)
                if dtype == torch.bfloat16
                else rope_properties(probe, turned_part(probe, fn, index, d, cos, sin), r)
            )
            shape = f"{tuple(expected[index].shape)} {str(dtype).replace('torch.', '')}"
            expect_then(
                probe,
                pass_through_kept(probe, x, out[index], r, inner),
                out[index],
                expected[index],
                what=f"{name} {shape} with rotary_dim r = {r} of head_dim {d}, {what},",
                mistakes=probe.known_mistakes(*args, index=index),
                **rope_tolerance(x),
            )

    cases = []
    for d, r, (what, dtype, positions) in runs:
        cos, sin = (t.to(probe.device, copy=True) for t in reference_tables(r))
        length = T if positions is None else positions.shape[-1]
        q, k = (probe.sequence(probe.randn(B, H, length, d, dtype=dtype), None, dim=-2) for H in (Hq, Hk))
        args = (q, k, cos, sin) if positions is None else (q, k, cos, sin, positions)
        call = lambda args=args: two_tensors(probe, probe.call(fn, *args), f"`{probe.name}`", "(q_rot, k_rot)")  # noqa: E731
        cases.append(
            (args, call, lambda out, args=args, d=d, r=r, what=what, dtype=dtype: expect(out, args, d, r, what, dtype))
        )
    # A second mistake: the turn the other way is the catalogue's mistakes run with -sin (q_rot compared).
    expect_cases(probe, cases, {"rope_sign_flip": lambda args: [(*args[:3], -args[3], *args[4:])]}, index=0)
    # Device: tables, positions and q, k on the device; anything made on the CPU inside shows.
    for positions in (None, torch.arange(T)):
        probe.device_pass(
            lambda device, positions=positions: probe.call(
                fn,
                probe.randn(B, Hq, T, 16, device=device),
                probe.randn(B, Hk, T, 16, device=device),
                *(t.to(device) for t in reference_tables(4)),
                *(() if positions is None else (positions.to(device),)),
            )
        )
    oracle.neox_partial_rope(probe, fn)  # the second oracle: inside transformers' GPT-NeoX


EXERCISES = [
    Exercise(
        id="rope_cache",
        advice=CACHE_HELP,
        chapter=5,
        points=2,
        kind="function",
        reference=reference.rope_cache,
        check=check_rope_cache,
        mistakes={
            "rope_interleaved_convention": rope_cache_interleaved,
            "wrong_base": rope_cache_wrong_base,
            "wrong_exponent": rope_cache_wrong_exponent,
            "rope_mixed_pairing": rope_cache_mixed_pairing,
            "low_precision_angles": rope_cache_low_precision,
            "position_offset": rope_cache_position_offset,
        },
        difficulty=1,
        importance=3,
        minutes=10,
        no_device_pass="it takes no tensor: its result is made on the CPU, as the reference's is, and moved by the code that uses it",
        edges=("lengths",),
    ),
    Exercise(
        id="rotate_half",
        advice=ROTATE_HALF_HELP,
        chapter=5,
        points=1,
        kind="function",
        reference=reference.rotate_half,
        check=check_rotate_half,
        mistakes={
            "rope_sign_flip": rotate_half_sign_flip,
            "rope_interleaved_convention": rotate_half_interleaved,
            "rope_mixed_pairing": rotate_half_mixed_pairing,
        },
        difficulty=1,
        importance=2,
        minutes=5,
    ),
    Exercise(
        id="apply_rope",
        advice=APPLY_ROPE_OWN_HELP,
        chapter=5,
        points=3,
        kind="function",
        reference=reference.apply_rope,
        check=check_apply_rope,
        mistakes={
            "rope_interleaved_convention": apply_rope_interleaved,
            "rope_sign_flip": apply_rope_sign_flip,
            "rope_mixed_pairing": apply_rope_mixed_pairing,
            "rope_ignores_positions": apply_rope_ignores_positions,
        },
        difficulty=2,
        importance=3,
        minutes=15,
        edges=("positions", "lengths"),
    ),
    Exercise(
        id="rope_interleaved",
        advice=INTERLEAVED_HELP,
        chapter=5,
        points=3,
        kind="function",
        reference=reference.rope_interleaved,
        check=check_rope_interleaved,
        mistakes={
            "rope_half_split_convention": rope_interleaved_half_split,
            "rope_sign_flip": rope_interleaved_sign_flip,
            "rope_mixed_pairing": rope_interleaved_mixed_pairing,
            "rope_ignores_positions": rope_interleaved_ignores_positions,
            "wrong_base": rope_interleaved_wrong_base,
            "wrong_exponent": rope_interleaved_wrong_exponent,
            "low_precision_angles": rope_interleaved_low_precision,
        },
        difficulty=2,
        importance=2,
        minutes=15,
        edges=("positions", "lengths"),
    ),
    Exercise(
        id="RotaryEmbedding",
        advice=APPLY_ROPE_HELP,
        chapter=5,
        points=3,
        kind="module",
        reference=reference.RotaryEmbedding,
        check=check_rotary_embedding,
        mistakes={
            "rope_interleaved_convention": rotary_interleaved,
            "rope_sign_flip": rotary_sign_flip,
            "rope_mixed_pairing": rotary_mixed_pairing,
            "rope_ignores_positions": rotary_ignores_positions,
            "wrong_base": rotary_wrong_base,
            "wrong_exponent": rotary_wrong_exponent,
            "low_precision_angles": rotary_low_precision,
        },
        difficulty=2,
        importance=3,
        minutes=20,
        edges=("positions", "lengths"),
    ),
    Exercise(
        id="rope_from_shift_matrix",
        advice=INTERLEAVED_HELP,
        chapter=5,
        points=2,
        kind="function",
        reference=reference.rope_from_shift_matrix,
        check=check_rope_interleaved,
        mistakes={
            "rope_sign_flip": shift_matrix_not_transposed,
            "rope_ignores_positions": shift_matrix_ignores_positions,
        },
        difficulty=2,
        importance=1,
        minutes=15,
        edges=("positions", "lengths"),
    ),
    Exercise(
        id="apply_partial_rope",
        advice=PARTIAL_HELP,
        chapter=5,
        points=2,
        kind="function",
        reference=reference.apply_partial_rope,
        check=check_apply_partial_rope,
        mistakes={
            "partial_rope_whole_head": partial_whole_head,
            "partial_rope_pairs_across_head": partial_pairs_across_head,
            "partial_rope_last_dims": partial_last_dims,
            "partial_rope_pass_dropped": partial_pass_dropped,
            "rope_interleaved_convention": partial_interleaved,
            "rope_sign_flip": partial_sign_flip,
            "rope_mixed_pairing": partial_mixed_pairing,
            "rope_ignores_positions": partial_ignores_positions,
        },
        difficulty=2,
        importance=2,
        minutes=10,
        edges=("positions", "lengths"),
    ),
]
