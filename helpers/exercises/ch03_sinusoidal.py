"""Chapter 03, sinusoidal encodings (Vaswani et al. 2017, §3.5): `sinusoidal_encoding`,
`relative_shift_matrix`, `PositionalEncoding` and `TokenAndPositionEmbedding`: their probes and
declarations. Their known mistakes, and the arguments each takes, are in sinusoidal_mistakes.py;
the table probes they share, in sinusoidal.py."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from helpers import reference
from helpers.contracts import Arg, Contract, Result
from helpers.exercises.common import (
    NO_GRADIENT_HINT,
    TAKES_NO_TENSOR,
    angle_tolerance,
    backward_reaches,
    expect_cases,
    expect_fixed_scale,
    expect_gradient,
    expect_no_dropout_in_eval,
    expect_rows_from,
    expect_then,
    fitted_scale,
    float64_accepted,
    frequencies,
    module_device_pass,
    name_of,
    name_the_scale,
    precision_first,
    refuses_past_max_len,
    token_table,
)
from helpers.exercises.sinusoidal import (
    OUTPUT_RTOL,
    ROWS_READ_ATOL,
    TABLE_LAYOUT,
    StoredTable,
    columns_sliced,
    expect_dropout_of_own_output,
    expect_table,
    expect_table_storage,
    kept,
    right_table,
    stored_table,
    structurally,
    table_precision_first,
    table_tolerance,
)
from helpers.exercises.sinusoidal_mistakes import (
    POSITIONAL_ENCODING_MISTAKES,
    SHIFT_MISTAKES,
    TABLE_MISTAKES,
    TOKEN_AND_POSITION_MISTAKES,
    base_said,
    input_scaled,
    mistaken_shift,
    mistaken_table,
    sum_scaled,
)
from helpers.probe import Probe, advice, close
from helpers.registry import Exercise
from helpers.safety import Failure

# --- probes: the functions -----------------------------------------------------------

# expect_cases' cases: (arguments, a call of the student's code, the probe of its output)
Runs = list[tuple[tuple[Any, ...], Callable[[], Any], Callable[[Any], None]]]


TABLE_DTYPE = (  # wrong_dtype: (hint, fix). sinusoidal_encoding takes no tensor to take a dtype from
    "torch.arange and torch.tensor on integers make int64, NumPy makes float64: the table's dtype is whatever its first factory made, unless you say.",
    "Build the table in float32 (`torch.zeros(max_len, d_model, dtype=torch.float32)`, a float `torch.arange`), or cast it once at the end with `.float()`.",
)


# A table returned (d_model, max_len) (review E7: the shape fix's "keep every batch dimension" does not apply).
TABLE_TRANSPOSED_FIX = "Put the positions along the rows: fill `torch.zeros(max_len, d_model)` column by column, or return the transpose of the table you built."


def name_the_base(
    probe: Probe,
    failure: Failure,
    out: Any,
    args: tuple[Any, ...],
    made_with: Callable[..., torch.Tensor],
    tolerance: dict[str, Any],
) -> None:
    """The catalogue's wrong_base said of the base the code used: 1000, or 10000 where another was asked (review E8)."""
    if failure.code != "wrong_base" or failure.message != probe.explain("wrong_base"):
        return  # the structural reading names the base it read itself
    asked = (*args, 10000.0)[2]
    used = [b for b in (1000.0, 10000.0) if b != asked and close(out, made_with(*args[:2], b), **tolerance)]
    if used:
        failure.message = base_said(asked, used[0])


def check_sinusoidal_encoding(fn: Callable[..., Any], probe: Probe) -> None:
    try:
        table_probes(fn, probe)
    except Failure as failure:
        if failure.code == "wrong_dtype" and not failure.fix:
            failure.hint, failure.fix = TABLE_DTYPE
        raise


