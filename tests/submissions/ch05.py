"""Chapter 05 submissions (RoPE), written as students write them.

RIGHT: different correct implementations; every one must pass.
WRONG: (exercise id, the diagnosis it must get, the code); each is a real
mistake, and the check must name exactly that code.
"""

import math

import numpy as np
import torch
import torch.nn as nn

# --- right: rope_cache -------------------------------------------------------


def cache_hf_float32(head_dim, max_len, base=10000.0):
    # HF LlamaRotaryEmbedding: float32 throughout
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    t = torch.arange(max_len, dtype=torch.int64).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_exp_log_float64(head_dim, max_len, base=10000.0):
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    theta = torch.exp(-2 * i / head_dim * math.log(base))
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * theta[None, :]
    angles = angles.repeat(1, 2)
    return angles.cos().to(torch.float32), angles.sin().to(torch.float32)


def cache_loop(head_dim, max_len, base=10000.0):
    half = head_dim // 2
    cos = torch.empty(max_len, head_dim)
    sin = torch.empty(max_len, head_dim)
    thetas = [base ** (-2 * i / head_dim) for i in range(half)]
    rows_c, rows_s = [], []
    for m in range(max_len):
        angles = [m * theta for theta in thetas] * 2
        rows_c.append([math.cos(a) for a in angles])
        rows_s.append([math.sin(a) for a in angles])
    cos[:] = torch.tensor(rows_c)
    sin[:] = torch.tensor(rows_s)
    return cos, sin


# --- right: rotate_half ------------------------------------------------------


def rotate_half_slices(x):
    d = x.shape[-1]
    return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)


def rotate_half_roll(x):
    half = x.shape[-1] // 2
    sign = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    sign[:half] = -1
    return torch.roll(x, shifts=half, dims=-1) * sign


def rotate_half_hf(x):
    """Rotates half the hidden dims of the input. (transformers' modeling_llama, verbatim)"""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """transformers' modeling_llama, verbatim (importing transformers inside a check takes seconds)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half_hf(q) * sin)
    k_embed = (k * cos) + (rotate_half_hf(k) * sin)
    return q_embed, k_embed


def rotate_every_two_gptj(x):
    """transformers' modeling_gptj, verbatim."""
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)  # in einsum notation: rearrange(x, '... d j -> ... (d j)')


# --- right: apply_rope -------------------------------------------------------


def apply_rope_hf(q, k, cos, sin, positions=None):
    if positions is None:
        positions = torch.arange(q.shape[-2], device=q.device)
    if positions.dim() == 1:
        positions = positions[None, :]  # (1, T): HF's position_ids
    c = cos[positions].to(q.dtype)  # (1 or B, T, Dh)
    s = sin[positions].to(q.dtype)
    return apply_rotary_pos_emb(q, k, c, s, unsqueeze_dim=1)


def apply_rope_explicit_pairs(q, k, cos, sin, positions=None):
    T, d = q.shape[-2], q.shape[-1]
    c = cos[:T] if positions is None else cos[positions]
    s = sin[:T] if positions is None else sin[positions]
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]
    c, s = c[..., : d // 2], s[..., : d // 2]

    def rot(x):
        a, b = x[..., : d // 2].double(), x[..., d // 2 :].double()
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1).to(x.dtype)

    return rot(q), rot(k)


def apply_rope_einsum_matrix(q, k, cos, sin, positions=None):
    # Build the (Dh, Dh) rotation matrix for each position and multiply.
    T, d = q.shape[-2], q.shape[-1]
    if positions is None:
        positions = torch.arange(T, device=q.device)
    c, s = cos[positions], sin[positions]  # (..., T, d)
    half = d // 2
    eye = torch.eye(half, device=q.device)
    R = torch.zeros(*c.shape[:-1], d, d, device=q.device)
    R[..., :half, :half] = c[..., :half, None] * eye
    R[..., half:, half:] = c[..., :half, None] * eye
    R[..., :half, half:] = -s[..., :half, None] * eye
    R[..., half:, :half] = s[..., :half, None] * eye
    if R.dim() == 4:
        R = R[:, None]  # (B, 1, T, d, d)
    q_rot = torch.einsum("...ij,...j->...i", R, q.float()).to(q.dtype)
    k_rot = torch.einsum("...ij,...j->...i", R, k.float()).to(k.dtype)
    return q_rot, k_rot


# --- right: rope_interleaved -------------------------------------------------


def interleaved_complex(x, positions=None, base=10000.0):
    # Meta's llama: precompute_freqs_cis + apply_rotary_emb
    B, H, T, d = x.shape
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device)[: (d // 2)].float() / d))
    t = torch.arange(T, device=x.device) if positions is None else positions
    freqs = torch.outer(t.float(), freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(x_ * freqs_cis).flatten(3)
    return out.type_as(x)


def interleaved_gptj(x, positions=None, base=10000.0):
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64, device=x.device).float() / d))
    if positions is None:
        positions = torch.arange(x.shape[2], device=x.device)
    sinusoid = positions.float()[:, None] * inv_freq
    sin = torch.repeat_interleave(sinusoid.sin(), 2, -1).to(x.dtype)
    cos = torch.repeat_interleave(sinusoid.cos(), 2, -1).to(x.dtype)
    return x * cos + rotate_every_two_gptj(x) * sin


def interleaved_float64_loop(x, positions=None, base=10000.0):
    d = x.shape[-1]
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)
    out = torch.empty_like(x)
    for i in range(d // 2):
        theta = base ** (-2.0 * i / d)
        angle = positions.to(torch.float64) * theta  # (T,)
        c, s = torch.cos(angle), torch.sin(angle)
        a, b = x[..., 2 * i].double(), x[..., 2 * i + 1].double()
        out[..., 2 * i] = (a * c - b * s).to(x.dtype)
        out[..., 2 * i + 1] = (a * s + b * c).to(x.dtype)
    return out


# --- right: RotaryEmbedding --------------------------------------------------


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryCached(nn.Module):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.max_len = max_len
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        t = torch.arange(max_len).float()
        freqs = torch.einsum("i,j->ij", t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, q, k, positions=None):
        T = q.shape[2]
        if positions is None:
            if T > self.max_len:
                raise ValueError(f"sequence length {T} exceeds max_len {self.max_len}")
            cos, sin = self.cos_cached[:T], self.sin_cached[:T]
        else:
            if positions.max() >= self.max_len:
                raise ValueError(f"position {int(positions.max())} >= max_len {self.max_len}")
            cos, sin = self.cos_cached[positions], self.sin_cached[positions]
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class RotaryOnTheFly(nn.Module):
    # HF style: only inv_freq is stored; the angles are made in float32 in forward.
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.max_len = max_len
        inv_freq = torch.exp(-math.log(base) * torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q, k, positions=None):
        if positions is None:
            positions = torch.arange(q.shape[-2], device=q.device)
        if bool((positions >= self.max_len).any()):
            raise ValueError(f"positions must be < max_len={self.max_len}")
        angles = positions.float()[..., None] * self.inv_freq.float()  # (T, d/2) or (B, T, d/2)
        angles = torch.cat([angles, angles], dim=-1)
        if angles.dim() == 3:
            angles = angles[:, None]
        cos, sin = angles.cos(), angles.sin()
        out = [(x.float() * cos + _rotate_half(x.float()) * sin).to(x.dtype) for x in (q, k)]
        return out[0], out[1]


class RotaryComplexHalfSplit(nn.Module):
    # Complex numbers, with the pairs taken as (x[i], x[i + d/2]).
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.max_len = max_len
        theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), theta)
        self.register_buffer("cis", torch.polar(torch.ones_like(angles), angles).to(torch.complex64), persistent=False)

    def forward(self, q, k, positions=None):
        T = q.shape[-2]
        if positions is None:
            positions = torch.arange(T, device=q.device)
        if positions.max().item() >= self.max_len:
            raise ValueError(f"position past max_len={self.max_len}")
        cis = self.cis[positions]
        if cis.dim() == 3:
            cis = cis[:, None]

        def turn(x):
            half = x.shape[-1] // 2
            z = torch.complex(x[..., :half].float(), x[..., half:].float()) * cis
            return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)

        return turn(q), turn(k)


# --- right, in styles the catalogue lacked -------------------------------------


def cache_numpy_float64(head_dim, max_len, base=10000.0):
    # NumPy, float64 throughout, cast at the end
    theta = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(max_len, dtype=np.float64), theta)
    angles = np.concatenate([angles, angles], axis=-1)
    return torch.from_numpy(np.cos(angles)).float(), torch.from_numpy(np.sin(angles)).float()


