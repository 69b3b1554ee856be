"""Chapter 08 submissions (positions in practice), written as students write them.

RIGHT: different correct implementations; every one must pass.
WRONG: (exercise id, the diagnosis it must get, the code); each is a real
mistake, from the public bug reports the chapter cites, and the check must name
exactly that code.
"""

import torch
from torch import nn

# --- position_ids_from_mask -------------------------------------------------------------


def ids_cumsum(attention_mask):
    """transformers' generate: cumsum - 1, the pads filled with 1."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 1)


def ids_loop(attention_mask):
    """Row by row, token by token: a counter of real tokens."""
    out = torch.zeros(attention_mask.shape, dtype=torch.long, device=attention_mask.device)
    for b in range(attention_mask.shape[0]):
        count = 0
        for t in range(attention_mask.shape[1]):
            if attention_mask[b, t]:
                out[b, t] = count
                count += 1
    return out


def ids_first_real(attention_mask):
    """Index minus the index of the row's first real token, counting pads between (none, left or right)."""
    mask = attention_mask.bool()
    before = (~mask).long().cumsum(-1)  # pads up to each token
    return torch.where(mask, torch.arange(mask.shape[1], device=mask.device) - before, torch.zeros_like(before))


def ids_from_one(attention_mask):
    return attention_mask.long().cumsum(-1).masked_fill(attention_mask == 0, 0)


def ids_arange(attention_mask):
    """One cache_position for every row."""
    B, T = attention_mask.shape
    return torch.arange(T, device=attention_mask.device).unsqueeze(0).expand(B, T)


def ids_left_only(attention_mask):
    """The pads are assumed on the left: index minus the row's pad count."""
    T = attention_mask.shape[1]
    pads = (attention_mask == 0).sum(-1, keepdim=True)
    return (torch.arange(T, device=attention_mask.device) - pads).clamp(min=0)


def ids_minus_one_left(attention_mask):
    """cumsum - 1 with the pads left at -1."""
    return attention_mask.long().cumsum(-1) - 1


def ids_in_place(attention_mask):
    """cumsum_ in place: the caller's mask becomes the running count."""
    return (attention_mask.cumsum_(-1) - 1).clamp(min=0).long()


def ids_float(attention_mask):
    return (attention_mask.float().cumsum(-1) - 1).clamp(min=0)


def ids_batch_axis(attention_mask):
    return (attention_mask.long().cumsum(0) - 1).clamp(min=0)


def ids_on_cpu(attention_mask):
    positions = attention_mask.long().cumsum(-1) - 1
    return torch.where(attention_mask.bool(), positions, torch.zeros(attention_mask.shape, dtype=torch.long))


# --- decode_position_ids ---------------------------------------------------------------------


def decode_sum(attention_mask, new_tokens=1):
    seen = attention_mask.long().sum(-1, keepdim=True)
    return seen + torch.arange(new_tokens, device=attention_mask.device)


def decode_loop(attention_mask, new_tokens=1):
    """Row by row: the count of real tokens, then one more per new token."""
    rows = [[int(row.sum()) + i for i in range(new_tokens)] for row in attention_mask.long()]
    return torch.tensor(rows, dtype=torch.long, device=attention_mask.device)


def decode_generate_steps(attention_mask, new_tokens=1):
    """transformers' generate, step by step: the mask grows by one real token per step, and the new token's
    position is cumsum - 1 of the grown mask, read at its column."""
    mask = attention_mask.long()
    steps = []
    for _ in range(new_tokens):
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)
        steps.append(mask.cumsum(-1)[:, -1:] - 1)
    return torch.cat(steps, dim=-1)


def decode_vllm(attention_mask, new_tokens=1):
    """vLLM's gpu_model_runner._prepare_inputs: per request num_computed_tokens, the scheduled tokens flattened,
    positions = num_computed_tokens[req_indices] + the index of each token within its request."""
    num_computed = attention_mask.long().sum(-1)  # (B,)
    B = num_computed.shape[0]
    req_indices = torch.arange(B, device=attention_mask.device).repeat_interleave(new_tokens)
    arange = torch.arange(B * new_tokens, device=attention_mask.device) % new_tokens
    return (num_computed[req_indices] + arange).view(B, new_tokens)


def decode_sglang(attention_mask, new_tokens=1):
    """SGLang's compute_position in extend mode: each request's prefix length plus 0 .. extend_len - 1, all
    requests' positions concatenated into one flat tensor."""
    prefix_lens = attention_mask.long().sum(-1).tolist()
    extend_seq_lens = [new_tokens] * len(prefix_lens)
    positions = torch.cat(
        [torch.arange(p, p + e, device=attention_mask.device) for p, e in zip(prefix_lens, extend_seq_lens)]
    )
    return positions.view(len(prefix_lens), new_tokens)


def decode_columns(attention_mask, new_tokens=1):
    """The last real column minus the first, plus one: the real tokens sit side by side, pads on either side."""
    real = attention_mask.bool()
    T = real.shape[-1]
    first = real.long().argmax(-1, keepdim=True)
    last = T - 1 - real.flip(-1).long().argmax(-1, keepdim=True)
    return last - first + 1 + torch.arange(new_tokens, device=real.device)


def decode_at_width(attention_mask, new_tokens=1):
    """A cache's offset after the padded prefill: T for every row."""
    B, T = attention_mask.shape
    return torch.arange(T, T + new_tokens, device=attention_mask.device).expand(B, new_tokens)


def decode_at_longest(attention_mask, new_tokens=1):
    longest = attention_mask.long().sum(-1).max()
    B = attention_mask.shape[0]
    return longest + torch.arange(new_tokens, device=attention_mask.device).repeat(B, 1)


def decode_last_position(attention_mask, new_tokens=1):
    return attention_mask.long().sum(-1, keepdim=True) - 1 + torch.arange(new_tokens, device=attention_mask.device)


def decode_cumsum_without_one(attention_mask, new_tokens=1):
    """The prompt's last position, cumsum - 1 at the last column, taken as the first new one."""
    last = (attention_mask.long().cumsum(-1) - 1)[:, -1:]
    return last + torch.arange(new_tokens, device=attention_mask.device)


def decode_after_last_real(attention_mask, new_tokens=1):
    """The column after each row's last real token."""
    T = attention_mask.shape[-1]
    after = T - attention_mask.long().flip(-1).argmax(-1, keepdim=True)
    return after + torch.arange(new_tokens, device=attention_mask.device)


