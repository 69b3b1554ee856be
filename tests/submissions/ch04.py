"""Chapter 04 submissions, written as students write them.

RIGHT: different correct implementations; every one must pass.
WRONG: (exercise id, the diagnosis it must get, the code); each is a real
mistake, and the check must name exactly that code.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# --- LearnedPositionalEmbedding: right ---------------------------------------


class LearnedEmbeddingLookup(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.pos = nn.Embedding(max_len, d_model)

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return x + self.pos(torch.arange(T, device=x.device))


class LearnedParameterSlice(nn.Module):
    """GPT-2 style: a bare Parameter, sliced."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.wpe = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x):
        B, T, C = x.shape
        if T > self.wpe.shape[0]:
            raise ValueError(f"Cannot forward sequence of length {T}, max_len is only {self.wpe.shape[0]}")
        return x + self.wpe[:T].unsqueeze(0)


class LearnedBufferIds(nn.Module):
    """HF style: position ids kept in a non-persistent buffer, zero-initialised table."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.position_embeddings = nn.Embedding(max_len, d_model)
        nn.init.zeros_(self.position_embeddings.weight)
        self.register_buffer("position_ids", torch.arange(max_len).expand(1, -1), persistent=False)

    def forward(self, x):
        seq_len = x.shape[-2]
        if seq_len > self.position_ids.shape[1]:
            raise ValueError("too long")
        return x + self.position_embeddings(self.position_ids[:, :seq_len])


class LearnedArangeToDevice(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError("longer than max_len")
        positions = torch.arange(0, x.shape[1], dtype=torch.long).to(x.device).unsqueeze(0)  # (1, T)
        return x + self.table(positions)


class LearnedViTStyle(nn.Module):
    """timm/ViT style: a (1, max_len, d) Parameter, zero-initialised."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(1, max_len, d_model))

    def forward(self, x):
        if x.shape[1] > self.pos_embed.shape[1]:
            raise ValueError(f"{x.shape[1]} tokens but max_len = {self.pos_embed.shape[1]}")
        return x + self.pos_embed[:, : x.shape[1], :]


class LearnedIndexSelect(nn.Module):
    """A bare Parameter, its rows picked with index_select, the sum written with einsum's broadcasting."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.rows = nn.Parameter(torch.empty(max_len, d_model).uniform_(-0.1, 0.1))

    def forward(self, x):
        T = x.shape[1]
        if T > self.rows.shape[0]:
            raise ValueError(f"max_len is {self.rows.shape[0]}, got a sequence of {T}")
        picked = self.rows.index_select(0, torch.arange(T, device=x.device))
        return x + torch.einsum("td->td", picked)[None]


# --- LearnedPositionalEmbedding: wrong ---------------------------------------


class LearnedArangeOnCpu(LearnedEmbeddingLookup):
    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError("too long")
        positions = torch.arange(T)  # no device=: always the CPU
        return x + self.pos(positions)


class LearnedIdsInPlainAttribute(LearnedEmbeddingLookup):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.ids = torch.arange(max_len)  # not a buffer: stays on the CPU

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError("too long")
        return x + self.pos(self.ids[:T])


class LearnedZeroIds(LearnedEmbeddingLookup):
    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError("too long")
        return x + self.pos(torch.zeros(T, dtype=torch.long, device=x.device))


class LearnedSeqFirst(LearnedEmbeddingLookup):
    """Written for (T, B, d) inputs, as in the PyTorch tutorial."""

    def forward(self, x):
        T = x.size(0)
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.pos(torch.arange(T, device=x.device)).unsqueeze(1)


class LearnedStartsAtOne(LearnedEmbeddingLookup):
    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError("too long")
        return x + self.pos(torch.arange(1, T + 1, device=x.device))


class LearnedNoLengthCheck(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.pos = nn.Embedding(max_len, d_model)

    def forward(self, x):
        return x + self.pos(torch.arange(x.size(1), device=x.device))


class LearnedSliceNoLengthCheck(LearnedParameterSlice):
    def forward(self, x):
        return x + self.wpe[: x.size(1)]


class LearnedOffByOne(LearnedEmbeddingLookup):
    def forward(self, x):
        T = x.size(1)
        if T >= self.max_len:
            raise ValueError("too long")
        return x + self.pos(torch.arange(T, device=x.device))


class LearnedLastPositionOffByOne(LearnedEmbeddingLookup):
    # the last position T - 1 compared with `>`: T = max_len + 1 reaches the lookup
    def forward(self, x):
        T = x.size(1)
        if T - 1 > self.max_len:
            raise ValueError(f"sequence length {T} is past max_len={self.max_len}")
        return x + self.pos(torch.arange(T, device=x.device))


class LearnedBufferTable(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.register_buffer("table", torch.randn(max_len, d_model))

    def forward(self, x):
        if x.size(1) > self.table.size(0):
            raise ValueError("too long")
        return x + self.table[: x.size(1)]


class LearnedFrozen(LearnedEmbeddingLookup):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.pos.weight.requires_grad_(False)


class LearnedPlainTensorTable(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = torch.randn(max_len, d_model)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        return x + self.table[: x.size(1)].to(x.device)


class LearnedDetached(LearnedEmbeddingLookup):
    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError("too long")
        return x + self.pos.weight[:T].detach()


class LearnedWithDropout(LearnedEmbeddingLookup):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(super().forward(x))


class LearnedReturnsPositionsOnly(LearnedEmbeddingLookup):
    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError("too long")
        return self.pos(torch.arange(T, device=x.device))


class LearnedBufferNoLengthCheck(nn.Module):
    """Two mistakes: the table a buffer, and no length check."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.register_buffer("table", torch.randn(max_len, d_model) * 0.02)

    def forward(self, x):
        return x + self.table[: x.size(1)]


