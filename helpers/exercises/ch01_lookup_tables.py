"""Chapter 01, lookup tables: `lookup` and `one_hot_lookup`.

Both take (weight (V, d), ids Long(...)) and return (..., d); their mistakes
take the same arguments and return what the mistaken code outputs."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from helpers import reference
from helpers.contracts import FLOATS, Arg, Contract, Result
from helpers.exercises.common import (
    NO_GRADIENT_HINT,
    backward_reaches,
    calls_of,
    expect_cases,
    expect_gradient,
    expect_then,
)
from helpers.probe import Probe, close
from helpers.registry import Exercise
from helpers.safety import MATRIX_PRODUCTS, Failure, matrix_product_of_inputs

# Every way to get an embedding without writing one: the functional API, torch's own
# functions, and the same kernels reached through torch.ops (a packet or an overload).
EMBEDDING_APIS = (
    F.embedding,
    torch.embedding,
    F.embedding_bag,
    torch.embedding_bag,
    torch._embedding_bag,
    torch._embedding_bag_forward_only,
    torch.ops.aten.embedding,
    torch.ops.aten.embedding.default,
    torch.ops.aten.embedding_bag,
    torch.ops.aten.embedding_bag.default,
    torch.ops.aten._embedding_bag,
    torch.ops.aten._embedding_bag.default,
    torch.ops.aten._embedding_bag_forward_only,
    torch.ops.aten._embedding_bag_forward_only.default,
)

# expect_cases' cases: (arguments, a call of the student's code, the probe of its output)
Runs = list[tuple[tuple[Any, ...], Callable[[], Any], Callable[[Any], None]]]


# --- known mistakes ------------------------------------------------------------


def transposed(weight: torch.Tensor, ids: torch.Tensor) -> list[torch.Tensor]:
    """Your result is made of columns of `weight`, not rows: you read the
    table as (d_model, vocab_size).

    Hint: An nn.Embedding stores one row per token, shape (vocab_size, d_model):
    token i's vector is row i. Which axis of the weight do your ids select?

    Fix: Select rows, `weight[ids]`, with no transpose; in one_hot_lookup, make
    the one-hot V = weight.shape[0] wide and multiply it by the weight itself:
    `F.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight`."""
    columns_last = weight.T[ids]  # (..., V): weight.T[ids] or one_hot(ids, d) @ weight.T
    columns_first = weight[:, ids]  # (V, ...)
    return [columns_last, columns_first]


# --- probes --------------------------------------------------------------------


LOOKUP_VALUES = (  # wrong_values: (hint, fix)
    "Each output vector is one row of the table: out[b, t] must equal weight[ids[b, t]], all d_model numbers of it, and nothing else is added or mixed in.",
    "Compare `out[0, 0]` with `weight[ids[0, 0]]` on a small batch, then look for the step that changes it: an extra operation, a reshape that reorders the rows, a sum over the wrong axis.",
)


# wrong_shape's hint (review L4/L5: a result of the wrong shape was given the values' hint and fix); its fix is
# the framework's, which says which axis was added or dropped.
LOOKUP_SHAPE = "The output keeps the shape of ids and adds one axis of d_model at the end: ids (B, T) give (B, T, d_model), 1-D ids (T,) give (T, d_model), and a batch of one, ids (1, T), gives (1, T, d_model)."


def values_of(probe: Probe, out: Any, weight: torch.Tensor, ids: torch.Tensor, what: str) -> None:
    expected = probe.exercise.reference(weight, ids)
    shaped = not isinstance(out, torch.Tensor) or out.shape == expected.shape
    probe.expect(
        out,
        expected,
        what=what,
        mistakes=probe.known_mistakes(weight, ids),
        hint=LOOKUP_VALUES[0] if shaped else LOOKUP_SHAPE,
        fix=LOOKUP_VALUES[1] if shaped else "",
    )


def lookup_values(probe: Probe, fn: Callable[..., Any]) -> None:
    """The rows looked up, for ids of every shape: the aspect the others build on (probe.passed("values"))."""
    # V != d and ids < d, so a transposed table gives a wrong shape, not an IndexError.
    weight = probe.randn(11, 7)
    ids = probe.randint(7, 3, 5)  # (B=3, T=5)
    values_of(probe, probe.call(fn, weight, ids), weight, ids, what="the (3, 5) batch")
    # Any leading shape and the full id range (a one-hot must be V wide even if the last ids are unused).
    weight = probe.randn(50, 16)
    ids = probe.randint(40, 2, 3, 4)
    values_of(probe, probe.call(fn, weight, ids), weight, ids, what="a (2, 3, 4) batch of ids")
    # A single text (1-D ids) and a batch of one (a size-1 dimension that must not be squeezed),
    # with the first and the last id of the table among them.
    for shape in [(6,), (1, 4)]:
        ids = probe.ids(50, *shape)
        values_of(probe, probe.call(fn, weight, ids), weight, ids, what=f"a {shape} batch of ids")


def lookup_gradient(probe: Probe, fn: Callable[..., Any]) -> None:
    """Whether the output is tied to the weight's gradient at all, and, once the values are right,
    whether each row's gradient counts how often its token was used (the first and the last row among them)."""
    weight = probe.randn(9, 10).requires_grad_()  # ids < d = 10: a transposed table runs too
    ids = probe.tag(torch.tensor([[0, 2, 2], [3, 0, 8]], device=probe.device), "ids", 9)
    try:
        out = probe.call(fn, weight, ids)
    except Failure:
        if probe.passed("values"):
            raise
        return  # code that gets the values wrong may fail here for the same reason (a transposed table)
    if not isinstance(out, torch.Tensor):
        return  # the values say so
    if not out.requires_grad:
        probe.fail(
            "no_gradient",
            f"`{probe.name}`'s output does not require grad although `weight` does: it is cut off from the weight's gradient, so the embedding could never be trained.",
            hint=NO_GRADIENT_HINT,
            fix="Compute the result from `weight` with torch operations only (indexing, `@`): drop the .detach(), the .numpy() and torch.from_numpy round-trip, or the torch.no_grad() block.",
        )
    if probe.passed("values"):  # the gradient of wrong rows tells nothing the values did not
        rows_counted(probe, out, weight, ids)


