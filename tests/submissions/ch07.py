"""Chapter 07 submissions (RoPE scaling for long context), written as students write them.

RIGHT: different correct implementations; every one must pass, the library's own
functions wrapped to the exercises' signatures among them.
WRONG: (exercise id, the diagnosis it must get, the code); each is a real
mistake, and the check must name exactly that code.
"""

import math

import numpy as np
import torch


def theta(d, base):
    """θ_i = base^(-2i/d), float32, the pow form."""
    return 1.0 / (base ** (torch.arange(0, d, 2).float() / d))


def theta_exp(d, base):
    """The same, exp-log, computed in float64 and rounded once."""
    return torch.exp(-math.log(base) * torch.arange(0, d, 2, dtype=torch.float64) / d).float()


def library(rope_type, d, base, seq_len=None, max_position_embeddings=4096, **parameters):
    """transformers' own ROPE_INIT_FUNCTIONS[rope_type] on a LlamaConfig with these numbers."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(
        hidden_size=2 * d,
        num_attention_heads=2,
        head_dim=d,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_type": rope_type, "rope_theta": base, **parameters},
    )
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)


# --- linear_scaling ------------------------------------------------------------------


def linear_pow(d, base, factor):
    return theta(d, base) / factor, 1.0


def linear_positions(d, base, factor):
    """Interpolation as Chen et al. write it, on the positions: θ·(m/s) for m = 1, read off at m = 1."""
    m = torch.tensor(1.0, dtype=torch.float64)
    return (theta_exp(d, base).double() * (m / factor)).float(), 1.0


def linear_library(d, base, factor):
    return library("linear", d, base, factor=factor)


def linear_times(d, base, factor):
    return theta(d, base) * factor, 1.0


def linear_no_two(d, base, factor):
    return 1.0 / base ** (torch.arange(d // 2).float() / d) / factor, 1.0


def linear_float64(d, base, factor):
    return 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d) / factor, 1.0


def linear_list(d, base, factor):
    return [1.0 / base ** (2 * i / d) / factor for i in range(d // 2)], 1.0


def linear_scale_is_factor(d, base, factor):
    """Returns the factor as the attention scale: "it's the scaling factor"."""
    return theta(d, base) / factor, float(factor)


def linear_both_halves(d, base, factor):
    inv = theta(d, base) / factor
    return torch.cat([inv, inv]), 1.0


def linear_raised_base(d, base, factor):
    """Position interpolation confused with a raised base: base × factor."""
    return theta(d, base * factor), 1.0


def linear_tensor_scale(d, base, factor):
    return theta(d, base) / factor, torch.tensor(1.0)


def linear_only_inv_freq(d, base, factor):
    return theta(d, base) / factor


# --- ntk_scaling ---------------------------------------------------------------------


def ntk_pow(d, base, factor):
    return theta(d, base * factor ** (d / (d - 2))), 1.0


def ntk_loop(d, base, factor):
    """A loop over the pairs, in Python floats."""
    new_base = base * factor ** (d / (d - 2))
    return torch.tensor([new_base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float32), 1.0


def ntk_log_space(d, base, factor):
    """ln base' = ln base + d/(d-2)·ln s, all in logs."""
    log_base = math.log(base) + d / (d - 2) * math.log(factor)
    return torch.exp(-log_base * torch.arange(0, d, 2, dtype=torch.float64) / d).float(), 1.0


def ntk_base_times_factor(d, base, factor):
    return theta(d, base * factor), 1.0


def ntk_inverted_exponent(d, base, factor):
    return theta(d, base * factor ** ((d - 2) / d)), 1.0


def ntk_divided_base(d, base, factor):
    return theta(d, base / factor ** (d / (d - 2))), 1.0


def ntk_and_divided(d, base, factor):
    """The NTK base, and every pair divided by the factor on top."""
    return theta(d, base * factor ** (d / (d - 2))) / factor, 1.0


def ntk_llama_exponent(d, base, factor):
    """The exponent as a blog post for Llama writes it: 64/63, d/(d-2) for d = 128."""
    return theta(d, base * factor ** (64 / 63)), 1.0


# --- dynamic_ntk_scaling --------------------------------------------------------------


def dynamic_max(d, base, factor, seq_len, original_max_len):
    seq_len = max(seq_len, original_max_len)
    new_base = base * (factor * seq_len / original_max_len - (factor - 1)) ** (d / (d - 2))
    return theta(d, new_base), 1.0


