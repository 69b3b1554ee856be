"""Chapter 07, long context: RoPE stretched past its training length.

Five functions, each returning `(inv_freq, attention_scale)` as transformers'
`modeling_rope_utils.ROPE_INIT_FUNCTIONS` do: position interpolation (Chen et al.
2023, the library's "linear"), NTK-aware scaling (bloc97 2023), dynamic NTK (the
library's "dynamic"), YaRN (Peng et al. 2023, "yarn") and Llama 3.1's bands
("llama3"). Their known mistakes live in helpers.exercises.long_context_mistakes.

The checks are plain function checks: arguments in, a tensor and a float out,
compared with the reference, and then, where the library has the method, with
transformers' own function on a real model's sizes (Llama 3.1, Qwen2.5, Code Llama).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypedDict

import torch

from helpers import library, reference
from helpers.contracts import Arg, Contract, Result
from helpers.exercises.long_context_mistakes import (
    dynamic_head_size_hard_coded,
    dynamic_scaled_within,
    dynamic_trained_length_hard_coded,
    dynamic_wrong_exponent,
    dynamic_wrong_scale,
    linear_factor_inverted,
    linear_wrong_exponent,
    llama3_band_factor_hard_coded,
    llama3_band_from_stretched_length,
    llama3_blend_linear_in_wavelength,
    llama3_factor_inverted,
    llama3_missing_middle_band,
    llama3_ramp_reversed,
    llama3_trained_length_hard_coded,
    llama3_without_two_pi,
    llama3_wrong_band_edges,
    ntk_factor_inverted,
    ntk_head_size_hard_coded,
    ntk_wrong_exponent,
    yarn_band_factor_hard_coded,
    yarn_band_from_stretched_length,
    yarn_edge_clamped_to_half,
    yarn_factor_inverted,
    yarn_missing_temperature,
    yarn_not_truncated,
    yarn_paper_ramp,
    yarn_ramp_reversed,
    yarn_trained_length_hard_coded,
    yarn_without_two_pi,
    yarn_wrong_band_edges,
    yarn_wrong_temperature,
)
from helpers.library import LibraryUnavailable
from helpers.probe import Check, Oracle, Probe, close, describe_difference
from helpers.registry import Exercise
from helpers.safety import Failure

# --- the probes -----------------------------------------------------------------------

RESULT_HINT = "transformers' RoPE functions return two things: the (d/2,) float32 tensor of θ_i, one per pair, which the model multiplies by the positions, and a Python float that it multiplies cos and sin by."
RESULT_FIX = "End with `return inv_freq, attention_scale`, inv_freq a torch float32 tensor of shape (d // 2,) and attention_scale a float such as 1.0."
HELP = {
    "wrong_shape": (
        "One θ per pair: a head of d dims has d/2 pairs. The library doubles the angles itself (cat(freqs, freqs)) when it builds cos and sin.",
        "Return the d // 2 frequencies only, `torch.arange(0, d, 2)` wide, not the table repeated for both halves.",
    ),
    "wrong_dtype": (
        "The model keeps inv_freq as a float32 buffer and multiplies float32 positions by it; transformers computes it in float32. "
        "A float64 tensor is a different dtype from what every RoPE function returns.",
        "Build it in float32 (`torch.arange(0, d, 2).float()`), or cast the result once at the end with `.float()`.",
    ),
    "wrong_values": (
        "Compare your θ_i with the formula for one small case by hand: d = 4 has two pairs, θ_0 = 1 and θ_1 = 1/√base, before any scaling.",
        "Print `1.0 / base ** (torch.arange(0, d, 2).float() / d)` next to your result for d = 4, then apply the method's change step by step.",
    ),
}


def unpack(probe: Probe, out: Any, call: str) -> tuple[torch.Tensor, float]:
    """(inv_freq, attention_scale) from a result, or wrong_type saying which part is not what the contract says."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        got = f"a {type(out).__name__}" + (f" of {len(out)} items" if isinstance(out, (tuple, list)) else "")
        probe.fail(
            "wrong_type",
            f"{call} returned {got}; the contract is a pair (inv_freq, attention_scale).",
            hint=RESULT_HINT,
            fix=RESULT_FIX,
        )
    inv_freq, scale = out
    if not isinstance(inv_freq, torch.Tensor):
        probe.fail(
            "wrong_type",
            f"The inv_freq of {call} is a {type(inv_freq).__name__}, not a torch.Tensor.",
            hint="The model registers inv_freq as a buffer and multiplies a tensor of positions by it: it must be a tensor, not a list or a NumPy array.",
            fix="Compute it with torch operations, or wrap it once at the end: `torch.tensor(values, dtype=torch.float32)`.",
        )
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        probe.fail(
            "wrong_type",
            f"The attention_scale of {call} is a {type(scale).__name__}, not a Python float.",
            hint="attention_scale is one number for the whole model (transformers stores it as the rotary embedding's attention_scaling); the contract is a plain float.",
            fix="Return a float: `1.0`, or `float(value)` of a tensor or NumPy number.",
        )
    return inv_freq, float(scale)


