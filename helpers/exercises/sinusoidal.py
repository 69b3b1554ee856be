"""The sinusoidal-table probe kit that chapter 03's checks share (no exercise is declared here).

* the right table, its angles and its tolerance, entry by entry (`right_table`, `table_angles`,
  `table_tolerance`), and the readings of a wrong table: half precision on the way
  (`table_precision_first`) or what its layout and frequencies show (`structurally`);
* where a module keeps its table (`stored_table`, `expect_table_storage`, `expect_table`), how it
  slices it (`columns_sliced`, chapter 04's learned table too), and its dropout
  (`expect_trained_dropout`, `expect_dropout_of_own_output`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from helpers import reference
from helpers.exercises.common import (
    angle_tolerance,
    drops_in_eval,
    expect_dropout,
    expect_then,
    frequencies,
    position_tables,
    precision_first,
    registered_tensors,
)
from helpers.exercises.structure import name_what_is_wrong, sinusoidal_findings
from helpers.probe import Probe
from helpers.safety import Failure

TABLE_LAYOUT = "Row pos, column 2i holds sin(pos / base^(2i/d_model)); column 2i+1 holds cos of the same angle."


@functools.lru_cache(maxsize=16)
def _right_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    return reference.sinusoidal_encoding(max_len, d_model, base)


def right_table(max_len: int, d_model: int, base: float = 10000.0, device: torch.device | str = None) -> torch.Tensor:
    """The reference table, computed once per size: a check asks for the same few again and again."""
    return _right_table(max_len, d_model, base).clone().to(device or "cpu")


def table_angles(max_len: int, d_model: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(angles (max_len, d), ω (d,)) in float64: column j holds the angle of its sin or cos, pos·ω_{j // 2}."""
    omega = frequencies(d_model, base).repeat_interleave(2)[:d_model]
    return torch.arange(max_len, dtype=torch.float64)[:, None] * omega, omega


def table_tolerance(max_len: int, d_model: int, base: float = 10000.0, rtol: float = 0.0) -> dict[str, Any]:
    """Entry by entry, what float32 rounding makes of a right table's angle (common.angle_tolerance):
    2e-7 at position 0, up to 5e-5 at 50 and 2e-3 at 2000. Measured on the right tables in
    tests/submissions (pow, exp-log, matmul, loop, float64 then cast): at most a quarter of it; a
    float16 table is 1000 times over it at position 0. `rtol`: room for the rounding of what a
    module adds the table to."""
    angles, omega = table_angles(max_len, d_model, base)
    return {"rtol": rtol, "atol": angle_tolerance(torch.float32, angles, omega)}


# A module's output is its input (x, or scaled token rows) plus the table: float32 additions round
# relative to the sum, so the table's own tolerance gets the float32 default rtol on top.
OUTPUT_RTOL = 1e-5
# Which rows of its table a module added (common.rows_read): neighbouring rows differ by O(0.1).
ROWS_READ_ATOL = 1e-4


TABLE_PRECISION_FIX = (
    "Build the table in float32, or in float64 and cast once at the end: the positions `torch.arange(max_len, dtype=torch.float32)` "
    "(float16 holds the integers only up to 2048), the frequencies and the angles in float32, and no `.half()`, `.bfloat16()` or "
    "`dtype=torch.float16` on the way, buffers included."
)


def table_precision_first(
    probe: Probe, out: Any, expected: torch.Tensor, args: tuple[Any, ...], then: Callable[[Failure], None]
) -> Callable[[Failure], None]:
    """common.precision_first for a table (`args` = max_len, d_model[, base]): within what one step
    through bfloat16 or float16 makes (of the positions, the frequencies, the angles or the table)
    it is low_precision, not a wrong formula; else `then`."""

    def fallback(failure: Failure) -> None:  # the tolerances are worked out only for a table that missed
        angles, _ = table_angles(*args)
        precision_first(
            probe,
            out,
            expected,
            table_tolerance(*args)["atol"],
            angle_tolerance(
                torch.bfloat16, angles, torch.ones(()), 1.0, torch.bfloat16
            ),  # ω rounded after it was made: no |ln ω|
            then,
            code="low_precision",
            said="more than float32 rounding ever makes there, and as much as one step through float16 or bfloat16 makes. "
            "Somewhere on the way the positions, the frequencies, the angles or the table itself were held in half precision.",
            fix=TABLE_PRECISION_FIX,
            at_row=True,
        )(failure)

    return fallback


