"""Each exercise's check: a short list of named probes, run in order.

A check builds inputs the student did not choose (batch != seq_len != d, so a
broadcasting or transposition slip cannot hide), calls the submission through
`probe.call`, and compares with `helpers.reference`; `probe.expect` names the
mistake from `helpers.mistakes` when one reproduces the output. Property and
hygiene probes (gradients, buffers, devices) come after the values.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from helpers import mistakes, reference
from helpers.checking import Failure, Probe, close
from helpers.registry import Exercise, register

# Every way to get an embedding without writing one.
EMBEDDING_APIS = (F.embedding, torch.embedding, F.embedding_bag)
MATRIX_PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "mv", "einsum", "tensordot", "linear", "addmm", "baddbmm", "inner", "_sparse_mm", "smm", "hspmm"}

# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def _check_lookup(fn, probe: Probe) -> None:
    # V != d and ids < d, so a transposed table gives a wrong shape, not an IndexError.
    weight = probe.randn(11, 7)
    ids = probe.randint(7, 3, 5)  # (B=3, T=5)
    probe.against_reference(probe.call(fn, weight, ids), weight, ids, what="the (3, 5) batch")
    # Any leading shape and the full id range (a one-hot must be V wide even if the last ids are unused).
    weight = probe.randn(50, 16)
    ids = probe.randint(40, 2, 3, 4)
    probe.against_reference(probe.call(fn, weight, ids), weight, ids, what="a (2, 3, 4) batch of ids")
    # A single text (1-D ids) and a batch of one (a size-1 dimension that must not be squeezed).
    for shape in [(6,), (1, 4)]:
        ids = probe.randint(40, *shape)
        probe.against_reference(probe.call(fn, weight, ids), weight, ids, what=f"a {shape} batch of ids")
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
    hints = {  # torch's words -> what to do about them
        "cannot be multiplied": " The one-hot matrix must be exactly V = weight.shape[0] wide: pass num_classes=weight.shape[0] (without it, F.one_hot guesses from the largest id).",
        "same dtype": " F.one_hot returns int64: convert it with .to(weight.dtype) before multiplying.",
    }
    try:
        _check_lookup(fn, probe)
    except Failure as failure:
        if failure.code == "raised":
            failure.message += "".join(hint for words, hint in hints.items() if words in failure.message)
        raise
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

# Right tables computed in float32 (pow or exp-log) differ from the float64
# reference by ~2e-5 at the positions checked (< 200); every mistake in the
# catalogue is off by O(1) somewhere.
TABLE_TOLERANCE = {"rtol": 0.0, "atol": 1e-4}
TABLE_LAYOUT = "Row pos, column 2i holds sin(pos / base^(2i/d_model)); column 2i+1 holds cos of the same angle."


def _raised(failure, exception: str) -> bool:
    return failure.code == "raised" and f" raised {exception}" in failure.message


def _table_faces(max_len: int, d_model: int, base: float = 10000.0, around=lambda table: table) -> dict[str, list[torch.Tensor]]:
    """The sinusoidal table's known mistakes, each face passed through `around`
    (e.g. `lambda t: x + t[:T]` for a module that adds the table)."""
    return {code: [around(face) for face in _faces(m(max_len, d_model, base))] for code, m in mistakes.SINUSOIDAL_TABLE_MISTAKES.items()}


def _check_sinusoidal_encoding(fn, probe: Probe) -> None:
    for args in ((50, 16), (37, 12, 500.0)):  # a non-default base catches a hard-coded 10000
        call = f"sinusoidal_encoding({', '.join(repr(a) for a in args)})"
        out = probe.call(fn, *args, what=f"`{call}`")
        expected = reference.sinusoidal_encoding(*args)
        hint = "The table is (max_len, d_model): one row per position." if isinstance(out, torch.Tensor) and out.shape == expected.shape[::-1] else TABLE_LAYOUT
        probe.expect(out, expected, what=f"the table of `{call}`", mistakes=lambda args=args: _table_faces(*args), hint=hint, **TABLE_TOLERANCE)
    # An odd d_model: ceil(d/2) sin columns, floor(d/2) cos columns, the last one a sin.
    call = "sinusoidal_encoding(20, 7)"
    try:
        out = probe.call(fn, 20, 7, what=f"`{call}`")
        probe.expect(out, reference.sinusoidal_encoding(20, 7), what=f"the table of `{call}`", **TABLE_TOLERANCE)
    except Failure as failure:
        if failure.code not in ("raised", "wrong_shape", "wrong_values", "nan_or_inf"):
            raise
        probe.fail(
            "odd_d_model",
            f"{failure.message.rstrip('.')}. Your table is right for an even d_model but not for d_model = 7: there are ceil(7/2) = 4 frequencies, "
            "so 4 sin columns (0, 2, 4, 6) and only 3 cos columns (1, 3, 5); the last column is a sin. Cut the cos block to fit: `pe[:, 1::2] = torch.cos(angles)[:, : d_model // 2]`.",
        )


def _float64_accepted(out):
    """Small matrices and vectors may come in float64 (NumPy's default): compared as float32."""
    return out.float() if isinstance(out, torch.Tensor) and out.dtype == torch.float64 else out


def _check_relative_shift_matrix(fn, probe: Probe) -> None:
    for args in ((3, 16), (-5, 12, 500.0), (0, 6), (40, 8)):
        call = f"relative_shift_matrix({', '.join(repr(a) for a in args)})"
        out = _float64_accepted(probe.call(fn, *args, what=f"`{call}`"))
        expected = reference.relative_shift_matrix(*args)
        k, d = args[:2]
        what = f"M = `{call}`, which must map PE[pos] to PE[pos {'+' if k >= 0 else '-'} {abs(k)}],"
        hint = "M is block-diagonal: one 2×2 rotation by the angle k·ω_i on rows and columns (2i, 2i+1) for each pair i, zeros elsewhere."
        probe.expect(out, expected, what=what, mistakes=lambda args=args: {code: m(*args) for code, m in probe.exercise.mistakes.items()}, hint=hint, **TABLE_TOLERANCE)


def _is_table(tensor: torch.Tensor, max_len: int, d: int) -> bool:
    """(max_len, d), give or take size-1 axes."""
    return [size for size in tensor.shape if size != 1] == [max_len, d]


def _find_table(probe: Probe, module: nn.Module, max_len: int, d: int) -> tuple[str, torch.Tensor]:
    """The student's position table, found by shape: (max_len, d_model), or
    with extra size-1 axes ((1, max_len, d) as ViT keeps it, (max_len, 1, d)
    as the PyTorch tutorial does)."""
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    for name, tensor in tensors.items():
        if _is_table(tensor, max_len, d):
            return name, tensor
    return probe.find_tensor(module, (max_len, d), "the position table (max_len, d_model)")


def _fixed_table(probe: Probe, module: nn.Module, max_len: int, d: int) -> torch.Tensor:
    """The student's sinusoidal table: a buffer (max_len, d), computed once in __init__."""
    for name, value in vars(module).items():
        if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter) and _is_table(value, max_len, d):
            probe.fail(
                "pe_not_buffer",
                f"`{probe.name}` keeps its table in a plain attribute `self.{name}`: module.to('cuda') does not move it (your forward then mixes devices) and state_dict() does not save it. "
                f"Register it: `self.register_buffer('{name}', table)`.",
            )
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    if not any(_is_table(t, max_len, d) for t in tensors.values()):
        probe.fail(
            "pe_not_buffer",
            f"`{probe.name}(..., max_len={max_len})` holds no ({max_len}, {d}) table (it has: {', '.join(f'{n} {tuple(t.shape)}' for n, t in tensors.items()) or 'nothing'}). "
            "Compute the table once in __init__ for max_len positions and register it as a buffer, rather than recomputing it in every forward.",
        )
    name, table = _find_table(probe, module, max_len, d)
    if isinstance(table, nn.Parameter):
        probe.fail(
            "pe_is_parameter",
            f"`{probe.name}`'s table `{name}` is an nn.Parameter, so the optimizer would train it and the fixed formula would drift away. "
            f"Register it as a buffer instead: `self.register_buffer('{name}', table)` (it still moves with .to(device) and is saved in the state_dict).",
        )
    return table.detach().reshape(max_len, d)


