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

# torch's wording when a matrix product gets a (V, d) table where it wanted (d, V).
MATMUL_SHAPE_ERRORS = ("cannot be multiplied", "size mismatch", "must match the size", "do not broadcast", "Expected size", "shape mismatch")


def _fitted_scale(out, rows: torch.Tensor) -> float | None:
    """The constant c for which c * rows is closest to `out` (least squares), if it can be fitted."""
    if not isinstance(out, torch.Tensor) or out.shape != rows.shape or out.is_meta or not out.is_floating_point():
        return None
    a, b = out.detach().to("cpu", torch.float64), rows.detach().to("cpu", torch.float64)
    if not torch.isfinite(a).all() or float((b * b).sum()) == 0.0:
        return None
    return float((a * b).sum() / (b * b).sum())


def _fitted_offset(out, logits: torch.Tensor) -> torch.Tensor | None:
    """The (V,) vector b for which logits + b is closest to `out`: its mean offset."""
    if not isinstance(out, torch.Tensor) or out.shape != logits.shape or out.is_meta or not out.is_floating_point():
        return None
    offset = (out.detach().to(logits.device, logits.dtype) - logits).reshape(-1, logits.shape[-1]).mean(0)  # (V,)
    return offset if bool(torch.isfinite(offset).all()) else None


def _warm_meta_kernels() -> None:
    """In torch 2.x some meta kernels (a meta tensor times a Python float) import
    torch._dynamo on first use, which takes seconds. Pay that here, outside the
    student's time limit: a timeout cut into an import would leave it half done."""
    torch.ones(1, device="meta") * 1.0


def _token_table(module: nn.Module, vocab_size: int, d_model: int, probe: Probe) -> torch.Tensor:
    """The student's (V, d) table, found by shape; a (d, V) one means swapped arguments."""
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    if not any(tuple(t.shape) == (vocab_size, d_model) for t in tensors.values()):
        swapped = [name for name, t in tensors.items() if tuple(t.shape) == (d_model, vocab_size)]
        if swapped:
            probe.fail(
                "wrong_shape",
                f"`{probe.name}({vocab_size}, {d_model})` holds `{swapped[0]}` of shape ({d_model}, {vocab_size}): the two sizes are swapped. "
                "nn.Embedding(num_embeddings, embedding_dim) takes the vocabulary first: one row of d_model numbers per token.",
            )
    return probe.find_tensor(module, (vocab_size, d_model), "the token embedding table")[1]


def _expect_scaled(out, table: torch.Tensor, ids: torch.Tensor, probe: Probe, what: str) -> None:
    """out must be table[ids] * sqrt(d), in float32; name the scale when it is another constant."""
    from helpers.checking import Failure

    d_model = table.shape[1]
    table = table.detach().float()  # the student's own init; the result is float32 whatever they did
    expected = reference.scaled_embedding(table, ids)
    scale = _fitted_scale(out, table[ids])

    def faces() -> dict:
        found = {
            "missing_scale": mistakes.scaled_embedding_missing_scale(table, ids),
            "divided_by_scale": mistakes.scaled_embedding_divided_by_scale(table, ids),
        }
        if scale is not None and abs(scale) > 1e-6:  # an all-zero output is wrong_values, not a scale
            found["wrong_scale"] = mistakes.scaled_embedding_wrong_scale(table, ids, scale)
        return found

    try:
        probe.expect(out, expected, what=what, mistakes=faces)
    except Failure as failure:
        if failure.code == "wrong_scale":
            probe.fail("wrong_scale", f"{failure.message} Here your output is the rows × {scale:.5g}; sqrt(d_model) = sqrt({d_model}) = {math.sqrt(d_model):.5g}.")
        raise


