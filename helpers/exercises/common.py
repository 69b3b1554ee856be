"""What several chapters' checks share: finding a student's tables, the length,
dropout and device probes, fitted constants, and the mistakes two exercises
make alike. A chapter module imports from here; nothing here knows a chapter."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from helpers.contracts import dropout_rate
from helpers.probe import Probe, close
from helpers.safety import Failure

# ---------------------------------------------------------------------------
# Mistakes shared by several exercises
# ---------------------------------------------------------------------------


def says(message: str) -> Callable[[Callable], Callable]:
    """Give a mistake the shared wording of its code: a mistake's docstring is its
    message, then its "Hint:" and "Fix:" paragraphs (see probe.advice)."""

    def decorate(mistake: Callable) -> Callable:
        mistake.__doc__ = message
        return mistake

    return decorate


# Exercise(no_device_pass=...) of a function that takes no tensor (a length, a head count): nothing to follow.
TAKES_NO_TENSOR = (
    "it takes no tensor: its result is made on the CPU, as the reference's is, and moved by the code that uses it"
)

WRONG_BASE = """Your frequencies use the wrong base: 1000 instead of 10000 (a typo
that popular tutorials carry), or a hard-coded 10000 where the `base`
argument asked for another (Llama 3 uses 500000).

Hint: Pair i's frequency is base^(-2i/d), so every frequency depends on the
base. Run your code with two different bases: does the result change, and
does the default give 10000?

