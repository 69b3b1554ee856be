"""Chapter 05, rotary embeddings (Su et al. 2021, RoFormer): `rope_cache`,
`rotate_half`, `apply_rope`, `rope_interleaved` and `RotaryEmbedding`.

The mistakes of each exercise share its arguments and return what the mistaken code outputs:
    rope_cache        (head_dim, max_len, base) -> (cos, sin)
    rotate_half       (x) -> the turned x
    apply_rope        (q, k, cos, sin, positions) -> (q_rot, k_rot)
    rope_interleaved  (x, positions, base) -> the rotated x
    RotaryEmbedding   (x, positions, base) -> x rotated as the module would (q and k alike)"""

from __future__ import annotations

import functools

import torch

from helpers import reference
from helpers.checking import Failure, Probe, close
from helpers.exercises.common import (
    WRONG_BASE,
    expect_then,
    frequencies,
    module_device_pass,
    plain_tensors,
    refuses,
    says,
)
from helpers.registry import Exercise

# --- known mistakes -------------------------------------------------------------------

ROPE_WRONG_EXPONENT = """Your frequencies have the wrong exponent. RoFormer's is
θ_i = base^(-2i/d) for i = 0 .. d/2 - 1, with d the HEAD dimension, i.e.
`base ** (-torch.arange(0, d, 2) / d)`: mind the 2, the minus sign (or
the 1/), and an integer `//` that rounds every exponent to zero."""

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
    angle_layout: str | None = None,
    sign: float = 1.0,
    exponent: str = "2i/d",
    angle_dtype: torch.dtype = torch.float32,
    ignore_positions: bool = False,
) -> torch.Tensor:
    """RoPE on x (..., T, d) with one knob turned.
    pairing: which components form a pair ("half": i, i+d/2; "adjacent": 2i, 2i+1);
    angle_layout: how the d/2 angles are laid over the d columns (default: the same as pairing)."""
    T, d = x.shape[-2], x.shape[-1]
    if positions is None or ignore_positions:
        positions = torch.arange(T, device=x.device)
    theta = frequencies(d, base, exponent, torch.float32, x.device)
    angles = positions.to(angle_dtype)[..., None] * theta.to(angle_dtype)  # (T, d/2) or (B, T, d/2)
    if angles.dim() == 3:
        angles = angles.unsqueeze(1)  # (B, 1, T, d/2)
    if (angle_layout or pairing) == "half":
        angles = torch.cat([angles, angles], dim=-1)
    else:
        angles = angles.repeat_interleave(2, dim=-1)
    cos, sin = angles.cos().float(), angles.sin().float()
    turn = _rotate_half if pairing == "half" else _rotate_adjacent
    return (x.float() * cos + sign * turn(x.float()) * sin).to(x.dtype)


def _cache(head_dim: int, max_len: int, base: float = 10000.0, *, layout: str = "half", exponent: str = "2i/d") -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), frequencies(head_dim, base, exponent))
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