def table_probes(fn: Callable[..., Any], probe: Probe) -> None:
    # A non-default base catches a hard-coded 10000; 2100 positions, float16 ones (2049 is 2048 there);
    # max_len = 1, a table of one row, the shortest there is.
    for max_len, *rest in ((50, 16), (37, 12, 500.0), (2100, 8), (1, 16)):
        args = (probe.length(max_len), *rest)
        call = f"sinusoidal_encoding({', '.join(repr(a) for a in args)})"
        out = probe.call(fn, *args, what=f"`{call}`")
        expected = right_table(*args)
        hint = (
            "The table is (max_len, d_model): one row per position."
            if isinstance(out, torch.Tensor) and out.shape == expected.shape[::-1]
            else TABLE_LAYOUT
        )
        try:
            expect_then(
                probe,
                table_precision_first(
                    probe, out, expected, args, structurally(probe, out, args[2] if len(args) > 2 else 10000.0)
                ),
                out,
                expected,
                what=f"the table of `{call}`",
                mistakes=probe.known_mistakes(*args),
                hint=hint,
                fix=TABLE_TRANSPOSED_FIX if hint != TABLE_LAYOUT else "",
                **table_tolerance(*args),
            )
        except Failure as failure:
            name_the_base(probe, failure, out, args, mistaken_table, table_tolerance(*args))
            raise
    # An odd d_model: ceil(d/2) sin columns, floor(d/2) cos columns, the last one a sin.
    call = "sinusoidal_encoding(20, 7)"
    try:
        out = probe.call(fn, probe.length(20), 7, what=f"`{call}`")
        probe.expect(out, right_table(20, 7), what=f"the table of `{call}`", **table_tolerance(20, 7))
    except Failure as failure:
        if failure.code not in ("raised", "wrong_shape", "wrong_values", "nan_or_inf"):
            raise
        probe.fail(
            "odd_d_model",
            f"{failure.message.rstrip('.')}. Your table is right for an even d_model but not for d_model = 7.",
            hint="With d_model = 7 there are ceil(7/2) = 4 frequencies: 4 sin columns (0, 2, 4, 6) but only 3 cos columns (1, 3, 5), "
            "so the last column is a sin and the cos block has one column too many.",
            fix="Make one frequency per even column, `torch.arange(0, d_model, 2)` (4 of them for d_model = 7), "
            "and cut the cos block to the odd columns there are: `pe[:, 1::2] = torch.cos(angles)[:, : d_model // 2]`.",
        )


def shift_tolerance(k: int, d_model: int, base: float = 10000.0) -> dict[str, Any]:
    """Entry by entry, what float32 rounding makes of the turn k·ω_i of each 2×2 block (rows 2i, 2i+1), plus
    |k| roundings of float32: M_1 raised to the k-th power (rotations compose, §9's own argument) rounds once
    per product (review R7/R12: 1.2e-6 at k = 40, a right method, failed)."""
    omega = frequencies(d_model, base).repeat_interleave(2)[
        :d_model, None
    ]  # (d, 1): one per row, broadcast over the columns
    return {
        "rtol": 0.0,
        "atol": angle_tolerance(torch.float32, k * omega, omega) + abs(k) * torch.finfo(torch.float32).eps,
    }


