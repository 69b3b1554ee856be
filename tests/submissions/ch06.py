"""Chapter 06 submissions (ALiBi), written as students write them.

RIGHT: different correct implementations; every one must pass.
WRONG: (exercise id, the diagnosis it must get, the code); each is a real
mistake, and the check must name exactly that code.
"""

import math

import numpy as np
import torch

# --- right: alibi_slopes -----------------------------------------------------


def slopes_official(n_heads):
    """The authors' recursive get_slopes."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    def get_slopes(n):
        if math.log2(n).is_integer():
            return get_slopes_power_of_2(n)
        closest_power_of_2 = 2 ** math.floor(math.log2(n))
        return (
            get_slopes_power_of_2(closest_power_of_2)
            + get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
        )

    return torch.tensor(get_slopes(n_heads))


def slopes_bloom(n_heads):
    """BLOOM's build_alibi_tensor style: powers of a base, float32 torch throughout."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != n_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float32)
        extra = torch.pow(extra_base, torch.arange(1, 1 + 2 * (n_heads - closest), 2, dtype=torch.int32))
        slopes = torch.cat([slopes, extra])
    return slopes


def slopes_numpy(n_heads):
    """NumPy, float64, returned as it is."""
    closest = 2 ** int(np.floor(np.log2(n_heads)))
    first = 2.0 ** (-8.0 * np.arange(1, closest + 1) / closest)
    rest = 2.0 ** (-8.0 * np.arange(1, 2 * closest + 1) / (2 * closest))[0::2][: n_heads - closest]
    return torch.from_numpy(np.concatenate([first, rest]))


# --- wrong: alibi_slopes -----------------------------------------------------


def slopes_geometric_always(n_heads):
    return torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])


def slopes_power_of_two_only(n_heads):
    """Rounds the head count down and returns too few slopes."""
    closest = 2 ** math.floor(math.log2(n_heads))
    return torch.tensor([2 ** (-8 * (h + 1) / closest) for h in range(closest)])


def slopes_negative(n_heads):
    return -slopes_official(n_heads)


def slopes_from_zero(n_heads):
    """h starts at 0: the first slope is 1, the last 2^(-8(n-1)/n)."""
    return torch.tensor([2 ** (-8 * h / n_heads) for h in range(n_heads)])


def slopes_list(n_heads):
    return slopes_official(n_heads).tolist()


# --- right: alibi_bias -------------------------------------------------------


def bias_loop(n_heads, seq_len):
    slopes = slopes_official(n_heads)
    bias = torch.full((n_heads, seq_len, seq_len), float("-inf"))
    for h in range(n_heads):
        for i in range(seq_len):
            for j in range(i + 1):
                bias[h, i, j] = -slopes[h] * (i - j)
    return bias


def bias_triu_mask(n_heads, seq_len):
    """A relative-position matrix, then a triu mask, with torch.finfo.min as the mask value."""
    positions = torch.arange(seq_len)
    relative = positions[None, :] - positions[:, None]  # j - i
    bias = slopes_bloom(n_heads)[:, None, None] * relative[None].float()
    future = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
    return bias.masked_fill(future, torch.finfo(torch.float32).min)


# --- wrong: alibi_bias -------------------------------------------------------


def bias_geometric_always(n_heads, seq_len):
    slopes = slopes_geometric_always(n_heads)
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return (-slopes[:, None, None] * (i - j)).masked_fill(j > i, float("-inf"))


def bias_plus_sign(n_heads, seq_len):
    slopes = slopes_official(n_heads)
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return (slopes[:, None, None] * (i - j)).masked_fill(j > i, float("-inf"))


def bias_no_mask(n_heads, seq_len):
    slopes = slopes_official(n_heads)
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return -slopes[:, None, None] * (i - j)


def bias_symmetric(n_heads, seq_len):
    """The bidirectional form -m·|i - j|, with no mask."""
    slopes = slopes_official(n_heads)
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return -slopes[:, None, None] * (i - j).abs()


def bias_masked_with_zero(n_heads, seq_len):
    return torch.tril(bias_no_mask(n_heads, seq_len))


def bias_transposed(n_heads, seq_len):
    """Query and key axes swapped: the mask is below the diagonal."""
    return bias_loop(n_heads, seq_len).transpose(-1, -2)