def _check_scaled_embedding(cls, probe: Probe) -> None:
    # d_model = 10 and 7: sqrt(d) is no integer and differs from d, sqrt(V), sqrt(d/2) and log(d).
    vocab_size, d_model = 37, 10
    module = probe.build(cls, vocab_size, d_model)
    table = _token_table(module, vocab_size, d_model, probe)
    ids = probe.randint(vocab_size, 3, 5)  # (B=3, T=5): B != T
    _expect_scaled(probe.call(module, ids), table, ids, probe, "the output for ids of shape (3, 5)")
    # Another size, odd d_model and any leading shape.
    other = probe.build(cls, 23, 7)
    other_table = _token_table(other, 23, 7, probe)
    ids3 = probe.randint(23, 2, 3, 4)
    _expect_scaled(probe.call(other, ids3), other_table, ids3, probe, "the output of ScaledEmbedding(23, 7) for ids of shape (2, 3, 4)")
    # The table is trained: a gradient must reach it, scaled by sqrt(d) like the values.
    if not (isinstance(table, nn.Parameter) and table.requires_grad):
        probe.fail(
            "no_gradient",
            f"`{probe.name}`'s ({vocab_size}, {d_model}) table is not a trainable Parameter (a buffer, or requires_grad=False?). The embedding is learned: keep it an nn.Embedding (its weight is an nn.Parameter).",
        )
    table.grad = None
    out = probe.call(module, ids)
    if not out.requires_grad:
        probe.fail("no_gradient", f"`{probe.name}`'s output is cut off from the table's gradient (a .detach(), .data or torch.no_grad()?). The embedding must stay trainable.")
    upstream = probe.randn(*out.shape)
    probe.call(lambda: (out * upstream).sum().backward(), what=f"backward through `{probe.name}`")
    if table.grad is None:
        probe.fail("no_gradient", f"no gradient reached `{probe.name}`'s table: the output must be computed from the table itself, not a copy.")
    flat = upstream.reshape(-1, d_model) * math.sqrt(d_model)  # d(out)/d(row) = sqrt(d) for each use of the row
    expected_grad = torch.zeros(vocab_size, d_model, device=probe.device).index_add_(0, ids.flatten(), flat)
    probe.expect(table.grad.float(), expected_grad, what="the table's gradient")
    # Devices: the module and the ids on the meta device (catches tensors made on the CPU).
    _warm_meta_kernels()

    def on(device: torch.device):
        module = probe.call(probe.build(cls, 23, 7).to, device, what=f"`{probe.name}.to(device)`")
        return probe.call(module, probe.randint(23, 2, 3, device=device))

    probe.device_pass(on)


def _make_embedding(probe: Probe, vocab_size: int, d_model: int, device: torch.device | None = None) -> nn.Embedding:
    """The embedding the check owns and hands to the student's head."""
    device = device or probe.device
    embedding = nn.Embedding(vocab_size, d_model, device=device)
    if device.type != "meta":
        with torch.no_grad():
            embedding.weight.copy_(probe.randn(vocab_size, d_model))  # our values, not the global RNG's
    return embedding


def _call_head(head: nn.Module, h: torch.Tensor, weight: torch.Tensor, probe: Probe):
    from helpers.checking import Failure

    try:
        return probe.call(head, h)
    except Failure as failure:
        if failure.code == "raised" and any(text in failure.message for text in MATMUL_SHAPE_ERRORS):
            vocab_size, d_model = weight.shape
            probe.fail(
                "wrong_shape",
                f"{failure.message.rstrip('.')}. The embedding weight W is stored ({vocab_size}, {d_model}): one row per token. "
                "The logits are h @ W.T (or F.linear(h, W)): (..., d) @ (d, V) -> (..., V).",
            )
        raise


def _expect_logits(out, weight: torch.Tensor, h: torch.Tensor, probe: Probe, what: str) -> None:
    expected = reference.tied_logits(weight.detach(), h)

    def faces() -> dict:
        found = {"returns_probabilities": mistakes.tied_head_probabilities(weight.detach(), h)}
        offset = _fitted_offset(out, expected)
        if offset is not None:
            found["has_bias"] = mistakes.tied_head_with_bias(weight.detach(), h, offset)
        return found

    layout = "The logits have the shape of h with its last dimension d replaced by V: (..., d) -> (..., V)."
    probe.expect(out, expected, what=what, mistakes=faces, hint=layout)


