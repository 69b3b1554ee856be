"""Chapter 05, rotary embeddings (Su et al. 2021, RoFormer): `rope_cache`,
`rotate_half`, `apply_rope`, `rope_interleaved` and `RotaryEmbedding`, with their
advice, checks and contracts.

Their known mistakes live in helpers.exercises.rope_mistakes (each one of helpers.exercises.rope's
implementations with one knob turned); the probes their checks are made of live in rope too."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from helpers import reference
from helpers.contracts import FLOATS, Arg, Contract, Draw, Result
from helpers.exercises import oracle, partial_rope, rope, rope_axes
from helpers.exercises.common import (
    TAKES_NO_TENSOR,
    calls_of,
    expect_cases,
    expect_then,
    module_device_pass,
    plain_tensors,
)
from helpers.exercises.rope import Tables
from helpers.exercises.rope_mistakes import (
    apply_rope_first_row_positions,
    apply_rope_ignores_positions,
    apply_rope_interleaved,
    apply_rope_mixed_pairing,
    apply_rope_position_offset,
    apply_rope_sign_flip,
    apply_rope_tables_ignored,
    partial_ignores_positions,
    partial_interleaved,
    partial_last_dims,
    partial_mixed_pairing,
    partial_pairs_across_head,
    partial_pass_dropped,
    partial_sign_flip,
    partial_tables_ignored,
    partial_whole_head,
    partial_width_guessed,
    rope_cache_interleaved,
    rope_cache_low_precision,
    rope_cache_mixed_pairing,
    rope_cache_position_offset,
    rope_cache_wrong_base,
    rope_cache_wrong_exponent,
    rope_interleaved_half_split,
    rope_interleaved_ignores_positions,
    rope_interleaved_low_precision,
    rope_interleaved_mixed_pairing,
    rope_interleaved_sign_flip,
    rope_interleaved_wrong_base,
    rope_interleaved_wrong_exponent,
    rotary_ignores_positions,
    rotary_interleaved,
    rotary_low_precision,
    rotary_mixed_pairing,
    rotary_sign_flip,
    rotary_wrong_base,
    rotary_wrong_exponent,
    rotate_half_interleaved,
    rotate_half_mixed_pairing,
    rotate_half_sign_flip,
    shift_matrix_base_not_passed,
    shift_matrix_ignores_positions,
    shift_matrix_not_transposed,
)
from helpers.probe import Probe, close
from helpers.registry import Exercise
from helpers.safety import MATRIX_PRODUCTS, Failure, square_matrix_product

# --- advice and checks (the probes they are made of: helpers.exercises.rope) ---------------

# rope_cache -------------------------------------------------------------------

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


def check_rope_cache(fn: Callable, probe: Probe) -> None:
    # (head_dim, max_len, base where given: its default must be 10000); max_len = 1: tables of one row
    for head_dim, max_len, *given in ((8, rope.MAX_LEN), (6, 40, 500000.0), (8, 1)):
        args = (head_dim, probe.length(max_len), *given)
        call = f"rope_cache({', '.join(repr(a) for a in args)})"
        tables = rope.two_tensors(probe, probe.call(fn, *args, what=f"`{call}`"), f"`{call}`", "(cos, sin)")
        try:
            rope.expect_tables(probe, tables, args, call, (*given, 10000.0)[0])
        except Failure as failure:
            held = (
                10000.0 if given else 1000.0
            )  # the base a catalogue mistake holds here (the default case passed before)
            face = rope.cache(head_dim, max_len, held)
            if failure.code == "wrong_base" and all(close(t, f, atol=1e-4) for t, f in zip(tables, face)):
                probe.fail(
                    "wrong_base",
                    f"`{call}` ignores the base it was given: its tables are those of base 10000 (written into the code, or the argument "
                    f"not passed on), not of base={given[0]} (Llama 3's)."
                    if given
                    else f"`{call}` uses base 1000 where the default is 10000: a typo that popular tutorials carry.",
                )
            raise


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


def check_rotate_half(fn: Callable, probe: Probe) -> None:
    # no float64: MPS has none
    for shape, dtype in (((2, 3, 5, 8), torch.float32), ((7, 6), torch.float16), ((4, 10), torch.bfloat16)):
        x = probe.randn(*shape, dtype=dtype)
        what = f"rotate_half of a {tuple(shape)} {str(dtype).replace('torch.', '')} tensor"
        read = rope.quarter_turns(probe, fn)
        expect_then(
            probe, read, probe.call(fn, x), reference.rotate_half(x), what=what, mistakes=probe.known_mistakes(x)
        )
    turn = rope_axes.Rotation(
        run=lambda inputs, _: (probe.call(fn, *inputs),), names=("x",), reference=reference.rotate_half
    )
    rope_axes.walk(probe, turn, (3,), 8)
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


TABLES_GIVEN = (
    "apply_rope gets its angles from the cos and sin tables it is handed: rope_cache already chose the base and each pair's frequency θ_i, and nothing here should compute them again.",
    "Drop your own frequencies and angles: take the rows of the given tables, `cos[positions]` and `sin[positions]` (`[:T]` when positions is None), and turn with `x * cos + rotate_half(x) * sin`.",
)
APPLY_ROPE_OWN_HELP = {**APPLY_ROPE_HELP, "wrong_base": TABLES_GIVEN, "wrong_exponent": TABLES_GIVEN}


def check_apply_rope(fn: Callable, probe: Probe) -> None:
    d, B, Hq, Hk, T = 8, 3, 4, 2, 5  # GQA: 4 query heads share 2 key heads

    def output(index: int, cos: Tensor, sin: Tensor, x: Tensor, p: Tensor | None) -> Tensor:  # x as q and as k
        return probe.call(fn, x, x, cos, sin, p)[index]

    for case, (what, dtype, positions) in enumerate(rope.qk_cases(probe, B, T)):
        base, cos, sin = rope_axes.handed_tables(probe, case, d, positions)
        q, k = rope.query_and_key(probe, B, (Hq, Hk), T, d, dtype, positions)
        args = (q, k, cos, sin) if positions is None else (q, k, cos, sin, positions)
        with rope.gathers_explained(probe, positions, q.shape[-2]), rope.size_one_explained(probe, positions):
            out = probe.call(fn, *args)
            out = rope.two_tensors(probe, out, f"`{probe.name}`", "(q_rot, k_rot)")
            for index, (x, name) in enumerate(zip((q, k), ("q_rot", "k_rot"))):
                rope.expect_rotated(
                    probe,
                    out[index],
                    x,
                    positions,
                    base,
                    "half",
                    rotate=functools.partial(output, index, cos, sin),
                    in_bfloat16=rope.bf16_arithmetic(probe),
                    what=f"{name} {tuple(x.shape)} {str(dtype).replace('torch.', '')}, {what}, tables of base {base:g},",
                    mistakes=probe.known_mistakes(*args, index=index),
                )
    rope_axes.walk(probe, rope_axes.tables_rotation(probe, fn, 10000.0, d), (Hq, Hk), d)
    rope.tables_device_pass(probe, fn, (B, Hq, Hk, T), d, d)


# rope_interleaved and rope_from_shift_matrix ------------------------------------

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


SIGNATURE = "def {name}(x, positions=None, base=10000.0)"  # rope_interleaved's and rope_from_shift_matrix's defaults


def check_rope_interleaved(fn: Callable, probe: Probe) -> None:
    positions = rope.far_positions(probe, 6)
    sequence = lambda x: probe.sequence(x, None, dim=-2)
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
            (probe.positions(rope.MAX_LEN, 1),),
        ),
    )
    runs = [
        (
            (x, *extra),
            lambda x=x, extra=extra: probe.call(fn, x, *extra),
            lambda out, what=what, x=x, extra=extra: rope.expect_interleaved(fn, probe, out, what, x, extra),
        )
        for what, x, extra in cases
    ]
    ignored = "rope_ignores_positions" in probe.exercise.mistakes
    explicit = lambda base: rope_axes.Rotation(
        run=lambda inputs, positions: (probe.call(fn, *inputs, positions, base),),
        names=("x",),
        base=base,
        layout="adjacent",
    )
    with rope_axes.default_base_explained(probe, explicit, f"`{probe.name}`", SIGNATURE.format(name=probe.exercise.id)):
        expect_cases(probe, runs, {"rope_ignores_positions": rope.positions_dropped} if ignored else {})
    turn = rope_axes.Rotation(
        run=lambda inputs, positions: (probe.call(fn, *inputs, positions, 500000.0),),
        names=("x",),
        base=500000.0,
        layout="adjacent",
    )
    rope_axes.walk(probe, turn, (3,), 8)
    probe.device_pass(lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device)))
    probe.device_pass(
        lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device), torch.arange(5, device=device), 500000.0)
    )


def check_rope_from_shift_matrix(fn: Callable, probe: Probe) -> None:
    """rope_interleaved's check, then the exercise's point: the rows turned by a product with
    chapter 03's (d, d) matrices, not by rope_interleaved's own arithmetic. M_m made as a power of M_1
    drifts by float32's rounding at every product: told so, not taken for half precision (review S1/S6)."""
    try:
        check_rope_interleaved(fn, probe)
    except Failure as failure:
        if failure.code == "low_precision_angles" and calls_of(probe, fn, probe.randn(1, 1, 3, 8)) & {
            "matrix_power",
            "linalg_matrix_power",
        }:
            probe.fail(
                "wrong_values",
                f"{failure.message.split(' Somewhere on the way')[0]} Your code raises M_1 to the power m (matrix_power): "
                "each of the m products rounds M_1's float32 entries once more, and by position 4000 the rotation has drifted "
                "that far from M_m's own angles.",
                hint="Composing rotations is exact in mathematics, not in float32: M_1^m carries m roundings, while "
                "relative_shift_matrix(m, d, base) computes the angles m·θ_i once and rounds once.",
                fix="Build each position's matrix directly: `relative_shift_matrix(int(m), d, base)` for m in positions.",
            )
        raise
    seen = calls_of(probe, fn, probe.randn(2, 3, 5, 8))
    if square_matrix_product.__name__ not in seen:
        products = sorted(seen & MATRIX_PRODUCTS)
        how = (
            f"its matrix products ({', '.join(products)}) build angles or tables, or their result is not what it "
            "returns, and the pairs are turned some other way"
            if products
            else "it turns the pairs some other way (your rope_interleaved, complex numbers, cos/sin arithmetic)"
        )
        probe.fail(
            "method_not_used",
            f"`{probe.name}` gives interleaved RoPE, but never multiplies x by a (d, d) matrix into what it returns: {how}, not with chapter "
            "03's relative_shift_matrix.",
            hint="The exercise is the identity itself: at position m, RoPE is x @ M_m, with M_m = relative_shift_matrix(m, d, base). "
            "Building it that way is what shows that chapter 03's shift and RoPE are one rotation.",
            fix="Stack one matrix per position, `M = torch.stack([relative_shift_matrix(int(m), d, base) for m in positions])` (T, d, d), "
            "and return `torch.einsum('...ti,tij->...tj', x.float(), M).to(x.dtype)`.",
        )