def _refuses_past_max_len(probe: Probe, run: Callable[[int], Any], max_len: int) -> Any:
    """run(T) calls the module on a sequence of length T, on the CPU on purpose:
    on CUDA an index past a table is a device-side assert that breaks every
    later CUDA call in the process. T = max_len must work (its output is
    returned); T = max_len + 1 must raise a ValueError."""
    try:
        out = run(max_len)
    except Failure as failure:
        if _raised(failure, "ValueError"):
            probe.fail("length_check_off_by_one", f"`{probe.name}` refused a sequence of exactly max_len = {max_len} tokens: positions 0..{max_len - 1} all have a row. Refuse only T > max_len.")
        raise
    try:
        run(max_len + 1)
    except Failure as failure:
        if _raised(failure, "ValueError"):
            return out
        if failure.code != "raised":
            raise
        error = failure.message.split(" raised ", 1)[-1]
        probe.fail(
            "no_length_check",
            f"For T = max_len + 1 = {max_len + 1}, `{probe.name}` raised {error.rstrip('.')}. That is what your users would meet (and with a table lookup on a GPU, "
            "'CUDA error: device-side assert triggered', which breaks the whole process). Check T against max_len first and raise a ValueError "
            f"that says what to do, e.g. 'sequence length {max_len + 1} > max_len {max_len}: build the module with a larger max_len'.",
        )
    probe.fail("no_length_check", f"`{probe.name}` returned a result for T = max_len + 1 = {max_len + 1}: the table has no row for position {max_len}. Raise a ValueError when T > max_len.")


def _expect_dropout(probe: Probe, out, expected: torch.Tensor, p: float, what: str) -> None:
    """In training mode the output must be dropout(expected): entries zeroed, the rest scaled by 1/(1-p)."""
    if close(out, expected):
        probe.fail(
            "missing_dropout",
            f"In training mode {what} equals its eval-mode value: no dropout was applied. Vaswani et al. (§5.4) drop the sum of the embeddings and the encoding: "
            "keep an `nn.Dropout(dropout)` and apply it last (it switches itself off after .eval()).",
        )
    rate = _dropout_rate(out, expected)
    if rate is None:
        probe.fail("wrong_values", f"In training mode {what} is not dropout of the eval-mode output: apply dropout once, to the whole sum, as the last step.")
    if abs(rate - p) > 0.02:
        probe.fail("dropout_rate_ignored", f"In training mode {what} looks like dropout with p = {rate:.2f}, but the module was built with dropout={p}: pass the constructor's argument to nn.Dropout.")


POSITIONAL_MISTAKES = {
    "same_row_every_position": mistakes.positional_same_row,
    "batch_seq_confusion": mistakes.positional_batch_seq_confusion,
    "position_offset": mistakes.positional_offset,
}