@says(WRONG_BASE)
def rope_cache_wrong_base(head_dim: int, max_len: int, base: float = 10000.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [_cache(head_dim, max_len, 1000.0), _cache(head_dim, max_len, 10000.0)]


@says(ROPE_WRONG_EXPONENT)
def rope_cache_wrong_exponent(head_dim: int, max_len: int, base: float = 10000.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [_cache(head_dim, max_len, base, exponent=e) for e in ("i/d", "4i/d", "+2i/d", "integer")]


def rope_cache_mixed_pairing(head_dim: int, max_len: int, base: float = 10000.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Your columns j and j + head_dim/2 do not hold the same angle, so the
    two members of a half-split pair would turn at different speeds: that is
    not a rotation any more (norms change). Compute head_dim/2 angles, one
    per pair, and lay them out twice: `torch.cat([angles, angles], dim=-1)`."""
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


def rope_cache_low_precision(head_dim: int, max_len: int, base: float = 10000.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Your angles were computed in half precision (bfloat16 or float16), so
    nearby positions collapse onto the same angle: bfloat16 has 8 bits of
    mantissa, so 256 and 257 are the same number, and float16 merges
    positions past 2048. Build positions and frequencies in float32 (or
    float64) and multiply them in that precision."""
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
    m + 1. Row 0 is position 0, whose angles are all 0 (cos 1, sin 0):
    use torch.arange(max_len), not torch.arange(1, max_len + 1)."""
    angles = torch.outer(torch.arange(1, max_len + 1, dtype=torch.float64), frequencies(head_dim, base))
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


def _table_rope(q, k, cos, sin, positions, *, pairing="half", angle_layout="half", sign=1.0, ignore_positions=False):
    c, s = _gather(cos, sin, q.shape[-2], None if ignore_positions else positions)
    if angle_layout == "adjacent":
        c, s = _as_interleaved(c), _as_interleaved(s)
    turn = _rotate_half if pairing == "half" else _rotate_adjacent
    return tuple((x.float() * c + sign * turn(x.float()) * s).to(x.dtype) for x in (q, k))


def apply_rope_interleaved(q, k, cos, sin, positions=None):
    """Your output turns adjacent pairs (x[2i], x[2i+1]) by angle i: this is
    the interleaved (Meta/GPT-J) layout; this exercise uses half-split
    (HF/NeoX): pair i is (x[i], x[i + d/2]), and the tables already hold
    angle i in columns i and i + d/2, so the whole rotation is
    x * cos + rotate_half(x) * sin."""
    return _table_rope(q, k, cos, sin, positions, pairing="adjacent", angle_layout="adjacent")


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
        _table_rope(q, k, cos, sin, positions, pairing="adjacent", angle_layout="half"),
        _table_rope(q, k, cos, sin, positions, pairing="half", angle_layout="adjacent"),
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
    return [
        _rope(x, positions, base, pairing="adjacent", angle_layout="half"),
        _rope(x, positions, base, pairing="half", angle_layout="adjacent"),
    ]


def rope_interleaved_ignores_positions(x, positions=None, base=10000.0):
    """Your code ignores `positions` and always rotates by 0..T-1. When
    positions are given (decoding with a KV cache, where one new token sits
    at position 3000) use them."""
    return _rope(x, positions, base, pairing="adjacent", ignore_positions=True)


@says(WRONG_BASE)
def rope_interleaved_wrong_base(x, positions=None, base=10000.0):
    return [_rope(x, positions, b, pairing="adjacent") for b in (1000.0, 10000.0)]


@says(ROPE_WRONG_EXPONENT)
def rope_interleaved_wrong_exponent(x, positions=None, base=10000.0):
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
    return [
        _rope(x, positions, base, pairing="half", angle_layout="adjacent"),
        _rope(x, positions, base, pairing="adjacent", angle_layout="half"),
    ]


def rotary_ignores_positions(x, positions=None, base=10000.0):
    """Your module ignores `positions` and always uses rows 0..T-1 of its
    tables. Gather the rows of the given positions: cos[positions] ((T, Dh)
    or (B, T, Dh); unsqueeze(1) for the heads in the second case)."""
    return _rope(x, positions, base, ignore_positions=True)


@says(WRONG_BASE)
def rotary_wrong_base(x, positions=None, base=10000.0):
    return [_rope(x, positions, b) for b in (1000.0, 10000.0)]


@says(ROPE_WRONG_EXPONENT)
def rotary_wrong_exponent(x, positions=None, base=10000.0):
    return [_rope(x, positions, base, exponent=e) for e in ("i/d", "4i/d", "+2i/d", "integer")]


def rotary_low_precision(x, positions=None, base=10000.0):
    """Right in float32, wrong in bfloat16: your module computes the angles
    m·θ_i in the input's dtype. bfloat16 has 8 bits of mantissa, so
    positions 256 and 257 collide and late positions are off by radians.
    Build the tables in float32 (once, in __init__, whatever the input) and
    cast only cos/sin or the result to the input's dtype."""
    return _rope(x, positions, base, angle_dtype=x.dtype)


# --- probes ----------------------------------------------------------------------------

# Every check runs at positions in the thousands (few of them, small heads, so
# it stays fast) and once in bfloat16, where computing angles in low precision
# shows. Float32 results computed in different right ways (float64 tables,
# exp-log, complex numbers) differ by ~1e-4 at position 4000: the tolerances
# allow that and nothing more. Every mistake in the catalogue is off by O(1).
ROPE_TOLERANCE = {torch.float32: {"rtol": 1e-3, "atol": 1e-3}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 4e-2}}
CACHE_TOLERANCE = {"rtol": 0.0, "atol": 5e-4}
ROPE_MAX_LEN = 4000  # positions in the thousands; 8 × 4000 floats stay under torch's threading grain


@functools.lru_cache(maxsize=8)
def reference_tables(head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference cos/sin tables up to ROPE_MAX_LEN, built once (on the CPU). Never hand them to student code: clone."""
    return reference.rope_cache(head_dim, ROPE_MAX_LEN, base)


def rope_tolerance(x: torch.Tensor) -> dict[str, float]:
    return ROPE_TOLERANCE.get(x.dtype, ROPE_TOLERANCE[torch.float32])


def two_tensors(probe: Probe, out, what: str, names: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        got = type(out).__name__ + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
        probe.fail("wrong_type", f"{what} should return two tensors, {names}; got {got}.")
    return out[0], out[1]


def rope_positions(probe: Probe, *shape: int) -> torch.Tensor:
    """Positions up to ROPE_MAX_LEN - 1, including 256 and 257, which collide in bfloat16."""
    sampled = probe.randint(ROPE_MAX_LEN, *shape)
    sampled[..., :2] = torch.tensor([256, 257], device=probe.device)
    sampled[..., -1] = ROPE_MAX_LEN - 1
    return sampled


def rope_cases(probe: Probe, B: int, T: int) -> list[tuple[str, torch.dtype, torch.Tensor | None]]:
    """(what, dtype of q and k, positions) for apply_rope and RotaryEmbedding."""
    return [
        ("positions=None", torch.float32, None),
        (
            "positions 2995..2999 (decoding at an offset)",
            torch.float32,
            torch.arange(2995, 2995 + T, device=probe.device),
        ),
        ("positions of shape (T,) up to 3999", torch.float32, rope_positions(probe, T)),
        ("positions of shape (B, T), a different row per sequence", torch.float32, rope_positions(probe, B, T)),
        ("bfloat16 q and k, positions up to 3999", torch.bfloat16, rope_positions(probe, T)),
    ]


def rope_properties(probe: Probe, rotate, head_dim: int):
    """When no known mistake reproduces the output: say which RoPE property the
    student's code keeps and which it breaks. rotate(x (1, 1, T, d), positions (T,))."""

    def fallback(failure: Failure) -> None:
        try:
            x = probe.randn(1, 1, 4, head_dim)
            turned = rotate(x, torch.tensor([3, 700, 2000, 3500], device=probe.device))
            ratio = turned.detach().float().norm(dim=-1) / x.norm(dim=-1)
            q, k = probe.randn(1, 1, 1, head_dim).repeat(1, 1, 3, 1), probe.randn(1, 1, 1, head_dim).repeat(1, 1, 3, 1)
            m = torch.tensor([7, 1007, 3007], device=probe.device)
            dots = (rotate(q, m).detach().float() * rotate(k, m - 5).detach().float()).sum(-1).flatten().tolist()
        except Exception:  # the student's code broke on these inputs: the message we have will do
            return
        if close(turned, x, rtol=1e-4, atol=1e-4):
            probe.fail(
                "wrong_values",
                f"{failure.message} It returns its input unchanged: nothing is rotated (check that both q and k are turned, and returned).",
            )
        norms_kept = bool(((ratio - 1).abs() < 1e-2).all())
        relative = max(dots) - min(dots) < 1e-2 * (1 + max(abs(d) for d in dots))
        if not norms_kept:
            said = f"It is not a rotation: ‖output‖/‖input‖ ranges from {ratio.min():.3f} to {ratio.max():.3f} instead of staying 1, so the two members of some pair are not turned by the same angle."
        elif not relative:
            said = f"Norms are kept, but q_m·k_n does not depend on m − n alone: at offset 5 it is {', '.join(f'{d:.3f}' for d in dots)} for m = 7, 1007, 3007. q and k must turn by m·θ_i and n·θ_i with the same θ_i, and positions must be used as given."
        else:
            said = "It keeps norms and q_m·k_n depends only on m − n, so it is a rotary embedding, but not this one: check the layout of the pairs, the direction of the turn, the base and the exponent of θ_i."
        probe.fail("wrong_values", f"{failure.message} {said}")

    return fallback


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
            probe.fail(
                "low_precision_angles",
                f"{probe.explain('low_precision_angles')} (Rows {row} and {row + 1} of your tables are identical.)",
            )

    return fallback


def check_rope_cache(fn, probe: Probe) -> None:
    for args in ((8, ROPE_MAX_LEN), (6, 40, 500000.0)):
        call = f"rope_cache({', '.join(repr(a) for a in args)})"
        tables = two_tensors(probe, probe.call(fn, *args, what=f"`{call}`"), f"`{call}`", "(cos, sin)")
        expected = reference.rope_cache(*args)
        if all(close(t, e, **CACHE_TOLERANCE) for t, e in zip(tables, expected[::-1])):
            probe.fail("wrong_values", f"`{call}` returned (sin, cos): return the cos table first, then the sin table.")
        for index, name in enumerate(("cos", "sin")):
            mistakes = probe.known_mistakes(*args, index=index)
            hint = "Each table has head_dim columns: the head_dim/2 angles, written twice (torch.cat([angles, angles], dim=-1))." if tables[index].shape != expected[index].shape else ""
            expect_then(
                probe,
                collisions(probe, tables),
                tables[index],
                expected[index],
                what=f"the {name} table of {call}",
                mistakes=mistakes,
                hint=hint,
                **CACHE_TOLERANCE,
            )


# rotate_half ------------------------------------------------------------------


def check_rotate_half(fn, probe: Probe) -> None:
    hint = "rotate_half turns each pair (a, b) = (x[i], x[i + d/2]) into (-b, a): cat(-x[..., d/2:], x[..., :d/2])."
    for shape, dtype in (
        ((2, 3, 5, 8), torch.float32),
        ((7, 6), torch.float16),
        ((4, 10), torch.bfloat16),
    ):  # no float64: MPS lacks it
        x = probe.randn(*shape, dtype=dtype)
        out = probe.call(fn, x)
        mistakes = probe.known_mistakes(x)
        probe.expect(
            out,
            reference.rotate_half(x),
            what=f"rotate_half of a {tuple(shape)} {str(dtype).replace('torch.', '')} tensor",
            mistakes=mistakes,
            hint=hint,
        )


# apply_rope -------------------------------------------------------------------


def check_apply_rope(fn, probe: Probe) -> None:
    d, B, Hq, Hk, T = 8, 3, 4, 2, 5  # GQA: 4 query heads share 2 key heads
    cos, sin = (t.to(probe.device, copy=True) for t in reference_tables(d))
    cases = rope_cases(probe, B, T)
    for what, dtype, positions in cases:
        q, k = probe.randn(B, Hq, T, d, dtype=dtype), probe.randn(B, Hk, T, d, dtype=dtype)
        args = (q, k, cos, sin) if positions is None else (q, k, cos, sin, positions)
        try:
            out = probe.call(fn, *args)
        except Failure as failure:
            if failure.code == "raised" and positions is not None and positions.dim() == 2:
                probe.fail(
                    "raised",
                    f"{failure.message}. With positions of shape (B, T), cos[positions] is (B, T, Dh): unsqueeze(1) it to (B, 1, T, Dh) so it broadcasts over the heads.",
                )
            raise
        out = two_tensors(probe, out, f"`{probe.name}`", "(q_rot, k_rot)")
        expected = reference.apply_rope(*args)

        for index, name in enumerate(("q_rot", "k_rot")):

            def rotate(x, p, index=index):
                return probe.call(fn, x, x, cos, sin, p)[index]

            mistakes = probe.known_mistakes(*args, index=index)
            shape = f"{tuple(expected[index].shape)} {str(dtype).replace('torch.', '')}"
            fallback = bf16_arithmetic(probe) if dtype == torch.bfloat16 else rope_properties(probe, rotate, d)
            expect_then(
                probe,
                fallback,
                out[index],
                expected[index],
                what=f"{name} {shape}, {what},",
                mistakes=mistakes,
                **rope_tolerance(q),
            )


def bf16_arithmetic(probe: Probe):
    def fallback(failure: Failure) -> None:  # the float32 probes passed: the precision is what differs
        probe.fail(
            "wrong_values",
            f"{failure.message} Your code is right in float32 but not in bfloat16: do the arithmetic in float32 (q.float() * cos + ...) and cast the result back with .to(q.dtype).",
        )

    return fallback


# rope_interleaved -------------------------------------------------------------


def low_precision(probe: Probe):
    def fallback(failure: Failure) -> None:  # the float32 probes passed: the precision is what differs
        probe.fail("low_precision_angles", probe.explain("low_precision_angles"))

    return fallback


def check_rope_interleaved(fn, probe: Probe) -> None:
    positions = rope_positions(probe, 6)
    cases = (  # (what, x, extra arguments)
        ("x (2, 3, 7, 8), default positions and base", probe.randn(2, 3, 7, 8), ()),
        ("x (2, 3, 6, 12), positions up to 3999, base=500000.0", probe.randn(2, 3, 6, 12), (positions, 500000.0)),
        (
            "x (2, 3, 6, 12) in bfloat16, positions up to 3999",
            probe.randn(2, 3, 6, 12, dtype=torch.bfloat16),
            (positions,),
        ),
    )
    for what, x, extra in cases:
        out = probe.call(fn, x, *extra)
        expected = reference.rope_interleaved(x, *extra)
        mistakes = probe.known_mistakes(x, *extra)

        def rotate(x, p, fn=fn):
            return probe.call(fn, x, p)

        fallback = low_precision(probe) if x.dtype == torch.bfloat16 else rope_properties(probe, rotate, x.shape[-1])
        expect_then(probe, fallback, out, expected, what=f"the output for {what},", mistakes=mistakes, **rope_tolerance(x))
    probe.device_pass(lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device)))
    probe.device_pass(lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device), torch.arange(5, device=device), 500000.0))


