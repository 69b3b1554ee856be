"""Chapter 06, comparing, and ALiBi (Press et al. 2022): `alibi_slopes` and `alibi_bias`.

Their mistakes take the exercise's arguments, (n_heads) and (n_heads, seq_len),
and return what the mistaken code outputs."""

from __future__ import annotations

import torch

from helpers import reference
from helpers.checking import Failure, Probe, advice, close
from helpers.exercises.common import float64_accepted
from helpers.registry import Exercise

# --- known mistakes -------------------------------------------------------------------


def naive_slopes(n_heads: int) -> torch.Tensor:
    return torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])


def alibi_slopes_naive(n_heads: int) -> torch.Tensor:
    """Your slopes follow 2^(-8(h+1)/n) for every head count n, but that rule
    holds only when n is a power of two.

    Hint: the authors' get_slopes does not stretch the geometric rule. For a
    head count n that is not a power of two it keeps all the slopes of
    n' = 2^floor(log2 n) heads and fills the other n - n' with every other
    slope of 2n' heads: for 12 heads, the 8 slopes of 8 heads, then the 1st,
    3rd, 5th and 7th of 16 heads.

    Fix: with `slopes(k)` the power-of-two rule as a list and
    `n2 = 2 ** math.floor(math.log2(n))`, return
    `torch.tensor(slopes(n2) + slopes(2 * n2)[0::2][: n - n2])`."""
    return naive_slopes(n_heads)


def alibi_slopes_wrong_sign(n_heads: int) -> torch.Tensor:
    """Your slopes are negative: m_h must be positive, between 0 and 1.

    Hint: the slopes are 2^(-8/n), 2^(-16/n), ..., positive numbers; the minus
    sign belongs to the bias, -m_h · (i - j), which is what penalises distant
    keys. A negative slope there would reward them.

    Fix: drop the minus sign: `2 ** (-8 * (h + 1) / n)` for h = 0 .. n-1, and
    negate in alibi_bias, not here."""
    return -reference.alibi_slopes(n_heads)


def alibi_bias_naive(n_heads: int, seq_len: int) -> torch.Tensor:
    """Your bias is right for a power-of-two head count but not for another
    one: its slopes follow 2^(-8(h+1)/n) for every n.

    Hint: for a head count n that is not a power of two, the authors keep all
    the slopes of n' = 2^floor(log2 n) heads, then take every other slope of
    2n' heads for the remaining n - n' (see alibi_slopes).

    Fix: build the bias from `alibi_slopes(n_heads)`, whose rule for other head
    counts is `slopes(n2) + slopes(2 * n2)[0::2][: n - n2]`, with n2 the largest
    power of two not above n."""
    return _bias(naive_slopes(n_heads), seq_len)


def alibi_bias_wrong_sign(n_heads: int, seq_len: int) -> list[torch.Tensor]:
    """Your bias rewards distance instead of penalising it: keys further back
    get a larger score than the token itself.

    Hint: query i should lose m_h for every step back to key j: its bias is 0
    at j = i and more and more negative as j moves back. (j - i with a plus
    sign is the same thing; i - j with a plus sign is not.)

    Fix: `bias = -slopes[:, None, None] * (i - j)`, with
    `i = torch.arange(seq_len)[:, None]` and `j = torch.arange(seq_len)[None, :]`,
    then the mask on j > i."""
    slopes = reference.alibi_slopes(n_heads)
    return [_bias(-slopes, seq_len), _bias(-slopes, seq_len, causal=False)]


def alibi_bias_missing_causal_mask(n_heads: int, seq_len: int) -> list[torch.Tensor]:
    """Your bias lets a query see the keys after it: above the diagonal
    (j > i) it holds values above -1e9, none of them -inf, so softmax gives
    the future a weight. (0 there is no mask: it is the largest bias of all.)

    Hint: softmax gives zero weight only to -inf, or to a score so negative
    that it acts as one: this check takes -inf, the dtype's most negative
    float, or anything at or below -1e9 as masked. The bidirectional form,
    -m_h · |i - j| with no mask, is for encoders, not this causal exercise.

    Fix: `bias.masked_fill(j > i, float("-inf"))` (or
    `torch.finfo(bias.dtype).min`), with `i = torch.arange(seq_len)[:, None]`
    and `j = torch.arange(seq_len)[None, :]`."""
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


