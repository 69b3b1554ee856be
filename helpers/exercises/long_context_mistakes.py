"""The known mistakes of chapter 07's scalings (moved out of ch07_long_context, which declares the exercises,
their probes and their contracts). Each mistake takes its exercise's arguments and returns what the mistaken
code returns, one `(inv_freq, attention_scale)` or a list of them (its faces); written as the slips are made,
one line each, on top of the right computation.
"""

from __future__ import annotations

import math

import torch

from helpers import reference

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
    """Your base is divided by factor^(d/(d-2)) where NTK-aware scaling multiplies it: a smaller base turns every
    pair but the fastest faster, pair i by factor^(2i/(d-2)) (the slowest by the whole factor), so a long
    sequence reaches angles even further from those met in training.

    Hint: NTK-aware scaling slows the pairs down by raising the base: the larger the base, the slower every pair
    but pair 0, which keeps θ_0 = 1. The exponent d/(d-2) makes the slowest pair slow down by exactly the factor.

    Fix: Multiply: `base * factor ** (d / (d - 2))`, never `base / ...`."""
    return theta_of(d, base / factor ** (d / (d - 2))), 1.0


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
    original_max_len: float,
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
    original_max_len: float,
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
        (L * high_freq_factor, L * low_freq_factor),
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


def llama3_blend_linear_in_wavelength(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> Scaled:
    """Your middle band blends with a weight linear in the wavelength λ, (L/low_freq_factor - λ) / (L/low_freq_factor
    - L/high_freq_factor): it is 0 and 1 at the band's edges, as Llama 3.1's is, but in between it is another curve.
    Llama 3.1's weight on the original θ_i is linear in the number of turns within the trained length, L/λ_i.

    Hint: Meta's code computes `smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor -
    low_freq_factor)`: turns, not tokens. A pair in the middle of the band by wavelength is not in the middle by turns.

    Fix: `smooth = (original_max_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)`, then
    `(1 - smooth) * theta / factor + smooth * theta`."""
    theta = theta_of(d, base)
    wavelength = 2 * math.pi / theta
    long_edge, short_edge = original_max_len / low_freq_factor, original_max_len / high_freq_factor
    keep = (long_edge - wavelength) / (long_edge - short_edge) if long_edge != short_edge else torch.ones_like(theta)
    blended = (1 - keep) * theta / factor + keep * theta
    return torch.where(
        wavelength < short_edge, theta, torch.where(wavelength > long_edge, theta / factor, blended)
    ), 1.0


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