# Frequencies are compared relatively: the slow pairs of a base-500,000 head are below 1e-5, where an
# absolute tolerance would see nothing. float32 arithmetic written differently differs by a few ulps.
class Tolerance(TypedDict):
    rtol: float
    atol: float


FREQUENCY_TOLERANCE: Tolerance = {"rtol": 1e-5, "atol": 0.0}


def same_frequencies(out: torch.Tensor, expected: torch.Tensor) -> bool:
    return close(out, expected, **FREQUENCY_TOLERANCE)


def pair_zero_help(exercise_id: str, inv_freq: torch.Tensor, expected: torch.Tensor) -> tuple[str, str]:
    """The wrong_values hint and fix, read from the student's fastest pair: θ_0 tells interpolation
    (every pair slowed) from a raised base or a band method (θ_0 kept)."""
    if inv_freq.shape == expected.shape and inv_freq.numel() and bool((inv_freq < 0).any()):
        i = int((inv_freq < 0).nonzero()[0])
        return (
            f"Your θ_{i} is negative ({float(inv_freq[i]):.6g}): every method here only slows pairs down, to between θ_i / factor "
            "and θ_i, so a negative frequency comes from a blend weight outside 0 .. 1 (a ratio turned upside down, L/λ for λ/L, or not clamped).",
            "Print the blend weight of each pair next to your θ: it must lie in 0 .. 1, 0 where the pair is divided by the factor, 1 where it is kept.",
        )
    found, wanted = table_base(inv_freq), table_base(expected)
    if exercise_id == "ntk_scaling" and found is not None and wanted is not None and inv_freq.shape == expected.shape:
        return (
            f"Your frequencies are those of one base, {found:.6g}: a raised base, as NTK-aware scaling makes, but not the "
            f"one it makes here, base · factor^(d/(d-2)) = {wanted:.6g}. The exponent d/(d-2) belongs to the factor alone, "
            "and the base is multiplied by the result (a base raised to a power, or a factor added or multiplied outside "
            "the power, gives another base).",
            "`new_base = base * factor ** (d / (d - 2))`, then θ_i = 1 / new_base^(2i/d).",
        )
    if inv_freq.shape == expected.shape and inv_freq.numel() and expected.numel():
        mine, theirs = float(inv_freq[0]), float(expected[0])
        if math.isclose(mine, 1.0, rel_tol=1e-5) and not math.isclose(theirs, 1.0, rel_tol=1e-5):
            return (
                f"Your fastest pair is unchanged (θ_0 = 1): that is what a raised base does (NTK-aware), not "
                f"interpolation, which slows every pair, the fastest included (θ_0 = {theirs:.6g} here).",
                "Divide the plain θ_i = 1 / base^(2i/d) by the factor; leave the base as it is.",
            )
        if math.isclose(theirs, 1.0, rel_tol=1e-5) and not math.isclose(mine, 1.0, rel_tol=1e-5):
            moved = "slowed" if mine < 1 else "sped up" if mine > 1 else "changed"
            return (
                f"Your fastest pair is {moved} (θ_0 = {mine:.6g}, not 1): here {exercise_id} leaves pair 0 as it is, "
                "and changes only slower pairs. Follow pair 0 through your code: which step moves it (a division by the "
                "factor, a ramp or blend weight outside 0 .. 1, an edge left unclamped)?",
                "Leave θ_0 = 1 as it is, and change only the pairs the method names (for a raised base, the base's "
                "exponent 2i/d is 0 at i = 0).",
            )
    return HELP["wrong_values"]