def alibi_probe(fn, probe: Probe, cases: tuple[tuple[int, ...], ...], helps: dict[str, tuple[str, str]]) -> None:
    """Each case is the arguments of one call, head count first; powers of two come
    first. When those pass and another head count fails, the rule for a head count
    that is not a power of two is what is missing. `helps` gives the (hint, fix) of
    a generic failure (wrong_values, wrong_shape...; misplaced_mask: -inf where a
    finite bias belongs)."""
    passed = []  # the head counts, powers of two, whose results were right
    for args in cases:
        call = f"`{probe.exercise.id}({', '.join(repr(a) for a in args)})`"
        out = None
        try:
            out = float64_accepted(probe.call(fn, *args, what=call))
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                out = out.masked_fill(out <= MASKED, float("-inf"))  # any such bias is a mask to softmax
            expected = probe.exercise.reference(*args)
            if expected.dim() >= 2 and close(out, expected.transpose(-1, -2)) and not close(out, expected):
                probe.fail("wrong_values", f"the result of {call} is the right bias transposed: its -inf mask lies below the diagonal, above it the penalties.")
            probe.expect(out, expected, what=f"the result of {call}", mistakes=probe.known_mistakes(*args))
        except Failure as failure:
            n_heads = args[0]
            if passed and n_heads & (n_heads - 1) != 0 and failure.code in ("raised", "wrong_shape", "wrong_values", "nan_or_inf"):
                _, hint, fix = advice(probe.exercise, "non_power_of_two")
                right = ", ".join(str(n) for n in sorted(passed)[:-1]) + f" and {max(passed)}" if len(passed) > 1 else str(passed[0])
                probe.fail(
                    "non_power_of_two",
                    f"{failure.message.rstrip('.')}. Your code is right for {right} heads but not for {n_heads}, which is not a power of two.",
                    hint=hint,
                    fix=fix,
                )
            misplaced_mask = failure.code == "nan_or_inf" and isinstance(out, torch.Tensor) and not out.isnan().any()
            hint, fix = helps.get("misplaced_mask" if misplaced_mask else failure.code, ("", ""))
            failure.hint, failure.fix = failure.hint or hint, failure.fix or fix
            raise
        passed.append(args[0])


SLOPES_HELP = {
    "wrong_values": (
        "For n heads, n a power of two, the slopes are 2^(-8/n), 2^(-16/n), ..., 2^(-8): for 8 heads 1/2, 1/4, ..., 1/256. The first is not 1, and the last is exactly 2^(-8).",
        "`torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])` for a power of two: h + 1, so the exponents run from -8/n to -8.",
    ),
    "wrong_shape": (
        "One slope per head: the result is a vector of n_heads numbers, whatever n_heads is.",
        "Return a 1-D tensor of shape (n_heads,): `torch.tensor(slopes)` on a flat list of n_heads floats.",
    ),
    "wrong_type": (
        "The slopes go into tensor arithmetic (broadcast against the (T, T) distances), so they must come as a torch.Tensor.",
        "Wrap the list before returning it: `return torch.tensor(slopes)`, float32.",
    ),
}

BIAS_HELP = {
    "wrong_values": (
        "bias[h, i, j] belongs to query i (a row) and key j (a column): 0 on the diagonal, -m_h · (i - j) below it, masked above it.",
        "`bias = -slopes[:, None, None] * (i - j)` with `i = torch.arange(seq_len)[:, None]` (rows: queries) and "
        "`j = torch.arange(seq_len)[None, :]` (columns: keys), then `bias.masked_fill(j > i, float('-inf'))`.",
    ),
    "wrong_shape": (
        "One (seq_len, seq_len) matrix per head, heads first, so that it adds to attention scores of shape (B, n_heads, T, T).",
        "Give the slopes two trailing axes, `slopes[:, None, None]`, so the result is (n_heads, seq_len, seq_len), not (seq_len, seq_len, n_heads).",
    ),
    "misplaced_mask": (  # nan_or_inf, with -inf where the reference is finite
        "-inf belongs only above the diagonal, to keys after their query (j > i); the diagonal and everything below hold finite penalties -m_h · (i - j).",
        "Mask with `j > i` exactly, not `j >= i` or `j < i`: `bias.masked_fill(j > i, float('-inf'))`.",
    ),
    "wrong_type": (
        "The bias is added to attention scores, so it must come as one torch.Tensor of shape (n_heads, seq_len, seq_len).",
        "Build it with tensor operations and `return bias`; stack a list of per-head matrices with `torch.stack(rows)`.",
    ),
}


def check_alibi_slopes(fn, probe: Probe) -> None:
    alibi_probe(fn, probe, ((8,), (16,), (2,), (1,), (4,), (12,), (6,), (20,)), SLOPES_HELP)


def check_alibi_bias(fn, probe: Probe) -> None:
    alibi_probe(fn, probe, ((4, 6), (8, 5), (1, 3), (6, 7), (12, 4)), BIAS_HELP)


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
        no_device_pass="it takes no tensor: its result is made on the CPU, as the reference's is, and moved by the code that uses it",
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
        no_device_pass="it takes no tensor: its result is made on the CPU, as the reference's is, and moved by the code that uses it",
    ),
]