def rows_counted(probe: Probe, out: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> None:
    """Backward from the output reaches `weight` itself, and row i's gradient (for a sum of the output)
    is the number of times id i was used: a row read twice collects two gradients."""
    backward_reaches(
        probe,
        out,
        None,
        weight,
        "`weight`",
        "Index (or multiply) `weight` itself, not a tensor rebuilt from its values.",
    )
    expected = torch.zeros(9, 10, device=probe.device).index_add_(
        0, ids.flatten(), torch.ones(6, 10, device=probe.device)
    )
    used = torch.bincount(ids.flatten(), minlength=9) > 0
    expect_gradient(
        probe,
        weight,
        expected,
        used,
        name="weight",
        inputs=f"ids {ids.tolist()}",
        fix="Index `weight` itself, `weight[ids]`, for every id: no .detach() or .data on some of the rows.",
    )


def lookup_device(probe: Probe, fn: Callable[..., Any]) -> None:
    """The same call with every tensor on the meta device, then with CPU-made tensors on meta:
    the result must be made where its inputs are."""
    probe.device_pass(
        lambda device: probe.call(fn, probe.randn(11, 7, device=device), probe.randint(11, 3, 5, device=device))
    )


def lookup_aspects(probe: Probe, fn: Callable[..., Any]) -> dict[str, Callable[[], None]]:
    """Values, gradient and device, independent aspects (probe.independent): a student meets every mistake in one run."""
    return {
        "values": lambda: lookup_values(probe, fn),
        "gradient": lambda: lookup_gradient(probe, fn),
        "device": lambda: lookup_device(probe, fn),
    }


def by_indexing(probe: Probe, fn: Callable[..., Any]) -> None:
    """lookup's point is indexing: the right rows out of a one-hot product are one_hot_lookup's
    answer, not this one's; asked only once the values are right."""
    if not probe.passed("values"):
        return
    seen = calls_of(probe, fn, probe.randn(11, 7), probe.randint(11, 3, 5))
    if seen & (MATRIX_PRODUCTS | {"one_hot"}):
        probe.fail(
            "method_not_used",
            f"`{probe.name}` gives the right rows, but through a matrix product ({', '.join(sorted(seen & (MATRIX_PRODUCTS | {'one_hot'})))}): "
            "that is the next exercise, `one_hot_lookup`. This one asks for the lookup itself, by indexing.",
            hint="out[i, j] = W[x[i, j]]: a tensor of ids can index the rows of a table directly, whatever its shape, and nothing is multiplied.",
            fix="Return `weight[ids]`: advanced indexing with the id tensor gives shape ids.shape + (d,).",
        )


def check_lookup(fn: Callable[..., Any], probe: Probe) -> None:
    probe.independent(**lookup_aspects(probe, fn), method=lambda: by_indexing(probe, fn))


ONE_HOT_ERRORS = {  # torch's words -> (hint, fix) for them
    "cannot be multiplied": (
        "The one-hot's last axis must be exactly V = weight.shape[0] long to meet the (V, d) weight; without num_classes, F.one_hot guesses V from the largest id it sees.",
        "Give the width explicitly: `F.one_hot(ids, num_classes=weight.shape[0])`, so that (..., V) @ (V, d) fits.",
    ),
    "same dtype": (
        "F.one_hot returns integers (int64) and the weight holds floats; a matrix product needs both sides in one dtype.",
        "Convert the one-hot before multiplying: `F.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight`.",
    ),
}
ONE_HOT_ERRORS["scalar type"] = ONE_HOT_ERRORS["same dtype"]  # einsum's words for the same


def matrix_product(probe: Probe, fn: Callable[..., Any]) -> None:
    """That the right rows come out of a matrix product, one_hot_lookup's point, not out of indexing;
    asked only once the values are right."""
    if not probe.passed("values"):
        return
    seen = calls_of(probe, fn, probe.randn(11, 7), probe.randint(11, 3, 5))
    if matrix_product_of_inputs.__name__ in seen:
        return
    products = sorted(seen & MATRIX_PRODUCTS)
    how = (
        f"not out of a matrix product: its products ({', '.join(products)}) never multiply the ids' one-hot or the "
        "table into the rows it returns"
        if products
        else "by multiplying element by element and summing (a (..., V, d) intermediate): it never multiplies two matrices"
        if {"mul", "__mul__"} & seen and "sum" in seen
        else "by indexing the table: it never multiplies two matrices"
    )
    probe.fail(
        "not_a_matrix_product",
        f"`{probe.name}` gives the right rows, but {how}.",
        hint="A one-hot row of length V holds a single 1: times the (V, d) weight, it picks out exactly one row. That product is the point of this exercise.",
        fix="Build the one-hot, `F.one_hot(ids, num_classes=weight.shape[0]).to(weight.dtype)` of shape (..., V), and return it `@ weight`.",
    )


def check_one_hot_lookup(fn: Callable[..., Any], probe: Probe) -> None:
    try:
        probe.independent(**lookup_aspects(probe, fn), matrix_product=lambda: matrix_product(probe, fn))
    except Failure as failure:
        if failure.code == "raised":
            for words, (hint, fix) in ONE_HOT_ERRORS.items():
                if words in failure.message:
                    hint, fix = TRANSPOSED_PRODUCT if both_v_wide(failure.message) else (hint, fix)
                    hint, fix = cast_to_another_float(failure.message) or (hint, fix)
                    probe.fail("raised", failure.message, hint=hint, fix=fix)
        raise


# A one-hot V wide met a (d, V) matrix: the width is right, the weight was transposed on the way (review O2).
TRANSPOSED_PRODUCT = (
    "Your one-hot is V wide, as it should be, but the matrix it meets is (d, V): the weight transposed. F.linear(x, A) "
    "computes x @ A.T, so F.linear(one_hot, weight) multiplies by weight.T, a product that fits only a (d, V) table.",
    "Multiply by the weight itself: `one_hot @ weight`, or `F.linear(one_hot, weight.T)` if you keep F.linear.",
)


FLOAT_NAMES = {  # torch's names for a dtype in its errors: "c10::Half != float", "scalar type Float but found BFloat16"
    "c10::Half": "float16",
    "Half": "float16",
    "c10::BFloat16": "bfloat16",
    "BFloat16": "bfloat16",
    "float": "float32",
    "Float": "float32",
    "double": "float64",
    "Double": "float64",
}


def cast_to_another_float(message: str) -> tuple[str, str] | None:
    """torch's dtype error where both sides are floats: the one-hot was cast, to a float that is not the weight's
    (review O5: told "F.one_hot returns integers", and pointed at an `x` there is not)."""
    got = re.search(r"but got: (\S+) != (\S+)", message) or re.search(r"scalar type (\S+) but found (\S+)", message)
    if got is None or not all(name in FLOAT_NAMES for name in got.groups()):
        return None
    met = " and ".join(sorted({FLOAT_NAMES[name] for name in got.groups()}))
    return (
        f"Your one-hot was converted to a float, but not to the weight's dtype: the product met {met}, and it needs one dtype "
        "on both sides. A dtype written into the code fits the tables of that dtype only.",
        "Convert the one-hot to whatever dtype the weight has: `F.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight`.",
    )


def both_v_wide(message: str) -> bool:
    """torch's "shapes cannot be multiplied (NxV and dxV)": both matrices V wide, the second one transposed."""
    shapes = re.search(r"\((\d+)x(\d+) and (\d+)x(\d+)\)", message)
    return shapes is not None and shapes.group(2) == shapes.group(4) != shapes.group(3)


# --- embedding_backward: its mistakes take (grad_out, ids, vocab_size, padding_idx) -------


def backward_assigned(
    grad_out: torch.Tensor, ids: torch.Tensor, vocab_size: int, padding_idx: int | None = None
) -> torch.Tensor:
    """A token that appears several times got the gradient of only one of its uses.
    Indexed writes keep one value per distinct id: `grad[ids] = grad_out` assigns
    rows, so later uses overwrite earlier ones; `grad[ids] += grad_out` does the
    same (it reads the rows, adds, then writes each distinct id once), and so
    does a `scatter_` without reduction.

    Hint: the lookup reads row i once for every time token i appears, and each read
    sends its own gradient back: a row's gradient is the SUM over its uses.

    Fix: accumulate instead of assigning: `grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, d))`."""
    d = grad_out.shape[-1]
    grad = torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)
    grad[ids.reshape(-1)] = grad_out.reshape(-1, d)
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


