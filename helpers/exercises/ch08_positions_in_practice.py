"""Chapter 08, positions in practice: how positions are counted once a model is served or trained.

Six exercises, each the few lines that public bug trackers show going wrong:

* `position_ids_from_mask`: a left- or right-padded batch numbers each row's real tokens
  0, 1, 2, ... (transformers' generate, `cumsum - 1` with the pads filled);
* `decode_position_ids`: each row of a padded batch decodes on from its own count of real
  tokens, not from the batch's padded length (vLLM's per-request offset, generate's +1 per step);
* `packed_position_ids` and `document_causal_mask`: documents packed into one row restart
  at position 0 and see only themselves (FlashAttention's varlen `cu_seqlens`);
* `RopeKVCache`: RoPE in a KV cache, each key rotated once, at its own absolute position
  (transformers' default `arange(T) + cache.get_seq_length()`): a prompt then token-by-token steps
  equals one full pass;
* `streaming_positions`: StreamingLLM's cache (Xiao et al. 2023), attention sinks plus a
  window, rotated by slot in the cache.

Each mistake is runnable code written as the slip is made, one or a list of results (its faces).
RopeKVCache's mistakes and probes live in kv_cache.py: each mistake replays a whole generation, a list
of (q_rot, k_all, v_all), one per call, so that the step where the student's module parts from the
reference names it. The packed documents' mistakes and checks live in packing.py, the streaming cache's
in streaming.py; this module holds the padded batch's, and every exercise's declaration and contract.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from helpers import reference
from helpers.contracts import Arg, Contract, Draw, Result, noncontiguous
from helpers.exercises import kv_cache
from helpers.exercises.common import TAKES_NO_TENSOR, says
from helpers.exercises.packing import (
    check_document_mask,
    check_packed_positions,
    mask_boundary_off_by_one,
    mask_causal_only,
    mask_diagonal_excluded,
    mask_documents_only,
    mask_inverted,
    mask_sees_next_token,
    mask_transposed,
    packed_boundary_off_by_one,
    packed_from_one,
    packed_not_restarted,
)
from helpers.exercises.streaming import (
    check_streaming,
    stream_kept_twice,
    stream_original_positions,
    stream_ring_buffer_slots,
    stream_sinks_dropped,
    stream_slots_from_one,
    stream_window_counts_sinks,
    stream_window_off_by_one,
    stream_zero_slice,
)
from helpers.probe import Probe
from helpers.registry import Exercise
from helpers.safety import Failure

# --- shared by the exercises on a padded batch -------------------------------------------------


def squeezed(out: Tensor) -> list[Tensor]:
    """`out` with its size-1 axes dropped, all at once or one at a time: a batch of one (1, T) read as (T,), one
    token per row (B, 1) as (B,). None where no axis has size 1."""
    faces = [out.squeeze(), *(out.squeeze(dim) for dim in range(out.dim()) if out.shape[dim] == 1)]
    return list({face.shape: face for face in faces if face.shape != out.shape}.values())


SQUEEZED = """Your result lost an axis of size 1: {what}. `.squeeze()` (or an index `[0]`, a `.view(-1)`) drops every axis of size 1,
the batch axis of a batch of one and the token axis of a decode step too.

Hint: A batch of one is still a batch, and one new token per row is still a (B, 1) tensor: the model that reads the
result indexes it by row and by token whatever their sizes.

