"""Chapter 06, comparing, and ALiBi (Press et al. 2022): `alibi_slopes` and `alibi_bias`.

Their mistakes take the exercise's arguments, (n_heads) and (n_heads, seq_len),
and return what the mistaken code outputs."""

from __future__ import annotations

import torch

from helpers import reference
from helpers.checking import Failure, Probe
from helpers.exercises.common import float64_accepted
from helpers.registry import Exercise

# --- known mistakes -------------------------------------------------------------------


def naive_slopes(n_heads: int) -> torch.Tensor:
    return torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])


def alibi_slopes_naive(n_heads: int) -> torch.Tensor:
    """Your slopes follow 2^(-8(h+1)/n) for every head count. That is the
    rule for a power of two only. For another n, Press et al. take the n'
    slopes of the closest smaller power of two n' = 2^floor(log2 n), then
    every other slope of 2n' heads ([0::2]) for the remaining n - n' heads.
    (For 12 heads: the 8 slopes of 8 heads, then the 1st, 3rd, 5th and 7th
    of 16 heads.)"""
    return naive_slopes(n_heads)


def alibi_slopes_wrong_sign(n_heads: int) -> torch.Tensor:
    """Your slopes are negative. The slopes m_h are positive numbers,
    2^(-8/n), 2^(-16/n), ...; the minus sign belongs to the bias,
    -m_h · (i - j), which penalises distant keys."""
    return -reference.alibi_slopes(n_heads)


def alibi_bias_naive(n_heads: int, seq_len: int) -> torch.Tensor:
    """Your bias is right for a power-of-two head count but not for another
    one: its slopes follow 2^(-8(h+1)/n) for every n. Press et al. take the
    slopes of the closest smaller power of two n', then every other slope
    of 2n' heads for the rest (see alibi_slopes)."""
    return _bias(naive_slopes(n_heads), seq_len)


def alibi_bias_wrong_sign(n_heads: int, seq_len: int) -> list[torch.Tensor]:
    """Your bias rewards distance instead of penalising it: the score of
    query i for key j must get -m_h · (i - j), which is 0 for the token
    itself and more and more negative further back. (j - i with a plus sign
    is the same thing; i - j with a plus sign is not.)"""
    slopes = reference.alibi_slopes(n_heads)
    return [_bias(-slopes, seq_len), _bias(-slopes, seq_len, causal=False)]


def alibi_bias_missing_causal_mask(n_heads: int, seq_len: int) -> list[torch.Tensor]:
    """Your bias lets a query see the keys after it: above the diagonal
    (j > i) it must be -inf, so that softmax gives the future zero weight.
    Use `bias.masked_fill(j > i, float("-inf"))` (0 there is not a mask:
    it is the largest bias of all). Without a mask the distance is |i - j|,
    the bidirectional form, which this causal exercise does not use."""
    slopes = reference.alibi_slopes(n_heads)
    return [
        _bias(slopes, seq_len, causal=False),
        _bias(slopes, seq_len, causal=False, absolute=True),
        _bias(slopes, seq_len, masked_with=0.0),
    ]


def _bias(
    slopes: torch.Tensor,
    seq_len: int,
    *,
    causal: bool = True,
    absolute: bool = False,
    masked_with: float = float("-inf"),
) -> torch.Tensor:
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    distance = (i - j).abs().float() if absolute else (i - j).float()
    bias = -slopes[:, None, None] * distance
    return bias.masked_fill(j > i, masked_with) if causal else bias


# --- probes ----------------------------------------------------------------------------

MASKED = -1e9  # a bias this negative is a mask to softmax, as -inf is (torch.finfo(dtype).min, -1e9...)


def alibi_probe(fn, probe: Probe, cases: tuple[tuple[int, ...], ...], hint: str) -> None:
    """Each case is the arguments of one call, head count first; powers of two come
    first. When those pass and another head count fails, the rule for a head count
    that is not a power of two is what is missing."""
    for args in cases:
        call = f"`{probe.exercise.id}({', '.join(repr(a) for a in args)})`"
        try:
            out = float64_accepted(probe.call(fn, *args, what=call))
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                out = out.masked_fill(out <= MASKED, float("-inf"))  # any such bias is a mask to softmax
            probe.against_reference(out, *args, what=f"the result of {call}", hint=hint)
        except Failure as failure:
            n_heads = args[0]
            if n_heads & (n_heads - 1) == 0 or failure.code not in (
                "raised",
                "wrong_shape",
                "wrong_values",
                "nan_or_inf",
            ):
                raise
            probe.fail(
                "non_power_of_two",
                f"{failure.message.rstrip('.')}. Your code is right for 1, 2, 4, 8 and 16 heads but not for {n_heads}: for a head count that is not a power of two, "
                "Press et al. take the slopes of the closest smaller power of two n', then every other slope of 2n' heads ([0::2]) for the rest.",
            )


def check_alibi_slopes(fn, probe: Probe) -> None:
    hint = "For n heads, n a power of two, the slopes are 2^(-8/n), 2^(-16/n), ..., 2^(-8): for 8 heads 1/2, 1/4, ..., 1/256."
    alibi_probe(fn, probe, ((8,), (16,), (2,), (1,), (4,), (12,), (6,), (20,)), hint)


def check_alibi_bias(fn, probe: Probe) -> None:
    hint = "bias[h, i, j] is for query i (a row) and key j (a column): -m_h · (i - j) for j <= i, -inf for j > i."
    alibi_probe(fn, probe, ((4, 6), (8, 5), (1, 3), (6, 7), (12, 4)), hint)


EXERCISES = [
    Exercise(
        id="alibi_slopes",
        chapter=6,
        points=2,
        kind="function",
        reference=reference.alibi_slopes,
        check=check_alibi_slopes,
        mistakes={"non_power_of_two": alibi_slopes_naive, "wrong_sign": alibi_slopes_wrong_sign},
        difficulty=2,
        importance=2,
        minutes=10,
    ),
    Exercise(
        id="alibi_bias",
        chapter=6,
        points=2,
        kind="function",
        reference=reference.alibi_bias,
        check=check_alibi_bias,
        mistakes={
            "non_power_of_two": alibi_bias_naive,
            "wrong_sign": alibi_bias_wrong_sign,
            "missing_causal_mask": alibi_bias_missing_causal_mask,
        },
        difficulty=2,
        importance=2,
        minutes=10,
    ),
]
