"""Each exercise's check: a short list of named probes, run in order.

A check builds inputs the student did not choose (batch != seq_len != d, so a
broadcasting or transposition slip cannot hide), calls the submission through
`probe.call`, and compares with `helpers.reference`; `probe.expect` names the
mistake from `helpers.mistakes` when one reproduces the output. Property and
hygiene probes (gradients, buffers, devices) come after the values.
"""

from __future__ import annotations

import math  # noqa: F401  (used by later chapters)

import torch
import torch.nn.functional as F
from torch import nn  # noqa: F401

from helpers import mistakes, reference
from helpers.checking import Probe
from helpers.registry import Exercise, register

# Every way to get an embedding without writing one.
EMBEDDING_APIS = (F.embedding, torch.embedding, F.embedding_bag)
MATRIX_PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "mv", "einsum", "tensordot", "linear", "addmm", "baddbmm", "inner"}

# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def _check_lookup(fn, probe: Probe) -> None:
    # V != d and ids < d, so a transposed table gives a wrong shape, not an IndexError.
    weight = probe.randn(11, 7)
    ids = probe.randint(7, 3, 5)  # (B=3, T=5)
    probe.against_reference(probe.call(fn, weight, ids), weight, ids, what="the (3, 5) batch")
    # Any leading shape, the full id range, and the weight's dtype kept.
    weight = probe.randn(50, 16, dtype=torch.float64)
    ids = probe.randint(50, 2, 3, 4)
    probe.against_reference(probe.call(fn, weight, ids), weight, ids, what="a (2, 3, 4) batch of float64 rows")
    # Gradients: each row's gradient counts how often that token was used.
    weight = probe.randn(9, 4).requires_grad_()
    ids = torch.tensor([[0, 2, 2], [5, 0, 2]], device=probe.device)
    out = probe.call(fn, weight, ids)
    if not out.requires_grad:
        probe.fail("no_gradient", f"`{probe.name}`'s output is cut off from the weight's gradient (a .detach(), torch.no_grad() or a numpy round-trip?). The embedding must stay trainable.")
    out.sum().backward()
    expected = torch.zeros(9, 4, device=probe.device).index_add_(0, ids.flatten(), torch.ones(6, 4, device=probe.device))
    probe.expect(weight.grad, expected, what="the weight's gradient")
    # Device: the same call with every tensor on the meta device.
    probe.device_pass(lambda device: probe.call(fn, probe.randn(11, 7, device=device), probe.randint(11, 3, 5, device=device)))


def _check_one_hot_lookup(fn, probe: Probe) -> None:
    _check_lookup(fn, probe)
    if not {getattr(f, "__name__", "") for f in probe.calls_seen} & MATRIX_PRODUCTS:
        probe.fail("not_a_matrix_product", f"`{probe.name}` gives the right rows but never multiplies matrices: build one_hot(ids) with shape (..., V) and multiply it by the (V, d) weight with `@`.")


register(Exercise("lookup", 1, 2, "function", reference.lookup, _check_lookup, {"transposed_weight": mistakes.lookup_transposed}, EMBEDDING_APIS))
register(Exercise("one_hot_lookup", 1, 2, "function", reference.one_hot_lookup, _check_one_hot_lookup, {"transposed_weight": mistakes.lookup_transposed}, EMBEDDING_APIS))


# ---------------------------------------------------------------------------
# Chapter 02: scaling and weight tying
# ---------------------------------------------------------------------------

# (end of chapter 02)


# ---------------------------------------------------------------------------
# Chapter 03: sinusoidal encodings
# ---------------------------------------------------------------------------

# (end of chapter 03)


# ---------------------------------------------------------------------------
# Chapter 04: learned positions and BERT
# ---------------------------------------------------------------------------