def dynamic_branch(d, base, factor, seq_len, original_max_len):
    """An explicit branch, exp-log frequencies."""
    if seq_len <= original_max_len:
        return theta_exp(d, base), 1.0
    alpha = factor * seq_len / original_max_len - (factor - 1)
    return theta_exp(d, base * alpha ** (d / (d - 2))), 1.0


def dynamic_library(d, base, factor, seq_len, original_max_len):
    return library("dynamic", d, base, seq_len=seq_len, max_position_embeddings=original_max_len, factor=factor)


def dynamic_unclamped(d, base, factor, seq_len, original_max_len):
    new_base = base * (factor * seq_len / original_max_len - (factor - 1)) ** (d / (d - 2))
    return theta(d, new_base), 1.0


def dynamic_always(d, base, factor, seq_len, original_max_len):
    """The static NTK factor, whatever the length."""
    return theta(d, base * factor ** (d / (d - 2))), 1.0


def dynamic_ratio_only(d, base, factor, seq_len, original_max_len):
    """Forgets the factor: the length ratio alone."""
    if seq_len <= original_max_len:
        return theta(d, base), 1.0
    return theta(d, base * (seq_len / original_max_len) ** (d / (d - 2))), 1.0


def dynamic_ratio_unclamped(d, base, factor, seq_len, original_max_len):
    """Two mistakes: the length ratio alone past L, and a change below L too (a ratio under 1)."""
    return theta(d, base * (seq_len / original_max_len) ** (d / (d - 2))), 1.0


def dynamic_paper_scale(d, base, factor, seq_len, original_max_len):
    """The YaRN paper's Dynamic Scaling, s = max(1, T/L), on a raised base."""
    s = max(1.0, seq_len / original_max_len)
    return theta(d, base * s ** (d / (d - 2))), 1.0


def dynamic_qwen(d, base, factor, seq_len, original_max_len):
    """Qwen (1)'s dynamic NTK: the ratio rounded up to a power of two."""
    if seq_len <= original_max_len:
        return theta(d, base), 1.0
    alpha = 2 ** math.ceil(math.log(seq_len / original_max_len, 2) + 1) - 1
    return theta(d, base * alpha ** (d / (d - 2))), 1.0


def dynamic_llama2_length(d, base, factor, seq_len, original_max_len):
    """Llama 2's 4096 written where the trained length belongs."""
    seq_len = max(seq_len, 4096)
    return theta(d, base * (factor * seq_len / 4096 - (factor - 1)) ** (d / (d - 2))), 1.0


def dynamic_llama_exponent(d, base, factor, seq_len, original_max_len):
    seq_len = max(seq_len, original_max_len)
    return theta(d, base * (factor * seq_len / original_max_len - (factor - 1)) ** (64 / 63)), 1.0


def dynamic_no_exponent(d, base, factor, seq_len, original_max_len):
    seq_len = max(seq_len, original_max_len)
    return theta(d, base * (factor * seq_len / original_max_len - (factor - 1))), 1.0


# --- yarn_scaling --------------------------------------------------------------------