def faces_of(probe: Probe, args: tuple) -> dict[str, list[tuple[torch.Tensor, float]]]:
    return {code: [f for f in faces if isinstance(f, tuple)] for code, faces in probe.known_mistakes(*args)().items()}


def compare(probe: Probe, out: Any, args: tuple, call: str) -> None:
    """The student's result for one call, against the reference and the catalogue. The
    frequencies and the attention scale are independent findings: both are reported."""
    inv_freq, scale = unpack(probe, out, call)
    expected, expected_scale = probe.exercise.reference(*args)
    faces = faces_of(probe, args)
    what = f"the inv_freq of {call}"

    def frequencies() -> None:
        if not same_frequencies(inv_freq, expected):
            probe.no_nan(inv_freq, expected, what)
            for code, found in faces.items():
                if any(same_frequencies(inv_freq, f[0]) for f in found):
                    difference = describe_difference(inv_freq, expected, "inv_freq", **FREQUENCY_TOLERANCE)
                    probe.fail(code, f"{probe.explain(code)} ({call}: {difference})")
            if inv_freq.shape == expected.shape:
                hint, fix = pair_zero_help(probe.exercise.id, inv_freq, expected)
                probe.expect(
                    inv_freq.to(expected.dtype), expected, what=what, hint=hint, fix=fix, **FREQUENCY_TOLERANCE
                )
            probe.fail(
                "wrong_shape",
                f"{what[0].upper()}{what[1:]} has shape {tuple(inv_freq.shape)}; expected {tuple(expected.shape)}, one θ per pair.",
                *HELP["wrong_shape"],
            )
        if inv_freq.dtype != torch.float32:
            probe.fail(
                "wrong_dtype",
                f"{what[0].upper()}{what[1:]} has the right values but dtype {inv_freq.dtype}; transformers' RoPE functions return float32.",
                *HELP["wrong_dtype"],
            )

    def attention_scale() -> None:
        if math.isnan(scale) or math.isinf(scale):
            probe.fail(
                "nan_or_inf",
                f"The attention_scale of {call} is {scale}.",
                "A scale of nan or inf multiplies every cos and sin: log of 0 or of a negative number, or a division by zero, on the way.",
                "Compute it from the factor only: 1.0 for these methods, `0.1 * math.log(factor) + 1.0` for YaRN.",
            )
        if math.isclose(scale, expected_scale, rel_tol=1e-6):
            return
        for code, found in faces.items():  # the faces whose scale is wrong: the temperature's mistakes
            if any(
                not math.isclose(f[1], expected_scale, rel_tol=1e-6) and math.isclose(scale, f[1], rel_tol=1e-6)
                for f in found
            ):
                probe.fail(
                    code,
                    f"{probe.explain(code)} ({call} returns attention_scale {scale:.6g}; expected {expected_scale:.6g}.)",
                )
        if expected_scale == 1.0:
            probe.fail(
                "unexpected_attention_scale",
                f"{call} returns attention_scale {scale:.6g}, but {probe.exercise.id} scales no attention: its attention_scale is 1.0 whatever the factor.",
                hint="Only YaRN (and LongRoPE) change the attention's temperature; interpolation, NTK-aware, dynamic NTK and Llama 3.1's scaling change the frequencies only.",
                fix="Return `1.0` as the second value: `return inv_freq, 1.0`.",
            )
        probe.fail(
            "wrong_values",
            f"{call} returns attention_scale {scale:.6g}; expected {expected_scale:.6g}.",
            "YaRN's scale is √(1/t) = 0.1·ln(s) + 1, a natural log, for s > 1.",
            "`0.1 * math.log(factor) + 1.0` for a factor above 1, else 1.0.",
        )

    probe.independent(frequencies, attention_scale)