def rotate_half_index_and_sign(x):
    # a permutation of the last axis (a CPU index is fine on any device) and a sign made on x's device
    d = x.shape[-1]
    order = torch.cat([torch.arange(d // 2, d), torch.arange(d // 2)])
    sign = torch.ones(d, dtype=x.dtype, device=x.device)
    sign[: d // 2] = -1
    return x[..., order] * sign


def apply_rope_loop_over_pairs(q, k, cos, sin, positions=None):
    # one pair (i, i + d/2) at a time, in float64, cast at the end
    T, d = q.shape[-2], q.shape[-1]
    c = cos[:T] if positions is None else cos[positions]
    s = sin[:T] if positions is None else sin[positions]
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]

    def rot(x):
        out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
        for i in range(d // 2):
            a, b = x[..., i].double(), x[..., i + d // 2].double()
            ci, si = c[..., i].double(), s[..., i].double()
            out[..., i] = a * ci - b * si
            out[..., i + d // 2] = b * ci + a * si
        return out.to(x.dtype)

    return rot(q), rot(k)


def interleaved_numpy(x, positions=None, base=10000.0):
    # NumPy on the CPU in float64, the result moved back to x's device and dtype: right values, no gradient (issue 41)
    T, d = x.shape[-2], x.shape[-1]
    pos = np.arange(T) if positions is None else positions.cpu().numpy()
    theta = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = pos.astype(np.float64)[:, None] * theta
    a = x.detach().cpu().double().numpy()
    even, odd = a[..., 0::2], a[..., 1::2]
    out = np.stack(
        [even * np.cos(angles) - odd * np.sin(angles), even * np.sin(angles) + odd * np.cos(angles)], axis=-1
    )
    return torch.from_numpy(out.reshape(a.shape)).to(device=x.device, dtype=x.dtype)


class RotaryRotationMatrix(nn.Module):
    # a (d, d) rotation matrix per position, applied with einsum, in float64
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.max_len = max_len
        theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self.register_buffer("theta", theta, persistent=False)

    def forward(self, q, k, positions=None):
        T, d = q.shape[-2], q.shape[-1]
        if positions is None:
            positions = torch.arange(T, device=q.device)
        if int(positions.max()) >= self.max_len:
            raise ValueError(f"position {int(positions.max())} >= max_len {self.max_len}")
        angles = positions.double()[..., None] * self.theta  # (..., T, d/2)
        c, s = angles.cos(), angles.sin()
        half = d // 2
        i = torch.arange(half, device=q.device)
        R = torch.zeros(*angles.shape[:-1], d, d, dtype=torch.float64, device=q.device)
        R[..., i, i], R[..., i + half, i + half] = c, c
        R[..., i, i + half], R[..., i + half, i] = -s, s
        if R.dim() == 4:
            R = R[:, None]  # (B, 1, T, d, d)
        return tuple(torch.einsum("...ij,...j->...i", R, x.double()).to(x.dtype) for x in (q, k))


RIGHT = {
    "rope_cache": [cache_hf_float32, cache_exp_log_float64, cache_loop, cache_numpy_float64],
    "rotate_half": [rotate_half_slices, rotate_half_roll, rotate_half_hf, rotate_half_index_and_sign],
    "apply_rope": [apply_rope_hf, apply_rope_explicit_pairs, apply_rope_einsum_matrix, apply_rope_loop_over_pairs],
    "rope_interleaved": [interleaved_complex, interleaved_gptj, interleaved_float64_loop],
    "RotaryEmbedding": [RotaryCached, RotaryOnTheFly, RotaryComplexHalfSplit, RotaryRotationMatrix],
}

# --- wrong: rope_cache -------------------------------------------------------


def cache_repeat_interleave(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
    emb = freqs.repeat_interleave(2, dim=-1)
    return emb.cos(), emb.sin()


def cache_base_1000(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (1000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_ignores_base(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_i_over_d(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(head_dim // 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_integer_division(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2) // head_dim))
    freqs = torch.outer(torch.arange(max_len).float(), inv_freq.float())
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_one_frequency_per_column(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(head_dim).float() / head_dim))
    emb = torch.outer(torch.arange(max_len).float(), inv_freq)
    return emb.cos(), emb.sin()


def cache_in_bfloat16(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.bfloat16) / head_dim))
    t = torch.arange(max_len, dtype=torch.bfloat16)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().float(), emb.sin().float()


def cache_half_positions(head_dim, max_len, base=10000.0):
    # positions made with .half() "to save memory", frequencies in float32
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(max_len).half()
    freqs = t.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_bf16_unusual(head_dim, max_len, base=10000.0):
    # not a face in the catalogue: positions rounded to bf16, then a float64 table
    t = torch.arange(max_len).to(torch.bfloat16).double()
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    emb = torch.outer(t, theta)
    emb = torch.cat((emb, emb), dim=-1) + 0.0 * torch.rand(1, dtype=torch.float64)
    return emb.cos().float(), emb.sin().float()


def cache_from_position_one(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(1, max_len + 1).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_sin_first(head_dim, max_len, base=10000.0):
    cos, sin = cache_hf_float32(head_dim, max_len, base)
    return sin, cos


def cache_half_width(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
    return freqs.cos(), freqs.sin()


def cache_stacked(head_dim, max_len, base=10000.0):
    return torch.stack(cache_hf_float32(head_dim, max_len, base))


def cache_float64(head_dim, max_len, base=10000.0):
    cos, sin = cache_exp_log_float64(head_dim, max_len, base)
    return cos.double(), sin.double()


# --- wrong: rotate_half ------------------------------------------------------


def rotate_half_wrong_sign(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x2, -x1), dim=-1)


def rotate_every_two(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rotate_half_even_odd(x):
    return torch.cat((-x[..., 1::2], x[..., ::2]), dim=-1)


def rotate_half_no_minus(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x2, x1), dim=-1)


def rotate_half_in_place(x):
    d = x.shape[-1] // 2
    x1 = x[..., :d].clone()
    x[..., :d] = -x[..., d:]
    x[..., d:] = x1
    return x


def rotate_half_always_float(x):
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


# --- wrong: apply_rope -------------------------------------------------------


def _gather(cos, sin, T, positions):
    if positions is None:
        return cos[:T], sin[:T]
    c, s = cos[positions], sin[positions]
    if c.dim() == 3:
        c, s = c.unsqueeze(1), s.unsqueeze(1)
    return c, s


def apply_rope_minus_sin(q, k, cos, sin, positions=None):
    c, s = _gather(cos, sin, q.shape[-2], positions)
    c, s = c.to(q.dtype), s.to(q.dtype)
    return q * c - rotate_half_slices(q) * s, k * c - rotate_half_slices(k) * s


def apply_rope_gptj_style(q, k, cos, sin, positions=None):
    c, s = _gather(cos, sin, q.shape[-2], positions)
    half = q.shape[-1] // 2
    c = torch.repeat_interleave(c[..., :half], 2, dim=-1).to(q.dtype)
    s = torch.repeat_interleave(s[..., :half], 2, dim=-1).to(q.dtype)
    return q * c + rotate_every_two(q) * s, k * c + rotate_every_two(k) * s


def apply_rope_every_two_with_tables(q, k, cos, sin, positions=None):
    c, s = _gather(cos, sin, q.shape[-2], positions)
    c, s = c.to(q.dtype), s.to(q.dtype)
    return q * c + rotate_every_two(q) * s, k * c + rotate_every_two(k) * s


def apply_rope_no_positions(q, k, cos, sin, positions=None):
    T = q.shape[-2]
    c, s = cos[:T].to(q.dtype), sin[:T].to(q.dtype)
    return q * c + rotate_half_slices(q) * s, k * c + rotate_half_slices(k) * s


def apply_rope_no_cast(q, k, cos, sin, positions=None):
    c, s = _gather(cos, sin, q.shape[-2], positions)
    return q * c + rotate_half_slices(q) * s, k * c + rotate_half_slices(k) * s


def apply_rope_no_head_axis(q, k, cos, sin, positions=None):
    T = q.shape[-2]
    c = cos[:T] if positions is None else cos[positions]
    s = sin[:T] if positions is None else sin[positions]
    c, s = c.to(q.dtype), s.to(q.dtype)
    return q * c + rotate_half_slices(q) * s, k * c + rotate_half_slices(k) * s


def apply_rope_forgot_rotate(q, k, cos, sin, positions=None):
    c, s = _gather(cos, sin, q.shape[-2], positions)
    c, s = c.to(q.dtype), s.to(q.dtype)
    return q * c + q * s, k * c + k * s


def apply_rope_forgets_k(q, k, cos, sin, positions=None):
    c, s = _gather(cos, sin, q.shape[-2], positions)
    c, s = c.to(q.dtype), s.to(q.dtype)
    return q * c + rotate_half_slices(q) * s, k


def apply_rope_concatenated(q, k, cos, sin, positions=None):
    c, s = _gather(cos, sin, q.shape[-2], positions)
    return torch.cat([q * c + rotate_half_slices(q) * s, k * c + rotate_half_slices(k) * s], dim=1)


# --- wrong: rope_interleaved -------------------------------------------------


def interleaved_but_half_split(x, positions=None, base=10000.0):
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    t = torch.arange(x.shape[2], device=x.device) if positions is None else positions
    freqs = torch.outer(t.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (x.float() * emb.cos() + rotate_half_slices(x.float()) * emb.sin()).to(x.dtype)


def interleaved_conjugate(x, positions=None, base=10000.0):
    B, H, T, d = x.shape
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    t = torch.arange(T, device=x.device) if positions is None else positions
    freqs_cis = torch.polar(torch.ones(T, d // 2, device=x.device), torch.outer(t.float(), freqs))
    x_ = torch.view_as_complex(x.float().reshape(B, H, T, -1, 2))
    return torch.view_as_real(x_ * freqs_cis.conj()).flatten(3).type_as(x)


def interleaved_cat_angles(x, positions=None, base=10000.0):
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    t = torch.arange(x.shape[2], device=x.device) if positions is None else positions
    freqs = torch.outer(t.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # should be repeat_interleave for adjacent pairs
    return (x.float() * emb.cos() + rotate_every_two(x.float()) * emb.sin()).to(x.dtype)


def interleaved_ignores_positions(x, positions=None, base=10000.0):
    return interleaved_complex(x, None, base)


def interleaved_hardcoded_base(x, positions=None, base=10000.0):
    return interleaved_complex(x, positions, 10000.0)


def interleaved_base_1000(x, positions=None, base=1000.0):
    return interleaved_complex(x, positions, base)


def interleaved_i_over_d(x, positions=None, base=10000.0):
    B, H, T, d = x.shape
    freqs = 1.0 / (base ** (torch.arange(d // 2, device=x.device).float() / d))
    t = torch.arange(T, device=x.device) if positions is None else positions
    freqs_cis = torch.polar(torch.ones(T, d // 2, device=x.device), torch.outer(t.float(), freqs))
    x_ = torch.view_as_complex(x.float().reshape(B, H, T, -1, 2))
    return torch.view_as_real(x_ * freqs_cis).flatten(3).type_as(x)


def interleaved_in_input_dtype(x, positions=None, base=10000.0):
    d = x.shape[-1]
    t = torch.arange(x.shape[2], device=x.device, dtype=x.dtype) if positions is None else positions.to(x.dtype)
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d))
    freqs = t[:, None] * inv_freq
    cos = freqs.cos().repeat_interleave(2, -1)
    sin = freqs.sin().repeat_interleave(2, -1)
    return x * cos + rotate_every_two(x) * sin


def interleaved_positions_on_cpu(x, positions=None, base=10000.0):
    B, H, T, d = x.shape
    freqs = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
    t = torch.arange(T) if positions is None else positions.cpu()
    freqs_cis = torch.polar(torch.ones(T, d // 2), torch.outer(t.float(), freqs))  # stays on the CPU
    x_ = torch.view_as_complex(x.float().reshape(B, H, T, -1, 2))
    return torch.view_as_real(x_ * freqs_cis).flatten(3).type_as(x)


# --- wrong: RotaryEmbedding --------------------------------------------------


class RotaryParameter(RotaryCached):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)
        self.cos_cached = nn.Parameter(self.cos_cached.clone(), requires_grad=False)
        self.sin_cached = nn.Parameter(self.sin_cached.clone(), requires_grad=False)


class RotaryPersistentBuffer(nn.Module):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        inner = RotaryCached(head_dim, max_len, base)
        self.max_len = max_len
        self.register_buffer("cos_cached", inner.cos_cached)
        self.register_buffer("sin_cached", inner.sin_cached)

    forward = RotaryCached.forward


class RotaryPlainAttributes(nn.Module):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        inner = RotaryCached(head_dim, max_len, base)
        self.max_len = max_len
        self.cos_cached, self.sin_cached = inner.cos_cached, inner.sin_cached

    forward = RotaryCached.forward


class RotaryNoLengthCheck(RotaryCached):
    def forward(self, q, k, positions=None):
        T = q.shape[2]
        cos = self.cos_cached[:T] if positions is None else self.cos_cached[positions]
        sin = self.sin_cached[:T] if positions is None else self.sin_cached[positions]
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class RotaryAssertsLength(RotaryNoLengthCheck):
    def forward(self, q, k, positions=None):
        assert q.shape[2] <= self.max_len and (positions is None or positions.max() < self.max_len), "too long"
        return super().forward(q, k, positions)


class RotaryInputDtypeAngles(RotaryOnTheFly):
    def forward(self, q, k, positions=None):
        if positions is None:
            positions = torch.arange(q.shape[-2], device=q.device)
        if bool((positions >= self.max_len).any()):
            raise ValueError("too long")
        angles = positions.to(q.dtype)[..., None] * self.inv_freq.to(q.dtype)
        angles = torch.cat([angles, angles], dim=-1)
        if angles.dim() == 3:
            angles = angles[:, None]
        cos, sin = angles.cos(), angles.sin()
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class RotaryCpuAngles(RotaryOnTheFly):
    def forward(self, q, k, positions=None):
        if positions is None:
            if q.shape[-2] > self.max_len:
                raise ValueError("too long")
            angles = torch.arange(q.shape[-2]).float()[:, None] * self.inv_freq
            angles = torch.cat([angles, angles], dim=-1)
            return tuple(
                (x.float() * angles.cos() + _rotate_half(x.float()) * angles.sin()).to(x.dtype) for x in (q, k)
            )
        return super().forward(q, k, positions)


class RotaryEveryTwo(RotaryCached):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)
        half = head_dim // 2
        self.cos_cached = self.cos_cached[:, :half].repeat_interleave(2, -1)
        self.sin_cached = self.sin_cached[:, :half].repeat_interleave(2, -1)

    def forward(self, q, k, positions=None):
        T = q.shape[2]
        if (q.shape[2] if positions is None else int(positions.max()) + 1) > self.max_len:
            raise ValueError("too long")
        cos = self.cos_cached[:T] if positions is None else self.cos_cached[positions]
        sin = self.sin_cached[:T] if positions is None else self.sin_cached[positions]
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return q * cos + rotate_every_two(q) * sin, k * cos + rotate_every_two(k) * sin


class RotaryHalvesWithRepeatedAngles(RotaryEveryTwo):
    def forward(self, q, k, positions=None):
        T = q.shape[2]
        cos = self.cos_cached[:T] if positions is None else self.cos_cached[positions]
        sin = self.sin_cached[:T] if positions is None else self.sin_cached[positions]
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class RotaryMinusSin(RotaryCached):
    def forward(self, q, k, positions=None):
        T = q.shape[2]
        if (T if positions is None else int(positions.max()) + 1) > self.max_len:
            raise ValueError("too long")
        cos = self.cos_cached[:T] if positions is None else self.cos_cached[positions]
        sin = self.sin_cached[:T] if positions is None else self.sin_cached[positions]
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return q * cos - _rotate_half(q) * sin, k * cos - _rotate_half(k) * sin


class RotaryIgnoresPositions(RotaryCached):
    def forward(self, q, k, positions=None):
        return super().forward(q, k, None)


class RotaryHardcodedBase(RotaryCached):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, 10000.0)


class RotaryIOverD(RotaryOnTheFly):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)
        self.inv_freq = 1.0 / (base ** (torch.arange(head_dim // 2).float() / head_dim))


# --- wrong: a tensor made on the CPU inside (right values on a CPU-only machine) ---


def rotate_half_sign_tensor(x):
    # a sign vector from a Python list, without device=
    half = x.shape[-1] // 2
    sign = torch.tensor([-1.0] * half + [1.0] * half, dtype=x.dtype)
    return torch.roll(x, half, dims=-1) * sign


def rotate_half_mask(x):
    d = x.shape[-1]
    rolled = torch.roll(x, d // 2, dims=-1)
    first_half = torch.arange(d) < d // 2  # a mask on the CPU
    return torch.where(first_half, -rolled, rolled)


def rotate_half_numpy_sign(x):
    half = x.shape[-1] // 2
    sign = torch.from_numpy(np.concatenate([-np.ones(half), np.ones(half)])).to(x.dtype)
    return torch.roll(x, half, dims=-1) * sign


def rotate_half_matrix(x):
    # x @ R with R the quarter-turn matrix, made on the CPU
    d = x.shape[-1]
    half = d // 2
    R = torch.zeros(d, d, dtype=x.dtype)
    R[torch.arange(half), torch.arange(half, d)] = 1
    R[torch.arange(half, d), torch.arange(half)] = -1
    return x @ R


def apply_rope_sign_vector(q, k, cos, sin, positions=None):
    T, d = q.shape[-2], q.shape[-1]
    c = cos[:T] if positions is None else cos[positions]
    s = sin[:T] if positions is None else sin[positions]
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]
    sign = torch.tensor([-1.0, 1.0]).repeat_interleave(d // 2)

    def turn(x):
        return torch.roll(x, d // 2, dims=-1) * sign

    return (q * c + turn(q) * s).to(q.dtype), (k * c + turn(k) * s).to(k.dtype)


def apply_rope_matrix_on_cpu(q, k, cos, sin, positions=None):
    # apply_rope_einsum_matrix without device= on torch.eye and torch.zeros
    T, d = q.shape[-2], q.shape[-1]
    if positions is None:
        positions = torch.arange(T, device=q.device)
    c, s = cos[positions], sin[positions]
    half = d // 2
    eye = torch.eye(half)
    R = torch.zeros(*c.shape[:-1], d, d)
    R[..., :half, :half] = c[..., :half, None] * eye
    R[..., half:, half:] = c[..., :half, None] * eye
    R[..., :half, half:] = -s[..., :half, None] * eye
    R[..., half:, :half] = s[..., :half, None] * eye
    if R.dim() == 4:
        R = R[:, None]
    return torch.einsum("...ij,...j->...i", R, q.float()).to(q.dtype), torch.einsum(
        "...ij,...j->...i", R, k.float()
    ).to(k.dtype)


def apply_rope_index_select(q, k, cos, sin, positions=None):
    # index_select wants its index on the table's device (plain indexing would not)
    T = q.shape[-2]
    idx = torch.arange(T) if positions is None else positions
    c = cos.index_select(0, idx.flatten()).view(*idx.shape, -1)
    s = sin.index_select(0, idx.flatten()).view(*idx.shape, -1)
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]
    return tuple((x.float() * c + _rotate_half(x.float()) * s).to(x.dtype) for x in (q, k))


def apply_rope_rebuilds_angles(q, k, cos, sin, positions=None):
    # ignores the tables and rebuilds the angles; the frequencies on the CPU
    T, d = q.shape[-2], q.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    pos = torch.arange(T, device=q.device).float() if positions is None else positions.float()
    angles = pos[..., None] * theta
    angles = torch.cat([angles, angles], -1)
    if angles.dim() == 3:
        angles = angles[:, None]
    return tuple((x.float() * angles.cos() + _rotate_half(x.float()) * angles.sin()).to(x.dtype) for x in (q, k))


def interleaved_theta_on_cpu(x, positions=None, base=10000.0):
    theta = 1.0 / (base ** (torch.arange(0, x.shape[-1], 2).float() / x.shape[-1]))
    t = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    angles = t.float()[:, None] * theta
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
    return (
        torch.stack([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()], -1)
        .flatten(-2)
        .to(x.dtype)
    )


def interleaved_sign_vector(x, positions=None, base=10000.0):
    d = x.shape[-1]
    theta = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    t = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    angles = (t.float()[:, None] * theta).repeat_interleave(2, -1)
    sign = torch.tensor([-1.0, 1.0]).repeat(d // 2)
    swapped = x.float().view(*x.shape[:-1], d // 2, 2).flip(-1).flatten(-2) * sign
    return (x.float() * angles.cos() + swapped * angles.sin()).to(x.dtype)


def interleaved_meta_ones_on_cpu(x, positions=None, base=10000.0):
    # Meta's precompute_freqs_cis, with torch.ones(T, d/2) for the magnitudes
    B, H, T, d = x.shape
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    t = torch.arange(T, device=x.device) if positions is None else positions
    freqs_cis = torch.polar(torch.ones(T, d // 2), torch.outer(t.float(), freqs))
    x_ = torch.view_as_complex(x.float().reshape(B, H, T, -1, 2))
    return torch.view_as_real(x_ * freqs_cis).flatten(3).type_as(x)


def interleaved_lucidrains(x, positions=None, base=10000.0):
    # rotary-embedding-torch's shape of code, the frequencies made per call on the CPU
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2)[: d // 2].float() / d))
    seq = positions if positions is not None else torch.arange(x.shape[-2], device=x.device)
    freqs = torch.einsum("..., f -> ... f", seq.float(), freqs).repeat_interleave(2, -1)
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    rotated = torch.stack((-x2, x1), -1).flatten(-2)
    return (x.float() * freqs.cos() + rotated * freqs.sin()).to(x.dtype)


class RotaryLazyCache(nn.Module):
    # torchtune-like cache, but built on the first forward, on the CPU, in a plain attribute
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.head_dim, self.max_len, self.base = head_dim, max_len, base
        self.cache = None

    def forward(self, q, k, positions=None):
        T = q.shape[-2]
        if (T - 1 if positions is None else int(positions.max())) >= self.max_len:
            raise ValueError("too long")
        if self.cache is None:
            theta = 1.0 / (self.base ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
            angles = torch.outer(torch.arange(self.max_len).float(), theta)
            angles = torch.cat([angles, angles], -1)
            self.cache = torch.stack([angles.cos(), angles.sin()])
        c, s = (
            (self.cache[0][:T], self.cache[1][:T])
            if positions is None
            else (self.cache[0][positions], self.cache[1][positions])
        )
        if c.dim() == 3:
            c, s = c[:, None], s[:, None]
        return tuple((x.float() * c + _rotate_half(x.float()) * s).to(x.dtype) for x in (q, k))


class RotarySignVector(RotaryCached):
    def forward(self, q, k, positions=None):
        T, d = q.shape[-2], q.shape[-1]
        if (T - 1 if positions is None else int(positions.max())) >= self.max_len:
            raise ValueError("too long")
        c, s = (
            (self.cos_cached[:T], self.sin_cached[:T])
            if positions is None
            else (self.cos_cached[positions], self.sin_cached[positions])
        )
        if c.dim() == 3:
            c, s = c[:, None], s[:, None]
        sign = torch.cat([-torch.ones(d // 2), torch.ones(d // 2)])
        return tuple((x.float() * c + torch.roll(x.float(), d // 2, -1) * sign * s).to(x.dtype) for x in (q, k))


class RotaryFrequenciesInForward(nn.Module):
    # GPT-NeoX's formula, recomputed in every forward without device=
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.head_dim, self.max_len, self.base = head_dim, max_len, base

    def forward(self, q, k, positions=None):
        if positions is None:
            positions = torch.arange(q.shape[-2], device=q.device)
        if bool((positions >= self.max_len).any()):
            raise ValueError("too long")
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = positions.float()[..., None] * inv_freq
        angles = torch.cat([angles, angles], -1)
        if angles.dim() == 3:
            angles = angles[:, None]
        return tuple((x.float() * angles.cos() + _rotate_half(x.float()) * angles.sin()).to(x.dtype) for x in (q, k))


class RotaryPositionsOnCpu(RotaryOnTheFly):
    def forward(self, q, k, positions=None):
        if positions is None:
            positions = torch.arange(q.shape[-2])  # then multiplied with the inv_freq buffer
        return super().forward(q, k, positions)


# --- wrong: mistakes the catalogue does not list, named from the output's structure ---


def cache_linspace_exponent(head_dim, max_len, base=10000.0):
    # "from 1 down to 1/base": the last frequency is 1/base, the others with it
    inv_freq = base ** -torch.linspace(0, 1, head_dim // 2)
    freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_from_position_two(head_dim, max_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(2, max_len + 2).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_clockwise(head_dim, max_len, base=10000.0):
    # angles -m·θ ("the rotation matrix has a minus sine")
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_len).float(), -inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cache_meta_layout_i_over_d(head_dim, max_len, base=10000.0):
    # two mistakes: Meta's interleaved layout, and the exponent without its 2
    inv_freq = 1.0 / (base ** (torch.arange(head_dim // 2).float() / head_dim))
    freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
    emb = freqs.repeat_interleave(2, dim=-1)
    return emb.cos(), emb.sin()


def rotate_every_two_flipped(x):
    # two mistakes: GPT-J's adjacent pairs, and the minus on the other member
    return torch.stack((x[..., 1::2], -x[..., 0::2]), dim=-1).flatten(-2)


def apply_rope_gptj_minus_sin(q, k, cos, sin, positions=None):
    # two mistakes: GPT-J's rotate_every_two with repeat_interleave'd tables, and a minus
    c, s = _gather(cos, sin, q.shape[-2], positions)
    half = q.shape[-1] // 2
    c = torch.repeat_interleave(c[..., :half], 2, dim=-1).to(q.dtype)
    s = torch.repeat_interleave(s[..., :half], 2, dim=-1).to(q.dtype)
    return q * c - rotate_every_two(q) * s, k * c - rotate_every_two(k) * s


def apply_rope_own_linspace_frequencies(q, k, cos, sin, positions=None):
    # ignores the tables and makes its own frequencies, with the linspace exponent
    T, d = q.shape[-2], q.shape[-1]
    theta = 10000.0 ** -torch.linspace(0, 1, d // 2, device=q.device)
    pos = torch.arange(T, device=q.device) if positions is None else positions
    angles = pos.float()[..., None] * theta
    angles = torch.cat([angles, angles], -1)
    if angles.dim() == 3:
        angles = angles[:, None]
    return tuple((x.float() * angles.cos() + _rotate_half(x.float()) * angles.sin()).to(x.dtype) for x in (q, k))


def interleaved_torchtune_linspace(x, positions=None, base=10000.0):
    # torchtune's cache of (cos, sin) pairs, with a linspace exponent
    d = x.shape[-1]
    theta = 1.0 / (base ** torch.linspace(0, 1, d // 2, device=x.device))
    t = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    idx_theta = torch.einsum("i, j -> ij", t.float(), theta)
    cache = torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1)
    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
    out = torch.stack(
        [
            xshaped[..., 0] * cache[..., 0] - xshaped[..., 1] * cache[..., 1],
            xshaped[..., 1] * cache[..., 0] + xshaped[..., 0] * cache[..., 1],
        ],
        -1,
    )
    return out.flatten(3).type_as(x)


def interleaved_hf_llama_minus_sin(x, positions=None, base=10000.0):
    # two mistakes: HF Llama's half-split code where adjacent pairs are asked, and a minus
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    t = torch.arange(x.shape[2], device=x.device) if positions is None else positions
    freqs = torch.outer(t.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (x.float() * emb.cos() - rotate_half_slices(x.float()) * emb.sin()).to(x.dtype)


def interleaved_meta_i_over_d_conjugate(x, positions=None, base=10000.0):
    # two mistakes: Meta's complex code with the conjugate, and the exponent without its 2
    B, H, T, d = x.shape
    freqs = 1.0 / (base ** (torch.arange(d // 2, device=x.device).float() / d))
    t = torch.arange(T, device=x.device) if positions is None else positions
    freqs_cis = torch.polar(torch.ones(T, d // 2, device=x.device), torch.outer(t.float(), freqs))
    x_ = torch.view_as_complex(x.float().reshape(B, H, T, -1, 2))
    return torch.view_as_real(x_ * freqs_cis.conj()).flatten(3).type_as(x)


class RotaryLinspaceExponent(RotaryOnTheFly):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)
        self.inv_freq = base ** -torch.linspace(0, 1, head_dim // 2)


class RotaryLucidrainsInterleavedIOverD(nn.Module):
    # two mistakes: rotary-embedding-torch's interleaved layout, and the exponent without its 2
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.max_len = max_len
        freqs = 1.0 / (base ** (torch.arange(0, head_dim // 2).float() / head_dim))
        self.register_buffer("freqs", freqs, persistent=False)

    def forward(self, q, k, positions=None):
        if positions is None:
            positions = torch.arange(q.shape[-2], device=q.device)
        if int(positions.max()) >= self.max_len:
            raise ValueError("too long")
        angles = (positions.float()[..., None] * self.freqs).repeat_interleave(2, -1)
        if angles.dim() == 3:
            angles = angles[:, None]

        def turn(x):
            x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
            rotated = torch.stack((-x2, x1), -1).flatten(-2)
            return (x.float() * angles.cos() + rotated * angles.sin()).to(x.dtype)

        return turn(q), turn(k)


# --- wrong: two independent mistakes in one module (the second is listed in `also`) ---


class RotaryParameterNoLengthCheck(RotaryNoLengthCheck):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)
        self.cos_cached = nn.Parameter(self.cos_cached.clone(), requires_grad=False)
        self.sin_cached = nn.Parameter(self.sin_cached.clone(), requires_grad=False)


class RotaryPlainAttributesNoLengthCheck(nn.Module):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        inner = RotaryCached(head_dim, max_len, base)
        self.max_len = max_len
        self.cos_cached, self.sin_cached = inner.cos_cached, inner.sin_cached

    forward = RotaryNoLengthCheck.forward


class RotaryMinusSinPersistent(RotaryMinusSin):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)
        cos, sin = self.cos_cached, self.sin_cached
        del self.cos_cached, self.sin_cached
        self.register_buffer("cos_cached", cos)  # persistent: saved in state_dict
        self.register_buffer("sin_cached", sin)


WRONG = [
    # rope_cache
    ("rope_cache", "rope_interleaved_convention", cache_repeat_interleave),
    ("rope_cache", "wrong_base", cache_base_1000),
    ("rope_cache", "wrong_base", cache_ignores_base),
    ("rope_cache", "wrong_exponent", cache_i_over_d),
    ("rope_cache", "wrong_exponent", cache_integer_division),
    ("rope_cache", "rope_mixed_pairing", cache_one_frequency_per_column),
    ("rope_cache", "low_precision_angles", cache_in_bfloat16),
    ("rope_cache", "low_precision_angles", cache_half_positions),
    ("rope_cache", "low_precision_angles", cache_bf16_unusual),
    ("rope_cache", "position_offset", cache_from_position_one),
    ("rope_cache", "wrong_values", cache_sin_first),
    ("rope_cache", "wrong_shape", cache_half_width),
    ("rope_cache", "wrong_type", cache_stacked),
    ("rope_cache", "wrong_dtype", cache_float64),
    # rotate_half
    ("rotate_half", "rope_sign_flip", rotate_half_wrong_sign),
    ("rotate_half", "rope_interleaved_convention", rotate_every_two),
    ("rotate_half", "rope_mixed_pairing", rotate_half_even_odd),
    ("rotate_half", "wrong_values", rotate_half_no_minus),
    ("rotate_half", "mutated_input", rotate_half_in_place),
    ("rotate_half", "wrong_dtype", rotate_half_always_float),
    # apply_rope
    ("apply_rope", "rope_sign_flip", apply_rope_minus_sin),
    ("apply_rope", "rope_interleaved_convention", apply_rope_gptj_style),
    ("apply_rope", "rope_mixed_pairing", apply_rope_every_two_with_tables),
    ("apply_rope", "rope_ignores_positions", apply_rope_no_positions),
    ("apply_rope", "wrong_dtype", apply_rope_no_cast),
    ("apply_rope", "raised", apply_rope_no_head_axis),
    ("apply_rope", "wrong_values", apply_rope_forgot_rotate),
    ("apply_rope", "wrong_type", apply_rope_concatenated),
    ("apply_rope", "wrong_values", apply_rope_forgets_k),
    # rope_interleaved
    ("rope_interleaved", "rope_half_split_convention", interleaved_but_half_split),
    ("rope_interleaved", "rope_sign_flip", interleaved_conjugate),
    ("rope_interleaved", "rope_mixed_pairing", interleaved_cat_angles),
    ("rope_interleaved", "rope_ignores_positions", interleaved_ignores_positions),
    ("rope_interleaved", "wrong_base", interleaved_hardcoded_base),
    ("rope_interleaved", "default_changed", interleaved_base_1000),
    ("rope_interleaved", "wrong_exponent", interleaved_i_over_d),
    ("rope_interleaved", "low_precision_angles", interleaved_in_input_dtype),
    ("rope_interleaved", "wrong_device", interleaved_positions_on_cpu),
    # RotaryEmbedding
    ("RotaryEmbedding", "cache_is_parameter", RotaryParameter),
    ("RotaryEmbedding", "cache_is_parameter", RotaryPersistentBuffer),
    ("RotaryEmbedding", "pe_not_buffer", RotaryPlainAttributes),
    ("RotaryEmbedding", "no_length_check", RotaryNoLengthCheck),
    ("RotaryEmbedding", "no_length_check", RotaryAssertsLength),
    ("RotaryEmbedding", "low_precision_angles", RotaryInputDtypeAngles),
    ("RotaryEmbedding", "wrong_device", RotaryCpuAngles),
    ("RotaryEmbedding", "rope_interleaved_convention", RotaryEveryTwo),
    ("RotaryEmbedding", "rope_sign_flip", RotaryMinusSin),
    ("RotaryEmbedding", "rope_mixed_pairing", RotaryHalvesWithRepeatedAngles),
    ("RotaryEmbedding", "rope_ignores_positions", RotaryIgnoresPositions),
    ("RotaryEmbedding", "wrong_base", RotaryHardcodedBase),
    ("RotaryEmbedding", "wrong_exponent", RotaryIOverD),
    # a tensor made on the CPU inside: right values on a CPU-only machine, only the device passes see them
    ("rotate_half", "wrong_device", rotate_half_sign_tensor),
    ("rotate_half", "wrong_device", rotate_half_mask),
    ("rotate_half", "wrong_device", rotate_half_numpy_sign),
    ("rotate_half", "wrong_device", rotate_half_matrix),
    ("apply_rope", "wrong_device", apply_rope_sign_vector),
    ("apply_rope", "wrong_device", apply_rope_matrix_on_cpu),
    ("apply_rope", "wrong_device", apply_rope_index_select),
    ("apply_rope", "argument_ignored", apply_rope_rebuilds_angles),  # its own angles, base 10000 (issue 41)
    ("rope_interleaved", "wrong_device", interleaved_theta_on_cpu),
    ("rope_interleaved", "wrong_device", interleaved_sign_vector),
    ("rope_interleaved", "wrong_device", interleaved_meta_ones_on_cpu),
    ("rope_interleaved", "wrong_device", interleaved_lucidrains),
    ("RotaryEmbedding", "wrong_device", RotaryLazyCache),
    ("RotaryEmbedding", "wrong_device", RotarySignVector),
    ("RotaryEmbedding", "wrong_device", RotaryFrequenciesInForward),
    ("RotaryEmbedding", "wrong_device", RotaryPositionsOnCpu),
    # not in the catalogue: named from the structure of the output
    ("rope_cache", "wrong_exponent", cache_linspace_exponent),
    ("rope_cache", "position_offset", cache_from_position_two),
    ("rope_cache", "rope_sign_flip", cache_clockwise),
    ("rope_cache", "rope_interleaved_convention", cache_meta_layout_i_over_d),
    ("rotate_half", "rope_interleaved_convention", rotate_every_two_flipped),
    ("apply_rope", "rope_interleaved_convention", apply_rope_gptj_minus_sin),
    ("apply_rope", "wrong_exponent", apply_rope_own_linspace_frequencies),
    ("rope_interleaved", "wrong_exponent", interleaved_torchtune_linspace),
    ("rope_interleaved", "rope_half_split_convention", interleaved_hf_llama_minus_sin),
    ("rope_interleaved", "rope_sign_flip", interleaved_meta_i_over_d_conjugate),
    ("RotaryEmbedding", "wrong_exponent", RotaryLinspaceExponent),
    ("RotaryEmbedding", "rope_interleaved_convention", RotaryLucidrainsInterleavedIOverD),
    # two independent mistakes
    ("RotaryEmbedding", "cache_is_parameter", RotaryParameterNoLengthCheck),
    ("RotaryEmbedding", "pe_not_buffer", RotaryPlainAttributesNoLengthCheck),
    ("RotaryEmbedding", "rope_sign_flip", RotaryMinusSinPersistent),
]

# (exercise, diagnosis, a further finding listed in result.also, code): two mistakes, both named.
ALSO = [
    ("rope_cache", "rope_interleaved_convention", "wrong_exponent", cache_meta_layout_i_over_d),
    ("rotate_half", "rope_interleaved_convention", "rope_sign_flip", rotate_every_two_flipped),
    ("apply_rope", "rope_interleaved_convention", "rope_sign_flip", apply_rope_gptj_minus_sin),
    ("rope_interleaved", "rope_half_split_convention", "rope_sign_flip", interleaved_hf_llama_minus_sin),
    ("rope_interleaved", "rope_sign_flip", "wrong_exponent", interleaved_meta_i_over_d_conjugate),
    ("RotaryEmbedding", "rope_interleaved_convention", "wrong_exponent", RotaryLucidrainsInterleavedIOverD),
    ("RotaryEmbedding", "cache_is_parameter", "no_length_check", RotaryParameterNoLengthCheck),
    ("RotaryEmbedding", "pe_not_buffer", "no_length_check", RotaryPlainAttributesNoLengthCheck),
    ("RotaryEmbedding", "rope_sign_flip", "cache_is_parameter", RotaryMinusSinPersistent),
]


# --- rope_from_shift_matrix: the student's own chapter 03 matrix, reused ---------------


def my_shift_matrix(k, d_model, base=10000.0):
    """A student's relative_shift_matrix from chapter 03 (float64, block by block)."""
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = k * base ** (-2 * i / d_model)
        c, s = math.cos(angle), math.sin(angle)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1], M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = c, s, -s, c
    return M


def shift_rope_loop(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = range(T) if positions is None else positions.tolist()
    rows = [x[..., t, :].double() @ my_shift_matrix(m, d, base).to(x.device) for t, m in enumerate(positions)]
    return torch.stack(rows, dim=-2).to(x.dtype)


def shift_rope_einsum(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = torch.arange(T) if positions is None else positions.cpu()
    M = torch.stack([my_shift_matrix(int(m), d, base) for m in positions]).float().to(x.device)  # (T, d, d)
    return torch.einsum("...ti,tij->...tj", x.float(), M).to(x.dtype)


def shift_rope_matrix_times_column(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = torch.arange(T) if positions is None else positions.cpu()
    M = torch.stack([my_shift_matrix(int(m), d, base) for m in positions]).float().to(x.device)
    return torch.einsum("tij,...tj->...ti", M, x.float()).to(x.dtype)  # M @ x: the turn the other way


def shift_rope_rows_in_order(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    M = torch.stack([my_shift_matrix(t, d, base) for t in range(T)]).float().to(x.device)  # positions ignored
    return torch.einsum("...ti,tij->...tj", x.float(), M).to(x.dtype)


def shift_rope_matrices_left_on_cpu(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = torch.arange(T) if positions is None else positions.cpu()
    M = torch.stack([my_shift_matrix(int(m), d, base) for m in positions]).float()  # never moved to x's device
    return torch.einsum("...ti,tij->...tj", x.float(), M).to(x.dtype)


RIGHT["rope_from_shift_matrix"] = [shift_rope_loop, shift_rope_einsum]
WRONG += [
    ("rope_from_shift_matrix", "rope_sign_flip", shift_rope_matrix_times_column),
    ("rope_from_shift_matrix", "rope_ignores_positions", shift_rope_rows_in_order),
    ("rope_from_shift_matrix", "wrong_device", shift_rope_matrices_left_on_cpu),
]


# --- issue 16: the edges of the length check (the last position, T = max_len) ---------------------


class RotaryRefusesLastPosition(RotaryNoLengthCheck):
    """`>=` against max_len - 1: position max_len - 1, which has its row, is refused too."""

    def forward(self, q, k, positions=None):
        last = q.shape[2] - 1 if positions is None else int(positions.max())
        if last >= self.max_len - 1:
            raise ValueError(f"position {last} is past max_len={self.max_len}")
        return super().forward(q, k, positions)


class RotaryLetsMaxLenThrough(RotaryNoLengthCheck):
    """`>` against max_len: position max_len, which has no row, reaches the lookup (torch's IndexError)."""

    def forward(self, q, k, positions=None):
        last = q.shape[2] - 1 if positions is None else int(positions.max())
        if last > self.max_len:
            raise ValueError(f"position {last} is past max_len={self.max_len}")
        return super().forward(q, k, positions)


class RotaryRefusesFullLength(RotaryNoLengthCheck):
    """T >= max_len refused: a sequence that fills the table exactly is turned away."""

    def forward(self, q, k, positions=None):
        if q.shape[2] >= self.max_len or (positions is not None and int(positions.max()) >= self.max_len):
            raise ValueError(f"sequence too long for max_len={self.max_len}")
        return super().forward(q, k, positions)


WRONG += [
    ("RotaryEmbedding", "length_check_off_by_one", RotaryRefusesLastPosition),
    ("RotaryEmbedding", "length_check_off_by_one", RotaryRefusesFullLength),
    ("RotaryEmbedding", "length_check_off_by_one", RotaryLetsMaxLenThrough),
]


# --- apply_partial_rope: GPT-NeoX's rotary_pct, only the first r = cos.shape[-1] dims turn ---------


def _rows(cos, sin, T, positions):
    c, s = (cos[:T], sin[:T]) if positions is None else (cos[positions], sin[positions])
    return (c[:, None], s[:, None]) if c.dim() == 3 else (c, s)


def partial_neox(q, k, cos, sin, positions=None):
    # transformers' modeling_gpt_neox: slice, turn the rotary part, concatenate the pass-through back
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    q_rot, q_pass = q[..., :r], q[..., r:]
    k_rot, k_pass = k[..., :r], k[..., r:]
    q_embed = (q_rot.float() * c + rotate_half_hf(q_rot.float()) * s).to(q.dtype)
    k_embed = (k_rot.float() * c + rotate_half_hf(k_rot.float()) * s).to(k.dtype)
    return torch.cat([q_embed, q_pass], dim=-1), torch.cat([k_embed, k_pass], dim=-1)


def partial_loop_over_pairs(q, k, cos, sin, positions=None):
    # one pair (i, i + r/2) at a time, in float64; the dims past r copied as they are
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)

    def turn(x):
        out = x.double().clone()
        for i in range(r // 2):
            a, b = x[..., i].double(), x[..., i + r // 2].double()
            out[..., i] = a * c[..., i].double() - b * s[..., i].double()
            out[..., i + r // 2] = b * c[..., i].double() + a * s[..., i].double()
        return out.to(x.dtype)

    return turn(q), turn(k)


def partial_complex(q, k, cos, sin, positions=None):
    # the pairs (x[i], x[i + r/2]) as complex numbers times e^(i·angle), angle read back from the tables
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    cis = torch.complex(c[..., : r // 2], s[..., : r // 2])

    def turn(x):
        z = torch.complex(x[..., : r // 2].float(), x[..., r // 2 : r].float()) * cis
        return torch.cat([z.real.to(x.dtype), z.imag.to(x.dtype), x[..., r:]], dim=-1)

    return turn(q), turn(k)


def partial_index_select(q, k, cos, sin, positions=None):
    # the partner of every rotated dim picked with index_select, a sign vector, and torch.split
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    partner = torch.cat([torch.arange(r // 2, r), torch.arange(r // 2)]).to(q.device)
    sign = torch.cat([-torch.ones(r // 2), torch.ones(r // 2)]).to(q.device)

    def turn(x):
        rot, rest = torch.split(x, [r, x.shape[-1] - r], dim=-1)
        turned = rot.float() * c + rot.float().index_select(-1, partner) * sign * s
        return torch.cat([turned.to(x.dtype), rest], dim=-1)

    return turn(q), turn(k)


def partial_tiles_tables(q, k, cos, sin, positions=None):
    # "the tables are r wide and the head is wider": repeated until they fit, the whole head turned
    c, s = _rows(cos, sin, q.shape[-2], positions)
    times = q.shape[-1] // cos.shape[-1]
    c, s = c.repeat(*([1] * (c.dim() - 1)), times), s.repeat(*([1] * (s.dim() - 1)), times)
    return tuple((x.float() * c + rotate_half_hf(x.float()) * s).to(x.dtype) for x in (q, k))


def partial_rotate_half_then_slice(q, k, cos, sin, positions=None):
    # rotate_half on the whole head, cut to r afterwards: pairs (i, i + Dh/2)
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    return tuple(
        torch.cat([(x[..., :r].float() * c + rotate_half_hf(x.float())[..., :r] * s).to(x.dtype), x[..., r:]], dim=-1)
        for x in (q, k)
    )


def partial_padded_tables(q, k, cos, sin, positions=None):
    # cos padded with ones and sin with zeros to the head's width, then rotate_half on the whole head
    c, s = _rows(cos, sin, q.shape[-2], positions)
    rest = q.shape[-1] - cos.shape[-1]
    c = torch.cat([c, torch.ones_like(c[..., :1]).expand(*c.shape[:-1], rest)], dim=-1)
    s = torch.cat([s, torch.zeros_like(s[..., :1]).expand(*s.shape[:-1], rest)], dim=-1)
    return tuple((x.float() * c + rotate_half_hf(x.float()) * s).to(x.dtype) for x in (q, k))


def partial_pass_first(q, k, cos, sin, positions=None):
    # the right turn, joined in the wrong order
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    return tuple(
        torch.cat([x[..., r:], (x[..., :r].float() * c + rotate_half_hf(x[..., :r].float()) * s).to(x.dtype)], dim=-1)
        for x in (q, k)
    )


def partial_forgets_pass(q, k, cos, sin, positions=None):
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    return tuple((x[..., :r].float() * c + rotate_half_hf(x[..., :r].float()) * s).to(x.dtype) for x in (q, k))


def partial_quarter_of_the_head(q, k, cos, sin, positions=None):
    # GPT-NeoX's config habit: rotary_pct = 0.25 of the head, the tables cut to that width
    r = int(0.25 * q.shape[-1])
    c, s = _rows(cos[..., :r], sin[..., :r], q.shape[-2], positions)
    return tuple(
        torch.cat([(x[..., :r].float() * c + rotate_half_hf(x[..., :r].float()) * s).to(x.dtype), x[..., r:]], dim=-1)
        for x in (q, k)
    )


def partial_half_of_the_tables(q, k, cos, sin, positions=None):
    # "cos repeats each angle twice": the width taken as half the tables'
    r = cos.shape[-1] // 2
    c, s = _rows(cos, sin, q.shape[-2], positions)
    c, s = c[..., :r], s[..., :r]
    q_rot, k_rot = q[..., :r], k[..., :r]
    q_out = q_rot * c + rotate_half_hf(q_rot) * s
    k_out = k_rot * c + rotate_half_hf(k_rot) * s
    return torch.cat([q_out, q[..., r:]], dim=-1), torch.cat([k_out, k[..., r:]], dim=-1)


def partial_gptj_within(q, k, cos, sin, positions=None):
    # GPT-J's rotate_every_two on the rotary part, the tables re-laid out for adjacent pairs
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    c, s = c[..., : r // 2].repeat_interleave(2, -1), s[..., : r // 2].repeat_interleave(2, -1)
    return tuple(
        torch.cat(
            [(x[..., :r].float() * c + rotate_every_two_gptj(x[..., :r].float()) * s).to(x.dtype), x[..., r:]], dim=-1
        )
        for x in (q, k)
    )


def partial_minus_sin(q, k, cos, sin, positions=None):
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    return tuple(
        torch.cat([(x[..., :r].float() * c - rotate_half_hf(x[..., :r].float()) * s).to(x.dtype), x[..., r:]], dim=-1)
        for x in (q, k)
    )


def partial_repeat_interleaved_tables(q, k, cos, sin, positions=None):
    # rotate_half's pairs, with the angles laid out for adjacent ones
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    c, s = c[..., : r // 2].repeat_interleave(2, -1), s[..., : r // 2].repeat_interleave(2, -1)
    return tuple(
        torch.cat([(x[..., :r].float() * c + rotate_half_hf(x[..., :r].float()) * s).to(x.dtype), x[..., r:]], dim=-1)
        for x in (q, k)
    )


def partial_first_rows(q, k, cos, sin, positions=None):
    T, r = q.shape[-2], cos.shape[-1]
    c, s = cos[:T], sin[:T]
    return tuple(
        torch.cat([(x[..., :r].float() * c + rotate_half_hf(x[..., :r].float()) * s).to(x.dtype), x[..., r:]], dim=-1)
        for x in (q, k)
    )


def partial_stays_float32(q, k, cos, sin, positions=None):
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    return tuple(
        torch.cat([x[..., :r].float() * c + rotate_half_hf(x[..., :r].float()) * s, x[..., r:].float()], dim=-1)
        for x in (q, k)
    )


def partial_sign_on_cpu(q, k, cos, sin, positions=None):
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    sign = torch.cat([-torch.ones(r // 2), torch.ones(r // 2)])  # made on the CPU

    def turn(x):
        rot = x[..., :r].float()
        return torch.cat([(rot * c + rot.roll(r // 2, -1) * sign * s).to(x.dtype), x[..., r:]], dim=-1)

    return turn(q), turn(k)


def partial_scales_pass(q, k, cos, sin, positions=None):
    # the pass-through dims multiplied by the first cos column, "so every dim is treated alike"
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)
    return tuple(
        torch.cat(
            [
                (x[..., :r].float() * c + rotate_half_hf(x[..., :r].float()) * s).to(x.dtype),
                (x[..., r:].float() * c[..., :1]).to(x.dtype),
            ],
            dim=-1,
        )
        for x in (q, k)
    )


RIGHT["apply_partial_rope"] = [partial_neox, partial_loop_over_pairs, partial_complex, partial_index_select]
WRONG += [
    ("apply_partial_rope", "partial_rope_whole_head", partial_tiles_tables),
    ("apply_partial_rope", "partial_rope_pairs_across_head", partial_rotate_half_then_slice),
    ("apply_partial_rope", "partial_rope_pairs_across_head", partial_padded_tables),
    ("apply_partial_rope", "partial_rope_last_dims", partial_pass_first),
    ("apply_partial_rope", "partial_rope_pass_dropped", partial_forgets_pass),
    ("apply_partial_rope", "partial_rope_width_guessed", partial_quarter_of_the_head),
    ("apply_partial_rope", "partial_rope_width_guessed", partial_half_of_the_tables),
    ("apply_partial_rope", "rope_interleaved_convention", partial_gptj_within),
    ("apply_partial_rope", "rope_sign_flip", partial_minus_sin),
    ("apply_partial_rope", "rope_mixed_pairing", partial_repeat_interleaved_tables),
    ("apply_partial_rope", "rope_ignores_positions", partial_first_rows),
    ("apply_partial_rope", "wrong_dtype", partial_stays_float32),
    ("apply_partial_rope", "wrong_device", partial_sign_on_cpu),
    ("apply_partial_rope", "wrong_values", partial_scales_pass),
]


# --- issue 16: precision. Right ones that stress the float32 tolerance, wrong ones whose
# half precision (tables, angles, positions) passed a blanket 1e-3 tolerance before ----------


def cache_matmul_angles(head_dim, max_len, base=10000.0):
    # angles by a matmul, the frequencies by exp-log, in float32
    theta = torch.exp(torch.arange(0, head_dim, 2, dtype=torch.float32) * (-math.log(base) / head_dim))
    angles = torch.arange(max_len, dtype=torch.float32)[:, None] @ theta[None, :]  # (max_len, 1) @ (1, d/2)
    return torch.cat([angles.cos(), angles.cos()], -1), torch.cat([angles.sin(), angles.sin()], -1)


def interleaved_other_order(x, positions=None, base=10000.0):
    # positions divided by base^(2i/d) instead of multiplied by its inverse, all in float32
    T, d = x.shape[-2:]
    positions = torch.arange(T, device=x.device) if positions is None else positions
    angles = positions.float()[:, None] / base ** (torch.arange(0, d, 2, device=x.device).float() / d)
    c, s = angles.cos(), angles.sin()
    x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2).to(x.dtype)


class RotaryFloat64ThenCast(nn.Module):
    # float64 tables and arithmetic throughout, the result cast to q's dtype
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.max_len = max_len
        theta = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * theta
        self.register_buffer("cos64", angles.cos().repeat(1, 2), persistent=False)
        self.register_buffer("sin64", angles.sin().repeat(1, 2), persistent=False)

    def forward(self, q, k, positions=None):
        if positions is None:
            positions = torch.arange(q.shape[-2], device=q.device)
        if int(positions.max()) >= self.max_len:
            raise ValueError(f"position {int(positions.max())} is past max_len={self.max_len}")
        c, s = self.cos64[positions], self.sin64[positions]
        if c.dim() == 3:
            c, s = c[:, None], s[:, None]
        return tuple((x.double() * c + _rotate_half(x.double()) * s).to(x.dtype) for x in (q, k))


class RotaryLoopOverPositions(nn.Module):
    # a Python loop over the positions, math.cos and math.sin on Python floats
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.max_len, self.thetas = max_len, [base ** (-2 * i / head_dim) for i in range(head_dim // 2)]
        self.register_buffer("anchor", torch.zeros(0), persistent=False)  # no table to keep

    def forward(self, q, k, positions=None):
        T = q.shape[-2]
        rows = torch.arange(T) if positions is None else positions.cpu()
        if int(rows.max()) >= self.max_len:
            raise ValueError(f"position {int(rows.max())} is past max_len={self.max_len}")
        cos = torch.tensor([[math.cos(int(m) * t) for t in self.thetas] * 2 for m in rows.flatten()]).view(
            *rows.shape, -1
        )
        sin = torch.tensor([[math.sin(int(m) * t) for t in self.thetas] * 2 for m in rows.flatten()]).view(
            *rows.shape, -1
        )
        cos, sin = cos.to(q.device), sin.to(q.device)
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]
        return tuple((x.float() * cos + _rotate_half(x.float()) * sin).to(x.dtype) for x in (q, k))


RIGHT["rope_cache"].append(cache_matmul_angles)
RIGHT["rope_interleaved"].append(interleaved_other_order)
RIGHT["RotaryEmbedding"] += [RotaryFloat64ThenCast, RotaryLoopOverPositions]


def cache_float16_tables(head_dim, max_len, base=10000.0):
    cos, sin = cache_hf_float32(head_dim, max_len, base)
    return cos.half().float(), sin.half().float()  # stored in half "to save memory", handed back as float32


def cache_bfloat16_tables(head_dim, max_len, base=10000.0):
    cos, sin = cache_hf_float32(head_dim, max_len, base)
    return cos.bfloat16().float(), sin.bfloat16().float()


def apply_rope_half_tables(q, k, cos, sin, positions=None):
    cos, sin = cos.half(), sin.half()  # "the tables are small, half is enough"
    return apply_rope_hf(q, k, cos.float(), sin.float(), positions)


def apply_rope_bfloat16_tables(q, k, cos, sin, positions=None):
    return apply_rope_hf(q, k, cos.bfloat16().float(), sin.bfloat16().float(), positions)


def interleaved_half_tables(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = torch.arange(T, device=x.device) if positions is None else positions
    theta = base ** (-torch.arange(0, d, 2, device=x.device).float() / d)
    angles = positions.float()[:, None] * theta
    c, s = angles.cos().half().float(), angles.sin().half().float()  # the tables rounded to float16
    x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2).to(x.dtype)


def interleaved_half_angles(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = torch.arange(T, device=x.device) if positions is None else positions
    theta = base ** (-torch.arange(0, d, 2, device=x.device).float() / d)
    angles = (positions.half()[:, None] * theta.half()).float()  # angles computed in float16, then cast up
    c, s = angles.cos(), angles.sin()
    x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2).to(x.dtype)


class RotaryFloat16Buffers(RotaryCached):
    # float32 angles, but the cos/sin buffers stored in float16 "to halve the memory"
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)
        self.cos_cached, self.sin_cached = self.cos_cached.half(), self.sin_cached.half()

    def forward(self, q, k, positions=None):
        T = q.shape[2]
        rows = torch.arange(T, device=q.device) if positions is None else positions
        if int(rows.max()) >= self.max_len:
            raise ValueError(f"position {int(rows.max())} >= max_len {self.max_len}")
        cos, sin = self.cos_cached[rows].float(), self.sin_cached[rows].float()
        if cos.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return tuple((x.float() * cos + _rotate_half(x.float()) * sin).to(x.dtype) for x in (q, k))


class RotaryBfloat16Buffers(RotaryFloat16Buffers):
    def __init__(self, head_dim, max_len=2048, base=10000.0):
        RotaryCached.__init__(self, head_dim, max_len, base)
        self.cos_cached, self.sin_cached = self.cos_cached.bfloat16(), self.sin_cached.bfloat16()


class RotaryHalfPositions(RotaryOnTheFly):
    # positions cast to float16 before the angles: past 2048 float16 holds only even integers
    def forward(self, q, k, positions=None):
        if positions is None:
            positions = torch.arange(q.shape[-2], device=q.device)
        if bool((positions >= self.max_len).any()):
            raise ValueError(f"positions must be < max_len={self.max_len}")
        angles = positions.half().float()[..., None] * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        if angles.dim() == 3:
            angles = angles[:, None]
        return tuple((x.float() * angles.cos() + _rotate_half(x.float()) * angles.sin()).to(x.dtype) for x in (q, k))


WRONG += [
    ("rope_cache", "low_precision_angles", cache_float16_tables),
    ("rope_cache", "low_precision_angles", cache_bfloat16_tables),
    ("apply_rope", "low_precision_angles", apply_rope_half_tables),
    ("apply_rope", "low_precision_angles", apply_rope_bfloat16_tables),
    ("rope_interleaved", "low_precision_angles", interleaved_half_tables),
    ("rope_interleaved", "low_precision_angles", interleaved_half_angles),
    ("RotaryEmbedding", "low_precision_angles", RotaryFloat16Buffers),
    ("RotaryEmbedding", "low_precision_angles", RotaryBfloat16Buffers),
    ("RotaryEmbedding", "low_precision_angles", RotaryHalfPositions),
]


def cache_nan_sentinel(head_dim, max_len, base=10000.0):
    # tables filled with NaN "to see what is missing", then only the first half written
    cos, sin = torch.full((max_len, head_dim), float("nan")), torch.full((max_len, head_dim), float("nan"))
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(max_len).float(), inv_freq)
    cos[:, : head_dim // 2], sin[:, : head_dim // 2] = angles.cos(), angles.sin()
    return cos, sin


class RotaryNormalisedByPosition(RotaryCached):
    # q rotated, then "normalised" by its position: 0 / 0 at position 0
    def forward(self, q, k, positions=None):
        q_rot, k_rot = super().forward(q, k, positions)
        m = torch.arange(q.shape[-2], device=q.device) if positions is None else positions
        scale = (m / m).float()[..., None]  # NaN at position 0
        if scale.dim() == 3:
            scale = scale[:, None]
        return q_rot * scale, k_rot * scale


WRONG += [
    ("rope_cache", "nan_or_inf", cache_nan_sentinel),
    ("RotaryEmbedding", "nan_or_inf", RotaryNormalisedByPosition),
]


# --- right on the direct probes' fresh tensors, wrong inside a real model (the second oracle) ---------


def _write_rows(x, c, s):
    # clone, flatten to rows, write each half in place: on a contiguous x, reshape is a view of the clone
    d = x.shape[-1]
    out = x.float().clone()  # clone keeps a transposed view's strides...
    rows = out.reshape(-1, d)  # ...so there reshape COPIES, and these writes never reach `out`
    c, s = c.expand(out.shape).reshape(-1, d), s.expand(out.shape).reshape(-1, d)
    x1, x2 = rows[:, : d // 2].clone(), rows[:, d // 2 :].clone()
    rows[:, : d // 2] = x1 * c[:, : d // 2] - x2 * s[:, : d // 2]
    rows[:, d // 2 :] = x2 * c[:, d // 2 :] + x1 * s[:, d // 2 :]
    return out.to(x.dtype)


def apply_rope_writes_into_reshape(q, k, cos, sin, positions=None):
    c, s = _rows(cos, sin, q.shape[-2], positions)
    return _write_rows(q, c, s), _write_rows(k, c, s)


class RotaryWritesIntoReshape(RotaryCached):
    def forward(self, q, k, positions=None):
        T = q.shape[2]
        if positions is None:
            if T > self.max_len:
                raise ValueError(f"sequence length {T} exceeds max_len {self.max_len}")
            positions = torch.arange(T, device=q.device)
        if positions.max() >= self.max_len:
            raise ValueError(f"position {int(positions.max())} >= max_len {self.max_len}")
        c, s = _rows(self.cos_cached, self.sin_cached, T, positions)
        return _write_rows(q, c, s), _write_rows(k, c, s)


def apply_rope_views_heads_flat(q, k, cos, sin, positions=None):
    # batch and heads merged with .view: fine on fresh tensors, refused on a transposed view
    c, s = _rows(cos, sin, q.shape[-2], positions)

    def turn(x):
        B, H, T, d = x.shape
        flat = x.view(B * H, T, d).float()
        cc = c.expand(B, H, T, d).reshape(B * H, T, d)
        ss = s.expand(B, H, T, d).reshape(B * H, T, d)
        return (flat * cc + rotate_half_hf(flat) * ss).view(B, H, T, d).to(x.dtype)

    return turn(q), turn(k)


def interleaved_flat_rows(x, positions=None, base=10000.0):
    # every (position, pair) as a row of a 2-D view
    B, H, T, d = x.shape
    if positions is None:
        positions = torch.arange(T, device=x.device)
    theta = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = (positions.float()[:, None] * theta).repeat(B * H, 1)  # (B*H*T, d/2)
    rows = x.view(-1, d).float()
    even, odd = rows[:, 0::2], rows[:, 1::2]
    out = torch.stack([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()], dim=-1)
    return out.view(B, H, T, d).to(x.dtype)


def partial_views_heads_flat(q, k, cos, sin, positions=None):
    r = cos.shape[-1]
    c, s = _rows(cos, sin, q.shape[-2], positions)

    def turn(x):
        B, H, T, d = x.shape
        flat = x.view(B * H, T, d)
        rot = flat[..., :r].float().view(B, H, T, r)
        turned = (rot * c + rotate_half_hf(rot) * s).to(x.dtype)
        return torch.cat([turned, flat[..., r:].view(B, H, T, d - r)], dim=-1)

    return turn(q), turn(k)


# (since issue 41 the direct probes hand transposed views too: these are contiguity_assumed before the oracle runs)
WRONG += [
    ("apply_rope", "contiguity_assumed", apply_rope_writes_into_reshape),
    ("RotaryEmbedding", "contiguity_assumed", RotaryWritesIntoReshape),
    ("apply_rope", "contiguity_assumed", apply_rope_views_heads_flat),
    ("rope_interleaved", "contiguity_assumed", interleaved_flat_rows),
    ("apply_partial_rope", "contiguity_assumed", partial_views_heads_flat),
]


# INDEPENDENT: which catalogue mistakes are independent aspects of the code (each pair made together by an ALSO
# submission); ONE_ASPECT: why an exercise's mistakes are all values of one choice. tests/test_also_wrong.py reads both.
INDEPENDENT = {
    # RoPE: which components pair up (the layout), the angles' frequencies, the turn's direction, the positions read
    "rope_cache": [("rope_interleaved_convention", "wrong_exponent")],
    "rotate_half": [("rope_interleaved_convention", "rope_sign_flip")],
    "apply_rope": [("rope_interleaved_convention", "rope_sign_flip")],
    "rope_interleaved": [("rope_half_split_convention", "rope_sign_flip"), ("rope_sign_flip", "wrong_exponent")],
    "RotaryEmbedding": [("rope_interleaved_convention", "wrong_exponent")],
    "rope_from_shift_matrix": [("rope_sign_flip", "rope_ignores_positions")],
    # where the turned part sits in the head, and the turn's direction
    "apply_partial_rope": [("partial_rope_last_dims", "rope_sign_flip")],
}


# --- issue 32: the exercise's method skipped; the base not passed on -----------------------------


def shift_rope_through_interleaved(x, positions=None, base=10000.0):
    """Never builds chapter 03's matrix: the right values from the earlier exercise's code."""
    return interleaved_complex(x, positions, base)


def shift_rope_base_not_passed(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = torch.arange(T) if positions is None else positions.cpu()
    M = torch.stack([my_shift_matrix(int(m), d) for m in positions]).float().to(x.device)  # base left at its default
    return torch.einsum("...ti,tij->...tj", x.float(), M).to(x.dtype)


def shift_rope_einsum_angles(x, positions=None, base=10000.0):
    """lucidrains' and old NeoX's idiom (review S7): the angles by an einsum outer product, the pairs turned by
    cos/sin arithmetic; relative_shift_matrix never called, yet an einsum ran."""
    d = x.shape[-1]
    positions = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    theta = 1.0 / base ** (torch.arange(0, d, 2, device=x.device).float() / d)
    angles = torch.einsum("t,i->ti", positions.float(), theta)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2).to(x.dtype)


def shift_rope_outer_by_matmul(x, positions=None, base=10000.0):
    """The angles as a (T, 1) @ (1, d/2) product, then GPT-J's tables: a matmul, but no rotation matrix."""
    d = x.shape[-1]
    positions = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, device=x.device).float() / d)
    angles = positions.float()[:, None] @ inv_freq[None, :]
    sin, cos = (torch.repeat_interleave(f(angles), 2, -1) for f in (torch.sin, torch.cos))
    return (x.float() * cos + rotate_every_two_gptj(x.float()) * sin).to(x.dtype)


WRONG += [
    ("rope_from_shift_matrix", "method_not_used", shift_rope_einsum_angles),
    ("rope_from_shift_matrix", "method_not_used", shift_rope_outer_by_matmul),
    ("rope_from_shift_matrix", "method_not_used", shift_rope_through_interleaved),
    ("rope_from_shift_matrix", "wrong_base", shift_rope_base_not_passed),
]

# Wrong submissions above that make a second mistake: positions past max_len are not refused (one checks no
# length, the other only T, and ignores the positions). tests/test_checks.py allows "Also wrong" only for these.
ALSO += [
    ("RotaryEmbedding", "rope_mixed_pairing", "no_length_check", RotaryHalvesWithRepeatedAngles),
    ("RotaryEmbedding", "rope_ignores_positions", "no_length_check", RotaryIgnoresPositions),
]


def partial_whole_head_own_tables(q, k, cos, sin, positions=None):
    """Turns the whole head, with tables rebuilt for head_dim (the given cos and sin are never read)."""
    T, d = q.shape[-2], q.shape[-1]
    positions = torch.arange(T, device=q.device) if positions is None else positions
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=q.device).float() / d))
    angles = positions.float()[..., None] * inv_freq
    c, s = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    c, s = (c[:, None], s[:, None]) if c.dim() == 3 else (c, s)
    return tuple((x.float() * c + rotate_half_hf(x.float()) * s).to(x.dtype) for x in (q, k))


WRONG += [("apply_partial_rope", "partial_rope_whole_head", partial_whole_head_own_tables)]


# --- issue 32: right on a GPU, so right here: the angles built on the CPU and moved back ----------------


def interleaved_angles_on_cpu_moved_back(x, positions=None, base=10000.0):
    """Review I8: everything meets on the CPU (`positions.cpu()`, a CPU arange) and comes back with .to(x.device)."""
    T, d = x.shape[-2:]
    t = torch.arange(T) if positions is None else positions.cpu()
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2).double() / d))
    angles = (t.double()[:, None] * inv_freq).float().to(x.device)  # (T, d/2), moved to x's device
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    c, s = angles.cos(), angles.sin()
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2).to(x.dtype)


RIGHT["rope_interleaved"].append(interleaved_angles_on_cpu_moved_back)


# --- issue 32: a RoPE cache from Llama 3.1's rescaled frequencies: the exponent is right -------------------


def llama3_inv_freq(d, base, factor=8.0, low=1.0, high=4.0, original=8192):
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
    wavelen = 2 * math.pi / inv_freq
    low_wl, high_wl = original / low, original / high
    scaled = torch.where(wavelen > low_wl, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen >= high_wl) & (wavelen <= low_wl)
    return torch.where(is_mid, mid, scaled)


def rope_cache_llama31(head_dim, max_len, base=10000.0):
    """Llama 3.1's frequencies (its rope_scaling applied), as a model card's code computes them."""
    inv_freq = llama3_inv_freq(head_dim, base, original=64)
    angles = torch.arange(max_len).float()[:, None] * inv_freq
    emb = torch.cat([angles, angles], -1)
    return emb.cos(), emb.sin()


WRONG += [("rope_cache", "wrong_values", rope_cache_llama31)]


# --- issue 41: the axes of the contracts (rope_axes): the tables handed in, gradients, transposed views,
# decode shapes (positions (B, 1)), defaults used as defaults ------------------------------------------------


def apply_rope_own_float64_angles(q, k, cos, sin, positions=None):
    """Builds its own angles (base 10000, float64) and never reads cos and sin."""
    T, d = q.shape[-2], q.shape[-1]
    positions = torch.arange(T, device=q.device) if positions is None else positions
    theta = 10000.0 ** (-torch.arange(0, d, 2, device=q.device, dtype=torch.float64) / d)
    angles = positions.double()[..., None] * theta
    angles = torch.cat([angles, angles], dim=-1)
    if angles.dim() == 3:
        angles = angles[:, None]
    return tuple((x.double() * angles.cos() + _rotate_half(x.double()) * angles.sin()).to(x.dtype) for x in (q, k))


def apply_rope_llama_rotary_inside(q, k, cos, sin, positions=None):
    """transformers' LlamaRotaryEmbedding.forward pasted in (rope_theta 10000) to make cos and sin afresh."""
    d = q.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.int64).float().to(q.device) / d))
    position_ids = torch.arange(q.shape[-2], device=q.device)[None] if positions is None else positions
    position_ids = position_ids[None] if position_ids.dim() == 1 else position_ids
    freqs = (inv_freq[None, :, None] @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return apply_rotary_pos_emb(q, k, emb.cos().to(q.dtype), emb.sin().to(q.dtype))


def partial_own_polar_angles(q, k, cos, sin, positions=None):
    """Partial RoPE whose first r dims turn by complex numbers of its own, base 10000."""
    r = cos.shape[-1]
    T = q.shape[-2]
    positions = torch.arange(T, device=q.device) if positions is None else positions
    theta = 1.0 / 10000 ** (torch.arange(0, r, 2, device=q.device).float() / r)
    angles = positions.float()[..., None] * theta
    cis = torch.polar(torch.ones_like(angles), angles)
    cis = cis[:, None] if cis.dim() == 3 else cis

    def turn(x):
        z = torch.complex(x[..., : r // 2].float(), x[..., r // 2 : r].float()) * cis
        return torch.cat([z.real, z.imag, x[..., r:].float()], dim=-1).to(x.dtype)

    return turn(q), turn(k)


def partial_neox_rotary_inside(q, k, cos, sin, positions=None):
    """GPT-NeoX's RotaryEmbedding rebuilt inside for rotary_ndims = cos.shape[-1], base 10000."""
    r = cos.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, r, 2, device=q.device).float() / r))
    own_cos, own_sin = _rows(*_neox_tables(inv_freq, 4000), q.shape[-2], positions)
    return tuple(
        torch.cat([x[..., :r] * own_cos + rotate_half_hf(x[..., :r]) * own_sin, x[..., r:]], dim=-1) for x in (q, k)
    )


def _neox_tables(inv_freq, max_len):
    freqs = torch.einsum("i,j->ij", torch.arange(max_len, device=inv_freq.device).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope_under_no_grad(q, k, cos, sin, positions=None):
    """LlamaRotaryEmbedding.forward's @torch.no_grad() carried over to the rotation itself."""
    with torch.no_grad():
        return apply_rope_hf(q, k, cos, sin, positions)


def apply_rope_in_inference_mode(q, k, cos, sin, positions=None):
    """The rotation under torch.inference_mode(): its outputs are inference tensors, with no autograd history at all."""
    with torch.inference_mode():
        return apply_rope_hf(q, k, cos, sin, positions)


def apply_rope_detached_result(q, k, cos, sin, positions=None):
    q_rot, k_rot = apply_rope_explicit_pairs(q, k, cos, sin, positions)
    return q_rot.detach(), k_rot.detach()


def partial_rotary_no_grad(q, k, cos, sin, positions=None):
    """GPT-NeoX's rotary step with the @torch.no_grad() of its RotaryEmbedding.forward carried over."""
    with torch.no_grad():
        return partial_neox(q, k, cos, sin, positions)


def partial_through_numpy(q, k, cos, sin, positions=None):
    q_rot, k_rot = partial_neox(q, k, cos, sin, positions)
    return tuple(torch.from_numpy(x.detach().cpu().float().numpy()).to(x.device, x.dtype) for x in (q_rot, k_rot))


def rotate_half_under_no_grad(x):
    with torch.no_grad():
        return rotate_half_hf(x)


def rotate_half_through_numpy(x):
    a = x.detach().cpu().float().numpy()
    half = a.shape[-1] // 2
    return torch.from_numpy(np.concatenate([-a[..., half:], a[..., :half]], axis=-1)).to(x.device, x.dtype)


def interleaved_no_grad_decorated(x, positions=None, base=10000.0):
    """Meta's precompute under @torch.no_grad() (as its inference code runs it), with the rotation inside."""

    @torch.no_grad()
    def rotate():
        return interleaved_complex(x, positions, base)

    return rotate()


class RotaryNoGradForward(RotaryCached):
    """The decorator of transformers' LlamaRotaryEmbedding.forward, on a forward that rotates q and k."""

    @torch.no_grad()
    def forward(self, q, k, positions=None):
        return super().forward(q, k, positions)


class RotaryDetachedTables(RotaryOnTheFly):
    def forward(self, q, k, positions=None):
        q_rot, k_rot = super().forward(q, k, positions)
        return q_rot.detach(), k_rot.detach()


def shift_rope_under_no_grad(x, positions=None, base=10000.0):
    with torch.no_grad():
        return shift_rope_einsum(x, positions, base)


def shift_rope_through_numpy(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = range(T) if positions is None else positions.tolist()
    M = np.stack([my_shift_matrix(m, d, base).numpy() for m in positions])  # (T, d, d)
    out = np.einsum("...ti,tij->...tj", x.detach().cpu().double().numpy(), M)
    return torch.from_numpy(out).to(x.device, x.dtype)


def rotate_half_view_rows(x):
    """Folds every leading axis into rows with view: a transposed x cannot be viewed so."""
    d = x.shape[-1]
    rows = x.view(-1, d)
    return torch.cat([-rows[:, d // 2 :], rows[:, : d // 2]], dim=-1).view(x.shape)


def rotate_half_view_pairs(x):
    d = x.shape[-1]
    halves = x.view(-1, 2, d // 2)  # (rows, 2, d/2)
    return torch.stack([-halves[:, 1], halves[:, 0]], dim=1).view(x.shape)


def apply_rope_view_rows(q, k, cos, sin, positions=None):
    """Turns (B·H·T, Dh) rows, the angles repeated per head, merging the leading axes with view."""
    B, T, d = q.shape[0], q.shape[-2], q.shape[-1]
    c, s = (cos[:T], sin[:T]) if positions is None else (cos[positions], sin[positions])
    c, s = (c.expand(B, T, d), s.expand(B, T, d)) if c.dim() == 2 else (c, s)

    def turn(x):
        H = x.shape[1]
        rows = x.view(B * H * T, d).float()
        c_rows = c[:, None].expand(B, H, T, d).reshape(-1, d)
        s_rows = s[:, None].expand(B, H, T, d).reshape(-1, d)
        return (rows * c_rows + _rotate_half(rows) * s_rows).view(x.shape).to(x.dtype)

    return turn(q), turn(k)


def apply_rope_view_heads_last(q, k, cos, sin, positions=None):
    """Folds the heads into the batch with view, (B·H, T, Dh), the angles repeated per head."""
    T, d = q.shape[-2], q.shape[-1]
    c, s = _gather(cos, sin, T, positions)

    def turn(x):
        B, H = x.shape[:2]
        flat = x.view(B * H, T, d).float()
        c_, s_ = (c.repeat_interleave(H, dim=0)[:, 0], s.repeat_interleave(H, dim=0)[:, 0]) if c.dim() == 4 else (c, s)
        return (flat * c_ + _rotate_half(flat) * s_).view(B, H, T, d).to(x.dtype)

    return turn(q), turn(k)


def interleaved_view_complex(x, positions=None, base=10000.0):
    """Meta's apply_rotary_emb with view in place of reshape, the pairs folded into rows."""
    d = x.shape[-1]
    T = x.shape[-2]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    t = torch.arange(T, device=x.device) if positions is None else positions
    cis = torch.polar(torch.ones(T, d // 2, device=x.device), torch.outer(t.float(), freqs))
    pairs = torch.view_as_complex(x.float().view(-1, T, d // 2, 2))
    return torch.view_as_real(pairs * cis).view(x.shape).to(x.dtype)


def interleaved_view_pairs(x, positions=None, base=10000.0):
    T, d = x.shape[-2], x.shape[-1]
    positions = torch.arange(T, device=x.device) if positions is None else positions
    theta = base ** (-torch.arange(0, d, 2, device=x.device).float() / d)
    angles = positions.float()[:, None] * theta
    flat = x.float().view(-1, T, d // 2, 2)
    a, b = flat[..., 0], flat[..., 1]
    out = torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], dim=-1)
    return out.view(x.shape).to(x.dtype)


class RotaryViewRows(RotaryCached):
    def forward(self, q, k, positions=None):
        B, T, d = q.shape[0], q.shape[-2], q.shape[-1]
        q_rot, k_rot = super().forward(q.view(B, -1, T, d), k.view(B, -1, T, d), positions)
        return q_rot.view(B * q.shape[1], T, d).view(q.shape), k_rot.view(B * k.shape[1], T, d).view(k.shape)


class RotaryFlattenedWithView(RotaryOnTheFly):
    """Folds the heads into the batch with view before turning."""

    def forward(self, q, k, positions=None):
        out = []
        for x in (q, k):
            B, H, T, d = x.shape
            flat = x.view(B * H, 1, T, d)
            pos = positions.repeat_interleave(H, dim=0) if positions is not None and positions.dim() == 2 else positions
            turned, _ = super().forward(flat, flat, pos)
            out.append(turned.view(B, H, T, d))
        return out[0], out[1]


def partial_view_rows(q, k, cos, sin, positions=None):
    r = cos.shape[-1]
    q_rot, k_rot = apply_rope_view_rows(q[..., :r].contiguous(), k[..., :r].contiguous(), cos, sin, positions)
    d = q.shape[-1]
    return torch.cat([q_rot, q.view(-1, d)[:, r:].view(*q.shape[:-1], d - r)], dim=-1), torch.cat(
        [k_rot, k.view(-1, d)[:, r:].view(*k.shape[:-1], d - r)], dim=-1
    )


def partial_view_heads(q, k, cos, sin, positions=None):
    d, r = q.shape[-1], cos.shape[-1]
    parts = [x.view(-1, d) for x in (q, k)]  # rows: (B·H·T, Dh)
    rot, rest = [p[:, :r].view(*x.shape[:-1], r) for p, x in zip(parts, (q, k))], [p[:, r:] for p in parts]
    q_rot, k_rot = apply_rope_hf(rot[0], rot[1], cos, sin, positions)
    return tuple(torch.cat([t, u.view(*x.shape[:-1], d - r)], dim=-1) for t, u, x in zip((q_rot, k_rot), rest, (q, k)))


def shift_rope_view_rows(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = torch.arange(T) if positions is None else positions.cpu()
    M = torch.stack([my_shift_matrix(int(m), d, base) for m in positions]).float().to(x.device)
    rows = x.float().view(-1, T, d)
    return torch.einsum("nti,tij->ntj", rows, M).view(x.shape).to(x.dtype)


def shift_rope_view_loop(x, positions=None, base=10000.0):
    T, d = x.shape[-2:]
    positions = range(T) if positions is None else positions.tolist()
    rows = x.view(-1, T, d)
    out = [rows[:, t].double() @ my_shift_matrix(m, d, base).to(x.device) for t, m in enumerate(positions)]
    return torch.stack(out, dim=1).view(x.shape).to(x.dtype)


def apply_rope_squeezed_positions(q, k, cos, sin, positions=None):
    """positions.squeeze() to turn (1, T) into (T,): (B, 1) becomes B positions of one sequence."""
    if positions is not None:
        positions = positions.squeeze()
        positions = positions[None] if positions.dim() == 0 else positions
    return apply_rope_hf(q, k, cos, sin, positions)


def apply_rope_squeezed_rows(q, k, cos, sin, positions=None):
    T = q.shape[-2]
    c = cos[:T] if positions is None else cos[positions].squeeze()
    s = sin[:T] if positions is None else sin[positions].squeeze()
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]
    return tuple((x.float() * c + _rotate_half(x.float()) * s).to(x.dtype) for x in (q, k))


def partial_squeezed_positions(q, k, cos, sin, positions=None):
    """(1, T) positions squeezed to (T,), as if only a batch of one came as (B, T)."""
    if positions is not None and positions.dim() == 2:
        positions = positions.squeeze()
    return partial_neox(q, k, cos, sin, positions)


def partial_squeezed_rows(q, k, cos, sin, positions=None):
    r = cos.shape[-1]
    T = q.shape[-2]
    c, s = (cos[:T], sin[:T]) if positions is None else (cos[positions].squeeze(), sin[positions].squeeze())
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]
    return tuple(
        torch.cat([(x[..., :r].float() * c + rotate_half_hf(x[..., :r].float()) * s).to(x.dtype), x[..., r:]], dim=-1)
        for x in (q, k)
    )


class RotarySqueezedPositions(RotaryCached):
    def forward(self, q, k, positions=None):
        if positions is not None and positions.dim() == 2:
            positions = positions.squeeze()  # meant for position_ids of shape (1, T)
        return super().forward(q, k, positions)


class RotarySqueezedRows(RotaryOnTheFly):
    def forward(self, q, k, positions=None):
        if positions is not None and positions.dim() == 2:
            positions = positions.squeeze(-1) if positions.shape[-1] == 1 else positions
        return super().forward(q, k, positions)


class RotaryMaxLen4096(RotaryCached):
    """Llama 2's 4096 (its config's max_position_embeddings) as the default."""

    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__(head_dim, max_len, base)


class RotaryMaxLen512(RotaryOnTheFly):
    """BERT's 512 as the default."""

    def __init__(self, head_dim, max_len=512, base=10000.0):
        super().__init__(head_dim, max_len, base)


class RotaryBase500000(RotaryCached):
    """Llama 3's rope_theta as the default."""

    def __init__(self, head_dim, max_len=2048, base=500000.0):
        super().__init__(head_dim, max_len, base)


def interleaved_base_1e6(x, positions=None, base=1000000.0):
    """Code Llama's rope_theta as the default."""
    return interleaved_complex(x, positions, base)


def shift_rope_base_500000(x, positions=None, base=500000.0):
    return shift_rope_einsum(x, positions, base)


# right, ported: the rotation outside the no_grad that makes the tables (transformers' Llama), and
# torchtune's RotaryPositionalEmbeddings (reshape, not view; float32 cache)


class RotaryLlamaSplit(nn.Module):
    """transformers' LlamaRotaryEmbedding (cos and sin under @torch.no_grad()) with apply_rotary_pos_emb outside it."""

    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__()
        self.max_len = max_len
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def tables(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)

    def forward(self, q, k, positions=None):
        positions = torch.arange(q.shape[-2], device=q.device) if positions is None else positions
        if int(positions.max()) >= self.max_len:
            raise ValueError(f"position {int(positions.max())} is past max_len={self.max_len}")
        position_ids = positions[None] if positions.dim() == 1 else positions
        cos, sin = self.tables(q.float(), position_ids)
        q_rot, k_rot = apply_rotary_pos_emb(q.float(), k.float(), cos, sin)
        return q_rot.to(q.dtype), k_rot.to(k.dtype)


def interleaved_torchtune(x, positions=None, base=10000.0):
    """torchtune's RotaryPositionalEmbeddings.forward, with x as (B, H, T, Dh) and its cache built per call."""
    T, d = x.shape[-2], x.shape[-1]
    theta = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device)[: (d // 2)].float() / d))
    seq_idx = torch.arange(T, device=x.device) if positions is None else positions
    idx_theta = torch.einsum("i, j -> ij", seq_idx.float(), theta).float()
    rope_cache = torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1)  # (T, d/2, 2)
    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
    x_out = torch.stack(
        [
            xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
            xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1],
        ],
        -1,
    )
    return x_out.flatten(3).type_as(x)


RIGHT["RotaryEmbedding"].append(RotaryLlamaSplit)
RIGHT["rope_interleaved"].append(interleaved_torchtune)
WRONG += [
    ("apply_rope", "argument_ignored", apply_rope_own_float64_angles),
    ("apply_rope", "argument_ignored", apply_rope_llama_rotary_inside),
    ("apply_partial_rope", "argument_ignored", partial_own_polar_angles),
    ("apply_partial_rope", "argument_ignored", partial_neox_rotary_inside),
    ("apply_rope", "gradient_cut", apply_rope_under_no_grad),
    ("apply_rope", "gradient_cut", apply_rope_detached_result),
    ("apply_rope", "gradient_cut", apply_rope_in_inference_mode),
    ("apply_partial_rope", "gradient_cut", partial_through_numpy),
    ("apply_partial_rope", "gradient_cut", partial_rotary_no_grad),
    ("rotate_half", "gradient_cut", rotate_half_under_no_grad),
    ("rotate_half", "gradient_cut", rotate_half_through_numpy),
    ("rope_interleaved", "gradient_cut", interleaved_numpy),
    ("rope_interleaved", "gradient_cut", interleaved_no_grad_decorated),
    ("RotaryEmbedding", "gradient_cut", RotaryNoGradForward),
    ("RotaryEmbedding", "gradient_cut", RotaryDetachedTables),
    ("rope_from_shift_matrix", "gradient_cut", shift_rope_under_no_grad),
    ("rope_from_shift_matrix", "gradient_cut", shift_rope_through_numpy),
    ("rotate_half", "contiguity_assumed", rotate_half_view_rows),
    ("rotate_half", "contiguity_assumed", rotate_half_view_pairs),
    ("apply_rope", "contiguity_assumed", apply_rope_view_rows),
    ("apply_rope", "contiguity_assumed", apply_rope_view_heads_last),
    ("apply_partial_rope", "contiguity_assumed", partial_view_rows),
    ("apply_partial_rope", "contiguity_assumed", partial_view_heads),
    ("rope_interleaved", "contiguity_assumed", interleaved_view_complex),
    ("rope_interleaved", "contiguity_assumed", interleaved_view_pairs),
    ("RotaryEmbedding", "contiguity_assumed", RotaryViewRows),
    ("RotaryEmbedding", "contiguity_assumed", RotaryFlattenedWithView),
    ("rope_from_shift_matrix", "contiguity_assumed", shift_rope_view_rows),
    ("rope_from_shift_matrix", "contiguity_assumed", shift_rope_view_loop),
    ("apply_rope", "squeezed_size_one", apply_rope_squeezed_positions),
    ("apply_rope", "squeezed_size_one", apply_rope_squeezed_rows),
    ("apply_partial_rope", "squeezed_size_one", partial_squeezed_positions),
    ("apply_partial_rope", "squeezed_size_one", partial_squeezed_rows),
    ("RotaryEmbedding", "squeezed_size_one", RotarySqueezedPositions),
    ("RotaryEmbedding", "squeezed_size_one", RotarySqueezedRows),
    ("RotaryEmbedding", "default_changed", RotaryMaxLen4096),
    ("RotaryEmbedding", "default_changed", RotaryMaxLen512),
    ("RotaryEmbedding", "default_changed", RotaryBase500000),
    ("rope_interleaved", "default_changed", interleaved_base_1e6),
    ("rope_from_shift_matrix", "default_changed", shift_rope_base_500000),
]


# --- right on every direct probe (head_dim 8), wrong at a real model's head size: the second oracle -------


def apply_rope_halves_of_eight(q, k, cos, sin, positions=None):
    """rotate_half written for the head size of the exercise's examples: halves of 4 and the rest."""
    c, s = _rows(cos, sin, q.shape[-2], positions)

    def turn(x):
        x1, x2 = x[..., :4].float(), x[..., 4:].float()
        return (x.float() * c + torch.cat([-x2, x1], dim=-1) * s).to(x.dtype)

    return turn(q), turn(k)


def apply_rope_pairs_of_eight(q, k, cos, sin, positions=None):
    """The halves taken with a view to (..., 2, 4): head_dim 8 hard-coded, refused by any other head size."""
    c, s = _rows(cos, sin, q.shape[-2], positions)

    def turn(x):
        halves = x.float().reshape(*x.shape[:-1], 2, 4)
        return (x.float() * c + torch.cat([-halves[..., 1, :], halves[..., 0, :]], dim=-1) * s).to(x.dtype)

    return turn(q), turn(k)


WRONG += [
    ("apply_rope", "library_mismatch", apply_rope_halves_of_eight),
    ("apply_rope", "library_raised", apply_rope_pairs_of_eight),
]


def shift_rope_matrix_power(x, positions=None, base=10000.0):
    """M_m as M_1 to the power m (the composition property), in float64 from chapter 03's float32 M_1."""
    T, d = x.shape[-2:]
    positions = range(T) if positions is None else positions.tolist()
    M1 = my_shift_matrix(1, d, base).float().double()
    M = torch.stack([torch.linalg.matrix_power(M1, int(m)) for m in positions]).to(x.device)
    return torch.einsum("...ti,tij->...tj", x.double(), M).to(x.dtype)


WRONG += [("rope_from_shift_matrix", "wrong_values", shift_rope_matrix_power)]


# --- issue 41: frequencies rounded to bfloat16 before the angles, probed at base 10000 and positions to 3999 ---


def interleaved_bfloat16_frequencies(x, positions=None, base=10000.0):
    """Meta's code with freqs kept as a bfloat16 buffer ("the model runs in bfloat16"), angles in float32."""
    T, d = x.shape[-2], x.shape[-1]
    freqs = (1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))).to(torch.bfloat16)
    t = torch.arange(T, device=x.device) if positions is None else positions
    angles = torch.outer(t.float(), freqs.float())
    cis = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * cis).flatten(3).type_as(x)


class RotaryBfloat16InvFreq(RotaryOnTheFly):
    """HF's inv_freq buffer cast with the model (`.to(torch.bfloat16)` in __init__), read back as float32 in forward."""

    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)
        self.inv_freq = self.inv_freq.to(torch.bfloat16)


WRONG += [
    ("rope_interleaved", "low_precision_angles", interleaved_bfloat16_frequencies),
    ("RotaryEmbedding", "low_precision_angles", RotaryBfloat16InvFreq),
]


# Review of 2026-11-27 (A2, A4): apply_rope's rows of the tables, per sequence and not one off.


def apply_rope_first_row(q, k, cos, sin, positions=None):
    """(B, T) positions read as positions[0]: every sequence turned at the first one's positions."""
    T = q.shape[-2]
    if positions is None:
        positions = torch.arange(T, device=q.device)
    if positions.dim() == 2:
        positions = positions[0]
    c, s = cos[positions], sin[positions]
    return q * c + rotate_half_hf(q) * s, k * c + rotate_half_hf(k) * s


def apply_rope_index_select_first(q, k, cos, sin, positions=None):
    """The rows gathered with index_select on the flattened positions, cut to T: the first sequence's."""
    T = q.shape[-2]
    rows = torch.arange(T, device=q.device) if positions is None else positions.reshape(-1)[:T]
    c, s = cos.index_select(0, rows), sin.index_select(0, rows)
    return q * c + rotate_half_hf(q) * s, k * c + rotate_half_hf(k) * s


def apply_rope_row_plus_one(q, k, cos, sin, positions=None):
    """`cos[positions + 1]`: each token one row further on."""
    if positions is None:
        positions = torch.arange(q.shape[-2], device=q.device)
    c, s = cos[positions + 1], sin[positions + 1]
    if c.dim() == 3:
        c, s = c.unsqueeze(1), s.unsqueeze(1)
    return q * c + rotate_half_hf(q) * s, k * c + rotate_half_hf(k) * s


def apply_rope_slice_from_one(q, k, cos, sin, positions=None):
    """The slice `cos[1:T + 1]` for positions None, and the gathered rows shifted alike."""
    T = q.shape[-2]
    c, s = (cos[1 : T + 1], sin[1 : T + 1]) if positions is None else (cos[positions + 1], sin[positions + 1])
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]
    return q * c + rotate_half_hf(q) * s, k * c + rotate_half_hf(k) * s


WRONG += [
    ("apply_rope", "positions_first_row", apply_rope_first_row),
    ("apply_rope", "positions_first_row", apply_rope_index_select_first),
    ("apply_rope", "position_offset", apply_rope_row_plus_one),
    ("apply_rope", "position_offset", apply_rope_slice_from_one),
]