def _added_table_faces(x: torch.Tensor, max_len: int, d: int) -> dict[str, list[torch.Tensor]]:
    """x + table[:T] for every known mistake of the table or of the slicing."""
    table = reference.sinusoidal_encoding(max_len, d).to(x.device)
    faces = _table_faces(max_len, d, around=lambda t: x + t.to(x.device)[: x.shape[1]])
    for code, m in POSITIONAL_MISTAKES.items():
        faces.setdefault(code, []).extend(_faces(m(x, table)))
    return faces


def _check_positional_encoding(cls, probe: Probe) -> None:
    d, max_len, p = 12, 50, 0.25
    module = probe.build(cls, d, max_len, p)
    table = _fixed_table(probe, module, max_len, d)
    expected_table = reference.sinusoidal_encoding(max_len, d).to(probe.device)
    probe.expect(table, expected_table, what=f"your table `{probe.name}({d}, max_len={max_len})`", mistakes=lambda: _table_faces(max_len, d), hint=TABLE_LAYOUT, **TABLE_TOLERANCE)
    # Values in eval mode: B=3 != T=7 != d=12.
    probe.call(module.eval)
    x = probe.randn(3, 7, d)
    expected = x + expected_table[:7]
    what = "the output for x of shape (3, 7, 12) in eval mode"
    probe.expect(probe.call(module, x), expected, what=what, mistakes=lambda: _added_table_faces(x, max_len, d), **TABLE_TOLERANCE)
    # Training mode: dropout of the sum.
    probe.call(module.train)
    _expect_dropout(probe, probe.call(module, x), expected, p, "the output for x of shape (3, 7, 12)")
    # The defaults: PositionalEncoding(d_model) encodes up to 5000 positions.
    default = probe.call(cls, d, what=f"`{probe.name}({d})`")
    probe.call(default.eval)
    long_x = probe.randn(2, 300, d, device="cpu")
    probe.expect(
        probe.call(default, long_x),
        long_x + reference.sinusoidal_encoding(300, d),
        what=f"`{probe.name}({d})` (default max_len and dropout) on x of shape (2, 300, 12) in eval mode",
        **TABLE_TOLERANCE,
    )
    # Length: T = max_len works, T = max_len + 1 is refused.
    on_cpu = probe.call(cls, d, max_len, 0.0, what=f"`{probe.name}({d}, {max_len}, 0.0)`")
    _refuses_past_max_len(probe, lambda T: probe.call(on_cpu, probe.randn(2, T, d, device="cpu")), max_len)

    # Device: the table must move with the module.
    def on(device: torch.device):
        fresh = probe.call(cls, d, max_len, p, what=f"`{probe.name}({d}, {max_len}, {p})`")
        fresh = probe.call(fresh.to, device, what=f"`{probe.name}.to(device)`")
        probe.call(fresh.eval)
        return probe.call(fresh, probe.randn(3, 7, d, device=device))

    probe.device_pass(
        on,
        "positions_on_cpu",
        f"`{probe.name}` makes a tensor on the CPU whatever x's device (`torch.arange(T)` for the positions, a table rebuilt in forward...): on a GPU, "
        "using it with x fails with 'Expected all tensors to be on the same device'. Slice the buffer, `self.pe[:T]`, or make new tensors with `device=x.device`.",
    )


def _check_token_and_position(cls, probe: Probe) -> None:
    V, d, max_len, p = 37, 10, 30, 0.2  # sqrt(10) is no integer, and differs from sqrt(V) and sqrt(d/2)
    module = probe.build(cls, V, d, max_len, p)
    table = _fixed_table(probe, module, max_len, d)
    pe = reference.sinusoidal_encoding(max_len, d).to(probe.device)
    probe.expect(table, pe, what=f"the positional table of `{probe.name}({V}, {d}, max_len={max_len})`", mistakes=lambda: _table_faces(max_len, d), hint=TABLE_LAYOUT, **TABLE_TOLERANCE)
    tokens = _token_table(module, V, d, probe)
    with torch.no_grad():
        tokens.copy_(probe.randn(V, d))  # known values whatever the init
    probe.call(module.eval)
    ids = probe.randint(V, 3, 7)  # (B=3, T=7)
    out = probe.call(module, ids)
    weight, T = tokens.detach().float(), 7
    expected = reference.scaled_embedding(weight, ids) + pe[:T]
    fitted = _fitted_scale(out - pe[:T] if isinstance(out, torch.Tensor) and out.shape == expected.shape else out, weight[ids])

    def faces() -> dict[str, list[torch.Tensor]]:
        found = {
            "missing_scale": [mistakes.scaled_embedding_missing_scale(weight, ids) + pe[:T]],
            "divided_by_scale": [face + pe[:T] for face in mistakes.scaled_embedding_divided_by_scale(weight, ids)],
            "scaled_position_too": [mistakes.token_and_position_scaled_both(weight, ids, pe[:T])],
        }
        if fitted is not None and abs(fitted) > 1e-6:  # an all-zero output is not a scale
            found["wrong_scale"] = [mistakes.scaled_embedding_wrong_scale(weight, ids, fitted) + pe[:T]]
        for code, more in _added_table_faces(reference.scaled_embedding(weight, ids), max_len, d).items():
            found.setdefault(code, []).extend(more)
        return found

    what = "the output for ids of shape (3, 7) in eval mode"
    try:
        probe.expect(out, expected, what=what, mistakes=faces, **TABLE_TOLERANCE)
    except Failure as failure:
        if failure.code == "wrong_scale":
            probe.fail("wrong_scale", f"{failure.message} Here the token rows are multiplied by {fitted:.5g}; sqrt(d_model) = sqrt({d}) = {math.sqrt(d):.5g}.")
        raise
    # Training mode: dropout of the whole sum.
    probe.call(module.train)
    _expect_dropout(probe, probe.call(module, ids), expected, p, "the output for ids of shape (3, 7)")
    # The token table is trained: a gradient must reach it.
    tokens.grad = None
    probe.call(module.eval)
    out = probe.call(module, ids)
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        probe.fail("no_gradient", f"`{probe.name}`'s output is cut off from the token table's gradient (a .detach() or torch.no_grad()?): the embedding could never learn.")
    probe.call(lambda: out.sum().backward(), what=f"backward through `{probe.name}`")
    if tokens.grad is None:
        probe.fail("no_gradient", f"no gradient reached `{probe.name}`'s token table: compute the output from the table itself.")
    # Length: T = max_len works, T = max_len + 1 is refused.
    on_cpu = probe.call(cls, V, d, max_len, 0.0, what=f"`{probe.name}({V}, {d}, {max_len}, 0.0)`")
    _refuses_past_max_len(probe, lambda T: probe.call(on_cpu, probe.randint(V, 2, T, device="cpu")), max_len)

    # Device: the table must move with the module.
    def on(device: torch.device):
        fresh = probe.call(cls, V, d, max_len, p, what=f"`{probe.name}({V}, {d}, {max_len}, {p})`")
        fresh = probe.call(fresh.to, device, what=f"`{probe.name}.to(device)`")
        probe.call(fresh.eval)
        return probe.call(fresh, probe.randint(V, 3, 7, device=device))

    probe.device_pass(on)