def bias_heads_last(n_heads, seq_len):
    return bias_loop(n_heads, seq_len).permute(1, 2, 0)


# --- the catalogue -----------------------------------------------------------

RIGHT = {
    "alibi_slopes": [slopes_official, slopes_bloom, slopes_numpy],
    "alibi_bias": [bias_loop, bias_triu_mask],
}

WRONG = [
    ("alibi_slopes", "non_power_of_two", slopes_geometric_always),
    ("alibi_slopes", "non_power_of_two", slopes_power_of_two_only),
    ("alibi_slopes", "wrong_sign", slopes_negative),
    ("alibi_slopes", "slopes_from_zero", slopes_from_zero),
    ("alibi_slopes", "wrong_type", slopes_list),
    ("alibi_bias", "non_power_of_two", bias_geometric_always),
    ("alibi_bias", "wrong_sign", bias_plus_sign),
    ("alibi_bias", "missing_causal_mask", bias_no_mask),
    ("alibi_bias", "missing_causal_mask", bias_symmetric),
    ("alibi_bias", "missing_causal_mask", bias_masked_with_zero),
    ("alibi_bias", "wrong_values", bias_transposed),
    ("alibi_bias", "wrong_shape", bias_heads_last),
]


# --- issue 13: ports of the authors' and MPT's code, mistakes outside the catalogue ---


def slopes_mpt(n_heads):
    """MPT's gen_slopes: the next power of two, then the odd-indexed slopes first; flattened."""
    padded = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, padded + 1, dtype=torch.float32) * (8 / padded)
    slopes = 1.0 / torch.pow(2, m)
    if padded != n_heads:
        slopes = torch.concat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


def slopes_float64_then_cast(n_heads):
    closest = 2 ** math.floor(math.log2(n_heads))
    h = torch.arange(1, 2 * closest + 1, dtype=torch.float64)
    first = 2 ** (-8 * h[:closest] / closest)
    rest = (2 ** (-8 * h / (2 * closest)))[0::2][: n_heads - closest]
    return torch.cat([first, rest]).float()


def bias_einsum(n_heads, seq_len):
    positions = torch.arange(seq_len)
    relative = (positions[None, :] - positions[:, None]).float()  # j - i
    bias = torch.einsum("h,ij->hij", slopes_official(n_heads), relative)
    return bias.masked_fill(relative > 0, float("-inf"))


def bias_numpy(n_heads, seq_len):
    """NumPy in float64, -inf from np.where; returned as float64."""
    slopes = slopes_numpy(n_heads).numpy()
    i, j = np.arange(seq_len)[:, None], np.arange(seq_len)[None, :]
    bias = np.where(j > i, -np.inf, -slopes[:, None, None] * (i - j))
    return torch.from_numpy(bias)


RIGHT["alibi_slopes"] += [slopes_mpt, slopes_float64_then_cast]
RIGHT["alibi_bias"] += [bias_einsum, bias_numpy]


def slopes_negative_and_stretched(n_heads):
    return -slopes_geometric_always(n_heads)


def slopes_reversed(n_heads):
    return slopes_official(n_heads).flip(0)


def slopes_odd_extras(n_heads):
    """The extra heads take the 2nd, 4th, ... slopes of 2n' heads: those of n' heads again."""
    closest = 2 ** math.floor(math.log2(n_heads))
    power = lambda n: [2 ** (-8 * (h + 1) / n) for h in range(n)]
    return torch.tensor(power(closest) + power(2 * closest)[1::2][: n_heads - closest])


def slopes_negative_from_zero(n_heads):
    return -slopes_from_zero(n_heads)


def _bias_from(slopes, seq_len, *, mask=True):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    bias = -slopes[:, None, None] * (i - j)
    return bias.masked_fill(j > i, float("-inf")) if mask else bias


def bias_no_mask_plus_sign(n_heads, seq_len):
    return -_bias_from(slopes_official(n_heads), seq_len, mask=False)


def bias_no_mask_stretched(n_heads, seq_len):
    return _bias_from(slopes_geometric_always(n_heads), seq_len, mask=False)


def bias_plus_sign_stretched(n_heads, seq_len):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return (slopes_geometric_always(n_heads)[:, None, None] * (i - j)).masked_fill(j > i, float("-inf"))


