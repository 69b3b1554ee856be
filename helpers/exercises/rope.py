"""The RoPE kit of chapter 05 (no exercise is declared here): the implementations its mistakes
turn a knob of, and the probes its checks are made of.

* one RoPE with a knob per mistake (`turn`, `rotated`, `cache`, `applied`, `partial`): each mistake
  in ch05 reads as "the right thing, with this one thing changed";
* the float64 RoPE the checks compare with (`rope64`), its tolerances, the inputs, and one rotated
  output against it (`expect_rotated`): a wrong one is read for half precision on the way, for the
  student's own rotations and for the RoPE properties it keeps or breaks (`properties`);
* each exercise's own probes (`expect_tables`, `quarter_turns`, `expect_interleaved`; apply_partial_rope's live in
  helpers.exercises.partial_rope)
  and the aspects of a rotary module (`rotary_values`, `plain_attributes`, `nothing_saved`, `length_checked`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import torch
from torch import Tensor, nn

from helpers import reference
from helpers.exercises import structure
from helpers.exercises.common import (
    angle_tolerance,
    expect_then,
    frequencies,
    precision_first,
    raised,
    refuses,
    refuses_past_max_len,
    works_at_the_edge,
)
from helpers.probe import Probe, advice, close
from helpers.safety import Failure

Tables = tuple[Tensor, Tensor]  # (cos, sin), or (q_rot, k_rot)
Rotate = Callable[[Tensor, Tensor], Tensor]  # the student's rotation of x (..., T, d) at positions (T,)

# --- one RoPE with a knob per mistake -------------------------------------------------
# Each mistake in ch05 reads as "the right thing, with this one thing changed".

WRONG_EXPONENT = """Your frequencies have the wrong exponent: θ_i is not
base^(-2i/d) for i = 0 .. d/2 - 1, with d the head dimension.

Hint: check the two ends by hand: θ_0 must be 1 and the last θ just above
1/base. The usual slips are a missing 2, a missing minus sign (or 1/), and
an integer division that rounds every exponent to zero.