class _StrictLikeCuda(torch.overrides.TorchFunctionMode):
    """Makes the meta device as strict as CUDA about mixing devices.

    Meta kernels accept a CPU index: `embedding(torch.arange(T))` with a meta
    weight quietly returns a meta tensor, so on a CPU-only machine the classic
    bug (position ids built on the CPU) would go unseen. CUDA refuses such a
    mix, except for indexing with a CPU tensor, copies and 0-dim CPU scalars;
    this mode does the same, so the meta pass fails where a GPU would."""

    ALLOWED = frozenset({"__getitem__", "__setitem__", "to", "copy_", "type_as", "cpu", "cuda"})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name not in self.ALLOWED:
            devices = {t.device.type for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.dim() > 0}
            if {"meta", "cpu"} <= devices:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, meta and cpu (in {name}; on a GPU: cuda:0 and cpu)")
        return func(*args, **kwargs)


def _warm_up_meta() -> None:
    """The first meta-device add or layer_norm in a process imports torch._dynamo
    (seconds). Done here, outside the student's time limit: an import cut off by
    the timer leaves torch half-imported and breaks every later check."""
    x = torch.zeros(2, 3, device="meta")
    F.layer_norm(x + x, (3,))


def _raised(failure, exception: str) -> bool:
    return failure.code == "raised" and f" raised {exception}" in failure.message


LEARNED_MISTAKES = {
    "same_row_every_position": mistakes.learned_same_row,
    "batch_seq_confusion": mistakes.learned_batch_seq_confusion,
    "position_offset": mistakes.learned_position_offset,
}


def _find_table(probe: Probe, module: nn.Module, max_len: int, d: int) -> tuple[str, torch.Tensor]:
    """The student's position table, found by shape: (max_len, d_model), or
    (1, max_len, d_model) as ViT's pos_embed is kept."""
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    for name, tensor in tensors.items():
        if [size for size in tensor.shape if size != 1] == [max_len, d]:
            return name, tensor
    return probe.find_tensor(module, (max_len, d), "the position table (max_len, d_model)")