def bias_fairseq_shortcut(n_heads, seq_len):
    """The authors' fairseq code: m_h · j for every query, the causal mask added on top."""
    j = torch.arange(seq_len)
    bias = slopes_official(n_heads)[:, None, None] * j[None, None, :].float()
    return bias.expand(n_heads, seq_len, seq_len).masked_fill(j[None, :] > j[:, None], float("-inf"))


def bias_mpt_port(n_heads, seq_len):
    """MPT's build_alibi_bias(full=False), expanded to (H, T, T): an offset per row, and MPT masks elsewhere."""
    bias = torch.arange(1 - seq_len, 1, dtype=torch.int32).view(1, 1, seq_len) * slopes_mpt(n_heads).view(n_heads, 1, 1)
    return bias.expand(n_heads, seq_len, seq_len)


def bias_mpt_full(n_heads, seq_len):
    """MPT's build_alibi_bias(full=True): -m_h · |i - j|, for an encoder."""
    positions = torch.arange(1 - seq_len, 1, dtype=torch.int32)
    distance = (positions.view(1, seq_len) - positions.view(seq_len, 1)).abs().mul(-1)
    return distance[None] * slopes_mpt(n_heads).view(n_heads, 1, 1)


def bias_heads_from_zero(n_heads, seq_len):
    return _bias_from(slopes_from_zero(n_heads), seq_len)


def bias_masked_with_minus_1e4(n_heads, seq_len):
    """HF's old extended attention mask value: -10000 is not a mask for this check."""
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return _bias_from(slopes_official(n_heads), seq_len, mask=False).masked_fill(j > i, -10000.0)


WRONG += [
    ("alibi_slopes", "wrong_sign", slopes_negative_and_stretched),
    ("alibi_slopes", "slopes_reversed", slopes_reversed),
    ("alibi_slopes", "non_power_of_two", slopes_odd_extras),
    ("alibi_slopes", "wrong_sign", slopes_negative_from_zero),
    ("alibi_bias", "missing_causal_mask", bias_no_mask_plus_sign),
    ("alibi_bias", "missing_causal_mask", bias_no_mask_stretched),
    ("alibi_bias", "wrong_sign", bias_plus_sign_stretched),
    ("alibi_bias", "bias_row_offset", bias_fairseq_shortcut),
    ("alibi_bias", "missing_causal_mask", bias_mpt_port),
    ("alibi_bias", "missing_causal_mask", bias_mpt_full),
    ("alibi_bias", "slopes_from_zero", bias_heads_from_zero),
    ("alibi_bias", "missing_causal_mask", bias_masked_with_minus_1e4),
]

# (exercise, diagnosis, a further finding in result.also, the code)
ALSO = [
    ("alibi_slopes", "wrong_sign", "non_power_of_two", slopes_negative_and_stretched),
    ("alibi_slopes", "slopes_reversed", "non_power_of_two", slopes_reversed),
    ("alibi_slopes", "wrong_sign", "slopes_from_zero", slopes_negative_from_zero),
    ("alibi_bias", "missing_causal_mask", "wrong_sign", bias_no_mask_plus_sign),
    ("alibi_bias", "missing_causal_mask", "non_power_of_two", bias_no_mask_stretched),
    ("alibi_bias", "wrong_sign", "non_power_of_two", bias_plus_sign_stretched),
    ("alibi_bias", "missing_causal_mask", "bias_row_offset", bias_mpt_port),
]


# --- issue 16: half precision is named as such, never as the rule for a head count;
# NaN behind the expected -inf is nan_or_inf ---------------------------------------------


def slopes_in_bfloat16(n_heads):
    return slopes_official(n_heads).bfloat16().float()  # "slopes are small numbers": rounded to 8 bits


def slopes_in_float16(n_heads):
    # two mistakes: float16, and the plain formula for every head count (6 heads: not the paper's rule)
    return torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)], dtype=torch.float16).float()


def bias_in_bfloat16(n_heads, seq_len):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    bias = slopes_official(n_heads).bfloat16()[:, None, None] * (j - i).bfloat16()  # the whole bias in bfloat16
    return bias.float().masked_fill(j > i, float("-inf"))


def bias_in_float16_finfo_mask(n_heads, seq_len):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    bias = slopes_official(n_heads).half()[:, None, None] * (j - i).half()
    return bias.float().masked_fill(j > i, torch.finfo(torch.float32).min)  # HF's mask value


