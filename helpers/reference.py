"""Reference implementations: what "right" means for every exercise.

Each one is meant to be read in a minute, top to bottom, as teaching code.
Sources: Vaswani et al. 2017 ("Attention Is All You Need", §3.4-3.5),
Press & Wolf 2017 (weight tying), Devlin et al. 2019 (BERT), Su et al. 2021
(RoFormer), Press et al. 2022 (ALiBi), and HF transformers' conventions.
Shapes: B batch, T sequence length, d (d_model), V vocabulary, H heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def lookup(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """out[..., :] = weight[ids[...]]: an embedding is row selection."""
    return weight[ids]  # (V, d) indexed by (...) -> (..., d)


def one_hot_lookup(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The same rows, as a matrix product: one_hot(ids) @ weight."""
    one_hot = torch.nn.functional.one_hot(ids, num_classes=weight.shape[0])  # (...) -> (..., V)
    return one_hot.to(weight.dtype) @ weight  # (..., V) @ (V, d) -> (..., d)


def embedding_backward(
    grad_out: torch.Tensor, ids: torch.Tensor, vocab_size: int, padding_idx: int | None = None
) -> torch.Tensor:
    """The weight's gradient of a lookup: every use of row i adds its upstream gradient
    to row i (a token used twice collects twice), and the padding row gets none."""
    d = grad_out.shape[-1]
    grad = torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)  # (V, d): unused rows stay 0
    grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, d))  # (N,) ids, (N, d) rows: repeats accumulate
    if padding_idx is not None:
        grad[padding_idx] = 0  # nn.Embedding(padding_idx=...) never trains the [PAD] row
    return grad


# ---------------------------------------------------------------------------
# Chapter 02: scaling and weight tying
# ---------------------------------------------------------------------------


def scaled_embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The lookup of chapter 01, times sqrt(d_model) (Vaswani et al. 2017, §3.4)."""
    return weight[ids] * math.sqrt(weight.shape[1])  # (V, d)[(...)] -> (..., d)


class ScaledEmbedding(nn.Module):
    """Token embedding multiplied by sqrt(d_model), as in Vaswani et al. 2017, §3.4.

    The factor matters when the table starts small (std 1/sqrt(d), as when it
    is tied to the output layer): it brings the token vectors up to the size of
    the positional encodings they are added to. Chapter 02 shows the numbers."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)  # the (V, d) table, a trainable Parameter
        self.scale = math.sqrt(d_model)  # a Python float: no device to keep in sync

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids) * self.scale  # (...) -> (..., d)