Fix: Compute the frequencies from the argument, with 10000.0 as its default:
`base ** (-torch.arange(0, d, 2) / d)`, or
`torch.exp(-math.log(base) * torch.arange(0, d, 2) / d)`; no 1000 or 10000
written into the formula."""


def frequencies(
    d: int, base: float, exponent: str = "2i/d", dtype: torch.dtype = torch.float64, device: torch.device | str = None
) -> torch.Tensor:
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


# ---------------------------------------------------------------------------
# How a result was made: the torch calls of one call into student code
# ---------------------------------------------------------------------------


def calls_of(probe: Probe, fn: Callable, *args: Any) -> set[str]:
    """The names of the torch functions one call of `fn` ran: a call of its own, because
    probe.calls_seen also holds what the probes ran through earlier outputs (a gradient
    probe's `(out * seed).sum()`)."""
    probe.calls_seen.clear()
    probe.call(fn, *args)
    return set(probe.calls_seen)


# ---------------------------------------------------------------------------
# Tolerances from the dtype and the size of the computation
# ---------------------------------------------------------------------------

# sin and cos of an angle a = m·ω, with ω = base^(-2i/d), computed in float32 are off by
# about eps·|a|·(1 + |ln ω|): the product m·ω rounds once, and ω inherits the rounding of
# its exponent times |ln ω|. The result is rounded once more to its own dtype. Measured
# against float64, at positions up to 3999 (head_dim 8, base 10000), in units of
# eps(float32)·|x|·(1 + |a|·(1 + |ln ω|)): right implementations (float64 then cast,
# float32 pow or exp-log, the angles by a matmul or in another order, complex numbers, a
# loop) 0.14 to 0.5; float16 cos/sin tables in a float32 pipeline 250 to 960, bfloat16
# tables 3000 to 6000, angles, positions or frequencies in float16 240 to 1800. The
# margins below sit between the two, a factor of 4 to 16 from the right side and 30
# from the wrong one. On CUDA this assumes PyTorch's default, TF32 off for matmuls
# (torch.backends.cuda.matmul.allow_tf32 = False): TF32 rounds a matmul's inputs to 10
# bits, positions past 2048 included, and angles made that way are low precision indeed.
ROUNDINGS = 2.0  # units of eps(result dtype) on each entry's magnitude
ANGLE_ROUNDINGS = 8.0  # units of eps(angle dtype) on |a|·(1 + |ln ω|)


def angle_tolerance(
    dtype: torch.dtype,
    angles: torch.Tensor,
    frequencies: torch.Tensor,
    magnitude: torch.Tensor | float = 1.0,
    angle_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Entry by entry, the absolute error a right computation of a result in `dtype` built
    from sin and cos of `angles` (= positions × `frequencies`, broadcast alike) may make,
    with the angles worked out in `angle_dtype`; `magnitude` is the size of what is turned
    (1 for a table, |x| for a rotated x). Use it with rtol=0, against a float64 reference."""
    eps, angle_eps = torch.finfo(dtype).eps, torch.finfo(angle_dtype).eps
    growth = angles.abs() * (1 + frequencies.abs().log().abs())
    return magnitude * (ROUNDINGS * eps + ANGLE_ROUNDINGS * angle_eps * growth)


def half_precision_error(
    out: Any, expected: torch.Tensor, tight: torch.Tensor, loose: torch.Tensor, size: torch.Tensor | float = 1.0
) -> torch.Tensor | None:
    """For a result that missed `tight` (float32 rounding, angle_tolerance): its error, entry by
    entry, when one step through a half dtype explains it, else None. It explains it when every
    entry is within `loose` (what that step would make) and some entry too far off for float32
    has a `loose` under a quarter of the `size` of what it bounds: at a large angle half
    precision allows any error, so those entries prove nothing."""
    if not (
        isinstance(out, torch.Tensor) and out.shape == expected.shape and close(out, expected, rtol=0.0, atol=loose)
    ):
        return None
    error = (out.detach().to("cpu", torch.float64) - expected.detach().to("cpu", torch.float64)).abs()
    informative = (error > tight) & (loose < size / 4)
    return error if bool(informative.any()) else None


def precision_first(
    probe: Probe,
    out: Any,
    expected: torch.Tensor,
    tight: torch.Tensor,
    loose: torch.Tensor,
    then: Callable[[Failure], None],
    *,
    code: str,
    said: str,
    fix: str,
    hint: str = "",
    size: torch.Tensor | float = 1.0,
    at_row: bool = False,
) -> Callable[[Failure], None]:
    """expect_then's fallback for a float32 result off by more than float32 rounding (`tight`):
    when one step through a half dtype explains it (`loose`, of what has magnitude `size`: see
    half_precision_error), half precision on the way is the finding, `code`, and the message
    says by how much (`at_row`: and where, for a table) and then `said`; otherwise `then` reads
    the output. An empty `hint` is the exercise's (see probe.advice)."""

    def fallback(failure: Failure) -> None:
        error = half_precision_error(out, expected, tight, loose, size)
        if error is None:
            then(failure)
            return
        where = ""
        if at_row:
            row, column = [int(i) for i in torch.unravel_index(error.argmax(), error.shape)][-2:]
            where = f" (at row {row}, column {column})"
        probe.fail(
            code,
            f"{failure.message.split(';')[0]}, by up to {float(error.max()):.1e}{where}: {said}",
            hint=hint,
            fix=fix,
        )

    return fallback


# Position tables added to x (B, T, d): PositionalEncoding (03) and
# LearnedPositionalEmbedding (04). Each takes x and the right (max_len, d) table.


def added_same_row(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """Every position got the same vector: you added a single row of the
    table (row 0, or row T) instead of the first T rows.

    Hint: Position t must get row t, so the block you add needs one row per
    position: T rows of d_model numbers, which then broadcast over the batch.

    Fix: With T = x.size(1), add the first T rows, `x + table[:T]`
    (`table[:, :T]` for a (1, max_len, d_model) table), or look up
    `torch.arange(T, device=x.device)` in your nn.Embedding."""
    T = x.shape[1]
    return [x + table[0], x + table[T - 1], x + table[min(T, len(table) - 1)]]


def added_batch_seq_confusion(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """You counted positions along the batch axis: x.size(0) is the batch
    size B here, not the sequence length.

    Hint: The PyTorch tutorial's PositionalEncoding expects (T, B, d),
    sequence first; this course's modules take (B, T, d), batch first.

    Fix: Take T = x.size(1) and add `table[:T]`, shape (T, d_model), as it
    is: it broadcasts over the batch, with no unsqueeze(1)."""
    B = x.shape[0]
    return [x + table[:B].unsqueeze(1)]  # (B, T, d) + (B, 1, d): sequence b gets position b everywhere


def added_position_offset(x: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor]:
    """Your positions start at 1 (or 2, RoBERTa's padding_idx + 1 offset),
    not at 0: the first token did not get row 0 of the table.

    Hint: Positions count from 0, like Python's indices: a sequence of T
    tokens uses rows 0 .. T-1. RoBERTa's offset belongs to RoBERTa's own
    checkpoints, not to this module.

    Fix: Add the first T rows, `table[:T]`, or look up
    `torch.arange(T, device=x.device)`, not `torch.arange(1, T + 1)`."""
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
    sqrt(d_model) is missing.

    Hint: Vaswani et al. (§3.4) multiply the looked-up vectors by
    sqrt(d_model) on every forward pass. Scaling the weight once in __init__
    is not the same: the optimizer would then train the scaled table.

    Fix: Multiply in forward, `self.embedding(ids) * math.sqrt(self.d_model)`,
    with d_model kept from __init__."""
    return weight[ids]


def divided_by_scale(weight: torch.Tensor, ids: torch.Tensor, scale: float | None) -> list[torch.Tensor]:
    """Your module divides the embedding rows by sqrt(d_model) (or multiplies
    them by d_model ** -0.5): they come out smaller, not bigger.

    Hint: Vaswani et al. (§3.4) multiply. The factor brings the small token
    vectors up to the size of the positional encodings (about 1 per entry),
    so it must be greater than 1.

    Fix: Multiply the looked-up rows by `math.sqrt(self.d_model)` instead of
    dividing by it (or raising d_model to the power -0.5)."""
    rows = weight[ids]
    return [rows / math.sqrt(weight.shape[1]), rows * weight.shape[1] ** -0.5]


def wrong_scale(weight: torch.Tensor, ids: torch.Tensor, scale: float | None) -> list[torch.Tensor]:
    """Your module multiplies the embedding rows by a constant, but not by
    sqrt(d_model).

    Hint: Compare your constant with the usual slips: d_model itself,
    sqrt(vocab_size), sqrt(d_model / 2), a log, a rounded or integer square
    root. d_model is the width of each vector, the table's second dimension.

    Fix: Multiply by `math.sqrt(self.d_model)`, the exact float, where
    self.d_model is the embedding_dim you gave nn.Embedding."""
    if scale is None or abs(scale) <= 1e-6:  # an all-zero output is wrong_values, not a scale
        return []
    return [weight[ids] * scale]


SCALE_MISTAKES = {"missing_scale": missing_scale, "divided_by_scale": divided_by_scale, "wrong_scale": wrong_scale}


def expect_fixed_scale(probe: Probe, module: nn.Module, d_model: int) -> None:
    """sqrt(d_model) is a constant of the formula: kept in a trainable Parameter it gives the right output
    today and drifts with the first optimizer step."""
    for name, parameter in module.named_parameters():
        if (
            parameter.numel() == 1
            and parameter.requires_grad
            and abs(float(parameter.detach().cpu()) - d_model**0.5) <= 1e-4 * d_model**0.5
        ):
            probe.fail(
                "scale_is_parameter",
                f"`{probe.name}` keeps its scale in a trainable Parameter, `{name}` = {float(parameter.detach().cpu()):.6g} = sqrt({d_model}): the output is right now, "
                "but the optimizer will move the scale away from sqrt(d_model) with the first step.",
                hint="sqrt(d_model) is part of the formula, not something to learn: a number, or a buffer if you want it to move with the module, never a Parameter.",
                fix="Multiply by a plain number, `* math.sqrt(self.d_model)`, or register it with `self.register_buffer('scale', torch.tensor(math.sqrt(d_model)))` instead of `nn.Parameter`.",
            )


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


# Two independent mistakes in one function: a catalogue mistake run on inputs that embody the other
# (padding_idx dropped, another base, positions ignored, sin negated) reproduces the output. An exercise
# declares, per code, how its inputs embody that mistake: args -> a list of argument tuples.
PairTransforms = dict[str, Callable[[tuple], list[tuple]]]


def _pair(
    probe: Probe, out: Any, args: tuple, transforms: PairTransforms, index: int | None, first: str | None = None
) -> tuple[str, str] | None:
    """(catalogue mistake, other mistake) that together reproduce `out`, the catalogue mistake `first` if given;
    None if no pair fits."""
    if index is not None and isinstance(out, (tuple, list)):
        out = out[index] if len(out) > index else None
    matches = lambda faces: any(isinstance(f, torch.Tensor) and close(out, f, atol=1e-4, rtol=1e-4) for f in faces)
    # A mistake that alone reproduces this output leaves nothing for a second one to explain: on this
    # input the other cannot show (at k = 0 every base gives the identity; a sin the mistake never reads
    # is the same negated), so no pair is found with it.
    alone = {code for code, faces in probe.known_mistakes(*args, index=index)().items() if matches(faces)}
    for other, transform in transforms.items():
        for variant in transform(args):
            for code, faces in probe.known_mistakes(*variant, index=index)().items():
                if code != other and first in (None, code) and code not in alone and matches(faces):
                    return code, other
    return None


def expect_cases(
    probe: Probe,
    cases: Sequence[tuple[tuple, Callable[..., Any], Callable[..., None]]],
    transforms: PairTransforms,
    index: int | None = None,
) -> None:
    """Each case is (its arguments, a call of the student's code, the usual probe of that output). No
    single mistake reproducing an output, a pair may (`transforms`); once a catalogue mistake is the
    diagnosis, the later cases still run, to list a second mistake that shows only there (positions
    ignored shows only where positions are given)."""
    first = None
    for args, call, expect in cases:
        out = call()
        if first is not None:
            pair = _pair(probe, out, args, transforms, index, first.code)
            if pair is not None and not any(finding.startswith(f"{pair[1]}:") for finding in probe.also):
                probe.also.append(f"{pair[1]}: {probe.explain(pair[1])}")
            continue
        try:
            expect(out)
        except Failure as failure:
            pair = _pair(probe, out, args, transforms, index) if failure.code == "wrong_values" else None
            if pair is not None:
                probe.also.append(f"{pair[1]}: {probe.explain(pair[1])}")
                probe.fail(pair[0], probe.explain(pair[0]))
            if failure.code not in probe.exercise.mistakes:
                raise
            first = failure
    if first is not None:
        raise first


def expect_then(probe: Probe, fallback: Callable[[Failure], None], *args: Any, **kwargs: Any) -> None:
    """probe.expect; if nothing more specific than wrong_values fits, `fallback(failure)`
    may name the problem better (it fails itself or returns)."""
    try:
        probe.expect(*args, **kwargs)
    except Failure as failure:
        if failure.code == "wrong_values":
            fallback(failure)
        raise


# Codes that say "the code broke", not what is wrong with it: met again by a later probe they add nothing.
NO_GRADIENT_HINT = "Autograd records only the torch operations applied to the Parameter itself; .detach(), .data, torch.no_grad(), a copy or a trip through NumPy each end that record, and the optimizer then never sees a gradient."


def backward_reaches(
    probe: Probe, out: torch.Tensor, upstream: torch.Tensor | None, table: torch.Tensor, whose: str, fix: str
) -> None:
    """Backpropagate `upstream` (ones when None) through `out`: `table` must get a gradient."""
    seed = torch.ones_like(out) if upstream is None else upstream
    probe.call(lambda: (out * seed).sum().backward(), what=f"backward through `{probe.name}`")
    if table.grad is None:
        probe.fail(
            "no_gradient",
            f"After a backward pass through `{probe.name}`'s output, {whose} has no gradient: the output was computed from something else (a copy?).",
            hint=NO_GRADIENT_HINT,
            fix=fix,
        )


GRADIENT_ATOL = 1e-5  # times the largest entry of the expected gradient


def dense_grad(table: torch.Tensor) -> torch.Tensor | None:
    """table.grad, dense: nn.Embedding(sparse=True), for SparseAdam, gives a sparse one."""
    grad = table.grad
    return grad.to_dense() if grad is not None and grad.is_sparse else grad


def rows_of(table: torch.Tensor) -> torch.Tensor:
    """A table's rows, one per first index; a vector (a LayerNorm's weight) is a row per entry."""
    return table.detach().reshape(table.shape[0], -1) if table.dim() > 1 else table.detach().reshape(-1, 1)


def listed(rows: torch.Tensor, most: int = 8) -> str:
    """Row indices as "row 0", "rows 0 and 36", "rows 0, 3, 5, ... (12 in all)"."""
    found = [str(row) for row in rows.tolist()]
    if len(found) == 1:
        return f"row {found[0]}"
    if len(found) <= most:
        return f"rows {', '.join(found[:-1])} and {found[-1]}"
    return f"rows {', '.join(found[:most])}, ... ({len(found)} in all)"


def expect_gradient(
    probe: Probe,
    table: torch.Tensor,
    expected: torch.Tensor,
    used: torch.Tensor,
    *,
    name: str,
    inputs: str,
    compare: bool = True,
    fix: str = "",
    rows: Callable[[torch.Tensor], torch.Tensor] = lambda grad: grad,
) -> None:
    """The gradient probe of a table the module trains: after a backward pass, `table.grad`, read as
    rows by `rows` ((d, R) kept transposed...), against `expected`, what the right module gets from the
    same pass, as rows; `used` (bool, a row each) marks the rows the inputs `inputs` used. A row that
    should move and got no gradient (padding_idx, requires_grad=False, a detached row, a hook) is
    frozen_rows, naming the table, `name` in the student's words, and the rows; with `compare`, any
    other difference is wrong_values. Recorded for the framework's tests."""
    probe.record_gradient(table, used)
    should = rows_of(expected).abs().amax(1) > 0
    grad = dense_grad(table)
    if grad is None and table.requires_grad:
        probe.fail(
            "no_gradient",
            f"After a backward pass through `{probe.name}` on {inputs}, `{name}` has no gradient: the output was computed from something else (a copy?).",
            hint=NO_GRADIENT_HINT,
            fix=fix
            or f"Compute the output from `{name}` itself, with no .detach(), .data, copy or torch.no_grad() on the way.",
        )
    got = torch.zeros_like(should) if grad is None else (rows_of(rows(grad)).abs().amax(1) > 0).to(should.device)
    frozen = (should & ~got).nonzero().flatten().cpu()
    if len(frozen):
        whole, one = len(frozen) == int(should.sum()) and len(frozen) > 1, len(frozen) == 1
        it = "it" if whole or one else "them"
        if whole:
            why = (
                " (it is not a trainable Parameter: requires_grad=False, or a buffer)"
                if not table.requires_grad
                else ""
            )
            said = f"`{name}` gets no gradient at all{why}, though the inputs used it"
        else:
            said = f"{listed(frozen)} of `{name}` {'gets' if one else 'get'} no gradient, though the inputs used {it}"
        probe.fail(
            "frozen_rows",
            f"After a backward pass through `{probe.name}` on {inputs}, {said}: no optimizer would ever change {it}, so the module would never learn {it}.",
            fix=fix,
        )
    if (
        compare and grad is not None
    ):  # (None: no row should move, and none did) a gradient sums many products (BERT's through a LayerNorm whose 1/σ is ~600): its rounding scales with its largest
        # entry. Right orders of summation differ by < 2e-7 of it (measured: the BERT catalogue); a frozen row or a wrong factor by O(1).
        atol = GRADIENT_ATOL * float(expected.abs().max())
        probe.expect(
            rows(grad),
            expected.to(grad.dtype),
            what=f"the gradient of `{name}` after a backward pass on {inputs}",
            atol=atol,
        )


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


def error_instead_of_value_error(failure: Failure) -> str | None:
    """For a call that should have refused with a ValueError: None if it did, the other error's text (e.g.
    "IndexError: index out of range") if it raised another; any other failure (a timeout...) goes on up."""
    if raised(failure, "ValueError"):
        return None
    if failure.code != "raised":
        raise failure
    return failure.message.split(" raised ", 1)[-1].rstrip(".")


# ---------------------------------------------------------------------------
# Finding a student's tensors: by role and shape, never by attribute name
# ---------------------------------------------------------------------------


def registered_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def name_of(module: nn.Module, tensor: torch.Tensor) -> str:
    """The student's own name for one of the module's parameters or buffers."""
    return next((name for name, t in registered_tensors(module).items() if t is tensor), "the table")


def plain_tensors(module: nn.Module, fits: Callable[[torch.Tensor], bool] = lambda t: True) -> list[str]:
    """Tensors kept as plain attributes: .to(device) leaves them behind and state_dict() forgets them."""
    return [
        name
        for name, value in vars(module).items()
        if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter) and fits(value)
    ]


def is_table(tensor: torch.Tensor, rows: int, d: int) -> bool:
    """(rows, d), give or take size-1 axes ((1, max_len, d) as ViT keeps it, (max_len, 1, d) as the PyTorch tutorial does)."""
    return [size for size in tensor.shape if size != 1] == [rows, d]


def oriented(tensor: torch.Tensor, rows: int, d: int | None) -> torch.Tensor | None:
    """`tensor` as an (R, d) table of R >= rows rows, whatever size-1 axes it carries ((1, max_len, d),
    (max_len, 1, d)) and whichever way round it is kept ((d, R) is read transposed); None when it is no
    such table. With d None, any width: a part of a table (sin and cos kept apart)."""
    sizes = [size for size in tensor.shape if size != 1]
    if len(sizes) != 2:
        return None
    flat = tensor.reshape(sizes)
    if sizes[1] == (d or sizes[1]) and sizes[0] >= rows:
        return flat
    return flat.T if d is not None and sizes[0] == d and sizes[1] >= rows else None


def position_tables(
    module: nn.Module, rows: int, d: int | None, exclude: Callable[[torch.Tensor], bool] = lambda t: False
) -> list[tuple[str, torch.Tensor, torch.Tensor, str]]:
    """The tensors whose role may be a table of positions: d columns and at least `rows` rows, by their
    role, not their exact shape (spare rows after, a padding offset before, size-1 axes, kept transposed),
    kept as a Parameter, a buffer or a plain attribute (of the module or a submodule). (name, the tensor,
    it read as (R, d), how it is kept: "parameter", "buffer" or "plain"), those of exactly `rows` rows first."""
    kept = [(name, t, "parameter") for name, t in module.named_parameters()]
    kept += [(name, t, "buffer") for name, t in module.named_buffers()]
    kept += [
        (f"{prefix}.{name}".lstrip("."), getattr(sub, name), "plain")
        for prefix, sub in module.named_modules()
        for name in plain_tensors(sub)
    ]
    found = [
        (name, t, table, how) for name, t, how in kept if not exclude(t) and (table := oriented(t, rows, d)) is not None
    ]
    return sorted(found, key=lambda f: f[2].shape[0] != rows)


def rows_read(added: Any, table: torch.Tensor, atol: float) -> int | None:
    """The row k for which `added` (B, T, d), what a module added to every sequence, is its table's
    rows k .. k + T - 1 (`table` read as (R, d)); None when it is no run of the table's rows."""
    if (
        not isinstance(added, torch.Tensor)
        or added.dim() != 3
        or added.is_meta
        or added.shape[-1] != table.shape[-1]
        or added.shape[1] > len(table)
    ):
        return None
    a, t = added.detach().to("cpu", torch.float64), table.detach().to("cpu", torch.float64)
    T = a.shape[1]
    if not torch.allclose(a, a[:1].expand_as(a), rtol=0, atol=atol):
        return None  # not the same rows for every sequence
    starts = ((t[: len(t) - T + 1] - a[0, 0]).abs().amax(1) < atol).nonzero().flatten().tolist()
    return next((k for k in starts if torch.allclose(t[k : k + T], a[0], rtol=0, atol=atol)), None)


def expect_rows_from(
    probe: Probe, failure: Failure, added: Any, table: torch.Tensor, start: int, name: str, what: str, atol: float
) -> None:
    """A wrong output that adds a run of the student's own table, but not the run that starts at
    position 0's row `start`: position_offset, saying which rows it read. Else nothing."""
    if failure.code != "wrong_values":
        return
    k = rows_read(added, table, atol)
    if k is None or k == start:
        return
    T, shift = added.shape[1], k - start
    probe.fail(
        "position_offset",
        f"For {what}, your forward adds rows {k}..{k + T - 1} of `{name}`, but position 0 is row {start}: token t gets the row of position t {'+' if shift > 0 else '-'} {abs(shift)}.",
        hint="Token t of a sequence is at position t, so the T tokens take the T rows that hold positions 0 .. T-1. Where in your table is position 0?",
        fix=f"Add the rows of positions 0 .. T-1, `self.{name}[{start or ''}:{f'{start} + T' if start else 'T'}]`, or index the table with "
        + (f"`torch.arange(T, device=x.device) + {start}`." if start else "`torch.arange(T, device=x.device)`."),
    )


def find_table(probe: Probe, module: nn.Module, rows: int, d: int, what: str) -> tuple[str, torch.Tensor]:
    """The student's (rows, d) parameter or buffer, found by shape. Fails with
    wrong_shape (naming what the module holds) when there is none."""
    tensors = registered_tensors(module)
    for name, tensor in tensors.items():
        if is_table(tensor, rows, d):
            return name, tensor
    found = ", ".join(f"{n} {tuple(t.shape)}" for n, t in tensors.items()) or "none"
    probe.fail(
        "wrong_shape",
        f"`{probe.name}` has no parameter or buffer of shape {(rows, d)} for {what} (it has: {found}).",
        hint="The check finds your tables by their shape, not their names, among the module's parameters and buffers: one row per token or position, d_model numbers in each row.",
        fix=f"Create {what} in __init__ with shape {(rows, d)} and register it: an nn.Embedding, an nn.Parameter, "
        "or register_buffer for a fixed table (a tensor kept in a plain attribute is not registered).",
    )


def token_table(probe: Probe, module: nn.Module, vocab_size: int, d_model: int) -> torch.Tensor:
    """The student's (V, d) token table; a (d, V) one means swapped arguments."""
    tensors = registered_tensors(module)
    if not any(tuple(t.shape) == (vocab_size, d_model) for t in tensors.values()):
        swapped = [name for name, t in tensors.items() if tuple(t.shape) == (d_model, vocab_size)]
        if swapped:
            probe.fail(
                "wrong_shape",
                f"`{probe.name}({vocab_size}, {d_model})` holds `{swapped[0]}` of shape ({d_model}, {vocab_size}): the two sizes are swapped.",
                hint="nn.Embedding takes the number of rows first (the vocabulary size, num_embeddings) and the width of each row second (embedding_dim): one row of d_model numbers per token.",
                fix="Build the table with the vocabulary first: `nn.Embedding(vocab_size, d_model)`.",
            )
    return find_table(probe, module, vocab_size, d_model, "the token embedding table")[1]


# ---------------------------------------------------------------------------
# Probes of a module's behaviour
# ---------------------------------------------------------------------------

# torch's words for an index past a table: nn.Embedding / F.embedding, then indexing a tensor (table[idx]).
# An IndexError without them was raised by the student's own code, a check of the wrong type.
TORCH_LOOKUP_ERRORS = ("out of range in self", "is out of bounds for dimension")
REFUSE_HINT = "Check the input against the table before you use it: a ValueError that names max_len tells the user what to change; an IndexError, a shape mismatch or, on a GPU, a device-side assert does not."


def refuses(
    probe: Probe, run: Callable[[int], Any], what: str, advice: str, *, hint: str = REFUSE_HINT, fix: str = ""
) -> None:
    """run(0) asks for the first position the module has no row for: it must raise a ValueError (on the CPU:
    on CUDA an index past a table is a device-side assert that breaks every later CUDA call in the process).
    If it does not and run(1), one position further, does, the check lets the first position through (off by
    one). `advice`, what to do, is the failure's fix (unless `fix` is given); it is not shown in the message."""
    fix = fix or advice
    try:
        run(0)
    except Failure as failure:
        if (error := error_instead_of_value_error(failure)) is None:
            return
        torch_lookup = any(words in error for words in TORCH_LOOKUP_ERRORS)
        if refused_with_value_error(lambda: run(1)):
            probe.fail(
                "length_check_off_by_one",
                f"For {what}, `{probe.name}` raised {error}, not a ValueError; one position further it does raise a ValueError: your check is there, but lets the first position past the table through.",
                hint="A table of max_len rows holds positions 0 .. max_len - 1, so position max_len is already one too far: the largest position must be below max_len.",
                fix="Compare the largest position with `>=`: `if last >= self.max_len: raise ValueError(...)`, with last = T - 1 "
                "(or positions.max()); or the length T itself with `>`: `if T > self.max_len`.",
            )
        if error.startswith(("IndexError", "AssertionError")) and not torch_lookup:  # the student's own check
            probe.fail(
                "no_length_check",
                f"For {what}, `{probe.name}` checks the length, but raises {error}: a ValueError is what says that an argument's value (here its length) is wrong, "
                "and what callers catch for it; IndexError means an index the code computed fell off a table, and an assert disappears under `python -O`.",
                hint="Your check is in the right place; only the exception's type is off. The caller passed a sequence that is too long: that is a bad value, not a bad index.",
                fix="Keep the check and raise the right type: `raise ValueError(f'sequence length {T} > max_len {self.max_len}')` instead of IndexError or assert.",
            )
        said = (
            " That is torch's own error, from a lookup past the table's last row: nothing in your forward refused the position before it."
            if torch_lookup
            else ""
        )
        probe.fail(
            "no_length_check",
            f"For {what}, `{probe.name}` raised {error}, not a ValueError.{said} That is what your users would meet (and with a table lookup on a GPU, "
            "'CUDA error: device-side assert triggered', which breaks the whole process).",
            hint=hint,
            fix=fix,
        )
    probe.fail(
        "no_length_check",
        f"For {what}, `{probe.name}` returned a result instead of raising a ValueError.",
        hint=hint,
        fix=fix,
    )


def refused_with_value_error(run: Callable[[], Any]) -> bool:
    try:
        run()
    except Failure as failure:
        return raised(failure, "ValueError")
    return False


def works_at_the_edge(probe: Probe, run: Callable[[], Any], said: str, *, hint: str, fix: str) -> Any:
    """run() uses the last position the table holds, so it must work: a ValueError from it is a
    length check off by one (`said`, `hint`, `fix` say it for that module). Returns run()'s output."""
    try:
        return run()
    except Failure as failure:
        if raised(failure, "ValueError"):
            probe.fail("length_check_off_by_one", said, hint=hint, fix=fix)
        raise


def refuses_past_max_len(
    probe: Probe, run: Callable[[int], Any], max_len: int, *, hint: str = REFUSE_HINT, fix: str = ""
) -> Any:
    """run(T) calls the module on a sequence of length T, on the CPU. T = max_len
    must work (its output is returned); T = max_len + 1 must raise a ValueError.
    `hint` and `fix` are for a missing check (no_length_check)."""
    out = works_at_the_edge(
        probe,
        lambda: run(max_len),
        f"`{probe.name}` refused a sequence of exactly max_len = {max_len} tokens, yet positions 0..{max_len - 1} all have a row.",
        hint="Count the rows a sequence of T tokens needs: its last position is T - 1. Which lengths really run past the table?",
        fix="Refuse only longer sequences: `if T > self.max_len: raise ValueError(...)`, with `>`, not `>=`.",
    )
    fix = fix or (
        "At the start of forward, with T the sequence length (dimension 1 of the input): `if T > self.max_len: raise ValueError("
        "f'sequence length {T} > max_len {self.max_len}: build the module with a larger max_len')`."
    )
    refuses(probe, lambda extra: run(max_len + 1 + extra), f"T = max_len + 1 = {max_len + 1}", fix, hint=hint)
    return out


DROPOUT_RATE_TOLERANCE = 0.02  # the scale 1/(1-p) gives p to float precision; a wrong rate is off by 0.05 or more


def dropped_fraction_tolerance(p: float, entries: int) -> float:
    """How far the share of zeros may stray from p: 5 standard deviations (sqrt(p(1-p)/n)), passed once in
    two million checks (a fixed 0.1, 3.3 for chapter 03's 252 entries, misnamed a double dropout in a test run)."""
    return 5 * math.sqrt(p * (1 - p) / entries)


MISSING_DROPOUT_HINT = "Dropout belongs to the module: in training mode it zeroes a random share p of the values and scales the others by 1/(1-p); after .eval() it lets everything through."
NOT_DROPOUT_HINT = (
    "Dropout applied once, last, leaves each entry either 0 or its eval-mode value times one common factor 1/(1-p). "
    "Compare your training-mode output with the eval-mode one entry by entry: where does it differ?"
)


def expect_dropout(
    probe: Probe,
    out: Any,
    expected: torch.Tensor,
    p: float,
    what: str,
    *,
    where: str,
    not_dropout: tuple[str, ...],
    hint: str = MISSING_DROPOUT_HINT,
    fix: str = "",
) -> None:
    """In training mode `out` must be dropout(expected) at rate p: entries zeroed,
    the rest scaled by 1/(1-p). `where` says where the dropout belongs: it is the
    fix (unless `fix` is given) of a missing dropout, and of an output that is no
    dropout at all. `not_dropout` is the (code, message) or (code, message, hint,
    fix) for the latter; with two parts, a code from the exercise's catalogue
    takes the catalogue's hint and fix, any other gets NOT_DROPOUT_HINT and `where`."""
    fix = fix or where
    if close(out, expected):
        probe.fail(
            "missing_dropout",
            f"In training mode {what} equals its eval-mode value: no dropout was applied.",
            hint=hint,
            fix=fix,
        )
    rate = dropout_rate(out, expected)
    if rate is None:
        code, message, *advice = not_dropout
        if not advice and code not in probe.exercise.mistakes:
            advice = [NOT_DROPOUT_HINT, fix]
        probe.fail(code, message, *advice)
    dropped = float((out == 0).float().mean())
    twice = 1 - (1 - p) ** 2  # two dropouts at rate p in a row: kept with (1 - p)², scaled by 1/(1 - p)²
    like_twice = abs(dropped - twice) <= dropped_fraction_tolerance(twice, out.numel())
    if abs(rate - twice) <= DROPOUT_RATE_TOLERANCE and like_twice and p > 0:
        probe.fail(
            "dropout_twice",
            f"In training mode {what} looks like dropout with p = {rate:.2f} ({dropped:.0%} of the values were zeroed): that is 1 - (1 - {p})², "
            f"dropout at the module's rate {p} applied twice in a row (a submodule that drops already, and a dropout of your own on top?).",
            hint="Dropout belongs once, as the last step. A module you reuse (your PositionalEncoding, an nn.TransformerEncoderLayer) may already drop its own output: a second dropout on top drops again.",
            fix=f"Keep a single dropout. {where} A module you reuse inside gets dropout=0.0.",
        )
    if abs(rate - p) > DROPOUT_RATE_TOLERANCE or abs(dropped - p) > dropped_fraction_tolerance(p, out.numel()):
        argument = next(
            iter(re.findall(r"nn\.Dropout\((\w+)\)", where)), "rate"
        )  # the constructor's own name for the rate
        bare = ", the default of a bare `nn.Dropout()`" if abs(rate - 0.5) <= DROPOUT_RATE_TOLERANCE else ""
        probe.fail(
            "dropout_rate_ignored",
            f"In training mode {what} looks like dropout with p = {rate:.2f}{bare} ({dropped:.0%} of the values were zeroed), but the module was built with {argument}={p}.",
            hint="The rate is an argument of the constructor: a number written into the code, or nn.Dropout's own default, ignores whatever rate the module was built with.",
            fix=f"Keep the rate that __init__ receives and build the dropout from it, `self.dropout = nn.Dropout({argument})`, not `nn.Dropout()` or a fixed number such as 0.1.",
        )


def drops_in_eval(eval_out: Any, p: float) -> bool:
    """An eval-mode output with dropped entries: the inputs are random, so no right output holds so many
    exact zeros. The training-mode probe cannot then tell a missing dropout (both modes draw the same
    mask from the restored RNG): dropout_in_eval, the eval-mode probe's finding, says it all."""
    return not isinstance(eval_out, torch.Tensor) or eval_out.is_meta or float((eval_out == 0).float().mean()) > p / 2


def expect_no_dropout_in_eval(probe: Probe, out: Any, expected: torch.Tensor) -> None:
    """After .eval(), dropout must be off: F.dropout(x, p) defaults to training=True."""
    if dropout_rate(out, expected) is not None:
        probe.fail(
            "dropout_in_eval",
            f"In eval mode `{probe.name}` still drops values: entries are zeroed and the others scaled up, though dropout must switch off after .eval().",
            hint="The functional dropout does not know the module's mode: its training argument defaults to True. A dropout module follows .train() and .eval() by itself.",
            fix="Use a module, `self.dropout = nn.Dropout(p)` in __init__ and `self.dropout(...)` in forward, or pass `training=self.training` to F.dropout.",
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
    hint: str = "",
    fix: str = "",
) -> None:
    """probe.device_pass for a module: a fresh one for every run (.to() moves a
    module in place), built from `args` (or args(device)), moved to the device,
    in eval mode, called on inputs(device) under `mode()`. A failure of `code` gets `hint`
    and `fix`; left empty, check() gives it the exercise's or the generic advice (probe.advice)."""

    def run(device: torch.device) -> Any:
        built_with = args(device) if callable(args) else args
        fresh = probe.call(cls, *built_with, what=f"`{probe.name}(...)`", **(kwargs or {}))
        fresh = probe.call(fresh.to, device, what=f"`{probe.name}.to(device)`")
        probe.call(fresh.eval, what=f"`{probe.name}.eval()`")
        with mode():
            return probe.call(fresh, *inputs(device))

    try:
        probe.device_pass(run, code, message)
    except Failure as failure:
        if failure.code == code and not (failure.hint or failure.fix) and (hint or fix):
            probe.fail(code, failure.message, hint=hint, fix=fix)
        raise