Fix: Drop the `.squeeze()`; if you need to remove an axis, name it (`.squeeze(0)` only where the shape says it is
1 by construction), or keep the axes with `keepdim=True` on the reduction."""


def called(probe: Probe, fn: Callable, *args: Any, what: str) -> Any:
    """probe.call; a `.view` that a mask laid out as a view refuses is named for what it is."""
    try:
        return probe.call(fn, *args, what=what)
    except Failure as failure:
        views = any(isinstance(a, Tensor) and not a.is_contiguous() for a in args)
        if views and failure.code == "raised" and "view size is not compatible" in failure.message:
            probe.fail(
                "contiguity_assumed",
                f"On a mask that is a view, not a contiguous tensor (a slice or a transpose of a larger one), {failure.message}",
            )
        raise


# --- position_ids_from_mask -------------------------------------------------------------
# Each mistake takes the attention mask (B, T) and returns the positions it makes.


def ids_from_one(attention_mask: Tensor) -> Tensor:
    """Your positions start at 1: the real tokens of each row are numbered 1, 2, 3, ...
    (a cumulative sum of the mask counts the token itself).

    Hint: The cumulative sum of the mask at a real token counts the real tokens up to and
    including it; the first real token must get position 0.

    Fix: Subtract one: `attention_mask.long().cumsum(-1) - 1`, then give the pads a value in
    [0, T), e.g. `.clamp(min=0)` or `.masked_fill(attention_mask == 0, 0)`."""
    return attention_mask.long().cumsum(-1)


def ids_mask_ignored(attention_mask: Tensor) -> Tensor:
    """Your positions ignore the mask: every row gets 0 .. T-1, the same positions whatever its
    padding (one `position_ids` for the whole batch, as `cache_position` is). With right padding
    that happens to be right; with left padding the first real token of a padded row is at
    position 3 or 5 instead of 0, and its row generates other text than when run alone.

    Hint: A row with p pads on the left starts its text at index p: its positions must count
    real tokens only, which only the mask knows.

    Fix: Count the real tokens along each row: `attention_mask.long().cumsum(-1) - 1`, then give
    the pads a value in [0, T) with `.clamp(min=0)`."""
    B, T = attention_mask.shape
    return torch.arange(T, device=attention_mask.device).expand(B, T)


def ids_left_padding_only(attention_mask: Tensor) -> list[Tensor]:
    """Your positions are right for left padding only: you subtract each row's number of pads
    from 0 .. T-1, which assumes the pads come first. On a right-padded batch every real token
    of a padded row is shifted down by the pad count
    (below 0, or clamped to 0).

    Hint: Training batches are usually right-padded and generation batches left-padded: the same
    function serves both. Which count says how many real tokens come before token t, on either side?

    Fix: Count the real tokens before each token, `attention_mask.long().cumsum(-1) - 1`, instead
    of subtracting the pad count; then `.clamp(min=0)` for the pads."""
    B, T = attention_mask.shape
    pads = T - attention_mask.long().sum(-1, keepdim=True)  # (B, 1)
    shifted = torch.arange(T, device=attention_mask.device) - pads
    return [shifted, shifted.clamp(min=0)]  # the left pads' negative positions left as they are, or clamped


def ids_batch_axis(attention_mask: Tensor) -> Tensor:
    return (attention_mask.long().cumsum(0) - 1).clamp(min=0)


ids_batch_axis.__doc__ = """Your cumulative sum runs down the batch (dim 0) instead of along each row:
token t of row b is numbered by how many rows above it have a real token there.

Hint: The mask is (B, T): rows are sequences, columns positions. Counting the real tokens before a
token is a sum along its own row.