def structurally(probe: Probe, table: torch.Tensor, base: float = 10000.0) -> Callable[[Failure], None]:
    """expect_then's fallback for a table no catalogued mistake reproduces: name what its layout,
    its frequencies and its row 0 show (the first finding; the others go to `also`)."""
    return lambda failure: name_what_is_wrong(
        probe, failure, sinusoidal_findings(table, base) if isinstance(table, torch.Tensor) else []
    )


BUFFER_HINT = "A tensor that belongs to the module but is not trained is a buffer: registered, it moves with .to(device) and is saved in the state_dict, and the optimizer never sees it."


class StoredTable(NamedTuple):
    name: str  # the student's
    rows: torch.Tensor  # the (max_len, d) rows of positions 0 .. max_len - 1
    how: str  # "parameter", "buffer" or "plain"
    full: torch.Tensor | None = None  # the whole table, read as (R, d)
    start: int = 0  # the row of position 0 in it


def stored_table(
    module: nn.Module, max_len: int, d: int, exclude: Callable[[torch.Tensor], bool] = lambda t: False
) -> StoredTable | None:
    """The student's table of positions, found by its role, not its exact shape (common.position_tables:
    d columns, at least max_len rows, either way round, wherever it is kept), and in it the max_len rows
    that hold positions 0 .. max_len - 1: after a padding offset (fairseq, OPT keep rows before position 0)
    the rows that match the formula's from position 0 on; when no rows do, its first max_len rows, which
    the table probes then read. None if the module keeps no such table."""
    found = position_tables(module, max_len, d, exclude)
    if not found:
        return None
    right, tolerance = right_table(max_len, d).double(), table_tolerance(max_len, d)["atol"]
    for name, _, table, how in found:
        rows = table.detach().to("cpu", torch.float64)
        starts = (
            ((rows[: len(rows) - max_len + 1] - right[0]).abs() <= tolerance[0]).all(1).nonzero().flatten().tolist()
        )
        start = next((k for k in starts if ((rows[k : k + max_len] - right).abs() <= tolerance).all()), None)
        if start is not None:
            return StoredTable(name, table.detach()[start : start + max_len], how, table.detach(), start)
    name, _, table, how = found[0]
    return StoredTable(name, table.detach()[:max_len], how, table.detach(), 0)