# How each rope type's course arguments read as the library's: rope_init(rope_type, d, base, factor, original_max_len, seq_len, **extra)
LIBRARY_CALL: dict[str, Callable[..., tuple[Any, ...]]] = {
    "linear": lambda d, base, factor: (d, base, factor, 4096),  # "linear" has no trained length: any will do
    "dynamic": lambda d, base, factor, seq_len, original_max_len: (d, base, factor, original_max_len, seq_len),
    "yarn": lambda d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0: (
        d,
        base,
        factor,
        original_max_len,
        None,
        {"beta_fast": beta_fast, "beta_slow": beta_slow},
    ),
    "llama3": lambda d, base, factor, low, high, original_max_len: (
        d,
        base,
        factor,
        original_max_len,
        None,
        {"low_freq_factor": low, "high_freq_factor": high},
    ),
}


def library_result(rope_type: str, args: tuple) -> tuple[torch.Tensor, float]:
    d, base, factor, original_max_len, *rest = LIBRARY_CALL[rope_type](*args)
    seq_len, extra = (rest + [None, {}][len(rest) :])[:2]
    return library.rope_init(rope_type, d, base, factor, original_max_len, seq_len, **extra)


def against_library(probe: Probe, fn: Callable[..., Any], rope_type: str, cases: list[tuple]) -> None:
    """transformers' own ROPE_INIT_FUNCTIONS[rope_type], on a real model's sizes (each case is the
    course function's arguments). A library whose maths differ from the course's reference is not
    held against the student: said in one line, as is a version outside the tested range."""
    try:
        outside = library.outside_tested_range()
        theirs = [library_result(rope_type, args) for args in cases]
    except LibraryUnavailable as missing:
        probe.notes.append(f"(The comparison with transformers' own {rope_type!r} RoPE was skipped: {missing}.)")
        return
    version = library.transformers_version()
    for args, (their_inv, their_scale) in zip(cases, theirs):
        ours_inv, ours_scale = probe.exercise.reference(*args)
        if not (same_frequencies(ours_inv, their_inv) and math.isclose(ours_scale, their_scale, rel_tol=1e-6)):
            probe.notes.append(
                f"(transformers {version} computes {rope_type!r} differently from the versions the course was tested on: compared with the course's reference only.)"
            )
            return
        call = f"`{probe.exercise.id}({', '.join(repr(a) for a in args)})`"
        inv_freq, scale = unpack(probe, probe.call(fn, *args, what=call), call)
        if not (
            same_frequencies(inv_freq, their_inv)
            and inv_freq.dtype == torch.float32
            and math.isclose(scale, their_scale, rel_tol=1e-6)
        ):
            difference = (
                describe_difference(inv_freq, their_inv, "its inv_freq", **FREQUENCY_TOLERANCE)
                if inv_freq.shape == their_inv.shape
                else f"its inv_freq has shape {tuple(inv_freq.shape)}"
            )
            probe.fail(
                "library_mismatch",
                f"{call}, a real model's sizes, gives other values than transformers {version}'s own {rope_type!r} RoPE: {difference} "
                f"Its attention_scale is {scale:.6g}, the library's {their_scale:.6g}. Your code passed the small cases.",
                hint="On d = 128 and a trained length in the thousands something happens that small cases do not show: an edge clamped, a band empty, an integer division, float32 running out of digits.",
                fix=f"Call `transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[{rope_type!r}]` on a LlamaConfig with these numbers and print it next to your result.",
            )
    if outside:
        probe.notes.append(f"(Compared with transformers' own {rope_type!r} RoPE: {outside}.)")