def tied_logits(weight: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Logits of a head tied to an embedding table: one score per vocabulary row."""
    return h @ weight.T  # (..., d) @ (d, V) -> (..., V)


class TiedLMHead(nn.Module):
    """The pre-softmax projection that shares the embedding's matrix
    (Vaswani et al. 2017, §3.4; Press & Wolf 2017). No bias, no copy: the
    head's weight IS the embedding's Parameter, so one gradient step moves both."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.weight = embedding.weight  # the same Parameter object, registered here too (not a copy)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.weight)  # (..., d) -> (..., V): h @ weight.T


# (end of chapter 02)


# ---------------------------------------------------------------------------
# Chapter 03: sinusoidal encodings
# ---------------------------------------------------------------------------

# Vaswani et al. 2017, §3.5: PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(same).
# Column pair (2i, 2i+1) is one wave, angle pos·ω_i with ω_i = base^(-2i/d):
# fast in the first columns (ω_0 = 1 radian per position), slower and slower after.


def sinusoidal_frequencies(d_model: int, base: float = 10000.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """ω_i = base^(-2i/d) for i = 0 .. ceil(d/2) - 1, in the exp-log form exp(-2i·ln(base)/d)."""
    two_i = torch.arange(0, d_model, 2, dtype=dtype)  # 0, 2, 4, ...: one frequency per (sin, cos) pair
    return torch.exp(-math.log(base) * two_i / d_model)  # (ceil(d/2),)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (max_len, d_model) float32 table: sin in even columns, cos in odd ones.
    With an odd d_model the last column is a sin whose cos partner is cut off."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    angles = position * sinusoidal_frequencies(d_model, base)  # (max_len, ceil(d/2)): float64, exact at large pos
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = angles.sin()  # columns 0, 2, 4, ...
    pe[:, 1::2] = angles.cos()[:, : d_model // 2]  # columns 1, 3, 5, ... (one fewer when d_model is odd)
    return pe.float()


class PositionalEncoding(nn.Module):
    """x + PE[:T], then dropout (Vaswani et al. §5.4 drop the sums of embeddings and encodings too).
    The table is computed once and kept as a buffer: it moves with .to(device) and is
    saved with the model, but the optimizer never sees it."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1):
        super().__init__()
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model))  # (max_len, d): a buffer, not a Parameter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]  # x: (B, T, d), batch first
        if T > self.max_len:
            raise ValueError(
                f"Cannot encode a sequence of length {T}: max_len is only {self.max_len}. Build PositionalEncoding with a larger max_len."
            )
        return self.dropout(x + self.pe[:T])  # (B, T, d) + (T, d): the same positions for every sequence


def relative_shift_matrix(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (d, d) matrix M with PE[pos + k] = M @ PE[pos] for every pos (d even).

    Pair i holds (sin a, cos a) with a = pos·ω_i. Moving k positions adds b = k·ω_i:
        sin(a + b) =  cos b · sin a + sin b · cos a
        cos(a + b) = -sin b · sin a + cos b · cos a
    so M is block-diagonal, one 2×2 rotation by b per pair, and does not depend on pos."""
    b = k * sinusoidal_frequencies(d_model, base)  # (d/2,) float64
    cos, sin = b.cos(), b.sin()
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    M[even, even], M[even, odd] = cos, sin  # new sin = cos b · sin + sin b · cos
    M[odd, even], M[odd, odd] = -sin, cos  # new cos = -sin b · sin + cos b · cos
    return M.float()


class TokenAndPositionEmbedding(nn.Module):
    """The input of the original Transformer's first layer (§3.4-3.5):
    dropout(embedding(ids) · √d_model + PE[:T]). Chapter 02's scaled tokens, plus this chapter's table."""

    def __init__(self, vocab_size: int, d_model: int, max_len: int, dropout: float = 0.1):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)  # trained
        self.scale = math.sqrt(d_model)
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model))  # fixed
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        T = ids.shape[1]  # ids: (B, T)
        if T > self.max_len:
            raise ValueError(
                f"Cannot embed a sequence of length {T}: max_len is only {self.max_len}. Build the module with a larger max_len."
            )
        return self.dropout(self.embedding(ids) * self.scale + self.pe[:T])  # only the tokens are scaled


# (end of chapter 03)


# ---------------------------------------------------------------------------
# Chapter 04: learned positions and BERT
# ---------------------------------------------------------------------------


class LearnedPositionalEmbedding(nn.Module):
    """Learned absolute positions, as in BERT and GPT-2: a trainable
    (max_len, d_model) table with one row per position, added to the input.
    The table has no row past max_len - 1, so a longer input is refused."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.position_embeddings = nn.Embedding(max_len, d_model)  # a Parameter: trained like the token table

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]  # x: (B, T, d)
        if T > self.max_len:
            raise ValueError(
                f"Cannot forward a sequence of length {T}: max_len is only {self.max_len}. Build the module with a larger max_len."
            )
        positions = torch.arange(T, device=x.device)  # on x's device: a bare torch.arange(T) lives on the CPU
        return x + self.position_embeddings(positions)  # (B, T, d) + (T, d): the same rows for every sequence


class BertEmbeddings(nn.Module):
    """BERT's embedding block (Devlin et al. 2019, §3.2 and Figure 2):
    dropout(LayerNorm(token + position + segment)). The submodule names are
    HF transformers' own, so a pretrained `embeddings.*` state_dict loads."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        layer_norm_eps: float = 1e-12,
        hidden_dropout_prob: float = 0.1,
        pad_token_id: int = 0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            vocab_size, hidden_size, padding_idx=pad_token_id
        )  # [PAD]'s row gets no gradient
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)  # segment A = 0, segment B = 1
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)  # BERT's eps is 1e-12, PyTorch's default 1e-5
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.shape[1]  # input_ids: (B, T)
        if T > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"Cannot embed {T} tokens: max_position_embeddings is only {self.position_embeddings.num_embeddings}."
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # one segment: every token belongs to sentence A
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )  # (B, T, d)
        return self.dropout(self.LayerNorm(x))  # dropout after the norm; a no-op in eval()


# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding".
# Each head's vector is cut into d/2 pairs; pair i at position m is turned by
# the angle m·θ_i, θ_i = base^(-2i/d). Two layouts of the pairs are in use:
#   half-split  pair i = (x[i], x[i + d/2])   HF Llama, GPT-NeoX   (rope_cache, apply_rope)
#   interleaved pair i = (x[2i], x[2i + 1])   Meta Llama, GPT-J    (rope_interleaved)