# RotaryEmbedding --------------------------------------------------------------


def check_rotary_embedding(cls, probe: Probe) -> None:
    d, B, Hq, Hk, T = 8, 3, 4, 2, 5
    module = probe.build(cls, d, ROPE_MAX_LEN)
    # Device: a tensor kept as a plain attribute stays behind when .to(device) moves the module.
    plain = plain_tensors(module)
    if plain:
        probe.fail(
            "pe_not_buffer",
            f"`{probe.name}` keeps {', '.join(plain)} as plain tensor attributes: module.to('cuda') does not move those, so on a GPU your forward mixes devices. Register each with self.register_buffer(name, tensor, persistent=False).",
        )
    # Values: the same cases as apply_rope, then a module with another head size and base.
    cases = rope_cases(probe, B, T)
    runs = [(module, d, 10000.0, f"{probe.name}({d}, {ROPE_MAX_LEN})", case) for case in cases]
    runs.append(
        (
            probe.build(cls, 12, 64, 500.0),
            12,
            500.0,
            f"{probe.name}(12, 64, 500.0)",
            ("positions=None", torch.float32, None),
        )
    )
    for built, head_dim, base, made, (what, dtype, positions) in runs:
        q, k = probe.randn(B, Hq, T, head_dim, dtype=dtype), probe.randn(B, Hk, T, head_dim, dtype=dtype)
        extra = () if positions is None else (positions,)
        call = f"`{made}` called with {what}"
        out = two_tensors(probe, probe.call(built, q, k, *extra, what=call), call, "(q_rot, k_rot)")
        tables = (t.to(probe.device) for t in reference_tables(head_dim, base))
        expected = reference.apply_rope(q, k, *tables, *extra)

        for index, (x, got, want, name) in enumerate(zip((q, k), out, expected, ("q_rot", "k_rot"))):

            def rotate(x, p, built=built, index=index):
                return probe.call(built, x, x, p)[index]

            mistakes = probe.known_mistakes(x, positions, base)
            fallback = low_precision(probe) if dtype == torch.bfloat16 else rope_properties(probe, rotate, head_dim)
            expect_then(
                probe,
                fallback,
                got,
                want,
                what=f"{name} {tuple(want.shape)} from {made} with {what},",
                mistakes=mistakes,
                **rope_tolerance(x),
            )
    # Hygiene: nothing to train, nothing to save. The tables are rebuilt from the arguments.
    saved = list(module.state_dict())
    if saved:
        kinds = {name: "an nn.Parameter" if name in dict(module.named_parameters()) else "a persistent buffer" for name in saved}
        listed = ", ".join(f"{name} ({kind})" for name, kind in kinds.items())
        probe.fail(
            "cache_is_parameter",
            f"`{probe.name}` saves {listed} in its state_dict. The cos/sin tables are fixed and rebuilt from (head_dim, max_len, base): an optimizer must never train them and checkpoints must not carry them (a model built with another max_len could not load one). Use self.register_buffer(name, tensor, persistent=False).",
        )
    # Length: refuse positions past the table, on the CPU (see common.refuses).
    small = probe.call(cls, 8, 16, what=f"`{probe.name}(8, 16)`")
    advice = "Check the largest position against max_len yourself and raise ValueError naming max_len, e.g. 'position 16 is past max_len=16: build RotaryEmbedding with a larger max_len'."
    q, k = probe.randn(1, 2, 4, 8, device="cpu"), probe.randn(1, 1, 4, 8, device="cpu")
    refuses(
        probe,
        lambda: probe.call(small, q, k, torch.tensor([0, 5, 16, 3])),
        f"`{probe.name}(8, max_len=16)` called with positions [0, 5, 16, 3]",
        advice,
    )
    q, k = probe.randn(1, 2, 17, 8, device="cpu"), probe.randn(1, 1, 17, 8, device="cpu")
    refuses(
        probe,
        lambda: probe.call(small, q, k),
        f"`{probe.name}(8, max_len=16)` called with 17 tokens and positions=None",
        advice,
    )
    # Device: every tensor on the meta device; a table or position made on the CPU shows.
    module_device_pass(
        probe,
        cls,
        (8, 16),
        lambda device: (probe.randn(1, 2, 4, 8, device=device), probe.randn(1, 1, 4, 8, device=device)),
    )


EXERCISES = [
    Exercise(
        id="rope_cache",
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
    ),
    Exercise(
        id="rotate_half",
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
    ),
    Exercise(
        id="rope_interleaved",
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
    ),
    Exercise(
        id="RotaryEmbedding",
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
    ),
]
