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
    """You read the table as (d_model, vocab): you picked columns of the
    weight, not rows. nn.Embedding stores one row per token, shape
    (vocab_size, d_model), so token i's vector is weight[i]."""
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
            f"`{probe.name}`'s output is cut off from the weight's gradient (a .detach(), torch.no_grad() or a numpy round-trip?). The embedding must stay trainable.",
        )
    out.sum().backward()
    expected = torch.zeros(9, 4, device=probe.device).index_add_(0, ids.flatten(), torch.ones(6, 4, device=probe.device))
    probe.expect(weight.grad, expected, what="the weight's gradient")
    # Device: the same call with every tensor on the meta device.
    probe.device_pass(lambda device: probe.call(fn, probe.randn(11, 7, device=device), probe.randint(11, 3, 5, device=device)))


ONE_HOT_ERRORS = {  # torch's words -> what to do about them
    "cannot be multiplied": " The one-hot matrix must be exactly V = weight.shape[0] wide: pass num_classes=weight.shape[0] (without it, F.one_hot guesses from the largest id).",
    "same dtype": " F.one_hot returns int64: convert it with .to(weight.dtype) before multiplying.",
}


def check_one_hot_lookup(fn, probe: Probe) -> None:
    try:
        check_lookup(fn, probe)
    except Failure as failure:
        if failure.code == "raised":
            failure.message += "".join(hint for words, hint in ONE_HOT_ERRORS.items() if words in failure.message)
        raise
    if not {getattr(f, "__name__", "") for f in probe.calls_seen} & MATRIX_PRODUCTS:
        probe.fail(
            "not_a_matrix_product",
            f"`{probe.name}` gives the right rows but never multiplies matrices: build one_hot(ids) with shape (..., V) and multiply it by the (V, d) weight with `@`.",
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
