"""Chapter 02 submissions, written as students write them.

RIGHT: different correct implementations; every one must pass.
WRONG: (exercise id, the diagnosis it must get, the code); each is a real
mistake, and the check must name exactly that code.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

# --- right: ScaledEmbedding --------------------------------------------------


class ScaledEmbeddingPlain(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, ids):
        return self.emb(ids) * math.sqrt(self.d_model)


class ScaledEmbeddingSubclass(nn.Embedding):
    """Inherits the table; scales with a power instead of math.sqrt."""

    def forward(self, ids):
        return super().forward(ids) * self.embedding_dim**0.5


class ScaledEmbeddingOwnTable(nn.Module):
    """Its own Parameter, a small (tensor2tensor-like) init, indexing and a 0-dim tensor scale."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab_size, d_model) * d_model**-0.5)
        self.scale = torch.sqrt(torch.tensor(float(d_model)))

    def forward(self, ids):
        return self.table[ids] * self.scale


class ScaledEmbeddingBufferScale(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.register_buffer("scale", torch.tensor(d_model, dtype=torch.float32).sqrt())

    def forward(self, x):
        return F.embedding(x, self.lut.weight) * self.scale


class ScaledEmbeddingFloat64Math(nn.Module):
    """Scales in float64, hands back float32."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, ids):
        d = self.embedding.weight.shape[1]
        return (self.embedding(ids).double() * math.sqrt(d)).float()


# --- right: TiedLMHead -------------------------------------------------------


class TiedHeadFLinear(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = embedding.weight

    def forward(self, h):
        return F.linear(h, self.weight)


class TiedHeadLinearModule(nn.Module):
    """The usual way: a bias-free nn.Linear whose weight is replaced by the embedding's."""

    def __init__(self, embedding):
        super().__init__()
        vocab_size, d_model = embedding.weight.shape
        self.proj = nn.Linear(d_model, vocab_size, bias=False)
        self.proj.weight = embedding.weight

    def forward(self, h):
        return self.proj(h)


class TiedHeadKeepsEmbedding(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    def forward(self, hidden):
        return hidden @ self.embedding.weight.t()


class TiedHeadLinearSubclass(nn.Linear):
    def __init__(self, embedding: nn.Embedding):
        super().__init__(embedding.embedding_dim, embedding.num_embeddings, bias=False)
        self.weight = embedding.weight


class TiedHeadEinsum(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.shared = embedding.weight

    def forward(self, h):
        return torch.einsum("...d,vd->...v", h, self.shared)


RIGHT = {
    "ScaledEmbedding": [
        ScaledEmbeddingPlain,
        ScaledEmbeddingSubclass,
        ScaledEmbeddingOwnTable,
        ScaledEmbeddingBufferScale,
        ScaledEmbeddingFloat64Math,
    ],
    "TiedLMHead": [
        TiedHeadFLinear,
        TiedHeadLinearModule,
        TiedHeadKeepsEmbedding,
        TiedHeadLinearSubclass,
        TiedHeadEinsum,
    ],
}

# --- wrong: ScaledEmbedding --------------------------------------------------


class NoScale(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)

    def forward(self, ids):
        return self.emb(ids)


class ScaledAtInit(nn.Module):
    """Scales the table once, in __init__: the optimizer then trains the scaled table."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        with torch.no_grad():
            self.emb.weight.mul_(math.sqrt(d_model))

    def forward(self, ids):
        return self.emb(ids)


class DividesByScale(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids) / math.sqrt(self.d_model)


class NegativePower(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids) * self.d_model**-0.5


class TimesDModel(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids) * self.d_model


class SqrtVocab(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)

    def forward(self, ids):
        return self.emb(ids) * math.sqrt(self.emb.weight.shape[0])  # shape[0] is the vocabulary


class SqrtHalfD(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids) * math.sqrt(self.d_model / 2)


class LogD(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids) * math.log(self.d_model)


class IntegerSqrt(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids) * int(math.sqrt(self.d_model))


class RoundedSqrt(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids) * round(math.sqrt(self.d_model), 2)


class SwappedSizes(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(d_model, vocab_size)
        self.d_model = d_model

    def forward(self, ids):
        return self.emb(ids) * math.sqrt(self.d_model)


class Float64Table(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model, dtype=torch.float64)
        self.d_model = d_model

    def forward(self, ids):
        return self.emb(ids) * math.sqrt(self.d_model)


class DetachedOutput(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids).detach() * math.sqrt(self.d_model)


class FrozenTable(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding.from_pretrained(torch.randn(vocab_size, d_model))  # freeze=True by default
        self.d_model = d_model

    def forward(self, ids):
        return self.emb(ids) * math.sqrt(self.d_model)


class TableAsBuffer(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.register_buffer("table", torch.randn(vocab_size, d_model))

    def forward(self, ids):
        return self.table[ids] * math.sqrt(self.table.shape[1])


class ScaleMadeOnCpu(ScaledEmbeddingPlain):
    def forward(self, ids):
        scale = torch.tensor([self.d_model]).sqrt()  # shape (1,), always on the CPU
        return self.emb(ids) * scale


class FloatIds(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids.float()) * math.sqrt(self.d_model)


class TransposesIdsInPlace(ScaledEmbeddingPlain):
    def forward(self, ids):
        ids.transpose_(0, 1)  # (T, B): sequence first, as in the paper's code
        return self.emb(ids).transpose(0, 1) * math.sqrt(self.d_model)


class ReturnsTuple(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids), math.sqrt(self.d_model)


class StubEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        raise NotImplementedError("your code here")

    def forward(self, ids):
        raise NotImplementedError("your code here")


class SpinsInForward(ScaledEmbeddingPlain):
    def forward(self, ids):
        while True:
            pass


class DividesByPadCount(ScaledEmbeddingPlain):
    def forward(self, ids):
        n_pad = (ids < 0).sum()  # never any: a division by zero
        return self.emb(ids) * math.sqrt(self.d_model) / n_pad


class SetsDefaultDtype(ScaledEmbeddingPlain):
    def __init__(self, vocab_size, d_model):
        torch.set_default_dtype(torch.float64)
        super().__init__(vocab_size, d_model)


class OneHotOfEverything(ScaledEmbeddingPlain):
    def forward(self, ids):
        torch.zeros(10**6, 10**6)
        return self.emb(ids) * math.sqrt(self.d_model)


# --- wrong: TiedLMHead -------------------------------------------------------


class CopiedIntoLinear(nn.Module):
    """nn.Linear with the embedding's values copied in: two matrices (and a bias)."""

    def __init__(self, embedding):
        super().__init__()
        vocab_size, d_model = embedding.weight.shape
        self.proj = nn.Linear(d_model, vocab_size)
        self.proj.weight.data.copy_(embedding.weight.data)

    def forward(self, h):
        return self.proj(h)


class ClonedParameter(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = nn.Parameter(embedding.weight.clone())

    def forward(self, h):
        return h @ self.weight.T


class WrappedInNewParameter(nn.Module):
    """nn.Parameter(p) shares p's storage but is a new Parameter: gradients go to it, not to p."""

    def __init__(self, embedding):
        super().__init__()
        self.weight = nn.Parameter(embedding.weight)

    def forward(self, h):
        return F.linear(h, self.weight)


class DataAttribute(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = embedding.weight.data

    def forward(self, h):
        return h @ self.weight.T


class RegisteredButUsesSnapshot(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = embedding.weight
        self.register_buffer("frozen", embedding.weight.detach().clone())

    def forward(self, h):
        return h @ self.frozen.T


class LeftoverDecoder(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = embedding.weight
        self.decoder = nn.Linear(embedding.embedding_dim, embedding.num_embeddings, bias=False)  # never used

    def forward(self, h):
        return F.linear(h, self.weight)


class TiedLinearWithBias(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        vocab_size, d_model = embedding.weight.shape
        self.proj = nn.Linear(d_model, vocab_size)  # bias=True by default
        self.proj.weight = embedding.weight

    def forward(self, h):
        return self.proj(h)


class ZeroBias(TiedHeadFLinear):
    def __init__(self, embedding):
        super().__init__(embedding)
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))

    def forward(self, h):
        return F.linear(h, self.weight, self.bias)


class Softmaxed(TiedHeadFLinear):
    def forward(self, h):
        return F.softmax(h @ self.weight.T, dim=-1)


class LogSoftmaxed(TiedHeadFLinear):
    def forward(self, h):
        return torch.log_softmax(F.linear(h, self.weight), dim=-1)


class NotTransposed(TiedHeadFLinear):
    def forward(self, h):
        return h @ self.weight


class VocabFirst(TiedHeadFLinear):
    def forward(self, h):
        return self.weight @ h.transpose(-1, -2)  # (V, d) @ (B, d, T) -> (B, V, T)


class TiedTheOtherWay(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.proj = nn.Linear(embedding.embedding_dim, embedding.num_embeddings, bias=False)
        embedding.weight = self.proj.weight

    def forward(self, h):
        return self.proj(h)


class ReinitialisesEmbedding(TiedHeadFLinear):
    def __init__(self, embedding):
        super().__init__(embedding)
        nn.init.normal_(self.weight, std=0.02)


class RescalesHiddenInPlace(TiedHeadFLinear):
    def forward(self, h):
        h *= h.shape[-1] ** -0.5  # T5-style rescaling, done in place
        return F.linear(h, self.weight)


class RescalesLogits(TiedHeadFLinear):
    def forward(self, h):
        return F.linear(h, self.weight) / math.sqrt(self.weight.shape[1])


class NoGradHead(TiedHeadFLinear):
    def forward(self, h):
        with torch.no_grad():
            return h @ self.weight.T


class DetachedWeight(TiedHeadFLinear):
    def forward(self, h):
        return F.linear(h, self.weight.detach())


class LogitsBufferOnCpu(TiedHeadFLinear):
    def forward(self, h):
        logits = torch.zeros(*h.shape[:-1], self.weight.shape[0])  # no device=: always the CPU
        return logits + h @ self.weight.T


class ReturnsLogitsAndProbs(TiedHeadFLinear):
    def forward(self, h):
        logits = F.linear(h, self.weight)
        return logits, logits.softmax(-1)


class AsksForVocabSize(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = embedding.weight
        self.vocab_size = embedding.vocab_size  # nn.Embedding calls it num_embeddings

    def forward(self, h):
        return F.linear(h, self.weight)


class StubHead(nn.Module):
    def __init__(self, embedding):
        super().__init__()

    def forward(self, h):
        raise NotImplementedError("your code here")


class SpinsInInit(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        while True:
            pass


WRONG = [
    ("ScaledEmbedding", "missing_scale", NoScale),
    ("ScaledEmbedding", "missing_scale", ScaledAtInit),
    ("ScaledEmbedding", "divided_by_scale", DividesByScale),
    ("ScaledEmbedding", "divided_by_scale", NegativePower),
    ("ScaledEmbedding", "wrong_scale", TimesDModel),
    ("ScaledEmbedding", "wrong_scale", SqrtVocab),
    ("ScaledEmbedding", "wrong_scale", SqrtHalfD),
    ("ScaledEmbedding", "wrong_scale", LogD),
    ("ScaledEmbedding", "wrong_scale", IntegerSqrt),
    ("ScaledEmbedding", "wrong_scale", RoundedSqrt),
    ("ScaledEmbedding", "wrong_shape", SwappedSizes),
    ("ScaledEmbedding", "wrong_dtype", Float64Table),
    ("ScaledEmbedding", "no_gradient", DetachedOutput),
    ("ScaledEmbedding", "no_gradient", FrozenTable),
    ("ScaledEmbedding", "no_gradient", TableAsBuffer),
    ("ScaledEmbedding", "wrong_device", ScaleMadeOnCpu),
    ("ScaledEmbedding", "raised", FloatIds),
    ("ScaledEmbedding", "mutated_input", TransposesIdsInPlace),
    ("ScaledEmbedding", "wrong_type", ReturnsTuple),
    ("ScaledEmbedding", "not_implemented", StubEmbedding),
    ("ScaledEmbedding", "timeout", SpinsInForward),
    ("ScaledEmbedding", "nan_or_inf", DividesByPadCount),
    ("ScaledEmbedding", "changed_global_state", SetsDefaultDtype),
    ("ScaledEmbedding", "out_of_memory", OneHotOfEverything),
    ("TiedLMHead", "copy_not_tied", CopiedIntoLinear),
    ("TiedLMHead", "copy_not_tied", ClonedParameter),
    ("TiedLMHead", "copy_not_tied", WrappedInNewParameter),
    ("TiedLMHead", "copy_not_tied", DataAttribute),
    ("TiedLMHead", "copy_not_tied", RegisteredButUsesSnapshot),
    ("TiedLMHead", "copy_not_tied", LeftoverDecoder),
    ("TiedLMHead", "has_bias", TiedLinearWithBias),
    ("TiedLMHead", "has_bias", ZeroBias),
    ("TiedLMHead", "returns_probabilities", Softmaxed),
    ("TiedLMHead", "returns_probabilities", LogSoftmaxed),
    ("TiedLMHead", "wrong_shape", NotTransposed),
    ("TiedLMHead", "wrong_shape", VocabFirst),
    ("TiedLMHead", "mutated_input", TiedTheOtherWay),
    ("TiedLMHead", "mutated_input", ReinitialisesEmbedding),
    ("TiedLMHead", "mutated_input", RescalesHiddenInPlace),
    ("TiedLMHead", "wrong_values", RescalesLogits),
    ("TiedLMHead", "no_gradient", NoGradHead),
    ("TiedLMHead", "no_gradient", DetachedWeight),
    ("TiedLMHead", "wrong_device", LogitsBufferOnCpu),
    ("TiedLMHead", "wrong_type", ReturnsLogitsAndProbs),
    ("TiedLMHead", "raised", AsksForVocabSize),
    ("TiedLMHead", "not_implemented", StubHead),
    ("TiedLMHead", "timeout", SpinsInInit),
]


# --- issue 13: code nobody here wrote, and two mistakes at once ----------------------


class ScaledEmbeddingFairseq(nn.Module):
    """fairseq's TransformerEncoder: embed_scale a float, computed once (without fairseq's
    padding_idx=1: this exercise trains every row, see ScaledEmbeddingFairseqPadding)."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.embed_scale = math.sqrt(d_model)

    def forward(self, src_tokens):
        return self.embed_scale * self.embed_tokens(src_tokens)


class ScaledEmbeddingOneHotLinear(nn.Module):
    """A one-hot through F.linear against the scaled transposed table."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model))
        self.d_model = d_model

    def forward(self, ids):
        one_hot = F.one_hot(ids, self.weight.shape[0]).to(self.weight.dtype)
        return F.linear(one_hot, self.weight.T * math.sqrt(self.d_model))


class TiedHeadFloat64(TiedHeadFLinear):
    """Computes in float64, hands back float32."""

    def forward(self, h):
        return (h.double() @ self.weight.double().T).float()


class TiedHeadRowByRow(TiedHeadFLinear):
    """A loop over the vocabulary: one dot product per token's row."""

    def forward(self, h):
        return torch.stack([h @ row for row in self.weight], dim=-1)


RIGHT["ScaledEmbedding"] += [ScaledEmbeddingFairseq, ScaledEmbeddingOneHotLinear]
RIGHT["TiedLMHead"] += [TiedHeadFloat64, TiedHeadRowByRow]


class ScaleVectorAttribute(nn.Module):
    """A (1,) scale in a plain attribute: .to(device) leaves it on the CPU."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.scale = torch.tensor([math.sqrt(d_model)])

    def forward(self, ids):
        return self.emb(ids) * self.scale


class OneHotOnCpuScaled(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model))
        self.d_model = d_model

    def forward(self, ids):
        one_hot = torch.zeros(*ids.shape, self.weight.shape[0])  # no device=
        one_hot.scatter_(-1, ids.unsqueeze(-1), 1.0)
        return one_hot @ self.weight * math.sqrt(self.d_model)


class BufferTableTimesD(nn.Module):
    """Two mistakes: the table a buffer, and d_model for its square root."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.register_buffer("table", torch.randn(vocab_size, d_model))
        self.d_model = d_model

    def forward(self, ids):
        return self.table[ids] * self.d_model


class FrozenUnscaled(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.emb.weight.requires_grad_(False)

    def forward(self, ids):
        return self.emb(ids)


class DModelScaleOnCpu(ScaledEmbeddingPlain):
    def forward(self, ids):
        return self.emb(ids) * torch.tensor([float(self.d_model)])  # d, not sqrt(d); (1,) on the CPU


class LMHeadDataShared(nn.Module):
    """nanoGPT's lm_head, with `.data` where the tie should be: two Parameters over one storage."""

    def __init__(self, embedding):
        super().__init__()
        vocab_size, d_model = embedding.weight.shape
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight.data = embedding.weight.data

    def forward(self, h):
        return self.lm_head(h)


class ClonedThenSoftmax(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.weight = nn.Parameter(embedding.weight.clone())

    def forward(self, h):
        return (h @ self.weight.T).softmax(-1)


class BiasedSoftmax(TiedHeadFLinear):
    def __init__(self, embedding):
        super().__init__(embedding)
        self.bias = nn.Parameter(torch.randn(embedding.num_embeddings))

    def forward(self, h):
        return F.linear(h, self.weight, self.bias).softmax(-1)


class BertPredictionDecoder(nn.Module):
    """HF's BertLMPredictionHead: a bias-free decoder tied to the embedding, plus its own bias."""

    def __init__(self, embedding):
        super().__init__()
        vocab_size, d_model = embedding.weight.shape
        self.decoder = nn.Linear(d_model, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.decoder.bias = self.bias
        self.decoder.weight = embedding.weight

    def forward(self, h):
        return self.decoder(h)


class BiasVectorOnCpu(nn.Module):
    """A zero bias kept in a plain attribute: right values, but on the CPU whatever the device."""

    def __init__(self, embedding):
        super().__init__()
        self.weight = embedding.weight
        self.bias = torch.zeros(embedding.num_embeddings)

    def forward(self, h):
        return F.linear(h, self.weight, self.bias)


class FairseqCopiedLogSoftmax(nn.Module):
    """fairseq-like output projection with a copied weight, a bias, and get_normalized_probs inside."""

    def __init__(self, embedding):
        super().__init__()
        vocab_size, d_model = embedding.weight.shape
        self.output_projection = nn.Linear(d_model, vocab_size)
        self.output_projection.weight.data.copy_(embedding.weight.data)

    def forward(self, h):
        return F.log_softmax(self.output_projection(h), dim=-1)


WRONG += [
    ("ScaledEmbedding", "wrong_device", ScaleVectorAttribute),
    ("ScaledEmbedding", "wrong_device", OneHotOnCpuScaled),
    ("ScaledEmbedding", "wrong_scale", BufferTableTimesD),
    ("ScaledEmbedding", "missing_scale", FrozenUnscaled),
    ("ScaledEmbedding", "wrong_scale", DModelScaleOnCpu),
    ("TiedLMHead", "copy_not_tied", LMHeadDataShared),
    ("TiedLMHead", "copy_not_tied", ClonedThenSoftmax),
    ("TiedLMHead", "returns_probabilities", BiasedSoftmax),
    ("TiedLMHead", "has_bias", BertPredictionDecoder),
    ("TiedLMHead", "wrong_device", BiasVectorOnCpu),
    ("TiedLMHead", "copy_not_tied", FairseqCopiedLogSoftmax),
]

# (exercise, diagnosis, a further finding in result.also, the code)
ALSO = [
    ("ScaledEmbedding", "wrong_scale", "no_gradient", BufferTableTimesD),
    ("ScaledEmbedding", "missing_scale", "no_gradient", FrozenUnscaled),
    ("ScaledEmbedding", "wrong_scale", "wrong_device", DModelScaleOnCpu),
    ("TiedLMHead", "copy_not_tied", "has_bias", CopiedIntoLinear),
    ("TiedLMHead", "copy_not_tied", "returns_probabilities", ClonedThenSoftmax),
    ("TiedLMHead", "returns_probabilities", "has_bias", BiasedSoftmax),
    ("TiedLMHead", "copy_not_tied", "has_bias", FairseqCopiedLogSoftmax),
    ("TiedLMHead", "copy_not_tied", "returns_probabilities", FairseqCopiedLogSoftmax),
]


# --- issue 16: rows that never train, found by gradient probes that use every row -------------


class ScaledEmbeddingPadZero(ScaledEmbeddingPlain):
    """A table built with padding_idx=0, as models whose pad id is 0 do: token 0 never trains."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=0)


class ScaledEmbeddingPadLast(ScaledEmbeddingPlain):
    """The pad token put last in the vocabulary: the last row never trains."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=vocab_size - 1)


class ScaledEmbeddingPadMinusOne(ScaledEmbeddingPlain):
    """padding_idx=-1, which nn.Embedding reads as the last row."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=-1)


class ScaledEmbeddingFairseqPadding(ScaledEmbeddingFairseq):
    """fairseq's own: padding_idx=1, so token 1 never trains."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.embed_tokens = nn.Embedding(vocab_size, d_model, padding_idx=1)


class ScaledEmbeddingFunctionalPad(ScaledEmbeddingOwnTable):
    """Its own Parameter, looked up with F.embedding(..., padding_idx=0)."""

    def forward(self, ids):
        return F.embedding(ids, self.table, padding_idx=0) * self.scale.to(self.table.device)


class ScaledEmbeddingDetachedPad(ScaledEmbeddingPlain):
    """Keeps the [PAD] vector fixed by detaching its rows in forward."""

    def forward(self, ids):
        rows = self.emb(ids)
        rows = torch.where((ids == 0).unsqueeze(-1), rows.detach(), rows)
        return rows * math.sqrt(self.d_model)


class ScaledEmbeddingSpecialTokensData(ScaledEmbeddingPlain):
    """The special tokens (ids below 3) looked up through .data, which cuts them off the graph."""

    def forward(self, ids):
        rows = self.emb(ids)
        special = ids < 3
        rows = rows.masked_scatter(special.unsqueeze(-1), self.emb.weight.data[ids[special]])
        return rows * math.sqrt(self.d_model)


class ScaledEmbeddingHookZeroesLastRow(ScaledEmbeddingPlain):
    """A gradient hook that zeroes the last row's gradient (an 'unknown token' kept fixed)."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.emb.weight.register_hook(lambda grad: torch.cat([grad[:-1], torch.zeros_like(grad[-1:])]))


class TiedHeadSpecialRowsDetached(TiedHeadFLinear):
    """Keeps the first four (special) tokens' rows out of training through the head."""

    def forward(self, h):
        weight = torch.cat([self.weight[:4].detach(), self.weight[4:]])
        return F.linear(h, weight)


class TiedHeadHookZeroesFirstRow(TiedHeadFLinear):
    """A hook on the shared weight that zeroes row 0's gradient."""

    def __init__(self, embedding):
        super().__init__(embedding)
        self.weight.register_hook(lambda grad: torch.cat([torch.zeros_like(grad[:1]), grad[1:]]))


WRONG += [
    ("ScaledEmbedding", "frozen_rows", ScaledEmbeddingPadZero),
    ("ScaledEmbedding", "frozen_rows", ScaledEmbeddingPadLast),
    ("ScaledEmbedding", "frozen_rows", ScaledEmbeddingPadMinusOne),
    ("ScaledEmbedding", "frozen_rows", ScaledEmbeddingFairseqPadding),
    ("ScaledEmbedding", "frozen_rows", ScaledEmbeddingFunctionalPad),
    ("ScaledEmbedding", "frozen_rows", ScaledEmbeddingDetachedPad),
    ("ScaledEmbedding", "frozen_rows", ScaledEmbeddingSpecialTokensData),
    ("ScaledEmbedding", "frozen_rows", ScaledEmbeddingHookZeroesLastRow),
    ("TiedLMHead", "frozen_rows", TiedHeadSpecialRowsDetached),
    ("TiedLMHead", "frozen_rows", TiedHeadHookZeroesFirstRow),
]


class ScaledEmbeddingSparse(ScaledEmbeddingPlain):
    """nn.Embedding(sparse=True), for SparseAdam: its gradient is a sparse tensor. Right."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.emb = nn.Embedding(vocab_size, d_model, sparse=True)


RIGHT["ScaledEmbedding"] += [ScaledEmbeddingSparse]


# --- issue 22: a trainable sqrt(d) scale (right today, drifts with the first step) ----------------


class ScaleAsParameter(ScaledEmbeddingPlain):
    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d_model)))

    def forward(self, ids):
        return self.emb(ids) * self.scale


WRONG += [("ScaledEmbedding", "scale_is_parameter", ScaleAsParameter)]


# INDEPENDENT: which catalogue mistakes are independent aspects of the code (each pair made together by an ALSO
# submission); ONE_ASPECT: why an exercise's mistakes are all values of one choice. tests/test_also_wrong.py reads both.
INDEPENDENT = {
    # the Parameter shared, the bias, the softmax: three separate lines of the module
    "TiedLMHead": [
        ("copy_not_tied", "has_bias"),
        ("copy_not_tied", "returns_probabilities"),
        ("returns_probabilities", "has_bias"),
    ],
}
ONE_ASPECT = {
    "ScaledEmbedding": "missing_scale, divided_by_scale and wrong_scale are three values of the one factor the rows are multiplied by",
}


# --- issue 32: a forward pass that changes the module's own table ---------------------------


class ScaledEmbeddingMaxNorm(ScaledEmbeddingPlain):
    """nn.Embedding(max_norm=1.0) renormalises, in place, every row it looks up."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.emb = nn.Embedding(vocab_size, d_model, max_norm=1.0)


class ScaledEmbeddingClampsTable(ScaledEmbeddingPlain):
    """Keeps the table small by clamping it in place before each lookup."""

    def forward(self, ids):
        with torch.no_grad():
            self.emb.weight.clamp_(-1.0, 1.0)
        return self.emb(ids) * math.sqrt(self.d_model)


WRONG += [
    ("ScaledEmbedding", "changes_own_weights", ScaledEmbeddingMaxNorm),
    ("ScaledEmbedding", "changes_own_weights", ScaledEmbeddingClampsTable),
]


# --- issue 32: the embedding's numbers shared without the Parameter (told what really goes wrong) ------


class TransposedView(nn.Module):
    """Keeps a `.T` view of the weight in a plain attribute: the same numbers, but no Parameter of its own."""

    def __init__(self, embedding):
        super().__init__()
        with torch.no_grad():
            self.w_t = embedding.weight.T  # (d, V)

    def forward(self, h):
        return h @ self.w_t


class WeightAsBuffer(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.register_buffer("w", embedding.weight)

    def forward(self, h):
        return F.linear(h, self.w)


WRONG += [("TiedLMHead", "copy_not_tied", TransposedView), ("TiedLMHead", "copy_not_tied", WeightAsBuffer)]


# --- issue 41: the contract's axes (helpers/contracts.py) -------------------------------


class ScaledEmbeddingSqueezed(ScaledEmbeddingPlain):
    """A .squeeze() "to tidy the shape": a batch of one loses its batch axis."""

    def forward(self, ids):
        return (self.emb(ids) * math.sqrt(self.d_model)).squeeze()


class TiedHeadSqueezesBatch(TiedHeadFLinear):
    def forward(self, h):
        return F.linear(h, self.weight).squeeze(0)


class TiedHeadFlattensWithView(TiedHeadFLinear):
    """Flattens the positions with .view, as many LM heads do: a transposed h is refused."""

    def forward(self, h):
        logits = h.view(-1, h.shape[-1]) @ self.weight.T
        return logits.view(*h.shape[:-1], -1)


class ScaledEmbeddingViewsIds(ScaledEmbeddingPlain):
    def forward(self, ids):
        rows = self.emb(ids.view(-1)) * math.sqrt(self.d_model)
        return rows.view(*ids.shape, -1)


WRONG += [
    ("ScaledEmbedding", "squeezed_size_one", ScaledEmbeddingSqueezed),
    ("TiedLMHead", "squeezed_size_one", TiedHeadSqueezesBatch),
    ("TiedLMHead", "contiguity_assumed", TiedHeadFlattensWithView),
    ("ScaledEmbedding", "contiguity_assumed", ScaledEmbeddingViewsIds),
]


# --- the blind review of 2026-11-27: messages made true ------------------------------------------------


class TiedHeadTorchMm(TiedHeadFLinear):
    """T13: torch.mm, which takes 2-D matrices only, on a (B, T, d) batch."""

    def forward(self, h):
        return torch.mm(h, self.weight.t())


class TiedHeadAddmm(TiedHeadFLinear):
    """torch.addmm with a zero bias, as a fused Linear is sometimes written: 2-D only too."""

    def forward(self, h):
        return torch.addmm(torch.zeros(self.weight.shape[0], device=h.device), h, self.weight.T)


class TiedHeadDetachedBuffer(nn.Module):
    """T14: the matrix kept as a detached buffer: no gradient reaches it through the logits."""

    def __init__(self, embedding):
        super().__init__()
        self.register_buffer("w", embedding.weight.detach())

    def forward(self, h):
        return h @ self.w.T


class ScaledEmbeddingFreqScaled(ScaledEmbeddingPlain):
    """S9: word2vec's habit, nn.Embedding(scale_grad_by_freq=True): a token's gradient is divided by its count."""

    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.emb = nn.Embedding(vocab_size, d_model, scale_grad_by_freq=True)


class ScaledEmbeddingFunctionalFreqScaled(nn.Module):
    """The same option through F.embedding, on a bare Parameter."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model) / math.sqrt(d_model))

    def forward(self, ids):
        return F.embedding(ids, self.weight, scale_grad_by_freq=True) * self.weight.shape[1] ** 0.5


WRONG += [
    ("ScaledEmbedding", "grad_scaled_by_frequency", ScaledEmbeddingFreqScaled),
    ("ScaledEmbedding", "grad_scaled_by_frequency", ScaledEmbeddingFunctionalFreqScaled),
    ("TiedLMHead", "raised", TiedHeadTorchMm),
    ("TiedLMHead", "raised", TiedHeadAddmm),
    ("TiedLMHead", "copy_not_tied", TiedHeadDetachedBuffer),
]