register(Exercise("sinusoidal_encoding", 3, 2, "function", reference.sinusoidal_encoding, _check_sinusoidal_encoding, mistakes.SINUSOIDAL_TABLE_MISTAKES))
register(
    Exercise(
        "relative_shift_matrix",
        3,
        2,
        "function",
        reference.relative_shift_matrix,
        _check_relative_shift_matrix,
        {
            "sin_cos_swapped": mistakes.shift_sin_cos_swapped,
            "concatenated_halves": mistakes.shift_concatenated_halves,
            "wrong_base": mistakes.shift_wrong_base,
            "wrong_exponent": mistakes.shift_wrong_exponent,
            "all_zeros": mistakes.shift_all_zeros,
            "position_offset": mistakes.shift_off_by_one,
        },
    )
)
register(Exercise("PositionalEncoding", 3, 2, "module", reference.PositionalEncoding, _check_positional_encoding, {**mistakes.SINUSOIDAL_TABLE_MISTAKES, **POSITIONAL_MISTAKES}))
register(
    Exercise(
        "TokenAndPositionEmbedding",
        3,
        3,
        "module",
        reference.TokenAndPositionEmbedding,
        _check_token_and_position,
        {
            **mistakes.SINUSOIDAL_TABLE_MISTAKES,
            **POSITIONAL_MISTAKES,
            "missing_scale": mistakes.scaled_embedding_missing_scale,
            "divided_by_scale": mistakes.scaled_embedding_divided_by_scale,
            "wrong_scale": mistakes.scaled_embedding_wrong_scale,
            "scaled_position_too": mistakes.token_and_position_scaled_both,
        },
    )
)

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


LEARNED_MISTAKES = {
    "same_row_every_position": mistakes.learned_same_row,
    "batch_seq_confusion": mistakes.learned_batch_seq_confusion,
    "position_offset": mistakes.learned_position_offset,
}


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
    # The length limits, on a copy on the CPU (see _refuses_past_max_len).
    on_cpu = probe.call(cls, max_len, d, what=f"`{probe.name}({max_len}, {d})`")
    _, cpu_param = _find_table(probe, on_cpu, max_len, d)
    with torch.no_grad():
        cpu_param.copy_(table.cpu().view(cpu_param.shape))
    x = probe.randn(2, max_len, d, device="cpu")
    out = _refuses_past_max_len(probe, lambda T: probe.call(on_cpu, x if T == max_len else probe.randn(2, T, d, device="cpu")), max_len)
    table_cpu = table.cpu()
    probe.expect(out, x + table_cpu, what=f"the output for T = max_len = {max_len}", mistakes=lambda: {code: m(x, table_cpu) for code, m in LEARNED_MISTAKES.items()})
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


# Every check runs at positions in the thousands (few of them, small heads, so
# it stays fast) and once in bfloat16, where computing angles in low precision
# shows. Float32 results computed in different right ways (float64 tables,
# exp-log, complex numbers) differ by ~1e-4 at position 4000: the tolerances
# allow that and nothing more. Every mistake in the catalogue is off by O(1).
ROPE_TOLERANCE = {torch.float32: {"rtol": 1e-3, "atol": 1e-3}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 4e-2}}
CACHE_TOLERANCE = {"rtol": 0.0, "atol": 5e-4}
ROPE_MAX_LEN = 4000  # positions in the thousands; 8 × 4000 floats stay under torch's threading grain