class LearnedCpuIdsNoLengthCheck(nn.Module):
    """Two mistakes: no length check, and the position ids made on the CPU."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.pos = nn.Embedding(max_len, d_model)

    def forward(self, x):
        return x + self.pos(torch.arange(x.size(1)))


class LearnedFrozenWithDropout(LearnedEmbeddingLookup):
    """Two mistakes: the table frozen, and a dropout this module does not have."""

    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.pos.weight.requires_grad_(False)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(super().forward(x))


class LearnedStub(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        raise NotImplementedError("your code here")

    def forward(self, x):
        raise NotImplementedError("your code here")


# --- BertEmbeddings: right ---------------------------------------------------


class BertPlain(nn.Module):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


class BertHFStyle(nn.Module):
    """As transformers writes it: non-persistent id buffers, words + types, then + positions."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(max_position_embeddings).expand((1, -1)), persistent=False)
        self.register_buffer(
            "token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long), persistent=False
        )

    def forward(self, input_ids, token_type_ids=None):
        batch_size, seq_length = input_ids.size()
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :seq_length].expand(batch_size, seq_length)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class HandLayerNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class BertHandWritten(nn.Module):
    """A hand-written LayerNorm, F.dropout, sliced tables (no position ids at all)."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = HandLayerNorm(hidden_size, layer_norm_eps)
        self.p = hidden_dropout_prob

    def forward(self, input_ids, token_type_ids=None):
        B, T = input_ids.shape
        types = input_ids.new_zeros(B, T) if token_type_ids is None else token_type_ids
        words = self.word_embeddings(input_ids)  # (B, T, d)
        positions = self.position_embeddings.weight[:T]  # (T, d)
        segments = self.token_type_embeddings.weight[types]  # (B, T, d)
        h = self.LayerNorm(words + positions + segments)
        return F.dropout(h, self.p, training=self.training)


class BertIndexSelect(BertPlain):
    """Position and segment rows picked with index_select (the words through the module: its padding_idx
    keeps [PAD]'s gradient at zero, which index_select on the weight would not), segments from new_zeros."""

    def forward(self, input_ids, token_type_ids=None):
        B, T = input_ids.shape
        types = input_ids.new_zeros(B, T) if token_type_ids is None else token_type_ids
        pick = lambda table, ids: table.weight.index_select(0, ids.reshape(-1)).view(*ids.shape, -1)
        positions = pick(self.position_embeddings, torch.arange(T, device=input_ids.device))
        x = self.word_embeddings(input_ids) + positions + pick(self.token_type_embeddings, types)
        return self.dropout(self.LayerNorm(x))


# --- BertEmbeddings: wrong ---------------------------------------------------


class BertDefaultEps(BertPlain):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.LayerNorm = nn.LayerNorm(hidden_size)  # eps 1e-5


class BertHardcodedEps(BertPlain):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)  # ignores layer_norm_eps