def _check_learned_positions(cls, probe: Probe) -> None:
    from helpers.checking import Failure, close

    max_len, d = 20, 12

    # Hygiene first: a table kept in a plain attribute would also look like a device bug below.
    module = probe.build(cls, max_len, d)
    plain = [name for name, value in vars(module).items() if isinstance(value, torch.Tensor) and tuple(value.shape) == (max_len, d)]
    if plain:
        probe.fail(
            "positions_not_trainable",
            f"`{probe.name}` keeps its table in a plain attribute `{plain[0]}`: it is not trained and does not move with .to(device). Make it a Parameter: `nn.Embedding(max_len, d_model)` or `nn.Parameter(...)`.",
        )

    # Device: positions must be made on x's device (a meta pass as strict as CUDA).
    _warm_up_meta()

    def on(device):
        fresh = probe.call(cls, max_len, d, what=f"`{probe.name}({max_len}, {d})`")
        fresh = probe.call(fresh.to, device, what=f"`{probe.name}.to(device)`")
        x = probe.randn(3, 7, d, device=device)
        with _StrictLikeCuda():
            return probe.call(fresh, x)

    probe.device_pass(
        on,
        "positions_on_cpu",
        f"`{probe.name}` builds its position ids on the CPU whatever x's device: `torch.arange(T)` makes a CPU tensor (and a tensor kept in a plain attribute "
        "stays behind when the module moves), so on a GPU looking it up in a table that lives on the GPU fails with 'Expected all tensors to be on the same device'. "
        "Write `torch.arange(T, device=x.device)`, or keep the ids in a buffer (`self.register_buffer(..., persistent=False)`).",
    )
    name, param = _find_table(probe, module, max_len, d)
    with torch.no_grad():  # known values whatever the init: a zero-initialised table would hide a missing `x +`
        param.copy_(probe.randn(max_len, d).view(param.shape))
    table = param.detach().view(max_len, d)
    # Values: B=3 != T=7 != d=12, in training mode (this module has no dropout).
    x = probe.randn(3, 7, d)
    out = probe.call(module, x)
    expected = x + table[:7]
    try:
        probe.expect(out, expected, what="x + P[:T] for x of shape (3, 7, 12)", mistakes=lambda: {code: m(x, table) for code, m in LEARNED_MISTAKES.items()})
    except Failure as failure:
        if failure.code == "wrong_values":
            probe.call(module.eval)
            if close(probe.call(module, x), expected):
                probe.fail(
                    "unexpected_dropout",
                    f"`{probe.name}` is right in eval mode but not in training mode: it applies dropout. This module is only x + P[:T]; "
                    "in BERT, dropout comes once, after the LayerNorm of the whole sum (the next exercise).",
                )
        raise
    # The length limits, on a copy on the CPU on purpose: on CUDA an index past
    # the table is a device-side assert that breaks every later CUDA call in
    # this process. A sequence of exactly max_len is fine...
    on_cpu = probe.call(cls, max_len, d, what=f"`{probe.name}({max_len}, {d})`")
    _, cpu_param = _find_table(probe, on_cpu, max_len, d)
    with torch.no_grad():
        cpu_param.copy_(table.cpu().view(cpu_param.shape))
    x = probe.randn(2, max_len, d, device="cpu")
    try:
        out = probe.call(on_cpu, x)
    except Failure as failure:
        if _raised(failure, "ValueError"):
            probe.fail("length_check_off_by_one", f"`{probe.name}` refused a sequence of exactly max_len = {max_len} tokens: positions 0..{max_len - 1} all have a row. Refuse only T > max_len.")
        raise
    table_cpu = table.cpu()
    probe.expect(out, x + table_cpu, what=f"the output for T = max_len = {max_len}", mistakes=lambda: {code: m(x, table_cpu) for code, m in LEARNED_MISTAKES.items()})
    # ...one more token is refused with a ValueError.
    try:
        probe.call(on_cpu, probe.randn(2, max_len + 1, d, device="cpu"))
    except Failure as failure:
        if _raised(failure, "ValueError"):
            pass
        elif failure.code == "raised":
            error = failure.message.split(" raised ", 1)[-1]
            probe.fail(
                "no_length_check",
                f"For T = max_len + 1 = {max_len + 1}, `{probe.name}` raised {error.rstrip('.')}. That is what your users would meet (and with an nn.Embedding on a GPU, "
                "'CUDA error: device-side assert triggered', which breaks the whole process). Check T against max_len first and raise a ValueError "
                "that says what to do, e.g. 'sequence length 21 > max_len 20: build the module with a larger max_len'.",
            )
        else:
            raise
    else:
        probe.fail("no_length_check", f"`{probe.name}` returned a result for T = max_len + 1 = {max_len + 1}: there is no learned row for position {max_len}. Raise a ValueError when T > max_len.")
    # Hygiene: the table is a trainable Parameter, and only the used rows get a gradient.
    parameters = dict(module.named_parameters())
    if name not in parameters or not parameters[name].requires_grad:
        kind = "a buffer" if name not in parameters else "a Parameter with requires_grad=False"
        probe.fail("positions_not_trainable", f"`{probe.name}`'s table `{name}` is {kind}: learned positions must be trained. Use nn.Embedding(max_len, d_model) or an nn.Parameter.")
    param.grad = None
    out = probe.call(module, probe.randn(3, 7, d))
    if not out.requires_grad:
        probe.fail("positions_not_trainable", f"`{probe.name}`'s output is cut off from the table's gradient (a .detach() or torch.no_grad()?): the table could never learn.")
    out.sum().backward()
    if param.grad is None:
        probe.fail("positions_not_trainable", f"`{probe.name}`'s output does not reach the table `{name}`: it got no gradient.")
    used = torch.zeros(max_len, d, device=probe.device)
    used[:7] = 3.0  # each of the 7 used rows was added to 3 sequences
    probe.expect(param.grad.view(max_len, d), used, what=f"the gradient of `{name}` after out.sum().backward()")


register(Exercise("LearnedPositionalEmbedding", 4, 2, "module", reference.LearnedPositionalEmbedding, _check_learned_positions, LEARNED_MISTAKES))