def library_oracle(rope_type: str, cases: list[tuple]) -> Oracle:
    """An exercise's second oracle: its code against transformers' own `rope_type`, on these cases."""
    return lambda probe, fn: against_library(probe, fn, rope_type, cases)


def scaling_check(cases: list[tuple]) -> Check:
    """The check of a function exercise: every case against the reference and the catalogue."""

    def check(fn: Callable[..., Any], probe: Probe) -> None:
        for args in cases:
            call = f"`{probe.exercise.id}({', '.join(repr(a) for a in args)})`"
            compare(probe, probe.call(fn, *args, what=call), args, call)

    return check


def check_dynamic(fn: Callable[..., Any], probe: Probe) -> None:
    """seq_len up to the trained length (T = 1 is an edge), where nothing may change, and past it:
    two independent aspects, so that a mistake on each side is named by its own code."""
    cases = [
        (8, 10000.0, 2.0, 10, 16),
        (8, 10000.0, 4.0, 1, 16),
        (16, 10000.0, 4.0, 16, 16),
        (16, 10000.0, 2.0, 10000, 3000),  # first past L: longer than every length public code hard-codes
        (16, 10000.0, 2.0, 40, 16),
        (64, 500000.0, 8.0, 100, 32),
        (32, 10000.0, 4.0, 17, 16),
    ]

    def run(within: bool) -> None:
        for d, base, factor, seq_len, original in cases:
            if (seq_len <= original) != within:
                continue
            call = f"`dynamic_ntk_scaling({d}, {base}, {factor}, seq_len={seq_len}, original_max_len={original})`"
            out = probe.call(fn, d, base, factor, probe.length(seq_len), original, what=call)
            try:
                compare(probe, out, (d, base, factor, seq_len, original), call)
            except Failure as failure:
                if within and failure.code == "wrong_values" and rescaled_base(out, d, base) is not None:
                    probe.fail(
                        "scaled_within_original_length",
                        f"{probe.explain('scaled_within_original_length')} ({call}: your frequencies are those of "
                        f"base {rescaled_base(out, d, base):.6g}, not {base:g})",
                    )
                raise

    probe.independent(lambda: run(within=True), lambda: run(within=False))


YARN_CASES: list[tuple[Any, ...]] = [
    (32, 10000.0, 4.0, 64),
    (64, 10000.0, 4.0, 512),
    (32, 500000.0, 4.0, 256, 16.0, 2.0),
    (16, 10000.0, 1.0, 128),
    (16, 10000.0, 4.0, 100000),  # i(beta_slow) = 8.4 > d/2: the slow edge past the middle of the head
    (16, 10000.0, 4.0, 4),  # L = 4: both edges clamp to pair 0, low == high (the library's guard)
]