@functools.lru_cache(maxsize=8)
def _tables(head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference cos/sin tables up to ROPE_MAX_LEN, built once (on the CPU). Never hand them to student code: clone."""
    return reference.rope_cache(head_dim, ROPE_MAX_LEN, base)


def _rope_tolerance(x: torch.Tensor) -> dict[str, float]:
    return ROPE_TOLERANCE.get(x.dtype, ROPE_TOLERANCE[torch.float32])


def _two_tensors(probe: Probe, out, what: str, names: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        got = type(out).__name__ + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
        probe.fail("wrong_type", f"{what} should return two tensors, {names}; got {got}.")
    return out[0], out[1]


def _faces(result, index: int | None = None) -> list[torch.Tensor]:
    """A mistake's result (one face or a list of faces), reduced to tensor `index` of each face."""
    faces = result if isinstance(result, list) else [result]
    return faces if index is None else [face[index] for face in faces]


def _expect_then(probe: Probe, fallback, *args, **kwargs) -> None:
    """probe.expect; if nothing more specific than wrong_values fits, `fallback(failure)`
    may name the problem better (it fails itself or returns)."""
    try:
        probe.expect(*args, **kwargs)
    except Failure as failure:
        if failure.code == "wrong_values":
            fallback(failure)
        raise


def _rope_positions(probe: Probe, *shape: int) -> torch.Tensor:
    """Positions up to ROPE_MAX_LEN - 1, including 256 and 257, which collide in bfloat16."""
    sampled = probe.randint(ROPE_MAX_LEN, *shape)
    sampled[..., :2] = torch.tensor([256, 257], device=probe.device)
    sampled[..., -1] = ROPE_MAX_LEN - 1
    return sampled


def _rope_properties(probe: Probe, rotate, head_dim: int):
    """When no known mistake reproduces the output: say which RoPE property the
    student's code keeps and which it breaks. rotate(x (1, 1, T, d), positions (T,))."""

    def fallback(failure: Failure) -> None:
        try:
            x = probe.randn(1, 1, 4, head_dim)
            turned = rotate(x, torch.tensor([3, 700, 2000, 3500], device=probe.device))
            ratio = turned.detach().float().norm(dim=-1) / x.norm(dim=-1)
            q, k = probe.randn(1, 1, 1, head_dim).repeat(1, 1, 3, 1), probe.randn(1, 1, 1, head_dim).repeat(1, 1, 3, 1)
            m = torch.tensor([7, 1007, 3007], device=probe.device)
            dots = (rotate(q, m).detach().float() * rotate(k, m - 5).detach().float()).sum(-1).flatten().tolist()
        except Exception:  # the student's code broke on these inputs: the message we have will do
            return
        if close(turned, x, rtol=1e-4, atol=1e-4):
            probe.fail("wrong_values", f"{failure.message} It returns its input unchanged: nothing is rotated (check that both q and k are turned, and returned).")
        norms_kept = bool(((ratio - 1).abs() < 1e-2).all())
        relative = max(dots) - min(dots) < 1e-2 * (1 + max(abs(d) for d in dots))
        if not norms_kept:
            said = f"It is not a rotation: ‖output‖/‖input‖ ranges from {ratio.min():.3f} to {ratio.max():.3f} instead of staying 1, so the two members of some pair are not turned by the same angle."
        elif not relative:
            said = f"Norms are kept, but q_m·k_n does not depend on m − n alone: at offset 5 it is {', '.join(f'{d:.3f}' for d in dots)} for m = 7, 1007, 3007. q and k must turn by m·θ_i and n·θ_i with the same θ_i, and positions must be used as given."
        else:
            said = "It keeps norms and q_m·k_n depends only on m − n, so it is a rotary embedding, but not this one: check the layout of the pairs, the direction of the turn, the base and the exponent of θ_i."
        probe.fail("wrong_values", f"{failure.message} {said}")

    return fallback


# rope_cache -------------------------------------------------------------------


def _collisions(probe: Probe, tables: tuple[torch.Tensor, torch.Tensor]):
    """Column 0 has θ_0 = 1, so its angle is the position itself: two equal rows
    past 255 (none before) mean positions were rounded to a low precision."""

    def fallback(failure: Failure) -> None:
        cos, sin = (t.detach().to("cpu", torch.float32) for t in tables)
        if cos.dim() != 2 or cos.shape[0] < 300:
            return
        same = (cos[1:, 0] == cos[:-1, 0]) & (sin[1:, 0] == sin[:-1, 0])  # row r == row r + 1
        if same.any() and not same[:255].any():
            row = int(same.nonzero()[0])
            probe.fail("low_precision_angles", f"{probe.explain('low_precision_angles')} (Rows {row} and {row + 1} of your tables are identical.)")

    return fallback


def _check_rope_cache(fn, probe: Probe) -> None:
    for args in ((8, ROPE_MAX_LEN), (6, 40, 500000.0)):
        call = f"rope_cache({', '.join(repr(a) for a in args)})"
        tables = _two_tensors(probe, probe.call(fn, *args, what=f"`{call}`"), f"`{call}`", "(cos, sin)")
        expected = reference.rope_cache(*args)
        if all(close(t, e, **CACHE_TOLERANCE) for t, e in zip(tables, expected[::-1])):
            probe.fail("wrong_values", f"`{call}` returned (sin, cos): return the cos table first, then the sin table.")
        for index, name in enumerate(("cos", "sin")):
            mistakes = lambda index=index, args=args: {code: _faces(m(*args), index) for code, m in probe.exercise.mistakes.items()}
            hint = "Each table has head_dim columns: the head_dim/2 angles, written twice (torch.cat([angles, angles], dim=-1))." if tables[index].shape != expected[index].shape else ""
            _expect_then(probe, _collisions(probe, tables), tables[index], expected[index], what=f"the {name} table of {call}", mistakes=mistakes, hint=hint, **CACHE_TOLERANCE)


# rotate_half ------------------------------------------------------------------


def _check_rotate_half(fn, probe: Probe) -> None:
    hint = "rotate_half turns each pair (a, b) = (x[i], x[i + d/2]) into (-b, a): cat(-x[..., d/2:], x[..., :d/2])."
    for shape, dtype in (((2, 3, 5, 8), torch.float32), ((7, 6), torch.float16), ((4, 10), torch.bfloat16)):  # no float64: MPS lacks it
        x = probe.randn(*shape, dtype=dtype)
        out = probe.call(fn, x)
        mistakes = lambda x=x: {code: m(x) for code, m in probe.exercise.mistakes.items()}
        probe.expect(out, reference.rotate_half(x), what=f"rotate_half of a {tuple(shape)} {str(dtype).replace('torch.', '')} tensor", mistakes=mistakes, hint=hint)


# apply_rope -------------------------------------------------------------------


def _check_apply_rope(fn, probe: Probe) -> None:
    d, B, Hq, Hk, T = 8, 3, 4, 2, 5  # GQA: 4 query heads share 2 key heads
    cos, sin = (t.to(probe.device, copy=True) for t in _tables(d))
    cases = (
        ("positions=None", torch.float32, None),
        ("positions 2995..2999 (decoding at an offset)", torch.float32, torch.arange(2995, 2995 + T, device=probe.device)),
        ("positions of shape (T,) up to 3999", torch.float32, _rope_positions(probe, T)),
        ("positions of shape (B, T), a different row per sequence", torch.float32, _rope_positions(probe, B, T)),
        ("bfloat16 q and k, positions up to 3999", torch.bfloat16, _rope_positions(probe, T)),
    )
    for what, dtype, positions in cases:
        q, k = probe.randn(B, Hq, T, d, dtype=dtype), probe.randn(B, Hk, T, d, dtype=dtype)
        args = (q, k, cos, sin) if positions is None else (q, k, cos, sin, positions)
        try:
            out = probe.call(fn, *args)
        except Failure as failure:
            if failure.code == "raised" and positions is not None and positions.dim() == 2:
                probe.fail("raised", f"{failure.message}. With positions of shape (B, T), cos[positions] is (B, T, Dh): unsqueeze(1) it to (B, 1, T, Dh) so it broadcasts over the heads.")
            raise
        out = _two_tensors(probe, out, f"`{probe.name}`", "(q_rot, k_rot)")
        expected = reference.apply_rope(*args)

        for index, name in enumerate(("q_rot", "k_rot")):

            def rotate(x, p, index=index):
                return probe.call(fn, x, x, cos, sin, p)[index]

            mistakes = lambda index=index, args=args: {code: _faces(m(*args), index) for code, m in probe.exercise.mistakes.items()}
            shape = f"{tuple(expected[index].shape)} {str(dtype).replace('torch.', '')}"
            fallback = _bf16_arithmetic(probe) if dtype == torch.bfloat16 else _rope_properties(probe, rotate, d)
            _expect_then(probe, fallback, out[index], expected[index], what=f"{name} {shape}, {what},", mistakes=mistakes, **_rope_tolerance(q))


def _bf16_arithmetic(probe: Probe):
    def fallback(failure: Failure) -> None:  # the float32 probes passed: the precision is what differs
        probe.fail(
            "wrong_values", f"{failure.message} Your code is right in float32 but not in bfloat16: do the arithmetic in float32 (q.float() * cos + ...) and cast the result back with .to(q.dtype)."
        )

    return fallback


# rope_interleaved -------------------------------------------------------------


def _low_precision(probe: Probe):
    def fallback(failure: Failure) -> None:  # the float32 probes passed: the precision is what differs
        probe.fail("low_precision_angles", probe.explain("low_precision_angles"))

    return fallback


def _check_rope_interleaved(fn, probe: Probe) -> None:
    positions = _rope_positions(probe, 6)
    cases = (  # (what, x, extra arguments)
        ("x (2, 3, 7, 8), default positions and base", probe.randn(2, 3, 7, 8), ()),
        ("x (2, 3, 6, 12), positions up to 3999, base=500000.0", probe.randn(2, 3, 6, 12), (positions, 500000.0)),
        ("x (2, 3, 6, 12) in bfloat16, positions up to 3999", probe.randn(2, 3, 6, 12, dtype=torch.bfloat16), (positions,)),
    )
    for what, x, extra in cases:
        out = probe.call(fn, x, *extra)
        expected = reference.rope_interleaved(x, *extra)
        mistakes = lambda x=x, extra=extra: {code: m(x, *extra) for code, m in probe.exercise.mistakes.items()}

        def rotate(x, p, fn=fn):
            return probe.call(fn, x, p)

        fallback = _low_precision(probe) if x.dtype == torch.bfloat16 else _rope_properties(probe, rotate, x.shape[-1])
        _expect_then(probe, fallback, out, expected, what=f"the output for {what},", mistakes=mistakes, **_rope_tolerance(x))
    probe.device_pass(lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device)))
    probe.device_pass(lambda device: probe.call(fn, probe.randn(2, 3, 5, 8, device=device), torch.arange(5, device=device), 500000.0))