Fix: `theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)`,
with d = head_dim (x.shape[-1]): true division `/`, never `//`."""

OTHER_BASES = (1000.0, 10000.0)  # a typo of popular tutorials; 10000 hard-coded where another base was asked
OTHER_EXPONENTS = ("i/d", "4i/d", "+2i/d", "integer")  # common.frequencies' usual wrong ways


class Pairing(TypedDict):
    """Which components a rotation pairs, and how its angle tables are laid out (`rotated`'s knobs)."""

    pairing: str
    angle_layout: str


MIXED_PAIRINGS: tuple[Pairing, ...] = (
    {"pairing": "adjacent", "angle_layout": "half"},
    {"pairing": "half", "angle_layout": "adjacent"},
)


def turn(x: Tensor, read: str = "half", write: str | None = None) -> Tensor:
    """Each pair (a, b) turned by 90 degrees, to (-b, a): the pairs read from x in one layout ("half": i and
    i + d/2; "adjacent": 2i and 2i + 1) and written back in another (by default the same)."""
    a, b = x.chunk(2, dim=-1) if read == "half" else (x[..., 0::2], x[..., 1::2])
    if (write or read) == "half":
        return torch.cat([-b, a], dim=-1)
    return torch.stack([-b, a], dim=-1).flatten(-2)


def rotated(
    x: Tensor,
    positions: Tensor | None = None,
    base: float = 10000.0,
    *,
    pairing: str = "half",
    angle_layout: str | None = None,
    sign: float = 1.0,
    exponent: str = "2i/d",
    angle_dtype: torch.dtype = torch.float32,
    ignore_positions: bool = False,
) -> Tensor:
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
    return (x.float() * cos + sign * turn(x.float(), pairing) * sin).to(x.dtype)


def cache(
    head_dim: int, max_len: int, base: float = 10000.0, *, layout: str = "half", exponent: str = "2i/d", start: int = 0
) -> Tables:
    """rope_cache's tables (float64, cast to float32) with one knob turned: `layout` lays the head_dim/2
    angles of a row over its columns ("half": twice side by side; "adjacent": each twice in a row;
    "columns": no pairs, one frequency base^(-j/head_dim) per column j); `start` is row 0's position."""
    positions = torch.arange(start, start + max_len, dtype=torch.float64)
    if layout == "columns":  # 2i/(2·head_dim) for i < head_dim: j/head_dim
        angles = torch.outer(positions, frequencies(2 * head_dim, base, exponent))
    else:
        angles = torch.outer(positions, frequencies(head_dim, base, exponent))
        angles = torch.cat([angles, angles], dim=-1) if layout == "half" else angles.repeat_interleave(2, dim=-1)
    return angles.cos().float(), angles.sin().float()


HALF_STEPS = [  # (positions, θ, angles): each kept in its dtype on the way to float32 tables
    steps
    for half in (torch.bfloat16, torch.float16)
    for steps in (
        (half, half, half),
        (half, torch.float32, torch.float32),
        (torch.float32, half, torch.float32),
        (torch.float32, torch.float32, half),
    )
]


def cache_rounded(head_dim: int, max_len: int, base: float, steps: tuple[torch.dtype, ...]) -> Tables:
    """rope_cache's tables computed in float32, with positions, θ and their product each rounded to
    its dtype of `steps` (HALF_STEPS) on the way."""
    positions_dtype, theta_dtype, angles_dtype = steps
    positions = torch.arange(max_len, dtype=torch.float32).to(positions_dtype).to(torch.float32)
    theta = frequencies(head_dim, base, dtype=torch.float32).to(theta_dtype).to(torch.float32)
    angles = torch.outer(positions, theta).to(angles_dtype)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def gather_rows(cos: Tensor, sin: Tensor, T: int, positions: Tensor | None) -> Tables:
    cos, sin = (cos[:T], sin[:T]) if positions is None else (cos[positions], sin[positions])
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return cos, sin


def as_interleaved(table: Tensor) -> Tensor:
    """A half-split cos/sin table re-laid out with each angle in two adjacent columns."""
    return table[..., : table.shape[-1] // 2].repeat_interleave(2, dim=-1)


def applied(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor | None,
    *,
    pairing: str = "half",
    angle_layout: str = "half",
    sign: float = 1.0,
    ignore_positions: bool = False,
) -> Tables:
    """apply_rope with one knob turned (the same knobs as rotated, on given cos/sin tables)."""
    c, s = gather_rows(cos, sin, q.shape[-2], None if ignore_positions else positions)
    if angle_layout == "adjacent":
        c, s = as_interleaved(c), as_interleaved(s)
    return tuple((x.float() * c + sign * turn(x.float(), pairing) * s).to(x.dtype) for x in (q, k))


# --- probes ----------------------------------------------------------------------------

# Every check runs at positions in the thousands (few of them, small heads, so
# it stays fast) and once in bfloat16, where computing angles in low precision
# shows. Float32 results are compared with RoPE computed in float64, entry by entry
# within common.angle_tolerance: float32 arithmetic is off by ~1e-4 at position 4000
# with θ_0 = 1, but by ~1e-7 where the angle is small, which is where cos/sin tables
# stored in float16 (~5e-4 everywhere) show. Every mistake in the catalogue is off by O(1).
HALF_TOLERANCE = {"rtol": 1.6e-2, "atol": 4e-2}  # a bfloat16 result: 2 units of its rounding, ~5 on |x| ≤ 4
MAX_LEN = 4000  # positions in the thousands; 8 × 4000 floats stay under torch's threading grain


@functools.lru_cache(maxsize=8)
def reference_tables(head_dim: int, base: float = 10000.0) -> tuple[Tensor, Tensor]:
    """The reference cos/sin tables up to MAX_LEN, built once (on the CPU). Never hand them to student code: clone."""
    return reference.rope_cache(head_dim, MAX_LEN, base)


def rope_angles(T: int, d: int, positions: Tensor | None, base: float, layout: str) -> tuple[Tensor, Tensor]:
    """(angles, θ) in float64 on the CPU, laid out over the d columns as `layout` pairs them:
    angles (T, d), or (B, 1, T, d) for positions (B, T); θ (d,), each pair's frequency per column."""
    theta = frequencies(d, base)  # (d/2,) float64
    theta = torch.cat([theta, theta]) if layout == "half" else theta.repeat_interleave(2)
    m = torch.arange(T) if positions is None else positions.detach().cpu()
    angles = m.double()[..., None] * theta  # (T, d) or (B, T, d)
    return (angles[:, None] if angles.dim() == 3 else angles), theta


def rope64(x: Tensor, positions: Tensor | None, base: float, layout: str = "half") -> Tensor:
    """The float64 RoPE the checks compare with (on the CPU: MPS has no float64), in x's dtype and device."""
    angles, _ = rope_angles(x.shape[-2], x.shape[-1], positions, base, layout)
    x64 = x.detach().to("cpu", torch.float64)
    return (x64 * angles.cos() + turn(x64, layout) * angles.sin()).to(x.device, x.dtype)


def tolerance(
    x: Tensor, positions: Tensor | None = None, base: float = 10000.0, layout: str = "half", half: bool = False
) -> dict:
    """rtol and atol for x rotated: a float32 (or float64) result entry by entry within what
    rounding makes of its angle (common.angle_tolerance, on |x| at that position); a half one
    within its own rounding. half=True: what positions, frequencies, angles or tables rounded
    to bfloat16 (or float16) would make, frequencies rounded after being computed (no |ln θ|)."""
    if x.dtype not in (torch.float32, torch.float64) and not half:
        return HALF_TOLERANCE
    angles, theta = rope_angles(x.shape[-2], x.shape[-1], positions, base, layout)
    size = x.detach().to("cpu", torch.float64).norm(dim=-1, keepdim=True)  # (..., T, 1): no pair is larger
    if half:
        return {
            "atol": angle_tolerance(torch.bfloat16, angles, torch.ones_like(theta), size, torch.bfloat16),
            "size": size,
        }
    return {"rtol": 0.0, "atol": angle_tolerance(x.dtype, angles, theta, size)}


def angles_precision_first(
    probe: Probe, out: Any, expected: Tensor, tight: dict, loose: dict, then: Callable[[Failure], None]
) -> Callable[[Failure], None]:
    """common.precision_first for a rotated float32 result (`tight` and `loose` from tolerance,
    `loose` with the magnitude `size` of what was turned): half precision on the way is
    low_precision_angles; otherwise `then` reads the output."""
    return precision_first(
        probe,
        out,
        expected,
        tight["atol"],
        loose["atol"],
        then,
        code="low_precision_angles",
        said="more than float32 arithmetic ever is, and as much as rounding to float16 or bfloat16 makes. Somewhere on the way, "
        "the angles, the positions, the frequencies or the cos and sin tables were kept in half precision.",
        hint=ANGLES_PRECISION_HINT,
        fix=ANGLES_PRECISION_FIX,
        size=loose["size"],
    )


ANGLES_PRECISION_HINT = (
    "float32 keeps 24 bits, float16 11 and bfloat16 8. A cos/sin table stored in float16 is off by up to 5e-4 as soon as its entries are "
    "neither 0 nor 1 (only position 0 is exact), and an angle m·θ rounded in half precision is off by more and more as m grows (float16 "
    "holds every integer only up to 2048, bfloat16 up to 256). Turned in float32, "
    "such a result still looks float32, but it carries the half-precision error."
)
ANGLES_PRECISION_FIX = (
    "Keep everything before the final cast in float32: positions `.float()`, θ and the angles in float32, and the cos/sin tables (buffers "
    "included) stored in float32: no `.half()`, `.bfloat16()` or `dtype=torch.float16` on the way; cast only the result, `.to(x.dtype)`."
)


@contextlib.contextmanager
def further_findings(probe: Probe, findings: Callable[[], list[tuple[str, str]]]) -> Iterator[None]:
    """When the catalogue names one mistake and the structural findings() confirm it,
    the other findings are further, independent mistakes: listed in `also`."""
    try:
        yield
    except Failure as failure:
        try:
            found = findings()
        except Exception:  # a reading that breaks on this output adds nothing
            found = []
        if any(code == failure.code for code, _ in found):
            probe.also.extend(
                f"{code}: {said}"
                for code, said in found
                if code != failure.code and f"{code}: {said}" not in probe.also
            )
        raise


def tensors(probe: Probe, out: Any, what: str, names: str, hint: str, fix: str) -> tuple[Tensor, ...]:
    """`out` as the separate tensors `names` ("(a, b, ...)") says it returns, or a wrong_type failure."""
    count = names.count(",") + 1
    if not (isinstance(out, (tuple, list)) and len(out) == count and all(isinstance(t, Tensor) for t in out)):
        got = type(out).__name__ + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
        number = {2: "two", 3: "three"}.get(count, str(count))
        probe.fail("wrong_type", f"{what} should return {number} tensors, {names}; got {got}.", hint=hint, fix=fix)
    return tuple(out)


def two_tensors(probe: Probe, out: Any, what: str, names: str) -> tuple[Tensor, Tensor]:
    hint = "The caller unpacks your result into two names, so it must be a pair of separate tensors, not one stacked or concatenated tensor."
    fix = f"End with `return {names.strip('()')}`: two tensors in a tuple, in that order."
    first, second = tensors(probe, out, what, names, hint, fix)
    return first, second


def far_positions(probe: Probe, *shape: int) -> Tensor:
    """Positions up to MAX_LEN - 1 (T >= 4): 256 and 257, which collide in bfloat16, and
    in every row both edges, 0 and MAX_LEN - 1."""
    sampled = probe.positions(MAX_LEN, *shape)
    sampled[..., :3] = torch.tensor([256, 257, 0], device=probe.device)
    sampled[..., -1] = MAX_LEN - 1
    return sampled


def qk_cases(probe: Probe, B: int, T: int) -> list[tuple[str, torch.dtype, Tensor | None]]:
    """(what, dtype of q and k, positions) for apply_rope and RotaryEmbedding."""
    return [
        ("positions=None", torch.float32, None),
        (
            "positions 2995..2999 (decoding at an offset)",
            torch.float32,
            torch.arange(2995, 2995 + T, device=probe.device),
        ),
        ("positions of shape (T,) up to 3999", torch.float32, far_positions(probe, T)),
        ("positions of shape (B, T), a different row per sequence", torch.float32, far_positions(probe, B, T)),
        ("bfloat16 q and k, positions up to 3999", torch.bfloat16, far_positions(probe, T)),
        ("one token (T = 1) at position 3999, as when decoding", torch.float32, probe.positions(MAX_LEN, 1)),
        (
            "positions of shape (B, 1): one new token per sequence, as when decoding a batch",
            torch.float32,
            probe.positions(MAX_LEN, B, 1),
        ),
    ]


# What a fix says in each layout: the turn, where the angles of the given positions
# come from, and what one-hot vectors at position 1 (head_dim 4, base 10000) turn into.
TURN = {
    "half": "`x * cos + rotate_half(x) * sin`",
    "adjacent": "`(x0 * cos - x1 * sin, x0 * sin + x1 * cos)` on the pairs `x0, x1 = x[..., 0::2], x[..., 1::2]`",
}
AT_POSITIONS = {
    "half": "rows `cos[positions]` and `sin[positions]` (`[:T]` only when positions is None)",
    "adjacent": "angles `positions.float()[..., None] * theta` (0..T-1 only when positions is None)",
}
ONE_HOT = {
    "half": "e_0 = (1, 0, 0, 0) and e_1 = (0, 1, 0, 0) must become (cos 1, 0, sin 1, 0) and (0, cos 0.01, 0, sin 0.01)",
    "adjacent": "e_0 = (1, 0, 0, 0) and e_2 = (0, 0, 1, 0) must become (cos 1, sin 1, 0, 0) and (0, 0, cos 0.01, sin 0.01)",
}


ONE_HOT_POSITIONS = (1, 50)  # both below the smallest max_len a check builds (64)


def one_hot_images(probe: Probe, rotate: Rotate, head_dim: int) -> Tensor:
    """(2, d, d): e_j turned at positions 1 and 50, all in one call (the one-hot vectors along the batch)."""
    x = torch.eye(head_dim, device=probe.device)[:, None, None, :].expand(head_dim, 1, 2, head_dim).contiguous()
    turned = rotate(x, torch.tensor(ONE_HOT_POSITIONS, device=probe.device))
    return turned.detach().float()[:, 0].transpose(0, 1)


def read_rotations(probe: Probe, rotate: Rotate, head_dim: int, layout: str, base: float) -> list[tuple[str, str]]:
    """structure.rotation_findings on the student's own rotations."""
    return structure.rotation_findings(one_hot_images(probe, rotate, head_dim), ONE_HOT_POSITIONS, layout, base)


def properties(
    probe: Probe, rotate: Rotate, head_dim: int, layout: str = "half", base: float = 10000.0
) -> Callable[[Failure], None]:
    """When no known mistake reproduces the output: read the layout, the direction and
    each pair's θ from one-hot vectors (structure.rotation_findings); failing that, say
    which RoPE property the student's code keeps and which it breaks.
    rotate(x (B, 1, T, d), positions (T,)); layout ("half" or "adjacent") is the
    exercise's, base the one `rotate` was built with."""

    def fallback(failure: Failure) -> None:
        try:
            findings = read_rotations(probe, rotate, head_dim, layout, base)
        except Exception:  # a Failure too: the student's code broke on one-hot inputs
            findings = []
        structure.name_what_is_wrong(probe, failure, findings)
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
                f"{failure.message} It returns its input unchanged: nothing is rotated.",
                hint="Position 0 turns by nothing, but positions 700 or 3500 must turn: an output equal to its input was never rotated, or was rotated and then not returned (k forgotten?).",
                fix=f"Return the rotated tensors, not the ones you were given: {TURN[layout]} for each of them.",
            )
        norms_kept = bool(((ratio - 1).abs() < 1e-2).all())
        relative = max(dots) - min(dots) < 1e-2 * (1 + max(abs(d) for d in dots))
        if not norms_kept:
            probe.fail(
                "wrong_values",
                f"{failure.message} It is not a rotation: ‖output‖/‖input‖ ranges from {ratio.min():.3f} to {ratio.max():.3f} instead of staying 1.",
                hint="A rotation keeps the length of every pair. Lengths change when the two members of a pair meet different angles, when cos and sin multiply the wrong terms, or when a term is missing: follow one pair through your code.",
                fix=f"Turn each pair (x0, x1) by its one angle a into (x0·cos a − x1·sin a, x0·sin a + x1·cos a); in code, {TURN[layout]}.",
            )
        if not relative:
            probe.fail(
                "wrong_values",
                f"{failure.message} Norms are kept, but q_m·k_n does not depend on m − n alone: at offset 5 it is {', '.join(f'{d:.3f}' for d in dots)} for m = 7, 1007, 3007.",
                hint="q at position m and k at position n must turn by m·θ_i and n·θ_i with the same θ_i: only then does q_m·k_n depend on m − n alone. Positions used other than as given, or q and k turned by different tables, break that.",
                fix=f"Turn q and k with the same frequencies, at the positions given: {AT_POSITIONS[layout]}.",
            )
        probe.fail(
            "wrong_values",
            f"{failure.message} It keeps norms and q_m·k_n depends only on m − n: a rotary embedding, but not this one.",
            hint="Rotary embeddings differ in four places: the layout of the pairs, the direction of the turn, the base, and the exponent of θ_i. One-hot vectors at position 1 show all four, since their angles are the θ_i themselves.",
            fix=f"Turn one-hot vectors at position 1 with head_dim 4 and base 10000: {ONE_HOT[layout]}. The first entry that differs names what to change.",
        )

    return fallback


# --- one rotated output against RoPE -----------------------------------------------------


def query_and_key(
    probe: Probe,
    B: int,
    heads: tuple[int, int],
    T: int,
    d: int,
    dtype: torch.dtype,
    positions: Tensor | None,
    max_len: int | None = None,
) -> Tables:
    """q (B, Hq, T, d) and k (B, Hk, T, d), their length marked; T is the positions' length when they are given."""
    length = T if positions is None else positions.shape[-1]
    q, k = (probe.sequence(probe.randn(B, H, length, d, dtype=dtype), max_len, dim=-2) for H in heads)
    return q, k


def expect_rotated(
    probe: Probe,
    out: object,
    x: Tensor,
    positions: Tensor | None,
    base: float,
    layout: str,
    *,
    rotate: Rotate,
    in_bfloat16: Callable[[Failure], None],
    what: str,
    mistakes: Callable[[], dict],
    rotate_base: float | None = None,
) -> None:
    """`out`, the student's x (..., T, d) turned at `positions`, against RoPE in float64, entry by entry
    within tolerance. A wrong float32 result is read for half precision on the way, then for the
    RoPE properties of `rotate` (which turns with `rotate_base`, by default `base`); a wrong bfloat16
    one by `in_bfloat16`."""
    expected = rope64(x, positions, base, layout)
    tight, loose = tolerance(x, positions, base, layout), tolerance(x, positions, base, layout, half=True)
    read = properties(probe, rotate, x.shape[-1], layout, base if rotate_base is None else rotate_base)
    fallback = (
        in_bfloat16 if x.dtype == torch.bfloat16 else angles_precision_first(probe, out, expected, tight, loose, read)
    )
    expect_then(probe, fallback, out, expected, what=what, mistakes=mistakes, **tight)


def bf16_arithmetic(probe: Probe) -> Callable[[Failure], None]:
    def fallback(failure: Failure) -> None:  # the float32 probes passed: the precision is what differs
        probe.fail(
            "wrong_values",
            f"{failure.message} Your code is right in float32 but not in bfloat16.",
            hint="bfloat16 keeps 8 bits of mantissa: a product and a sum each rounded in bfloat16 drift away from the reference, which computes in float32 and rounds once, at the end.",
            fix="Compute in float32 and cast once: `(q.float() * cos + rotate_half(q.float()) * sin).to(q.dtype)`, the same for k.",
        )

    return fallback


def low_precision(probe: Probe) -> Callable[[Failure], None]:
    def fallback(failure: Failure) -> None:  # the float32 probes passed: the precision is what differs
        message, hint, fix = advice(probe.exercise, "low_precision_angles")
        probe.fail("low_precision_angles", message, hint=hint, fix=fix)

    return fallback


def tables_device_pass(probe: Probe, fn: Callable, shape: tuple[int, int, int, int], d: int, r: int) -> None:
    """Device: q (B, Hq, T, d), k (B, Hk, T, d), the reference tables r wide and positions (None, then
    0..T-1) on the device; anything made on the CPU inside shows."""
    B, Hq, Hk, T = shape

    def on(positions: Tensor | None, device: torch.device) -> Any:
        return probe.call(
            fn,
            probe.randn(B, Hq, T, d, device=device),
            probe.randn(B, Hk, T, d, device=device),
            *(t.to(device) for t in reference_tables(r)),
            *(() if positions is None else (positions.to(device),)),
        )

    for positions in (None, torch.arange(T)):
        probe.device_pass(functools.partial(on, positions))


# --- readings of a wrong output, one exercise's own ----------------------------------------


def collisions(probe: Probe, tables: Tables) -> Callable[[Failure], None]:
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


def cache_structure(probe: Probe, tables: Tables, base: float) -> Callable[[Failure], None]:
    """Rounded positions first (collisions), then what the tables themselves show:
    layout, direction, first position and per-pair frequencies (structure.rope_findings)."""
    rounded = collisions(probe, tables)

    def fallback(failure: Failure) -> None:
        rounded(failure)
        structure.name_what_is_wrong(probe, failure, structure.rope_findings(*tables, base))

    return fallback


def quarter_turn_findings(out: Tensor) -> list[tuple[str, str]]:
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
        said = f"Your rotate_half moves e_0 to component {int(target[0])}: it turns adjacent pairs (2i, 2i+1), where pairs (i, i + d/2) are asked for."
        findings.append(("rope_interleaved_convention", said))
    elif not (target == (j + d // 2) % d).all():
        return []
    first = j < target  # the first member of each pair goes forward with a plus, the second back with a minus
    if (sign[first] < 0).all() and (sign[~first] > 0).all():
        said = (
            "Your rotate_half puts the minus sign on the wrong member of each pair: e_0 comes out as minus its partner."
        )
        findings.append(("rope_sign_flip", said))
    return findings


def quarter_turns(probe: Probe, fn: Callable, d: int = 8) -> Callable[[Failure], None]:
    """rotate_half read from what it makes of the one-hot vectors (quarter_turn_findings)."""

    def fallback(failure: Failure) -> None:
        try:
            out = probe.call(fn, torch.eye(d, device=probe.device))
        except Failure:
            return
        if isinstance(out, Tensor):
            structure.name_what_is_wrong(probe, failure, quarter_turn_findings(out))

    return fallback


@contextlib.contextmanager
def gathers_explained(probe: Probe, positions: Tensor | None, length: int) -> Iterator[None]:
    """apply_rope raising on given positions: rows cut to the first T before the gather, or (B, T)
    positions gathered without a head axis."""
    try:
        yield
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


@contextlib.contextmanager
def size_one_explained(probe: Probe, positions: Tensor | None) -> Iterator[None]:
    """A raise or a wrong shape on positions of shape (B, 1) (one new token per sequence), where the
    cases before, positions (B, T) among them, passed: an axis of size 1 read differently."""
    try:
        yield
    except Failure as failure:
        if (
            failure.code in ("raised", "wrong_shape")
            and positions is not None
            and positions.dim() == 2
            and positions.shape[-1] == 1
        ):
            B = positions.shape[0]
            probe.fail(
                "squeezed_size_one",
                f"{failure.message.rstrip('.')}. That was with positions of shape ({B}, 1): one new token per sequence, each at its own "
                "position, as when a batch is decoded. The same code is right for positions (B, T) with T > 1: it reads an axis of size 1 "
                "differently from a longer one.",
                hint="`.squeeze()` drops every axis of size 1, here T: the (B, 1) positions become B positions of one sequence, and the gathered "
                "rows broadcast against q's T = 1 into the wrong shape. A batch of one (B = 1) loses its batch axis the same way.",
                fix="Never `.squeeze()` without a dim: index with positions as they come, `cos[positions]` (B, T, Dh), then `.unsqueeze(1)` "
                "for the heads; `squeeze(dim)` only on an axis you know is 1.",
            )
        raise


def interleaving_kept(probe: Probe, out: object, x: Tensor, positions: Tensor | None, base: float, what: str) -> None:
    """An interleaved RoPE of x whose pairs are turned right but written back as two halves (torch.cat)."""
    expected, tight = rope64(x, positions, base, "adjacent"), tolerance(x, positions, base, "adjacent")
    as_halves = torch.cat([expected[..., 0::2], expected[..., 1::2]], dim=-1)  # the right pairs, as two halves
    if (
        isinstance(out, Tensor)
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


# --- one exercise's probes (each called by its check in ch05) ---------------------------------


def expect_tables(probe: Probe, tables: Tables, args: tuple, call: str, base: float) -> None:
    """Swapped tables first; then each against the reference within float32 rounding of its angles, a wrong
    one read for half precision on the way (within what a half dtype would make), rounded positions and
    what the tables show (cache_structure)."""
    expected = reference.rope_cache(*args)  # float64, cast to float32 at the end
    angles, theta = rope_angles(args[1], args[0], None, base, "half")
    tight = {"rtol": 0.0, "atol": angle_tolerance(torch.float32, angles, theta)}
    half = angle_tolerance(torch.bfloat16, angles, torch.ones_like(theta), angle_dtype=torch.bfloat16)
    loose = {"atol": half, "size": 1.0}
    if all(close(t, e, **tight) for t, e in zip(tables, expected[::-1])):
        probe.fail(
            "wrong_values",
            f"`{call}` returns the sin table first and the cos table second.",
            hint="The docstring's order is (cos, sin), as HF's rotary embeddings return them: row 0 of the first table must be all ones.",
            fix="Swap the two in your return statement: `return cos, sin`.",
        )
    for index, name in enumerate(("cos", "sin")):
        read = cache_structure(probe, tables, base)
        with further_findings(probe, lambda: structure.rope_findings(*tables, base)):
            expect_then(
                probe,
                angles_precision_first(probe, tables[index], expected[index], tight, loose, read),
                tables[index],
                expected[index],
                what=f"the {name} table of {call}",
                mistakes=probe.known_mistakes(*args, index=index),
                **tight,
            )


def expect_interleaved(fn: Callable, probe: Probe, out: object, what: str, x: Tensor, extra: tuple) -> None:
    """x turned in the interleaved layout at the positions and base of `extra` (fn's own defaults where not given)."""
    positions = extra[0] if extra else None
    base = extra[1] if len(extra) > 1 else 10000.0
    interleaving_kept(probe, out, x, positions, base, what)
    expect_rotated(
        probe,
        out,
        x,
        positions,
        base,
        "adjacent",
        rotate=lambda x, p: probe.call(fn, x, p),
        rotate_base=10000.0,  # fn's default
        in_bfloat16=low_precision(probe),
        what=f"the output for {what},",
        mistakes=probe.known_mistakes(x, *extra),
    )


def positions_dropped(args: tuple) -> list[tuple]:
    """A second mistake, positions ignored, as inputs: the catalogue's mistakes run with positions=None."""
    return [(args[0], None, *args[2:])] if len(args) > 1 and args[1] is not None else []


# --- the aspects of a rotary module (RotaryEmbedding) ----------------------------------------

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


def plain_attributes(probe: Probe, plain: list[str]) -> None:
    """A tensor kept as a plain attribute stays behind when .to(device) moves the module."""
    if plain:
        probe.fail(
            "pe_not_buffer",
            f"`{probe.name}` keeps {', '.join(plain)} as plain tensor attributes: module.to('cuda') does not move those, so on a GPU your forward mixes devices.",
            hint="Only parameters and registered buffers follow a module through .to(), .cuda() and .half(); a plain tensor attribute stays where it was made.",
            fix=f"Register each table in `__init__` instead: `self.register_buffer('{plain[0]}', table, persistent=False)`"
            + (f", and likewise for {', '.join(plain[1:])}." if plain[1:] else "."),
        )


def rotary_values(cls: type, probe: Probe, module: nn.Module, plain: list[str]) -> None:
    """The values (expect_rotary_values). A position the tables hold refused: an off-by-one in the
    length check says why. A device clash from the plain attributes is that finding, said once."""
    try:
        expect_rotary_values(cls, probe, module)
    except Failure as failure:
        if raised(failure, "ValueError"):
            try:
                length_checked(cls, probe)
            except Failure as found:  # anything else it finds, its own aspect says
                if found.code == "length_check_off_by_one":
                    raise found from None
        if not (plain and failure.code == "raised" and "device" in failure.message.lower()):
            raise


def expect_rotary_values(cls: type, probe: Probe, module: nn.Module) -> None:
    """The same cases as apply_rope, then a module with another head size and base, T = max_len."""
    d, B, T = 8, 3, 5
    made = f"{probe.name}({d}, {MAX_LEN})"
    runs = [(module, d, 10000.0, MAX_LEN, made, case) for case in qk_cases(probe, B, T)]
    every_row = ("positions=None and T = max_len = 64", torch.float32, None)
    runs.append((probe.build(cls, 12, 64, 500.0), 12, 500.0, 64, f"{probe.name}(12, 64, 500.0)", every_row))
    for built, head_dim, base, max_len, made, (what, dtype, positions) in runs:
        length = T if max_len == MAX_LEN else max_len  # the small module: T = max_len
        q, k = query_and_key(probe, B, (4, 2), length, head_dim, dtype, positions, max_len)
        call = f"`{made}` called with {what}"
        with size_one_explained(probe, positions):
            out = probe.call(built, q, k, *(() if positions is None else (positions,)), what=call)
            out = two_tensors(probe, out, call, "(q_rot, k_rot)")
            expect_rotary_pair(probe, built, out, (q, k), positions, base, f"from {made} with {what},")


def expect_rotary_pair(
    probe: Probe, built: nn.Module, out: Tables, inputs: Tables, positions: Tensor | None, base: float, what: str
) -> None:
    """A rotary module's (q_rot, k_rot) against RoPE of `base`, each read as expect_rotated reads it."""

    def output(index: int, x: Tensor, p: Tensor | None) -> Tensor:  # the module's q_rot or k_rot for x
        return probe.call(built, x, x, p)[index]

    for index, (x, name) in enumerate(zip(inputs, ("q_rot", "k_rot"))):
        expect_rotated(
            probe,
            out[index],
            x,
            positions,
            base,
            "half",
            rotate=functools.partial(output, index),
            in_bfloat16=low_precision(probe),
            what=f"{name} {tuple(x.shape)} {what}",
            mistakes=probe.known_mistakes(x, positions, base),
        )


def nothing_saved(probe: Probe, module: nn.Module) -> None:
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


def length_checked(cls: type, probe: Probe) -> None:
    """Refuse positions past the table, on the CPU (see common.refuses)."""
    small = probe.call(cls, 8, 16, what=f"`{probe.name}(8, 16)`")
    q, k = probe.randn(1, 2, 4, 8, device="cpu"), probe.randn(1, 1, 4, 8, device="cpu")
    last = probe.positions(16, 4, device="cpu")  # the last position, 15, has its row: it must work
    works_at_the_edge(
        probe,
        lambda: probe.call(small, q, k, last),
        f"`{probe.name}(8, max_len=16)` refused positions {last.tolist()}, yet the tables have a row for every position up to 15.",
        hint="Count the rows: a table of max_len rows holds positions 0 .. max_len - 1. Which positions really lie past it?",
        fix="Refuse only positions past the table: `if last >= self.max_len: raise ValueError(...)`, with last = positions.max() (or T - 1 when positions is None).",
    )
    refuses(
        probe,
        lambda extra: probe.call(small, q, k, torch.tensor([0, 5, 16 + extra, 3])),
        f"`{probe.name}(8, max_len=16)` called with positions [0, 5, 16, 3]",
        LENGTH_FIX,
        hint=LENGTH_HINT,
    )
    # positions=None: T = max_len = 16 tokens must work, 17 must be refused.
    tokens = lambda T, H: probe.sequence(probe.randn(1, H, T, 8, device="cpu"), 16, dim=-2)
    refuses_past_max_len(
        probe, lambda T: probe.call(small, tokens(T, 2), tokens(T, 1)), 16, hint=LENGTH_HINT, fix=LENGTH_FIX
    )