def backward_trains_padding(
    grad_out: torch.Tensor, ids: torch.Tensor, vocab_size: int, padding_idx: int | None = None
) -> torch.Tensor:
    """The padding row got a gradient: with padding_idx set, nn.Embedding never trains that row.

    Hint: [PAD] tokens carry no meaning; their row stays as it was initialised (zeros), so the
    optimizer must never move it, however often padding appears.

    Fix: after accumulating, zero that row: `if padding_idx is not None: grad[padding_idx] = 0`."""
    return reference.embedding_backward(grad_out, ids, vocab_size)


def backward_transposed(
    grad_out: torch.Tensor, ids: torch.Tensor, vocab_size: int, padding_idx: int | None = None
) -> torch.Tensor:
    """Your gradient is laid out (d_model, vocab): it is the transpose of the weight's.

    Hint: a gradient has the shape of the tensor it belongs to, and the weight is
    (vocab_size, d_model): one row per token.

    Fix: build `torch.zeros(vocab_size, d_model, ...)` and add each use's gradient into its token's ROW."""
    return reference.embedding_backward(grad_out, ids, vocab_size, padding_idx).T


# Autograd would compute the gradient for the student: this exercise is to write its rule.
AUTOGRAD_APIS = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)
# aten's own backward of the lookup: the exercise's answer in one call (the hostile round of issue 45)
BACKWARD_APIS = (torch.ops.aten.embedding_dense_backward, torch.ops.aten.embedding_backward)


