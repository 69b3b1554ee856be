"""The RoPE probe kit that chapter 05's checks share (and only they: no exercise is declared here).

* one RoPE with a knob per mistake (`rope_with`, `cache_with`, `table_rope_with`), so each
  mistake in ch05 reads as "the right thing, with this one thing changed";
* the float64 RoPE the checks compare with (`rope64`) and its tolerances, entry by entry;
* the inputs (`rope_positions`, `rope_cases`) and the readings of a wrong output: half precision on
  the way (`angles_precision_first`), the student's own rotations read from one-hot vectors
  (`read_rotations`), and the RoPE properties kept or broken (`rope_properties`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import torch

from helpers import reference
from helpers.exercises import structure
from helpers.exercises.common import angle_tolerance, frequencies, precision_first
from helpers.probe import Probe, close
from helpers.safety import Failure

# Shared machinery first: one RoPE with a knob per mistake, so each mistake
# below reads as "the right thing, with this one thing changed".


def turn_adjacent(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): adjacent pairs turned by 90 degrees."""
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


def turn_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rope_with(
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
    turn = turn_half if pairing == "half" else turn_adjacent
    return (x.float() * cos + sign * turn(x.float()) * sin).to(x.dtype)


def cache_with(
    head_dim: int, max_len: int, base: float = 10000.0, *, layout: str = "half", exponent: str = "2i/d"
) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), frequencies(head_dim, base, exponent))
    angles = torch.cat([angles, angles], dim=-1) if layout == "half" else angles.repeat_interleave(2, dim=-1)
    return angles.cos().float(), angles.sin().float()