def bias_slopes_in_bfloat16(n_heads, seq_len):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return (slopes_official(n_heads).bfloat16().float()[:, None, None] * (j - i)).masked_fill(j > i, float("-inf"))


def bias_zero_times_inf_mask(n_heads, seq_len):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    mask = (j > i).float() * float("-inf")  # 0 * -inf is NaN: every entry on and below the diagonal
    return slopes_official(n_heads)[:, None, None] * (j - i) + mask


def bias_inf_times_distance(n_heads, seq_len):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    future = float("-inf") * (j - i).clamp(min=0)  # -inf for j > i, but -inf * 0 = NaN on the diagonal
    return torch.where(j < i, slopes_official(n_heads)[:, None, None] * (j - i), future.expand(n_heads, -1, -1))


def bias_where_inf_mask(n_heads, seq_len):
    # a right mask made with torch.where, no arithmetic on the infinity: no NaN
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return torch.where(j > i, torch.tensor(float("-inf")), slopes_official(n_heads)[:, None, None] * (j - i))


RIGHT["alibi_bias"].append(bias_where_inf_mask)
WRONG += [
    ("alibi_slopes", "low_precision", slopes_in_bfloat16),
    ("alibi_slopes", "low_precision", slopes_in_float16),
    ("alibi_bias", "low_precision", bias_in_bfloat16),
    ("alibi_bias", "low_precision", bias_in_float16_finfo_mask),
    ("alibi_bias", "low_precision", bias_slopes_in_bfloat16),
    ("alibi_bias", "nan_or_inf", bias_zero_times_inf_mask),
    ("alibi_bias", "nan_or_inf", bias_inf_times_distance),
]
ALSO += [("alibi_slopes", "low_precision", "non_power_of_two", slopes_in_float16)]


# --- t5_relative_bucket (issue 22): T5's relative position buckets ---------------------------------