BERT_MISTAKES = {
    "layernorm_eps": mistakes.bert_layernorm_eps,
    "missing_token_type": mistakes.bert_missing_token_type,
    "missing_layernorm": mistakes.bert_missing_layernorm,
    "layernorm_order": mistakes.bert_layernorm_order,
    "layernorm_unbiased_var": mistakes.bert_unbiased_variance,
    "unexpected_scale": mistakes.bert_scaled_tokens,
    "same_row_every_position": mistakes.bert_same_row,
    "batch_seq_confusion": mistakes.bert_batch_seq_confusion,
    "position_offset": mistakes.bert_position_offset,
}
# A small config with non-default values everywhere: hard-coded sizes, eps,
# dropout or padding id show up. Tiny weights make the summed embeddings'
# variance ~3e-6, so an eps of 1e-5 (or 1e-12 where 1e-7 was asked) is plain.
BERT_SMALL = {"max_position_embeddings": 16, "type_vocab_size": 3, "layer_norm_eps": 1e-7, "hidden_dropout_prob": 0.25, "pad_token_id": 1}
BERT_SMALL_SIZES = (40, 24)  # vocab_size, hidden_size
HF_NAMES = "word_embeddings, position_embeddings, token_type_embeddings (nn.Embedding), LayerNorm (nn.LayerNorm) and dropout"


def _bert_small_weights(probe: Probe) -> dict[str, torch.Tensor]:
    (V, d), P, S = BERT_SMALL_SIZES, BERT_SMALL["max_position_embeddings"], BERT_SMALL["type_vocab_size"]
    return {
        "word_embeddings.weight": probe.randn(V, d) * 1e-3,
        "position_embeddings.weight": probe.randn(P, d) * 1e-3,
        "token_type_embeddings.weight": probe.randn(S, d) * 1e-3,
        "LayerNorm.weight": 1 + 0.1 * probe.randn(d),
        "LayerNorm.bias": 0.1 * probe.randn(d),
    }


def _load_pretrained(probe: Probe, module: nn.Module, weights: dict[str, torch.Tensor]) -> list[str]:
    """Load `weights` the way a user would. Fails with state_dict_mismatch, naming
    the keys, when a tensor has the wrong shape or one of the module's
    parameters would keep its random values; returns the pretrained keys that
    found no home (their verdict waits for the values: a module with no
    LayerNorm at all is better told `missing_layernorm`). Buffers the
    checkpoint does not hold (HF's position_ids) are fine."""
    own = probe.call(module.state_dict, what=f"`{probe.name}.state_dict()`")
    wrong = [f"`{k}` is {tuple(own[k].shape)} in yours but {tuple(v.shape)} in the checkpoint" for k, v in weights.items() if k in own and tuple(own[k].shape) != tuple(v.shape)]
    if wrong:
        probe.fail(
            "state_dict_mismatch",
            f"The pretrained weights do not load into `{probe.name}`: {'; '.join(wrong)}. Build each table from the constructor's arguments (vocab_size, hidden_size, max_position_embeddings, type_vocab_size).",
        )
    homeless = [k for k in weights if k not in own]
    unfilled = [k for k, _ in module.named_parameters() if k not in weights]
    if unfilled:
        _fail_state_dict(probe, homeless, unfilled)
    # load_state_dict copies into the module's own tensors; a lambda spares
    # probe.call a snapshot of 47 MB of weights that nothing may change.
    probe.call(lambda: module.load_state_dict(weights, strict=False), what=f"`{probe.name}.load_state_dict(...)`")
    return homeless


def _fail_state_dict(probe: Probe, homeless: list[str], unfilled: list[str]) -> None:
    parts = []
    if homeless:
        parts.append(f"the pretrained {', '.join(f'`{k}`' for k in homeless)} found no place in your module")
    if unfilled:
        parts.append(f"your {', '.join(f'`{k}`' for k in unfilled)} would keep {'its' if len(unfilled) == 1 else 'their'} random values")
    probe.fail(
        "state_dict_mismatch",
        f"load_state_dict fails: {' and '.join(parts)}. The names are part of this exercise: call the submodules exactly {HF_NAMES}, as HF does, so that `embeddings.*` weights load.",
    )


