"""Chapter 07, long context: RoPE stretched past its training length.

Five functions, each returning `(inv_freq, attention_scale)` as transformers'
`modeling_rope_utils.ROPE_INIT_FUNCTIONS` do: position interpolation (Chen et al.
2023, the library's "linear"), NTK-aware scaling (bloc97 2023), dynamic NTK (the
library's "dynamic"), YaRN (Peng et al. 2023, "yarn") and Llama 3.1's bands
("llama3"). Each mistake takes its exercise's arguments and returns what the
mistaken code returns, one `(inv_freq, attention_scale)` or a list of them (its faces).

The checks are plain function checks: arguments in, a tensor and a float out,
compared with the reference, and then, where the library has the method, with
transformers' own function on a real model's sizes (Llama 3.1, Qwen2.5, Code Llama).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from helpers import library, reference
from helpers.contracts import Arg, Contract, Result
from helpers.library import LibraryUnavailable
from helpers.probe import Check, Oracle, Probe, close, describe_difference
from helpers.registry import Exercise
from helpers.safety import Failure

theta_of = reference.rope_inv_freq  # θ_i = 1 / base^(2i/d), float32


# --- known mistakes -------------------------------------------------------------------
# Written as the slips are made: one line each, on top of the right computation.

FACTOR_INVERTED = """Your frequencies are multiplied by the factor where they should be
divided: the pairs turn faster, not slower, so a long sequence reaches angles even
further from those met in training.

Hint: Interpolation squeezes the positions: position m is read as m / factor, so that
factor × L positions land inside the trained range 0 .. L. Since the angle is m·θ,
reading m / factor is the same as turning by θ / factor.

