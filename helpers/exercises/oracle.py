"""The library as a second oracle: the student's code dropped into a tiny
transformers model (helpers.library) must give that model's own logits.

An exercise declares one of the functions at the end of this module as its
`oracle`; checking.check runs it once, after the exercise's direct probes passed:
those decide first and name a mistake more precisely.
This one sees what they cannot: the student's code as a real model calls it.
In Llama q and k come as transposed views of the projections (not contiguous),
k with fewer heads than q, and positions (B, T) of a left-padded batch; GPT-J
hands over a slice of each head one sequence at a time; GPT-NeoX whole heads
cut from its fused projection. A mismatch there, or an exception, gets a
diagnosis that names the model (library_mismatch, library_raised).

The tiny models are built once per process (the first check pays for importing
transformers: a few seconds), live on the CPU in float32, and their own logits
for the one fixed batch are cached. The student's code is fed CPU tensors
whatever probe.device is: the device passes have already covered devices.

Without transformers, or with one whose layout differs (LibraryUnavailable),
the oracle is skipped and the pass message says so in one line: the direct
probes alone decided.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from helpers import library, reference
from helpers.exercises.common import find_table, oriented, position_tables
from helpers.library import LibraryUnavailable
from helpers.probe import Probe, close
from helpers.safety import Failure

T, PADS = 9, (0, 3)  # two sequences, the second with three pads on the left
# Right steps reproduce the library's logits to ~1e-7 (float64 or float32 tables alike); wrong ones are off by ~1e-3.
LOGITS_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


@dataclass(frozen=True)
class Family:
    name: str  # as transformers calls it: "Llama"
    model: Callable[[], torch.nn.Module]  # one cached tiny model
    logits: Callable[
        ..., torch.Tensor
    ]  # (model, ids, mask, position_ids, step) -> logits; step None: the library's own
    setting: str  # how the model calls the student's code, for the messages
    padded: bool = True  # GPT-2 has no notion of left padding: one plain batch


LLAMA = Family(
    "Llama",
    library.tiny_llama,
    lambda model, ids, mask, positions, step: library.llama_logits(model, ids, mask, positions, rope=step),
    "q (2, 4, 9, 16) and k (2, 2, 9, 16) come as transposed views of the projections (not contiguous), k with fewer heads than q, and positions (2, 9) of a left-padded batch",
)
NEOX = Family(
    "GPT-NeoX",
    library.tiny_neox,
    lambda model, ids, mask, positions, step: library.neox_logits(model, ids, mask, positions, rope=step),
    "whole heads q and k (2, 4, 9, 16) come cut from the fused query_key_value output (not contiguous), of which the first 4 dims (rotary_pct 0.25) turn, and positions (2, 9) of a left-padded batch",
)
GPTJ = Family(
    "GPT-J",
    library.tiny_gptj,
    lambda model, ids, mask, positions, step: library.gptj_logits(model, ids, mask, positions, rope=step),
    "x (1, 4, 9, 8) is the first rotary_dim = 8 of each head's 16 dims, a sliced, transposed view, one sequence at a time, with positions (9,) counted from that sequence's first real token",
)
BLOOM_SLOPES = Family(
    "BLOOM",
    library.tiny_bloom,
    lambda model, ids, mask, positions, step: library.bloom_logits(model, ids, mask, slopes=step),
    "your slopes for its 4 heads go into BLOOM's row-constant form m·j, plus its causal and padding mask, for a left-padded batch",
)
BLOOM_BIAS = Family(
    "BLOOM",
    library.tiny_bloom,
    lambda model, ids, mask, positions, step: library.bloom_logits(model, ids, mask, bias=step),
    "your bias (4, 9, 9) is added to its attention scores, with BLOOM's padding mask on top, for a left-padded batch",
)
GPT2_POSITIONS = Family(
    "GPT-2",
    library.tiny_gpt2,
    lambda model, ids, mask, positions, step: library.gpt2_logits(model, ids, positions=step),
    "your module, its table holding GPT-2's wpe (64, 64), adds positions to wte(ids) of shape (2, 9, 64)",
    padded=False,
)
GPT2_HEAD = Family(
    "GPT-2",
    library.tiny_gpt2,
    lambda model, ids, mask, positions, step: library.gpt2_logits(model, ids, head=step),
    "your head, built on (a copy of) GPT-2's wte (96, 64), turns its final hidden states (2, 9, 64) into logits",
    padded=False,
)


@functools.cache
def batch(family: Family) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids), the same in every process."""
    mask, positions = library.left_padding(T, PADS if family.padded else (0, 0))
    ids = torch.randint(
        0, family.model().config.vocab_size, (len(PADS), T), generator=torch.Generator().manual_seed(14)
    )
    return ids, mask, positions