def other_bases(args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The arguments with the base a wrong_base mistake uses instead: 1000, or 10000 whatever base was asked."""
    k, d, base = (*args, 10000.0)[:3]
    return [(k, d, other) for other in (1000.0, 10000.0) if other != base]


def check_relative_shift_matrix(fn: Callable[..., Any], probe: Probe) -> None:

    def case(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], Callable[[], Any], Callable[[Any], None]]:
        call = f"relative_shift_matrix({', '.join(repr(a) for a in args)})"
        return (args, lambda: probe.call(fn, *args, what=f"`{call}`"), lambda raw: expect_shift(probe, raw, args, call))

    runs: Runs = [case(args) for args in ((3, 16), (-5, 12, 500.0), (0, 6), (40, 8))]
    try:
        expect_cases(probe, runs, {"wrong_base": other_bases})
    except Failure as failure:
        right_for_positive_k = close(
            float64_accepted(runs[0][1]()), reference.relative_shift_matrix(3, 16), **shift_tolerance(3, 16)
        )
        if failure.code == "shift_reversed" and right_for_positive_k:  # only the negative k was turned the other way
            probe.fail(
                "shift_reversed",
                "Your matrix is right for k = 3 but, for k = -5, it is the matrix of k = +5: it maps PE[pos] to PE[pos + 5] "
                "instead of PE[pos - 5]. A negative k loses its sign on the way (an abs(k), or a distance computed without its direction?).",
                hint="M_k for a negative k moves every position back: its blocks hold sin(k·ω_i) < 0 where M_|k| holds sin(|k|·ω_i) > 0. "
                "The formula needs no special case for the sign: cos is even, sin is odd.",
                fix="Use k as it is, sign included, in the angle `k * omega` (no abs(k), no max(k, 0)); print "
                "`relative_shift_matrix(-1, 2)`: it must be [[cos 1, -sin 1], [sin 1, cos 1]].",
            )
        raise


def expect_shift(probe: Probe, raw: Any, args: tuple[Any, ...], call: str) -> None:
    out = float64_accepted(raw)  # the values first, in either precision: a wrong matrix is told what is wrong with it
    k = args[0]
    what = f"M = `{call}`, which must map PE[pos] to PE[pos {'+' if k >= 0 else '-'} {abs(k)}],"
    try:
        expect_matrix(probe, out, args, what)
    except Failure as failure:
        name_the_base(probe, failure, out, args, mistaken_shift, shift_tolerance(*args))
        raise
    if (
        raw.dtype != torch.float32
    ):  # right values: M multiplies float32 tables (chapter 05's x @ M_m), so it is float32 too
        probe.fail(
            "wrong_dtype",
            f"M = `{call}` has the right values but dtype {raw.dtype}; the exercise returns float32, the dtype of the tables it multiplies.",
            hint="`@` does not promote: a float64 M times a float32 table raises 'expected m1 and m2 to have the same dtype'. The matrix must match the tables it acts on.",
            fix="Compute in float64 if you like, then return `M.float()` (NumPy: `torch.from_numpy(M).float()`).",
        )


SHIFT_PRECISION_FIX = (
    "Compute the frequencies and the angles k·ω_i in float32 (or in float64, with one `.float()` at the end): "
    "no `.half()`, `.bfloat16()` or `dtype=torch.float16` on the way."
)


def shift_precision(probe: Probe, out: Any, args: tuple[Any, ...]) -> Callable[[Failure], None]:
    """expect_then's fallback: within what one step through bfloat16 or float16 makes of the angles k·ω_i, a
    matrix that missed is low_precision, not a wrong formula (issue 41: frequencies rounded to bfloat16)."""
    k, d, base = (*args, 10000.0)[:3]
    angles = k * frequencies(d, base).repeat_interleave(2)[:d, None]  # (d, 1): each row's turn

    def fallback(failure: Failure) -> None:
        precision_first(
            probe,
            out,
            reference.relative_shift_matrix(*args),
            shift_tolerance(*args)["atol"],
            angle_tolerance(torch.bfloat16, angles, torch.ones(()), 1.0, torch.bfloat16),
            lambda failure: None,
            code="low_precision",
            said="more than float32 rounding makes, and as much as one step through float16 or bfloat16 makes. "
            "Somewhere on the way the frequencies, the angles or the matrix were held in half precision.",
            fix=SHIFT_PRECISION_FIX,
        )(failure)

    return fallback


def expect_matrix(probe: Probe, out: Any, args: tuple[Any, ...], what: str) -> None:
    expect_then(
        probe,
        shift_precision(probe, out, args),
        out,
        reference.relative_shift_matrix(*args),
        what=what,
        mistakes=probe.known_mistakes(*args),
        hint="Start with the smallest case, k = 1 and d_model = 2: one pair, ω_0 = 1. Which 2×2 matrix maps (sin p, cos p) to (sin(p + 1), cos(p + 1))? "
        "The angle-addition formulas give it; M is that block, with the angle k·ω_i, on rows and columns (2i, 2i+1) for each pair i, zeros elsewhere.",
        fix="Print `relative_shift_matrix(1, 2)`: it must be [[cos 1, sin 1], [-sin 1, cos 1]] ≈ [[0.5403, 0.8415], [-0.8415, 0.5403]]. "
        "Then place that block, with the angle k·ω_i, at rows and columns (2i, 2i+1) of a zero (d_model, d_model) matrix, for each pair i.",
        **shift_tolerance(*args),
    )


# --- probes: the modules ---------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """The module a check builds once, and what its aspects share: the student's positional table in it
    (found by its role), the module's first input and its sizes."""

    cls: type[nn.Module]
    module: nn.Module
    found: StoredTable | None  # None if the module keeps no positional table
    inputs: torch.Tensor  # x (3, 7, d) or ids (3, 7)
    d: int
    max_len: int
    p: float

    @property
    def table(self) -> torch.Tensor | None:
        """The (max_len, d) rows of positions 0 .. max_len - 1 in the student's table."""
        return None if self.found is None else self.found.rows

    def own(self, device: torch.device) -> torch.Tensor:
        """The table the module adds: its own (its values are expect_table's business), else the right one."""
        return right_table(self.max_len, self.d, device=device) if self.table is None else self.table.to(device)


def rows_read(probe: Probe, built: Built, failure: Failure, added: Any, inputs: str) -> None:
    """A wrong output: say which rows of the student's table it added, when it added rows of it."""
    if built.found is not None:
        found = built.found
        expect_rows_from(probe, failure, added, found.full, found.start, found.name, inputs, ROWS_READ_ATOL)


def call_sliced(probe: Probe, built: Built, inputs: torch.Tensor, shape: tuple[int, ...]) -> Any:
    """The module's output for `inputs`; a call that fails as `pe[:, :T]` fails on a 2-D table is columns_sliced."""
    try:
        return probe.call(built.module, inputs)
    except Failure as failure:
        if built.found is not None:
            name = built.found.name
            fix = f"Slice the rows, `self.{name}[:T]` (T rows of d_model, which broadcast over the batch), or keep the table with a leading axis of 1, registered as `{name}.unsqueeze(0)`, if you mean to write `[:, :T]`."
            columns_sliced(probe, failure, kept(built.module, name), name, shape, fix)
        raise


POSITIONS_ON_CPU = (
    "`{name}` makes a tensor on the CPU whatever x's device (a bare `torch.arange(T)` for the positions, a table rebuilt in forward...): on a GPU, "
    "using it with x fails with 'Expected all tensors to be on the same device'."
)
POSITIONS_ON_CPU_HINT = "The table is a buffer, so module.to(device) has already put it where x is; a tensor made in forward without a device lands on the CPU. Does forward need to make any new tensor at all?"
POSITIONS_ON_CPU_FIX = "Slice the buffer, `self.pe[:T]` with T = x.size(1), instead of indexing it with new position ids; a tensor you must make in forward takes `device=x.device`."


def build_positional_encoding(cls: type[nn.Module], probe: Probe) -> Built:
    d, max_len, p = 12, 50, 0.25
    module = probe.build(cls, d, max_len, p)
    found = stored_table(module, max_len, d)
    x = probe.sequence(probe.randn(3, 7, d), max_len)  # B=3 != T=7 != d=12
    return Built(cls, module, found, x, d, max_len, p)


def encoding_values(probe: Probe, built: Built) -> None:
    """x + the first T rows of the module's own table in eval mode, T = 7, then 1: the sum, no dropout."""
    probe.call(built.module.eval)
    own = built.own(probe.device)
    for x in (built.inputs, probe.sequence(probe.randn(3, 1, built.d), built.max_len)):
        T = x.shape[1]
        out = call_sliced(probe, built, x, tuple(x.shape))
        expected = x + own[:T]
        expect_no_dropout_in_eval(probe, out, expected)
        what = f"the output for x of shape (3, {T}, 12) in eval mode" + (
            "" if built.table is None else f", x + the first {T} row{'s' if T > 1 else ''} of your own table,"
        )
        tolerance = table_tolerance(T, built.d, rtol=OUTPUT_RTOL)
        try:
            probe.expect(out, expected, what=what, mistakes=probe.known_mistakes(x, own), **tolerance)
        except Failure as failure:
            added = out - x if isinstance(out, torch.Tensor) and out.shape == x.shape else None
            rows_read(probe, built, failure, added, f"x of shape (3, {T}, 12)")
            raise


def encoding_length(probe: Probe, built: Built) -> None:
    """T = max_len works and T = max_len + 1 is refused (on the CPU, without dropout)."""
    d, max_len = built.d, built.max_len
    on_cpu = probe.call(built.cls, d, max_len, 0.0, what=f"`{probe.name}({d}, {max_len}, 0.0)`")
    refuses_past_max_len(
        probe, lambda T: probe.call(on_cpu, probe.sequence(probe.randn(2, T, d, device="cpu"), max_len)), max_len
    )


def encoding_defaults(probe: Probe, built: Built) -> None:
    """The defaults: PositionalEncoding(d_model) encodes up to 5000 positions."""
    default = probe.call(built.cls, built.d, what=f"`{probe.name}({built.d})`")
    probe.call(default.eval)
    long_x = probe.randn(2, 300, built.d, device="cpu")
    probe.expect(
        probe.call(default, long_x),
        long_x + right_table(300, built.d),
        what=f"`{probe.name}({built.d})` (default max_len and dropout) on x of shape (2, 300, 12) in eval mode",
        **table_tolerance(300, built.d, rtol=OUTPUT_RTOL),
    )


def check_positional_encoding(cls: type[nn.Module], probe: Probe) -> None:
    built = build_positional_encoding(cls, probe)
    module, d, max_len = built.module, built.d, built.max_len
    no_input = torch.zeros(1, max_len, d, device=probe.device)  # what a mistake adds to it is its table
    probe.independent(
        storage=lambda: expect_table_storage(probe, module, built.found, max_len, d),
        table=lambda: expect_table(
            probe,
            built.table,
            f"your table `{probe.name}({d}, max_len={max_len})`",
            lambda pe: probe.known_mistakes(no_input, pe),
        ),
        values=lambda: encoding_values(probe, built),
        dropout=lambda: expect_dropout_of_own_output(
            probe, module, (built.inputs,), built.p, "the output for x of shape (3, 7, 12)", "x + self.pe[:T]"
        ),
        length=lambda: encoding_length(probe, built),
    )
    encoding_defaults(probe, built)
    # Device: the table must move with the module.
    module_device_pass(
        probe,
        cls,
        (d, max_len, built.p),
        lambda device: (probe.randn(3, 7, d, device=device),),
        code="positions_on_cpu",
        message=POSITIONS_ON_CPU.format(name=probe.name),
        hint=POSITIONS_ON_CPU_HINT,
        fix=POSITIONS_ON_CPU_FIX,
    )


GRADIENT_FIX = "Look the ids up in the registered table itself, `self.embedding(ids) * math.sqrt(self.d_model)`, with no .detach() or torch.no_grad() on the way."


@dataclass(frozen=True)
class BuiltWithTokens(Built):
    """TokenAndPositionEmbedding's: a token table besides the positional one."""

    vocab_size: int
    tokens: Callable[[], torch.Tensor]  # the student's token table, filled with known values on first use


def build_token_and_position(cls: type[nn.Module], probe: Probe) -> BuiltWithTokens:
    V, d, max_len, p = 37, 10, 30, 0.2  # sqrt(10) is no integer, and differs from sqrt(V) and sqrt(d/2)
    module = probe.build(cls, V, d, max_len, p)
    found = stored_table(
        module, max_len, d, exclude=lambda t: V in t.shape
    )  # a token table, of any width, holds no positions
    ids = probe.sequence(probe.ids(V, 3, 7), max_len)  # (B=3, T=7), ids 0 and V - 1 among them
    random_tokens = probe.randn(V, d)

    @functools.cache
    def tokens() -> torch.Tensor:
        """Found when an aspect first needs it: a module without one fails that aspect, not the check."""
        table = token_table(probe, module, V, d)
        with torch.no_grad():
            table.copy_(random_tokens)  # known values, whatever the init
        return table

    return BuiltWithTokens(cls, module, found, ids, d, max_len, p, V, tokens)


def token_values(probe: Probe, built: BuiltWithTokens) -> None:
    """The scaled token rows + the first T rows of the module's own table in eval mode, for (B, T) = (3, 7), (3, 1),
    a batch of one (1, 7) that must keep its axis, and (9, 4), B > T."""
    weight = built.tokens().detach().float()
    probe.call(built.module.eval)
    own = built.own(probe.device)
    shapes = ((3, 1), (1, 7), (9, 4))
    for ids in (
        built.inputs,
        *(probe.sequence(probe.ids(built.vocab_size, *shape), built.max_len) for shape in shapes),
    ):
        token_output(probe, built, ids, weight, own)


def token_output(
    probe: Probe, built: BuiltWithTokens, ids: torch.Tensor, weight: torch.Tensor, own: torch.Tensor
) -> None:
    """One call's output: its shape, then its values; a wrong scale or wrong rows of the table are named."""
    T = ids.shape[1]
    try:
        out = call_sliced(probe, built, ids, (*ids.shape, built.d))
    except Failure as failure:
        batch_axis_as_length(probe, built, failure, ids.shape)
        raise
    scaled = reference.scaled_embedding(weight, ids)
    expected = scaled + own[:T]
    expect_no_dropout_in_eval(probe, out, expected)
    expect_batch_kept(probe, out, ids, expected)
    same_shape = isinstance(out, torch.Tensor) and out.shape == expected.shape
    scale = fitted_scale(out - own[:T] if same_shape else out, weight[ids])
    what = f"the output for ids of shape {tuple(ids.shape)} in eval mode" + (
        "" if built.table is None else f" (with the first {T} row{'s' if T > 1 else ''} of your own positional table)"
    )
    tolerance = table_tolerance(T, built.d, rtol=OUTPUT_RTOL)
    try:
        probe.expect(out, expected, what=what, mistakes=probe.known_mistakes(weight, ids, own, scale), **tolerance)
    except Failure as failure:
        name_the_scale(probe, failure, scale, built.d)
        rows_read(probe, built, failure, out - scaled if same_shape else None, f"ids of shape {tuple(ids.shape)}")
        raise


def expect_batch_kept(probe: Probe, out: Any, ids: torch.Tensor, expected: torch.Tensor) -> None:
    """A batch of one sequence keeps its batch axis: (1, T, d), not (T, d)."""
    if isinstance(out, torch.Tensor) and ids.shape[0] == 1 and out.shape == expected.shape[1:]:
        probe.fail(
            "wrong_shape",
            f"For a batch of one sequence, ids of shape {tuple(ids.shape)}, `{probe.name}` returns shape {tuple(out.shape)}: the batch axis is gone.",
            hint="A batch of one is still a batch: the output is (B, T, d_model) for every B, 1 included. squeeze() removes every axis of size 1, whatever it means.",
            fix="Drop the `.squeeze(0)` (or `.squeeze()`): the (T, d_model) positional rows broadcast over the batch by themselves.",
        )


def batch_axis_as_length(probe: Probe, built: BuiltWithTokens, failure: Failure, shape: torch.Size) -> None:
    """A call that raised for B != T but is right for a square batch took T from the batch axis (ids.shape[0])."""
    B, T = shape
    if failure.code != "raised" or B == T:
        return
    square = probe.ids(built.vocab_size, T, T)
    try:
        out = probe.call(built.module, square)
    except Failure:
        return
    expected = reference.scaled_embedding(built.tokens().detach().float(), square) + built.own(probe.device)[:T]
    if close(out, expected, **table_tolerance(T, built.d, rtol=OUTPUT_RTOL)):
        probe.fail(
            "batch_seq_confusion",
            f"For ids of shape {tuple(shape)}, {failure.message.rstrip('.')}; yet it gives the right output when B = T, ids of shape ({T}, {T}): "
            "it takes the sequence length from the batch axis, ids.shape[0].",
            hint=advice(probe.exercise, "batch_seq_confusion")[1],
            fix="Take the length from the sequence axis, `T = ids.size(1)`, and add `self.pe[:T]`, shape (T, d_model), as it is: it broadcasts over the batch.",
        )


def token_gradient(probe: Probe, built: BuiltWithTokens) -> None:
    """The token table is trained: a gradient must reach every row of it, sqrt(d) per use once the values are right."""
    V, weight = built.vocab_size, built.tokens()
    weight.grad = None
    probe.call(built.module.eval)
    every = probe.sequence(probe.ids(V, 2, 19, every=True), built.max_len)  # each of the 37 rows at least once
    out = probe.call(built.module, every)
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        probe.fail(
            "no_gradient",
            f"`{probe.name}`'s output does not require grad although its token table does: it is cut off from the table's gradient, so the embedding could never learn.",
            hint=NO_GRADIENT_HINT,
            fix=GRADIENT_FIX,
        )
    backward_reaches(probe, out, None, weight, "its token table", GRADIENT_FIX)
    if not probe.passed("values"):
        return  # a wrong scale gives a wrong gradient: the values said it already
    uses = torch.bincount(every.flatten(), minlength=V).to(weight.grad.dtype)  # out.sum(): sqrt(d) per use of a row
    expect_gradient(
        probe,
        weight,
        (uses * built.d**0.5)[:, None].expand(V, built.d),
        uses > 0,
        name=name_of(built.module, weight),
        inputs=f"ids of shape (2, 19) that use every one of the {V} token rows",
        fix="Build the token table as `nn.Embedding(vocab_size, d_model)`, without padding_idx: this module trains every token's row. "
        "Look the ids up in it directly, with no .detach(), .data or gradient hook on some of its rows.",
    )


def token_length(probe: Probe, built: BuiltWithTokens) -> None:
    """T = max_len works and T = max_len + 1 is refused (on the CPU, without dropout)."""
    V, d, max_len = built.vocab_size, built.d, built.max_len
    on_cpu = probe.call(built.cls, V, d, max_len, 0.0, what=f"`{probe.name}({V}, {d}, {max_len}, 0.0)`")
    refuses_past_max_len(
        probe,
        lambda T: probe.call(on_cpu, probe.sequence(probe.ids(V, 2, T, device="cpu"), max_len)),
        max_len,
        fix="At the start of forward, with T = ids.size(1): `if T > self.max_len: raise ValueError(f'sequence length {T} > max_len {self.max_len}: build the module with a larger max_len')`.",
    )


def check_token_and_position(cls: type[nn.Module], probe: Probe) -> None:
    built = build_token_and_position(cls, probe)
    module, V, d, max_len = built.module, built.vocab_size, built.d, built.max_len
    no_tokens = torch.zeros(V, d, device=probe.device)  # what a mistake adds to them is its table
    all_positions = torch.zeros(1, max_len, dtype=torch.long, device=probe.device)
    total = "self.embedding(ids) * math.sqrt(self.d_model) + self.pe[:T]"
    probe.independent(
        storage=lambda: expect_table_storage(probe, module, built.found, max_len, d, exclude=lambda t: V in t.shape),
        table=lambda: expect_table(
            probe,
            built.table,
            f"the positional table of `{probe.name}({V}, {d}, max_len={max_len})`",
            lambda pe: probe.known_mistakes(no_tokens, all_positions, pe, None),
        ),
        values=lambda: token_values(probe, built),
        scale=lambda: expect_fixed_scale(probe, module, d),
        dropout=lambda: expect_dropout_of_own_output(
            probe, module, (built.inputs,), built.p, "the output for ids of shape (3, 7)", total
        ),
        gradient=lambda: token_gradient(probe, built),
        length=lambda: token_length(probe, built),
    )
    # Device: the table must move with the module.
    module_device_pass(probe, cls, (V, d, max_len, built.p), lambda device: (probe.randint(V, 3, 7, device=device),))


BASE = Arg("number", domain="> 1", default=10000.0, values=(10000.0, 500000.0))
TABLE_CONTRACT = Contract(
    args={"max_len": Arg("size", "L"), "d_model": Arg("size", "d"), "base": BASE},
    result=Result("L d"),
    sizes={"L": 30, "d": 12},
    ones="L",
)
SHIFT_CONTRACT = Contract(
    args={"k": Arg("number", values=(3, -5)), "d_model": Arg("size", "d"), "base": BASE},
    result=Result("d d"),
    sizes={"d": 8},
)
# The modules: their right outputs from the right table (at 16 positions float32's sin is exact to 2e-6).
MODULE_SIZES = {"V": 13, "d": 12, "L": 16, "B": 3, "T": 7}
RATE = Arg("rate", domain=">= 0 and < 1", default=0.1)
ENCODING_CONTRACT = Contract(
    init={"d_model": Arg("size", "d"), "max_len": Arg("size", "L", default=5000), "dropout": RATE},
    args={"x": Arg("activations", "B T d", grad=True)},
    result=Result("B T d", dtype="x"),
    sizes=MODULE_SIZES,
    ones="B T",
    expected=lambda probe, module, d_model, max_len, dropout, x: (
        x + right_table(max_len, d_model, device=x.device)[: x.shape[1]]
    ),
)
TOKEN_AND_POSITION_CONTRACT = Contract(
    init={"vocab_size": Arg("size", "V"), "d_model": Arg("size", "d"), "max_len": Arg("size", "L"), "dropout": RATE},
    args={"ids": Arg("ids", "B T", bound="V")},
    result=Result("B T d"),
    sizes=MODULE_SIZES,
    ones="B T",
    expected=lambda probe, module, vocab_size, d_model, max_len, dropout, ids: (
        token_table(probe, module, vocab_size, d_model)[ids] * math.sqrt(d_model)
        + right_table(max_len, d_model, device=ids.device)[: ids.shape[1]]
    ),
)

EXERCISES = [
    Exercise(
        id="sinusoidal_encoding",
        chapter=3,
        points=2,
        kind="function",
        reference=reference.sinusoidal_encoding,
        check=check_sinusoidal_encoding,
        mistakes=TABLE_MISTAKES,
        difficulty=2,
        importance=3,
        minutes=20,
        edges=("lengths",),
        no_device_pass=TAKES_NO_TENSOR,
        contract=TABLE_CONTRACT,
    ),
    Exercise(
        id="relative_shift_matrix",
        chapter=3,
        points=2,
        kind="function",
        reference=reference.relative_shift_matrix,
        check=check_relative_shift_matrix,
        mistakes=SHIFT_MISTAKES,
        difficulty=3,
        importance=2,
        minutes=20,
        no_device_pass=TAKES_NO_TENSOR,
        contract=SHIFT_CONTRACT,
    ),
    Exercise(
        id="PositionalEncoding",
        chapter=3,
        points=2,
        kind="module",
        reference=reference.PositionalEncoding,
        check=check_positional_encoding,
        # not TokenAndPosition's: it scales its token rows itself (its own scaled_position_too reads them)
        mistakes={**POSITIONAL_ENCODING_MISTAKES, "input_scaled": input_scaled, "scaled_position_too": sum_scaled},
        difficulty=2,
        importance=3,
        minutes=15,
        edges=("lengths",),
        contract=ENCODING_CONTRACT,
    ),
    Exercise(
        id="TokenAndPositionEmbedding",
        chapter=3,
        points=3,
        kind="module",
        reference=reference.TokenAndPositionEmbedding,
        check=check_token_and_position,
        mistakes=TOKEN_AND_POSITION_MISTAKES,
        difficulty=2,
        importance=3,
        minutes=15,
        edges=("ids", "lengths"),
        contract=TOKEN_AND_POSITION_CONTRACT,
    ),
]
