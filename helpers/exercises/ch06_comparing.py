"""Chapter 06, comparing, and ALiBi (Press et al. 2022): `alibi_slopes` and `alibi_bias`.

Their mistakes take the exercise's arguments, (n_heads) and (n_heads, seq_len),
and return what the mistaken code outputs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from helpers import reference
from helpers.contracts import Arg, Contract, Result
from helpers.exercises import oracle
from helpers.exercises.common import TAKES_NO_TENSOR, float64_accepted
from helpers.probe import STOPS_EVERYTHING, Probe, advice, close
from helpers.registry import Exercise
from helpers.safety import Failure

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


def alibi_bias_wrong_sign(n_heads: int, seq_len: int) -> torch.Tensor:
    """Your bias rewards distance instead of penalising it: keys further back
    get a larger score than the token itself.

    Hint: query i should lose m_h for every step back to key j: its bias is 0
    at j = i and more and more negative as j moves back. (j - i with a plus
    sign is the same thing; i - j with a plus sign is not.)

    Fix: `bias = -slopes[:, None, None] * (i - j)`, with
    `i = torch.arange(seq_len)[:, None]` and `j = torch.arange(seq_len)[None, :]`,
    then the mask on j > i."""
    return _bias(
        -reference.alibi_slopes(n_heads), seq_len
    )  # with no mask as well, the mask comes first: see bias_findings


def alibi_bias_missing_causal_mask(n_heads: int, seq_len: int) -> list[torch.Tensor]:
    """Your bias lets a query see the keys after it: above the diagonal
    (j > i) it holds finite values, none of them -inf or at or below -1e9,
    so softmax gives the future a weight.

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


# --- reading a result back: mistakes outside the catalogue ---------------------------

MASKED = -1e9  # a bias this negative is a mask to softmax, as -inf is (torch.finfo(dtype).min, -1e9...)
ORDER = ("missing_causal_mask", "wrong_sign")  # these come first among several findings; the others as found


def power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def geometric(n: int, start: int = 1) -> torch.Tensor:
    """2^(-8h/n) for h = start .. start + n - 1, in float64."""
    return 2.0 ** (-8.0 * torch.arange(start, start + n, dtype=torch.float64) / n)