def rope_frequencies(
    head_dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """θ_i = base^(-2i/head_dim) for i = 0 .. head_dim/2 - 1 (RoFormer eq. 15).
    From the HEAD dimension: every head is rotated on its own."""
    two_i = torch.arange(0, head_dim, 2, dtype=dtype, device=device)  # 0, 2, 4, ..., head_dim - 2
    return base ** (-two_i / head_dim)  # (head_dim/2,)


def rope_cache(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every angle m·θ_i, each (max_len, head_dim) float32, in the
    half-split layout: pair i's angle sits in column i and in column i + head_dim/2."""
    # float64 while building (once, on the CPU), float32 to store: exact enough for any position.
    theta = rope_frequencies(head_dim, base, dtype=torch.float64)  # (d/2,)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), theta)  # (max_len, d/2)
    cos, sin = angles.cos().float(), angles.sin().float()  # one angle per pair...
    return torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)  # ...written twice: (max_len, d)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension: every
    half-split pair (x[i], x[i + d/2]) turned by 90 degrees."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., d) -> 2 × (..., d/2)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q (B, Hq, T, Dh) and k (B, Hk, T, Dh) by their positions, half-split
    layout, HF's `apply_rotary_pos_emb`: x·cos + rotate_half(x)·sin.
    cos, sin: (max_len, Dh) from rope_cache; positions: None (0..T-1), (T,) or (B, T)."""
    T = q.shape[-2]
    if positions is None:
        cos, sin = cos[:T], sin[:T]  # (T, Dh)
    else:
        cos, sin = cos[positions], sin[positions]  # (T, Dh) or (B, T, Dh)
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, T, Dh) -> (B, 1, T, Dh): every head alike

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # the arithmetic in float32, the result in the input's dtype
        return (x32 * cos + rotate_half(x32) * sin).to(x.dtype)

    return rotate(q), rotate(k)  # Hq and Hk may differ (GQA): cos, sin broadcast over heads


def apply_partial_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial RoPE, as GPT-NeoX (rotary_pct) and GPT-J (rotary_dim) do it: only the first
    r = cos.shape[-1] dims of each head are turned (half-split within those r: pair i is
    (x[i], x[i + r/2])), with an r-dim head's frequencies; the other Dh - r dims carry
    no position at all and pass through unchanged."""
    r = cos.shape[-1]  # the tables are built for the rotated part: rope_cache(r, max_len)
    q_rot, k_rot = apply_rope(q[..., :r], k[..., :r], cos, sin, positions)
    return torch.cat([q_rot, q[..., r:]], dim=-1), torch.cat([k_rot, k[..., r:]], dim=-1)


def rope_interleaved(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """RoPE in the interleaved layout of Meta's Llama and GPT-J: pair i is
    (x[2i], x[2i+1]), turned by m·θ_i. x: (B, H, T, Dh); positions: None or (T,)."""
    T, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T, device=x.device)  # on x's device, like everything made here
    theta = rope_frequencies(d, base, device=x.device)  # (d/2,) float32
    angles = positions.float()[..., None] * theta  # (T, d/2): float32 whatever x's dtype
    cos, sin = angles.cos(), angles.sin()
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]  # (B, H, T, d/2) each
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (B, H, T, d/2, 2)
    return turned.flatten(-2).to(x.dtype)  # (B, H, T, d): pairs back in adjacent columns