@functools.cache
def their_logits(family: Family) -> torch.Tensor:
    """The unmodified model's logits for the real tokens, (n_real, V)."""
    ids, mask, positions = batch(family)
    return family.logits(family.model(), ids, mask, positions, None)[mask.bool()]


def skipped(probe: Probe, family: Family, why: Any) -> None:
    probe.notes.append(f"(The cross-check inside transformers' {family.name} was skipped: {why}.)")


def inside(
    probe: Probe,
    family: Family,
    make_step: Callable[[torch.nn.Module], Callable[..., Any]],
    reference_step: Callable[[torch.nn.Module], Callable[..., Any]],
    *,
    what: str,
    hint: str,
    fix: str,
) -> None:
    """Run `family`'s tiny model with make_step(model), the student's code wrapped in
    probe.call, in place of the model's own step; its real tokens' logits must be the
    unmodified model's. `reference_step(model)` is the course's step: when the model
    fails after the student's code returned, it tells a version whose layout we do not
    know (skip) from the student's output (library_raised). `what` names the student's
    code in the messages; hint and fix are about the model's context."""
    try:
        model = family.model()
        theirs = their_logits(family)
        ids, mask, positions = batch(family)
        step = make_step(model)
    except LibraryUnavailable as missing:
        return skipped(probe, family, missing)
    try:
        ours = family.logits(model, ids, mask, positions, step)
    except Failure as failure:
        if failure.code != "raised":
            raise  # a time-out, an input changed in place...: said as such
        probe.fail(
            "library_raised",
            f"Inside transformers' {family.name}, where {family.setting}: {failure.message}",
            hint=hint,
            fix=fix,
        )
    except LibraryUnavailable as missing:
        return skipped(probe, family, missing)
    except Exception as error:  # raised by the model itself, after the student's step returned
        try:
            family.logits(model, ids, mask, positions, reference_step(model))
        except Exception:
            return skipped(probe, family, f"the course's own step fails in this version too ({type(error).__name__})")
        probe.fail(
            "library_raised",
            f"Inside transformers' {family.name}, where {family.setting}, the model failed after {what} returned: {type(error).__name__}: {error}",
            hint=hint,
            fix=fix,
        )
    ours = ours[mask.bool()]
    if not close(ours, theirs, **LOGITS_TOLERANCE):
        worst = float((ours.double() - theirs.double()).abs().nan_to_num(nan=float("inf")).max())
        probe.fail(
            "library_mismatch",
            f"Inside transformers' {family.name}, where {family.setting}, {what} gives other logits than {family.name}'s own: "
            f"they differ by up to {worst:.3g} (the logits are about {float(theirs.abs().mean()):.2g} in size), though your code passed the direct probes.",
            hint=hint,
            fix=fix,
        )


def called(probe: Probe, fn: Callable[..., Any], what: str) -> Callable[..., Any]:
    """fn, called through probe.call: the student's exceptions become Failures that name it."""
    return lambda *args: probe.call(fn, *args, what=what)


# ---------------------------------------------------------------------------
# RoPE: Llama, GPT-NeoX, GPT-J
# ---------------------------------------------------------------------------