Fix: `attention_mask.long().cumsum(-1) - 1` (dim -1, the sequence axis), then `.clamp(min=0)`."""

PAD_RANGE_HINT = (
    "`cumsum(-1) - 1` is -1 at every pad before a row's first real token. An nn.Embedding refuses it (an "
    "IndexError), and a cos/sin table indexed with it silently reads its last row; transformers' generate "
    "writes a valid position over the pads."
)
PAD_RANGE_FIX = (
    "Give the pads a harmless value in [0, T) after the cumulative sum: `positions.clamp(min=0)` or "
    "`positions.masked_fill(attention_mask == 0, 1)` (not `masked_fill_` on the caller's mask)."
)


def pads_in_range(probe: Probe, out: Tensor, mask: Tensor, what: str) -> None:
    """Pads may hold any position in [0, T), and nothing outside: a table indexed with it must not fail."""
    T = mask.shape[-1]
    got = out.detach().cpu()
    outside = (~mask.bool().cpu()) & ((got < 0) | (got >= T))
    if bool(outside.any()):
        row, column = (int(i) for i in outside.nonzero()[0])
        probe.fail(
            "pad_position_out_of_range",
            f"{what}: your real tokens are numbered right, but the pad at row {row}, column {column} gets position "
            f"{int(got[row, column])}, outside [0, {T}).",
            hint=PAD_RANGE_HINT,
            fix=PAD_RANGE_FIX,
        )


def real_tokens_only(mask: Tensor, out: Any, found: Callable[[], dict[str, list[Any]]]) -> Callable[[], dict]:
    """The catalogue's positions with the pads taken from the student's output: only real tokens are compared."""

    def run() -> dict[str, list[Any]]:
        if not (isinstance(out, Tensor) and out.numel() == mask.numel() and not out.is_meta):
            return found()
        real = mask.bool()  # laid out as a face of the output's shape (a squeezed batch of one) is read
        return {
            code: [
                torch.where(real.reshape(face.shape), face, out.to(face.dtype)) if face.shape == out.shape else face
                for face in faces
            ]
            for code, faces in found().items()
        }

    return run


def ids_side_per_batch(attention_mask: Tensor) -> list[Tensor]:
    """Your positions decide the padding side once for the whole batch (from its last or its first column, as some
    model files do): a left-padded batch gets each row's index minus its pads, a right-padded one the column
    indices. Each is right for a batch padded on one side; a batch that mixes left- and right-padded rows, or holds
    a row padded on both sides (a prompt plus a response), numbers the rows of the other kind from their column.

    Hint: Each row has its own pads: nothing in one row says where another row's pads are. Which count, read along
    a row, numbers its real tokens 0, 1, 2, ... whichever side its pads are on?

    Fix: One formula for every row, with no branch on the padding side: `attention_mask.long().cumsum(-1) - 1`,
    then `.clamp(min=0)` for the pads."""
    real = attention_mask.detach().cpu().bool()
    B, T = real.shape
    columns = torch.arange(T).expand(B, T)
    left = columns - (~real).long().sum(-1, keepdim=True)  # the pads assumed in front
    decided_left = (bool(real[:, -1].all()), not bool(real[:, 0].all()))  # every row ends real / not all start real
    return [left if side else columns for side in decided_left]


@says(SQUEEZED.format(what="a batch of one, (1, T), returned as (T,), or a (B, 1) mask's positions as (B,)"))
def ids_squeezed(attention_mask: Tensor) -> list[Tensor]:
    return squeezed(reference.position_ids_from_mask(attention_mask.cpu()))


def masks(probe: Probe) -> list[tuple[str, Tensor]]:
    """Left and right padding, long, int32 and bool, rows of every fill (all real, one real token):
    B ≠ T everywhere, so that a sum down the wrong axis shows. Then each padding side in one batch and a row
    padded on both sides (after the batches of one side, which tell a formula of one side from a choice per
    batch), a batch of one and one token per row."""
    left = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 1]])  # (3, 7)
    right = torch.tensor([[1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])  # (4, 5)
    return [
        ("a left-padded long mask (3, 7)", left.to(probe.device)),
        ("a right-padded int32 mask (4, 5)", right.to(probe.device, torch.int32)),
        (
            "a left-padded bool mask (2, 6)",
            torch.tensor([[0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]], dtype=torch.bool).to(probe.device),
        ),
        (
            "a batch of left-, right-, both-sides- and un-padded rows (5, 7), a view",
            noncontiguous(MIXED.to(probe.device)),
        ),
        ("a batch of one, (1, 5)", torch.tensor([[0, 0, 1, 1, 1]], dtype=torch.int32, device=probe.device)),
        ("one token per row, (3, 1)", torch.ones(3, 1, dtype=torch.long, device=probe.device)),
    ]


def check_position_ids(fn: Callable, probe: Probe) -> None:
    """The real tokens of every mask first (a mistake of one padding side shows on the other), then the pads."""
    outs = []
    for said, mask in masks(probe):
        what = f"`position_ids_from_mask(mask)` on {said}"
        out = called(probe, fn, mask, what=what)
        expected = reference.position_ids_from_mask(mask)
        if isinstance(out, Tensor) and out.shape == mask.shape and not out.is_meta:
            expected = torch.where(
                mask.bool(), expected, out.detach().to(expected.dtype)
            )  # pads: any value, checked below
        probe.expect(out, expected, what=what, mistakes=real_tokens_only(mask, out, probe.known_mistakes(mask)))
        outs.append((out, mask, what))
    for out, mask, what in outs:
        pads_in_range(probe, out, mask, what)
    mask = masks(probe)[0][1]
    probe.device_pass(lambda device: probe.call(fn, mask.to(device)))


# --- decode_position_ids --------------------------------------------------------------------
# Each mistake takes (attention_mask, new_tokens) and returns the positions (B, new_tokens) it makes.


def row_counts(mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per row, (B, 1) each, on the CPU: its real tokens n, its first real column, its first pad column (T if none)."""
    real = mask.detach().cpu().bool()
    T = real.shape[-1]
    n = real.long().sum(-1, keepdim=True)
    first_real = real.long().argmax(-1, keepdim=True)
    pad = ~real  # the first pad anywhere, as code written for right padding finds it
    first_pad = torch.where(pad.any(-1, keepdim=True), pad.long().argmax(-1, keepdim=True), T)
    return n, first_real, first_pad


def ahead(start: Tensor, new_tokens: int) -> Tensor:
    """start (B, 1) and the new_tokens - 1 positions after it: (B, new_tokens)."""
    return start + torch.arange(new_tokens)