def backward_result_dropped(
    grad_out: torch.Tensor, ids: torch.Tensor, vocab_size: int, padding_idx: int | None = None
) -> torch.Tensor:
    """Your gradient is all zeros: the rows were computed but never stored in
    it. `grad.index_add(0, ids, rows)` without the trailing underscore (like
    `scatter_add`, `index_put`) returns a new tensor and leaves `grad` as it
    was, and that new tensor was dropped.

    Hint: torch's methods without a trailing `_` compute a result and return
    it; only the `_` versions write into the tensor they are called on. Print
    your tensor right after the call: did it change?

    Fix: Accumulate in place, `grad.index_add_(0, ids.reshape(-1), rows)`, or
    keep the result: `grad = grad.index_add(0, ids.reshape(-1), rows)`."""
    return torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device)


def check_embedding_backward(fn: Callable[..., Any], probe: Probe) -> None:
    try:
        backward_probes(fn, probe)
    except Failure as failure:
        if failure.code == "all_zeros" and right_with_padding(fn, probe, 3):
            probe.fail(
                "all_zeros",
                f"`{probe.name}` returns all zeros when padding_idx is None, and the right gradient when it is a row: "
                "the padding row is zeroed without asking whether there is one, and `grad[None] = 0` zeroes every row "
                "(None as an index adds an axis: it selects the whole tensor).",
                hint="padding_idx=None means: no padding row, leave every row as it is. An index of None is no row at all.",
                fix="Guard the zeroing: `if padding_idx is not None: grad[padding_idx] = 0`.",
            )
        if (
            failure.code == "padding_row_updated"
            and right_with_padding(fn, probe, 3)
            and not right_with_padding(fn, probe, 0)
        ):
            probe.fail(  # review B4/B8: the generic message never said why only row 0 goes wrong
                "padding_row_updated",
                f"`{probe.name}` zeroes the padding row when padding_idx is 3, but not when it is 0: a test such as "
                "`if padding_idx:` or `padding_idx > 0` takes row 0, a valid padding row (BERT's [PAD] is id 0), for no padding at all.",
                hint="0 is falsy in Python: `if padding_idx:` is False for padding_idx = 0. Only None means 'no padding row'.",
                fix="Test for None explicitly: `if padding_idx is not None: grad[padding_idx] = 0`.",
            )
        if failure.code == "raised" and re.search(r"same scalar type|same dtype", failure.message):
            probe.fail(  # review B9: the check knows both dtypes
                "raised",
                failure.message,
                hint="The gradient you accumulate into and the grad_out you add must share one dtype; torch.zeros makes float32 "
                "unless told otherwise, and one case here hands you a float64 grad_out.",
                fix="Make the accumulator in grad_out's dtype and on its device: "
                "`torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)`.",
            )
        if failure.code == "forbidden_api" and any(f"{api.__name__} " in failure.message for api in AUTOGRAD_APIS):
            probe.fail(
                "forbidden_api",
                f"`{probe.name}` lets autograd compute the gradient (it calls .backward() or torch.autograd): the result is autograd's, and this exercise is to write the rule autograd follows.",
                hint="The lookup copies row ids[n] of the weight into output n, so output n's gradient goes back to row ids[n]; a row used several times collects the sum of its uses' gradients.",
                fix="Start from `torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)` and add each output's gradient into the row of its id, "
                "with an operation that accumulates over repeated ids; then zero the padding row. No .backward() or torch.autograd.grad.",
            )
        raise