# RotaryEmbedding --------------------------------------------------------------


def _check_rotary_embedding(cls, probe: Probe) -> None:
    d, B, Hq, Hk, T = 8, 3, 4, 2, 5
    module = probe.build(cls, d, ROPE_MAX_LEN)
    # Device: a tensor kept as a plain attribute stays behind when .to(device) moves the module.
    plain = [name for name, value in vars(module).items() if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter)]
    if plain:
        probe.fail(
            "pe_not_buffer",
            f"`{probe.name}` keeps {', '.join(plain)} as plain tensor attributes: module.to('cuda') does not move those, so on a GPU your forward mixes devices. Register each with self.register_buffer(name, tensor, persistent=False).",
        )
    # Values: the same cases as apply_rope, then a module with another head size and base.
    cases = (
        ("positions=None", torch.float32, None),
        ("positions 2995..2999 (decoding at an offset)", torch.float32, torch.arange(2995, 2995 + T, device=probe.device)),
        ("positions of shape (T,) up to 3999", torch.float32, _rope_positions(probe, T)),
        ("positions of shape (B, T), a different row per sequence", torch.float32, _rope_positions(probe, B, T)),
        ("bfloat16 q and k, positions up to 3999", torch.bfloat16, _rope_positions(probe, T)),
    )
    runs = [(module, d, 10000.0, f"{probe.name}({d}, {ROPE_MAX_LEN})", case) for case in cases]
    runs.append((probe.build(cls, 12, 64, 500.0), 12, 500.0, f"{probe.name}(12, 64, 500.0)", ("positions=None", torch.float32, None)))
    for built, head_dim, base, made, (what, dtype, positions) in runs:
        q, k = probe.randn(B, Hq, T, head_dim, dtype=dtype), probe.randn(B, Hk, T, head_dim, dtype=dtype)
        extra = () if positions is None else (positions,)
        call = f"`{made}` called with {what}"
        out = _two_tensors(probe, probe.call(built, q, k, *extra, what=call), call, "(q_rot, k_rot)")
        tables = (t.to(probe.device) for t in _tables(head_dim, base))
        expected = reference.apply_rope(q, k, *tables, *extra)

        for index, (x, got, want, name) in enumerate(zip((q, k), out, expected, ("q_rot", "k_rot"))):

            def rotate(x, p, built=built, index=index):
                return probe.call(built, x, x, p)[index]

            mistakes = lambda x=x, positions=positions, base=base: {code: m(x, positions, base) for code, m in probe.exercise.mistakes.items()}
            fallback = _low_precision(probe) if dtype == torch.bfloat16 else _rope_properties(probe, rotate, head_dim)
            _expect_then(probe, fallback, got, want, what=f"{name} {tuple(want.shape)} from {made} with {what},", mistakes=mistakes, **_rope_tolerance(x))
    # Hygiene: nothing to train, nothing to save. The tables are rebuilt from the arguments.
    saved = list(module.state_dict())
    if saved:
        kinds = {name: "an nn.Parameter" if name in dict(module.named_parameters()) else "a persistent buffer" for name in saved}
        listed = ", ".join(f"{name} ({kind})" for name, kind in kinds.items())
        probe.fail(
            "cache_is_parameter",
            f"`{probe.name}` saves {listed} in its state_dict. The cos/sin tables are fixed and rebuilt from (head_dim, max_len, base): an optimizer must never train them and checkpoints must not carry them (a model built with another max_len could not load one). Use self.register_buffer(name, tensor, persistent=False).",
        )
    # Length: refuse positions past the table. On the CPU, always: on a GPU an
    # out-of-range gather is a device-side assert that breaks the CUDA context.
    small = probe.call(cls, 8, 16, what=f"`{probe.name}(8, 16)`")
    q, k = probe.randn(1, 2, 4, 8, device="cpu"), probe.randn(1, 1, 4, 8, device="cpu")
    for extra, what in (((torch.tensor([0, 5, 16, 3]),), "positions [0, 5, 16, 3]"), ((), "17 tokens and positions=None")):
        x, y = (q, k) if extra else (probe.randn(1, 2, 17, 8, device="cpu"), probe.randn(1, 1, 17, 8, device="cpu"))
        call = f"`{probe.name}(8, max_len=16)` called with {what}"
        try:
            probe.call(small, x, y, *extra, what=call)
        except Failure as failure:
            if failure.code == "raised" and " raised ValueError" in failure.message:
                continue
            if failure.code != "raised":
                raise
            probe.fail(
                "no_length_check",
                f"{failure.message}, not a ValueError. Check the largest position against max_len yourself and raise ValueError naming max_len, e.g. 'position 16 is past max_len=16: build RotaryEmbedding with a larger max_len'.",
            )
        probe.fail(
            "no_length_check",
            f"{call} returned without complaint. Position 16 is past a table of 16 rows: raise ValueError naming max_len (an index past the end crashes a GPU with a device-side assert, and wraps around silently with negative indexing).",
        )

    # Device: every tensor on the meta device; a table or position made on the CPU shows.
    def on_device(device: torch.device):
        fresh = probe.build(cls, 8, 16)  # a new one for every run: .to() moves a module in place
        moved = probe.call(fresh.to, device, what=f"`{probe.name}.to(device)`")
        return probe.call(moved, probe.randn(1, 2, 4, 8, device=device), probe.randn(1, 1, 4, 8, device=device))

    probe.device_pass(on_device)