def decode_shared(attention_mask: Tensor, new_tokens: int = 1) -> list[Tensor]:
    """Your decode positions are one count for the whole batch: every row's next token at the padded length T (what a
    cache's `offset` or `get_seq_length()` holds after a padded prefill, and `arange(T, T + new_tokens)` gives), or at
    the longest row's count. Only a row without pads is right; a row with p pads before its text sees its new tokens
    p positions too far from its prompt, the "shared position" bug of a hand-written decode loop.

    Hint: Each row's prompt was numbered from 0 over its own real tokens, so each row's next token continues its own
    count. What tells a row's number of real tokens apart from the batch's width?

    Fix: Start every row at its own count, `attention_mask.long().sum(-1, keepdim=True)` (B, 1), and add
    `torch.arange(new_tokens, device=attention_mask.device)` for the tokens after it."""
    n, _, _ = row_counts(attention_mask)
    B, T = attention_mask.shape
    return [ahead(torch.full((B, 1), T), new_tokens), ahead(n.max().expand(B, 1), new_tokens)]


def decode_last(attention_mask: Tensor, new_tokens: int = 1) -> Tensor:
    """Your decode positions start one too early: at each row's last position, n - 1 for a row of n real tokens (its
    last real token's position), instead of the next one. The first new token then claims the position of the
    token before it.

    Hint: A row of n real tokens used positions 0 .. n - 1 in its prompt. Which position is still free?

    Fix: Add one to the last position (`position_ids[:, -1:] + 1` for a left-padded batch), or start from the count
    itself: `attention_mask.long().sum(-1, keepdim=True)` is n, the next position."""
    n, _, _ = row_counts(attention_mask)
    return ahead(n - 1, new_tokens)


def decode_counts_left_pads(attention_mask: Tensor, new_tokens: int = 1) -> Tensor:
    """Your decode positions count the pads before each row's text: a row starts at the column after its last real
    token (its length, pads included), not at its number of real tokens. In a left-padded batch that is T for every
    row; only rows without pads in front are right.

    Hint: The prompt's positions counted real tokens only (position_ids_from_mask): the pads in front of a row hold
    no position, so its next token comes right after its n real tokens, at n.

    Fix: Count the real tokens, `attention_mask.long().sum(-1, keepdim=True)`, instead of finding the last real
    column; then add `torch.arange(new_tokens, device=attention_mask.device)`."""
    n, first_real, _ = row_counts(attention_mask)
    return ahead(first_real + n, new_tokens)


def decode_inverted(attention_mask: Tensor, new_tokens: int = 1) -> Tensor:
    """Your count reads the mask the other way round: it counts the pads (the 0s) of each row, T - n, where it should
    count the real tokens (the 1s), as if 1 or True marked a pad (nn.Transformer's `key_padding_mask` convention).

    Hint: In transformers' attention_mask, 1 (True) is a real token to attend to and 0 a pad; the positions continue
    the count of the 1s.

    Fix: Sum the mask itself, `attention_mask.long().sum(-1, keepdim=True)`, not `(attention_mask == 0).sum(...)` nor
    `(~attention_mask).sum(...)`."""
    n, _, _ = row_counts(attention_mask)
    return ahead(attention_mask.shape[-1] - n, new_tokens)


def decode_new_tokens_ignored(attention_mask: Tensor, new_tokens: int = 1) -> list[Tensor]:
    """Your result ignores new_tokens: it holds one position per row, (B, 1) or (B,), or gives every new token the
    same position, where the docstring asks for the positions of the next new_tokens tokens of each row (a chunk
    of a draft, or several steps at once), each one more than the last.

    Hint: new_tokens tokens continue the count one by one: n, n + 1, ..., n + new_tokens - 1, (B, new_tokens).

    Fix: Add `torch.arange(new_tokens, device=attention_mask.device)` to the (B, 1) count: broadcasting makes
    (B, new_tokens)."""
    if new_tokens == 1:
        return []  # one token: a (B,) result is a squeezed axis (squeezed_size_one), nothing else differs
    n, _, _ = row_counts(attention_mask)
    return [n, n.expand(-1, new_tokens), n.flatten()]


