"""The axes every rotary exercise of chapter 05 walks besides its values (issue 41): what a model
hands a rotation and asks of it, which the value probes (fresh contiguous tensors, no autograd) do
not show.

* transposed views: q and k come from the projections as (B, T, H, Dh).transpose(1, 2), not
  contiguous, and a `.view` on them raises (`views_accepted`);
* gradients: the rotation sits between the projections and the loss, so the gradient of q and k
  must flow through it (a rotation under torch.no_grad() or inference_mode, a .detach() or a trip
  through NumPy cuts it), and equal the float64 one: the rotation transposed (`gradient_flows`).

* defaults used as defaults: RotaryEmbedding(head_dim) holds 2048 positions, turns with base 10000
  (`defaults_kept`); a base read wrong where the default was relied on, while base=10000.0 and
  500000.0 given are honoured, is default_changed, and one given but ignored is said so
  (`default_base_explained`);
* the tables actually passed: apply_rope and apply_partial_rope get tables of base 500000 in every
  other case (`handed_tables`), so code that builds its own angles shows (argument_ignored).

Each exercise states its rotation as a `Rotation`: how to call the student's code on (q, k) or (x,)
at some positions, and what turns (base, layout, the first r dims). The generic axes of
helpers.contracts compare against the float32 reference at small positions and take one tensor as
the result; these compare with RoPE in float64 at positions up to 3999, for results of two tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from helpers.exercises import rope
from helpers.exercises.common import NO_GRADIENT_HINT
from helpers.probe import Probe, close, describe_difference
from helpers.safety import Failure


@dataclass
class Rotation:
    """One exercise's rotation: `run(inputs, positions)` calls the student's code and returns its
    outputs as a tuple, one per input; `base` and `layout` (rope.rope64's) say how each turns, `r` how
    many of its first dims (None: all of them), `turned` whether it is a rotation at all (rotate_half:
    a quarter turn, `reference` given instead)."""

    run: Callable[[tuple[Tensor, ...], Tensor | None], tuple[Tensor, ...]]
    names: tuple[str, ...]  # the inputs' names, "q", "k" or "x"
    base: float = 10000.0
    layout: str = "half"
    r: int | None = None
    reference: Callable[[Tensor], Tensor] | None = None  # a linear map in float64, instead of RoPE


def expected(rotation: Rotation, x: Tensor, positions: Tensor | None) -> Tensor:
    """The float64 result for one input, in x's dtype and device."""
    if rotation.reference is not None:
        return rotation.reference(x.detach().cpu().double()).to(x.device, x.dtype)
    r = x.shape[-1] if rotation.r is None else rotation.r
    turned = rope.rope64(x[..., :r], positions, rotation.base, rotation.layout)
    return torch.cat([turned, x[..., r:].detach()], dim=-1)


def tolerance(rotation: Rotation, x: Tensor, positions: Tensor | None) -> dict:
    if rotation.reference is not None:
        return {"rtol": 0.0, "atol": 1e-6}
    return part_tolerance(x, positions, rotation.base, rotation.layout, rotation.r)


def part_tolerance(
    x: Tensor, positions: Tensor | None, base: float, layout: str = "half", r: int | None = None
) -> dict:
    """Per entry: the first r dims (all of them: None) within what float32 makes of their angles at these
    positions (rope.tolerance), the rest exact; a half dtype within its own rounding."""
    r = x.shape[-1] if r is None else r
    turned = rope.tolerance(x[..., :r], positions, base, layout)
    if not isinstance(turned["atol"], Tensor):
        return turned
    atol = turned["atol"].expand(*x.shape[:-1], r)
    return {
        "rtol": 0.0,
        "atol": torch.cat([atol, torch.full((*atol.shape[:-1], x.shape[-1] - r), 1e-6, dtype=atol.dtype)], dim=-1),
    }


def agrees(rotation: Rotation, out: object, x: Tensor, positions: Tensor | None) -> bool:
    want = expected(rotation, x, positions)
    return isinstance(out, Tensor) and out.shape == want.shape and close(out, want, **tolerance(rotation, x, positions))


def transposed(probe: Probe, B: int, H: int, T: int, d: int) -> Tensor:
    """(B, H, T, d), as attention hands it over: a transposed view of (B, T, H, d), not contiguous."""
    return probe.randn(B, T, H, d).transpose(1, 2)


def views_accepted(probe: Probe, rotation: Rotation, inputs: tuple[Tensor, ...], positions: Tensor | None) -> None:
    """The inputs as transposed views (not contiguous): the student's code must rotate them as it rotates
    contiguous copies. A raise, or a result that only contiguous copies make right, is contiguity_assumed."""
    shapes = ", ".join(f"{name} {tuple(x.shape)}" for name, x in zip(rotation.names, inputs))
    what = f"{shapes} handed over as transposed views, (B, T, H, Dh).transpose(1, 2), as a model's attention hands them over"

    def right_on_copies() -> bool:
        try:
            outs = rotation.run(tuple(x.contiguous() for x in inputs), positions)
        except Failure:
            return False
        return all(agrees(rotation, out, x, positions) for out, x in zip(outs, inputs))

    try:
        outs = rotation.run(inputs, positions)
    except Failure as failure:
        if failure.code == "raised" and right_on_copies():
            probe.fail(
                "contiguity_assumed",
                f"{failure.message.rstrip('.')}, with {what} (not contiguous). {CONTIGUOUS_SAID}",
                *CONTIGUOUS_HELP,
            )
        raise
    for out, x, name in zip(outs, inputs, rotation.names):
        if not agrees(rotation, out, x, positions):
            if right_on_copies():
                probe.fail(
                    "contiguity_assumed",
                    f"`{probe.name}` gives wrong values for {what} (not contiguous). {CONTIGUOUS_SAID}",
                    *CONTIGUOUS_HELP,
                )
            probe.expect(
                out,
                expected(rotation, x, positions),
                what=f"{name}'s result for {what},",
                **tolerance(rotation, x, positions),
            )


CONTIGUOUS_SAID = "On contiguous copies of the same values your code is right."
CONTIGUOUS_HELP = (
    "`view` reinterprets memory in the order it is laid out, and a transposed tensor is not laid out in its index order: view refuses "
    "to split or merge its axes (or, through `as_strided`/`.storage()`, reads other entries). `reshape` copies when it has to, so "
    "writing into what it returned changes a copy, not your result.",
    "Use `.reshape(...)` where you wrote `.view(...)` (or `.contiguous().view(...)`), and build the result as new tensors with "
    "broadcasting arithmetic rather than by writing into a reshaped one.",
)


def gradient_flows(probe: Probe, rotation: Rotation, inputs: tuple[Tensor, ...], positions: Tensor | None) -> None:
    """Backward through the student's outputs: each input's gradient must be there (no torch.no_grad(),
    inference_mode, .detach() or NumPy on the way) and equal the float64 one, the upstream gradient
    turned back (the rotation's transpose)."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in inputs)
    outs = rotation.run(leaves, positions)
    for out, name in zip(outs, rotation.names):
        if not (isinstance(out, Tensor) and out.requires_grad):
            probe.fail(
                "gradient_cut",
                f"`{probe.name}`'s result for {name} does not require grad although {name} does: the rotation is cut off from autograd, "
                "so no gradient reaches the projections that made q and k, and the model could not be trained.",
                hint=f"{NO_GRADIENT_HINT} (transformers' LlamaRotaryEmbedding.forward runs under torch.no_grad() because it returns only cos and sin, "
                "which need no gradient; the rotation of q and k does.)",
                fix="Rotate with torch operations on the inputs themselves, outside any `torch.no_grad()` or `torch.inference_mode()` block, "
                "with no `.detach()`, `.data` or NumPy on the way.",
            )
    upstream = [probe.randn(*out.shape) for out in outs]
    probe.call(
        lambda: torch.autograd.backward([o.float() for o in outs], upstream), what=f"backward through `{probe.name}`"
    )
    for leaf, g, name in zip(leaves, upstream, rotation.names):
        # the gradient is the upstream one turned back: the transpose of the rotation, rotation by -angles
        want = transposed_gradient(rotation, g, positions)
        if leaf.grad is None:
            probe.fail(
                "gradient_cut",
                f"After a backward pass through `{probe.name}`, {name} has no gradient: its result was computed from something else (a copy?).",
                hint=NO_GRADIENT_HINT,
                fix=f"Compute the result from {name} itself, with torch operations only.",
            )
        if not close(leaf.grad, want, **tolerance(rotation, g, positions)):
            probe.fail(
                "wrong_values",
                f"The gradient of {name} after a backward pass through `{probe.name}` is not the rotation's transpose: "
                + describe_difference(leaf.grad, want, f"{name}.grad", **tolerance(rotation, g, positions)),
                hint="A rotation's gradient is the upstream gradient turned back by the same angles: autograd gives it for free when the "
                "output is computed from the input with torch operations. A custom autograd.Function, or a value swapped in after the fact, changes it.",
                fix="Compute the output with torch operations on the input only, and let autograd differentiate it.",
            )


def transposed_gradient(rotation: Rotation, g: Tensor, positions: Tensor | None) -> Tensor:
    """The float64 gradient of the input for upstream gradient g: the rotation transposed."""
    g64 = g.detach().cpu().double().requires_grad_()
    x64 = torch.zeros_like(g64, requires_grad=True)
    if rotation.reference is not None:
        out = rotation.reference(x64)
    else:
        r = g.shape[-1] if rotation.r is None else rotation.r
        angles, _ = rope.rope_angles(g.shape[-2], r, positions, rotation.base, rotation.layout)
        part = x64[..., :r]
        out = torch.cat([part * angles.cos() + rope.turn(part, rotation.layout) * angles.sin(), x64[..., r:]], dim=-1)
    (grad,) = torch.autograd.grad(out, x64, g64.detach())
    return grad.to(g.device, torch.float32)


def walk(probe: Probe, rotation: Rotation, heads: tuple[int, ...], d: int, T: int = 5) -> None:
    """Both axes, once the values passed: two sequences at positions (T,) up to 3999 (where float32
    and float64 angles differ most), one input per head count in `heads`."""
    positions = rope.far_positions(probe, T)
    views_accepted(probe, rotation, tuple(transposed(probe, 2, H, T, d) for H in heads), positions)
    gradient_flows(probe, rotation, tuple(probe.randn(2, H, T, d) for H in heads), positions)


def accepts_last(probe: Probe, cls: type, q: Tensor, k: Tensor, last: Tensor) -> bool:
    """Whether the module built with max_len=2048 given turns positions up to 2047: if not, its length check
    refuses them, whatever its default."""
    explicit = module_rotation(probe, probe.build(cls, 8, DEFAULT_MAX_LEN, DEFAULT_BASE), DEFAULT_BASE)
    try:
        explicit.run((q, k), last)
    except Failure:
        return False
    return True


def module_rotation(probe: Probe, module: Callable[..., Any], base: float) -> Rotation:
    """A rotary module's rotation for the axes: module(q, k, positions) -> (q_rot, k_rot)."""
    return Rotation(
        run=lambda inputs, positions: rope.two_tensors(
            probe, probe.call(module, *inputs, positions), f"`{probe.name}`", "(q_rot, k_rot)"
        ),
        names=("q", "k"),
        base=base,
    )


DEFAULT_MAX_LEN, DEFAULT_BASE = 2048, 10000.0  # RotaryEmbedding's, as the docstring gives them


def defaults_kept(probe: Probe, cls: type) -> None:
    """RotaryEmbedding(head_dim) with its defaults as defaults: max_len 2048 (position 2047 turned with
    base 10000, 2048 refused) and base 10000. A module that refuses nothing is the length check's finding."""
    made = f"`{probe.name}(8)`"
    module = probe.build(cls, 8)
    turn = module_rotation(probe, module, DEFAULT_BASE)
    last = torch.tensor([0, 5, DEFAULT_MAX_LEN - 1], device=probe.device)
    q, k = probe.randn(1, 2, 3, 8), probe.randn(1, 1, 3, 8)
    try:
        outs = turn.run((q, k), last)
    except Failure as failure:
        if failure.code == "raised" and "ValueError" in failure.message and accepts_last(probe, cls, q, k, last):
            probe.fail(
                "default_changed",
                f"{made}, built with the default max_len, refused positions {last.tolist()}: {failure.message} Its default max_len is "
                f"below {DEFAULT_MAX_LEN}, the one the exercise gives.",
                *default_help(ROTARY_SIGNATURE),
            )
        raise
    if not all(agrees(turn, out, x, last) for out, x in zip(outs, (q, k))):
        explicit = probe.build(cls, 8, DEFAULT_MAX_LEN, DEFAULT_BASE)
        if all(
            agrees(turn, out, x, last)
            for out, x in zip(module_rotation(probe, explicit, DEFAULT_BASE).run((q, k), last), (q, k))
        ):
            probe.fail(
                "default_changed",
                f"{made}, built with the default base, does not turn as base {DEFAULT_BASE:g} does, yet `{probe.name}(8, {DEFAULT_MAX_LEN}, "
                f"{DEFAULT_BASE})` does: its default base is another number.",
                *default_help(ROTARY_SIGNATURE),
            )
        return  # the values' own probes say what is wrong
    try:
        turn.run((q[..., :1, :], k[..., :1, :]), torch.tensor([DEFAULT_MAX_LEN], device=probe.device))
    except Failure:
        return  # refused (or torch's IndexError, the length check's finding)
    probe.fail(
        "default_changed",
        f"{made}, built with the default max_len, accepted position {DEFAULT_MAX_LEN}: its default max_len is larger than "
        f"{DEFAULT_MAX_LEN}, the one the exercise gives, so its tables hold rows a model built with the defaults must not have.",
        *default_help(ROTARY_SIGNATURE),
    )


def default_help(signature: str) -> tuple[str, str]:
    """(hint, fix) of default_changed, for code whose signature should read `signature`."""
    return (
        "A default is part of the interface: code that leaves the argument out relies on it. max_len 2048 and base 10000 are this "
        "exercise's (and Llama 2's); 4096, 8192 or 131072 positions, a base of 500000 (Llama 3) or 1000000 (Code Llama, Qwen2) belong to other models.",
        f"Write the signature as the exercise gives it: `{signature}`.",
    )


ROTARY_SIGNATURE = f"def __init__(self, head_dim, max_len={DEFAULT_MAX_LEN}, base={DEFAULT_BASE})"


@contextlib.contextmanager
def default_base_explained(
    probe: Probe, explicit: Callable[[float], Rotation], made: str, signature: str
) -> Iterator[None]:
    """A wrong base or exponent read from a call that relies on the default base, where the same code
    turns right with base=10000.0 and with base=500000.0 given: the default is what is wrong (default_changed).
    `explicit(base)` is the code's rotation with that base passed."""
    try:
        yield
    except Failure as failure:
        if failure.code in ("wrong_base", "wrong_exponent") and all(
            honoured(probe, explicit(b)) for b in (DEFAULT_BASE, 500000.0)
        ):
            probe.fail(
                "default_changed",
                f"Called without `base`, {made} does not turn as base {DEFAULT_BASE:g} does{read_back(failure)}, yet given "
                f"base={DEFAULT_BASE} (or 500000.0) it turns right: the default of `base` is another number than {DEFAULT_BASE:g}, "
                "the one the exercise gives.",
                *default_help(signature),
            )
        if failure.code == "wrong_base" and honoured(probe, explicit(DEFAULT_BASE)):
            given = explicit(500000.0)
            if honoured(probe, Rotation(given.run, given.names, DEFAULT_BASE, given.layout)):
                probe.fail(
                    "wrong_base",
                    f"{made} ignores the `base` it is given: with base=500000.0 (Llama 3's) given, it turns as base {DEFAULT_BASE:g} does "
                    "(10000 written into the code, or the argument not passed on to where the frequencies are made).",
                    hint="The base decides every pair's frequency, θ_i = base^(-2i/d): Llama 2 uses 10000, Llama 3 500000, Code Llama 1000000. "
                    "A function that takes `base` must use it.",
                    fix="Compute the frequencies from the argument, `base ** (-torch.arange(0, d, 2).float() / d)`, and pass `base` on to "
                    "every helper that builds them.",
                )
        raise


def honoured(probe: Probe, rotation: Rotation) -> bool:
    """Whether the code turns right with the base its rotation passes."""
    x = probe.randn(1, 2, 3, 8)
    positions = torch.tensor([1, 50, 3999], device=probe.device)
    try:
        outs = rotation.run((x,) * len(rotation.names), positions)
    except Failure:
        return False
    return all(agrees(rotation, out, x, positions) for out in outs)


def read_back(failure: Failure) -> str:
    """What the frequencies read from the rotations say, when the failure read them (" (they fall like a base of 1e+06)")."""
    said = failure.message
    start = said.find("(they fall like a base of")
    return f" {said[start : said.index(')', start) + 1]}" if start >= 0 else ""


def handed_tables(probe: Probe, case: int, r: int, positions: Tensor | None) -> tuple[float, Tensor, Tensor]:
    """(base, cos, sin) for one case of apply_rope and apply_partial_rope, r columns wide: every other case
    hands Llama 3's base (500000), so that code building its own angles shows; positions=None, tables of
    64 rows only (the rows past T are not the code's business)."""
    base = 500000.0 if case % 2 else 10000.0
    rows = 64 if positions is None else rope.MAX_LEN
    return base, *(t[:rows].to(probe.device, copy=True) for t in rope.reference_tables(r, base))


def tables_rotation(probe: Probe, fn: Callable, base: float, r: int | None = None) -> Rotation:
    """apply_rope's (or apply_partial_rope's, r of head_dim turned) rotation for the axes: tables of `base`, r wide."""
    cos, sin = (t.to(probe.device, copy=True) for t in rope.reference_tables(r, base))
    return Rotation(
        run=lambda inputs, positions: rope.two_tensors(
            probe, probe.call(fn, *inputs, cos, sin, positions), f"`{probe.name}`", "(q_rot, k_rot)"
        ),
        names=("q", "k"),
        base=base,
        r=r,
    )