# RotaryEmbedding --------------------------------------------------------------


def check_rotary_embedding(cls: type, probe: Probe) -> None:
    """Four independent aspects, all run (probe.independent): buffers, values, what
    state_dict saves, the length check; then the device pass. A module with a
    Parameter cache and no length check hears of both at once."""
    module = probe.build(cls, 8, rope.MAX_LEN)
    plain = plain_tensors(module)

    def values_then_axes() -> None:
        explicit = lambda base: rope_axes.module_rotation(probe, probe.build(cls, 8, rope.MAX_LEN, base), base)
        made = f"`{probe.name}(8, {rope.MAX_LEN})`"
        with rope_axes.default_base_explained(probe, explicit, made, rope_axes.ROTARY_SIGNATURE):
            rope.rotary_values(cls, probe, module, plain)
        rope_axes.walk(probe, rope_axes.module_rotation(probe, module, 10000.0), (4, 2), 8)

    probe.independent(
        lambda: rope.plain_attributes(probe, plain),
        values_then_axes,
        lambda: rope.nothing_saved(probe, module),
        lambda: rope.length_checked(cls, probe),
        lambda: rope_axes.defaults_kept(probe, cls),
    )
    # Device: every tensor on the meta device; a table or position made on the CPU shows.
    module_device_pass(
        probe,
        cls,
        (8, 16),
        lambda device: (probe.randn(1, 2, 4, 8, device=device), probe.randn(1, 1, 4, 8, device=device)),
        hint=rope.DEVICE_HINT,
        fix=rope.DEVICE_FIX,
    )