def near(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def shown(values: torch.Tensor, count: int = 4) -> str:
    shown = ", ".join(f"{v:.4g}" for v in values[:count].tolist())
    return f"[{shown}{', ...' if len(values) > count else ''}]"


def slope_findings(probe: Probe, slopes: torch.Tensor, n_heads: int, source: str) -> list[tuple[str, str, str, str]]:
    """What is wrong with these slopes (float64, read from a result), as
    (code, message, hint, fix): a sign, the rule for a head count that is not a power of
    two, a geometric sequence started at the wrong place or reversed. Empty when they
    are right or when no rule explains them (the caller falls back on the catalogue)."""
    expected = reference.alibi_slopes(n_heads).double()
    found = []
    if bool((slopes < 0).all()):
        found.append(
            (
                "wrong_sign",
                f"{probe.explain('wrong_sign')} ({source} for {n_heads} heads are {shown(slopes)}.)",
                "",
                "",
            )
        )
        slopes = -slopes
    if near(slopes, expected) or not bool((slopes > 0).all()):
        return found
    ratio = 2.0 ** (-8.0 / n_heads)
    if power_of_two(n_heads):
        if n_heads > 1 and near(slopes[1:] / slopes[:-1], torch.full((n_heads - 1,), ratio, dtype=torch.float64)):
            first = f"{slopes[0]:.4g}" if abs(slopes[0] - 1) > 1e-6 else "1 = 2^0"
            found.append(
                (
                    "slopes_from_zero",
                    f"{source} for {n_heads} heads are {shown(slopes)}: a geometric sequence with the right ratio 2^(-8/{n_heads}) = {ratio:.4g}, but it starts at {first} instead of "
                    f"2^(-8/{n_heads}) = {ratio:.4g}.",
                    "The paper counts heads from 1: m_h = 2^(-8h/n) for h = 1 .. n, so the first slope is already the ratio and the last is exactly 2^(-8) = 1/256. Does your h start at 0?",
                    "Shift the exponent by one: `2 ** (-8 * (h + 1) / n)` for h in range(n), or `2 ** (-8 * torch.arange(1, n + 1) / n)`.",
                )
            )
        elif near(slopes.flip(0), expected):
            found.append(
                (
                    "slopes_reversed",
                    f"{source} for {n_heads} heads are {shown(slopes)}: the right slopes in reverse order, the smallest first.",
                    "Head 0 is the steepest: its slope 2^(-8/n) is the largest, and the slopes shrink from head to head down to 2^(-8).",
                    "Let the exponent grow with the head index: `2 ** (-8 * (h + 1) / n)` for h = 0 .. n-1, without reversing the list.",
                )
            )
        return found
    closest = 2 ** math.floor(math.log2(n_heads))
    _, hint, fix = advice(probe.exercise, "non_power_of_two")
    if near(slopes, geometric(n_heads)):
        how = f"follow 2^(-8h/{n_heads}) for h = 1 .. {n_heads}, the power-of-two rule stretched over {n_heads} heads"
    elif near(slopes[:closest], expected[:closest]):
        how = f"start with the {closest} slopes of {closest} heads, but the other {n_heads - closest} are {shown(slopes[closest:])}, not every other slope of {2 * closest} heads, {shown(expected[closest:])}"
    elif near(slopes.sort().values, expected.sort().values):
        how = f"are the right numbers in another order: the {closest} slopes of {closest} heads must come first, then the extra ones"
    elif near(slopes[:-1] / slopes[1:], slopes[:1] / slopes[1:2]) and len(slopes) > 2:
        how = f"form one geometric sequence, ratio {float(slopes[1] / slopes[0]):.4g}, while the paper's rule for {n_heads} heads is two interleaved ones"
    else:
        return found
    rule = f"{n_heads} is not a power of two, and for such a head count the slopes follow the authors' rule: those of {closest} heads, then every other slope of {2 * closest} heads"
    found.append(("non_power_of_two", f"{source} for {n_heads} heads {how}. {rule}.", hint, fix))
    return found


WEAK_MASK = (
    -1e3
)  # below this a float32 score underflows to a weight of 0 for scores of ordinary size: a mask, but not a robust one


def mask_finding(probe: Probe, bias: torch.Tensor, future: torch.Tensor) -> tuple[str, str, str, str]:
    """missing_causal_mask, said for the value the student put above the diagonal: none, 0, or a weak mask like -1e4."""
    _, hint, fix = advice(probe.exercise, "missing_causal_mask")
    h, q, k = (int(x) for x in (bias.isfinite() & future).nonzero()[0])
    value = float(bias[h, q, k])
    if bool((bias[future] <= WEAK_MASK).all()):
        message = (
            f"Your bias masks the keys after each query with {value:g}, not -inf (bias[{h}, {q}, {k}]). In float32, exp({value:g}) underflows to exactly 0, "
            f"so for scores of ordinary size it does act as a mask, but not robustly: a score larger than {-value:g} (large logits), or a dtype whose range it leaves "
            "(float16 ends at -65504), brings the future back. This exercise asks for -inf, torch.finfo(dtype).min, or anything at or below -1e9."
        )
        return ("missing_causal_mask", message, hint, fix)
    zero = " (0 there is no mask: it is the largest bias of all.)" if bool((bias[future] == 0).all()) else ""
    return (
        "missing_causal_mask",
        f"{probe.explain('missing_causal_mask')}{zero} (Here bias[{h}, {q}, {k}] = {value:.4g}, for a key after its query.)",
        hint,
        fix,
    )


def bias_findings(probe: Probe, out: torch.Tensor, n_heads: int, seq_len: int) -> list[tuple[str, str, str, str]]:
    """What the shape of a wrong (n_heads, T, T) bias says: finite entries above the
    diagonal (no mask, whatever else is wrong), then the slopes read back from each head,
    bias[h, i, i] - bias[h, i, i-1] = m_h, wherever the part on and below the diagonal is
    linear in i - j; a constant added to each row (the authors' m_h · j shortcut) last."""
    bias = out.detach().to("cpu", torch.float64)
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    future, past = (j > i).expand_as(bias), (j <= i).expand_as(bias)
    if not bool(bias[past].isfinite().all()):
        return []  # a mask where a finite bias belongs: the generic probes say where
    found = []
    if bool(bias[future].isfinite().any()):
        found.append(mask_finding(probe, bias, future))
    if seq_len < 2:
        return found
    diagonal = bias.diagonal(dim1=-2, dim2=-1)  # (H, T)
    steps = diagonal[:, 1:] - bias[:, torch.arange(1, seq_len), torch.arange(seq_len - 1)]  # (H, T-1): m_h each
    slopes = steps.mean(1)
    model = diagonal[:, :, None] - slopes[:, None, None] * (i - j)
    if not torch.allclose(bias[past], model[past], rtol=1e-4, atol=1e-5):
        return found  # not -m_h · (i - j) plus a constant per row: no slopes to read
    read = slope_findings(probe, slopes, n_heads, "The slopes your bias uses, bias[h, i, i] - bias[h, i, i-1],")
    shaped_right = not found and torch.allclose(diagonal, torch.zeros_like(diagonal), atol=1e-5)
    if (
        shaped_right and read and read[0][0] != "wrong_sign"
    ):  # the bias is built right around its slopes: the slopes are the mistake
        code, message, _, _ = read[0]
        read[0] = (
            code,
            f"{message} The rest of your bias is right: 0 on the diagonal, -m_h · (i - j) below it, masked above it. Only its slopes are wrong.",
            "If your alibi_bias takes its slopes from your alibi_slopes, the bias is right and alibi_slopes is the function to fix: its own check cell names the mistake.",
            'Run `check("alibi_slopes", alibi_slopes)`, follow its fix, then run this check again; if you compute the slopes inside alibi_bias instead, correct them there the same way.',
        )
    found += read
    if not torch.allclose(diagonal, torch.zeros_like(diagonal), atol=1e-5):
        found.append(
            (
                "bias_row_offset",
                f"Your bias is -m_h · (i - j) plus a different constant in each row (bias[{n_heads - 1}, {seq_len - 1}, {seq_len - 1}] = {diagonal[-1, -1]:.4g}, not 0): "
                "the authors' m_h · j shortcut, or an offset from the last position. Softmax would not see it; the bias is not 0 on the diagonal, though, and not a function of i - j alone.",
                "The shortcut adds m_h · j to every row and relies on softmax forgetting a constant per row. This exercise asks for the bias itself: 0 for a key at the query's own position, -m_h for the key one step back, and so on.",
                "Use the distance between query and key, `-slopes[:, None, None] * (i - j)` with `i = torch.arange(seq_len)[:, None]` and `j = torch.arange(seq_len)[None, :]`, not the key position j alone.",
            )
        )
    return found


HALF = (torch.bfloat16, torch.float16)


def precision_finding(out: torch.Tensor, expected: torch.Tensor, call: str) -> Failure | None:
    """A float32 result that misses float32's tolerance but is within two roundings of a
    half dtype (-inf where -inf belongs): the precision is the finding, not the rule it
    computes. The dtype is named when every value is one that dtype can hold."""
    if not (
        isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == expected.shape and not out.is_meta
    ):
        return None
    half_eps = torch.finfo(torch.bfloat16).eps  # the coarser of the two: float16 rounding fits within it too
    if not close(out, expected, rtol=2 * half_eps, atol=1e-6):
        return None
    got = out.detach().cpu()
    held = [str(dtype).replace("torch.", "") for dtype in HALF if bool((got.to(dtype).float() == got).all())]
    error = torch.where(got == expected.cpu(), 0.0, (got - expected.cpu()).abs()).nan_to_num(nan=float("inf"))
    worst = [int(i) for i in torch.unravel_index(error.argmax(), error.shape)]
    said = (
        f"every value of it is a {held[0]} number"
        if held
        else "its errors are the size that rounding to bfloat16 or float16 makes"
    )
    return Failure(
        "low_precision",
        f"the result of {call} is off by up to {float(error.max()):.2g} (at index {worst}: {got[tuple(worst)].item():.6g}, expected {expected.cpu()[tuple(worst)].item():.6g}), "
        f"far more than float32 rounding and about one rounding of a half dtype: {said}. Part of the computation ran in half precision.",
    )


def alibi_result(probe: Probe, fn: Callable[..., Any], args: tuple[Any, ...], what: str | None = None) -> Any:
    """The student's result for these arguments, float64 accepted as float32, with every bias at or
    below MASKED read as -inf: any such bias is a mask to softmax."""
    return read_bias(probe.call(fn, *args, what=what))


def read_bias(out: Any) -> Any:
    """A bias as the exercise reads it: float64 as float32, anything at or below MASKED as -inf."""
    out = float64_accepted(out)
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        out = out.masked_fill(out <= MASKED, float("-inf"))
    return out


def right_for(probe: Probe, fn: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    """Run the student's code on these arguments: is its result right (the mask read as in alibi_result)?"""
    try:
        out = alibi_result(probe, fn, args)
    except Failure:
        return False
    return close(out, probe.exercise.reference(*args))


def findings_in(probe: Probe, out: Any, args: tuple[Any, ...], call: str) -> list[Failure]:
    """What is wrong with one result, none when it is right: a half dtype's precision, a batch axis,
    a transposed bias, else what the slopes read back from it say, else the catalogue's verdict (expect)."""
    expected = probe.exercise.reference(*args)
    if close(out, expected):
        return []
    imprecise = precision_finding(out, expected, call)
    if imprecise is not None:
        return [imprecise]
    batch_axis = expected.dim() == 3 and isinstance(out, torch.Tensor) and out.dim() == 4 and out.shape[0] == 1
    if batch_axis and close(out[0], expected):
        probe.fail(
            "wrong_shape",
            f"the result of {call} has shape {tuple(out.shape)}: the right bias with a leading axis of size 1.",
            hint="The exercise returns one bias per head, (n_heads, seq_len, seq_len); the batch axis is added where the bias meets the scores (B, n_heads, T, T), by broadcasting.",
            fix="Build the bias as (n_heads, seq_len, seq_len), from `slopes[:, None, None]`, and return it without the `[None]` or `.unsqueeze(0)` that adds the batch axis.",
        )
    if expected.dim() >= 2 and close(out, expected.transpose(-1, -2)):
        probe.fail(
            "wrong_values",
            f"the result of {call} is the right bias transposed: its -inf mask lies below the diagonal, above it the penalties.",
        )
    if isinstance(out, torch.Tensor) and out.shape == expected.shape and not out.is_meta and out.is_floating_point():
        read = (
            bias_findings(probe, out, *args)
            if expected.dim() == 3
            else slope_findings(probe, out.detach().to("cpu", torch.float64), args[0], "Your slopes")
        )
        if read:
            return [Failure(*finding) for finding in read]
    probe.expect(out, expected, what=f"the result of {call}", mistakes=probe.known_mistakes(*args))
    return []  # not reached: expect fails on a result that is not close


def said_better(
    probe: Probe,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    failure: Failure,
    out: Any,
    *,
    after_a_pass: bool,
    masked: bool,
) -> Failure:
    """A generic failure, said better where it can be: for a head count that is not a power of two, when
    an earlier case passed and the code is right for the closest power of two and twice it, whose slopes
    make up this one's, the rule for such head counts is what is missing; in a `masked` result, -inf where
    a finite bias belongs gets MISPLACED_MASK's hint and fix."""
    n_heads = args[0]
    closest = 2 ** math.floor(math.log2(n_heads))
    if (
        after_a_pass
        and not power_of_two(n_heads)
        and failure.code in ("raised", "wrong_shape", "wrong_values", "nan_or_inf")
        and all(right_for(probe, fn, (n, *args[1:])) for n in (closest, 2 * closest))
    ):
        _, hint, fix = advice(probe.exercise, "non_power_of_two")
        failure = Failure(
            "non_power_of_two",
            f"{failure.message.rstrip('.')}. Your code is right for {closest} and {2 * closest} heads, whose slopes make up those of {n_heads}, but not for {n_heads}, which is not a power of two.",
            hint=hint,
            fix=fix,
        )
    misplaced_mask = masked and failure.code == "nan_or_inf" and isinstance(out, torch.Tensor) and not out.isnan().any()
    if misplaced_mask:
        failure.hint, failure.fix = failure.hint or MISPLACED_MASK[0], failure.fix or MISPLACED_MASK[1]
    return failure


def alibi_case(
    probe: Probe, fn: Callable[..., Any], args: tuple[Any, ...], *, after_a_pass: bool, masked: bool
) -> list[Failure]:
    """The findings of one call (its arguments, head count first), none when its result is right;
    a failure that stops everything (a stub, a time-out...) is raised at once."""
    call = f"`{probe.exercise.id}({', '.join(repr(a) for a in args)})`"
    out = None
    try:
        out = alibi_result(probe, fn, args, call)
        return findings_in(probe, out, args, call)
    except Failure as failure:
        if failure.code in STOPS_EVERYTHING:
            raise
        return [said_better(probe, fn, args, failure, out, after_a_pass=after_a_pass, masked=masked)]


def diagnose(probe: Probe, findings: list[Failure]) -> None:
    """Each code once, with its first finding: the first in ORDER, else the first found, is the
    diagnosis, raised with the exercise's advice for a hint or fix it lacks; the others go to probe.also."""
    if not findings:
        return
    by_code: dict[str, Failure] = {}  # each code once, with its first finding, in the order found
    for finding in findings:
        by_code.setdefault(finding.code, finding)
    codes = list(by_code)
    first = min(codes, key=lambda code: (ORDER.index(code) if code in ORDER else len(ORDER), codes.index(code)))
    chosen = by_code[first]
    # wrong_values says only that nothing more specific fits: on another case it is the diagnosis met again (slopes
    # from 0 at one head, where the slopes read back say nothing), never a second mistake of its own
    probe.also += [
        f"{code}: {finding.message}" for code, finding in by_code.items() if code not in (first, "wrong_values")
    ]
    if not chosen.hint or not chosen.fix:
        _, hint, fix = advice(probe.exercise, chosen.code)
        chosen.hint, chosen.fix = chosen.hint or hint, chosen.fix or fix
    raise chosen


def alibi_probe(
    fn: Callable[..., Any], probe: Probe, cases: tuple[tuple[int, ...], ...], *, masked: bool = False
) -> None:
    """Each case is the arguments of one call, head count first; powers of two come
    first. Every case runs (unless one stops everything), so that mistakes that only
    show for some head counts are found beside the others; the first finding in
    ORDER, else the first found, is the diagnosis and the others go to probe.also.
    When the powers of two pass and another head count fails, the rule for a head
    count that is not a power of two is what is missing. The exercise's advice gives the
    (hint, fix) of a generic failure (wrong_values, wrong_shape...); a `masked` result with
    -inf where a finite bias belongs gets MISPLACED_MASK's."""
    findings: list[Failure] = []
    a_case_passed = False  # the powers of two come first: once one is right, a later failure may be the rule
    for args in cases:
        found = alibi_case(probe, fn, args, after_a_pass=a_case_passed, masked=masked)
        a_case_passed = a_case_passed or not found
        findings += found
    diagnose(probe, findings)


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
    "wrong_type": (
        "The bias is added to attention scores, so it must come as one torch.Tensor of shape (n_heads, seq_len, seq_len).",
        "Build it with tensor operations and `return bias`; stack a list of per-head matrices with `torch.stack(rows)`.",
    ),
}

# (hint, fix) of a nan_or_inf with -inf where the reference is finite: a mask on the wrong side
MISPLACED_MASK = (
    "-inf belongs only above the diagonal, to keys after their query (j > i); the diagonal and everything below hold finite penalties -m_h · (i - j).",
    "Mask with `j > i` exactly, not `j >= i` or `j < i`: `bias.masked_fill(j > i, float('-inf'))`.",
)


def check_alibi_slopes(fn: Callable[..., Any], probe: Probe) -> None:
    alibi_probe(fn, probe, ((8,), (16,), (2,), (1,), (4,), (12,), (6,), (20,)))


def check_alibi_bias(fn: Callable[..., Any], probe: Probe) -> None:
    cases = ((4, 6), (8, 5), (1, 3), (2, 1), (6, 7), (12, 4))  # (2, 1): one query, one key, the shortest sequence
    alibi_probe(fn, probe, tuple((n_heads, probe.length(seq_len)) for n_heads, seq_len in cases), masked=True)


# --- t5_relative_bucket: its mistakes take (relative_position, bidirectional, num_buckets, max_distance) ---------


def _buckets(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
    *,
    split: str = "halves",
    direction: int = 1,
    exact: str = "half",
    spacing: str = "log",
    clamp: bool = True,
    precision: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The bucketing with one or more of its steps done wrong (each keyword, one mistake), its log in
    float32 as transformers computes it (precision=torch.float64: the log in float64, itself a mistake):
    the right steps give the reference's buckets."""
    relative = relative_position.long() * direction
    buckets = torch.zeros_like(relative)
    if bidirectional and split == "halves":
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets
    elif bidirectional and split == "halved_only":  # half the buckets, but no offset for the keys after the query
        num_buckets //= 2
    distance = relative.abs() if bidirectional else (-relative).clamp(min=0)
    max_exact = num_buckets if exact == "all" else num_buckets // 2
    d = distance.to(precision)
    if spacing == "linear":
        scaled = (d - max_exact) / (max_distance - max_exact) * (num_buckets - max_exact)
    else:
        denominator = math.log(max_distance) if spacing == "log_of_max" else math.log(max_distance / max(max_exact, 1))
        scaled = torch.log(d / max(max_exact, 1)) / denominator * (num_buckets - max_exact)
    large = max_exact + (scaled.round() if spacing == "rounded" else scaled).long()
    if clamp:
        large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


BUCKET_FACES: dict[str, list[dict[str, Any]]] = {  # code -> the keyword sets of _buckets that make it
    "bucket_sign_split_missing": [{"split": "halved_only"}, {"split": "none"}],
    "bucket_direction_reversed": [{"direction": -1}],
    "bucket_exact_region": [{"exact": "all"}],
    "bucket_log_spacing": [{"spacing": "linear"}, {"spacing": "log_of_max"}, {"spacing": "rounded"}],
    "bucket_not_clamped": [{"clamp": False}],
    "bucket_log_in_float64": [{"precision": torch.float64}],
}


def _faces(code: str) -> Callable[..., list[torch.Tensor]]:
    return lambda *args: [_buckets(*args, **face) for face in BUCKET_FACES[code]]


def bucket_sign_split_missing(*args: Any) -> list[torch.Tensor]:
    """Your buckets do not split by sign: bidirectional, a key d positions after the query gets
    the same bucket as the key d positions before it, so attention cannot tell left from right.

    Hint: bidirectional, T5 gives each direction its own half of the buckets: num_buckets // 2
    each, the keys after the query (relative_position > 0) in the upper half.

    Fix: `num_buckets //= 2`, then add `(relative_position > 0).long() * num_buckets` to the
    bucket of `relative_position.abs()`."""
    return _faces("bucket_sign_split_missing")(*args)


def bucket_direction_reversed(*args: Any) -> list[torch.Tensor]:
    """Your buckets read the relative position the other way round: keys after the query get
    the buckets of keys before it (bidirectional), or the decoder's buckets count keys after
    the query instead of before it (bidirectional=False).

    Hint: the argument relative_position is memory_position - query_position, key minus query:
    negative for keys before the query, the only ones a causal decoder sees.

    Fix: keep the sign as given: the upper half for `relative_position > 0`, and for
    bidirectional=False the distance `-torch.clamp(relative_position, max=0)`."""
    return _faces("bucket_direction_reversed")(*args)


def bucket_exact_region(*args: Any) -> list[torch.Tensor]:
    """Your exact buckets cover the wrong distances: in T5, half of one direction's n buckets
    hold one distance each, 0 .. n/2 - 1, and only the other half is log-spaced.

    Hint: with the defaults, bidirectional: 16 buckets per direction, distances 0 to 7 exact,
    8 to 127 shared by buckets 8 to 15. Is your max_exact computed after halving num_buckets?

    Fix: `max_exact = num_buckets // 2` with num_buckets already halved when bidirectional, and
    `is_small = distance < max_exact`."""
    return _faces("bucket_exact_region")(*args)


def bucket_log_spacing(*args: Any) -> list[torch.Tensor]:
    """Your buckets past the exact ones are not T5's: they must be log-spaced from max_exact
    up to max_distance, and the bucket is the logarithm's scaled value truncated toward zero.

    Hint: a distance d ≥ max_exact goes to max_exact + log(d / max_exact) / log(max_distance /
    max_exact) · (n - max_exact), cut to an integer with .long() (not rounded): distance 20 with
    the defaults is bucket 8 + int(2.64) = 10.

    Fix: `max_exact + (torch.log(distance.float() / max_exact) / math.log(max_distance /
    max_exact) * (num_buckets - max_exact)).long()`."""
    return _faces("bucket_log_spacing")(*args)


def bucket_not_clamped(*args: Any) -> list[torch.Tensor]:
    """Your far buckets are not clamped: distances from max_distance on must all share the last
    bucket, n - 1, but yours keep growing past it, into the other direction's half or past
    num_buckets (an index the bias table, nn.Embedding(num_buckets, n_heads), does not have).

    Hint: the log-spaced buckets reach n - 1 at max_distance; every distance beyond maps there too.

    Fix: `large = torch.clamp(large, max=num_buckets - 1)` (num_buckets already halved when
    bidirectional), before choosing between the exact and the large bucket."""
    return _faces("bucket_not_clamped")(*args)


def bucket_log_in_float64(*args: Any) -> list[torch.Tensor]:
    """Your log-spaced buckets land one bucket away from transformers' (and Mesh TensorFlow's) at
    a few distances: where the exact value of log(d / max_exact) / log(max_distance / max_exact)
    · (n - max_exact) is a whole number, or within float32's rounding of one, the truncation
    decides between two buckets, and your log is not computed as transformers computes it (in
    float64, or in float32 written another way: log(d) - log(max_exact), a log2).

    Hint: a T5 checkpoint's bias table was trained with the buckets float32 gives, so those are
    the ones to reproduce. With 20 buckets and max_distance 160 (bidirectional), distances 10,
    20 and 80 sit exactly on bucket boundaries: float32 puts them in buckets 6, 7 and 9, float64
    one lower.

    Fix: compute the log as transformers does, in float32: `torch.log(distance.float() / max_exact)`
    divided by the Python float `math.log(max_distance / max_exact)`, times `num_buckets - max_exact`,
    then `.long()`."""
    return _faces("bucket_log_in_float64")(*args)


BUCKET_MISTAKES = {
    "bucket_sign_split_missing": bucket_sign_split_missing,
    "bucket_direction_reversed": bucket_direction_reversed,
    "bucket_exact_region": bucket_exact_region,
    "bucket_log_spacing": bucket_log_spacing,
    "bucket_not_clamped": bucket_not_clamped,
    "bucket_log_in_float64": bucket_log_in_float64,
}

BUCKET_HELP = (  # wrong_values: (hint, fix), bidirectional
    "Work out a few buckets by hand with the defaults (bidirectional, 32 buckets, max_distance 128): relative_position 0 → 0, -1 → 1, 1 → 17, -20 → 10, 20 → 26, -200 → 15, 200 → 31.",
    "Print `t5_relative_bucket(torch.tensor([0, -1, 1, -20, 20, -200, 200]))`: it must be [0, 1, 17, 10, 26, 15, 31]. "
    "Follow the first wrong entry through your steps: the sign split, the exact region, the log-spaced buckets, the clamp.",
)
CAUSAL_BUCKET_HELP = (  # wrong_values on a bidirectional=False case: a decoder's buckets, 32 of them for keys before the query
    "A decoder (bidirectional=False) counts distances back only: keys after the query all get bucket 0, and the 32 buckets are "
    "for keys before it, 16 exact, 16 log-spaced up to max_distance. relative_position 0 → 0, -1 → 1, 1 → 0, -20 → 17, 20 → 0, -200 → 31, 200 → 0.",
    "Print `t5_relative_bucket(torch.tensor([0, -1, 1, -20, 20, -200, 200]), bidirectional=False)`: it must be "
    "[0, 1, 0, 17, 0, 31, 0]. A positive relative position is a key after the query: its distance back is 0, not its absolute value.",
)


def pair_of_bucket_mistakes(probe: Probe, out: torch.Tensor, args: tuple) -> None:
    """Two steps wrong at once (no split and no clamp, say): the first is the diagnosis, the other under Also."""
    for first, first_faces in BUCKET_FACES.items():
        for other, other_faces in BUCKET_FACES.items():
            if other == first or list(BUCKET_FACES).index(other) < list(BUCKET_FACES).index(first):
                continue
            for a in first_faces:
                for b in other_faces:
                    if close(out, _buckets(*args, **(a | b))):
                        probe.also.append(f"{other}: {probe.explain(other)}")
                        probe.fail(first, probe.explain(first))


def relative_positions(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Key minus query for every (query, key) of a length-T attention matrix, as T5 makes them: (T, T)."""
    positions = torch.arange(length, device=device)
    return positions[None, :] - positions[:, None]


def bucket_cases(probe: Probe) -> tuple[tuple[str, torch.Tensor, tuple[Any, ...]], ...]:
    """(what, relative positions, more arguments): the defaults, a decoder, other bucket counts and
    distances, int32 positions of any shape; distances past max_distance in each."""
    return (
        (
            "the (160, 160) relative positions of a 160-token attention matrix, defaults",
            relative_positions(160, probe.device),
            (),
        ),
        ("the same, bidirectional=False (a decoder)", relative_positions(160, probe.device), (False,)),
        (
            "a vector -300 .. 300, num_buckets=16, max_distance=64",
            torch.arange(-300, 301, device=probe.device),
            (True, 16, 64),
        ),
        (
            "int32 positions of shape (2, 3, 40), bidirectional=False, num_buckets=10, max_distance=50",
            probe.randint(121, 2, 3, 40).int() - 60,
            (False, 10, 50),
        ),
        # where float32 and float64 logs truncate to different buckets (tests/test_checks.py searches them):
        # distances 10, 20 and 80 here, float32 one bucket higher; distance 18 below, float32 one lower
        (
            "int16 positions -200 .. 200, num_buckets=20, max_distance=160",
            torch.arange(-200, 201, device=probe.device, dtype=torch.int16),
            (True, 20, 160),
        ),
        (
            "a vector -40 .. 40, bidirectional=False, num_buckets=17, max_distance=27",
            torch.arange(-40, 41, device=probe.device),
            (False, 17, 27),
        ),
    )


def buckets_of(probe: Probe, fn: Callable[..., Any], what: str, relative: torch.Tensor, more: tuple[Any, ...]) -> None:
    """One case's buckets against the reference's: a known mistake, or two of them at once, names a wrong result."""
    out = probe.call(fn, relative, *more)
    expected = probe.exercise.reference(relative, *more)
    hint, fix = BUCKET_HELP if not more or more[0] else CAUSAL_BUCKET_HELP
    if (
        len(more) > 1
    ):  # the defaults may hide the mistake (128 // 8 is exactly 16): this case's own numbers too (review B9)
        sample = torch.tensor([0, -1, 1, -20, 20, -200, 200])
        arguments = ", ".join(
            f"{name}={value!r}" for name, value in zip(("bidirectional", "num_buckets", "max_distance"), more)
        )
        fix += (
            f" With this case's arguments, `t5_relative_bucket(torch.tensor([0, -1, 1, -20, 20, -200, 200]), {arguments})` "
            f"must be {probe.exercise.reference(sample, *more).tolist()}."
        )
    try:
        probe.expect(
            out,
            expected,
            what=f"the buckets of {what}",
            mistakes=probe.known_mistakes(relative, *more),
            hint=hint,
            fix=fix,
        )
    except Failure as failure:
        if failure.code == "wrong_values":
            pair_of_bucket_mistakes(probe, out, (relative, *more))
        raise


def check_t5_relative_bucket(fn: Callable[..., Any], probe: Probe) -> None:
    try:
        for what, relative, more in bucket_cases(probe):
            buckets_of(probe, fn, what, relative, more)
    except Failure as failure:
        if failure.code == "wrong_dtype":
            failure.hint = "Bucket ids index a table of learned biases, nn.Embedding(num_buckets, n_heads): an index is torch.long, whatever integer dtype (int64, int32, int16) relative_position comes in."
            failure.fix = "Cut the log-spaced buckets with `.long()` (truncation, as T5 does) and keep every other step in integers; `.long()` on the result if a float slipped in."
        raise
    probe.device_pass(lambda device: probe.call(fn, relative_positions(40, device)))


# --- the contracts (helpers/contracts.py) ------------------------------------------------------------
# ALiBi takes sizes only: the axis that applies is `ones` (one head, a sequence of one token). Its result may
# come in float64 (NumPy's default) and its mask as any bias at or below -1e9: the contract reads them so.
# T5's relative positions are signed, key minus query, both ends drawn; its three options are varied and left out.
HEADS = Arg("size", "H")
SLOPES_CONTRACT = Contract(
    args={"n_heads": HEADS},
    result=Result("H", torch.float32, read=lambda out, inputs: float64_accepted(out), reads="float64 accepted"),
    sizes={"H": 12},
    ones="H",
)
BIAS_CONTRACT = Contract(
    args={"n_heads": HEADS, "seq_len": Arg("size", "T")},
    result=Result(
        "H T T",
        torch.float32,
        read=lambda out, inputs: read_bias(out),
        reads="float64 accepted; any bias at or below -1e9 masks as -inf does",
    ),
    sizes={"H": 6, "T": 5},
    ones="H T",
)
BUCKET_CONTRACT = Contract(
    args={
        "relative_position": Arg("relative", "Tq Tk", dtypes=(torch.int64, torch.int32, torch.int16), bound="R"),
        "bidirectional": Arg("flag", default=True, values=(True, False)),
        "num_buckets": Arg("number", domain=">= 4", default=32, values=(32, 16)),
        "max_distance": Arg("number", domain=">= 32", default=128, values=(128, 64)),  # past every exact region here
    },
    result=Result("Tq Tk", torch.int64),
    sizes={"Tq": 5, "Tk": 7, "R": 200},
    ones="Tq Tk",
)

EXERCISES = [
    Exercise(
        id="alibi_slopes",
        advice=SLOPES_HELP,
        chapter=6,
        points=2,
        kind="function",
        reference=reference.alibi_slopes,
        check=check_alibi_slopes,
        oracle=oracle.slopes_in_bloom,
        mistakes={"non_power_of_two": alibi_slopes_naive, "wrong_sign": alibi_slopes_wrong_sign},
        difficulty=2,
        importance=2,
        minutes=10,
        no_device_pass=TAKES_NO_TENSOR,
        contract=SLOPES_CONTRACT,
    ),
    Exercise(
        id="alibi_bias",
        advice=BIAS_HELP,
        chapter=6,
        points=2,
        kind="function",
        reference=reference.alibi_bias,
        check=check_alibi_bias,
        oracle=oracle.bias_in_bloom,
        mistakes={
            "non_power_of_two": alibi_bias_naive,
            "wrong_sign": alibi_bias_wrong_sign,
            "missing_causal_mask": alibi_bias_missing_causal_mask,
        },
        difficulty=2,
        importance=2,
        minutes=10,
        no_device_pass=TAKES_NO_TENSOR,
        edges=("lengths",),
        contract=BIAS_CONTRACT,
    ),
    Exercise(
        id="t5_relative_bucket",
        chapter=6,
        points=2,
        kind="function",
        reference=reference.t5_relative_bucket,
        check=check_t5_relative_bucket,
        mistakes=BUCKET_MISTAKES,
        difficulty=2,
        importance=2,
        minutes=15,
        contract=BUCKET_CONTRACT,
    ),
]