def _dropout_rate(out, expected: torch.Tensor) -> float | None:
    """If `out` is `expected` with some entries zeroed and the others scaled by
    one common factor 1/(1-p), as dropout applied last does, the p that factor
    implies; else None."""
    from helpers.checking import close

    if not isinstance(out, torch.Tensor) or out.shape != expected.shape or out.is_meta or out.dtype != expected.dtype:
        return None
    out, expected = out.detach(), expected.detach()
    kept = out != 0
    sizeable = kept & (expected.abs() > 1e-2)
    if kept.all() or not sizeable.any():
        return None
    scale = float((out[sizeable] / expected[sizeable]).median())
    if scale <= 1 or not close(out[kept], expected[kept] * scale):
        return None
    return 1 - 1 / scale


def _expect_bert(probe: Probe, out, expected, weights, ids, types, eps: float, homeless: list[str], what: str) -> None:
    from helpers.checking import Failure

    if _dropout_rate(out, expected) is not None:
        probe.fail(
            "dropout_in_eval",
            f"In eval mode `{probe.name}` still drops values: dropout must switch off after .eval(). Use the module `self.dropout = nn.Dropout(p)`, "
            "or pass `training=self.training` to F.dropout (its default is training=True).",
        )
    try:
        probe.expect(out, expected, what=what, mistakes=lambda: {code: m(weights, ids, types, eps) for code, m in BERT_MISTAKES.items()})
    except Failure as failure:
        if homeless and failure.code not in ("missing_layernorm", "missing_token_type"):
            _fail_state_dict(probe, homeless, [])
        raise
    if homeless:
        _fail_state_dict(probe, homeless, [])


def _call_bert(probe: Probe, module: nn.Module, ids: torch.Tensor, types: torch.Tensor | None) -> torch.Tensor:
    from helpers.checking import Failure

    if types is not None:
        return probe.call(module, ids, types)
    try:
        return probe.call(module, ids)
    except Failure as failure:
        if failure.code == "raised":
            probe.fail("raised", f"{failure.message} (called with token_type_ids=None, which must mean all zeros: one segment)")
        raise