# apply_partial_rope ------------------------------------------------------------

PARTIAL_HELP = {
    **APPLY_ROPE_OWN_HELP,
    "wrong_shape": (
        "Each output has its input's shape, q (B, Hq, T, Dh) and k (B, Hk, T, Dh): the first r = cos.shape[-1] dims turned, the other Dh - r as they came.",
        "Join the two parts back: `torch.cat([x_rot_turned, x[..., r:]], dim=-1)`, with the cos and sin rows (T, r), or (B, 1, T, r) for positions (B, T).",
    ),
}


def check_apply_partial_rope(fn: Callable, probe: Probe) -> None:
    """apply_rope's cases (GQA, positions None / offset / (T,) / (B, T) / (B, 1), bfloat16, tables of base
    10000 and 500000) with GPT-NeoX's split, a quarter of each head turned; then half (GPT-J's share) and all of it."""
    B, Hq, Hk, T = 3, 4, 2, 5
    runs = [(16, 4, case) for case in rope.qk_cases(probe, B, T)]
    runs += [
        (16, 8, ("positions of shape (T,) up to 3999", torch.float32, rope.far_positions(probe, T))),
        (8, 8, ("positions=None", torch.float32, None)),
    ]
    cases = []
    for case, (d, r, (what, dtype, positions)) in enumerate(runs):
        base, cos, sin = rope_axes.handed_tables(probe, case, r, positions)
        q, k = rope.query_and_key(probe, B, (Hq, Hk), T, d, dtype, positions)
        args = (q, k, cos, sin) if positions is None else (q, k, cos, sin, positions)

        def call(args: tuple = args, positions: Tensor | None = positions) -> Tables:
            with rope.size_one_explained(probe, positions):
                return rope.two_tensors(probe, probe.call(fn, *args), f"`{probe.name}`", "(q_rot, k_rot)")

        def expect(
            out: Tables, args: tuple = args, what: str = f"{what}, tables of base {base:g}", base: float = base
        ) -> None:
            with rope.size_one_explained(probe, args[4] if len(args) > 4 else None):
                partial_rope.expect_partial(fn, probe, out, args, what, base)

        cases.append((args, call, expect))
    expect_cases(probe, cases, {"rope_sign_flip": partial_rope.sin_negated}, index=0)  # q_rot compared
    rope_axes.walk(probe, rope_axes.tables_rotation(probe, fn, 10000.0, 4), (Hq, Hk), 16)
    rope.tables_device_pass(probe, fn, (B, Hq, Hk, T), 16, 4)


