"""Chapter 03 submissions (sinusoidal encodings), written as students write them.

RIGHT: different correct implementations; every one must pass.
WRONG: (exercise id, the diagnosis it must get, the code); each is a real
mistake, and the check must name exactly that code.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# --- right: sinusoidal_encoding ----------------------------------------------


def table_loop(max_len, d_model, base=10000.0):
    """The formula, entry by entry, in plain Python."""
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / base ** (2 * (j // 2) / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def table_exp_log(max_len, d_model, base=10000.0):
    """The Annotated Transformer's vectorised exp-log form, float32 throughout."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(base) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)[:, : d_model // 2]
    return pe


def table_pow_stack(max_len, d_model, base=10000.0):
    """pow form, float64, sin and cos stacked then interleaved by reshape; the odd column cut off."""
    half = (d_model + 1) // 2
    omega = 1.0 / base ** (torch.arange(half, dtype=torch.float64) * 2 / d_model)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * omega[None, :]
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(max_len, 2 * half)
    return pe[:, :d_model].float()


def table_numpy(max_len, d_model, base=10000.0):
    """NumPy, then torch.from_numpy."""
    pos = np.arange(max_len)[:, None]
    i = np.arange(d_model)[None, :]
    angles = pos / np.power(base, (2 * (i // 2)) / d_model)
    angles[:, 0::2] = np.sin(angles[:, 0::2])
    angles[:, 1::2] = np.cos(angles[:, 1::2])
    return torch.from_numpy(angles).float()


def table_keras_masks(max_len, d_model, base=10000.0):
    """keras-nlp's SinePositionEncoding, ported: one frequency per column from 2·(j // 2), then sin and cos masks."""
    j = torch.arange(d_model)
    timescales = (1.0 / base) ** ((2 * (j // 2)).float() / d_model)
    angles = torch.arange(max_len).float()[:, None] * timescales[None, :]
    cos_mask = (j % 2).float()
    return torch.sin(angles) * (1 - cos_mask) + torch.cos(angles) * cos_mask


def table_polar(max_len, d_model, base=10000.0):
    """Complex numbers: i·e^(-iθ) = sin θ + i·cos θ, so view_as_real interleaves (sin, cos); einsum for the angles."""
    half = (d_model + 1) // 2
    omega = torch.exp(-math.log(base) * torch.arange(half, dtype=torch.float64) * 2 / d_model)
    angles = torch.einsum("p,f->pf", torch.arange(max_len, dtype=torch.float64), omega)
    z = 1j * torch.polar(torch.ones_like(angles), -angles)
    return torch.view_as_real(z).reshape(max_len, 2 * half)[:, :d_model].float()


# --- wrong: sinusoidal_encoding ----------------------------------------------


def table_cos_first(max_len, d_model, base=10000.0):
    pe = torch.zeros(max_len, d_model)
    angles = torch.arange(max_len)[:, None] * base ** (-torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2] = torch.cos(angles)
    pe[:, 1::2] = torch.sin(angles)[:, : d_model // 2]
    return pe


def table_fairseq_halves(max_len, d_model, base=10000.0):
    half = d_model // 2
    emb = math.log(base) / half
    emb = torch.exp(torch.arange(half, dtype=torch.float) * -emb)
    emb = torch.arange(max_len, dtype=torch.float)[:, None] * emb[None, :]
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)


def table_exact_halves(max_len, d_model, base=10000.0):
    """Halves, but with the paper's frequencies."""
    omega = base ** (-torch.arange(0, d_model, 2) / d_model)
    angles = torch.arange(max_len)[:, None] * omega
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def table_base_1000(max_len, d_model, base=10000.0):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (1000 ** (i / d_model)))
            pe[pos, i + 1] = math.cos(pos / (1000 ** (i / d_model)))
    return pe


def table_hardcoded_base(max_len, d_model, base=10000.0):
    return table_exp_log(max_len, d_model)  # the base argument is never passed on


def table_i_over_d(max_len, d_model, base=10000.0):
    pe = torch.zeros(max_len, d_model)
    omega = 1 / base ** (torch.arange(d_model // 2) / d_model)  # the 2 is missing
    angles = torch.arange(max_len)[:, None] * omega
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()
    return pe


def table_column_index(max_len, d_model, base=10000.0):
    """A popular tutorial's loop: the cos column uses (i + 1) in the exponent."""
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (base ** (i / d_model)))
            pe[pos, i + 1] = math.cos(pos / (base ** ((i + 1) / d_model)))
    return pe


def table_never_stored(max_len, d_model, base=10000.0):
    """The JAX habit in torch: index_copy (no underscore) returns a new tensor."""
    pe = torch.zeros(max_len, d_model)
    angles = torch.arange(max_len)[:, None] * base ** (-torch.arange(0, d_model, 2) / d_model)
    pe.index_copy(1, torch.arange(0, d_model, 2), angles.sin())  # not index_copy_: the new tensor is dropped
    pe.index_copy(1, torch.arange(1, d_model, 2), angles.cos())
    return pe


def table_cos_never_stored(max_len, d_model, base=10000.0):
    """Half-ported from JAX: the first .at[].set() result is assigned, the second is not."""
    pe = np.zeros((max_len, d_model), dtype=np.float32)
    angles = np.arange(max_len)[:, None] / base ** (np.arange(0, d_model, 2) / d_model)
    pe[:, 0::2] = np.sin(angles)
    torch.from_numpy(pe).index_copy(
        1, torch.arange(1, d_model, 2), torch.from_numpy(np.cos(angles[:, : d_model // 2])).float()
    )
    return torch.from_numpy(pe)


def table_from_position_one(max_len, d_model, base=10000.0):
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(1, max_len + 1).unsqueeze(1)
    angles = position * base ** (-torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()
    return pe


def table_odd_crashes(max_len, d_model, base=10000.0):
    pe = torch.zeros(max_len, d_model)
    angles = torch.arange(max_len)[:, None] * base ** (-torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)  # one cos column too many when d_model is odd
    return pe


def table_odd_rounded_down(max_len, d_model, base=10000.0):
    """Builds an even table of d_model - 1 columns and pads with zeros."""
    even = table_exp_log(max_len, d_model - d_model % 2, base)
    return F.pad(even, (0, d_model % 2))


def table_t2t_halves(max_len, d_model, base=10000.0):
    """tensor2tensor's get_timing_signal_1d, ported: sin block, cos block, and a log step of
    log(base) / (num_timescales - 1), so the exponent is 2i/(d-2), not 2i/d."""
    num_timescales = d_model // 2
    log_timescale_increment = math.log(base) / max(num_timescales - 1, 1)
    inv_timescales = torch.exp(torch.arange(num_timescales, dtype=torch.float32) * -log_timescale_increment)
    scaled_time = torch.arange(max_len, dtype=torch.float32)[:, None] * inv_timescales[None, :]
    signal = torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)
    return F.pad(signal, (0, d_model % 2))


def table_logspace(max_len, d_model, base=10000.0):
    """Frequencies from 1 down to 1/base, log-spaced with logspace: the last one is 1/base, one step too slow."""
    omega = torch.logspace(0, -math.log10(base), d_model // 2, dtype=torch.float64)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * omega
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angles.sin().float(), angles.cos().float()
    return pe


def table_wavelengths(max_len, d_model, base=10000.0):
    """The paper's wavelengths run from 2π to base·2π; dividing the position by the wavelength drops the 2π."""
    wavelength = 2 * math.pi * base ** (torch.arange(0, d_model, 2) / d_model)
    angles = torch.arange(max_len)[:, None] / wavelength
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()
    return pe


def table_halves_from_one(max_len, d_model, base=10000.0):
    """Two mistakes: halves, and positions from 1."""
    omega = base ** (-torch.arange(0, d_model, 2) / d_model)
    angles = torch.arange(1, max_len + 1)[:, None] * omega
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def table_cos_first_from_one(max_len, d_model, base=10000.0):
    """Two mistakes: cos in the even columns, and positions from 1."""
    pe = torch.zeros(max_len, d_model)
    angles = torch.arange(1, max_len + 1)[:, None] * base ** (-torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.cos(angles), torch.sin(angles)
    return pe


def table_float64(max_len, d_model, base=10000.0):
    return table_pow_stack(max_len, d_model, base).double()


def table_transposed(max_len, d_model, base=10000.0):
    return table_exp_log(max_len, d_model, base).T.contiguous()


# --- right: relative_shift_matrix --------------------------------------------


def shift_blocks(k, d_model, base=10000.0):
    """One 2×2 rotation per pair, written into a zero matrix."""
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        b = k / base ** (2 * i / d_model)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = math.cos(b), math.sin(b)
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -math.sin(b), math.cos(b)
    return M


def shift_block_diag(k, d_model, base=10000.0):
    omega = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(base) / d_model))
    blocks = [
        torch.tensor([[c, s], [-s, c]]) for c, s in zip(torch.cos(k * omega).tolist(), torch.sin(k * omega).tolist())
    ]
    return torch.block_diag(*blocks)


def shift_matrix_exp(k, d_model, base=10000.0):
    """A shift by k is k shifts by 1: M = exp(k·G), G the generator of the rotations."""
    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    G = torch.zeros(d_model, d_model, dtype=torch.float64)
    G[torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)] = omega
    G[torch.arange(1, d_model, 2), torch.arange(0, d_model, 2)] = -omega
    return torch.linalg.matrix_exp(k * G).float()


def shift_numpy_then_float32(k, d_model, base=10000.0):
    """NumPy's float64, cast to float32 at the end."""
    return shift_numpy_float64(k, d_model, base).float()


def shift_numpy_float64(k, d_model, base=10000.0):
    """NumPy's float64, returned as it is: right values, but not the float32 the exercise returns."""
    M = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        b = k * base ** (-2 * i / d_model)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[np.cos(b), np.sin(b)], [-np.sin(b), np.cos(b)]]
    return torch.from_numpy(M)


def shift_polar(k, d_model, base=10000.0):
    """The turn of each pair as one complex number e^(i·k·ω), its parts written with index tensors."""
    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    z = torch.polar(torch.ones_like(omega), k * omega)
    even = torch.arange(0, d_model, 2)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[even, even], M[even, even + 1], M[even + 1, even], M[even + 1, even + 1] = z.real, z.imag, -z.imag, z.real
    return M.float()


# --- wrong: relative_shift_matrix --------------------------------------------


def shift_transposed_blocks(k, d_model, base=10000.0):
    return shift_blocks(k, d_model, base).T.contiguous()


def shift_halves(k, d_model, base=10000.0):
    half = d_model // 2
    M = torch.zeros(d_model, d_model)
    for i in range(half):
        b = k / base ** (2 * i / d_model)
        M[i, i], M[i, i + half] = math.cos(b), math.sin(b)
        M[i + half, i], M[i + half, i + half] = -math.sin(b), math.cos(b)
    return M


def shift_base_1000(k, d_model, base=10000.0):
    return shift_blocks(k, d_model, 1000.0)


def shift_i_over_d(k, d_model, base=10000.0):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        b = k / base ** (i / d_model)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(b), math.sin(b)], [-math.sin(b), math.cos(b)]]
        )
    return M


def shift_scatter_dropped(k, d_model, base=10000.0):
    M = torch.zeros(d_model, d_model)
    diagonal = torch.cos(k * base ** (-torch.arange(0, d_model, 2) / d_model)).repeat_interleave(2)
    M.diagonal().add(diagonal)  # not add_: the sum is returned and dropped
    return M


def shift_k_plus_one(k, d_model, base=10000.0):
    return shift_blocks(k + 1, d_model, base)


def shift_identity(k, d_model, base=10000.0):
    return torch.eye(d_model)


# --- right: PositionalEncoding -----------------------------------------------


class PositionalEncodingAnnotated(nn.Module):
    """The Annotated Transformer's, batch first, the table kept (1, max_len, d)."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.max_len = max_len
        pe = table_exp_log(max_len, d_model)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError(f"sequence length {x.size(1)} > max_len {self.max_len}")
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)


class PositionalEncodingFunctional(nn.Module):
    """A non-persistent buffer, F.dropout with the training flag, an odd-d-safe table."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.p = dropout
        self.register_buffer("table", table_pow_stack(max_len, d_model), persistent=False)

    def forward(self, x):
        T = x.shape[-2]
        if T > self.table.shape[0]:
            raise ValueError(f"T={T} is longer than max_len={self.table.shape[0]}")
        return F.dropout(x + self.table[:T], p=self.p, training=self.training)


class PositionalEncodingIndexSelect(nn.Module):
    """The table computed in float64 with einsum, cast to float32 once; the rows picked with index_select."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        angles = torch.einsum("p,f->pf", torch.arange(max_len, dtype=torch.float64), omega)
        table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)[:, :d_model]
        self.register_buffer("encoding", table.to(torch.float32))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        T = x.size(1)
        if T > self.encoding.size(0):
            raise ValueError(f"sequence of {T} positions, but the table has {self.encoding.size(0)}")
        return self.drop(x + self.encoding.index_select(0, torch.arange(T, device=x.device)))


# --- wrong: PositionalEncoding -----------------------------------------------


class PositionalEncodingParameter(PositionalEncodingAnnotated):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        pe = self.pe
        del self.pe
        self.pe = nn.Parameter(pe)


class PositionalEncodingPlainAttribute(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.pe = table_exp_log(max_len, d_model)  # a plain tensor: never moves to the GPU

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long: increase max_len")
        return self.dropout(x + self.pe[: x.size(1)])


class PositionalEncodingRecomputes(nn.Module):
    """No table at all: the encoding is recomputed in every forward."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return self.dropout(x + table_exp_log(x.size(1), self.d_model).to(x.device))


class PositionalEncodingFirstRow(PositionalEncodingAnnotated):
    def forward(self, x):
        return self.dropout(x + self.pe[:, 0])


class PositionalEncodingSeqFirst(nn.Module):
    """The PyTorch tutorial's module, which expects (T, B, d), fed (B, T, d)."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.register_buffer("pe", table_exp_log(max_len, d_model).unsqueeze(1))  # (max_len, 1, d)

    def forward(self, x):
        if x.size(0) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(0)])


class PositionalEncodingSelectsOnCpu(PositionalEncodingAnnotated):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        positions = torch.arange(x.size(1))  # on the CPU, whatever x's device
        return self.dropout(x + self.pe[0].index_select(0, positions))


class PositionalEncodingNoDropout(PositionalEncodingAnnotated):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.pe[:, : x.size(1)]


class PositionalEncodingScalesInput(PositionalEncodingAnnotated):
    # the TensorFlow tutorial's habit: x *= sqrt(d_model) before the positions are added
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError(f"sequence length {x.size(1)} > max_len {self.max_len}")
        x = x * math.sqrt(x.size(-1))
        return self.dropout(x + self.pe[:, : x.size(1)])


class PositionalEncodingScalesSum(PositionalEncodingFunctional):
    # the sum scaled, with the width remembered from __init__
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.scale = d_model**0.5

    def forward(self, x):
        T = x.shape[1]
        if T > self.table.shape[0]:
            raise ValueError(f"T={T} is longer than max_len={self.table.shape[0]}")
        return F.dropout((x + self.table[:T]) * self.scale, p=self.p, training=self.training)


class PositionalEncodingNoLengthCheck(PositionalEncodingAnnotated):
    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1)])  # silently short when T > max_len: a broadcast error


class PositionalEncodingHalves(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", table_fairseq_halves(max_len, d_model))

    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pe[: x.size(1)])


class PositionalEncodingHardcodedDropout(PositionalEncodingAnnotated):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.dropout = nn.Dropout(0.1)


class PositionalEncodingT2T(PositionalEncodingAnnotated):
    """tensor2tensor's table in the Annotated Transformer's module: halves, and the exponent 2i/(d-2)."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_t2t_halves(max_len, d_model).unsqueeze(0)


class PositionalEncodingLogspace(PositionalEncodingAnnotated):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_logspace(max_len, d_model).unsqueeze(0)


class PositionalEncodingDropoutAlwaysOn(PositionalEncodingFunctional):
    def forward(self, x):
        T = x.shape[-2]
        if T > self.table.shape[0]:
            raise ValueError("too long")
        return F.dropout(x + self.table[:T], p=self.p)  # training=True by default, even after .eval()


class PositionalEncodingBare(PositionalEncodingAnnotated):
    """Two mistakes: no dropout and no length check."""

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class PositionalEncodingD2L(nn.Module):
    """d2l.ai's PositionalEncoding, batch first: the table a plain attribute moved in forward, and no length check."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.P = torch.zeros((1, max_len, d_model))
        X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
            10000, torch.arange(0, d_model, 2, dtype=torch.float32) / d_model
        )
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X):
        X = X + self.P[:, : X.shape[1], :].to(X.device)
        return self.dropout(X)


# --- right: TokenAndPositionEmbedding ----------------------------------------


class TokenAndPositionComposed(nn.Module):
    """Reuses the chapter's PositionalEncoding for the table and the dropout."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model
        self.pos = PositionalEncodingAnnotated(d_model, max_len, dropout)

    def forward(self, ids):
        return self.pos(self.tok(ids) * math.sqrt(self.d_model))


class TokenAndPositionOwnTable(nn.Module):
    """Its own Parameter for the tokens, a tensor scale, functional dropout."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model) * d_model**-0.5)
        self.register_buffer("positions", table_loop(max_len, d_model))
        self.register_buffer("scale", torch.tensor(float(d_model)).sqrt())
        self.p = dropout

    def forward(self, ids):
        T = ids.shape[1]
        if T > self.positions.shape[0]:
            raise ValueError(f"{T} tokens but max_len is {self.positions.shape[0]}")
        return F.dropout(self.weight[ids] * self.scale + self.positions[:T], self.p, self.training)


class TokenAndPositionNumpy(nn.Module):
    """The table built in NumPy (float64, then cast), F.embedding on a bare Parameter, a power for the scale."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model).normal_())
        self.register_buffer("pe", torch.from_numpy(table_numpy(max_len, d_model).double().numpy()).float())
        self.d_model, self.max_len, self.p = d_model, max_len, dropout

    def forward(self, ids):
        if ids.shape[-1] > self.max_len:
            raise ValueError(f"got {ids.shape[-1]} tokens, max_len is {self.max_len}")
        h = F.embedding(ids, self.weight) * self.d_model**0.5 + self.pe[: ids.shape[-1]]
        return F.dropout(h, self.p, training=self.training)


# --- wrong: TokenAndPositionEmbedding ----------------------------------------


class _TokenAndPosition(nn.Module):
    """A right module whose combination step each mistake below overrides."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", table_exp_log(max_len, d_model))
        self.dropout = nn.Dropout(dropout)
        self.d_model, self.max_len = d_model, max_len

    def combine(self, tokens, pe):
        return tokens * math.sqrt(self.d_model) + pe

    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.dropout(self.combine(self.embedding(ids), self.pe[:T]))


class TokenAndPositionNoScale(_TokenAndPosition):
    def combine(self, tokens, pe):
        return tokens + pe


class TokenAndPositionDivides(_TokenAndPosition):
    def combine(self, tokens, pe):
        return tokens / math.sqrt(self.d_model) + pe


class TokenAndPositionTimesD(_TokenAndPosition):
    def combine(self, tokens, pe):
        return tokens * self.d_model + pe


class TokenAndPositionScalesBoth(_TokenAndPosition):
    def combine(self, tokens, pe):
        return (tokens + pe) * math.sqrt(self.d_model)


class TokenAndPositionNoDropout(_TokenAndPosition):
    def forward(self, ids):
        if ids.size(1) > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.combine(self.embedding(ids), self.pe[: ids.size(1)])


class TokenAndPositionNoLengthCheck(_TokenAndPosition):
    def forward(self, ids):
        return self.dropout(self.combine(self.embedding(ids), self.pe[: ids.size(1)]))


class TokenAndPositionTrainsTable(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        pe = self.pe
        del self.pe
        self.pe = nn.Parameter(pe)


class TokenAndPositionSwapped(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_cos_first(max_len, d_model)  # assigning to a buffer's name keeps it a buffer


class TokenAndPositionFromOne(_TokenAndPosition):
    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.dropout(self.combine(self.embedding(ids), self.pe[1 : T + 1]))


class PositionalEncodingCosFirst(PositionalEncodingAnnotated):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_cos_first(max_len, d_model).unsqueeze(0)


class PositionalEncodingBase1000(PositionalEncodingAnnotated):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_base_1000(max_len, d_model).unsqueeze(0)


class PositionalEncodingColumnExponent(PositionalEncodingAnnotated):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_column_index(max_len, d_model).unsqueeze(0)


class PositionalEncodingJaxAtSet(PositionalEncodingAnnotated):
    """A JAX port: `pe.at[:, 0::2].set(...)` whose result is never assigned, kept as torch's index_copy."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        pe = torch.zeros(max_len, d_model)
        pe.index_copy(1, torch.arange(0, d_model, 2), table_exp_log(max_len, d_model)[:, 0::2])  # result dropped
        self.pe = pe.unsqueeze(0)


class PositionalEncodingTableFromOne(PositionalEncodingAnnotated):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_from_position_one(max_len, d_model).unsqueeze(0)


class TokenAndPositionHalves(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_fairseq_halves(max_len, d_model)


class TokenAndPositionHardcodedBase(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_base_1000(max_len, d_model)


class TokenAndPositionIOverD(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_i_over_d(max_len, d_model)


class TokenAndPositionNeverStored(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_never_stored(max_len, d_model)


class TokenAndPositionFirstRow(_TokenAndPosition):
    def combine(self, tokens, pe):
        return tokens * math.sqrt(self.d_model) + pe[0]


class TokenAndPositionSeqFirst(_TokenAndPosition):
    def forward(self, ids):
        if ids.size(1) > self.max_len:
            raise ValueError("sequence longer than max_len")
        tokens = self.embedding(ids) * math.sqrt(self.d_model)
        return self.dropout(tokens + self.pe[: ids.size(0)].unsqueeze(1))  # positions along the batch


class TokenAndPositionTrainableUnscaled(_TokenAndPosition):
    """Two mistakes: the table an nn.Parameter, and the token rows not scaled."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        pe = self.pe
        del self.pe
        self.pe = nn.Parameter(pe)

    def combine(self, tokens, pe):
        return tokens + pe


class TokenAndPositionDropoutAlwaysOn(_TokenAndPosition):
    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        return F.dropout(self.combine(self.embedding(ids), self.pe[:T]), self.dropout.p)  # on even after .eval()


class TokenAndPositionT2T(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_t2t_halves(max_len, d_model)


class TokenAndPositionWavelengths(_TokenAndPosition):
    """Two mistakes: the 2π dropped from the frequencies, and no length check."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_wavelengths(max_len, d_model)

    def forward(self, ids):
        return self.dropout(self.combine(self.embedding(ids), self.pe[: ids.size(1)]))


# --- the catalogue -----------------------------------------------------------

RIGHT = {
    "sinusoidal_encoding": [table_loop, table_exp_log, table_pow_stack, table_numpy, table_keras_masks, table_polar],
    "relative_shift_matrix": [shift_blocks, shift_block_diag, shift_matrix_exp, shift_numpy_then_float32, shift_polar],
    "PositionalEncoding": [PositionalEncodingAnnotated, PositionalEncodingFunctional, PositionalEncodingIndexSelect],
    "TokenAndPositionEmbedding": [TokenAndPositionComposed, TokenAndPositionOwnTable, TokenAndPositionNumpy],
}

WRONG = [
    ("sinusoidal_encoding", "sin_cos_swapped", table_cos_first),
    ("sinusoidal_encoding", "concatenated_halves", table_fairseq_halves),
    ("sinusoidal_encoding", "concatenated_halves", table_exact_halves),
    ("sinusoidal_encoding", "wrong_base", table_base_1000),
    ("sinusoidal_encoding", "wrong_base", table_hardcoded_base),
    ("sinusoidal_encoding", "wrong_exponent", table_i_over_d),
    ("sinusoidal_encoding", "wrong_exponent", table_column_index),
    ("sinusoidal_encoding", "all_zeros", table_never_stored),
    ("sinusoidal_encoding", "all_zeros", table_cos_never_stored),
    ("sinusoidal_encoding", "position_offset", table_from_position_one),
    ("sinusoidal_encoding", "odd_d_model", table_odd_crashes),
    ("sinusoidal_encoding", "odd_d_model", table_odd_rounded_down),
    ("sinusoidal_encoding", "wrong_dtype", table_float64),
    ("sinusoidal_encoding", "wrong_shape", table_transposed),
    ("relative_shift_matrix", "shift_reversed", shift_transposed_blocks),
    ("relative_shift_matrix", "concatenated_halves", shift_halves),
    ("relative_shift_matrix", "wrong_base", shift_base_1000),
    ("relative_shift_matrix", "wrong_exponent", shift_i_over_d),
    ("relative_shift_matrix", "all_zeros", shift_scatter_dropped),
    ("relative_shift_matrix", "position_offset", shift_k_plus_one),
    ("relative_shift_matrix", "wrong_values", shift_identity),
    ("PositionalEncoding", "pe_is_parameter", PositionalEncodingParameter),
    ("PositionalEncoding", "pe_not_buffer", PositionalEncodingPlainAttribute),
    ("PositionalEncoding", "pe_not_buffer", PositionalEncodingRecomputes),
    ("PositionalEncoding", "same_row_every_position", PositionalEncodingFirstRow),
    ("PositionalEncoding", "batch_seq_confusion", PositionalEncodingSeqFirst),
    ("PositionalEncoding", "missing_dropout", PositionalEncodingNoDropout),
    ("PositionalEncoding", "positions_on_cpu", PositionalEncodingSelectsOnCpu),
    ("PositionalEncoding", "no_length_check", PositionalEncodingNoLengthCheck),
    ("PositionalEncoding", "input_scaled", PositionalEncodingScalesInput),
    ("PositionalEncoding", "scaled_position_too", PositionalEncodingScalesSum),
    ("PositionalEncoding", "concatenated_halves", PositionalEncodingHalves),
    ("PositionalEncoding", "dropout_rate_ignored", PositionalEncodingHardcodedDropout),
    ("TokenAndPositionEmbedding", "missing_scale", TokenAndPositionNoScale),
    ("TokenAndPositionEmbedding", "divided_by_scale", TokenAndPositionDivides),
    ("TokenAndPositionEmbedding", "wrong_scale", TokenAndPositionTimesD),
    ("TokenAndPositionEmbedding", "scaled_position_too", TokenAndPositionScalesBoth),
    ("TokenAndPositionEmbedding", "missing_dropout", TokenAndPositionNoDropout),
    ("TokenAndPositionEmbedding", "no_length_check", TokenAndPositionNoLengthCheck),
    ("TokenAndPositionEmbedding", "pe_is_parameter", TokenAndPositionTrainsTable),
    ("TokenAndPositionEmbedding", "sin_cos_swapped", TokenAndPositionSwapped),
    ("TokenAndPositionEmbedding", "position_offset", TokenAndPositionFromOne),
    ("PositionalEncoding", "sin_cos_swapped", PositionalEncodingCosFirst),
    ("PositionalEncoding", "wrong_base", PositionalEncodingBase1000),
    ("PositionalEncoding", "wrong_exponent", PositionalEncodingColumnExponent),
    ("PositionalEncoding", "all_zeros", PositionalEncodingJaxAtSet),
    ("PositionalEncoding", "position_offset", PositionalEncodingTableFromOne),
    ("TokenAndPositionEmbedding", "concatenated_halves", TokenAndPositionHalves),
    ("TokenAndPositionEmbedding", "wrong_base", TokenAndPositionHardcodedBase),
    ("TokenAndPositionEmbedding", "wrong_exponent", TokenAndPositionIOverD),
    ("TokenAndPositionEmbedding", "all_zeros", TokenAndPositionNeverStored),
    ("TokenAndPositionEmbedding", "same_row_every_position", TokenAndPositionFirstRow),
    ("TokenAndPositionEmbedding", "batch_seq_confusion", TokenAndPositionSeqFirst),
    # Beyond the catalogue: named from the table's structure, or by a probe of another aspect.
    ("sinusoidal_encoding", "concatenated_halves", table_t2t_halves),
    ("sinusoidal_encoding", "wrong_exponent", table_logspace),
    ("sinusoidal_encoding", "wrong_base", table_wavelengths),
    ("sinusoidal_encoding", "concatenated_halves", table_halves_from_one),
    ("sinusoidal_encoding", "sin_cos_swapped", table_cos_first_from_one),
    ("PositionalEncoding", "concatenated_halves", PositionalEncodingT2T),
    ("PositionalEncoding", "wrong_exponent", PositionalEncodingLogspace),
    ("PositionalEncoding", "dropout_in_eval", PositionalEncodingDropoutAlwaysOn),
    ("PositionalEncoding", "missing_dropout", PositionalEncodingBare),
    ("PositionalEncoding", "pe_not_buffer", PositionalEncodingD2L),
    ("TokenAndPositionEmbedding", "pe_is_parameter", TokenAndPositionTrainableUnscaled),
    ("TokenAndPositionEmbedding", "dropout_in_eval", TokenAndPositionDropoutAlwaysOn),
    ("TokenAndPositionEmbedding", "concatenated_halves", TokenAndPositionT2T),
    ("TokenAndPositionEmbedding", "wrong_base", TokenAndPositionWavelengths),
]

# (exercise, diagnosis, a further mistake that result.also must list, the code): two mistakes, both named in one run.
ALSO = [
    ("sinusoidal_encoding", "concatenated_halves", "wrong_exponent", table_t2t_halves),
    ("sinusoidal_encoding", "concatenated_halves", "position_offset", table_halves_from_one),
    ("sinusoidal_encoding", "sin_cos_swapped", "position_offset", table_cos_first_from_one),
    ("PositionalEncoding", "concatenated_halves", "wrong_exponent", PositionalEncodingT2T),
    ("PositionalEncoding", "missing_dropout", "no_length_check", PositionalEncodingBare),
    ("PositionalEncoding", "pe_not_buffer", "no_length_check", PositionalEncodingD2L),
    ("TokenAndPositionEmbedding", "pe_is_parameter", "missing_scale", TokenAndPositionTrainableUnscaled),
    ("TokenAndPositionEmbedding", "concatenated_halves", "wrong_exponent", TokenAndPositionT2T),
    ("TokenAndPositionEmbedding", "wrong_base", "no_length_check", TokenAndPositionWavelengths),
]


# --- issue 16: tables found by their role, not their exact shape ---------------------------------


class PositionalEncodingPaddingOffset(nn.Module):
    """fairseq's padding offset: a right table with two rows more, and token t reads row t + 2."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.max_len, self.offset = max_len, 2
        self.register_buffer("pe", table_exp_log(max_len + self.offset, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return self.dropout(x + self.pe[self.offset : self.offset + T])


class PositionalEncodingPaddingRowsFirst(PositionalEncodingPaddingOffset):
    """Two zero padding rows kept before position 0, skipped in forward: right."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = torch.cat([torch.zeros(self.offset, d_model), table_exp_log(max_len, d_model)])


class PositionalEncodingSpareRows(PositionalEncodingAnnotated):
    """A table with eight rows to spare (max_len + 8), sliced from row 0: right."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_pow_stack(max_len + 8, d_model).unsqueeze(0)


class PositionalEncodingTransposed(nn.Module):
    """The table kept (d_model, max_len), column t for position t: right."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe_t", table_exp_log(max_len, d_model).T.contiguous())
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return self.dropout(x + self.pe_t[:, :T].T)


class PositionalEncodingTransposedHalves(PositionalEncodingTransposed):
    """Kept (d_model, max_len), and laid out as sin and cos halves."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe_t = table_fairseq_halves(max_len, d_model).T.contiguous()


class PositionalEncodingOffsetSwapped(PositionalEncodingPaddingOffset):
    """Two spare rows after the table, sliced from 0 as they should be, but cos before sin."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_cos_first(max_len + self.offset, d_model)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class PositionalEncodingSpareRowsFromOne(PositionalEncodingSpareRows):
    """max_len + 1 rows that start at position 1."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_from_position_one(max_len + 1, d_model).unsqueeze(0)


class PositionalEncodingTutorialOffset(PositionalEncodingPaddingOffset):
    """The PyTorch tutorial's (max_len, 1, d) buffer, two padding rows longer, read from row 2."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = table_exp_log(max_len + self.offset, d_model).unsqueeze(1)

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return self.dropout(x + self.pe[self.offset : self.offset + T, 0])


class PositionalEncodingOffsetParameter(PositionalEncodingPaddingOffset):
    """The offset table, right and sliced right, but an nn.Parameter."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        table = torch.cat([torch.zeros(self.offset, d_model), table_exp_log(max_len, d_model)])
        del self.pe
        self.pe = nn.Parameter(table)


class TokenAndPositionPaddingOffset(_TokenAndPosition):
    """Positions read from row 2 of a table two rows longer (padding_idx + 1, as fairseq does)."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_exp_log(max_len + 2, d_model)

    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.dropout(self.combine(self.embedding(ids), self.pe[2 : T + 2]))


class TokenAndPositionTransposed(_TokenAndPosition):
    """The table kept (d_model, max_len + 2): right."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_loop(max_len + 2, d_model).T.contiguous()

    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.dropout(self.combine(self.embedding(ids), self.pe[:, :T].T))


class TokenAndPositionPadTokenZero(_TokenAndPosition):
    """A token table built with padding_idx=0: token 0 never trains."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=0)


class TokenAndPositionPadTokenLast(_TokenAndPosition):
    """padding_idx = vocab_size - 1: the last token never trains."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=vocab_size - 1)


class TokenAndPositionFrozenSpecials(_TokenAndPosition):
    """The first four (special) tokens' rows detached in forward."""

    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        tokens = self.embedding(ids)
        tokens = torch.where((ids < 4).unsqueeze(-1), tokens.detach(), tokens)
        return self.dropout(self.combine(tokens, self.pe[:T]))


RIGHT["PositionalEncoding"] += [
    PositionalEncodingPaddingRowsFirst,
    PositionalEncodingSpareRows,
    PositionalEncodingTransposed,
]
RIGHT["TokenAndPositionEmbedding"] += [TokenAndPositionTransposed]
WRONG += [
    ("PositionalEncoding", "position_offset", PositionalEncodingPaddingOffset),
    ("PositionalEncoding", "concatenated_halves", PositionalEncodingTransposedHalves),
    ("PositionalEncoding", "sin_cos_swapped", PositionalEncodingOffsetSwapped),
    ("PositionalEncoding", "position_offset", PositionalEncodingSpareRowsFromOne),
    ("PositionalEncoding", "position_offset", PositionalEncodingTutorialOffset),
    ("PositionalEncoding", "pe_is_parameter", PositionalEncodingOffsetParameter),
    ("TokenAndPositionEmbedding", "position_offset", TokenAndPositionPaddingOffset),
    ("TokenAndPositionEmbedding", "frozen_rows", TokenAndPositionPadTokenZero),
    ("TokenAndPositionEmbedding", "frozen_rows", TokenAndPositionPadTokenLast),
    ("TokenAndPositionEmbedding", "frozen_rows", TokenAndPositionFrozenSpecials),
]


class TokenAndPositionSparse(_TokenAndPosition):
    """A sparse token table (nn.Embedding(sparse=True)): right."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.embedding = nn.Embedding(vocab_size, d_model, sparse=True)


RIGHT["TokenAndPositionEmbedding"] += [TokenAndPositionSparse]


class PositionalEncodingSplitSinCos(nn.Module):
    """The table kept in two buffers, the sines and the cosines, interleaved in forward: right."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        table = table_exp_log(max_len, d_model)
        self.register_buffer("sines", table[:, 0::2].clone())
        self.register_buffer("cosines", table[:, 1::2].clone())
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        pe = torch.stack([self.sines[:T], self.cosines[:T]], dim=-1).flatten(1)
        return self.dropout(x + pe)


class PositionalEncodingSplitParameters(PositionalEncodingSplitSinCos):
    """The same two halves, as nn.Parameters: the optimizer would train them."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        sines, cosines = self.sines, self.cosines
        del self.sines, self.cosines
        self.sines, self.cosines = nn.Parameter(sines), nn.Parameter(cosines)


RIGHT["PositionalEncoding"] += [PositionalEncodingSplitSinCos]
WRONG += [("PositionalEncoding", "pe_is_parameter", PositionalEncodingSplitParameters)]


# --- issue 16: a sequence of one token (T = 1) ------------------------------------------------------


class PositionalEncodingSqueezesOutput(PositionalEncodingAnnotated):
    """Squeezes its output 'to drop stray axes': a one-token batch loses its sequence axis."""

    def forward(self, x):
        return super().forward(x).squeeze()


class TokenAndPositionSqueezesOutput(_TokenAndPosition):
    """The same squeeze: right for every T but 1."""

    def forward(self, ids):
        return super().forward(ids).squeeze()


WRONG += [
    ("PositionalEncoding", "wrong_shape", PositionalEncodingSqueezesOutput),
    ("TokenAndPositionEmbedding", "wrong_shape", TokenAndPositionSqueezesOutput),
]


class PositionalEncodingPaddingRowsUnskipped(PositionalEncodingPaddingRowsFirst):
    """Two padding rows before position 0, but forward reads from row 0: token t gets position t - 2."""

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return self.dropout(x + self.pe[:T])


class TokenAndPositionOffsetThree(_TokenAndPosition):
    """Reads its positions from row 3 of a table three rows longer."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = table_exp_log(max_len + 3, d_model)

    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.dropout(self.combine(self.embedding(ids), self.pe[3 : T + 3]))


WRONG += [
    ("PositionalEncoding", "position_offset", PositionalEncodingPaddingRowsUnskipped),
    ("TokenAndPositionEmbedding", "position_offset", TokenAndPositionOffsetThree),
]


# --- issue 16: precision. Right tables that stress the float32 tolerance (judged entry by
# entry against float64, from each angle), wrong ones that went through half precision ------


def table_matmul_angles(max_len, d_model, base=10000.0):
    """The angles by a matmul, (max_len, 1) @ (1, ceil(d/2)), float32 exp-log frequencies."""
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))
    angles = torch.arange(max_len, dtype=torch.float32)[:, None] @ inv_freq[None, :]
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()[:, : d_model // 2]
    return pe


def table_divides_by_pow(max_len, d_model, base=10000.0):
    """Another order: positions divided by base^(2i/d), a float32 pow, no reciprocal."""
    angles = torch.arange(max_len).float()[:, None] / torch.pow(base, torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)[:, : d_model // 2]
    return pe


def table_float64_then_cast(max_len, d_model, base=10000.0):
    """float64 throughout (angles as 2i·ln(base)/d in the exponent of exp), one cast at the end."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * torch.exp(-two_i * math.log(base) / d_model)
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(1)[:, :d_model].to(torch.float32)


def table_in_float16(max_len, d_model, base=10000.0):
    return table_exp_log(max_len, d_model, base).half().float()  # "half is enough for numbers in [-1, 1]"


def table_in_bfloat16(max_len, d_model, base=10000.0):
    pe = torch.zeros(max_len, d_model, dtype=torch.bfloat16)  # the table allocated in bfloat16, filled from float32
    angles = torch.arange(max_len).float()[:, None] * base ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)[:, : d_model // 2]
    return pe.float()


def table_float16_positions(max_len, d_model, base=10000.0):
    position = torch.arange(max_len, dtype=torch.float16)[:, None]  # 2049 is 2048 in float16
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(base) / d_model))
    angles = position.float() * div_term
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)[:, : d_model // 2]
    return pe


def table_half_div_term(max_len, d_model, base=10000.0):
    div_term = torch.exp(torch.arange(0, d_model, 2).half() * -(math.log(base) / d_model))  # the frequencies in float16
    angles = torch.arange(max_len).float()[:, None] * div_term.float()
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)[:, : d_model // 2]
    return pe


class PositionalEncodingBuiltInHalf(PositionalEncodingAnnotated):
    """The table made in float16 "to save memory", registered as float32."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        self.pe = self.pe.half().float()


class TokenAndPositionBfloat16Table(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.pe = self.pe.bfloat16().float()


RIGHT["sinusoidal_encoding"] += [table_matmul_angles, table_divides_by_pow, table_float64_then_cast]
WRONG += [
    ("sinusoidal_encoding", "low_precision", table_in_float16),
    ("sinusoidal_encoding", "low_precision", table_in_bfloat16),
    ("sinusoidal_encoding", "low_precision", table_float16_positions),
    ("sinusoidal_encoding", "low_precision", table_half_div_term),
    ("PositionalEncoding", "low_precision", PositionalEncodingBuiltInHalf),
    ("TokenAndPositionEmbedding", "low_precision", TokenAndPositionBfloat16Table),
]


# --- issue 16: NaN is the finding, whatever else is wrong with the table ------------------


def table_position_over_itself(max_len, d_model, base=10000.0):
    position = torch.arange(max_len).float()[:, None]
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(base) / d_model))
    angles = position * div_term * (position / position)  # "normalised": 0 / 0 at position 0
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)[:, : d_model // 2]
    return pe


def table_position_over_itself_transposed(max_len, d_model, base=10000.0):
    return table_position_over_itself(max_len, d_model, base).T  # (d_model, max_len) as well


def table_position_over_itself_float64(max_len, d_model, base=10000.0):
    return table_position_over_itself(max_len, d_model, base).double()  # float64 as well


WRONG += [
    ("sinusoidal_encoding", "nan_or_inf", table_position_over_itself),
    ("sinusoidal_encoding", "nan_or_inf", table_position_over_itself_transposed),
    ("sinusoidal_encoding", "nan_or_inf", table_position_over_itself_float64),
]


# --- issue 22: a batch of one squeezed away, the length taken from the batch axis --------------


class TokenAndPositionSqueezed(_TokenAndPosition):
    """Squeezes "the batch of one" that a single sentence makes: (1, T, d) becomes (T, d)."""

    def forward(self, ids):
        return super().forward(ids).squeeze(0)


class TokenAndPositionLengthFromBatch(_TokenAndPosition):
    def forward(self, ids):
        T = ids.shape[0]  # the batch axis
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.dropout(self.combine(self.embedding(ids), self.pe[:T]))


WRONG += [
    ("TokenAndPositionEmbedding", "wrong_shape", TokenAndPositionSqueezed),
    ("TokenAndPositionEmbedding", "batch_seq_confusion", TokenAndPositionLengthFromBatch),
]


class TokenAndPositionTrainableScale(_TokenAndPosition):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d_model)))

    def combine(self, tokens, pe):
        return tokens * self.scale + pe


WRONG += [("TokenAndPositionEmbedding", "scale_is_parameter", TokenAndPositionTrainableScale)]

WRONG += [("relative_shift_matrix", "wrong_dtype", shift_numpy_float64)]


# INDEPENDENT: which catalogue mistakes are independent aspects of the code (each pair made together by an ALSO
# submission); ONE_ASPECT: why an exercise's mistakes are all values of one choice. tests/test_also_wrong.py reads both.
INDEPENDENT = {
    # a table's layout (sin_cos_swapped, concatenated_halves), its frequencies (wrong_base, wrong_exponent) and its
    # positions (position_offset); all_zeros leaves nothing else to see
    "sinusoidal_encoding": [
        ("concatenated_halves", "wrong_exponent"),
        ("concatenated_halves", "position_offset"),
        ("sin_cos_swapped", "position_offset"),
        ("concatenated_halves", "wrong_base"),
    ],
    "relative_shift_matrix": [("concatenated_halves", "wrong_base")],
    "PositionalEncoding": [("concatenated_halves", "wrong_exponent")],
    # the table (its layout, its frequencies) and the token scale
    "TokenAndPositionEmbedding": [("concatenated_halves", "wrong_exponent"), ("sin_cos_swapped", "missing_scale")],
}


# --- issue 32: dropout applied twice ----------------------------------------------------------


class TokenAndPositionDropoutTwice(TokenAndPositionComposed):
    """Reuses its PositionalEncoding, which drops already, and adds a dropout of its own on top."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids):
        return self.dropout(super().forward(ids))


class PositionalEncodingDropoutTwice(PositionalEncodingAnnotated):
    def forward(self, x):
        return self.dropout(super().forward(x))


WRONG += [
    ("TokenAndPositionEmbedding", "dropout_twice", TokenAndPositionDropoutTwice),
    ("PositionalEncoding", "dropout_twice", PositionalEncodingDropoutTwice),
]

# Wrong submissions above that make a second mistake: no length check in their forward (the x.size(0) of
# PositionalEncodingSeqFirst is the batch). tests/test_checks.py allows "Also wrong" only for these.
ALSO += [
    ("PositionalEncoding", "same_row_every_position", "no_length_check", PositionalEncodingFirstRow),
    ("PositionalEncoding", "batch_seq_confusion", "no_length_check", PositionalEncodingSeqFirst),
    ("PositionalEncoding", "sin_cos_swapped", "no_length_check", PositionalEncodingOffsetSwapped),
]


# --- issue 32: messages true of the module: a frozen Parameter, a concatenation ----------------------


class TokenAndPositionConcatenated(nn.Module):
    """[token (d/2) ; position (d/2)] side by side instead of a sum."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model // 2)
        self.register_buffer("pe", table_exp_log(max_len, d_model - d_model // 2))
        self.d_model, self.drop = d_model, nn.Dropout(dropout)

    def forward(self, ids):
        T = ids.shape[1]
        tok = self.emb(ids) * math.sqrt(self.d_model)
        return self.drop(torch.cat([tok, self.pe[:T].expand(ids.shape[0], T, -1)], -1))


class PositionalEncodingFrozenParameter(PositionalEncodingAnnotated):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__(d_model, max_len, dropout)
        pe = self.pe
        del self.pe
        self.pe = nn.Parameter(pe, requires_grad=False)


class PositionalEncodingFrozenEmbedding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.pos = nn.Embedding.from_pretrained(table_exp_log(max_len, d_model), freeze=True)
        self.max_len, self.dropout = max_len, nn.Dropout(dropout)

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError("too long")
        return self.dropout(x + self.pos(torch.arange(T, device=x.device)))


WRONG += [
    ("TokenAndPositionEmbedding", "wrong_shape", TokenAndPositionConcatenated),
    ("PositionalEncoding", "pe_is_parameter", PositionalEncodingFrozenParameter),
    ("PositionalEncoding", "pe_is_parameter", PositionalEncodingFrozenEmbedding),
]
ALSO += [("TokenAndPositionEmbedding", "wrong_shape", "no_length_check", TokenAndPositionConcatenated)]


def table_times_the_power(max_len, d_model, base=10000.0):
    """pos * base ** (2i/d): the 1/ forgotten, so the pairs speed up (review: named, not read off aliased frequencies)."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    angles = pos * base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()[:, : d_model // 2]
    return pe.float()


def table_times_the_power_float32(max_len, d_model, base=10000.0):
    """The same slip in float32: the fast angles (pos · 10^3.5) lose their digits, so no catalogue face matches and
    the frequencies are read off the table, where they alias (review: 1, 3.121, 2.566 shown as if they were the code's)."""
    position = torch.arange(max_len).unsqueeze(1).float()
    angles = position * base ** (torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)[:, : d_model // 2]
    return pe


WRONG += [
    ("sinusoidal_encoding", "wrong_exponent", table_times_the_power),
    ("sinusoidal_encoding", "wrong_exponent", table_times_the_power_float32),
]


def shift_abs_k(k, d_model, base=10000.0):
    """Right for k >= 0; abs(k) turns a negative shift into a positive one."""
    return shift_blocks(abs(k), d_model, base)


WRONG += [("relative_shift_matrix", "shift_reversed", shift_abs_k)]


# --- issue 41: the contract's axes (helpers/contracts.py) -------------------------------


class PositionalEncodingMaxLen512(PositionalEncodingAnnotated):
    """P13 of the 2026-11-27 review: a default max_len copied from a BERT-sized model."""

    def __init__(self, d_model, max_len=512, dropout=0.1):
        super().__init__(d_model, max_len, dropout)


class PositionalEncodingNoDropoutByDefault(PositionalEncodingAnnotated):
    """P14 of the same review: dropout off unless asked for."""

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__(d_model, max_len, dropout)


class PositionalEncodingUnderNoGrad(PositionalEncodingAnnotated):
    """'The table is fixed, so no gradient is needed': the gradient of x is cut too."""

    @torch.no_grad()
    def forward(self, x):
        return super().forward(x)


class PositionalEncodingAddsToData(PositionalEncodingAnnotated):
    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError(f"sequence length {x.size(1)} > max_len {self.max_len}")
        return self.dropout(x.data + self.pe[:, : x.size(1)])


class TokenAndPositionNoDropoutByDefault(TokenAndPositionComposed):
    def __init__(self, vocab_size, d_model, max_len, dropout=0.0):
        super().__init__(vocab_size, d_model, max_len, dropout)


class TokenAndPositionFlattensIds(TokenAndPositionComposed):
    def forward(self, ids):
        tokens = self.tok(ids.view(-1)).view(*ids.shape, -1)
        return self.pos(tokens * math.sqrt(self.d_model))


WRONG += [
    ("PositionalEncoding", "default_changed", PositionalEncodingMaxLen512),
    ("PositionalEncoding", "default_changed", PositionalEncodingNoDropoutByDefault),
    ("PositionalEncoding", "gradient_cut", PositionalEncodingUnderNoGrad),
    ("PositionalEncoding", "gradient_cut", PositionalEncodingAddsToData),
    ("TokenAndPositionEmbedding", "default_changed", TokenAndPositionNoDropoutByDefault),
    ("TokenAndPositionEmbedding", "contiguity_assumed", TokenAndPositionFlattensIds),
]


def shift_by_matrix_power(k, d_model, base=10000.0):
    """R7 of the 2026-11-27 review: M_1 in float32, raised to the k-th power (rotations compose)."""
    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    one = torch.zeros(d_model, d_model)
    c, s = torch.cos(omega), torch.sin(omega)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    one[even, even], one[even, odd], one[odd, even], one[odd, odd] = c, s, -s, c
    return torch.linalg.matrix_power(one, k)


RIGHT["relative_shift_matrix"].append(shift_by_matrix_power)


# --- the blind review of 2026-11-27: messages made true ------------------------------------------------


def table_tf_tutorial_numpy(max_len, d_model, base=10000.0):
    """E8: the TensorFlow tutorial's NumPy angle rates, 10000 written in: the base argument is never read."""
    i = np.arange(d_model)[np.newaxis, :]
    angle_rates = 1 / np.power(10000, (2 * (i // 2)) / np.float32(d_model))
    angles = np.arange(max_len)[:, np.newaxis] * angle_rates
    angles[:, 0::2], angles[:, 1::2] = np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])
    return torch.tensor(angles, dtype=torch.float32)


def shift_hard_coded_base(k, d_model, base=10000.0):
    """E8 for the shift matrix: the frequencies from 10000, whatever base is passed."""
    return shift_blocks(k, d_model)


class PositionalEncoding2DSliced(nn.Module):
    """P1 (rzadrzi/mytransformers): the Annotated Transformer's `pe[:, :T]` kept for a 2-D (max_len, d) buffer."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.max_len = max_len
        self.register_buffer("pe", table_exp_log(max_len, d_model))

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError(f"sequence length {x.size(1)} > max_len {self.max_len}")
        return self.dropout(x + self.pe[:, : x.size(1)])


class TokenAndPosition2DSliced(_TokenAndPosition):
    """P1 in the combined module: the positions taken as `self.pe[:, :T]` from a 2-D buffer."""

    def forward(self, ids):
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError("sequence longer than max_len")
        return self.dropout(self.combine(self.embedding(ids), self.pe[:, :T]))


class TokenAndPositionReusesEncoding(nn.Module):
    """Q3: the PositionalEncoding of the exercise before reused inside, built without the dropout argument."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = PositionalEncodingAnnotated(d_model, max_len)
        self.d_model = d_model

    def forward(self, ids):
        return self.positions(self.tokens(ids) * math.sqrt(self.d_model))


class TokenAndPositionReusesEncodingFixedRate(TokenAndPositionReusesEncoding):
    """Q3 with the rate written in: the inner module gets 0.1 whatever the outer one was given."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__(vocab_size, d_model, max_len, dropout)
        self.positions = PositionalEncodingAnnotated(d_model, max_len, 0.1)


def shift_bfloat16_frequencies(k, d_model, base=10000.0):
    """Issue 41, dtypes at scale: the frequencies made in bfloat16 (as a bf16 model's buffer holds them), then used."""
    omega = (base ** (-torch.arange(0, d_model, 2).float() / d_model)).to(torch.bfloat16).float()
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    return torch.block_diag(
        *[torch.stack([torch.stack([c[i], s[i]]), torch.stack([-s[i], c[i]])]) for i in range(d_model // 2)]
    )


def shift_half_angles(k, d_model, base=10000.0):
    """The angles k·ω_i held in float16 before the sine and cosine."""
    M = torch.zeros(d_model, d_model)
    angles = (k / base ** (torch.arange(0, d_model, 2) / d_model)).half().float()
    i = torch.arange(d_model // 2)
    M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = angles.cos(), angles.sin()
    M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -angles.sin(), angles.cos()
    return M


WRONG += [
    ("relative_shift_matrix", "low_precision", shift_bfloat16_frequencies),
    ("relative_shift_matrix", "low_precision", shift_half_angles),
    ("TokenAndPositionEmbedding", "dropout_rate_ignored", TokenAndPositionReusesEncoding),
    ("TokenAndPositionEmbedding", "dropout_rate_ignored", TokenAndPositionReusesEncodingFixedRate),
    ("sinusoidal_encoding", "wrong_base", table_tf_tutorial_numpy),
    ("relative_shift_matrix", "wrong_base", shift_hard_coded_base),
    ("PositionalEncoding", "columns_sliced", PositionalEncoding2DSliced),
    ("TokenAndPositionEmbedding", "columns_sliced", TokenAndPosition2DSliced),
]