Fix: Divide: `theta / factor` (and a larger base for NTK-aware scaling,
base · factor^(d/(d-2)), never a smaller one)."""


Scaled = tuple[torch.Tensor, float]  # what each exercise and each of its mistakes returns: (inv_freq, attention_scale)


def linear_factor_inverted(d: int, base: float, factor: float) -> Scaled:
    return theta_of(d, base) * factor, 1.0


linear_factor_inverted.__doc__ = FACTOR_INVERTED


def linear_wrong_exponent(d: int, base: float, factor: float) -> list[Scaled]:
    """Your frequencies before scaling are off: θ_i is not 1 / base^(2i/d)
    (an exponent i/d, or 2i over d/2).

    Hint: The pairs are (0, 1), (2, 3), ... or i = 0 .. d/2 - 1 with exponent 2i/d:
    the slowest pair's θ is base^(-(d-2)/d), just above 1/base. Print your θ for d = 4.

    Fix: `1.0 / base ** (torch.arange(0, d, 2).float() / d)`, then divide by the factor."""
    i = torch.arange(d // 2, dtype=torch.float32)
    return [(base ** (-i / d) / factor, 1.0), (base ** (-4 * i / d) / factor, 1.0)]


def ntk_factor_inverted(d: int, base: float, factor: float) -> Scaled:
    return theta_of(d, base / factor ** (d / (d - 2))), 1.0


ntk_factor_inverted.__doc__ = FACTOR_INVERTED


def _ntk_bases(d: int, base: float, factor: float) -> list[float]:
    """The exponents people write instead of d/(d-2): 1, (d-2)/d, d/(d-1), 2/d."""
    return [base * factor, base * factor ** ((d - 2) / d), base * factor ** (d / (d - 1)), base * factor ** (2 / d)]


HEAD_SIZE_HARD_CODED = """Your exponent is a constant that is right for one head size only: d/(d-2) is 64/63
for d = 128 (Llama's heads) and 32/31 for d = 64, but this call has another d.

Hint: public code often writes the exponent for the model it was written for. The exponent
makes the slowest pair, i = d/2 - 1, slow down by exactly the factor, so it depends on the
head dimension of the model that runs it: a head of 8 dims needs 8/6.

Fix: Compute it from the argument: `factor ** (d / (d - 2))`."""


def _one_head_size(d: int) -> list[float]:
    """The exponents d/(d-2) of Llama's head sizes, written as constants: those that are wrong for this d."""
    return [e for e in (64 / 63, 32 / 31) if not math.isclose(e, d / (d - 2))]


def ntk_head_size_hard_coded(d: int, base: float, factor: float) -> list[Scaled]:
    return [(theta_of(d, base * factor**e), 1.0) for e in _one_head_size(d)]


ntk_head_size_hard_coded.__doc__ = HEAD_SIZE_HARD_CODED


def ntk_wrong_exponent(d: int, base: float, factor: float) -> list[Scaled]:
    """Your new base is raised by the factor to the wrong power: NTK-aware scaling
    uses base' = base · factor^(d/(d-2)).

    Hint: The exponent is chosen so that the slowest pair, i = d/2 - 1, is slowed down by
    exactly the factor: θ' = base'^(-(d-2)/d) must equal base^(-(d-2)/d) / factor. Solve
    that for base'. (base · factor alone slows that pair by factor^((d-2)/d) only.)

    Fix: `new_base = base * factor ** (d / (d - 2))`, then θ_i = 1 / new_base^(2i/d)."""
    return [(theta_of(d, b), 1.0) for b in _ntk_bases(d, base, factor)]


def dynamic_scaled_within(d: int, base: float, factor: float, seq_len: int, original_max_len: int) -> list[Scaled]:
    """Your dynamic scaling changes the frequencies although seq_len is at or below
    original_max_len: there the model must run exactly as it was trained.

    Hint: Dynamic NTK starts from the trained length: its factor, factor·T/L - (factor - 1),
    is 1 at T = L and only grows past it. transformers first raises seq_len to at least
    the trained length (max_position_embeddings), so that shorter sequences use the
    original θ.

    Fix: Start with `seq_len = max(seq_len, original_max_len)` before the new base is computed."""
    grown = factor * seq_len / original_max_len - (factor - 1)
    # the static factor whatever the length; no clamp: a smaller base below L (complex where grown < 0, as the slip makes it)
    return [(theta_of(d, base * factor ** (d / (d - 2))), 1.0), (theta_of(d, base * grown ** (d / (d - 2))), 1.0)]


def dynamic_wrong_scale(d: int, base: float, factor: float, seq_len: int, original_max_len: int) -> list[Scaled] | None:
    """Past original_max_len your dynamic scaling uses another factor than transformers'
    factor·seq_len/original_max_len - (factor - 1).

    Hint: the factor grows in a straight line from 1 at the trained length L, with slope
    factor / L: at T = 2L it is factor + 1. Other schedules exist, and this exercise asks for
    transformers' one: the YaRN paper's Dynamic Scaling, s = max(1, T/L), is this formula with
    factor = 1; Qwen's dynamic NTK rounds the ratio up to a power of two (2^ceil(log2(T/L) + 1) - 1);
    factor·T/L is already factor at T = L; a floor division makes the factor jump in whole steps.

    Fix: For seq_len above original_max_len, `grown = factor * seq_len / original_max_len - (factor - 1)`
    in float division, and `new_base = base * grown ** (d / (d - 2))`."""
    if seq_len <= original_max_len:
        return None
    ratio = seq_len / original_max_len
    schedules = (
        ratio,  # the YaRN paper's Dynamic Scaling (HF's with factor 1)
        factor * ratio,
        factor,
        2 ** math.ceil(math.log2(ratio) + 1) - 1,  # Qwen (1)'s dynamic NTK
        factor * seq_len // original_max_len - (factor - 1),  # floor division
    )
    return [(theta_of(d, base * g ** (d / (d - 2))), 1.0) for g in schedules if g > 0]


def dynamic_wrong_exponent(d: int, base: float, factor: float, seq_len: int, original_max_len: int) -> list[Scaled]:
    seq_len = max(seq_len, original_max_len)
    grown = factor * seq_len / original_max_len - (factor - 1)
    return [(theta_of(d, b), 1.0) for b in _ntk_bases(d, base, grown)]


dynamic_wrong_exponent.__doc__ = ntk_wrong_exponent.__doc__


def dynamic_head_size_hard_coded(
    d: int, base: float, factor: float, seq_len: int, original_max_len: int
) -> list[Scaled]:
    grown = factor * max(seq_len, original_max_len) / original_max_len - (factor - 1)
    return [(theta_of(d, base * grown**e), 1.0) for e in _one_head_size(d)]


dynamic_head_size_hard_coded.__doc__ = HEAD_SIZE_HARD_CODED

# The trained lengths public code writes as constants: Llama 2's, Llama 3's, Qwen2.5's and a 2k model's
KNOWN_LENGTHS = (2048, 4096, 8192, 32768)

TRAINED_LENGTH_HARD_CODED = """Your code does not use the original_max_len it is given: its result is that of a
constant trained length (2048, 4096, 8192 or 32768, the lengths of well-known models).

Hint: the trained length is the model's, and the same function serves every model: Llama 2 was
trained on 4,096 tokens, Llama 3 on 8,192, the tiny model of this chapter on 32. Which line of
yours reads a number instead of the argument?

Fix: Use `original_max_len` wherever the trained length appears (the band edges, the blend, the
length ratio)."""


def dynamic_trained_length_hard_coded(
    d: int, base: float, factor: float, seq_len: int, original_max_len: int
) -> list[Scaled]:
    """Only the constants below seq_len: a constant above it leaves θ unchanged, which is no scaling at all."""
    return [
        reference.dynamic_ntk_scaling(d, base, factor, seq_len, L)
        for L in KNOWN_LENGTHS
        if L != original_max_len and L < seq_len
    ]


dynamic_trained_length_hard_coded.__doc__ = TRAINED_LENGTH_HARD_CODED


def _yarn(
    d: int,
    base: float,
    factor: float,
    original_max_len: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    *,
    two_pi: bool = True,
    truncate: bool = True,
    reverse: bool = False,
    inverted: bool = False,
    edges: tuple[float, float] | None = None,
    last: int | None = None,
    nearest: bool = False,
) -> torch.Tensor:
    """YaRN's inv_freq with one slip: no 2π, no truncation, the ramp reversed, θ·s, other edges, or the
    slow edge clamped to `last` instead of d - 1."""
    turn = 2 * math.pi if two_pi else 1.0

    def pair_with(turns: float) -> float:
        return d * math.log(original_max_len / (turns * turn)) / (2 * math.log(base))

    low, high = (pair_with(beta_fast), pair_with(beta_slow)) if edges is None else edges
    if nearest:
        low, high = round(low), round(high)
    elif truncate and edges is None:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1 if last is None else last)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    if reverse:
        ramp = 1 - ramp
    theta = theta_of(d, base)
    slow = theta * factor if inverted else theta / factor
    return slow * ramp + theta * (1 - ramp)