def expect_table_storage(
    probe: Probe,
    module: nn.Module,
    found: StoredTable | None,
    max_len: int,
    d: int,
    exclude: Callable[[torch.Tensor], bool] = lambda t: False,
) -> None:
    """The sinusoidal table is a buffer, computed once in __init__ (`found` by stored_table). A table
    kept in parts, a row per position in each (sin and cos apart), is judged by how the parts are kept;
    its values, by the module's output."""
    if found is None:
        parts = position_tables(module, max_len, None, exclude)
        part = next((part for part in parts if part[3] != "buffer"), parts[0] if parts else None)
        found = None if part is None else StoredTable(part[0], part[2], part[3])
    if found is not None and found.how == "plain":
        name = found.name
        probe.fail(
            "pe_not_buffer",
            f"`{probe.name}` keeps its table in a plain attribute, `self.{name}`: module.to('cuda') does not move it (your forward then mixes devices) and state_dict() does not save it.",
            hint=BUFFER_HINT,
            fix=f"Register it in __init__, `self.register_buffer('{name}', table)`, instead of assigning it to `self.{name}`.",
        )
    if found is None:
        tensors = registered_tensors(module)
        probe.fail(
            "pe_not_buffer",
            f"`{probe.name}(..., max_len={max_len})` holds no table of positions: no parameter or buffer with {d} columns and at least {max_len} rows "
            f"(it has: {', '.join(f'{n} {tuple(t.shape)}' for n, t in tensors.items()) or 'nothing'}). Does its forward compute the encoding anew on every call?",
            hint="The encoding depends only on the positions, never on the input: it can be computed once, for all max_len positions, "
            "and kept with the module, which moves it with .to(device) and saves it in the state_dict.",
            fix="In __init__, build the (max_len, d_model) table and register it, `self.register_buffer('pe', table)`; in forward, add its first T rows: `x + self.pe[:T]`.",
        )
    assert found is not None  # probe.fail raised
    name, how = found.name, found.how
    frozen = how == "parameter" and not module.get_parameter(name).requires_grad
    if frozen:  # nothing trains it today: what is wrong is what a Parameter is
        owner = name.rsplit(".", 1)[0] if "." in name else None
        kept = (
            f"an nn.Embedding, `self.{owner}`, frozen"
            if owner
            else f"`{name}`, an nn.Parameter with requires_grad=False"
        )
        probe.fail(
            "pe_is_parameter",
            f"`{probe.name}` keeps its sinusoidal table in {kept}: nothing trains it now, but it is still a Parameter. "
            "It is listed in parameters() and so handed to every optimizer built from them, and any `model.requires_grad_(True)` "
            "(as fine-tuning code often calls) unfreezes it, after which the fixed formula drifts away.",
            hint=BUFFER_HINT,
            fix="Register the table as a buffer, `self.register_buffer('pe', table)`, and add `self.pe[:T]` in forward"
            + (f" instead of looking it up in `self.{owner}`." if owner else "."),
        )
    if how == "parameter" and "." in name:  # a submodule's weight: an nn.Embedding, chapter 04's learned table
        owner = name.rsplit(".", 1)[0]
        probe.fail(
            "pe_is_parameter",
            f"`{probe.name}` looks positions up in a trainable table, `self.{owner}` (an nn.Embedding or similar): that is a learned position table, chapter 04's idea. "
            "This exercise adds the fixed sinusoidal table, which nothing trains.",
            hint=BUFFER_HINT,
            fix=f"Drop `self.{owner}`; build the (max_len, d_model) sinusoidal table in __init__ and register it, `self.register_buffer('pe', table)`, then add `self.pe[:T]` in forward.",
        )
    if how == "parameter":
        probe.fail(
            "pe_is_parameter",
            f"`{probe.name}`'s table `{name}` is an nn.Parameter, so the optimizer would train it and the fixed formula would drift away.",
            hint=BUFFER_HINT,
            fix=f"Register the table as a buffer instead of wrapping it in nn.Parameter: `self.register_buffer('{name}', table)`.",
        )


def expect_table(
    probe: Probe, table: torch.Tensor | None, what: str, mistakes: Callable[[torch.Tensor], Callable[..., Any]]
) -> None:
    """The stored table against the reference. `mistakes(right_table)` runs the
    module's mistakes on an input of zeros: what they add is the mistaken table.
    A table no mistake reproduces is read for its layout, frequencies and row 0.
    No table at all is expect_table_storage's to say."""
    if table is None:
        return
    max_len, d = table.shape
    expected = right_table(max_len, d, device=table.device)
    fallback = table_precision_first(probe, table[None], expected[None], (max_len, d), structurally(probe, table))
    expect_then(
        probe,
        fallback,
        table[None],
        expected[None],
        what=what,
        mistakes=mistakes(expected),
        hint=TABLE_LAYOUT,
        **table_tolerance(max_len, d),
    )


def kept(module: nn.Module, name: str) -> Any:
    """The tensor a module keeps under a dotted name (a parameter, a buffer or a plain attribute)."""
    return functools.reduce(getattr, name.split("."), module)