def rope_from_shift_matrix(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """Interleaved RoPE, built from chapter 03's relative_shift_matrix: at position m the
    row vector x becomes x @ M_m (that is M_mᵀ x), pair (x[2i], x[2i+1]) turned by m·θ_i.
    (M_m's blocks [[cos, sin], [-sin, cos]] act on chapter 03's (sin, cos) pairs; a RoPE pair
    turns the other way round in that order, hence the transpose.)"""
    T, d = x.shape[-2], x.shape[-1]
    positions = torch.arange(T) if positions is None else positions
    M = torch.stack([relative_shift_matrix(int(m), d, base) for m in positions.tolist()])  # (T, d, d), one per position
    return torch.einsum("...td,tde->...te", x.float(), M.to(x.device)).to(x.dtype)  # (B, H, T, d)


class RotaryEmbedding(nn.Module):
    """RoPE as a module, half-split layout: cos/sin tables built once in float32,
    gathered by position in forward. forward(q, k, positions=None) -> (q_rot, k_rot)."""

    def __init__(self, head_dim: int, max_len: int = 2048, base: float = 10000.0):
        super().__init__()
        self.max_len = max_len
        cos, sin = rope_cache(head_dim, max_len, base)  # (max_len, head_dim) each, float32
        # Buffers follow .to(device); non-persistent: rebuilt from the arguments, never saved in state_dict.
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        last = q.shape[-2] - 1 if positions is None else int(positions.max())
        if last >= self.max_len:
            raise ValueError(
                f"position {last} is past the table: max_len is only {self.max_len}; build RotaryEmbedding with a larger max_len"
            )
        return apply_rope(q, k, self.cos, self.sin, positions)


# (end of chapter 05)


# ---------------------------------------------------------------------------
# Chapter 06: comparing, and ALiBi
# ---------------------------------------------------------------------------

# Press, Smith & Lewis 2022, "Train Short, Test Long: Attention with Linear
# Biases Enables Input Length Extrapolation". No positional vector at all: each
# head adds -m_h · (i - j) to the attention score of query i for key j, a
# penalty that grows linearly with the distance, steeper in some heads than others.


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The head slopes m_h (§3 and the authors' code). For n a power of two, the
    geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8). Otherwise the n' = 2^floor(log2 n)
    slopes of the closest smaller power of two, then every other slope of 2n' heads
    to make up the rest (the authors' code: the paper trains powers of two only). The extra
    slopes interleave with the steepest of the first ones; the first extra is the steepest of all."""

    def power_of_two(n: int) -> list[float]:
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]  # empty when n_heads is a power of two
    return torch.tensor(power_of_two(closest) + extra)  # (n_heads,) float32


def alibi_bias(n_heads: int, seq_len: int) -> torch.Tensor:
    """(n_heads, T, T): -m_h · (i - j) for key j at or before query i, -inf after it
    (a causal model: the future is masked out, as in the paper's language models)."""
    i = torch.arange(seq_len)[:, None]  # query positions, (T, 1)
    j = torch.arange(seq_len)[None, :]  # key positions, (1, T)
    offset = (j - i).float()  # (T, T): 0 on the diagonal, -1, -2, ... for keys further back
    bias = alibi_slopes(n_heads)[:, None, None] * offset  # (H, 1, 1) * (T, T) -> (H, T, T): -m·(i - j)
    return bias.masked_fill(j > i, float("-inf"))  # no looking ahead


def t5_relative_bucket(
    relative_position: torch.Tensor, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each relative position, key minus query (Raffel et al. 2020, §2.1; Mesh
    TensorFlow's rule, as transformers' T5Attention._relative_position_bucket computes it).

    Bidirectional, half the buckets are for keys after the query (relative_position > 0), half
    for the others. Within a half of n buckets, distances below n/2 get a bucket each; the rest
    share the other n/2 buckets, log-spaced from n/2 up to max_distance, and every distance from
    max_distance on falls in the last bucket. Causal (bidirectional=False), keys after the query
    all get bucket 0 (the mask hides them anyway) and the n buckets count distances back."""
    relative_position = relative_position.long()
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets  # the upper half: keys after the query
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)  # keys before the query; later keys are distance 0
    max_exact = num_buckets // 2  # one bucket per distance below max_exact
    # float32, as transformers computes it: its truncation decides the bucket at every boundary
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


# (end of chapter 06)


# ---------------------------------------------------------------------------
# Chapter 07: long context, RoPE stretched past its training length
# ---------------------------------------------------------------------------

# Each method returns (inv_freq, attention_scale), the contract of transformers'
# modeling_rope_utils.ROPE_INIT_FUNCTIONS: inv_freq (d/2,) float32, the θ_i each
# pair turns by per position, and a Python float that multiplies cos and sin
# (so q·k by its square). The arithmetic follows the library's, step by step, in
# float32, so that the reference and the library agree to the last bit or two.


def rope_inv_freq(d: int, base: float) -> torch.Tensor:
    """θ_i = 1 / base^(2i/d), (d/2,) float32, written as transformers writes it."""
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))


def linear_scaling(d: int, base: float, factor: float) -> tuple[torch.Tensor, float]:
    """Position interpolation (Chen et al. 2023; kaiokendev 2023): position m is read
    as m / factor, so factor·L positions fit in the trained range 0..L. Dividing every
    θ_i by the factor is the same thing (m·θ/s = (m/s)·θ). transformers' "linear"."""
    return rope_inv_freq(d, base) / factor, 1.0


def ntk_scaling(d: int, base: float, factor: float) -> tuple[torch.Tensor, float]:
    """NTK-aware scaling (bloc97 2023): a larger base, base' = base · factor^(d/(d-2)).
    The fastest pair (i = 0) keeps θ_0 = 1; the exponent is chosen so that the slowest
    pair (i = d/2 - 1) is slowed down by exactly the factor, as interpolation would."""
    return rope_inv_freq(d, base * factor ** (d / (d - 2))), 1.0


def dynamic_ntk_scaling(
    d: int, base: float, factor: float, seq_len: int, original_max_len: int
) -> tuple[torch.Tensor, float]:
    """Dynamic NTK (emozilla 2023), transformers' "dynamic": NTK-aware scaling whose
    factor grows with the sequence actually run, and is 1 (no change) up to the
    trained length: base' = base · (factor·T/L - (factor - 1))^(d/(d-2)), T ≥ L."""
    seq_len = max(seq_len, original_max_len)  # at or below L: the model exactly as trained
    grown = factor * seq_len / original_max_len - (factor - 1)  # 1 at T = L, factor at T = 2L... (slope factor/L)
    return rope_inv_freq(d, base * grown ** (d / (d - 2))), 1.0


def yarn_scaling(
    d: int, base: float, factor: float, original_max_len: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023, §3.2-3.4), as transformers' "yarn" computes it by default:
    "NTK-by-parts" interpolation plus an attention temperature.

    Pair i makes r_i = L / λ_i turns within the trained length L (λ_i = 2π/θ_i, its
    wavelength). Pairs with more than beta_fast turns are left alone (they met every
    angle in training); pairs with fewer than beta_slow turns are interpolated, θ_i / s;
    a linear ramp over the pair index blends the two in between. The band's edges are
    the (fractional) pair indices where r_i = beta_fast and r_i = beta_slow, rounded
    outward (transformers' default truncate=True) and clamped to [0, d - 1].
    The attention scale, √(1/t) = 0.1·ln(s) + 1 (§3.4), multiplies cos and sin."""

    def pair_with(turns: float) -> float:  # solve L / (2π · base^(2i/d)) = turns for i
        return d * math.log(original_max_len / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(pair_with(beta_fast)), 0)  # below: fast pairs, kept
    high: float = min(math.ceil(pair_with(beta_slow)), d - 1)  # above: slow pairs, interpolated
    if low == high:
        high += 0.001  # the library's guard against a zero-width ramp
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(
        0, 1
    )  # (d/2,): 0 keep .. 1 interpolate
    theta = rope_inv_freq(d, base)
    inv_freq = theta / factor * ramp + theta * (1 - ramp)
    attention_scale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, attention_scale


def llama3_scaling(
    d: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_len: int
) -> tuple[torch.Tensor, float]:
    """Llama 3.1's scaling (Meta's reference code, transformers' "llama3"), three bands by
    wavelength λ_i = 2π/θ_i: shorter than L / high_freq_factor, kept; longer than
    L / low_freq_factor, divided by the factor; in between, a blend whose weight on the
    original θ_i, (L/λ_i - low_freq_factor) / (high_freq_factor - low_freq_factor), is
    0 at the long edge and 1 at the short one. No attention scale."""
    theta = rope_inv_freq(d, base)
    wavelength = 2 * math.pi / theta  # (d/2,) tokens per turn
    long_edge, short_edge = original_max_len / low_freq_factor, original_max_len / high_freq_factor
    keep = (original_max_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)  # (d/2,)
    blended = (1 - keep) * theta / factor + keep * theta
    inv_freq = torch.where(wavelength < short_edge, theta, torch.where(wavelength > long_edge, theta / factor, blended))
    return inv_freq, 1.0


# (end of chapter 07)


# ---------------------------------------------------------------------------
# Chapter 08: positions in practice
# ---------------------------------------------------------------------------

# How positions are *counted* once a model is served or trained at scale: a
# KV cache that decodes one token at a time (its offset), a left-padded batch
# (positions from the attention mask, as transformers' generate makes them),
# packed documents (positions and a mask per document, FlashAttention's varlen
# cu_seqlens), and StreamingLLM's rolling cache (Xiao et al. 2023, §3.2).


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.LongTensor:
    """Each row numbers its real tokens 0, 1, 2, ... whatever its padding side; a pad
    gets 0 (transformers' generate: `cumsum(-1) - 1`, then pads filled)."""
    mask = attention_mask.long()  # bool, int or long: 0/1 as long; a new tensor, the caller's untouched
    positions = mask.cumsum(-1) - 1  # (B, T): real token t gets the count of real tokens before it
    return positions.clamp(min=0) * mask  # left pads read -1 before the first real token: 0 there


def decode_position_ids(attention_mask: torch.Tensor, new_tokens: int = 1) -> torch.LongTensor:
    """The positions (B, new_tokens) of the next `new_tokens` tokens of each row of a padded batch:
    a row with n real tokens continues its own count, n, n + 1, ..., whatever its padding side
    (`generate`'s per-row positions, +1 per step), never the batch's padded length T. Each row holds
    at least one real token, its real tokens side by side (pads on the left, the right or both)."""
    seen = attention_mask.long().sum(-1, keepdim=True)  # (B, 1): the real tokens of each row, pads anywhere
    return seen + torch.arange(new_tokens, device=attention_mask.device)  # (B, new_tokens)


def packed_position_ids(seq_lens: torch.Tensor) -> torch.LongTensor:
    """Documents of lengths seq_lens (N,) packed into one row of S = sum tokens: positions
    restart at 0 in every document."""
    starts = seq_lens.cumsum(0) - seq_lens  # (N,) where each document begins in the row
    S = int(seq_lens.sum())
    document = torch.repeat_interleave(torch.arange(len(seq_lens), device=seq_lens.device), seq_lens, output_size=S)
    return torch.arange(S, device=seq_lens.device) - starts[document]  # (S,): token index minus its document's start


def document_causal_mask(seq_lens: torch.Tensor) -> torch.BoolTensor:
    """(S, S) True where query i may attend key j: the same document, and j ≤ i."""
    S = int(seq_lens.sum())
    document = torch.repeat_interleave(torch.arange(len(seq_lens), device=seq_lens.device), seq_lens, output_size=S)
    same = document[:, None] == document[None, :]  # (S, S) block diagonal
    causal = torch.ones(S, S, dtype=torch.bool, device=seq_lens.device).tril()  # j ≤ i
    return same & causal


class RopeKVCache(nn.Module):
    """RoPE with a KV cache, for generation: each call rotates its new q and k at
    their absolute positions offset .. offset + T - 1, appends k and v to the cache,
    and returns every key and value so far. A key is rotated once, when it arrives:
    its position never changes, so neither does its rotation (HF's `cache_position`)."""

    def __init__(self, head_dim: int, max_len: int = 4096, base: float = 10000.0):
        super().__init__()
        self.max_len = max_len
        self.offset = 0  # tokens seen so far: the position of the next one
        # float32 angles whatever q's dtype; buffers: they follow .to(device), never trained nor saved
        self.register_buffer("inv_freq", rope_frequencies(head_dim, base), persistent=False)
        self.k_cache: torch.Tensor | None = None  # (B, Hk, offset, Dh), rotated keys
        self.v_cache: torch.Tensor | None = None

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        T = q.shape[-2]
        if self.offset + T > self.max_len:
            raise ValueError(
                f"positions {self.offset}..{self.offset + T - 1} go past max_len = {self.max_len}: build RopeKVCache with a larger max_len"
            )
        positions = torch.arange(self.offset, self.offset + T, device=q.device, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq)  # (T, Dh/2) float32
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()  # (T, Dh)

        def rotate(x: torch.Tensor) -> torch.Tensor:
            return (x.float() * cos + rotate_half(x.float()) * sin).to(x.dtype)

        q_rot, k_rot = rotate(q), rotate(k)
        self.k_cache = (
            k_rot if self.k_cache is None else torch.cat([self.k_cache, k_rot], dim=-2)
        )  # (B, Hk, offset+T, Dh)
        self.v_cache = v if self.v_cache is None else torch.cat([self.v_cache, v], dim=-2)
        self.offset += T
        return q_rot, self.k_cache, self.v_cache


def streaming_positions(seq_len: int, n_sink: int, window: int) -> tuple[torch.LongTensor, torch.LongTensor]:
    """StreamingLLM's cache after seq_len tokens: the first n_sink (attention sinks) and the
    last `window`, in order (all of them while seq_len ≤ n_sink + window); positions are
    their slots in the cache, 0 .. K-1, as StreamingLLM rotates them."""
    tokens = torch.arange(seq_len)
    if seq_len <= n_sink + window:
        kept = tokens
    else:
        kept = torch.cat([tokens[:n_sink], tokens[seq_len - window :]])  # not tokens[-window:]: -0 is everything
    return kept, torch.arange(len(kept))


# (end of chapter 08)