def decode_max_column(attention_mask, new_tokens=1):
    T = attention_mask.shape[-1]
    columns = torch.arange(1, T + 1, device=attention_mask.device) * attention_mask.long()
    return columns.max(-1, keepdim=True).values + torch.arange(new_tokens, device=attention_mask.device)


def decode_pads_counted(attention_mask, new_tokens=1):
    return (attention_mask == 0).long().sum(-1, keepdim=True) + torch.arange(new_tokens, device=attention_mask.device)


def decode_not_mask(attention_mask, new_tokens=1):
    """nn.Transformer's key_padding_mask convention: True is a pad."""
    pads = ~attention_mask.bool()
    return pads.sum(-1, keepdim=True) + torch.arange(new_tokens, device=attention_mask.device)


def decode_one_column(attention_mask, new_tokens=1):
    return attention_mask.long().sum(-1, keepdim=True)


def decode_same_position(attention_mask, new_tokens=1):
    return attention_mask.long().sum(-1, keepdim=True).expand(-1, new_tokens)


def decode_flat(attention_mask, new_tokens=1):
    return attention_mask.long().sum(-1)


def decode_side_from_last_column(attention_mask, new_tokens=1):
    """Left-padded if every row ends with a real token (as generate asks); else right-padded."""
    T = attention_mask.shape[-1]
    if bool(attention_mask[:, -1].all()):
        start = T - attention_mask.long().argmax(-1)  # the columns after the left pads
    else:
        pads = attention_mask == 0
        start = torch.where(pads.any(-1), pads.long().argmax(-1), T)  # the first pad: the right pads' place
    return start[:, None] + torch.arange(new_tokens, device=attention_mask.device)


def decode_side_from_first_column(attention_mask, new_tokens=1):
    """Mistral's flash-attention test turned around: right-padded if every row starts with a real token."""
    mask = attention_mask.long()
    B, T = mask.shape
    is_padding_right = int(mask[:, 0].sum()) == B
    if is_padding_right:
        start = torch.where((mask == 0).any(-1), (mask == 0).long().argmax(-1), T)
    else:
        start = T - mask.argmax(-1)
    return start.unsqueeze(-1) + torch.arange(new_tokens, device=mask.device)


def decode_squeeze_result(attention_mask, new_tokens=1):
    return decode_sum(attention_mask, new_tokens).squeeze()


def decode_squeeze_mask(attention_mask, new_tokens=1):
    """Written for one sequence: the batch axis squeezed away first."""
    mask = attention_mask.squeeze(0).long()
    return mask.sum(-1, keepdim=True) + torch.arange(new_tokens, device=mask.device)


def decode_view_sum(attention_mask, new_tokens=1):
    B, T = attention_mask.shape
    seen = attention_mask.view(-1).long().view(B, T).sum(-1, keepdim=True)
    return seen + torch.arange(new_tokens, device=attention_mask.device)


def decode_index_add(attention_mask, new_tokens=1):
    """A packed batch's bookkeeping: each token's request, the mask flattened with .view, counted per request."""
    B, T = attention_mask.shape
    request = torch.arange(B, device=attention_mask.device).repeat_interleave(T)
    seen = torch.zeros(B, dtype=torch.long, device=attention_mask.device)
    seen = seen.index_add(0, request, attention_mask.view(-1).long())
    return seen[:, None] + torch.arange(new_tokens, device=attention_mask.device)


def decode_int32(attention_mask, new_tokens=1):
    return decode_sum(attention_mask, new_tokens).int()


def decode_int32_arange(attention_mask, new_tokens=1):
    seen = attention_mask.sum(-1, keepdim=True, dtype=torch.int32)
    return seen + torch.arange(new_tokens, device=attention_mask.device, dtype=torch.int32)


def decode_cpu_arange(attention_mask, new_tokens=1):
    return attention_mask.long().sum(-1, keepdim=True) + torch.arange(new_tokens)


def decode_cpu_count(attention_mask, new_tokens=1):
    return attention_mask.long().sum(-1, keepdim=True).cpu() + torch.arange(new_tokens)


def ids_side_from_last_column(attention_mask):
    """Left padding if every row ends with a real token (as generate asks for), else right padding."""
    B, T = attention_mask.shape
    columns = torch.arange(T, device=attention_mask.device).expand(B, T)
    if bool(attention_mask[:, -1].all()):
        pads = (attention_mask == 0).long().sum(-1, keepdim=True)
        return (columns - pads).clamp(min=0)
    return columns


def ids_side_from_first_column(attention_mask):
    """Mistral's `is_padding_right`, read on the first column: every row starting real means right padding."""
    mask = attention_mask.long()
    B, T = mask.shape
    columns = torch.arange(T, device=mask.device).repeat(B, 1)
    if int(mask[:, 0].sum()) == B:
        return columns * mask
    return (columns - (T - mask.sum(-1, keepdim=True))) * mask


def ids_squeeze_result(attention_mask):
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0).squeeze()


def ids_one_sequence(attention_mask):
    """Written for one sequence, (T,), the batch axis squeezed away on the way in."""
    mask = attention_mask.squeeze(0).long()
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


def ids_flat_view(attention_mask):
    B, T = attention_mask.shape
    flat = attention_mask.view(B * T).long()
    return (flat.view(B, T).cumsum(-1) - 1).clamp(min=0)


def ids_split_rows(attention_mask):
    """The mask flattened with .view and split into its rows again, one cumsum per row."""
    T = attention_mask.shape[-1]
    rows = attention_mask.view(-1).long().split(T)
    return torch.stack([(row.cumsum(0) - 1).clamp(min=0) for row in rows])


def ids_trl(attention_mask):
    """TRL's trainer utils (`forward`, query and response in one row): cumsum minus the mask itself, so a pad
    holds the count of real tokens before it, in [0, T) on either side."""
    return attention_mask.cumsum(1) - attention_mask.long()


# --- packed_position_ids ---------------------------------------------------------------------


def packed_repeat(seq_lens):
    starts = torch.cumsum(seq_lens, 0) - seq_lens
    return torch.arange(int(seq_lens.sum()), device=seq_lens.device) - starts.repeat_interleave(seq_lens)


def packed_cat(seq_lens):
    """One arange per document, concatenated."""
    return torch.cat([torch.arange(int(n), device=seq_lens.device) for n in seq_lens])


def packed_arange(seq_lens):
    return torch.arange(int(seq_lens.sum()), device=seq_lens.device)