def columns_sliced(probe: Probe, failure: Failure, table: Any, name: str, shape: tuple[int, ...], fix: str) -> None:
    """A call that raised as `x + table[:, :T]` raises, x of `shape` (B, T, d), with `table` kept 2-D: the slice
    of a (1, max_len, d) buffer (the Annotated Transformer's) kept for a (max_len, d) table (review P1)."""
    if failure.code != "raised" or not isinstance(table, torch.Tensor) or table.dim() != 2:
        return
    T = shape[1]
    sliced, x = table.detach()[:, :T], torch.zeros(shape, dtype=table.dtype, device=table.device)
    said = set()
    for a, b in ((x, sliced), (sliced, x)):
        try:
            a + b
        except RuntimeError as error:
            said.add(str(error))
    if any(words in failure.message for words in said):
        probe.fail(
            "columns_sliced",
            f"{failure.message.rstrip('.')}. Your table `{name}` is 2-D, {tuple(table.shape)}: `[:, :T]` takes its first "
            f"T = {T} columns, shape {tuple(sliced.shape)}, not its first {T} rows.",
            hint="`pe[:, :T]` slices positions only in a table with a leading axis of 1, (1, max_len, d_model), as the Annotated "
            "Transformer keeps its buffer. In a 2-D (max_len, d_model) table the positions run along the first axis, and a "
            "second index cuts the columns.",
            fix=fix,
        )


def expect_trained_dropout(probe: Probe, out: Any, expected: torch.Tensor, p: float, what: str, total: str) -> None:
    """`total` is the module's sum before dropout, as code (the fix shows it)."""
    where = f"Keep `self.dropout = nn.Dropout(dropout)` from __init__ and apply it last, to the whole sum: `return self.dropout({total})`."
    hint = (
        "Vaswani et al. (§5.4) apply dropout to the sums of the embeddings and the positional encodings, once, as the last step; "
        "a dropout module does this in training mode and switches itself off after .eval()."
    )
    not_dropout = (
        "wrong_values",
        f"In training mode {what} is not dropout of the eval-mode output: its entries are not all either 0 or the eval-mode value times one common factor.",
    )
    expect_dropout(probe, out, expected, p, what, where=where, not_dropout=not_dropout, hint=hint)


def expect_dropout_of_own_output(
    probe: Probe, module: nn.Module, inputs: tuple[Any, ...], p: float, what: str, total: str
) -> None:
    """In training mode the output is dropout of the module's own eval-mode output, right or
    wrong (its values are another probe's business). An eval-mode output with dropped
    entries (dropout_in_eval: the inputs are random, so no right output holds exact zeros)
    is the eval-mode probe's to name."""
    probe.call(module.eval)
    eval_out = probe.call(module, *inputs)
    if drops_in_eval(eval_out, p):
        return
    probe.call(module.train)
    try:
        expect_trained_dropout(probe, probe.call(module, *inputs), eval_out.detach(), p, what, total)
    except Failure as failure:
        if failure.code == "dropout_rate_ignored":
            rate_not_passed_on(probe, failure, module, p)
        raise


def rate_not_passed_on(probe: Probe, failure: Failure, module: nn.Module, p: float) -> None:
    """The dropout at the wrong rate belongs to a module built inside this one, without the rate (review Q3:
    told of `nn.Dropout()` or a fixed 0.1 that the code did not hold)."""
    inner = [(name, m) for name, m in module.named_modules() if isinstance(m, nn.Dropout) and "." in name and m.p != p]
    if not inner:
        return
    name, dropout = inner[0]
    owner = name.rsplit(".", 1)[0]
    kind = type(module.get_submodule(owner)).__name__
    probe.fail(
        "dropout_rate_ignored",
        failure.message,
        hint=f"The dropout that runs is `{name}`, inside your `{owner}` ({kind}), and it has p = {dropout.p:g}: the rate "
        f"this module was given never reached `{owner}`, so it kept a rate of its own (its default?).",
        fix=f"Pass the rate on where you build the inner module: `self.{owner} = {kind}(..., dropout=dropout)`.",
    )