def yarn_edges(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> tuple[int, int]:
    """The band edges as transformers computes them (truncated outward, clamped), before its guard."""
    pair_with = lambda turns: d * math.log(original_max_len / (2 * math.pi * turns)) / (2 * math.log(base))
    return max(math.floor(pair_with(beta_fast)), 0), min(math.ceil(pair_with(beta_slow)), d - 1)


def right_with_betas(probe: Probe, fn: Callable[..., Any], args: tuple) -> bool:
    """Whether fn gives the right result for `args` with YaRN's default betas passed explicitly."""
    given, also = (*args, 32.0, 1.0), list(probe.also)
    try:
        compare(probe, probe.call(fn, *given), given, f"`yarn_scaling{given}`")
    except Failure:
        return False
    finally:
        probe.also[:] = also  # a finding of this trial call is no finding of the check's
    return True


def check_yarn(fn: Callable[..., Any], probe: Probe) -> None:
    """scaling_check's cases, factor >= 1 only; where the edges meet, a NaN or a ZeroDivisionError is the missing guard."""
    for args in YARN_CASES:
        call = f"`yarn_scaling({', '.join(repr(a) for a in args)})`"
        try:
            compare(probe, probe.call(fn, *args, what=call), args, call)
        except Failure as failure:
            if len(args) == 4 and failure.code not in ("raised", "timeout") and right_with_betas(probe, fn, args):
                probe.fail(
                    "default_changed",
                    f"{call}, which leaves beta_fast and beta_slow at their defaults, gives another result than with "
                    "beta_fast=32.0, beta_slow=1.0 passed, which is right: your defaults are other numbers than the exercise's.",
                    hint="A default is part of the interface: a config that sets only factor and original_max_position_embeddings "
                    "(as most YaRN configs do) counts on beta_fast 32 and beta_slow 1, the paper's values for LLaMA and transformers' defaults.",
                    fix="Write the signature as the exercise gives it: `beta_fast: float = 32.0, beta_slow: float = 1.0`.",
                )
            low, high = yarn_edges(*args)
            broke = failure.code == "nan_or_inf" or (
                failure.code == "raised" and "ZeroDivisionError" in failure.message
            )
            if low == high and broke:
                probe.fail(
                    failure.code,
                    f"{failure.message.rstrip('.')}. There both band edges land on pair {low} "
                    + (
                        f"(L = {args[3]} is so short that even pair 0 turns fewer than beta_slow times), "
                        if low == 0
                        else "(both clamped to the last index), "
                    )
                    + "so the ramp (i - low) / (high - low) divides by zero.",
                    hint="transformers' linear_ramp_factor, like the YaRN authors' code, moves the slow edge by 0.001 when the two edges meet, "
                    "after they are rounded and clamped: then every pair from the edge on is interpolated and none divides by zero.",
                    fix="After `low = max(math.floor(low), 0)` and `high = min(math.ceil(high), d - 1)`: `if low == high: high += 0.001`.",
                )
            raise


def table_base(inv_freq: torch.Tensor) -> float | None:
    """The base b of a RoPE table θ_i = b^(-2i/d), d = 2 · len(inv_freq), that `inv_freq` is; None if it is none."""
    if inv_freq.dim() != 1 or len(inv_freq) < 2 or not bool((inv_freq > 0).all()):
        return None
    logs = inv_freq.detach().double().cpu().log()
    slope = float(logs[1] - logs[0])  # -2 ln(b) / d
    if not torch.allclose(logs, torch.arange(len(logs), dtype=torch.float64) * slope, atol=1e-4):
        return None
    return math.exp(-slope * len(logs))


def rescaled_base(out: Any, d: int, base: float) -> float | None:
    """The base of a RoPE table θ_i = base'^(-2i/d) that `out`'s inv_freq is, when base' is not
    `base`: a dynamic scaling applied where it must not be. None for anything else."""
    inv_freq = out[0] if isinstance(out, (tuple, list)) and out else None
    if not isinstance(inv_freq, torch.Tensor) or inv_freq.shape != (d // 2,) or d < 4 or not bool((inv_freq > 0).all()):
        return None
    logs = inv_freq.detach().double().log()
    slope = float(logs[1] - logs[0])  # -2 ln(base') / d
    table = torch.arange(d // 2, dtype=torch.float64) * slope
    found = math.exp(-slope * d / 2)
    if not torch.allclose(logs, table, atol=1e-4) or math.isclose(found, base, rel_tol=1e-4):
        return None
    return found


# --- the contracts (helpers/contracts.py) ------------------------------------------------------------
# No tensor goes in, so the axes that apply are `varied` (each number changed, on the sizes above) and, for
# YaRN's betas, `defaults`. Every value lies in the method's domain: a factor >= 1 (transformers' validator
# warns below it; DeepSeek-V3's code scales only when extending), a base above 1, a trained length >= 1.
SCALED = (Result("d/2", torch.float32, name="inv_freq"), Result("", float, name="attention_scale"))
HEAD = {"d": Arg("size", "d"), "base": Arg("number", domain="> 1", values=(10000.0, 500000.0))}
FACTOR = Arg("number", domain=">= 1", values=(4.0, 1.0, 16.0))
TRAINED = Arg("number", domain=">= 1", values=(64, 4096))
SCALING_CONTRACT = Contract(args={**HEAD, "factor": FACTOR}, result=SCALED, sizes={"d": 32})
DYNAMIC_CONTRACT = Contract(
    args={
        **HEAD,
        "factor": FACTOR,
        "seq_len": Arg("number", domain=">= 1", values=(100, 10, 64)),  # past, within and at the trained length
        "original_max_len": Arg("number", domain=">= 1", values=(64, 16)),
    },
    result=SCALED,
    sizes={"d": 32},
)
YARN_CONTRACT = Contract(
    args={
        **HEAD,
        "factor": FACTOR,
        "original_max_len": TRAINED,
        "beta_fast": Arg("number", domain="> 0", default=32.0, values=(32.0, 16.0)),
        "beta_slow": Arg("number", domain="> 0", default=1.0, values=(1.0, 2.0)),
    },
    result=SCALED,
    sizes={"d": 32},
)
LLAMA3_CONTRACT = Contract(
    args={
        **HEAD,
        "factor": FACTOR,
        "low_freq_factor": Arg("number", domain="> 0", values=(1.0, 2.0)),  # each below every high_freq_factor here
        "high_freq_factor": Arg("number", domain="> 0", values=(4.0, 8.0)),
        "original_max_len": Arg("number", domain=">= 1", values=(128, 8192)),
    },
    result=SCALED,
    sizes={"d": 32},
)

NO_TENSOR_IN = "it takes no tensor: its result is made on the CPU, as transformers' own RoPE functions make theirs, and the model moves it with its buffers"

EXERCISES = [
    Exercise(
        id="linear_scaling",
        chapter=7,
        points=1,
        kind="function",
        reference=reference.linear_scaling,
        check=scaling_check([(8, 10000.0, 4.0), (16, 500000.0, 2.5), (2, 10000.0, 8.0)]),
        oracle=library_oracle("linear", [(128, 10000.0, 4.0), (128, 500000.0, 8.0)]),
        mistakes={"factor_inverted": linear_factor_inverted, "wrong_exponent": linear_wrong_exponent},
        difficulty=1,
        importance=3,
        minutes=5,
        no_device_pass=NO_TENSOR_IN,
        contract=SCALING_CONTRACT,
    ),
    Exercise(
        id="ntk_scaling",
        chapter=7,
        points=1,
        kind="function",
        reference=reference.ntk_scaling,
        check=scaling_check([(8, 10000.0, 4.0), (16, 1000000.0, 2.0), (64, 10000.0, 8.0)]),
        mistakes={
            "ntk_wrong_exponent": ntk_wrong_exponent,
            "factor_inverted": ntk_factor_inverted,
            "head_size_hard_coded": ntk_head_size_hard_coded,
        },
        difficulty=1,
        importance=2,
        minutes=5,
        no_device_pass=NO_TENSOR_IN,
        contract=SCALING_CONTRACT,
    ),
    Exercise(
        id="dynamic_ntk_scaling",
        chapter=7,
        points=2,
        kind="function",
        reference=reference.dynamic_ntk_scaling,
        check=check_dynamic,
        # Code Llama's sizes (base 1e6, 16384 trained) run at 40000 tokens; a Llama 2 (4096 trained) at 6000
        oracle=library_oracle("dynamic", [(128, 1000000.0, 2.0, 40000, 16384), (128, 10000.0, 4.0, 6000, 4096)]),
        mistakes={
            "scaled_within_original_length": dynamic_scaled_within,
            "dynamic_wrong_scale": dynamic_wrong_scale,
            "ntk_wrong_exponent": dynamic_wrong_exponent,
            "head_size_hard_coded": dynamic_head_size_hard_coded,
            "trained_length_hard_coded": dynamic_trained_length_hard_coded,
        },
        difficulty=2,
        importance=2,
        minutes=10,
        no_device_pass=NO_TENSOR_IN,
        contract=DYNAMIC_CONTRACT,
        edges=("lengths",),
    ),
    Exercise(
        id="yarn_scaling",
        chapter=7,
        points=3,
        kind="function",
        reference=reference.yarn_scaling,
        # Only factor >= 1, the method's domain (transformers' validator warns below it; DeepSeek-V3's code
        # scales only when extending): a factor under 1 defines nothing to check (issue 41).
        check=check_yarn,
        # Llama 2 at 64k (Peng et al.'s YaRN 64k model: d 128, 4096 trained, s 16), Qwen2.5's YaRN (base 1e6,
        # 32768 trained, s 4), and a Llama 2 head trained on 65,536 tokens, whose slow edge passes pair 63
        oracle=library_oracle(
            "yarn", [(128, 10000.0, 16.0, 4096), (128, 1000000.0, 4.0, 32768), (128, 10000.0, 4.0, 65536)]
        ),
        mistakes={
            "ramp_reversed": yarn_ramp_reversed,
            "wavelength_without_2pi": yarn_without_two_pi,
            "wrong_band_edges": yarn_wrong_band_edges,
            "yarn_not_truncated": yarn_not_truncated,
            "factor_inverted": yarn_factor_inverted,
            "missing_temperature": yarn_missing_temperature,
            "wrong_temperature": yarn_wrong_temperature,
            "yarn_edge_clamped_to_half": yarn_edge_clamped_to_half,
            "paper_ramp": yarn_paper_ramp,
            "band_factor_hard_coded": yarn_band_factor_hard_coded,
            "trained_length_hard_coded": yarn_trained_length_hard_coded,
            "band_from_stretched_length": yarn_band_from_stretched_length,
        },
        difficulty=2,
        importance=3,
        minutes=15,
        no_device_pass=NO_TENSOR_IN,
        contract=YARN_CONTRACT,
    ),
    Exercise(
        id="llama3_scaling",
        chapter=7,
        points=2,
        kind="function",
        reference=reference.llama3_scaling,
        check=scaling_check(
            [
                (32, 10000.0, 8.0, 2.0, 8.0, 128),  # first: band factors other than 1 and 4 tell the edges apart
                (16, 10000.0, 4.0, 1.0, 4.0, 64),
                (64, 500000.0, 8.0, 1.0, 4.0, 8192),
                (32, 500000.0, 16.0, 1.0, 1.0, 256),  # Llama 4 Scout's equal band factors: no middle band
            ]
        ),
        # Llama 3.1's own numbers (d 128, base 500000, s 8, bands 1 and 4, 8192 trained), and Llama 3.2's s 32
        oracle=library_oracle("llama3", [(128, 500000.0, 8.0, 1.0, 4.0, 8192), (128, 500000.0, 32.0, 1.0, 4.0, 8192)]),
        mistakes={
            "wavelength_without_2pi": llama3_without_two_pi,
            "missing_middle_band": llama3_missing_middle_band,
            "blend_linear_in_wavelength": llama3_blend_linear_in_wavelength,
            "wrong_band_edges": llama3_wrong_band_edges,
            "ramp_reversed": llama3_ramp_reversed,
            "factor_inverted": llama3_factor_inverted,
            "band_factor_hard_coded": llama3_band_factor_hard_coded,
            "trained_length_hard_coded": llama3_trained_length_hard_coded,
            "band_from_stretched_length": llama3_band_from_stretched_length,
        },
        difficulty=2,
        importance=3,
        minutes=15,
        no_device_pass=NO_TENSOR_IN,
        contract=LLAMA3_CONTRACT,
    ),
]