def temperature(factor: float) -> float:
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def yarn_ramp_reversed(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Scaled:
    """Your ramp goes the wrong way: the fast pairs (many turns within the trained
    length) are interpolated, and the slow ones kept as they were.

    Hint: A pair that turns beta_fast = 32 times or more within L met every angle in
    training: YaRN leaves it alone. A pair that turns less than beta_slow = 1 time meets
    new angles past L: that one is interpolated, θ / s. The ramp over the pair index goes
    from 0 (keep) at the fast edge to 1 (interpolate) at the slow edge.

    Fix: Blend as `theta / factor * ramp + theta * (1 - ramp)` with
    `ramp = ((i - low) / (high - low)).clamp(0, 1)`, i the pair index: 0 below low, 1 above high."""
    return _yarn(d, base, factor, original_max_len, beta_fast, beta_slow, reverse=True), temperature(factor)


def yarn_without_two_pi(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Scaled:
    """Your band edges are computed without 2π: a pair's wavelength is 2π/θ_i tokens,
    not 1/θ_i, so your edges sit on the wrong pairs.

    Hint: beta counts turns: pair i makes L·θ_i / (2π) turns within L. Setting that equal
    to beta and solving for i gives d·ln(L / (2π·beta)) / (2·ln(base)).

    Fix: Put the 2π in the edge formula: `d * math.log(L / (beta * 2 * math.pi)) / (2 * math.log(base))`."""
    return _yarn(d, base, factor, original_max_len, beta_fast, beta_slow, two_pi=False), temperature(factor)


def _band_edges_yarn(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float, beta_slow: float
) -> list[Scaled]:
    return [
        (_yarn(d, base, factor, original_max_len, beta_slow, beta_fast), temperature(factor)),  # the betas swapped
        (
            _yarn(d, base, factor, original_max_len, beta_fast, beta_slow, edges=(beta_fast, beta_slow)),
            temperature(factor),
        ),  # the betas as pair indices
    ]


WRONG_BAND_EDGES = """Your band edges are not where YaRN puts them: the pairs that are kept, ramped
and interpolated are not the right ones (the betas swapped, or used as pair indices).

Hint: the edges are pair indices, found from turns: the fast edge is the pair that makes
beta_fast (32) turns within L, the slow edge the pair that makes beta_slow (1). Fast pairs have
low indices, so the fast edge is the lower one.

Fix: `low` from beta_fast and `high` from beta_slow, each through
`d * math.log(original_max_len / (2 * math.pi * beta)) / (2 * math.log(base))`."""


def yarn_wrong_band_edges(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> list[Scaled]:
    return _band_edges_yarn(d, base, factor, original_max_len, beta_fast, beta_slow)


yarn_wrong_band_edges.__doc__ = WRONG_BAND_EDGES


def yarn_edge_clamped_to_half(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> list[Scaled]:
    """Your slow band edge is clamped to the last pair, d/2 - 1 (or d/2); transformers and the
    YaRN authors' code clamp it to d - 1. The two differ only when the trained length is so
    long that even i(beta_slow), the pair that makes one turn within L, lies past the middle of
    the head: then the library's ramp never reaches 1, and its slowest pairs are only partly
    interpolated (a head of Llama 2's size, d = 128 and base 10,000, trained on 65,536 tokens:
    its last pair slowed 3.23 times at s = 4, not 4).

    Hint: the clamp to d - 1 looks like a slip (d - 1 counts dimensions, not pairs), but it is
    what the library computes, and so what a model whose config says "yarn" runs with. The
    exercise reproduces the library.

    Fix: `high = min(math.ceil(high), d - 1)`, as `find_correction_range` does."""
    return [
        (_yarn(d, base, factor, original_max_len, beta_fast, beta_slow, last=last), temperature(factor))
        for last in (d // 2 - 1, d // 2)
    ]


def yarn_paper_ramp(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Scaled:
    """Your ramp is the YaRN paper's γ(r): linear in the number of turns r = L/λ between
    beta_slow and beta_fast. transformers' "yarn" (like the authors' own code) ramps linearly
    over the pair index instead, between the rounded edges i(beta_fast) and i(beta_slow); since
    r falls exponentially with the index, the two ramps give different blends in the band.

    Hint: both keep the pairs above beta_fast turns and interpolate those below beta_slow; they
    differ only in between. The exercise asks for the library's ramp, over the pair index.
    (Llama 3.1's bands are the paper's γ(r), with α = 1 and β = 4.)

    Fix: `ramp = ((torch.arange(d // 2).float() - low) / (high - low)).clamp(0, 1)`, with `low` and
    `high` the pair indices where a pair makes beta_fast and beta_slow turns within L, rounded outward."""
    theta = theta_of(d, base)
    turns = original_max_len * theta / (2 * math.pi)
    gamma = ((turns - beta_slow) / (beta_fast - beta_slow)).clamp(0, 1)  # 1: keep, 0: interpolate
    return theta / factor * (1 - gamma) + theta * gamma, temperature(factor)


BAND_FACTOR_HARD_CODED = """Your code does not use the band parameters it is given: its result is that of the
defaults written as constants (YaRN's beta_fast 32 and beta_slow 1, Llama 3.1's
low_freq_factor 1 and high_freq_factor 4).

Hint: those numbers are one model's choice (Llama 3.1's, and YaRN's for LLaMA), not part of the
method: Llama 3.2 and other configs pass the same fields, and the exercise's arguments carry them.

Fix: Read the edges from the arguments: `beta_fast` and `beta_slow` for YaRN, `low_freq_factor` and
`high_freq_factor` for Llama 3.1."""


def yarn_band_factor_hard_coded(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Scaled:
    return _yarn(d, base, factor, original_max_len), temperature(factor)


yarn_band_factor_hard_coded.__doc__ = BAND_FACTOR_HARD_CODED


def yarn_trained_length_hard_coded(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> list[Scaled]:
    return [
        (_yarn(d, base, factor, L, beta_fast, beta_slow), temperature(factor))
        for L in KNOWN_LENGTHS
        if L != original_max_len
    ]


yarn_trained_length_hard_coded.__doc__ = TRAINED_LENGTH_HARD_CODED

BAND_FROM_STRETCHED_LENGTH = """Your bands are computed from the stretched length, factor × original_max_len (what a
config calls max_position_embeddings), not from the trained length.

Hint: a pair is kept or interpolated according to how many turns it made in *training*, within
the original L: that is what the model has seen. The length it will run at decides the factor,
not the bands.

Fix: Use `original_max_len` in the band edges (and, for Llama 3.1, in the blend), never
`factor * original_max_len`."""


def yarn_band_from_stretched_length(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Scaled:
    return _yarn(d, base, factor, original_max_len * factor, beta_fast, beta_slow), temperature(factor)


yarn_band_from_stretched_length.__doc__ = BAND_FROM_STRETCHED_LENGTH


def yarn_not_truncated(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> list[Scaled]:
    """Your band edges are not rounded outward to whole pairs (left fractional, or rounded to the
    nearest pair): transformers (truncate=True, its default, as in the YaRN authors' code) rounds
    the fast edge down and the slow edge up.

    Hint: The edges are rounded away from the band: the fast edge down to the pair below,
    the slow edge up to the pair above, before they are clamped to 0 and d - 1. (A config
    may set truncate=False; this exercise follows the default.)

    Fix: `low = max(math.floor(low), 0)` and `high = min(math.ceil(high), d - 1)`."""
    return [
        (_yarn(d, base, factor, original_max_len, beta_fast, beta_slow, truncate=False), temperature(factor)),
        (_yarn(d, base, factor, original_max_len, beta_fast, beta_slow, nearest=True), temperature(factor)),
    ]


def yarn_factor_inverted(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Scaled:
    return _yarn(d, base, factor, original_max_len, beta_fast, beta_slow, inverted=True), temperature(factor)


yarn_factor_inverted.__doc__ = FACTOR_INVERTED


def yarn_missing_temperature(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Scaled:
    """Your frequencies are right but your attention_scale is 1.0: YaRN's temperature is
    missing.

    Hint: Stretched positions make attention flatter; YaRN sharpens it back with a
    temperature t, √(1/t) = 0.1·ln(s) + 1 (§3.4). transformers returns that number as the
    second value, and multiplies cos and sin by it (so q·k by its square).

    Fix: Return `0.1 * math.log(factor) + 1.0` (1.0 for a factor of 1 or less) as attention_scale."""
    return _yarn(d, base, factor, original_max_len, beta_fast, beta_slow), 1.0


def yarn_wrong_temperature(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> list[Scaled]:
    """Your attention_scale is not 0.1·ln(factor) + 1: its square root, its square, its
    inverse, a log in base 2 or 10, or the +1 forgotten.

    Hint: The paper's recommendation is √(1/t) = 0.1·ln(s) + 1, a natural log, and that
    √(1/t) is what multiplies cos and sin (each of q and k), so the scores get its square,
    1/t. The function returns √(1/t) itself.

    Fix: `attention_scale = 0.1 * math.log(factor) + 1.0` for a factor above 1, else 1.0."""
    inv_freq, t = _yarn(d, base, factor, original_max_len, beta_fast, beta_slow), temperature(factor)
    wrong = [
        math.sqrt(t),
        t * t,
        1 / t,
        0.1 * math.log10(factor) + 1,
        0.1 * math.log2(factor) + 1,
        0.1 * math.log(factor),
    ]
    return [(inv_freq, w) for w in wrong]


def _llama3(
    d: int,
    base: float,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_len: int,
    *,
    two_pi: bool = True,
    reverse: bool = False,
    inverted: bool = False,
    edges: tuple[float, float] | None = None,
    long_first: bool = False,
) -> torch.Tensor:
    theta = theta_of(d, base)
    wavelength = (2 * math.pi if two_pi else 1.0) / theta
    long_edge, short_edge = edges or (original_max_len / low_freq_factor, original_max_len / high_freq_factor)
    keep = (original_max_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    if reverse:
        keep = 1 - keep
    slow = theta * factor if inverted else theta / factor
    blended = (1 - keep) * slow + keep * theta
    if long_first:  # the long band tested first: with the edges swapped, it takes the middle band's pairs too
        return torch.where(wavelength > long_edge, slow, torch.where(wavelength < short_edge, theta, blended))
    return torch.where(wavelength < short_edge, theta, torch.where(wavelength > long_edge, slow, blended))


def llama3_without_two_pi(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> Scaled:
    return _llama3(d, base, factor, low_freq_factor, high_freq_factor, original_max_len, two_pi=False), 1.0


llama3_without_two_pi.__doc__ = """Your wavelengths are 1/θ_i, without 2π: a pair turns once
every 2π/θ_i tokens, so your bands hold the wrong pairs.

Hint: each θ_i is an angle per token, in radians; one turn is 2π radians. Pair 0 (θ = 1)
has a wavelength of about 6.28 tokens, not 1.

Fix: `wavelength = 2 * math.pi / theta`, both for the band edges and for the blend."""


def llama3_wrong_band_edges(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> list[Scaled]:
    L = original_max_len
    edges = [  # (swapped edges leave the middle band empty: that is missing_middle_band's result)
        (L * low_freq_factor, L * high_freq_factor),
        (L, L / high_freq_factor),
    ]
    return [
        (_llama3(d, base, factor, low_freq_factor, high_freq_factor, L, edges=e, long_first=first), 1.0)
        for e in edges
        for first in (False, True)
    ]


llama3_wrong_band_edges.__doc__ = """Your band edges are not where Llama 3.1 puts them: the pairs that are
kept, blended and divided are not the right ones (the edges swapped, multiplied by the band
factors instead of divided, or the trained length itself taken as an edge).

Hint: the edges are wavelengths, fractions of the trained length: below L / high_freq_factor
(2,048 tokens for Llama 3.1) a pair is kept, above L / low_freq_factor (8,192) it is divided by
the factor. A larger band factor gives a shorter edge.

Fix: Keep where `wavelength < original_max_len / high_freq_factor`, divide where
`wavelength > original_max_len / low_freq_factor`, blend in between."""


def llama3_missing_middle_band(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> list[Scaled]:
    """Your result has two bands only: every pair is either kept or divided by the whole factor,
    and none is blended. Llama 3.1 has a third band between the edges L / high_freq_factor and
    L / low_freq_factor (the blend forgotten, or the two edges swapped, which empties it).

    Hint: between the short edge L / high_freq_factor and the long edge L / low_freq_factor lies
    a third band, where each θ_i is a blend of θ_i and θ_i / factor, weighted by how many turns
    the pair makes within L: it joins the kept band to the divided one without a jump.

    Fix: For the pairs with a wavelength between the edges, `(1 - smooth) * theta / factor + smooth * theta`,
    smooth = `(original_max_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)`."""
    theta = theta_of(d, base)
    wavelength = 2 * math.pi / theta
    return [
        (torch.where(wavelength < original_max_len / high_freq_factor, theta, theta / factor), 1.0),
        (torch.where(wavelength > original_max_len / low_freq_factor, theta / factor, theta), 1.0),
    ]


def llama3_band_factor_hard_coded(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> Scaled:
    return _llama3(d, base, factor, 1.0, 4.0, original_max_len), 1.0


llama3_band_factor_hard_coded.__doc__ = BAND_FACTOR_HARD_CODED


def llama3_trained_length_hard_coded(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> list[Scaled]:
    return [
        (_llama3(d, base, factor, low_freq_factor, high_freq_factor, L), 1.0)
        for L in KNOWN_LENGTHS
        if L != original_max_len
    ]


llama3_trained_length_hard_coded.__doc__ = TRAINED_LENGTH_HARD_CODED


def llama3_band_from_stretched_length(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> Scaled:
    return _llama3(d, base, factor, low_freq_factor, high_freq_factor, original_max_len * factor), 1.0


llama3_band_from_stretched_length.__doc__ = BAND_FROM_STRETCHED_LENGTH


def llama3_ramp_reversed(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> Scaled:
    """Your blend in the middle band goes the wrong way: the pairs next to the long edge
    keep most of their θ, and those next to the short edge are slowed the most.

    Hint: The weight on the original θ, (L/λ - low_freq_factor) / (high_freq_factor - low_freq_factor),
    is 0 at the long edge λ = L / low_freq_factor (there θ / factor, as in the slow band) and 1 at
    the short edge λ = L / high_freq_factor (there θ, as in the fast band): the blend joins the
    bands without a jump.

    Fix: `blended = (1 - smooth) * theta / factor + smooth * theta`, with smooth that weight."""
    return _llama3(d, base, factor, low_freq_factor, high_freq_factor, original_max_len, reverse=True), 1.0


def llama3_factor_inverted(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> Scaled:
    return _llama3(d, base, factor, low_freq_factor, high_freq_factor, original_max_len, inverted=True), 1.0


llama3_factor_inverted.__doc__ = FACTOR_INVERTED


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
FREQUENCY_TOLERANCE = {"rtol": 1e-5, "atol": 0.0}


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
            probe._no_nan(inv_freq, expected, what)
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
LIBRARY_CALL = {
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


YARN_CASES = [
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