register(
    Exercise(
        "rope_cache",
        5,
        2,
        "function",
        reference.rope_cache,
        _check_rope_cache,
        {
            "rope_interleaved_convention": mistakes.rope_cache_interleaved,
            "wrong_base": mistakes.rope_cache_wrong_base,
            "wrong_exponent": mistakes.rope_cache_wrong_exponent,
            "rope_mixed_pairing": mistakes.rope_cache_mixed_pairing,
            "low_precision_angles": mistakes.rope_cache_low_precision,
            "position_offset": mistakes.rope_cache_position_offset,
        },
    )
)
register(
    Exercise(
        "rotate_half",
        5,
        1,
        "function",
        reference.rotate_half,
        _check_rotate_half,
        {
            "rope_sign_flip": mistakes.rotate_half_sign_flip,
            "rope_interleaved_convention": mistakes.rotate_half_interleaved,
            "rope_mixed_pairing": mistakes.rotate_half_mixed_pairing,
        },
    )
)
register(
    Exercise(
        "apply_rope",
        5,
        3,
        "function",
        reference.apply_rope,
        _check_apply_rope,
        {
            "rope_interleaved_convention": mistakes.apply_rope_interleaved,
            "rope_sign_flip": mistakes.apply_rope_sign_flip,
            "rope_mixed_pairing": mistakes.apply_rope_mixed_pairing,
            "rope_ignores_positions": mistakes.apply_rope_ignores_positions,
        },
    )
)
register(
    Exercise(
        "rope_interleaved",
        5,
        3,
        "function",
        reference.rope_interleaved,
        _check_rope_interleaved,
        {
            "rope_half_split_convention": mistakes.rope_interleaved_half_split,
            "rope_sign_flip": mistakes.rope_interleaved_sign_flip,
            "rope_mixed_pairing": mistakes.rope_interleaved_mixed_pairing,
            "rope_ignores_positions": mistakes.rope_interleaved_ignores_positions,
            "wrong_base": mistakes.rope_interleaved_wrong_base,
            "wrong_exponent": mistakes.rope_interleaved_wrong_exponent,
            "low_precision_angles": mistakes.rope_interleaved_low_precision,
        },
    )
)
register(
    Exercise(
        "RotaryEmbedding",
        5,
        3,
        "module",
        reference.RotaryEmbedding,
        _check_rotary_embedding,
        {
            "rope_interleaved_convention": mistakes.rotary_interleaved,
            "rope_sign_flip": mistakes.rotary_sign_flip,
            "rope_mixed_pairing": mistakes.rotary_mixed_pairing,
            "rope_ignores_positions": mistakes.rotary_ignores_positions,
            "wrong_base": mistakes.rotary_wrong_base,
            "wrong_exponent": mistakes.rotary_wrong_exponent,
            "low_precision_angles": mistakes.rotary_low_precision,
        },
    )
)