def yarn_hf(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """transformers' code, copied into one function."""

    def find_correction_dim(num_rotations):
        return (d * math.log(original_max_len / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(find_correction_dim(beta_fast)), 0)
    high = min(math.ceil(find_correction_dim(beta_slow)), d - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, d, 2).float() / d)
    extrapolation_factor = 1 - ramp
    inv_freq = 1.0 / (factor * pos_freqs) * (1 - extrapolation_factor) + 1.0 / pos_freqs * extrapolation_factor
    return inv_freq, (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


def yarn_by_turns(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """Reasoning per pair: turns r_i = L / λ_i; edges as whole pairs; a loop."""
    edge = lambda turns: d * math.log(original_max_len / (2 * math.pi * turns)) / (2 * math.log(base))
    low, high = max(math.floor(edge(beta_fast)), 0), min(math.ceil(edge(beta_slow)), d - 1)
    width = max(high - low, 0.001)
    values = []
    for i in range(d // 2):
        t = base ** (-2 * i / d)
        gamma = min(max((i - low) / width, 0.0), 1.0)  # 0: keep, 1: interpolate
        values.append(t / factor * gamma + t * (1 - gamma))
    return torch.tensor(values, dtype=torch.float32), 1.0 + 0.1 * math.log(max(factor, 1.0))


def yarn_library(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return library(
        "yarn",
        d,
        base,
        max_position_embeddings=math.ceil(original_max_len * factor),
        factor=factor,
        original_max_position_embeddings=original_max_len,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
    )


def _yarn_with(
    d,
    base,
    factor,
    original_max_len,
    beta_fast=32.0,
    beta_slow=1.0,
    turn=2 * math.pi,
    rounding=True,
    swap=False,
    reverse=False,
    times=False,
    scale=None,
):
    edge = lambda turns: d * math.log(original_max_len / (turn * turns)) / (2 * math.log(base))
    fast, slow = (beta_slow, beta_fast) if swap else (beta_fast, beta_slow)
    low, high = edge(fast), edge(slow)
    if rounding:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    ramp = ((torch.arange(d // 2).float() - low) / ((high - low) or 0.001)).clamp(0, 1)
    if reverse:
        ramp = 1 - ramp
    t = theta(d, base)
    inv_freq = (t * factor if times else t / factor) * ramp + t * (1 - ramp)
    return inv_freq, (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0) if scale is None else scale(factor)


def yarn_reversed(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, reverse=True)


def yarn_no_two_pi(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, turn=1.0)


def yarn_betas_swapped(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, swap=True)


def yarn_default_betas(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """Ignores the betas given: 32 and 1 hard-coded."""
    return _yarn_with(d, base, factor, original_max_len)


def yarn_fractional_edges(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, rounding=False)


def yarn_rounded_edges(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """round() where floor and ceil belong."""
    edge = lambda turns: d * math.log(original_max_len / (2 * math.pi * turns)) / (2 * math.log(base))
    low, high = max(round(edge(beta_fast)), 0), min(round(edge(beta_slow)), d - 1)
    ramp = ((torch.arange(d // 2).float() - low) / ((high - low) or 0.001)).clamp(0, 1)
    t = theta(d, base)
    return t / factor * ramp + t * (1 - ramp), (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


def yarn_times_factor(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, times=True)


def yarn_no_temperature(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, scale=lambda s: 1.0)


def yarn_temperature_squared(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """Returns 1/t, the scores' factor, instead of √(1/t)."""
    return _yarn_with(
        d, base, factor, original_max_len, beta_fast, beta_slow, scale=lambda s: (0.1 * math.log(s) + 1) ** 2
    )


def yarn_temperature_log10(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, scale=lambda s: 0.1 * math.log10(s) + 1)


def yarn_half_clamp(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """The slow edge clamped to the last pair, d/2 - 1, "since there are only d/2 pairs"."""
    edge = lambda turns: d * math.log(original_max_len / (2 * math.pi * turns)) / (2 * math.log(base))
    low, high = max(math.floor(edge(beta_fast)), 0), min(math.ceil(edge(beta_slow)), d // 2 - 1)
    ramp = ((torch.arange(d // 2).float() - low) / ((high - low) or 0.001)).clamp(0, 1)
    t = theta(d, base)
    return t / factor * ramp + t * (1 - ramp), (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


def yarn_no_guard(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """The temperature without its `factor > 1` guard: right on the method's domain, factor >= 1 (issue 41)."""
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, scale=lambda s: 0.1 * math.log(s) + 1)


def yarn_paper_gamma(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """The paper's §3.2, γ(r) = (r - α)/(β - α) on the turns r = L/λ, α = beta_slow, β = beta_fast."""
    t = theta(d, base)
    r = original_max_len / (2 * math.pi / t)
    gamma = ((r - beta_slow) / (beta_fast - beta_slow)).clamp(0, 1)
    return (1 - gamma) * t / factor + gamma * t, (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


def yarn_llama2_length(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """4096, Llama 2's trained length, where original_max_len belongs."""
    return _yarn_with(d, base, factor, 4096, beta_fast, beta_slow)


def yarn_stretched_length(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """The bands from max_position_embeddings, the stretched length."""
    return _yarn_with(d, base, factor, original_max_len * factor, beta_fast, beta_slow)


def yarn_float64(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    inv_freq, scale = yarn_hf(d, base, factor, original_max_len, beta_fast, beta_slow)
    return inv_freq.double(), scale


def yarn_numpy(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    inv_freq, scale = yarn_hf(d, base, factor, original_max_len, beta_fast, beta_slow)
    return inv_freq.numpy(), scale


# --- llama3_scaling ------------------------------------------------------------------


def llama3_meta(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """Meta's apply_scaling (llama-models), a loop over the frequencies."""
    freqs = theta(d, base)
    low_freq_wavelen = original_max_len / low_freq_factor
    high_freq_wavelen = original_max_len / high_freq_factor
    new_freqs = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            new_freqs.append(freq)
        elif wavelen > low_freq_wavelen:
            new_freqs.append(freq / factor)
        else:
            smooth = (original_max_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            new_freqs.append((1 - smooth) * freq / factor + smooth * freq)
    return torch.tensor(new_freqs, dtype=freqs.dtype), 1.0


def llama3_vectorised(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """One clamp does the three bands: the weight on θ is 0 past the long edge, 1 past the short one."""
    t = theta_exp(d, base).double()
    smooth = ((original_max_len * t / (2 * math.pi) - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(
        0, 1
    )
    return ((1 - smooth) * t / factor + smooth * t).float(), 1.0


def llama3_library(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    return library(
        "llama3",
        d,
        base,
        max_position_embeddings=math.ceil(original_max_len * factor),
        factor=factor,
        low_freq_factor=low_freq_factor,
        high_freq_factor=high_freq_factor,
        original_max_position_embeddings=original_max_len,
    )


def _llama3_with(
    d,
    base,
    factor,
    low_freq_factor,
    high_freq_factor,
    original_max_len,
    turn=2 * math.pi,
    edges=None,
    reverse=False,
    times=False,
):
    t = theta(d, base)
    wavelen = turn / t
    long_edge, short_edge = edges or (original_max_len / low_freq_factor, original_max_len / high_freq_factor)
    smooth = (original_max_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    if reverse:
        smooth = 1 - smooth
    slow = t * factor if times else t / factor
    out = torch.where(wavelen > long_edge, slow, t)
    middle = (wavelen >= short_edge) & (wavelen <= long_edge)
    return torch.where(middle, (1 - smooth) * slow + smooth * t, out), 1.0


def llama3_no_two_pi(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    return _llama3_with(d, base, factor, low_freq_factor, high_freq_factor, original_max_len, turn=1.0)


def llama3_edges_swapped(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    L = original_max_len
    return _llama3_with(
        d, base, factor, low_freq_factor, high_freq_factor, L, edges=(L / high_freq_factor, L / low_freq_factor)
    )


def llama3_edges_multiplied(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    L = original_max_len
    return _llama3_with(
        d, base, factor, low_freq_factor, high_freq_factor, L, edges=(L * low_freq_factor, L * high_freq_factor)
    )


def llama3_smooth_reversed(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    return _llama3_with(d, base, factor, low_freq_factor, high_freq_factor, original_max_len, reverse=True)


def llama3_times_factor(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    return _llama3_with(d, base, factor, low_freq_factor, high_freq_factor, original_max_len, times=True)


def llama3_two_bands(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """Keeps the short wavelengths, divides everything else: the blend forgotten."""
    t = theta(d, base)
    return torch.where(2 * math.pi / t < original_max_len / high_freq_factor, t, t / factor), 1.0


def llama3_meta_constants(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """Meta's apply_scaling with its constants left in: bands 1 and 4, 8192 tokens."""
    return llama3_meta(d, base, factor, 1.0, 4.0, original_max_len)


def llama3_trained_8192(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    return llama3_meta(d, base, factor, low_freq_factor, high_freq_factor, 8192)


def llama3_stretched_length(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """The bands from max_position_embeddings = factor × original."""
    return llama3_meta(d, base, factor, low_freq_factor, high_freq_factor, original_max_len * factor)


def llama3_float64(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    inv_freq, scale = llama3_vectorised(d, base, factor, low_freq_factor, high_freq_factor, original_max_len)
    return inv_freq.double(), scale


def llama3_numpy_scale(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """A NumPy float as the scale is a float (np.float64 subclasses it): right."""
    inv_freq, _ = llama3_meta(d, base, factor, low_freq_factor, high_freq_factor, original_max_len)
    return inv_freq, np.float64(1.0)


RIGHT = {
    "linear_scaling": [linear_pow, linear_positions, linear_library],
    "ntk_scaling": [ntk_pow, ntk_loop, ntk_log_space],
    "dynamic_ntk_scaling": [dynamic_max, dynamic_branch, dynamic_library],
    "yarn_scaling": [yarn_hf, yarn_by_turns, yarn_library, yarn_no_guard],
    "llama3_scaling": [llama3_meta, llama3_vectorised, llama3_library, llama3_numpy_scale],
}

WRONG = [
    ("linear_scaling", "factor_inverted", linear_times),
    ("linear_scaling", "wrong_exponent", linear_no_two),
    ("linear_scaling", "wrong_dtype", linear_float64),
    ("linear_scaling", "wrong_type", linear_list),
    ("linear_scaling", "wrong_type", linear_tensor_scale),
    ("linear_scaling", "wrong_type", linear_only_inv_freq),
    ("linear_scaling", "wrong_shape", linear_both_halves),
    ("linear_scaling", "wrong_values", linear_raised_base),
    ("ntk_scaling", "wrong_values", ntk_and_divided),
    ("linear_scaling", "unexpected_attention_scale", linear_scale_is_factor),
    ("ntk_scaling", "ntk_wrong_exponent", ntk_base_times_factor),
    ("ntk_scaling", "ntk_wrong_exponent", ntk_inverted_exponent),
    ("ntk_scaling", "factor_inverted", ntk_divided_base),
    ("ntk_scaling", "head_size_hard_coded", ntk_llama_exponent),
    ("dynamic_ntk_scaling", "dynamic_wrong_scale", dynamic_paper_scale),
    ("dynamic_ntk_scaling", "dynamic_wrong_scale", dynamic_qwen),
    ("dynamic_ntk_scaling", "trained_length_hard_coded", dynamic_llama2_length),
    ("dynamic_ntk_scaling", "head_size_hard_coded", dynamic_llama_exponent),
    ("dynamic_ntk_scaling", "scaled_within_original_length", dynamic_unclamped),
    ("dynamic_ntk_scaling", "scaled_within_original_length", dynamic_always),
    ("dynamic_ntk_scaling", "dynamic_wrong_scale", dynamic_ratio_only),
    ("dynamic_ntk_scaling", "ntk_wrong_exponent", dynamic_no_exponent),
    ("yarn_scaling", "ramp_reversed", yarn_reversed),
    ("yarn_scaling", "wavelength_without_2pi", yarn_no_two_pi),
    ("yarn_scaling", "wrong_band_edges", yarn_betas_swapped),
    ("yarn_scaling", "band_factor_hard_coded", yarn_default_betas),
    ("yarn_scaling", "yarn_edge_clamped_to_half", yarn_half_clamp),
    ("yarn_scaling", "paper_ramp", yarn_paper_gamma),
    ("yarn_scaling", "trained_length_hard_coded", yarn_llama2_length),
    ("yarn_scaling", "band_from_stretched_length", yarn_stretched_length),
    ("yarn_scaling", "yarn_not_truncated", yarn_fractional_edges),
    ("yarn_scaling", "yarn_not_truncated", yarn_rounded_edges),
    ("yarn_scaling", "factor_inverted", yarn_times_factor),
    ("yarn_scaling", "missing_temperature", yarn_no_temperature),
    ("yarn_scaling", "wrong_temperature", yarn_temperature_squared),
    ("yarn_scaling", "wrong_temperature", yarn_temperature_log10),
    ("yarn_scaling", "wrong_dtype", yarn_float64),
    ("yarn_scaling", "wrong_type", yarn_numpy),
    ("llama3_scaling", "wavelength_without_2pi", llama3_no_two_pi),
    ("llama3_scaling", "missing_middle_band", llama3_edges_swapped),
    ("llama3_scaling", "wrong_band_edges", llama3_edges_multiplied),
    ("llama3_scaling", "ramp_reversed", llama3_smooth_reversed),
    ("llama3_scaling", "factor_inverted", llama3_times_factor),
    ("llama3_scaling", "wrong_dtype", llama3_float64),
    ("llama3_scaling", "missing_middle_band", llama3_two_bands),
    ("llama3_scaling", "band_factor_hard_coded", llama3_meta_constants),
    ("llama3_scaling", "trained_length_hard_coded", llama3_trained_8192),
    ("llama3_scaling", "band_from_stretched_length", llama3_stretched_length),
]


# --- two independent mistakes: the first is the diagnosis, the other is listed -----------


def yarn_reversed_no_temperature(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    return _yarn_with(d, base, factor, original_max_len, beta_fast, beta_slow, reverse=True, scale=lambda s: 1.0)


def linear_times_with_factor_scale(d, base, factor):
    return theta(d, base) * factor, float(factor)


ALSO = [
    ("yarn_scaling", "ramp_reversed", "missing_temperature", yarn_reversed_no_temperature),
    ("dynamic_ntk_scaling", "scaled_within_original_length", "dynamic_wrong_scale", dynamic_ratio_unclamped),
    ("linear_scaling", "factor_inverted", "unexpected_attention_scale", linear_times_with_factor_scale),
]


# INDEPENDENT: which catalogue mistakes are independent aspects of the code (each pair made together by an ALSO
# submission); ONE_ASPECT: why an exercise's mistakes are all values of one choice. tests/test_also_wrong.py reads both.
INDEPENDENT = {
    # dynamic NTK: what happens up to the trained length, and what past it (two sides of one if)
    "dynamic_ntk_scaling": [("scaled_within_original_length", "dynamic_wrong_scale")],
    # YaRN: which pairs are interpolated (the ramp), and the attention temperature (a second output)
    "yarn_scaling": [("ramp_reversed", "missing_temperature")],
}
ONE_ASPECT = {
    "linear_scaling": "factor_inverted and wrong_exponent are two wrong values of the one frequency vector, θ_i/s: "
    "its attention scale, the other output, has no catalogue mistake",
    "ntk_scaling": "factor_inverted, ntk_wrong_exponent and head_size_hard_coded are answers to the one question "
    "'what is the new base'",
    "llama3_scaling": "its mistakes all move the one piecewise rule that maps each θ_i (the bands' edges and their "
    "number, the blend's direction, the wavelength, the factor, a constant for an argument): the scale it returns is "
    "always 1.0",
}


# --- issue 41: YaRN on its domain (factor >= 1), where the band edges meet ----------------------------


def yarn_deepseek_v3(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """DeepSeek-V3's precompute_freqs_cis (inference/model.py): YaRN applied only when extending
    (max_seq_len > original_seq_len, here factor > 1), mscale 0.1·ln(factor) + 1 likewise."""

    def find_correction_dim(num_rotations, dim, base, max_seq_len):
        return dim * math.log(max_seq_len / (num_rotations * 2 * math.pi)) / (2 * math.log(base))

    def find_correction_range(low_rot, high_rot, dim, base, max_seq_len):
        low = math.floor(find_correction_dim(low_rot, dim, base, max_seq_len))
        high = math.ceil(find_correction_dim(high_rot, dim, base, max_seq_len))
        return max(low, 0), min(high, dim - 1)

    def linear_ramp_factor(min, max, dim):
        if min == max:
            max += 0.001
        linear_func = (torch.arange(dim, dtype=torch.float32) - min) / (max - min)
        return torch.clamp(linear_func, 0, 1)

    freqs = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    mscale = 1.0
    if factor > 1:
        low, high = find_correction_range(beta_fast, beta_slow, d, base, original_max_len)
        smooth = 1 - linear_ramp_factor(low, high, d // 2)
        freqs = freqs / factor * (1 - smooth) + freqs * smooth
        mscale = 0.1 * math.log(factor) + 1.0
    return freqs, mscale


def yarn_no_edge_guard(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """transformers' code without `if low == high: high += 0.001`."""
    edge = lambda turns: d * math.log(original_max_len / (2 * math.pi * turns)) / (2 * math.log(base))
    low, high = max(math.floor(edge(beta_fast)), 0), min(math.ceil(edge(beta_slow)), d - 1)
    ramp = ((torch.arange(d // 2).float() - low) / (high - low)).clamp(0, 1)
    t = theta(d, base)
    return t / factor * ramp + t * (1 - ramp), (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


def yarn_guard_before_clamp(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """The guard on the rounded edges, before they are clamped: clamping can still make them meet."""
    edge = lambda turns: d * math.log(original_max_len / (2 * math.pi * turns)) / (2 * math.log(base))
    low, high = math.floor(edge(beta_fast)), math.ceil(edge(beta_slow))
    if low == high:
        high += 0.001
    low, high = max(low, 0), min(high, d - 1)
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    t = theta(d, base)
    return t * (1 - ramp) + t / factor * ramp, (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


def yarn_loop_no_guard(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=1.0):
    """A loop over the pairs in Python floats, no guard: the ramp's division raises where the edges meet."""
    edge = lambda turns: d * math.log(original_max_len / (2 * math.pi * turns)) / (2 * math.log(base))
    low, high = max(math.floor(edge(beta_fast)), 0), min(math.ceil(edge(beta_slow)), d - 1)
    values = []
    for i in range(d // 2):
        t = base ** (-2 * i / d)
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        values.append(t / factor * ramp + t * (1 - ramp))
    return torch.tensor(values, dtype=torch.float32), (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


RIGHT["yarn_scaling"].append(yarn_deepseek_v3)
WRONG += [
    ("yarn_scaling", "nan_or_inf", yarn_no_edge_guard),
    ("yarn_scaling", "nan_or_inf", yarn_guard_before_clamp),
    ("yarn_scaling", "raised", yarn_loop_no_guard),
]


def yarn_beta_fast_64(d, base, factor, original_max_len, beta_fast=64.0, beta_slow=1.0):
    """A default beta_fast of 64, copied from a config that sets it."""
    return yarn_hf(d, base, factor, original_max_len, beta_fast, beta_slow)


def yarn_deepseek_beta_slow_2(d, base, factor, original_max_len, beta_fast=32.0, beta_slow=2.0):
    """DeepSeek-V3's code with beta_slow defaulting to 2 instead of 1."""
    return yarn_deepseek_v3(d, base, factor, original_max_len, beta_fast, beta_slow)


WRONG += [
    ("yarn_scaling", "default_changed", yarn_beta_fast_64),
    ("yarn_scaling", "default_changed", yarn_deepseek_beta_slow_2),
]


# Review of 2026-11-27 (N5, M6, M7): NTK's base divided, Llama 3.1's edges multiplied the other way, its blend linear in λ.


def ntk_negative_exponent(d, base, factor):
    """The base raised to factor^(-d/(d-2)): a smaller base, written as a power."""
    return theta(d, base * factor ** (-d / (d - 2))), 1.0


def llama3_edges_multiplied_other_way(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """Both edges multiplied by the band factors, the long edge by high_freq_factor."""
    L = original_max_len
    return _llama3_with(
        d, base, factor, low_freq_factor, high_freq_factor, L, edges=(L * high_freq_factor, L * low_freq_factor)
    )


def llama3_smooth_in_wavelength(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """Meta's loop with the blend weight read along the wavelength, from the long edge to the short one."""
    freqs = theta(d, base)
    low_freq_wavelen = original_max_len / low_freq_factor
    high_freq_wavelen = original_max_len / high_freq_factor
    new_freqs = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            new_freqs.append(freq)
        elif wavelen > low_freq_wavelen:
            new_freqs.append(freq / factor)
        else:
            smooth = (low_freq_wavelen - wavelen) / (low_freq_wavelen - high_freq_wavelen)
            new_freqs.append((1 - smooth) * freq / factor + smooth * freq)
    return torch.tensor(new_freqs, dtype=freqs.dtype), 1.0


def llama3_clamped_wavelength_ramp(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
    """One clamp, as in llama3_vectorised, on a ramp over the wavelength."""
    t = theta(d, base)
    wavelength = 2 * math.pi / t
    long_edge, short_edge = original_max_len / low_freq_factor, original_max_len / high_freq_factor
    keep = ((long_edge - wavelength) / (long_edge - short_edge)).clamp(0, 1)
    return (1 - keep) * t / factor + keep * t, 1.0


WRONG += [
    ("ntk_scaling", "factor_inverted", ntk_negative_exponent),
    ("llama3_scaling", "wrong_band_edges", llama3_edges_multiplied_other_way),
    ("llama3_scaling", "blend_linear_in_wavelength", llama3_smooth_in_wavelength),
    ("llama3_scaling", "blend_linear_in_wavelength", llama3_clamped_wavelength_ramp),
]


def ntk_base_raised(d, base, factor):
    """Review N6: the base raised to d/(d-2), then multiplied by the factor."""
    return theta(d, base ** (d / (d - 2)) * factor), 1.0


def ntk_factor_outside_power(d, base, factor):
    """The factor's power written around the product: (base · factor)^(d/(d-2))."""
    return theta(d, (base * factor) ** (d / (d - 2))), 1.0


WRONG += [
    ("ntk_scaling", "wrong_values", ntk_base_raised),
    ("ntk_scaling", "wrong_values", ntk_factor_outside_power),
]