def decode_side_per_batch(attention_mask: Tensor, new_tokens: int = 1) -> list[Tensor]:
    """Your positions decide the padding side once for the whole batch (from its last or its first column, as some
    model files do) and count every row as a row padded on that side would be counted. On a left-padded or a
    right-padded batch that is right; a batch that mixes them, or holds a row padded on both sides (a prompt plus a
    response), gives the rows of the other kind a wrong count.

    Hint: Each row has its own pads: nothing in one row says where another row's pads are. Which count of a row's
    own mask is the same whichever side its pads are on?

    Fix: Count each row's real tokens, `attention_mask.long().sum(-1, keepdim=True)`, and add
    `torch.arange(new_tokens, device=attention_mask.device)`: no branch on the padding side."""
    real = attention_mask.detach().cpu().bool()
    n, first_real, first_pad = row_counts(attention_mask)
    left = attention_mask.shape[-1] - first_real  # a left-padded row's count: the columns after its pads
    right = first_pad  # a right-padded row's count: the column of its first pad
    decided_left = (
        bool(real[:, -1].all()),
        not bool(real[:, 0].all()),
    )  # every row ends real / not every row starts real
    return [ahead(left if side else right, new_tokens) for side in decided_left]


@says(SQUEEZED.format(what="(1, 1) returned as (1,) or (), (B, 1) as (B,)"))
def decode_squeezed(attention_mask: Tensor, new_tokens: int = 1) -> list[Tensor]:
    return squeezed(reference.decode_position_ids(attention_mask.cpu(), new_tokens))


MIXED = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 0, 0], [1] * 7, [0] * 6 + [1]])


def decode_cases(probe: Probe) -> list[tuple[str, Tensor, int | None]]:
    """(what, mask, new_tokens or None for the default). A mixed batch first, where every catalogue mistake shows a
    face of its own (a left-padded batch cannot tell T for every row from the pads counted, both T); then each
    padding side alone, a batch of one and a decode step's mask (T = 1, B > 1). B ≠ T everywhere."""
    left = [[0, 0, 0, 1, 1, 1, 1], [1] * 7, [0] * 6 + [1]]
    right = [[1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1] * 5, [1, 1, 0, 0, 0]]
    cases = [
        ("a batch of left-, right-, both-sides- and un-padded rows (5, 7)", MIXED.tolist(), torch.long, 2),
        ("a left-padded bool mask (3, 7)", left, torch.bool, None),
        ("a right-padded int32 mask (4, 5)", right, torch.int32, 3),
        ("a batch of one, (1, 5)", [[0, 0, 1, 1, 1]], torch.long, 1),
        ("one token per row, (3, 1)", [[1], [1], [1]], torch.bool, 1),
    ]
    made = [(said, torch.tensor(rows, dtype=dtype, device=probe.device), k) for said, rows, dtype, k in cases]
    return [(f"{made[0][0]}, a view", noncontiguous(made[0][1]), made[0][2]), *made[1:]]  # as a slice hands it over


def check_decode_positions(fn: Callable, probe: Probe) -> None:
    """Two independent aspects: where each row's count goes on (its first new position, against the reference), and
    the new_tokens positions that follow it, one more each, read off the student's own first column."""
    outs = []
    for said, mask, new_tokens in decode_cases(probe):
        args = (mask,) if new_tokens is None else (mask, new_tokens)
        what = f"`decode_position_ids(mask{'' if new_tokens is None else f', {new_tokens}'})` on {said}"
        outs.append((called(probe, fn, *args, what=what), args, what))

    def per_row(out: Any, mask: Tensor) -> bool:
        return (
            isinstance(out, Tensor) and not out.is_meta and out.dim() == 2 and len(out) == len(mask) > 0 < out.shape[1]
        )

    def starts() -> None:
        for out, args, what in outs:
            if not per_row(out, args[0]):
                probe.against_reference(out, *args, what=what)  # names the type or the shape
            found = probe.known_mistakes(*args)
            probe.expect(
                out[:, :1],
                reference.decode_position_ids(*args)[:, :1],
                what=f"the first new position of each row in {what}",
                mistakes=functools.partial(first_columns, found),
            )

    def steps() -> None:
        for out, args, what in outs:
            if not per_row(out, args[0]):
                probe.against_reference(out, *args, what=what)
            new_tokens = args[1] if len(args) > 1 else 1
            own = out[:, :1].detach().long()
            probe.expect(
                out,
                own + torch.arange(new_tokens, device=own.device),
                what=f"{what}, its positions after each row's first new one",
                mistakes=functools.partial(new_tokens_ignored, own, new_tokens),
            )

    probe.independent(starts, steps)
    mask = decode_cases(probe)[0][1]
    probe.device_pass(lambda device: probe.call(fn, mask.to(device), 2))


# --- the exercises ------------------------------------------------------------------------------