def _check_tied_lm_head(cls, probe: Probe) -> None:
    from helpers.checking import close

    vocab_size, d_model = 29, 12  # V != d: a transposed product cannot hide
    embedding = _make_embedding(probe, vocab_size, d_model)
    weight = embedding.weight
    values = weight.detach().clone()
    head = probe.build(cls, embedding)
    if embedding.weight is not weight:
        probe.fail(
            "mutated_input",
            f"`{probe.name}(embedding)` replaced the embedding's weight by another Parameter (tied the other way round, `embedding.weight = self.proj.weight`?): "
            "the embedding's trained values are lost. Leave the embedding alone and take its Parameter: `self.weight = embedding.weight`.",
        )
    if not torch.equal(weight.detach(), values):
        probe.fail("mutated_input", f"`{probe.name}(embedding)` changed the embedding's values (re-initialised them?). The head must reuse the table as it is.")
    h = probe.randn(3, 5, d_model)  # (B=3, T=5, d)
    out = _call_head(head, h, weight, probe)
    # The tie, by identity: the embedding's Parameter object must be one of the head's parameters.
    parameters = probe.call(lambda: list(head.named_parameters()), what=f"`{probe.name}.named_parameters()`")
    if not any(p is weight for _, p in parameters):
        held = ", ".join(f"{name} {tuple(p.shape)}" for name, p in parameters) or "none"
        probe.fail("copy_not_tied", f"{probe.explain('copy_not_tied')} (Your head's parameters: {held}; none of them is `embedding.weight` itself.)")
    # The tie, by behaviour: train the embedding (change it in place); the head must follow.
    with torch.no_grad():
        weight.copy_(probe.randn(vocab_size, d_model))
    after = _call_head(head, h, weight, probe)
    if isinstance(out, torch.Tensor) and isinstance(after, torch.Tensor) and out.shape == after.shape and close(after, out):
        probe.fail("copy_not_tied", f"{probe.explain('copy_not_tied')} (After we changed embedding.weight in place, your head's output stayed the same: its forward computes with another matrix.)")
    _expect_logits(after, weight, h, probe, "the logits for h of shape (3, 5, 12)")
    h2 = probe.randn(7, d_model)
    _expect_logits(_call_head(head, h2, weight, probe), weight, h2, probe, "the logits for h of shape (7, 12)")
    # Hygiene: no bias, even a zero one, and no second matrix.
    for name, p in parameters:
        if p is not weight and tuple(p.shape) == (vocab_size,):
            probe.fail("has_bias", f"{probe.explain('has_bias')} (Your head holds `{name}` of shape ({vocab_size},): even at zero it would be trained.)")
        if p is not weight and p.numel() >= vocab_size * d_model:
            probe.fail("copy_not_tied", f"{probe.explain('copy_not_tied')} (Besides the embedding's weight your head holds `{name}` {tuple(p.shape)}: tying means ONE matrix.)")
    # One backward through the head reaches the embedding's Parameter: the two uses train together.
    weight.grad = None
    logits = _call_head(head, h, weight, probe)
    if not logits.requires_grad:
        probe.fail(
            "no_gradient", f"`{probe.name}`'s logits are cut off from the embedding's weight (torch.no_grad(), .detach() or .data?): training through the head would never update the shared matrix."
        )
    upstream = probe.randn(3, 5, vocab_size)
    probe.call(lambda: (logits * upstream).sum().backward(), what=f"backward through `{probe.name}`")
    if weight.grad is None:
        probe.fail("no_gradient", f"no gradient reached `embedding.weight` through `{probe.name}`: compute the logits from the embedding's Parameter itself.")
    expected_grad = upstream.reshape(-1, vocab_size).T @ h.reshape(-1, d_model)  # (V, B*T) @ (B*T, d) -> (V, d)
    probe.expect(weight.grad, expected_grad, what="the embedding weight's gradient through the head")

    # Devices: an embedding on the meta device; everything the head makes must follow it.
    def on(device: torch.device):
        meta_head = probe.call(cls, _make_embedding(probe, vocab_size, d_model, device), what=f"`{probe.name}(embedding)`")
        return probe.call(meta_head, probe.randn(3, 5, d_model, device=device))

    _warm_meta_kernels()
    probe.device_pass(on)


register(
    Exercise(
        "ScaledEmbedding",
        2,
        2,
        "module",
        reference.ScaledEmbedding,
        _check_scaled_embedding,
        {
            "missing_scale": mistakes.scaled_embedding_missing_scale,
            "divided_by_scale": mistakes.scaled_embedding_divided_by_scale,
            "wrong_scale": mistakes.scaled_embedding_wrong_scale,
        },
    )
)
register(
    Exercise(
        "TiedLMHead",
        2,
        3,
        "module",
        reference.TiedLMHead,
        _check_tied_lm_head,
        {
            "copy_not_tied": mistakes.tied_head_copied,
            "has_bias": mistakes.tied_head_with_bias,
            "returns_probabilities": mistakes.tied_head_probabilities,
        },
    )
)

# (end of chapter 02)


# ---------------------------------------------------------------------------
# Chapter 03: sinusoidal encodings
# ---------------------------------------------------------------------------

# (end of chapter 03)


# ---------------------------------------------------------------------------
# Chapter 04: learned positions and BERT
# ---------------------------------------------------------------------------

# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# (end of chapter 05)