class BertNoTokenTypeTable(nn.Module):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions)))


class BertIgnoresTokenTypes(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        return super().forward(input_ids, None)


class BertNoLayerNormModule(nn.Module):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )


class BertForgetsToNormalise(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )


class BertNormalisesWordsOnly(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.LayerNorm(self.word_embeddings(input_ids))
        return self.dropout(x + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids))


class BertDropoutBeforeNorm(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.LayerNorm(self.dropout(x))


class BertOwnNames(nn.Module):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.pos = nn.Embedding(max_position_embeddings, hidden_size)
        self.seg = nn.Embedding(type_vocab_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.drop = nn.Dropout(hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.drop(self.norm(self.tok(input_ids) + self.pos(positions) + self.seg(token_type_ids)))


class BertSnakeCaseLayerNorm(BertPlain):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        del self.LayerNorm
        self.layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(
            self.layer_norm(
                self.word_embeddings(input_ids)
                + self.position_embeddings(positions)
                + self.token_type_embeddings(token_type_ids)
            )
        )


class BertTwoSegmentsAlways(BertPlain):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.token_type_embeddings = nn.Embedding(2, hidden_size)  # ignores type_vocab_size


class BertNoAffineNorm(BertPlain):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps, elementwise_affine=False)


class BertUnbiasedVariance(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        x = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + self.LayerNorm.eps)
        return self.dropout(x * self.LayerNorm.weight + self.LayerNorm.bias)


class BertScaledWords(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        words = self.word_embeddings(input_ids) * math.sqrt(self.word_embeddings.embedding_dim)
        return self.dropout(
            self.LayerNorm(words + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids))
        )


class BertFixedDropout(BertPlain):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.dropout = nn.Dropout(0.1)


class BertNoDropout(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.LayerNorm(
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )


class BertFunctionalDropoutAlwaysOn(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return F.dropout(self.LayerNorm(x), p=self.dropout.p)  # training=True by default


class BertNoPaddingIdx(BertPlain):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)


class BertArangeOnCpu(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1])
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


class BertTypesOnCpu(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros(input_ids.shape, dtype=torch.long)
        return super().forward(input_ids, token_type_ids)


class BertPositionsFromOne(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(1, input_ids.shape[1] + 1, device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


class BertPositionZero(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings.weight[0]
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


class BertBatchAsPositions(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.size(0), device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions).unsqueeze(1)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


class BertNoneCrashes(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


class BertSwappedTables(BertPlain):
    """Positions looked up in the segment table: an index past its rows (on CUDA, a device-side assert)."""

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.token_type_embeddings(positions)
            + self.position_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


class BertReturnsTuple(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        return (super().forward(input_ids, token_type_ids),)


class BertStub(nn.Module):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        raise NotImplementedError("your code here")

    def forward(self, input_ids, token_type_ids=None):
        raise NotImplementedError("your code here")


RIGHT = {
    "LearnedPositionalEmbedding": [
        LearnedEmbeddingLookup,
        LearnedParameterSlice,
        LearnedBufferIds,
        LearnedArangeToDevice,
        LearnedViTStyle,
        LearnedIndexSelect,
    ],
    "BertEmbeddings": [BertPlain, BertHFStyle, BertHandWritten, BertIndexSelect],
}

WRONG = [
    ("LearnedPositionalEmbedding", "positions_on_cpu", LearnedArangeOnCpu),
    ("LearnedPositionalEmbedding", "positions_on_cpu", LearnedIdsInPlainAttribute),
    ("LearnedPositionalEmbedding", "same_row_every_position", LearnedZeroIds),
    ("LearnedPositionalEmbedding", "batch_seq_confusion", LearnedSeqFirst),
    ("LearnedPositionalEmbedding", "position_offset", LearnedStartsAtOne),
    ("LearnedPositionalEmbedding", "no_length_check", LearnedNoLengthCheck),
    ("LearnedPositionalEmbedding", "no_length_check", LearnedSliceNoLengthCheck),
    ("LearnedPositionalEmbedding", "length_check_off_by_one", LearnedOffByOne),
    ("LearnedPositionalEmbedding", "length_check_off_by_one", LearnedLastPositionOffByOne),
    ("LearnedPositionalEmbedding", "positions_not_trainable", LearnedBufferTable),
    ("LearnedPositionalEmbedding", "positions_not_trainable", LearnedFrozen),
    ("LearnedPositionalEmbedding", "positions_not_trainable", LearnedPlainTensorTable),
    ("LearnedPositionalEmbedding", "positions_not_trainable", LearnedDetached),
    ("LearnedPositionalEmbedding", "unexpected_dropout", LearnedWithDropout),
    ("LearnedPositionalEmbedding", "wrong_shape", LearnedReturnsPositionsOnly),
    ("LearnedPositionalEmbedding", "not_implemented", LearnedStub),
    ("BertEmbeddings", "layernorm_eps", BertDefaultEps),
    ("BertEmbeddings", "layernorm_eps", BertHardcodedEps),
    ("BertEmbeddings", "missing_token_type", BertNoTokenTypeTable),
    ("BertEmbeddings", "missing_token_type", BertIgnoresTokenTypes),
    ("BertEmbeddings", "missing_layernorm", BertNoLayerNormModule),
    ("BertEmbeddings", "missing_layernorm", BertForgetsToNormalise),
    ("BertEmbeddings", "layernorm_order", BertNormalisesWordsOnly),
    ("BertEmbeddings", "layernorm_order", BertDropoutBeforeNorm),
    ("BertEmbeddings", "state_dict_mismatch", BertOwnNames),
    ("BertEmbeddings", "state_dict_mismatch", BertSnakeCaseLayerNorm),
    ("BertEmbeddings", "state_dict_mismatch", BertTwoSegmentsAlways),
    ("BertEmbeddings", "state_dict_mismatch", BertNoAffineNorm),
    ("BertEmbeddings", "layernorm_unbiased_var", BertUnbiasedVariance),
    ("BertEmbeddings", "unexpected_scale", BertScaledWords),
    ("BertEmbeddings", "dropout_rate_ignored", BertFixedDropout),
    ("BertEmbeddings", "missing_dropout", BertNoDropout),
    ("BertEmbeddings", "dropout_in_eval", BertFunctionalDropoutAlwaysOn),
    ("BertEmbeddings", "missing_padding_idx", BertNoPaddingIdx),
    ("BertEmbeddings", "positions_on_cpu", BertArangeOnCpu),
    ("BertEmbeddings", "positions_on_cpu", BertTypesOnCpu),
    ("BertEmbeddings", "position_offset", BertPositionsFromOne),
    ("BertEmbeddings", "same_row_every_position", BertPositionZero),
    ("BertEmbeddings", "batch_seq_confusion", BertBatchAsPositions),
    ("BertEmbeddings", "raised", BertNoneCrashes),
    ("BertEmbeddings", "raised", BertSwappedTables),
    ("BertEmbeddings", "wrong_type", BertReturnsTuple),
    ("BertEmbeddings", "not_implemented", BertStub),
    ("LearnedPositionalEmbedding", "positions_not_trainable", LearnedBufferNoLengthCheck),
    ("LearnedPositionalEmbedding", "no_length_check", LearnedCpuIdsNoLengthCheck),
    ("LearnedPositionalEmbedding", "positions_not_trainable", LearnedFrozenWithDropout),
]

# (exercise, diagnosis, a further mistake that result.also must list, the code): two mistakes, both named in one run.
ALSO = [
    ("LearnedPositionalEmbedding", "positions_not_trainable", "no_length_check", LearnedBufferNoLengthCheck),
    ("LearnedPositionalEmbedding", "no_length_check", "positions_on_cpu", LearnedCpuIdsNoLengthCheck),
    ("LearnedPositionalEmbedding", "positions_not_trainable", "unexpected_dropout", LearnedFrozenWithDropout),
]


# --- issue 16: every row trained, tables found by their role ---------------------------------------


class LearnedPaddingIdx(LearnedEmbeddingLookup):
    """padding_idx=0 on the position table: position 0 never trains."""

    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.pos = nn.Embedding(max_len, d_model, padding_idx=0)


class LearnedLastRowHooked(LearnedEmbeddingLookup):
    """A hook that zeroes the last position's gradient: only T = max_len ever reaches it."""

    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.pos.weight.register_hook(lambda grad: torch.cat([grad[:-1], torch.zeros_like(grad[-1:])]))


class LearnedFirstRowDetached(LearnedParameterSlice):
    """Position 0 (the [CLS] slot) kept fixed: its row detached in forward."""

    def forward(self, x):
        T = x.shape[1]
        if T > self.wpe.shape[0]:
            raise ValueError(f"Cannot forward sequence of length {T}, max_len is only {self.wpe.shape[0]}")
        rows = torch.cat([self.wpe[:1].detach(), self.wpe[1:T]])
        return x + rows


class LearnedOPTOffset(nn.Module):
    """OPT's learned positions: a table of max_len + 2 rows read from row 2 (the offset of its padding)."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len, self.offset = max_len, 2
        self.embed_positions = nn.Embedding(max_len + self.offset, d_model)

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return x + self.embed_positions(torch.arange(T, device=x.device) + self.offset)


class LearnedOPTOffsetPadding(LearnedOPTOffset):
    """The same, with the padding row as padding_idx, as fairseq builds it."""

    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.embed_positions = nn.Embedding(max_len + self.offset, d_model, padding_idx=1)


class LearnedSpareRows(LearnedEmbeddingLookup):
    """Four rows to spare (max_len + 4), read from row 0: right."""

    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.pos = nn.Embedding(max_len + 4, d_model)


class LearnedTransposed(nn.Module):
    """A (d_model, max_len) Parameter, column t for position t: right."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.columns = nn.Parameter(torch.randn(d_model, max_len) * 0.02)

    def forward(self, x):
        T = x.shape[1]
        if T > self.columns.shape[1]:
            raise ValueError(f"max_len is {self.columns.shape[1]}, got a sequence of {T}")
        return x + self.columns[:, :T].T


class BertSegmentPadding(BertPlain):
    """padding_idx=0 on the segment table too: sentence A's vector never trains."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size, padding_idx=0)


class BertPositionPadding(BertPlain):
    """padding_idx=pad_token_id on the position table as well as the word table."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size, padding_idx=pad_token_id)


class BertFrozenSegments(BertPlain):
    """The segment table frozen with requires_grad_(False) ('it is tiny anyway')."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.token_type_embeddings.requires_grad_(False)


class BertFrozenLayerNorm(BertPlain):
    """The LayerNorm's weight and bias frozen."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.LayerNorm.requires_grad_(False)


class BertSegmentsDetached(BertPlain):
    """The segment rows read from a detached weight: the whole table is cut off."""

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        segments = self.token_type_embeddings.weight.detach()[token_type_ids]
        return self.dropout(
            self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions) + segments)
        )


class BertSegmentADetached(BertPlain):
    """Sentence A's segment vector detached where it is used ('segment 0 is the default anyway')."""

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        segments = self.token_type_embeddings(token_type_ids)
        segments = torch.where((token_type_ids == 0).unsqueeze(-1), segments.detach(), segments)
        return self.dropout(
            self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions) + segments)
        )


class BertLastPositionHooked(BertPlain):
    """A hook that zeroes the gradient of the last position's row."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.position_embeddings.weight.register_hook(lambda grad: torch.cat([grad[:-1], torch.zeros_like(grad[-1:])]))


class BertPadIdZero(BertPlain):
    """padding_idx=0 written in, whatever pad_token_id says: [PAD] (1 here) trains and token 0 does not."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)


RIGHT["LearnedPositionalEmbedding"] += [LearnedSpareRows, LearnedTransposed]
WRONG += [
    ("LearnedPositionalEmbedding", "frozen_rows", LearnedPaddingIdx),
    ("LearnedPositionalEmbedding", "frozen_rows", LearnedLastRowHooked),
    ("LearnedPositionalEmbedding", "frozen_rows", LearnedFirstRowDetached),
    ("LearnedPositionalEmbedding", "position_offset", LearnedOPTOffset),
    ("LearnedPositionalEmbedding", "position_offset", LearnedOPTOffsetPadding),
    ("BertEmbeddings", "frozen_rows", BertSegmentPadding),
    ("BertEmbeddings", "frozen_rows", BertPositionPadding),
    ("BertEmbeddings", "frozen_rows", BertFrozenSegments),
    ("BertEmbeddings", "frozen_rows", BertFrozenLayerNorm),
    ("BertEmbeddings", "no_gradient", BertSegmentsDetached),
    ("BertEmbeddings", "frozen_rows", BertSegmentADetached),
    ("BertEmbeddings", "frozen_rows", BertLastPositionHooked),
    ("BertEmbeddings", "missing_padding_idx", BertPadIdZero),
]
ALSO += [("BertEmbeddings", "missing_padding_idx", "frozen_rows", BertPadIdZero)]


class LearnedSparse(LearnedEmbeddingLookup):
    """A sparse position table (nn.Embedding(sparse=True)): right."""

    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.pos = nn.Embedding(max_len, d_model, sparse=True)


class BertSparseWords(BertPlain):
    """A sparse word table, [PAD] still its padding_idx: right."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id, sparse=True)


RIGHT["LearnedPositionalEmbedding"] += [LearnedSparse]
RIGHT["BertEmbeddings"] += [BertSparseWords]


class LearnedSqueezesOutput(LearnedEmbeddingLookup):
    """Squeezes its output: a one-token batch loses its sequence axis."""

    def forward(self, x):
        return super().forward(x).squeeze()


class BertSqueezesIds(BertPlain):
    """Squeezes input_ids 'in case of a stray batch axis': a batch of one-token sequences breaks."""

    def forward(self, input_ids, token_type_ids=None):
        return super().forward(input_ids.squeeze(), None if token_type_ids is None else token_type_ids.squeeze())


WRONG += [
    ("LearnedPositionalEmbedding", "wrong_shape", LearnedSqueezesOutput),
    ("BertEmbeddings", "raised", BertSqueezesIds),
]


class LearnedRightAligned(LearnedEmbeddingLookup):
    """Positions counted back from the end of the table, as for left-padded batches: rows max_len - T ..."""

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return x + self.pos(torch.arange(self.max_len - T, self.max_len, device=x.device))


WRONG += [("LearnedPositionalEmbedding", "position_offset", LearnedRightAligned)]


# INDEPENDENT: which catalogue mistakes are independent aspects of the code (each pair made together by an ALSO
# submission); ONE_ASPECT: why an exercise's mistakes are all values of one choice. tests/test_also_wrong.py reads both.
INDEPENDENT = {
    # what is summed, and the LayerNorm's eps (seed 002)
    "BertEmbeddings": [("missing_token_type", "layernorm_eps")],
}
ONE_ASPECT = {
    "LearnedPositionalEmbedding": "same_row_every_position, batch_seq_confusion and position_offset are three answers to the one question "
    "'which rows of the table are added': row 0 everywhere, rows along the batch, rows from 1",
}


# --- issue 32: a forward pass that changes the module's own table ---------------------------


class LearnedMaxNorm(LearnedEmbeddingLookup):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.pos = nn.Embedding(max_len, d_model, max_norm=1.0)


WRONG += [("LearnedPositionalEmbedding", "changes_own_weights", LearnedMaxNorm)]


# --- issue 32: a module that does not load the real checkpoint strictly ----------------------


class BertPersistentPositionIds(BertHFStyle):
    """transformers before 4.31: the position ids a persistent buffer, saved with the weights."""

    def __init__(self, vocab_size, hidden_size, max_position_embeddings=512, *args, **kwargs):
        super().__init__(vocab_size, hidden_size, max_position_embeddings, *args, **kwargs)
        self.register_buffer("position_ids", torch.arange(max_position_embeddings).expand((1, -1)))


WRONG += [("BertEmbeddings", "state_dict_mismatch", BertPersistentPositionIds)]


# --- issue 41: the contract's axes (helpers/contracts.py) -------------------------------


class LearnedAddsToDetachedInput(LearnedEmbeddingLookup):
    """The table trains, but x is detached: nothing below this layer gets a gradient."""

    def forward(self, x):
        return super().forward(x.detach())


class LearnedSqueezesBatch(LearnedEmbeddingLookup):
    def forward(self, x):
        return super().forward(x).squeeze(0)


class BertNoDropoutByDefault(BertPlain):
    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.0,
        pad_token_id=0,
    ):
        super().__init__(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            layer_norm_eps,
            hidden_dropout_prob,
            pad_token_id,
        )


class BertViewsTheIds(BertPlain):
    """Looks the words up flat, with .view: ids handed over as a transposed view are refused."""

    def forward(self, input_ids, token_type_ids=None):
        B, T = input_ids.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        words = self.word_embeddings(input_ids.view(-1)).view(B, T, -1)
        positions = self.position_embeddings(torch.arange(T, device=input_ids.device))
        return self.dropout(self.LayerNorm(words + positions + self.token_type_embeddings(token_type_ids)))


WRONG += [
    ("LearnedPositionalEmbedding", "gradient_cut", LearnedAddsToDetachedInput),
    ("LearnedPositionalEmbedding", "squeezed_size_one", LearnedSqueezesBatch),
    ("BertEmbeddings", "contiguity_assumed", BertViewsTheIds),
    ("BertEmbeddings", "default_changed", BertNoDropoutByDefault),
]


# --- the blind review of 2026-11-27: messages made true ------------------------------------------------


class LearnedScalesInput(LearnedEmbeddingLookup):
    """LP8: the TensorFlow tutorial's `x *= sqrt(d_model)` before the positions are added."""

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return x * math.sqrt(self.pos.embedding_dim) + self.pos(torch.arange(T, device=x.device))


class LearnedParameterScalesInput(LearnedParameterSlice):
    """LP8, GPT-2 style: the factor written as d ** 0.5 on a sliced Parameter."""

    def forward(self, x):
        B, T, C = x.shape
        if T > self.wpe.shape[0]:
            raise ValueError(f"Cannot forward sequence of length {T}, max_len is only {self.wpe.shape[0]}")
        return x * C**0.5 + self.wpe[:T]


class LearnedWeightColumns(LearnedEmbeddingLookup):
    """P1 with a learned table: `weight[:, :T]`, the slice of a (1, max_len, d) table, on an nn.Embedding's 2-D weight."""

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        return x + self.pos.weight[:, :T]


class AnnotatedLayerNorm(nn.Module):
    """The Annotated Transformer's LayerNorm, its a_2 / b_2 renamed to load HF's weights, population std."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class BertEpsOnTheStd(BertPlain):
    """BE1: a hand-written LayerNorm with eps outside the square root."""

    def __init__(self, vocab_size, hidden_size, *args, **kwargs):
        super().__init__(vocab_size, hidden_size, *args, **kwargs)
        self.LayerNorm = AnnotatedLayerNorm(hidden_size, eps=self.LayerNorm.eps)


class BertInlineNormEpsOnTheStd(BertPlain):
    """BE1 inline: the variance's square root taken first, eps added after."""

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        centred = x - x.mean(-1, keepdim=True)
        x = centred / (centred.pow(2).mean(-1, keepdim=True).sqrt() + self.LayerNorm.eps)
        return self.dropout(x * self.LayerNorm.weight + self.LayerNorm.bias)


class BertTypesOrZeros(BertPlain):
    """BE5: `token_type_ids or ...` asks a tensor for one truth value."""

    def forward(self, input_ids, token_type_ids=None):
        token_type_ids = token_type_ids or torch.zeros_like(input_ids)
        return super().forward(input_ids, token_type_ids)


class BertTypesIfNot(BertPlain):
    def forward(self, input_ids, token_type_ids=None):
        if not token_type_ids:
            token_type_ids = torch.zeros_like(input_ids)
        return super().forward(input_ids, token_type_ids)


class BertOneHotSegments(BertPlain):
    """google-research/bert's use_one_hot_embeddings path for the segments, ported without depth=type_vocab_size:
    the one-hot is as wide as the largest segment id + 1 (1 for a single sentence)."""

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        table = self.token_type_embeddings.weight
        segments = F.one_hot(token_type_ids).to(table.dtype) @ table
        positions = self.position_embeddings(torch.arange(input_ids.shape[1], device=input_ids.device))
        return self.dropout(self.LayerNorm(self.word_embeddings(input_ids) + positions + segments))


class BertOneHotWords(BertPlain):
    """The same port for the words: `tf.one_hot(input_ids)` without depth=vocab_size."""

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        words = torch.matmul(F.one_hot(input_ids).float(), self.word_embeddings.weight)
        positions = self.position_embeddings(torch.arange(input_ids.shape[1], device=input_ids.device))
        return self.dropout(self.LayerNorm(words + positions + self.token_type_embeddings(token_type_ids)))


class BertNoPadByDefault(BertPlain):
    """A GPT-2-style config, whose vocabulary has no [PAD]: pad_token_id=None by default, so row 0 trains."""

    def __init__(self, vocab_size, hidden_size, max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12, hidden_dropout_prob=0.1, pad_token_id=None):  # fmt: skip
        super().__init__(vocab_size, hidden_size, max_position_embeddings, type_vocab_size, layer_norm_eps, hidden_dropout_prob, pad_token_id)  # fmt: skip


class BertRobertaPadDefault(nn.Module):
    """RoBERTa's config default, pad_token_id=1, in a BERT module written with keyword arguments."""

    def __init__(self, vocab_size, hidden_size, **config):
        super().__init__()
        config = {"max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1, "pad_token_id": 1, **config}  # fmt: skip
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=config["pad_token_id"])
        self.position_embeddings = nn.Embedding(config["max_position_embeddings"], hidden_size)
        self.token_type_embeddings = nn.Embedding(config["type_vocab_size"], hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=config["layer_norm_eps"])
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = self.position_embeddings(torch.arange(input_ids.size(1), device=input_ids.device))
        words, segments = self.word_embeddings(input_ids), self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(words + positions + segments))


WRONG += [
    ("BertEmbeddings", "default_changed", BertNoPadByDefault),
    ("BertEmbeddings", "default_changed", BertRobertaPadDefault),
    ("BertEmbeddings", "size_from_ids", BertOneHotSegments),
    ("BertEmbeddings", "size_from_ids", BertOneHotWords),
    ("LearnedPositionalEmbedding", "input_scaled", LearnedScalesInput),
    ("LearnedPositionalEmbedding", "input_scaled", LearnedParameterScalesInput),
    ("LearnedPositionalEmbedding", "columns_sliced", LearnedWeightColumns),
    ("BertEmbeddings", "layernorm_eps_outside_sqrt", BertEpsOnTheStd),
    ("BertEmbeddings", "layernorm_eps_outside_sqrt", BertInlineNormEpsOnTheStd),
    ("BertEmbeddings", "raised", BertTypesOrZeros),
    ("BertEmbeddings", "raised", BertTypesIfNot),
]