# Positions and kept tokens are indices, a mask says yes or no: a float result is the usual slip.
INDICES_ARE_LONG = (
    "Positions index tables (an nn.Embedding, a cos/sin cache), so they are integers: torch.long, as torch.arange "
    "and a cumulative sum of a long tensor make them. A float or int32 result has to be cast by every caller.",
    "Keep the computation in integers, e.g. `attention_mask.long().cumsum(-1)` (no `.float()` on the way), or end "
    "with `.long()`.",
)
LENGTHS_ARE_LONG = (  # the same, for the exercises that take lengths, not a mask
    INDICES_ARE_LONG[0],
    "Keep the computation in integers: `torch.arange` without a float dtype, `seq_lens.cumsum(0)` of the long lengths, "
    "no `.float()`, `linspace` or int32 on the way; or end with `.long()`.",
)
MASK_IS_BOOL = (
    "This mask says yes or no: True where query i may attend key j. An additive mask (0 where allowed, a very "
    "negative number such as the dtype's minimum elsewhere) is another form of the same, the one eager attention adds "
    "to its scores; this exercise asks for the boolean one.",
    "Return the comparison itself, a BoolTensor: the same-document test `&` the causal one, with no `.float()`, "
    "`masked_fill(..., float('-inf'))` or `.int()` after it.",
)

# --- the contracts (helpers/contracts.py) ------------------------------------------------------------
# What each exercise takes and gives. The contracts' axes draw random inputs of a kind and compare one tensor with
# the reference exactly; where that would call outside an exercise's domain or cannot read its result, not_walked
# says so, and the exercise's own probes walk the same axis on inputs of its domain (named in each reason).