# (end of chapter 05)


# ---------------------------------------------------------------------------
# Chapter 06: comparing, and ALiBi
# ---------------------------------------------------------------------------

MASKED = -1e9  # a bias this negative is a mask to softmax, as -inf is (torch.finfo(dtype).min, -1e9...)


def _alibi_probe(fn, probe: Probe, cases: tuple[tuple[int, ...], ...], hint: str) -> None:
    """Each case is the arguments of one call, head count first; powers of two come
    first. When those pass and another head count fails, the rule for a head count
    that is not a power of two is what is missing."""
    for args in cases:
        call = f"`{probe.exercise.id}({', '.join(repr(a) for a in args)})`"
        try:
            out = _float64_accepted(probe.call(fn, *args, what=call))
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                out = out.masked_fill(out <= MASKED, float("-inf"))  # any such bias is a mask to softmax
            probe.against_reference(out, *args, what=f"the result of {call}", hint=hint)
        except Failure as failure:
            n_heads = args[0]
            if n_heads & (n_heads - 1) == 0 or failure.code not in ("raised", "wrong_shape", "wrong_values", "nan_or_inf"):
                raise
            probe.fail(
                "non_power_of_two",
                f"{failure.message.rstrip('.')}. Your code is right for 1, 2, 4, 8 and 16 heads but not for {n_heads}: for a head count that is not a power of two, "
                "Press et al. take the slopes of the closest smaller power of two n', then every other slope of 2n' heads ([0::2]) for the rest.",
            )


def _check_alibi_slopes(fn, probe: Probe) -> None:
    hint = "For n heads, n a power of two, the slopes are 2^(-8/n), 2^(-16/n), ..., 2^(-8): for 8 heads 1/2, 1/4, ..., 1/256."
    _alibi_probe(fn, probe, ((8,), (16,), (2,), (1,), (4,), (12,), (6,), (20,)), hint)


def _check_alibi_bias(fn, probe: Probe) -> None:
    hint = "bias[h, i, j] is for query i (a row) and key j (a column): -m_h · (i - j) for j <= i, -inf for j > i."
    _alibi_probe(fn, probe, ((4, 6), (8, 5), (1, 3), (6, 7), (12, 4)), hint)


register(
    Exercise(
        "alibi_slopes",
        6,
        2,
        "function",
        reference.alibi_slopes,
        _check_alibi_slopes,
        {"non_power_of_two": mistakes.alibi_slopes_naive, "wrong_sign": mistakes.alibi_slopes_wrong_sign},
    )
)
register(
    Exercise(
        "alibi_bias",
        6,
        2,
        "function",
        reference.alibi_bias,
        _check_alibi_bias,
        {"non_power_of_two": mistakes.alibi_bias_naive, "wrong_sign": mistakes.alibi_bias_wrong_sign, "missing_causal_mask": mistakes.alibi_bias_missing_causal_mask},
    )
)

# (end of chapter 06)