# --- the contracts (helpers/contracts.py) ------------------------------------------------------------
# The generic axes compare with the float32 reference at small positions; the rotations' own axes (rope_axes:
# transposed views, gradients against float64, defaults, the tables handed over) and bfloat16 at positions up to
# 3999 (rope.expect_rotated, to the rounding each angle allows) walk what a flat tolerance cannot tell.
IN_BFLOAT16 = "rope's probes run bfloat16 q and k at positions up to 3999, to the rounding each angle allows, which a flat tolerance cannot tell"


def rope_table(which: int, width: str) -> Draw:
    """cos (which = 0) or sin (1) of rope_cache(width, L): tables a RoPE is handed, not random numbers."""
    return Draw(
        f"from rope_cache({width}, L)",
        lambda probe, sizes, dtype: reference.rope_cache(int(sizes[width]), int(sizes["L"]))[which].to(probe.device),
    )


def qk(width: str = "Dh") -> dict[str, Arg]:
    """q, k and the tables of apply_rope (width Dh) or apply_partial_rope (width r)."""
    return {
        "q": Arg("activations", "B Hq T Dh", dtypes=(torch.float32, torch.bfloat16), grad=True),
        "k": Arg("activations", "B Hk T Dh", dtypes=(torch.float32, torch.bfloat16), grad=True),
        "cos": Arg("table", f"L {width}", draw=rope_table(0, width)),
        "sin": Arg("table", f"L {width}", draw=rope_table(1, width)),
        "positions": Arg("positions", "B T", bound="L", default=None),
    }