def packed_from_one(seq_lens):
    return torch.cat([torch.arange(1, int(n) + 1, device=seq_lens.device) for n in seq_lens])


def packed_inclusive_starts(seq_lens):
    """Each token's document by searchsorted on the ends, without right=True: the first token of a
    document is still counted in the one before."""
    S = int(seq_lens.sum())
    ends = seq_lens.cumsum(0)
    document = torch.searchsorted(ends, torch.arange(S, device=seq_lens.device))
    return torch.arange(S, device=seq_lens.device) - (ends - seq_lens)[document]


def packed_megatron(seq_lens):
    """Megatron-LM's get_ltor_masks_and_position_ids (reset_position_ids): each document ends with an EOD token;
    after EOD index i, every later position is moved back by the length of the document it closed."""
    S = int(seq_lens.sum())
    position_ids = torch.arange(S, dtype=torch.long, device=seq_lens.device)
    eod_index = seq_lens.cumsum(0) - 1
    prev_index = 0
    for i in eod_index.tolist():
        position_ids[(i + 1) :] -= i + 1 - prev_index
        prev_index = i + 1
    return position_ids


def packed_flattening(seq_lens):
    """TRL's and transformers' DataCollatorWithFlattening: `position_ids += list(range(len(input_ids)))` per example."""
    position_ids = []
    for n in seq_lens.tolist():
        position_ids += list(range(n))
    return torch.tensor(position_ids, dtype=torch.long, device=seq_lens.device)


def packed_cpu(seq_lens):
    return torch.cat([torch.arange(int(n)) for n in seq_lens])


# --- document_causal_mask ---------------------------------------------------------------------


def mask_repeat(seq_lens):
    S = int(seq_lens.sum())
    document = torch.repeat_interleave(torch.arange(len(seq_lens), device=seq_lens.device), seq_lens)
    causal = torch.arange(S, device=seq_lens.device)[None, :] <= torch.arange(S, device=seq_lens.device)[:, None]
    return (document[:, None] == document[None, :]) & causal


def mask_blocks(seq_lens):
    """Lower-triangular blocks on the diagonal, one per document (torch.block_diag)."""
    blocks = [torch.ones(int(n), int(n), device=seq_lens.device).tril() for n in seq_lens]
    return torch.block_diag(*blocks).bool()


def mask_causal(seq_lens):
    S = int(seq_lens.sum())
    return torch.ones(S, S, dtype=torch.bool, device=seq_lens.device).tril()


def mask_block_only(seq_lens):
    return torch.block_diag(*[torch.ones(int(n), int(n), device=seq_lens.device) for n in seq_lens]).bool()


def mask_triu(seq_lens):
    return torch.block_diag(*[torch.ones(int(n), int(n), device=seq_lens.device).triu() for n in seq_lens]).bool()


def mask_strict(seq_lens):
    return torch.block_diag(*[torch.ones(int(n), int(n), device=seq_lens.device).tril(-1) for n in seq_lens]).bool()


def mask_late_boundary(seq_lens):
    """Document ids from the ends, searchsorted without right=True: each boundary one token late."""
    S = int(seq_lens.sum())
    ends = seq_lens.cumsum(0)
    document = torch.searchsorted(ends, torch.arange(S, device=seq_lens.device))
    causal = torch.ones(S, S, dtype=torch.bool, device=seq_lens.device).tril()
    return (document[:, None] == document[None, :]) & causal


def mask_megatron(seq_lens):
    """Megatron-LM's reset_attention_mask: a lower triangle of ones with the keys before each EOD zeroed for the
    queries after it, read in this exercise's convention (> 0.5, True = attend)."""
    S = int(seq_lens.sum())
    attention_mask = torch.tril(torch.ones(S, S, device=seq_lens.device))
    for i in (seq_lens.cumsum(0) - 1).tolist():
        attention_mask[(i + 1) :, : (i + 1)] = 0
    return attention_mask > 0.5


def mask_megatron_as_is(seq_lens):
    """Megatron-LM's mask as it returns it, `attention_mask < 0.5`: True where attention is masked out."""
    S = int(seq_lens.sum())
    attention_mask = torch.tril(torch.ones(S, S, device=seq_lens.device))
    for i in (seq_lens.cumsum(0) - 1).tolist():
        attention_mask[(i + 1) :, : (i + 1)] = 0
    return attention_mask < 0.5


def mask_not_allowed(seq_lens):
    """nn.MultiheadAttention's bool attn_mask: True where a query may not look."""
    return ~mask_repeat(seq_lens)


def mask_additive(seq_lens):
    """A float mask of 0 and -inf, as attention adds it."""
    allowed = mask_repeat(seq_lens)
    return torch.zeros(allowed.shape, device=seq_lens.device).masked_fill(~allowed, float("-inf"))


# --- RopeKVCache -----------------------------------------------------------------------------------


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class CacheCat(nn.Module):
    """Keys rotated on arrival and appended with torch.cat (HF's DynamicCache)."""

    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__()
        self.max_len, self.offset = max_len, 0
        self.register_buffer(
            "inv_freq", 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim), persistent=False
        )
        self.k = self.v = None

    def positions(self, T, device):
        return torch.arange(self.offset, self.offset + T, device=device)

    def rotate(self, x, positions):
        angles = positions.float()[:, None] * self.inv_freq  # (T, Dh/2), float32
        angles = torch.cat([angles, angles], dim=-1)
        return (x.float() * angles.cos() + rotate_half(x.float()) * angles.sin()).to(x.dtype)

    def forward(self, q, k, v):
        T = q.shape[-2]
        if self.offset + T > self.max_len:
            raise ValueError(f"position {self.offset + T - 1} is past max_len {self.max_len}")
        positions = self.positions(T, q.device)
        q, k = self.rotate(q, positions), self.rotate(k, positions)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        self.offset += T
        return q, self.k, self.v