def right_with_padding(fn: Callable[..., Any], probe: Probe, padding_idx: int) -> bool:
    """Whether the code is right with this padding row: an all-zero gradient from an unguarded `grad[padding_idx] = 0`
    (review B3) is right with a row given, and `if padding_idx:` (B4/B8) with any row but 0."""
    args = (probe.randn(4, 5, dtype=torch.float64), torch.tensor([0, 2, 2, 3], device=probe.device), 6, padding_idx)
    try:
        return close(probe.call(fn, *args), reference.embedding_backward(*args))
    except Failure:
        return False


def summed_in_half(probe: Probe, out: Any, args: tuple[Any, ...]) -> Callable[[Failure], None]:
    """expect_then's fallback (issue 41, dtypes where they matter): the right gradient summed in float16 or
    bfloat16 and cast back, as an accumulator or a grad_out made half "to save memory" gives, is low_precision."""
    grad_out, ids, vocab_size, padding_idx = args

    def fallback(failure: Failure) -> None:
        shape = (vocab_size, grad_out.shape[-1])
        if not isinstance(out, torch.Tensor) or out.shape != shape or out.device != grad_out.device:
            return  # the shape and the device have their own findings
        faces = {
            half: reference.embedding_backward(grad_out.to(half), ids, vocab_size, padding_idx).to(grad_out.dtype)
            for half in (torch.float16, torch.bfloat16)
        }
        # the nearer of the two: float16's tolerance would take a bfloat16 sum too
        half, face = min(faces.items(), key=lambda item: float((out.detach() - item[1]).abs().max()))
        eps = 4 * torch.finfo(half).eps
        if close(out, face, rtol=eps, atol=eps * float(face.abs().max())):
            probe.fail(
                "low_precision",
                f"{failure.message.split(';')[0]}: each entry is the right sum rounded to {str(half).removeprefix('torch.')}, "
                "as a gradient summed in half precision and cast back to grad_out's dtype is.",
                fix="Accumulate in grad_out's own dtype, `torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)`, "
                "with no `.half()` or `.bfloat16()` on grad_out or on the accumulator.",
            )

    return fallback