def padded_masks(probe: Probe, sizes: dict[str, Any], dtype: torch.dtype) -> Tensor:
    """Masks of the domain: every row holds one or more real tokens side by side, each row padded on its own side
    (the first three left, right and on both sides, as a prompt plus a response; the others at random)."""
    B, T = int(sizes["B"]), int(sizes["T"])
    mask = torch.zeros(B, T, dtype=torch.long)
    for row in range(B):
        n = 1 + int(torch.randint(max(T - 1 if row < 3 else T, 1), (), generator=probe.generator))  # real tokens
        start = (
            (T - n, 0, (T - n) // 2)[row] if row < 3 else int(torch.randint(T - n + 1, (), generator=probe.generator))
        )
        mask[row, start : start + n] = 1
    return mask.to(probe.device, dtype)


def document_lengths(probe: Probe, sizes: dict[str, Any], dtype: torch.dtype) -> Tensor:
    """Lengths of the domain, each >= 1, one of them a document of a single token (the [n, 1] packing)."""
    lengths = probe.randint(4, int(sizes["N"]), device="cpu") + 1
    lengths[int(torch.randint(len(lengths), (), generator=probe.generator))] = 1
    return lengths.to(probe.device)


def pads_free(out: Any, inputs: dict[str, Any]) -> Any:
    """A pad's position is free within [0, T): read as the reference's 0 there (one outside stays, and differs)."""
    mask = inputs["attention_mask"]
    if not isinstance(out, Tensor) or out.shape != mask.shape or out.is_meta:
        return out
    return out.masked_fill(~mask.bool() & (out >= 0) & (out < mask.shape[-1]), 0)


MASK = Arg(
    "mask",
    "B T",
    dtypes=(torch.int64, torch.int32, torch.bool),
    draw=Draw("(each row one or more real tokens side by side, pads on either side or both)", padded_masks),
)
SEQ_LENS = Arg("ids", "N", domain=">= 1", draw=Draw("", document_lengths))

POSITION_IDS_CONTRACT = Contract(
    args={"attention_mask": MASK},
    result=Result("B T", torch.int64, read=pads_free, reads="a pad's position is free within [0, T)"),
    sizes={"B": 4, "T": 7},
    ones="B T",
)
DECODE_CONTRACT = Contract(
    args={"attention_mask": MASK, "new_tokens": Arg("number", domain=">= 1", default=1, values=(1, 2, 3))},
    result=Result("B new_tokens", dtype=torch.int64),
    sizes={"B": 5, "T": 7},
    ones="B T",
)
PACKED_CONTRACT = Contract(args={"seq_lens": SEQ_LENS}, result=Result("S", dtype=torch.int64), sizes={"N": 3}, ones="N")
DOCUMENT_MASK_CONTRACT = dataclasses.replace(PACKED_CONTRACT, result=Result("S S", dtype=torch.bool))
STREAMING_CONTRACT = Contract(  # window 0 keeps the sinks alone, n_sink 0 the window alone
    args={
        "seq_len": Arg("size", "L"),
        "n_sink": Arg("number", domain=">= 0", values=(4, 0)),
        "window": Arg("number", domain=">= 0", values=(8, 1, 0)),
    },
    result=(Result("K", torch.int64, name="kept"), Result("K", torch.int64, name="positions")),
    sizes={"L": 20},
    ones="L",
)
KV_CONTRACT = Contract(  # one call to a fresh cache: kv_cache's probes walk the sequences of calls
    init={
        "head_dim": Arg("size", "Dh"),
        "max_len": Arg("number", domain=">= 1", default=4096),
        "base": Arg("number", domain="> 0", default=10000.0),
    },
    args={
        name: Arg("activations", f"B {heads} T Dh", dtypes=(torch.float32, torch.bfloat16), grad=True)
        for name, heads in (("q", "Hq"), ("k", "Hk"), ("v", "Hk"))
    },
    result=(
        Result("B Hq T Dh", "q", name="q_rot"),
        Result("B Hk offset+T Dh", "k", name="k_all"),
        Result("B Hk offset+T Dh", "v", name="v_all"),
    ),
    sizes={"B": 2, "Hq": 4, "Hk": 2, "T": 5, "Dh": 8},
    ones="B Hk T",
    expected=lambda probe, module, head_dim, q, k, v, max_len=4096, base=10000.0: reference.RopeKVCache(
        head_dim, max_len, base
    )(q, k, v),
)

EXERCISES = [
    Exercise(
        id="RopeKVCache",
        chapter=8,
        points=3,
        kind="module",
        reference=reference.RopeKVCache,
        check=kv_cache.check_rope_kv_cache,
        mistakes={
            "cache_reset_on_chunk": kv_cache.kv_reset_on_chunk,  # first: its chunk's queries are at 0 too
            "decode_at_position_zero": kv_cache.kv_at_zero,
            "offset_double_counted": kv_cache.kv_double_counted,
            "keys_rotated_twice": kv_cache.kv_rotated_twice,
            "cache_keys_unrotated": kv_cache.kv_keys_unrotated,
            "rope_interleaved_convention": kv_cache.kv_interleaved,
            "wrong_base": kv_cache.kv_wrong_base,
            "wrong_exponent": kv_cache.kv_wrong_exponent,
            "low_precision_angles": kv_cache.kv_low_precision,
            "query_not_rotated": kv_cache.kv_query_unrotated,
            "values_rotated": kv_cache.kv_values_rotated,
        },
        stateful=True,
        advice={
            "wrong_dtype": (
                "The angles and the rotation are computed in float32 whatever q's dtype; the results go back to the "
                "inputs' dtypes, so that a bfloat16 model gets bfloat16 queries, keys and values.",
                "Cast the rotated tensors back, `(q.float() * cos + rotate_half(q.float()) * sin).to(q.dtype)` and the "
                "same with k, and cache k and v in their own dtype.",
            ),
            "wrong_shape": (
                "k_all and v_all keep the key heads, Hk of them: grouped-query attention shares each key head among "
                "Hq/Hk query heads in the attention itself, so the cache stores each one once (that is what GQA saves).",
                "Cache k and v as they come, (B, Hk, T, Dh), concatenated along the sequence axis, dim=-2: no "
                "repeat_interleave to Hq heads, no torch.cat on dim 1 or -1.",
            ),
        },
        difficulty=3,
        importance=3,
        minutes=25,
        edges=("lengths",),
        contract=KV_CONTRACT,
    ),
    Exercise(
        id="position_ids_from_mask",
        chapter=8,
        points=1,
        kind="function",
        reference=reference.position_ids_from_mask,
        check=check_position_ids,
        advice={"wrong_dtype": INDICES_ARE_LONG},
        mistakes={
            "padding_side_per_batch": ids_side_per_batch,  # first: on a mixed batch its faces are another's too
            "position_offset": ids_from_one,
            "mask_ignored": ids_mask_ignored,
            "left_padding_only": ids_left_padding_only,
            "batch_seq_confusion": ids_batch_axis,
            "squeezed_size_one": ids_squeezed,
        },
        difficulty=1,
        importance=3,
        minutes=10,
        contract=POSITION_IDS_CONTRACT,
    ),
    Exercise(
        id="decode_position_ids",
        chapter=8,
        points=1,
        kind="function",
        reference=reference.decode_position_ids,
        check=check_decode_positions,
        advice={
            "wrong_dtype": (
                INDICES_ARE_LONG[0],
                "Keep the count in integers, `attention_mask.long().sum(-1, keepdim=True)`, and add a long "
                "`torch.arange(new_tokens, device=attention_mask.device)`; or end with `.long()`.",
            ),
            "wrong_shape": (
                "The model reads position_ids like input_ids, (B, new_tokens): one row per sequence, one column per new "
                "token, (B, 1) for a single decode step.",
                "Keep the row axis with `keepdim=True` on the count, (B, 1), and add "
                "`torch.arange(new_tokens, device=attention_mask.device)` to it: broadcasting gives (B, new_tokens).",
            ),
        },
        mistakes={
            "decode_offset_shared": decode_shared,
            "decode_position_last": decode_last,
            "decode_counts_left_pads": decode_counts_left_pads,
            "mask_inverted": decode_inverted,
            "new_tokens_ignored": decode_new_tokens_ignored,
            "padding_side_per_batch": decode_side_per_batch,
            "squeezed_size_one": decode_squeezed,
        },
        difficulty=2,
        importance=3,
        minutes=10,
        contract=DECODE_CONTRACT,
    ),
    Exercise(
        id="packed_position_ids",
        chapter=8,
        points=1,
        kind="function",
        reference=reference.packed_position_ids,
        check=check_packed_positions,
        advice={
            "wrong_dtype": LENGTHS_ARE_LONG,
            "wrong_shape": (
                "The result is one position per token of the packed row: (S,), S = seq_lens.sum(), not one entry per "
                "document (N of them) nor the N + 1 boundaries of cu_seqlens.",
                "Give every token its position within its document: `torch.arange(S) - starts[document]`, with "
                "`document = torch.repeat_interleave(torch.arange(N), seq_lens)`, all on seq_lens' device.",
            ),
        },
        mistakes={
            "positions_not_restarted": packed_not_restarted,
            "position_offset": packed_from_one,
            "document_boundary_off_by_one": packed_boundary_off_by_one,
        },
        difficulty=2,
        importance=2,
        minutes=10,
        contract=PACKED_CONTRACT,
    ),
    Exercise(
        id="document_causal_mask",
        chapter=8,
        points=1,
        kind="function",
        reference=reference.document_causal_mask,
        check=check_document_mask,
        advice={"wrong_dtype": MASK_IS_BOOL},
        mistakes={
            "mask_causal_only": mask_causal_only,
            "mask_documents_only": mask_documents_only,
            "mask_transposed": mask_transposed,
            "mask_diagonal_excluded": mask_diagonal_excluded,
            "mask_sees_next_token": mask_sees_next_token,
            "mask_inverted": mask_inverted,
            "document_boundary_off_by_one": mask_boundary_off_by_one,
        },
        difficulty=2,
        importance=2,
        minutes=10,
        contract=DOCUMENT_MASK_CONTRACT,
    ),
    Exercise(
        id="streaming_positions",
        chapter=8,
        points=1,
        kind="function",
        reference=reference.streaming_positions,
        check=check_streaming,
        advice={
            "wrong_dtype": LENGTHS_ARE_LONG,
            "wrong_shape": (
                "kept and positions are (K,) with K = min(seq_len, n_sink + window): every token while the cache is "
                "not full, then the n_sink sinks and the `window` most recent tokens, never a preallocated K.",
                "Return exactly the tokens kept, `torch.arange(seq_len)` while seq_len <= n_sink + window, else the sinks "
                "then `torch.arange(seq_len - window, seq_len)`, and their slots `torch.arange(len(kept))`.",
            ),
        },
        mistakes={
            "sinks_dropped": stream_sinks_dropped,
            "window_off_by_one": stream_window_off_by_one,
            "positions_not_cache_slots": stream_original_positions,
            "tokens_kept_twice": stream_kept_twice,
            "window_zero_slice": stream_zero_slice,
            "window_counts_sinks": stream_window_counts_sinks,
            "position_offset": stream_slots_from_one,
            "positions_ring_buffer_slots": stream_ring_buffer_slots,
        },
        difficulty=2,
        importance=2,
        minutes=10,
        no_device_pass=TAKES_NO_TENSOR,
        edges=("lengths",),
        contract=STREAMING_CONTRACT,
    ),
]


def first_columns(found: Callable[[], dict[str, list[Tensor]]]) -> dict[str, list[Tensor]]:
    """The known mistakes' faces cut to each row's first new position (a (B, new_tokens) face, 2-D, only)."""
    return {code: [face[:, :1] for face in faces if face.dim() == 2] for code, faces in found().items()}


def new_tokens_ignored(first: Tensor, new_tokens: int) -> dict[str, list[Tensor]]:
    """What a function that ignores new_tokens returns after each row's first new position: that one column, or it
    repeated."""
    return {"new_tokens_ignored": [first, first.expand(-1, new_tokens)] if new_tokens > 1 else []}