class CacheStatic(nn.Module):
    """A preallocated cache written in place (HF's StaticCache), cos/sin tables built once in float64."""

    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__()
        self.max_len, self.offset = max_len, 0
        theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), theta).repeat(1, 2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        self.register_buffer("k_buf", torch.zeros(0), persistent=False)
        self.register_buffer("v_buf", torch.zeros(0), persistent=False)

    def forward(self, q, k, v):
        B, Hk, T, Dh = k.shape
        start, end = self.offset, self.offset + T
        if end > self.max_len:
            raise ValueError(f"positions up to {end - 1} but max_len is {self.max_len}")
        if self.k_buf.numel() == 0:
            self.k_buf = torch.zeros(B, Hk, self.max_len, Dh, dtype=k.dtype, device=k.device)
            self.v_buf = torch.zeros(B, Hk, self.max_len, Dh, dtype=v.dtype, device=v.device)
        cos, sin = self.cos[start:end], self.sin[start:end]
        q_rot = (q.float() * cos + rotate_half(q.float()) * sin).to(q.dtype)
        self.k_buf[:, :, start:end] = (k.float() * cos + rotate_half(k.float()) * sin).to(k.dtype)
        self.v_buf[:, :, start:end] = v
        self.offset = end
        return q_rot, self.k_buf[:, :, :end], self.v_buf[:, :, :end]


class CacheRaw(CacheCat):
    """Raw keys kept, every key rotated at its own position on each call: slower, the same values."""

    def forward(self, q, k, v):
        T = q.shape[-2]
        if self.offset + T > self.max_len:
            raise ValueError("past max_len")
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        everything = torch.arange(self.offset + T, device=q.device)
        q_rot = self.rotate(q, everything[self.offset :])
        self.offset += T
        return q_rot, self.rotate(self.k, everything), self.v


class CacheAtZero(CacheCat):
    def positions(self, T, device):
        return torch.arange(T, device=device)


class CacheNoOffset(CacheCat):
    """self.offset never advanced: every call starts at 0."""

    def forward(self, q, k, v):
        out = super().forward(q, k, v)
        self.offset -= q.shape[-2]
        return out


class CacheAdvancedFirst(CacheCat):
    """cache_position computed after the cache grew: past_len includes the new tokens."""

    def positions(self, T, device):
        return torch.arange(self.offset + T, self.offset + 2 * T, device=device)


class CacheOffsetTwice(CacheCat):
    """Positions from the cache's length (right), and the offset advanced by the parent and again here."""

    def positions(self, T, device):
        past = 0 if self.k is None else self.k.shape[-2]
        return torch.arange(past, past + T, device=device)

    def forward(self, q, k, v):
        out = super().forward(q, k, v)
        self.offset += q.shape[-2]
        return out


class CacheRerotate(CacheCat):
    """The cache (rotated keys) and the new raw keys concatenated, then all rotated at 0 .. L-1 and stored."""

    def forward(self, q, k, v):
        T = q.shape[-2]
        positions = self.positions(T, q.device)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.k = self.rotate(self.k, torch.arange(self.k.shape[-2], device=q.device))
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        self.offset += T
        return self.rotate(q, positions), self.k, self.v


class CacheUnrotated(CacheCat):
    def forward(self, q, k, v):
        T = q.shape[-2]
        if self.offset + T > self.max_len:
            raise ValueError("past max_len")
        positions = self.positions(T, q.device)
        q_rot, k_rot = self.rotate(q, positions), self.rotate(k, positions)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)  # raw keys cached
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        self.offset += T
        return q_rot, torch.cat([self.k[..., :-T, :], k_rot], dim=-2), self.v


class CacheInterleaved(CacheCat):
    def rotate(self, x, positions):
        angles = positions.float()[:, None] * self.inv_freq
        cos, sin = angles.cos(), angles.sin()
        even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2).to(x.dtype)


class CacheBase10000(CacheCat):
    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__(head_dim, max_len, 10000.0)