def bucket_like_transformers(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """transformers' T5Attention._relative_position_bucket, as a student copies its steps."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, if_large)


def bucket_loop_float64(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """One position at a time, math.log in float64."""
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    out = []
    for r in relative_position.flatten().tolist():
        offset = n if bidirectional and r > 0 else 0
        d = abs(r) if bidirectional else max(-r, 0)
        bucket = (
            d
            if d < exact
            else min(n - 1, exact + int(math.log(d / exact) / math.log(max_distance / exact) * (n - exact)))
        )
        out.append(offset + bucket)
    return torch.tensor(out, dtype=torch.long, device=relative_position.device).reshape(relative_position.shape)


def bucket_clamped_distance(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """Vectorised with clamps instead of where: the far distances clamped before the log, float32 as T5."""
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    side = (
        (relative_position > 0).long() * n if bidirectional else torch.zeros_like(relative_position, dtype=torch.long)
    )
    d = relative_position.long().abs() if bidirectional else (-relative_position.long()).clamp(min=0)
    far = exact + (torch.log(d.clamp(min=exact).float() / exact) / math.log(max_distance / exact) * (n - exact)).long()
    return side + torch.where(d < exact, d, far.clamp(max=n - 1))


def bucket_causal_abs(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """The decoder's path with abs(): keys after the query are counted as distances too."""
    if bidirectional:
        return bucket_like_transformers(relative_position, True, num_buckets, max_distance)
    return bucket_like_transformers(-relative_position.abs(), False, num_buckets, max_distance)


def bucket_no_sign_split(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """Halves the buckets, but forgets to put the keys after the query in the upper half."""
    if not bidirectional:
        return bucket_like_transformers(relative_position, False, num_buckets, max_distance)
    return bucket_like_transformers(
        -relative_position.abs(), False, num_buckets // 2, max_distance
    )  # |r| counted as a distance back


def bucket_query_minus_key(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return bucket_like_transformers(-relative_position, bidirectional, num_buckets, max_distance)


def bucket_exact_before_halving(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """max_exact from the full num_buckets, before the halving: 16 exact buckets of 16."""
    max_exact = num_buckets // 2
    n = num_buckets // 2 if bidirectional else num_buckets
    offset = (relative_position > 0).long() * n if bidirectional else 0
    d = relative_position.abs() if bidirectional else (-relative_position).clamp(min=0)
    if_large = (
        max_exact + (torch.log(d.float() / max_exact) / math.log(max_distance / max_exact) * (n - max_exact)).long()
    ).clamp(max=n - 1)
    return offset + torch.where(d < max_exact, d, if_large)


def bucket_rounded(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    offset = (relative_position > 0).long() * n if bidirectional else 0
    d = relative_position.abs() if bidirectional else (-relative_position).clamp(min=0)
    if_large = (
        exact + (torch.log(d.float() / exact) / math.log(max_distance / exact) * (n - exact)).round().long()
    ).clamp(max=n - 1)
    return offset + torch.where(d < exact, d, if_large)


def bucket_unclamped(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    offset = (relative_position > 0).long() * n if bidirectional else 0
    d = relative_position.abs() if bidirectional else (-relative_position).clamp(min=0)
    if_large = exact + (torch.log(d.float() / exact) / math.log(max_distance / exact) * (n - exact)).long()
    return offset + torch.where(d < exact, d, if_large)


def bucket_float(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return bucket_like_transformers(relative_position, bidirectional, num_buckets, max_distance).float()


def bucket_no_split_no_clamp(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """Two steps missing: the sign split and the clamp."""
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    d = relative_position.abs() if bidirectional else (-relative_position).clamp(min=0)
    if_large = exact + (torch.log(d.float() / exact) / math.log(max_distance / exact) * (n - exact)).long()
    return torch.where(d < exact, d, if_large)


RIGHT["t5_relative_bucket"] = [bucket_like_transformers, bucket_clamped_distance]
WRONG += [
    ("t5_relative_bucket", "bucket_sign_split_missing", bucket_no_sign_split),
    ("t5_relative_bucket", "bucket_direction_reversed", bucket_query_minus_key),
    ("t5_relative_bucket", "bucket_exact_region", bucket_exact_before_halving),
    ("t5_relative_bucket", "bucket_log_spacing", bucket_rounded),
    ("t5_relative_bucket", "bucket_not_clamped", bucket_unclamped),
    ("t5_relative_bucket", "wrong_dtype", bucket_float),
    ("t5_relative_bucket", "bucket_log_in_float64", bucket_loop_float64),
    ("t5_relative_bucket", "wrong_values", bucket_causal_abs),
]
ALSO += [("t5_relative_bucket", "bucket_sign_split_missing", "bucket_not_clamped", bucket_no_split_no_clamp)]


# INDEPENDENT: which catalogue mistakes are independent aspects of the code (each pair made together by an ALSO
# submission); ONE_ASPECT: why an exercise's mistakes are all values of one choice. tests/test_also_wrong.py reads both.
INDEPENDENT = {
    # ALiBi: the slopes' sign, the rule for a head count that is not a power of two, the mask
    "alibi_slopes": [("wrong_sign", "non_power_of_two")],
    "alibi_bias": [
        ("missing_causal_mask", "wrong_sign"),
        ("missing_causal_mask", "non_power_of_two"),
        ("wrong_sign", "non_power_of_two"),
    ],
    # T5's buckets: the split by sign, and the clamp of the far distances (two separate steps)
    "t5_relative_bucket": [("bucket_sign_split_missing", "bucket_not_clamped")],
}


# --- review B4/B5: a float32 log written another way lands where float64's does: told so, not "float64" ---------


def bucket_log_difference(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    offset = (relative_position > 0).long() * n if bidirectional else 0
    d = relative_position.abs() if bidirectional else (-relative_position).clamp(min=0)
    scaled = (torch.log(d.float()) - math.log(exact)) / math.log(max_distance / exact) * (n - exact)
    return offset + torch.where(d < exact, d, (exact + scaled.long()).clamp(max=n - 1))


def bucket_log2(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    offset = (relative_position > 0).long() * n if bidirectional else 0
    d = relative_position.abs() if bidirectional else (-relative_position).clamp(min=0)
    scaled = torch.log2(d.float() / exact) / math.log2(max_distance / exact) * (n - exact)
    return offset + torch.where(d < exact, d, (exact + scaled.long()).clamp(max=n - 1))


WRONG += [
    ("t5_relative_bucket", "bucket_log_in_float64", bucket_log_difference),
    ("t5_relative_bucket", "bucket_log_in_float64", bucket_log2),
]