def gather_rows(
    cos: torch.Tensor, sin: torch.Tensor, T: int, positions: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = (cos[:T], sin[:T]) if positions is None else (cos[positions], sin[positions])
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return cos, sin


def as_interleaved(table: torch.Tensor) -> torch.Tensor:
    """A half-split cos/sin table re-laid out with each angle in two adjacent columns."""
    return table[..., : table.shape[-1] // 2].repeat_interleave(2, dim=-1)


def table_rope_with(
    q, k, cos, sin, positions, *, pairing="half", angle_layout="half", sign=1.0, ignore_positions=False
):
    c, s = gather_rows(cos, sin, q.shape[-2], None if ignore_positions else positions)
    if angle_layout == "adjacent":
        c, s = as_interleaved(c), as_interleaved(s)
    turn = turn_half if pairing == "half" else turn_adjacent
    return tuple((x.float() * c + sign * turn(x.float()) * s).to(x.dtype) for x in (q, k))


# --- probes ----------------------------------------------------------------------------

# Every check runs at positions in the thousands (few of them, small heads, so
# it stays fast) and once in bfloat16, where computing angles in low precision
# shows. Float32 results are compared with RoPE computed in float64, entry by entry
# within common.angle_tolerance: float32 arithmetic is off by ~1e-4 at position 4000
# with θ_0 = 1, but by ~1e-7 where the angle is small, which is where cos/sin tables
# stored in float16 (~5e-4 everywhere) show. Every mistake in the catalogue is off by O(1).
HALF_TOLERANCE = {"rtol": 1.6e-2, "atol": 4e-2}  # a bfloat16 result: 2 units of its rounding, ~5 on |x| ≤ 4
ROPE_MAX_LEN = 4000  # positions in the thousands; 8 × 4000 floats stay under torch's threading grain


@functools.lru_cache(maxsize=8)
def reference_tables(head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference cos/sin tables up to ROPE_MAX_LEN, built once (on the CPU). Never hand them to student code: clone."""
    return reference.rope_cache(head_dim, ROPE_MAX_LEN, base)


def rope_angles(
    T: int, d: int, positions: torch.Tensor | None, base: float, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(angles, θ) in float64 on the CPU, laid out over the d columns as `layout` pairs them:
    angles (T, d), or (B, 1, T, d) for positions (B, T); θ (d,), each pair's frequency per column."""
    theta = frequencies(d, base)  # (d/2,) float64
    theta = torch.cat([theta, theta]) if layout == "half" else theta.repeat_interleave(2)
    m = torch.arange(T) if positions is None else positions.detach().cpu()
    angles = m.double()[..., None] * theta  # (T, d) or (B, T, d)
    return (angles[:, None] if angles.dim() == 3 else angles), theta


def rope64(x: torch.Tensor, positions: torch.Tensor | None, base: float, layout: str = "half") -> torch.Tensor:
    """The float64 RoPE the checks compare with (on the CPU: MPS has no float64), in x's dtype and device."""
    angles, _ = rope_angles(x.shape[-2], x.shape[-1], positions, base, layout)
    x64 = x.detach().to("cpu", torch.float64)
    turn = turn_half if layout == "half" else turn_adjacent
    return (x64 * angles.cos() + turn(x64) * angles.sin()).to(x.device, x.dtype)


def rope_tolerance(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    base: float = 10000.0,
    layout: str = "half",
    half: bool = False,
) -> dict:
    """rtol and atol for x rotated: a float32 (or float64) result entry by entry within what
    rounding makes of its angle (common.angle_tolerance, on |x| at that position); a half one
    within its own rounding. half=True: what positions, frequencies, angles or tables rounded
    to bfloat16 (or float16) would make, frequencies rounded after being computed (no |ln θ|)."""
    if x.dtype not in (torch.float32, torch.float64) and not half:
        return HALF_TOLERANCE
    angles, theta = rope_angles(x.shape[-2], x.shape[-1], positions, base, layout)
    size = (
        x.detach().to("cpu", torch.float64).norm(dim=-1, keepdim=True)
    )  # (..., T, 1): a pair is no larger than its vector
    if half:
        return {
            "atol": angle_tolerance(torch.bfloat16, angles, torch.ones_like(theta), size, torch.bfloat16),
            "size": size,
        }
    return {"rtol": 0.0, "atol": angle_tolerance(x.dtype, angles, theta, size)}


def angles_precision_first(
    probe: Probe, out, expected: torch.Tensor, tight: dict, loose: dict, then
) -> Callable[[Failure], None]:
    """common.precision_first for a rotated float32 result (`tight` and `loose` from rope_tolerance,
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
    "float32 keeps 24 bits, float16 11 and bfloat16 8. A cos/sin table stored in float16 is off by up to 5e-4 even at position 0, and an angle "
    "m·θ rounded in half precision is off by more and more as m grows (float16 cannot even hold the integers past 2048). Turned in float32, "
    "such a result still looks float32, but it carries the half-precision error."
)
ANGLES_PRECISION_FIX = (
    "Keep everything before the final cast in float32: positions `.float()`, θ and the angles in float32, and the cos/sin tables (buffers "
    "included) stored in float32: no `.half()`, `.bfloat16()` or `dtype=torch.float16` on the way; cast only the result, `.to(x.dtype)`."
)


@contextlib.contextmanager
def further_findings(probe: Probe, findings) -> Iterator[None]:
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


def two_tensors(probe: Probe, out, what: str, names: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        got = type(out).__name__ + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
        probe.fail(
            "wrong_type",
            f"{what} should return two tensors, {names}; got {got}.",
            hint="The caller unpacks your result into two names, so it must be a pair of separate tensors, not one stacked or concatenated tensor.",
            fix=f"End with `return {names.strip('()')}`: two tensors in a tuple, in that order.",
        )
    return out[0], out[1]


def rope_positions(probe: Probe, *shape: int) -> torch.Tensor:
    """Positions up to ROPE_MAX_LEN - 1 (T >= 4): 256 and 257, which collide in bfloat16, and
    in every row both edges, 0 and ROPE_MAX_LEN - 1."""
    sampled = probe.positions(ROPE_MAX_LEN, *shape)
    sampled[..., :3] = torch.tensor([256, 257, 0], device=probe.device)
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
        ("one token (T = 1) at position 3999, as when decoding", torch.float32, probe.positions(ROPE_MAX_LEN, 1)),
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


def one_hot_images(probe: Probe, rotate, head_dim: int) -> torch.Tensor:
    """(2, d, d): e_j turned at positions 1 and 50, all in one call (the one-hot vectors along the batch)."""
    x = torch.eye(head_dim, device=probe.device)[:, None, None, :].expand(head_dim, 1, 2, head_dim).contiguous()
    turned = rotate(x, torch.tensor(ONE_HOT_POSITIONS, device=probe.device))
    return turned.detach().float()[:, 0].transpose(0, 1)


def read_rotations(probe: Probe, rotate, head_dim: int, layout: str, base: float):
    """structure.rotation_findings on the student's own rotations; a function, run only when needed."""

    def find() -> list[tuple[str, str]]:
        return structure.rotation_findings(one_hot_images(probe, rotate, head_dim), ONE_HOT_POSITIONS, layout, base)

    return find


def rope_properties(probe: Probe, rotate, head_dim: int, layout: str = "half", base: float = 10000.0):
    """When no known mistake reproduces the output: read the layout, the direction and
    each pair's θ from one-hot vectors (structure.rotation_findings); failing that, say
    which RoPE property the student's code keeps and which it breaks.
    rotate(x (B, 1, T, d), positions (T,)); layout ("half" or "adjacent") is the
    exercise's, base the one `rotate` was built with."""

    def fallback(failure: Failure) -> None:
        try:
            findings = read_rotations(probe, rotate, head_dim, layout, base)()
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