class CacheNoTwo(CacheCat):
    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__(head_dim, max_len, base)
        self.inv_freq = 1.0 / base ** (torch.arange(head_dim // 2).float() / head_dim)


class CacheAnglesInInput(CacheCat):
    """Angles in q's dtype: bfloat16 inputs, bfloat16 angles."""

    def rotate(self, x, positions):
        angles = positions.to(x.dtype)[:, None] * self.inv_freq.to(x.dtype)
        angles = torch.cat([angles, angles], dim=-1)
        return (x.float() * angles.cos().float() + rotate_half(x.float()) * angles.sin().float()).to(x.dtype)


class CacheNoCheck(CacheCat):
    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__(head_dim, 10**9, base)


class CacheOffByOne(CacheCat):
    def forward(self, q, k, v):
        if self.offset + q.shape[-2] >= self.max_len:
            raise ValueError("past max_len")
        return super().forward(q, k, v)


class CacheRepeatKV(CacheCat):
    """repeat_kv before the cache: every key and value stored once per query head."""

    def forward(self, q, k, v):
        groups = q.shape[1] // k.shape[1]
        return super().forward(q, k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1))


class CacheFloatOut(CacheCat):
    def rotate(self, x, positions):
        angles = positions.float()[:, None] * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        return x.float() * angles.cos() + rotate_half(x.float()) * angles.sin()


class CacheCpuPositions(CacheCat):
    def positions(self, T, device):
        return torch.arange(self.offset, self.offset + T)


class CacheTorchtune(nn.Module):
    """torchtune's KVCache: buffers of max_seq_len written at `cache_pos`, a buffer of positions moved on by each
    call's length; the rotation read from a cos/sin table built once for max_seq_len (build_rope_cache)."""

    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__()
        self.max_len, self.offset, self.size = max_len, 0, 0
        theta = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
        idx_theta = torch.einsum("i,j->ij", torch.arange(max_len).float(), theta)
        self.register_buffer("cache", torch.cat([idx_theta, idx_theta], dim=-1), persistent=False)
        self.register_buffer("cache_pos", torch.arange(max_len), persistent=False)
        self.k_cache = self.v_cache = None

    def forward(self, q, k, v):
        B, Hk, T, Dh = k.shape
        if self.size + T > self.max_len:
            raise ValueError(f"{self.size + T} tokens do not fit a cache of {self.max_len}")
        if self.k_cache is None:
            self.k_cache = k.new_zeros(B, Hk, self.max_len, Dh)
            self.v_cache = v.new_zeros(B, Hk, self.max_len, Dh)
        input_pos = self.cache_pos[:T] + self.size
        angles = self.cache[input_pos]
        cos, sin = angles.cos(), angles.sin()
        q_rot = (q.float() * cos + rotate_half(q.float()) * sin).to(q.dtype)
        k_rot = (k.float() * cos + rotate_half(k.float()) * sin).to(k.dtype)
        self.k_cache = self.k_cache.index_copy(2, input_pos, k_rot)  # out of place: gradients reach k
        self.v_cache = self.v_cache.index_copy(2, input_pos, v)
        self.size += T
        self.offset = self.size
        return q_rot, self.k_cache[:, :, : self.size], self.v_cache[:, :, : self.size]


class CacheMlx(CacheCat):
    """mlx-lm's KVCache: a buffer grown by steps of 256 slots, the rotation at `offset` (nn.RoPE(dims,
    traditional=False) is the half-split layout), update_and_fetch returning the filled part."""

    step = 256

    def forward(self, q, k, v):
        prev, T = self.offset, q.shape[-2]
        if prev + T > self.max_len:
            raise ValueError("past max_len")
        positions = self.positions(T, q.device)
        q_rot, k_rot = self.rotate(q, positions), self.rotate(k, positions)
        if self.k is None or prev + T > self.k.shape[2]:
            grow = ((T + self.step - 1) // self.step) * self.step
            new_k = k.new_zeros(*k.shape[:2], grow, k.shape[-1])
            new_v = v.new_zeros(*v.shape[:2], grow, v.shape[-1])
            self.k = new_k if self.k is None else torch.cat([self.k[..., :prev, :], new_k], dim=2)
            self.v = new_v if self.v is None else torch.cat([self.v[..., :prev, :], new_v], dim=2)
        self.k = torch.cat([self.k[..., :prev, :], k_rot, self.k[..., prev + T :, :]], dim=2)
        self.v = torch.cat([self.v[..., :prev, :], v, self.v[..., prev + T :, :]], dim=2)
        self.offset += T
        return q_rot, self.k[..., : self.offset, :], self.v[..., : self.offset, :]


class CacheResetOnPrompt(CacheCat):
    """A call of more than one token is taken for a new prompt: offset and cache reset."""

    def forward(self, q, k, v):
        if q.shape[-2] > 1:
            self.offset, self.k, self.v = 0, None, None
        return super().forward(q, k, v)


class CachePrefillBranch(CacheCat):
    """Two paths, prefill (T > 1: positions from 0, the cache replaced) and decode (T = 1: appended at the offset)."""

    def forward(self, q, k, v):
        T = q.shape[-2]
        if T > 1:
            positions = torch.arange(T, device=q.device)
            q_rot, k_rot = self.rotate(q, positions), self.rotate(k, positions)
            self.k, self.v, self.offset = k_rot, v, T
            return q_rot, self.k, self.v
        return super().forward(q, k, v)


class CacheRotatedOnOutput(CacheCat):
    """Keys stored rotated once, then all rotated again on the way out: R(n)R(n) = R(2n)."""

    def forward(self, q, k, v):
        q_rot, k_all, v_all = super().forward(q, k, v)
        return q_rot, self.rotate(k_all, torch.arange(k_all.shape[-2], device=q.device)), v_all


class CacheNewOnly(CacheCat):
    """No cache at all: this call's keys and values only."""

    def forward(self, q, k, v):
        q_rot, k_all, v_all = super().forward(q, k, v)
        return q_rot, k_all[..., -q.shape[-2] :, :], v_all[..., -q.shape[-2] :, :]


class CacheQueryAsIs(CacheCat):
    """Returns the q it was given instead of its rotation."""

    def forward(self, q, k, v):
        super().forward(q, k, v)
        return q, self.k, self.v


class CacheKeysOnly(CacheCat):
    """The rotation written for the keys only: the cache holds rotated keys, the queries go back as they came."""

    def forward(self, q, k, v):
        T = q.shape[-2]
        if self.offset + T > self.max_len:
            raise ValueError("past max_len")
        k_rot = self.rotate(k, self.positions(T, k.device))
        self.k = k_rot if self.k is None else torch.cat([self.k, k_rot], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        self.offset += T
        return q, self.k, self.v


class CacheValuesRotated(CacheCat):
    def forward(self, q, k, v):
        positions = self.positions(q.shape[-2], q.device)
        return super().forward(q, k, self.rotate(v, positions))


class CacheKeysValuesStacked(CacheCat):
    """k and v stacked and rotated together, the way a fused qkv is sometimes split after the rotation."""

    def forward(self, q, k, v):
        positions = self.positions(q.shape[-2], q.device)
        k_rot, v_rot = self.rotate(torch.stack([k, v]), positions)
        T = q.shape[-2]
        if self.offset + T > self.max_len:
            raise ValueError("past max_len")
        q_rot = self.rotate(q, positions)
        self.k = k_rot if self.k is None else torch.cat([self.k, k_rot], dim=-2)
        self.v = v_rot if self.v is None else torch.cat([self.v, v_rot], dim=-2)
        self.offset += T
        return q_rot, self.k, self.v


class CacheMaxLen2048(CacheCat):
    """GPT-NeoX's and LitGPT's default context, 2048."""

    def __init__(self, head_dim, max_len=2048, base=10000.0):
        super().__init__(head_dim, max_len, base)


class CacheLlama3Base(CacheCat):
    """Llama 3's rope_theta as the default base."""

    def __init__(self, head_dim, max_len=4096, base=500000.0):
        super().__init__(head_dim, max_len, base)


class CacheNoGrad(CacheCat):
    """The rotation under torch.no_grad(), as transformers' LlamaRotaryEmbedding.forward makes cos and sin."""

    def rotate(self, x, positions):
        with torch.no_grad():
            return super().rotate(x, positions)


class CacheInferenceMode(CacheCat):
    @torch.inference_mode()
    def forward(self, q, k, v):
        return super().forward(q, k, v)


class CacheDetached(CacheCat):
    """Every output detached, "a cache holds no graph"."""

    def forward(self, q, k, v):
        return tuple(t.detach() for t in super().forward(q, k, v))


class CacheFlatHeads(CacheCat):
    """Heads flattened into the batch with .view before the rotation, and back."""

    def rotate(self, x, positions):
        B, H, T, Dh = x.shape
        flat = x.view(B * H, T, Dh)
        return super().rotate(flat, positions).view(B, H, T, Dh)


class CacheViewStore(CacheCat):
    """Keys and values stored as (B, Hk * T, Dh) rows with .view, reshaped back on the way out."""

    def forward(self, q, k, v):
        B, Hk, T, Dh = k.shape
        q_rot, k_all, v_all = super().forward(q, k, v)
        rows = v.view(B, Hk * T, Dh)
        return q_rot, k_all, torch.cat([v_all[..., :-T, :], rows.view(B, Hk, T, Dh)], dim=-2)


# --- streaming_positions ---------------------------------------------------------------------------


def stream_slices(seq_len, n_sink, window):
    tokens = torch.arange(seq_len)
    if seq_len <= n_sink + window:
        kept = tokens
    else:
        kept = torch.cat([tokens[:n_sink], tokens[seq_len - window :]])
    return kept, torch.arange(len(kept))


def stream_list(seq_len, n_sink, window):
    """A list comprehension over the tokens: kept if a sink or in the window."""
    kept = [t for t in range(seq_len) if t < n_sink or t >= seq_len - window]
    return torch.tensor(kept, dtype=torch.long), torch.arange(len(kept))


def stream_window_only(seq_len, n_sink, window):
    kept = torch.arange(max(seq_len - window, 0), seq_len)
    return kept, torch.arange(len(kept))


def stream_window_plus_one(seq_len, n_sink, window):
    tokens = torch.arange(seq_len)
    if seq_len <= n_sink + window:
        kept = tokens
    else:
        kept = torch.cat([tokens[:n_sink], tokens[seq_len - window - 1 :]])
    return kept, torch.arange(len(kept))


def stream_shifted_window(seq_len, n_sink, window):
    """The window taken as the `window` tokens before the newest one."""
    tokens = torch.arange(seq_len)
    if seq_len <= n_sink + window:
        return tokens, torch.arange(seq_len)
    kept = torch.cat([tokens[:n_sink], tokens[seq_len - window - 1 : seq_len - 1]])
    return kept, torch.arange(len(kept))


def stream_slots_from_one(seq_len, n_sink, window):
    kept, _ = stream_slices(seq_len, n_sink, window)
    return kept, torch.arange(1, len(kept) + 1)


def stream_slots_counted(seq_len, n_sink, window):
    """Each kept token's slot as the count of kept tokens up to it (a cumulative sum, inclusive)."""
    keep = torch.zeros(seq_len, dtype=torch.long)
    keep[stream_slices(seq_len, n_sink, window)[0]] = 1
    kept = keep.nonzero().flatten()
    return kept, keep.cumsum(0)[kept]


def stream_original(seq_len, n_sink, window):
    kept, _ = stream_slices(seq_len, n_sink, window)
    return kept, kept.clone()


def stream_overlap(seq_len, n_sink, window):
    tokens = torch.arange(seq_len)
    kept = torch.cat([tokens[:n_sink], tokens[max(seq_len - window, 0) :]])
    return kept, torch.arange(len(kept))


def stream_minus_zero(seq_len, n_sink, window):
    tokens = torch.arange(seq_len)
    if seq_len <= n_sink + window:
        return tokens, torch.arange(seq_len)
    kept = torch.cat([tokens[:n_sink], tokens[-window:]])
    return kept, torch.arange(len(kept))


def stream_newest_plus_recent(seq_len, n_sink, window):
    """The newest token, then the window - 1 tokens before it (the sinks alone for a window of 0): [-0:] at 1."""
    tokens = torch.arange(seq_len)
    if seq_len <= n_sink + window:
        return tokens, torch.arange(seq_len)
    if window == 0:
        kept = tokens[:n_sink]
    else:
        kept = torch.cat([tokens[:n_sink], tokens[n_sink:-1][-(window - 1) :], tokens[-1:]])
    return kept, torch.arange(len(kept))


def stream_evict_for_space(seq_len, n_sink, window):
    """StreamingLLM's evict_for_space, on a list of indices: keep the recent window - 1 and append the coming one."""
    if seq_len <= n_sink + window:
        kept = list(range(seq_len))
    elif window == 0:
        kept = list(range(n_sink))
    else:
        past = list(range(seq_len - 1))
        kept = past[:n_sink] + past[n_sink:][-(window - 1) :] + [seq_len - 1]
    return torch.tensor(kept), torch.arange(len(kept))


def stream_start_recent(seq_len, n_sink, window):
    """StreamingLLM's StartRecentKVCache.__call__ on the token indices: start_size sinks and recent_size recent."""
    start_size, recent_size, cache_size = n_sink, window, n_sink + window
    tokens = torch.arange(seq_len)
    if seq_len <= cache_size:
        return tokens, torch.arange(seq_len)
    kept = torch.cat([tokens[:start_size], tokens[seq_len - recent_size : seq_len]])
    return kept, torch.arange(len(kept))


def stream_mlx_trim(seq_len, n_sink, window):
    """mlx-lm's RotatingKVCache._trim with keep = n_sink and max_size = n_sink + window: the oldest tokens after
    the kept ones go; positions are the slots (StreamingLLM's rule)."""
    tokens = torch.arange(seq_len)
    trim_size = max(seq_len - (n_sink + window), 0)
    kept = torch.cat([tokens[:n_sink], tokens[trim_size + n_sink :]]) if trim_size > 0 else tokens
    return kept, torch.arange(len(kept))


def stream_sink_cache(seq_len, n_sink, window):
    """transformers' former SinkCache(window_length=window, num_sink_tokens=n_sink): window is the whole cache."""
    tokens = torch.arange(seq_len)
    if seq_len <= max(window, n_sink):
        return tokens, torch.arange(seq_len)
    recent = tokens[seq_len - max(window - n_sink, 0) :][: max(window - n_sink, 0)]
    kept = torch.cat([tokens[:n_sink], recent])
    return kept, torch.arange(len(kept))


def stream_cache_size(seq_len, n_sink, window):
    """A cache of `window` slots, the sinks in the first ones, the rest for the newest tokens."""
    kept = [t for t in range(seq_len) if t < n_sink or t >= seq_len - (window - n_sink)]
    if seq_len <= window:
        kept = list(range(seq_len))
    return torch.tensor(kept, dtype=torch.long), torch.arange(len(kept))


def stream_one_tensor(seq_len, n_sink, window):
    return torch.stack(stream_slices(seq_len, n_sink, window))


# --- two independent mistakes in one submission ------------------------------------------------------


def decode_width_one_column(attention_mask, new_tokens=1):
    """The padded width for every row, and one position only."""
    return torch.full((attention_mask.shape[0], 1), attention_mask.shape[-1], device=attention_mask.device)


def decode_side_same_position(attention_mask, new_tokens=1):
    """The padding side decided on the last column, and every new token at the same position."""
    return decode_side_from_last_column(attention_mask, 1).expand(-1, new_tokens)


def mask_late_and_triu(seq_lens):
    """Document ids one token late, and the upper triangle."""
    return mask_late_boundary(seq_lens).T


def mask_strict_whole_row(seq_lens):
    """No documents, and no diagonal: tril(-1) over the whole packed row."""
    S = int(seq_lens.sum())
    return torch.ones(S, S, dtype=torch.bool, device=seq_lens.device).tril(-1)


def stream_window_original(seq_len, n_sink, window):
    """The last window only, numbered by the original indices."""
    kept = torch.arange(max(seq_len - window, 0), seq_len)
    return kept, kept.clone()


class CacheInterleavedAtZero(CacheInterleaved):
    def positions(self, T, device):
        return torch.arange(T, device=device)


class CacheBase10000Unrotated(CacheUnrotated):
    def __init__(self, head_dim, max_len=4096, base=10000.0):
        super().__init__(head_dim, max_len, 10000.0)


RIGHT = {
    "position_ids_from_mask": [ids_cumsum, ids_loop, ids_first_real, ids_trl],
    "decode_position_ids": [decode_sum, decode_loop, decode_generate_steps, decode_vllm, decode_sglang, decode_columns],
    "packed_position_ids": [packed_repeat, packed_cat, packed_megatron, packed_flattening],
    "document_causal_mask": [mask_repeat, mask_blocks, mask_megatron],
    "RopeKVCache": [CacheCat, CacheStatic, CacheRaw, CacheTorchtune, CacheMlx],
    "streaming_positions": [stream_slices, stream_list, stream_mlx_trim, stream_start_recent],
}

WRONG = [
    ("position_ids_from_mask", "position_offset", ids_from_one),
    ("position_ids_from_mask", "mask_ignored", ids_arange),
    ("position_ids_from_mask", "left_padding_only", ids_left_only),
    ("position_ids_from_mask", "pad_position_out_of_range", ids_minus_one_left),
    ("position_ids_from_mask", "mutated_input", ids_in_place),
    ("position_ids_from_mask", "wrong_dtype", ids_float),
    ("position_ids_from_mask", "batch_seq_confusion", ids_batch_axis),
    ("position_ids_from_mask", "wrong_device", ids_on_cpu),
    ("position_ids_from_mask", "padding_side_per_batch", ids_side_from_last_column),
    ("position_ids_from_mask", "padding_side_per_batch", ids_side_from_first_column),
    ("position_ids_from_mask", "squeezed_size_one", ids_squeeze_result),
    ("position_ids_from_mask", "squeezed_size_one", ids_one_sequence),
    ("position_ids_from_mask", "contiguity_assumed", ids_flat_view),
    ("position_ids_from_mask", "contiguity_assumed", ids_split_rows),
    ("decode_position_ids", "decode_offset_shared", decode_at_width),
    ("decode_position_ids", "decode_offset_shared", decode_at_longest),
    ("decode_position_ids", "decode_position_last", decode_last_position),
    ("decode_position_ids", "decode_position_last", decode_cumsum_without_one),
    ("decode_position_ids", "decode_counts_left_pads", decode_after_last_real),
    ("decode_position_ids", "decode_counts_left_pads", decode_max_column),
    ("decode_position_ids", "mask_inverted", decode_pads_counted),
    ("decode_position_ids", "mask_inverted", decode_not_mask),
    ("decode_position_ids", "new_tokens_ignored", decode_one_column),
    ("decode_position_ids", "new_tokens_ignored", decode_same_position),
    ("decode_position_ids", "new_tokens_ignored", decode_flat),
    ("decode_position_ids", "padding_side_per_batch", decode_side_from_last_column),
    ("decode_position_ids", "padding_side_per_batch", decode_side_from_first_column),
    ("decode_position_ids", "squeezed_size_one", decode_squeeze_result),
    ("decode_position_ids", "squeezed_size_one", decode_squeeze_mask),
    ("decode_position_ids", "contiguity_assumed", decode_view_sum),
    ("decode_position_ids", "contiguity_assumed", decode_index_add),
    ("decode_position_ids", "wrong_dtype", decode_int32),
    ("decode_position_ids", "wrong_dtype", decode_int32_arange),
    ("decode_position_ids", "wrong_device", decode_cpu_arange),
    ("decode_position_ids", "wrong_device", decode_cpu_count),
    ("packed_position_ids", "positions_not_restarted", packed_arange),
    ("packed_position_ids", "position_offset", packed_from_one),
    ("packed_position_ids", "document_boundary_off_by_one", packed_inclusive_starts),
    ("packed_position_ids", "wrong_device", packed_cpu),
    ("document_causal_mask", "mask_causal_only", mask_causal),
    ("document_causal_mask", "mask_documents_only", mask_block_only),
    ("document_causal_mask", "mask_transposed", mask_triu),
    ("document_causal_mask", "mask_diagonal_excluded", mask_strict),
    ("document_causal_mask", "document_boundary_off_by_one", mask_late_boundary),
    ("document_causal_mask", "wrong_dtype", mask_additive),
    ("document_causal_mask", "mask_inverted", mask_megatron_as_is),
    ("document_causal_mask", "mask_inverted", mask_not_allowed),
    ("RopeKVCache", "decode_at_position_zero", CacheAtZero),
    ("RopeKVCache", "offset_not_advanced", CacheNoOffset),
    ("RopeKVCache", "offset_double_counted", CacheAdvancedFirst),
    ("RopeKVCache", "offset_double_counted", CacheOffsetTwice),
    ("RopeKVCache", "keys_rotated_twice", CacheRerotate),
    ("RopeKVCache", "cache_keys_unrotated", CacheUnrotated),
    ("RopeKVCache", "rope_interleaved_convention", CacheInterleaved),
    ("RopeKVCache", "wrong_base", CacheBase10000),
    ("RopeKVCache", "wrong_exponent", CacheNoTwo),
    ("RopeKVCache", "low_precision_angles", CacheAnglesInInput),
    ("RopeKVCache", "no_length_check", CacheNoCheck),
    ("RopeKVCache", "length_check_off_by_one", CacheOffByOne),
    ("RopeKVCache", "wrong_dtype", CacheFloatOut),
    ("RopeKVCache", "wrong_shape", CacheRepeatKV),
    ("RopeKVCache", "wrong_device", CacheCpuPositions),
    ("RopeKVCache", "cache_reset_on_chunk", CacheResetOnPrompt),
    ("RopeKVCache", "cache_reset_on_chunk", CachePrefillBranch),
    ("RopeKVCache", "keys_rotated_twice", CacheRotatedOnOutput),
    ("RopeKVCache", "query_not_rotated", CacheQueryAsIs),
    ("RopeKVCache", "query_not_rotated", CacheKeysOnly),
    ("RopeKVCache", "values_rotated", CacheValuesRotated),
    ("RopeKVCache", "values_rotated", CacheKeysValuesStacked),
    ("RopeKVCache", "default_changed", CacheMaxLen2048),
    ("RopeKVCache", "default_changed", CacheLlama3Base),
    ("RopeKVCache", "gradient_cut", CacheNoGrad),
    ("RopeKVCache", "gradient_cut", CacheDetached),
    ("RopeKVCache", "contiguity_assumed", CacheFlatHeads),
    ("RopeKVCache", "contiguity_assumed", CacheViewStore),
    ("streaming_positions", "sinks_dropped", stream_window_only),
    ("streaming_positions", "window_off_by_one", stream_window_plus_one),
    ("streaming_positions", "window_off_by_one", stream_shifted_window),
    ("streaming_positions", "position_offset", stream_slots_from_one),
    ("streaming_positions", "position_offset", stream_slots_counted),
    ("streaming_positions", "positions_not_cache_slots", stream_original),
    ("streaming_positions", "tokens_kept_twice", stream_overlap),
    ("streaming_positions", "window_zero_slice", stream_minus_zero),
    ("streaming_positions", "window_zero_slice", stream_newest_plus_recent),
    ("streaming_positions", "window_counts_sinks", stream_sink_cache),
    ("streaming_positions", "window_counts_sinks", stream_cache_size),
    ("streaming_positions", "window_zero_slice", stream_evict_for_space),
    ("streaming_positions", "wrong_type", stream_one_tensor),
]

ALSO = [
    ("document_causal_mask", "mask_transposed", "document_boundary_off_by_one", mask_late_and_triu),
    ("document_causal_mask", "mask_diagonal_excluded", "mask_causal_only", mask_strict_whole_row),
    ("streaming_positions", "sinks_dropped", "positions_not_cache_slots", stream_window_original),
    ("decode_position_ids", "decode_offset_shared", "new_tokens_ignored", decode_width_one_column),
    ("decode_position_ids", "padding_side_per_batch", "new_tokens_ignored", decode_side_same_position),
    ("RopeKVCache", "rope_interleaved_convention", "decode_at_position_zero", CacheInterleavedAtZero),
    ("RopeKVCache", "wrong_base", "cache_keys_unrotated", CacheBase10000Unrotated),
    # no length check at all (a forward of their own, or a branch without one), which length_checked names too
    ("RopeKVCache", "offset_not_advanced", "no_length_check", CacheNoOffset),
    ("RopeKVCache", "keys_rotated_twice", "no_length_check", CacheRerotate),
    ("RopeKVCache", "cache_reset_on_chunk", "no_length_check", CachePrefillBranch),
]


# INDEPENDENT: which catalogue mistakes are independent aspects of the code (each pair made together by an ALSO
# submission); ONE_ASPECT: why an exercise's mistakes are all values of one choice. tests/test_also_wrong.py reads both.
INDEPENDENT = {
    # the causal part (read on one document alone) and the document part (read in either direction)
    "document_causal_mask": [
        ("mask_transposed", "document_boundary_off_by_one"),
        ("mask_diagonal_excluded", "mask_causal_only"),
    ],
    # where each row's count goes on (the first new position), and the new_tokens positions after it
    "decode_position_ids": [
        ("decode_offset_shared", "new_tokens_ignored"),
        ("padding_side_per_batch", "new_tokens_ignored"),
    ],
    # which tokens are kept, and how the kept ones are numbered
    "streaming_positions": [("sinks_dropped", "positions_not_cache_slots")],
    # the rotation (one call, against RoPE) and the counting (a prompt then steps, against the module's own one call)
    "RopeKVCache": [
        ("rope_interleaved_convention", "decode_at_position_zero"),
        ("wrong_base", "cache_keys_unrotated"),
    ],
}
ONE_ASPECT = {
    "position_ids_from_mask": "position_offset, mask_ignored, left_padding_only, batch_seq_confusion and "
    "padding_side_per_batch are answers to the one question 'how many real tokens come before this one': the pads' values, "
    "the other aspect, have no catalogue mistake (pad_position_out_of_range is a probe of its own); squeezed_size_one "
    "is met only on the masks with an axis of size 1, probed after the others, so values wrong elsewhere are named first",
    "packed_position_ids": "its mistakes are all ways of finding each document's first token (none, one late or early, "
    "counted from 1): one subtraction per token",
}


# Review of 2026-11-27 (chapter 08): a mask that sees the next token, and ring-buffer slots for positions.


def mask_tril_one(seq_lens):
    """`tril(1)` for `tril()`: the diagonal above the main one kept too."""
    S = int(seq_lens.sum())
    document = torch.repeat_interleave(torch.arange(len(seq_lens), device=seq_lens.device), seq_lens)
    causal = torch.ones(S, S, dtype=torch.bool, device=seq_lens.device).tril(1)
    return (document[:, None] == document[None, :]) & causal


def mask_one_ahead(seq_lens):
    """Document ids read off the ends, and `j <= i + 1` written for the causal part."""
    S = int(seq_lens.sum())
    ends = seq_lens.cumsum(0)
    i = torch.arange(S, device=seq_lens.device)
    document = (i[:, None] >= ends[None, :]).sum(-1)
    return (document[:, None] == document[None, :]) & (i[None, :] <= i[:, None] + 1)


def stream_ring_slots(seq_len, n_sink, window):
    """A rolling cache's write slots, `kept % K`, returned as the positions."""
    tokens = torch.arange(seq_len)
    kept = tokens if seq_len <= n_sink + window else torch.cat([tokens[:n_sink], tokens[seq_len - window :]])
    return kept, kept % (n_sink + window)


def stream_window_ring(seq_len, n_sink, window):
    """The sinks in slots 0 .. n_sink - 1, then a ring over the window (as a static cache writes it)."""
    if seq_len <= n_sink + window:
        return torch.arange(seq_len), torch.arange(seq_len)
    kept = torch.cat([torch.arange(n_sink), torch.arange(seq_len - window, seq_len)])
    return kept, torch.cat([kept[:n_sink], n_sink + (kept[n_sink:] - n_sink) % window])


WRONG += [
    ("document_causal_mask", "mask_sees_next_token", mask_tril_one),
    ("document_causal_mask", "mask_sees_next_token", mask_one_ahead),
    ("streaming_positions", "positions_ring_buffer_slots", stream_ring_slots),
    ("streaming_positions", "positions_ring_buffer_slots", stream_window_ring),
]
