"""Partial RoPE (GPT-NeoX's rotary_pct, GPT-J's rotary_dim), apply_partial_rope's kit: only the first
r = cos.shape[-1] dims of each head turn, half-split within them; the rest pass through.

* `partial`, with a knob per mistake (on top of rope.applied's), and the faces of the mistakes
  that turn the wrong dims (`whole_head_tables`, `pairs_across_head`);
* its probes: the dims past r kept (`pass_through_kept`), the turned part read for its RoPE
  properties (`turned_part`), one case's outputs (`expect_partial`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from helpers import reference
from helpers.exercises.common import expect_then
from helpers.exercises.rope import Rotate, Tables, applied, bf16_arithmetic, gather_rows, properties, tolerance, turn
from helpers.exercises.rope_axes import part_tolerance
from helpers.probe import Probe, close
from helpers.safety import Failure


def partial(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor | None = None,
    *,
    part: str = "first",
    rest: str = "after",
    **knobs: Any,
) -> Tables:
    """apply_partial_rope with one knob turned: the r dims turned are the `part` ("first" or "last") of
    each head; the rest is joined "after" or "before" the turned part, or "zeroed" (after it) or
    "dropped"; `knobs` turn applied's on the turned part."""
    r = cos.shape[-1]
    first = part == "first"
    q_part, k_part = (x[..., :r] if first else x[..., -r:] for x in (q, k))
    turned = applied(q_part, k_part, cos, sin, positions, **knobs)
    if rest == "dropped":
        return turned
    rests = [x[..., r:] if first else x[..., :-r] for x in (q, k)]
    if rest == "zeroed":
        rests = [torch.zeros_like(x) for x in rests]
    return tuple(torch.cat([x, y] if rest == "before" else [y, x], dim=-1) for x, y in zip(rests, turned))


def whole_head_tables(cos: Tensor, sin: Tensor, head_dim: int) -> list[Tables]:
    """Tables for turning a whole head where r = cos.shape[-1] dims should turn: the r-wide tables
    repeated to fit the head, and the head's own (as if r were head_dim); none if r does not divide it."""
    r, T = cos.shape[-1], cos.shape[0]
    if head_dim % r:
        return []
    return [(cos.repeat(1, head_dim // r), sin.repeat(1, head_dim // r)), reference.rope_cache(head_dim, T)]


def pairs_across_head(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None) -> list[Tables]:
    """Partial RoPE with the pairs (i, i + head_dim/2) of the whole head: rotate_half of the whole head
    cut to r, and those pairs with i < r/2 turned in place (none if r > head_dim/2)."""
    r, d = cos.shape[-1], q.shape[-1]
    if 2 * r > d or d % 2:
        return []
    c, s = gather_rows(cos, sin, q.shape[-2], positions)
    pairs = torch.cat([torch.arange(r // 2), d // 2 + torch.arange(r // 2)]).to(q.device)  # (i, i + d/2), i < r/2

    def sliced_after(x: Tensor) -> Tensor:  # rotate_half of the whole head, cut to r
        return torch.cat([(x[..., :r].float() * c + turn(x.float())[..., :r] * s).to(x.dtype), x[..., r:]], dim=-1)

    def spread(x: Tensor) -> Tensor:  # the pairs (i, i + d/2) turned, i < r/2, the rest left
        out = x.clone()
        picked = x[..., pairs].float()
        out[..., pairs] = (picked * c + turn(picked) * s).to(x.dtype)
        return out

    return [(sliced_after(q), sliced_after(k)), (spread(q), spread(k))]


def pass_through_kept(
    probe: Probe, x: Tensor, got: Tensor, r: int, inner: Callable[[Failure], None]
) -> Callable[[Failure], None]:
    """When no known mistake reproduces partial RoPE's output: first the dims past r, which must
    come out as they went in; then `inner`, the reading of the turned part."""

    def fallback(failure: Failure) -> None:
        if got.shape == x.shape and not close(got[..., r:], x[..., r:], **tolerance(x)):
            probe.fail(
                "wrong_values",
                f"{failure.message} Dims {r}..{x.shape[-1] - 1} of each head, which must pass through unchanged, changed.",
                hint="Only the first r = cos.shape[-1] dims of each head turn; the other head_dim - r carry no position and come out exactly as they went in.",
                fix="Split each head, `x_rot, x_pass = x[..., :r], x[..., r:]`, turn x_rot only, and `torch.cat([x_rot_turned, x_pass], dim=-1)`.",
            )
        inner(failure)

    return fallback


def turned_part(probe: Probe, fn: Callable, index: int, d: int, cos: Tensor, sin: Tensor) -> Rotate:
    """The student's partial RoPE of the first r dims alone, for properties: rotate(x (..., r), positions)."""
    r = cos.shape[-1]

    def rotate(part: Tensor, p: Tensor) -> Tensor:
        whole = torch.cat([part, part.new_zeros(*part.shape[:-1], d - r)], dim=-1)  # the dims past r: zeros
        return probe.call(fn, whole, whole, cos, sin, p)[index][..., :r]

    return rotate


def expect_partial(fn: Callable, probe: Probe, out: Tables, args: tuple, what: str, base: float) -> None:
    """q_rot and k_rot: the dims past r passed through (pass_through_kept), then the turned part
    read for its RoPE properties, or for its arithmetic in bfloat16; `base` is the tables'."""
    q, k, cos, sin = args[:4]
    positions = args[4] if len(args) > 4 else None
    d, r = q.shape[-1], cos.shape[-1]
    expected = reference.apply_partial_rope(*args)
    for index, (x, name) in enumerate(zip((q, k), ("q_rot", "k_rot"))):
        inner = (
            bf16_arithmetic(probe)
            if x.dtype == torch.bfloat16
            else properties(probe, turned_part(probe, fn, index, d, cos, sin), r, base=base)
        )
        expect_then(
            probe,
            pass_through_kept(probe, x, out[index], r, inner),
            out[index],
            expected[index],
            what=f"{name} {tuple(x.shape)} {str(x.dtype).replace('torch.', '')} with rotary_dim r = {r} of head_dim {d}, {what},",
            mistakes=probe.known_mistakes(*args, index=index),
            **part_tolerance(x, positions, base, r=r),  # the case's positions, the tables' base
        )


def sin_negated(args: tuple) -> list[tuple]:
    """A second mistake, the turn the other way, as inputs: the catalogue's mistakes run with -sin."""
    return [(*args[:3], -args[3], *args[4:])]