def backward_probes(fn: Callable[..., Any], probe: Probe) -> None:
    V, d = 11, 7  # V != d: a transposed gradient cannot hide
    cases = (  # ids with repeats and the edge ids 0 and V - 1
        ("ids (3, 5) with repeats", (3, 5), None, torch.float32),
        ("ids (3, 5) with padding_idx=0", (3, 5), 0, torch.float32),
        ("1-D ids (9,) in float64, padding_idx=V-1", (9,), V - 1, torch.float64),
    )
    runs: Runs = []
    for what, shape, padding_idx, dtype in cases:
        ids = probe.randint(V, *shape)
        ids.view(-1)[:4] = torch.tensor([0, V - 1, 3, 3], device=probe.device)  # edges and a repeat, on purpose
        probe.tag(ids, "ids", V)
        grad_out = probe.randn(*shape, d, dtype=dtype)
        # What autograd itself computes for nn.Embedding's weight: the reference is checked against it.
        weight = torch.zeros(V, d, dtype=dtype, device=probe.device, requires_grad=True)
        F.embedding(ids, weight, padding_idx=padding_idx).backward(grad_out)
        args = (grad_out, ids, V, padding_idx)
        expect = lambda out, args=args, expected=weight.grad, what=what: expect_then(
            probe,
            summed_in_half(probe, out, args),
            out,
            expected,
            what=f"the gradient for {what}",
            mistakes=probe.known_mistakes(*args),
            hint="Take the smallest case with a repeat: one id used twice, say ids = [2, 2] with grad_out rows g0 and g1. Row 2 of the gradient must be g0 + g1, every other row zero (the padding row too).",
            fix="Run your function on `ids = torch.tensor([2, 2])`, `grad_out = torch.eye(2)`, vocab_size = 4, and print the result: row 2 must be [1, 1] and rows 0, 1, 3 zero. Follow the first wrong row back through your code.",
        )
        runs.append((args, functools.partial(probe.call, fn, *args), expect))
    expect_cases(probe, runs, {"padding_row_updated": lambda args: [(*args[:3], None)] if args[3] is not None else []})
    probe.device_pass(
        lambda device: probe.call(fn, probe.randn(3, 5, d, device=device), probe.randint(V, 3, 5, device=device), V, 0)
    )