ROPE_HINT = (
    "The direct probes hand your code fresh, contiguous tensors; a model hands it views of its projections. `view` refuses to merge "
    "the axes of such a view, and `reshape` silently returns a copy of it, so writing into what reshape returned changes nothing."
)
ROPE_FIX = (
    "Compute the result as new tensors, with broadcasting arithmetic on the inputs, instead of `.view` calls that merge axes or writes into "
    "a reshaped tensor; then compare your code on `torch.randn(2, 9, 4, 16).transpose(1, 2)` with its output on the same values made contiguous."
)


def rope_tables(model: nn.Module, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    return reference.rope_cache(width, library.MAX_POSITIONS, library.rope_base(model.config))


def rotary_module_in_llama(probe: Probe, cls: type[nn.Module]) -> None:
    """RotaryEmbedding(head_dim, max_position_embeddings, rope_theta) as every layer's rotary step."""

    def make_step(model: nn.Module) -> Callable[..., Any]:
        config = model.config
        module = probe.call(
            cls,
            library.llama_head_dim(model),
            config.max_position_embeddings,
            library.rope_base(config),
            what=f"`{probe.name}(...)`",
        )
        return called(probe, module, f"`{probe.name}` (the module)")

    def reference_step(model: nn.Module) -> Callable[..., Any]:
        return reference.RotaryEmbedding(
            library.llama_head_dim(model), model.config.max_position_embeddings, library.rope_base(model.config)
        )

    inside(probe, LLAMA, make_step, reference_step, what="your module", hint=ROPE_HINT, fix=ROPE_FIX)


def with_tables(rotate: Callable[..., Any], width: Callable[[torch.nn.Module], int]) -> Callable[..., Any]:
    """make_step for apply_rope-like code: rotate(q, k, cos, sin, position_ids), the course's tables width(model) wide."""

    def make_step(model: nn.Module) -> Callable[..., Any]:
        cos, sin = rope_tables(model, width(model))
        return lambda q, k, positions: rotate(q, k, cos, sin, positions)

    return make_step


def apply_rope_in_llama(probe: Probe, fn: Callable[..., Any]) -> None:
    """fn(q, k, cos, sin, position_ids) as every layer's rotary step."""
    mine, theirs = (
        with_tables(called(probe, fn, f"`{probe.name}`"), library.llama_head_dim),
        with_tables(reference.apply_rope, library.llama_head_dim),
    )
    inside(probe, LLAMA, mine, theirs, what="your function", hint=ROPE_HINT, fix=ROPE_FIX)


def partial_rope_in_neox(probe: Probe, fn: Callable[..., Any]) -> None:
    """fn(q, k, cos, sin, position_ids) on GPT-NeoX's whole heads, the tables rotary_ndims wide."""
    mine, theirs = (
        with_tables(called(probe, fn, f"`{probe.name}`"), library.neox_rotary_ndims),
        with_tables(reference.apply_partial_rope, library.neox_rotary_ndims),
    )
    inside(probe, NEOX, mine, theirs, what="your function", hint=ROPE_HINT, fix=ROPE_FIX)


def interleaved_in_gptj(probe: Probe, fn: Callable[..., Any]) -> None:
    """fn(x, positions) on the rotary part of GPT-J's heads, the default base (GPT-J's 10000)."""
    inside(
        probe,
        GPTJ,
        lambda model: called(probe, fn, f"`{probe.name}`"),
        lambda model: reference.rope_interleaved,
        what="your function",
        hint=ROPE_HINT,
        fix=ROPE_FIX,
    )


# ---------------------------------------------------------------------------
# ALiBi: BLOOM
# ---------------------------------------------------------------------------

ALIBI_HINT = (
    "BLOOM adds m_h · j, the key's position counted from each sequence's first real token, to every row of scores: softmax forgets a constant per row, "
    "so that is the textbook -m_h · (i - j). Your code meets BLOOM's 4 heads, a 9-token batch and its masks there."
)
ALIBI_FIX = "Compare your result for BLOOM's sizes with `helpers.library.bloom_alibi(mask, 4)` in a cell, and make yours the same for every head count and length."


def slopes_in_bloom(probe: Probe, fn: Callable[..., Any]) -> None:
    inside(
        probe,
        BLOOM_SLOPES,
        lambda model: called(probe, fn, f"`{probe.name}`"),
        lambda model: reference.alibi_slopes,
        what="your slopes",
        hint=ALIBI_HINT,
        fix=ALIBI_FIX,
    )


def bias_in_bloom(probe: Probe, fn: Callable[..., Any]) -> None:
    inside(
        probe,
        BLOOM_BIAS,
        lambda model: called(probe, fn, f"`{probe.name}`"),
        lambda model: reference.alibi_bias,
        what="your bias",
        hint=ALIBI_HINT,
        fix=ALIBI_FIX,
    )


# ---------------------------------------------------------------------------
# GPT-2: learned positions and the tied head
# ---------------------------------------------------------------------------

GPT2_HINT = "GPT-2's first block gets wte(ids) + wpe(0..T-1), dropout off in eval mode; its logits are the final hidden states times wte's transpose: one matrix, no bias."
GPT2_FIX = "Call your module on `torch.randn(2, 9, 64)` in eval mode and compare with `x + table[:9]`; for the head, with `h @ embedding.weight.T`."


def positions_in_gpt2(probe: Probe, cls: type[nn.Module]) -> None:
    """cls(n_positions, n_embd) with GPT-2's wpe copied into the rows of positions 0.. of the table
    found by its role (common.position_tables), in place of wte + wpe."""

    def make_step(model: nn.Module) -> Callable[..., Any]:
        _, wpe, _ = library.gpt2_tables(model)
        max_len, d = wpe.weight.shape
        module = probe.call(cls, max_len, d, what=f"`{probe.name}(...)`")
        tables = [t for _, t, _, how in position_tables(module, max_len, d) if how != "plain"]
        table = (
            tables[0] if tables else find_table(probe, module, max_len, d, "the position table (max_len, d_model)")[1]
        )
        rows = oriented(table, max_len, d)
        assert rows is not None  # found by its shape just above
        with torch.no_grad():
            rows[: len(wpe.weight)].copy_(wpe.weight)
        probe.call(module.eval, what=f"`{probe.name}.eval()`")
        if (
            rows.shape[0] == rows.shape[1]
        ):  # square (GPT-2's 64 × 64): which way round the module reads it shows on zeros
            added = probe.call(module, torch.zeros(1, 2, rows.shape[1]), what=f"`{probe.name}` (the module)")
            if not close(added, wpe.weight[None, :2]):
                with torch.no_grad():
                    rows.T[: len(wpe.weight)].copy_(wpe.weight)
        return called(probe, module, f"`{probe.name}` (the module)")

    def reference_step(model: nn.Module) -> Callable[..., Any]:
        _, wpe, _ = library.gpt2_tables(model)
        learned = reference.LearnedPositionalEmbedding(*wpe.weight.shape)
        learned.load_state_dict({"position_embeddings.weight": wpe.weight})
        return learned

    inside(probe, GPT2_POSITIONS, make_step, reference_step, what="your module", hint=GPT2_HINT, fix=GPT2_FIX)


def head_in_gpt2(probe: Probe, cls: type[nn.Module]) -> None:
    """cls(wte) as GPT-2's lm_head; built on a copy of wte, so nothing the student's code does reaches the cached model."""

    def make_step(model: nn.Module) -> Callable[..., Any]:
        wte = copy.deepcopy(library.gpt2_tables(model)[0])
        head = probe.call(cls, wte, what=f"`{probe.name}(wte)`")
        return called(probe, head, f"`{probe.name}` (the head)")

    inside(
        probe,
        GPT2_HEAD,
        make_step,
        lambda model: reference.TiedLMHead(copy.deepcopy(library.gpt2_tables(model)[0])),
        what="your head",
        hint=GPT2_HINT,
        fix=GPT2_FIX,
    )
