"""What several chapters' checks share: finding a student's tables, the length,
dropout and device probes, fitted constants, and the mistakes two exercises
make alike. A chapter module imports from here; nothing here knows a chapter."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from helpers.checking import Failure, Probe, close

# ---------------------------------------------------------------------------
# Mistakes shared by several exercises
# ---------------------------------------------------------------------------


def says(message: str) -> Callable[[Callable], Callable]:
    """Give a mistake the shared wording of its code (a mistake's docstring is its message)."""

    def decorate(mistake: Callable) -> Callable:
        mistake.__doc__ = message
        return mistake

    return decorate


WRONG_BASE = """Your frequencies use the wrong base: 1000 instead of 10000 (a typo
that popular tutorials carry), or a hard-coded 10000 where the `base`
argument asked for another (Llama 3 uses 500000). Pair i's frequency is
base^(-2i/d): compute it from the `base` you were given."""


def frequencies(d: int, base: float, exponent: str = "2i/d", dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """ω_i = base^(-2i/d), one per (sin, cos) or rotated pair, i < ceil(d/2), with the
    exponent written right ("2i/d") or in one of the usual wrong ways. Chapters 03 and 05."""
    i = torch.arange((d + 1) // 2, dtype=dtype, device=device)
    exponents = {
        "2i/d": -2 * i / d,
        "i/d": -i / d,  # forgot the 2
        "4i/d": -4 * i / d,  # arange(0, d, 2) / (d/2)
        "+2i/d": 2 * i / d,  # base ** (2i/d) used as the frequency: 1/ forgotten
        "integer": torch.zeros_like(i),  # arange(0, d, 2) // d: integer division, all zeros
    }
    return base ** exponents[exponent]


# Position tables added to x (B, T, d): PositionalEncoding (03) and
# LearnedPositionalEmbedding (04). Each takes x and the right (max_len, d) table.


def added_same_row(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """Every position got the same vector: you added a single row of the
    table (row 0, or row T) instead of the first T rows. Add one row per
    position, `table[:T]` or a lookup of `torch.arange(T, device=x.device)`,
    with T = x.size(1): a (T, d_model) block that broadcasts over the batch."""
    T = x.shape[1]
    return [x + table[0], x + table[T - 1], x + table[min(T, len(table) - 1)]]


def added_batch_seq_confusion(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """You counted positions along the batch axis: x.size(0) is the batch
    size B here, not the sequence length. The PyTorch tutorial's
    PositionalEncoding expects (T, B, d), sequence first; this course's
    modules take (B, T, d), batch first. Take T = x.size(1) and add the
    (T, d_model) rows, which broadcast over the batch."""
    B = x.shape[0]
    return [x + table[:B].unsqueeze(1)]  # (B, T, d) + (B, 1, d): sequence b gets position b everywhere


def added_position_offset(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """Your positions start at 1 (or 2, RoBERTa's padding_idx + 1 offset),
    not at 0: the first token must get row 0 of the table. Use rows
    0 .. T-1: `table[:T]`, or torch.arange(T), not torch.arange(1, T + 1)."""
    T = x.shape[1]
    return [x + table[k : k + T] for k in (1, 2) if k + T <= len(table)]


POSITION_ADDING_MISTAKES = {
    "same_row_every_position": added_same_row,
    "batch_seq_confusion": added_batch_seq_confusion,
    "position_offset": added_position_offset,
}


# The scaled token lookup, table[ids] * sqrt(d): ScaledEmbedding (02) and
# TokenAndPositionEmbedding (03). Each takes the (V, d) table, the ids and the
# constant fitted to the student's output (None when none fits).


def missing_scale(weight: torch.Tensor, ids: torch.Tensor, scale: float | None) -> torch.Tensor:
    """Your module returns the embedding rows as they are: the factor
    sqrt(d_model) is missing. Vaswani et al. (§3.4) multiply the looked-up
    vectors by sqrt(d_model) in forward: `return self.embedding(ids) *
    math.sqrt(self.d_model)`. (Scaling the weight once in __init__ is not the
    same: the optimizer then trains the scaled table.)"""
    return weight[ids]


def divided_by_scale(weight: torch.Tensor, ids: torch.Tensor, scale: float | None) -> list[torch.Tensor]:
    """Your module divides the embedding rows by sqrt(d_model) (or multiplies
    by d_model ** -0.5); Vaswani et al. multiply by it. The factor makes
    small token vectors bigger, to match the positional encodings: use
    `* math.sqrt(d_model)`."""
    rows = weight[ids]
    return [rows / math.sqrt(weight.shape[1]), rows * weight.shape[1] ** -0.5]


def wrong_scale(weight: torch.Tensor, ids: torch.Tensor, scale: float | None) -> list[torch.Tensor]:
    """Your module multiplies the embedding rows by a constant, but not by
    sqrt(d_model): d_model itself, sqrt(vocab_size), sqrt(d_model / 2), a
    log, a rounded number...? The factor is `math.sqrt(d_model)`, where
    d_model is the width of each vector (the embedding's second dimension)."""
    if scale is None or abs(scale) <= 1e-6:  # an all-zero output is wrong_values, not a scale
        return []
    return [weight[ids] * scale]


SCALE_MISTAKES = {"missing_scale": missing_scale, "divided_by_scale": divided_by_scale, "wrong_scale": wrong_scale}


def name_the_scale(probe: Probe, failure: Failure, scale: float | None, d_model: int) -> None:
    """A wrong_scale diagnosis, with the constant the student's rows were multiplied by."""
    if failure.code == "wrong_scale":
        probe.fail(
            "wrong_scale",
            f"{failure.message} Here the token rows are multiplied by {scale:.5g}; sqrt(d_model) = sqrt({d_model}) = {math.sqrt(d_model):.5g}.",
        )


# ---------------------------------------------------------------------------
# Reading results
# ---------------------------------------------------------------------------


def faces(result: Any, index: int | None = None) -> list[torch.Tensor]:
    """A mistake's result (one face or a list of faces), reduced to tensor `index` of each face."""
    found = result if isinstance(result, list) else [result]
    return found if index is None else [face[index] for face in found if face is not None]


def expect_then(probe: Probe, fallback: Callable[[Failure], None], *args: Any, **kwargs: Any) -> None:
    """probe.expect; if nothing more specific than wrong_values fits, `fallback(failure)`
    may name the problem better (it fails itself or returns)."""
    try:
        probe.expect(*args, **kwargs)
    except Failure as failure:
        if failure.code == "wrong_values":
            fallback(failure)
        raise


def float64_accepted(out: Any) -> Any:
    """Small matrices and vectors may come in float64 (NumPy's default): compared as float32."""
    return out.float() if isinstance(out, torch.Tensor) and out.dtype == torch.float64 else out


def fitted_scale(out: Any, rows: torch.Tensor) -> float | None:
    """The constant c for which c * rows is closest to `out` (least squares), if it can be fitted."""
    if not isinstance(out, torch.Tensor) or out.shape != rows.shape or out.is_meta or not out.is_floating_point():
        return None
    a, b = out.detach().to("cpu", torch.float64), rows.detach().to("cpu", torch.float64)
    if not torch.isfinite(a).all() or float((b * b).sum()) == 0.0:
        return None
    return float((a * b).sum() / (b * b).sum())


def raised(failure: Failure, exception: str) -> bool:
    """Did the student's call raise `exception` (by name)?"""
    return failure.code == "raised" and f" raised {exception}" in failure.message


# ---------------------------------------------------------------------------
# Finding a student's tensors: by role and shape, never by attribute name
# ---------------------------------------------------------------------------


def registered_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def plain_tensors(module: nn.Module, fits: Callable[[torch.Tensor], bool] = lambda t: True) -> list[str]:
    """Tensors kept as plain attributes: .to(device) leaves them behind and state_dict() forgets them."""
    return [name for name, value in vars(module).items() if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter) and fits(value)]


def is_table(tensor: torch.Tensor, rows: int, d: int) -> bool:
    """(rows, d), give or take size-1 axes ((1, max_len, d) as ViT keeps it, (max_len, 1, d) as the PyTorch tutorial does)."""
    return [size for size in tensor.shape if size != 1] == [rows, d]


def find_table(probe: Probe, module: nn.Module, rows: int, d: int, what: str) -> tuple[str, torch.Tensor]:
    """The student's (rows, d) parameter or buffer, found by shape. Fails with
    wrong_shape (naming what the module holds) when there is none."""
    tensors = registered_tensors(module)
    for name, tensor in tensors.items():
        if is_table(tensor, rows, d):
            return name, tensor
    found = ", ".join(f"{n} {tuple(t.shape)}" for n, t in tensors.items()) or "none"
    probe.fail("wrong_shape", f"`{probe.name}` has no parameter or buffer of shape {(rows, d)} for {what} (it has: {found}).")


def token_table(probe: Probe, module: nn.Module, vocab_size: int, d_model: int) -> torch.Tensor:
    """The student's (V, d) token table; a (d, V) one means swapped arguments."""
    tensors = registered_tensors(module)
    if not any(tuple(t.shape) == (vocab_size, d_model) for t in tensors.values()):
        swapped = [name for name, t in tensors.items() if tuple(t.shape) == (d_model, vocab_size)]
        if swapped:
            probe.fail(
                "wrong_shape",
                f"`{probe.name}({vocab_size}, {d_model})` holds `{swapped[0]}` of shape ({d_model}, {vocab_size}): the two sizes are swapped. "
                "nn.Embedding(num_embeddings, embedding_dim) takes the vocabulary first: one row of d_model numbers per token.",
            )
    return find_table(probe, module, vocab_size, d_model, "the token embedding table")[1]


# ---------------------------------------------------------------------------
# Probes of a module's behaviour
# ---------------------------------------------------------------------------


def refuses(probe: Probe, run: Callable[[], Any], what: str, advice: str) -> None:
    """run() asks for a position the module has no row for: it must raise a ValueError.
    Call it on the CPU: on CUDA an index past a table is a device-side assert that
    breaks every later CUDA call in the process."""
    try:
        run()
    except Failure as failure:
        if raised(failure, "ValueError"):
            return
        if failure.code != "raised":
            raise
        error = failure.message.split(" raised ", 1)[-1].rstrip(".")
        probe.fail(
            "no_length_check",
            f"For {what}, `{probe.name}` raised {error}, not a ValueError. That is what your users would meet (and with a table lookup on a GPU, "
            f"'CUDA error: device-side assert triggered', which breaks the whole process). {advice}",
        )
    probe.fail(
        "no_length_check",
        f"For {what}, `{probe.name}` returned a result: the table has no row for that position. {advice}",
    )


def refuses_past_max_len(probe: Probe, run: Callable[[int], Any], max_len: int) -> Any:
    """run(T) calls the module on a sequence of length T, on the CPU. T = max_len
    must work (its output is returned); T = max_len + 1 must raise a ValueError."""
    try:
        out = run(max_len)
    except Failure as failure:
        if raised(failure, "ValueError"):
            probe.fail(
                "length_check_off_by_one",
                f"`{probe.name}` refused a sequence of exactly max_len = {max_len} tokens: positions 0..{max_len - 1} all have a row. Refuse only T > max_len.",
            )
        raise
    advice = f"Check T against max_len first and raise a ValueError that says what to do, e.g. 'sequence length {max_len + 1} > max_len {max_len}: build the module with a larger max_len'."
    refuses(probe, lambda: run(max_len + 1), f"T = max_len + 1 = {max_len + 1}", advice)
    return out


def dropout_rate(out: Any, expected: torch.Tensor) -> float | None:
    """If `out` is `expected` with some entries zeroed and the others scaled by
    one common factor 1/(1-p), as dropout applied last does, the p that factor
    implies; else None."""
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


DROPOUT_RATE_TOLERANCE = 0.02  # the scale 1/(1-p) gives p to float precision; a wrong rate is off by 0.05 or more
DROPPED_FRACTION_TOLERANCE = 0.1  # the share of zeros is random: about 3.5 standard deviations for 250 entries


def expect_dropout(probe: Probe, out: Any, expected: torch.Tensor, p: float, what: str, *, where: str, not_dropout: tuple[str, str]) -> None:
    """In training mode `out` must be dropout(expected) at rate p: entries zeroed,
    the rest scaled by 1/(1-p). `where` says where the dropout belongs;
    `not_dropout` is the (code, message) for an output that is no dropout at all."""
    if close(out, expected):
        probe.fail("missing_dropout", f"In training mode {what} equals its eval-mode value: no dropout was applied. {where}")
    rate = dropout_rate(out, expected)
    if rate is None:
        probe.fail(*not_dropout)
    dropped = float((out == 0).float().mean())
    if abs(rate - p) > DROPOUT_RATE_TOLERANCE or abs(dropped - p) > DROPPED_FRACTION_TOLERANCE:
        probe.fail(
            "dropout_rate_ignored",
            f"In training mode {what} looks like dropout with p = {rate:.2f} ({dropped:.0%} of the values were zeroed), but the module was built with rate {p}: "
            "pass the constructor's argument to nn.Dropout, not a fixed rate.",
        )


def expect_no_dropout_in_eval(probe: Probe, out: Any, expected: torch.Tensor) -> None:
    """After .eval(), dropout must be off: F.dropout(x, p) defaults to training=True."""
    if dropout_rate(out, expected) is not None:
        probe.fail(
            "dropout_in_eval",
            f"In eval mode `{probe.name}` still drops values: dropout must switch off after .eval(). Use the module `self.dropout = nn.Dropout(p)`, "
            "or pass `training=self.training` to F.dropout (its default is training=True).",
        )


def module_device_pass(
    probe: Probe,
    cls: type,
    args: tuple | Callable[[torch.device], tuple],
    inputs: Callable[[torch.device], tuple],
    *,
    kwargs: dict[str, Any] | None = None,
    mode: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    code: str = "wrong_device",
    message: str = "",
) -> None:
    """probe.device_pass for a module: a fresh one for every run (.to() moves a
    module in place), built from `args` (or args(device)), moved to the device,
    in eval mode, called on inputs(device) under `mode()`."""

    def run(device: torch.device) -> Any:
        built_with = args(device) if callable(args) else args
        fresh = probe.call(cls, *built_with, what=f"`{probe.name}(...)`", **(kwargs or {}))
        fresh = probe.call(fresh.to, device, what=f"`{probe.name}.to(device)`")
        probe.call(fresh.eval, what=f"`{probe.name}.eval()`")
        with mode():
            return probe.call(fresh, *inputs(device))

    probe.device_pass(run, code, message)