def _check_bert_embeddings(cls, probe: Probe) -> None:
    from helpers.checking import close

    (V, d), small = BERT_SMALL_SIZES, BERT_SMALL

    # Device: position ids and default token types made on input_ids' device.
    _warm_up_meta()

    def on(device):
        fresh = probe.call(cls, V, d, **small, what=f"`{probe.name}(...)`")
        fresh = probe.call(fresh.to, device, what=f"`{probe.name}.to(device)`")
        probe.call(fresh.eval)
        ids = probe.randint(V, 4, 11, device=device)
        with _StrictLikeCuda():
            return probe.call(fresh, ids)

    probe.device_pass(
        on,
        "positions_on_cpu",
        f"`{probe.name}` builds position ids (or the default token_type_ids) on the CPU whatever input_ids' device: on a GPU the lookup then fails with "
        "'Expected all tensors to be on the same device'. Write `torch.arange(T, device=input_ids.device)` and `torch.zeros_like(input_ids)`.",
    )

    # A first run on the CPU: an index past a table is an IndexError there, but
    # on CUDA a device-side assert that would break every later check.
    # Its weights load first: a table built too small is then named, not hit.
    on_cpu = probe.call(cls, V, d, **small, what=f"`{probe.name}(...)`")
    probe.call(on_cpu.eval)
    _load_pretrained(probe, on_cpu, {k: v.cpu() for k, v in _bert_small_weights(probe).items()})
    cpu_ids = probe.randint(V, 4, 11, device="cpu")
    probe.call(on_cpu, cpu_ids, probe.randint(small["type_vocab_size"], 4, 11, device="cpu"))
    _call_bert(probe, on_cpu, cpu_ids, None)

    # Values: MiniLM's real weights, real sentence pairs, against transformers' own BertEmbeddings (eval: no dropout).
    from helpers import models

    real = models.bert_embeddings_reference()
    weights = models.bert_embeddings_state_dict(copy=False)  # read only
    module = probe.build(cls, 30522, 384)
    probe.call(module.eval)
    homeless = _load_pretrained(probe, module, weights)
    weights = {k: v.to(probe.device) for k, v in weights.items()}
    ids, types = real["input_ids"].to(probe.device), real["token_type_ids"].to(probe.device)
    what = f"the embeddings of {ids.shape[0]} real sentence pairs {tuple(ids.shape)}, with MiniLM's weights loaded (eval mode)"
    out = _call_bert(probe, module, ids, types)
    _expect_bert(probe, out, real["expected"].to(probe.device), weights, ids, types, 1e-12, homeless, what)
    out = _call_bert(probe, module, ids, None)
    _expect_bert(probe, out, real["expected_no_types"].to(probe.device), weights, ids, torch.zeros_like(ids), 1e-12, homeless, what.replace("(eval", "and token_type_ids=None (eval"))
    del module, weights

    # Values again: a small config, non-default arguments, low-variance weights.
    weights = _bert_small_weights(probe)
    module = probe.build(cls, V, d, **small)
    probe.call(module.eval)
    homeless = _load_pretrained(probe, module, weights)
    ids, types = probe.randint(V, 4, 11), probe.randint(small["type_vocab_size"], 4, 11)
    ids[:, -3:] = small["pad_token_id"]  # padded batch
    reference_module = reference.BertEmbeddings(V, d, **small).to(probe.device).eval()
    reference_module.load_state_dict(weights)
    with torch.no_grad():
        expected = reference_module(ids, types)
    what = f"the output of {probe.name}({V}, {d}, " + ", ".join(f"{k}={v}" for k, v in small.items()) + ") on low-variance weights (eval mode)"
    out = _call_bert(probe, module, ids, types)
    _expect_bert(probe, out, expected, weights, ids, types, small["layer_norm_eps"], homeless, what)

    # Dropout, in training mode: the last step, at rate hidden_dropout_prob.
    p = small["hidden_dropout_prob"]
    probe.call(module.train)
    out = probe.call(module, ids, types)
    if close(out, expected):
        probe.fail(
            "missing_dropout", f"In training mode `{probe.name}`'s output equals its eval output: there is no dropout. Apply self.dropout = nn.Dropout(hidden_dropout_prob) after the LayerNorm."
        )
    implied = _dropout_rate(out, expected)
    if implied is None:
        probe.fail(
            "layernorm_order",
            f"In training mode `{probe.name}`'s output is not dropout(LayerNorm(sum)): its entries should be either 0 or the eval value / (1 - p). "
            "Dropout comes last, after the LayerNorm (dropout before the LayerNorm, or on each embedding, gives something else).",
        )
    dropped = float((out == 0).float().mean())
    if abs(implied - p) > 0.01 or abs(dropped - p) > 0.1:
        probe.fail(
            "dropout_rate_ignored",
            f"Built with hidden_dropout_prob={p}, `{probe.name}` drops values at rate {implied:.2g} in training mode ({dropped:.0%} of them were zeroed). "
            "Use nn.Dropout(hidden_dropout_prob), not a fixed rate.",
        )

    # Hygiene: [PAD]'s row is never trained (padding_idx=pad_token_id).
    probe.call(module.eval)
    module.zero_grad(set_to_none=True)
    out = probe.call(module, ids, types)
    word = dict(module.named_parameters())["word_embeddings.weight"]
    if not out.requires_grad:
        probe.fail("no_gradient", f"`{probe.name}`'s output is cut off from its weights' gradient (a .detach() or torch.no_grad()?): it could never be fine-tuned.")
    (out * probe.randn(*out.shape)).sum().backward()
    pad = small["pad_token_id"]
    if word.grad is None:
        probe.fail("no_gradient", f"`{probe.name}`'s output does not reach `word_embeddings.weight`: it got no gradient.")
    if word.grad[pad].abs().max() > 0:
        probe.fail(
            "missing_padding_idx",
            f"Built with pad_token_id={pad}, `{probe.name}` still gives the [PAD] row {pad} of word_embeddings a gradient: "
            "write nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id), as HF does.",
        )


register(Exercise("BertEmbeddings", 4, 3, "module", reference.BertEmbeddings, _check_bert_embeddings, BERT_MISTAKES))


# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# (end of chapter 05)
