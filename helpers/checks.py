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
from helpers.checking import Failure, Probe
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
    # Any leading shape and the full id range (a one-hot must be V wide even if the last ids are unused).
    weight = probe.randn(50, 16)
    ids = probe.randint(40, 2, 3, 4)
    probe.against_reference(probe.call(fn, weight, ids), weight, ids, what="a (2, 3, 4) batch of ids")
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
    try:
        _check_lookup(fn, probe)
    except Failure as failure:
        if failure.code == "raised" and "cannot be multiplied" in failure.message:
            failure.message += " Without num_classes, F.one_hot guesses the width from the largest id in the batch: pass num_classes=weight.shape[0]."
        raise
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

# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# (end of chapter 05)