# The contract's dtype axes, said with this chapter's argument names (review O5: a fix that cited `x`, which no
# exercise of the chapter takes).
ONE_HOT_DTYPE_ADVICE = {
    "fixed_dtype": (
        "A `.float()` or `.half()` on the one-hot, or a torch.zeros / torch.eye without dtype=, fixes one dtype; the weight may come "
        "in float64, float16 or bfloat16, and a matrix product refuses to mix two dtypes.",
        "Take the dtype from the weight: `.to(weight.dtype)` on the one-hot, and `dtype=weight.dtype` in every factory call.",
    ),
}
BACKWARD_DTYPE_ADVICE = {  # a float32 accumulator that raises is told by the check itself (review B9)
    "precision_lost": (
        "A float64 grad_out asks for a float64 gradient all the way: an accumulator made in float32 (torch.zeros without dtype=, "
        "a `.float()`) rounds every sum to 7 digits, and casting it back at the end does not bring them back.",
        "Compute in grad_out's dtype: `torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)` for an accumulator, "
        "`.to(grad_out.dtype)` for a one-hot, and no `.float()` on grad_out.",
    ),
}

# weight (V, d) of any float dtype, ids of any shape: the rows, in weight's dtype, with the weight's gradient.
LOOKUP_CONTRACT = Contract(
    args={"weight": Arg("table", "V d", dtypes=FLOATS, grad=True), "ids": Arg("ids", "...", bound="V")},
    result=Result("... d", dtype="weight"),
    sizes={"V": 11, "d": 7, "...": "B T", "B": 3, "T": 5},
    ones="B T",
)

# grad_out (..., d) of any float dtype, ids (...), vocab_size V: the (V, d) gradient in grad_out's dtype, whichever ids occur.
BACKWARD_CONTRACT = Contract(
    args={
        "grad_out": Arg("gradient", "... d", dtypes=FLOATS),
        "ids": Arg("ids", "...", bound="V"),
        "vocab_size": Arg("size", "V"),
        "padding_idx": Arg("index", bound="V", default=None, values=(None, 0)),
    },
    result=Result("V d", dtype="grad_out"),
    sizes={"V": 11, "d": 7, "...": "B T", "B": 3, "T": 5},
    ones="B T",
)

EXERCISES = [
    Exercise(
        id="lookup",
        chapter=1,
        points=2,
        kind="function",
        reference=reference.lookup,
        check=check_lookup,
        mistakes={"transposed_weight": transposed},
        forbidden=EMBEDDING_APIS,
        method_seen="that it multiplies no matrices",
        difficulty=1,
        importance=3,
        minutes=5,
        edges=("ids",),
        contract=LOOKUP_CONTRACT,
    ),
    Exercise(
        id="one_hot_lookup",
        chapter=1,
        points=2,
        kind="function",
        reference=reference.one_hot_lookup,
        check=check_one_hot_lookup,
        mistakes={"transposed_weight": transposed},
        advice=ONE_HOT_DTYPE_ADVICE,
        forbidden=EMBEDDING_APIS,
        method_seen="that its rows come out of a matrix product of its inputs",
        difficulty=1,
        importance=2,
        minutes=10,
        edges=("ids",),
        contract=LOOKUP_CONTRACT,
    ),
    Exercise(
        id="embedding_backward",
        chapter=1,
        points=2,
        kind="function",
        reference=reference.embedding_backward,
        check=check_embedding_backward,
        mistakes={
            "no_accumulation": backward_assigned,
            "padding_row_updated": backward_trains_padding,
            "transposed_weight": backward_transposed,
            "all_zeros": backward_result_dropped,
        },
        forbidden=EMBEDDING_APIS + AUTOGRAD_APIS + BACKWARD_APIS,
        advice=BACKWARD_DTYPE_ADVICE,
        difficulty=2,
        importance=2,
        minutes=15,
        edges=("ids",),
        contract=BACKWARD_CONTRACT,
    ),
]