ROTATED = (Result("B Hq T Dh", "q", name="q_rot"), Result("B Hk T Dh", "k", name="k_rot"))
HEADS = {"B": 2, "Hq": 4, "Hk": 2, "T": 5, "Dh": 8, "L": 12}
BASE = Arg("number", domain="> 1", default=10000.0, values=(10000.0, 500000.0))
CACHE_CONTRACT = Contract(
    args={"head_dim": Arg("size", "Dh"), "max_len": Arg("size", "L"), "base": BASE},
    result=(Result("L Dh", torch.float32, name="cos"), Result("L Dh", torch.float32, name="sin")),
    sizes={"Dh": 8, "L": 12},
    ones="L",
)
ROTATE_HALF_CONTRACT = Contract(
    args={"x": Arg("activations", "... Dh", dtypes=FLOATS, grad=True)},
    result=Result("... Dh", "x"),
    sizes={"...": "B H T", "B": 2, "H": 3, "T": 5, "Dh": 8},
    ones="B H T",
)
APPLY_ROPE_CONTRACT = Contract(
    args=qk(), result=ROTATED, sizes=HEADS, ones="B Hk T", not_walked={"dtypes": IN_BFLOAT16}
)
PARTIAL_CONTRACT = Contract(
    args=qk("r"), result=ROTATED, sizes={**HEADS, "r": 4}, ones="B Hk T", not_walked={"dtypes": IN_BFLOAT16}
)
INTERLEAVED_CONTRACT = Contract(  # Meta's view_as_complex refuses a view whose last axis is strided: not in the domain
    args={
        "x": Arg("activations", "B H T Dh", dtypes=(torch.float32, torch.bfloat16), grad=True, last_contiguous=True),
        "positions": Arg("positions", "T", bound="L", default=None),
        "base": BASE,
    },
    result=Result("B H T Dh", "x"),
    sizes={"B": 2, "H": 3, "T": 5, "Dh": 8, "L": 64},
    ones="B H T",
    not_walked={"dtypes": IN_BFLOAT16},
)
ROTARY_CONTRACT = Contract(
    init={"head_dim": Arg("size", "Dh"), "max_len": Arg("size", "L", default=2048), "base": BASE},
    args={name: arg for name, arg in qk().items() if name not in ("cos", "sin")},
    result=ROTATED,
    sizes=HEADS,
    ones="B Hk T",
    expected=lambda probe, module, head_dim, q, k, max_len=2048, base=10000.0, positions=None: reference.apply_rope(
        q, k, *reference.rope_cache(head_dim, max_len, base), positions
    ),
)

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
        no_device_pass=TAKES_NO_TENSOR,
        edges=("lengths",),
        contract=CACHE_CONTRACT,
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
        contract=ROTATE_HALF_CONTRACT,
    ),
    Exercise(
        id="apply_rope",
        advice=APPLY_ROPE_OWN_HELP,
        chapter=5,
        points=3,
        kind="function",
        reference=reference.apply_rope,
        check=check_apply_rope,
        oracle=oracle.apply_rope_in_llama,
        mistakes={
            "rope_interleaved_convention": apply_rope_interleaved,
            "rope_sign_flip": apply_rope_sign_flip,
            "rope_mixed_pairing": apply_rope_mixed_pairing,
            "rope_ignores_positions": apply_rope_ignores_positions,
            "positions_first_row": apply_rope_first_row_positions,
            "position_offset": apply_rope_position_offset,
            "argument_ignored": apply_rope_tables_ignored,
        },
        difficulty=2,
        importance=3,
        minutes=15,
        edges=("positions", "lengths"),
        contract=APPLY_ROPE_CONTRACT,
    ),
    Exercise(
        id="rope_interleaved",
        advice=INTERLEAVED_HELP,
        chapter=5,
        points=3,
        kind="function",
        reference=reference.rope_interleaved,
        check=check_rope_interleaved,
        oracle=oracle.interleaved_in_gptj,
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
        contract=INTERLEAVED_CONTRACT,
    ),
    Exercise(
        id="apply_partial_rope",
        advice=PARTIAL_HELP,
        chapter=5,
        points=2,
        kind="function",
        reference=reference.apply_partial_rope,
        check=check_apply_partial_rope,
        oracle=oracle.partial_rope_in_neox,
        mistakes={
            "partial_rope_whole_head": partial_whole_head,
            "partial_rope_pairs_across_head": partial_pairs_across_head,
            "partial_rope_last_dims": partial_last_dims,
            "partial_rope_pass_dropped": partial_pass_dropped,
            "partial_rope_width_guessed": partial_width_guessed,
            "rope_interleaved_convention": partial_interleaved,
            "rope_sign_flip": partial_sign_flip,
            "rope_mixed_pairing": partial_mixed_pairing,
            "rope_ignores_positions": partial_ignores_positions,
            "argument_ignored": partial_tables_ignored,
        },
        difficulty=2,
        importance=2,
        minutes=10,
        edges=("positions", "lengths"),
        contract=PARTIAL_CONTRACT,
    ),
    Exercise(
        id="RotaryEmbedding",
        advice=APPLY_ROPE_HELP,
        chapter=5,
        points=3,
        kind="module",
        reference=reference.RotaryEmbedding,
        check=check_rotary_embedding,
        oracle=oracle.rotary_module_in_llama,
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
        contract=ROTARY_CONTRACT,
    ),
    Exercise(
        id="rope_from_shift_matrix",
        advice=INTERLEAVED_HELP,
        chapter=5,
        points=2,
        kind="function",
        reference=reference.rope_from_shift_matrix,
        check=check_rope_from_shift_matrix,
        oracle=oracle.interleaved_in_gptj,
        mistakes={
            "rope_sign_flip": shift_matrix_not_transposed,
            "rope_ignores_positions": shift_matrix_ignores_positions,
            "wrong_base": shift_matrix_base_not_passed,
        },
        method_seen="that its result comes out of x times (d, d) matrices",
        difficulty=2,
        importance=1,
        minutes=15,
        edges=("positions", "lengths"),
        contract=INTERLEAVED_CONTRACT,
    ),
]
