"""Chapter 01, lookup tables: `lookup` and `one_hot_lookup`.

Both take (weight (V, d), ids Long(...)) and return (..., d); their mistakes
take the same arguments and return what the mistaken code outputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from helpers import reference
from helpers.checking import Failure, Probe
from helpers.registry import Exercise

# Every way to get an embedding without writing one.
EMBEDDING_APIS = (F.embedding, torch.embedding, F.embedding_bag)
MATRIX_PRODUCTS = {
    "matmul",
    "__matmul__",
    "__rmatmul__",
    "mm",
    "bmm",
    "mv",
    "einsum",
    "tensordot",
    "linear",
    "addmm",
    "baddbmm",
    "inner",
    "_sparse_mm",
    "smm",
    "hspmm",
}


# --- known mistakes ------------------------------------------------------------


def transposed(weight: torch.Tensor, ids: torch.Tensor) -> list[torch.Tensor]:
    """Your result is made of columns of `weight`, not rows: you read the
    table as (d_model, vocab_size).

    Hint: nn.Embedding stores one row per token, shape (vocab_size, d_model):
    token i's vector is row i. Which axis of the weight do your ids select?

    Fix: Select rows, `weight[ids]`, with no transpose; in one_hot_lookup, make
    the one-hot V = weight.shape[0] wide and multiply it by the weight itself:
    `F.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight`."""
    columns_last = weight.T[ids]  # (..., V): weight.T[ids] or one_hot(ids, d) @ weight.T
    columns_first = weight[:, ids]  # (V, ...)
    return [columns_last, columns_first]


# --- probes --------------------------------------------------------------------


def check_lookup(fn, probe: Probe) -> None:
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
        probe.fail(
            "no_gradient",
            f"`{probe.name}`'s output does not require grad although `weight` does: it is cut off from the weight's gradient, so the embedding could never be trained.",
            hint="Autograd records only the torch operations applied to the weight itself; .detach(), .data, torch.no_grad() and a trip through NumPy each end that record.",
            fix="Compute the result from `weight` with torch operations only (indexing, `@`): drop the .detach(), the .numpy() and torch.from_numpy round-trip, or the torch.no_grad() block.",
        )
    out.sum().backward()
    expected = torch.zeros(9, 4, device=probe.device).index_add_(0, ids.flatten(), torch.ones(6, 4, device=probe.device))
    probe.expect(weight.grad, expected, what="the weight's gradient")
    # Device: the same call with every tensor on the meta device.
    probe.device_pass(lambda device: probe.call(fn, probe.randn(11, 7, device=device), probe.randint(11, 3, 5, device=device)))


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


def check_one_hot_lookup(fn, probe: Probe) -> None:
    try:
        check_lookup(fn, probe)
    except Failure as failure:
        if failure.code == "raised":
            for words, (hint, fix) in ONE_HOT_ERRORS.items():
                if words in failure.message:
                    probe.fail("raised", failure.message, hint=hint, fix=fix)
        raise
    if not {getattr(f, "__name__", "") for f in probe.calls_seen} & MATRIX_PRODUCTS:
        probe.fail(
            "not_a_matrix_product",
            f"`{probe.name}` gives the right rows, but by indexing the table: it never multiplies two matrices.",
            hint="A one-hot row of length V holds a single 1: times the (V, d) weight, it picks out exactly one row. That product is the point of this exercise.",
            fix="Build the one-hot, `F.one_hot(ids, num_classes=weight.shape[0]).to(weight.dtype)` of shape (..., V), and return it `@ weight`.",
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
        difficulty=1,
        importance=3,
        minutes=5,
    ),
    Exercise(
        id="one_hot_lookup",
        chapter=1,
        points=2,
        kind="function",
        reference=reference.one_hot_lookup,
        check=check_one_hot_lookup,
        mistakes={"transposed_weight": transposed},
        forbidden=EMBEDDING_APIS,
        difficulty=1,
        importance=2,
        minutes=10,
    ),
]
