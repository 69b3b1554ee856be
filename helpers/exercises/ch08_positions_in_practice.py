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
reference names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from helpers import reference
from helpers.contracts import Arg, Contract, Draw, Result, noncontiguous
from helpers.exercises import kv_cache
from helpers.exercises.common import TAKES_NO_TENSOR, says
from helpers.probe import Probe, close
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
                mistakes=lambda found=found: {
                    code: [face[:, :1] for face in faces if face.dim() == 2] for code, faces in found().items()
                },
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
                mistakes=lambda own=own, k=new_tokens: {
                    "new_tokens_ignored": [own, own.expand(-1, k)] if k > 1 else []
                },
            )

    probe.independent(starts, steps)
    mask = decode_cases(probe)[0][1]
    probe.device_pass(lambda device: probe.call(fn, mask.to(device), 2))


# --- packed_position_ids and document_causal_mask ------------------------------------------
# Each mistake takes seq_lens (N,) and returns what the mistaken code returns.


def document_of_each_token(seq_lens: Tensor) -> Tensor:
    return torch.repeat_interleave(torch.arange(len(seq_lens)), seq_lens.cpu())  # (S,)


def packed_not_restarted(seq_lens: Tensor) -> Tensor:
    """Your positions run on through the whole packed row, 0 .. S-1: the second document starts
    where the first ended (at 101 after a document of 101 tokens), as if it continued the first.

    Hint: Packing is a trick of the batch, not of the text: each document must see the positions it
    would have had alone, so the count starts again at 0 at each document's first token.

    Fix: Subtract each document's start from the token index: with `starts = seq_lens.cumsum(0) - seq_lens`,
    `torch.arange(S) - starts.repeat_interleave(seq_lens)` (on seq_lens' device)."""
    return torch.arange(int(seq_lens.sum()))


def packed_from_one(seq_lens: Tensor) -> Tensor:
    """Your positions restart at 1 in every document instead of 0.

    Hint: A document run alone numbers its tokens 0, 1, 2, ...: its first token is at position 0.

    Fix: Subtract each document's start, `seq_lens.cumsum(0) - seq_lens`, not its end minus its length
    plus one, from the token index: the first token of every document gets 0."""
    return reference.packed_position_ids(seq_lens) + 1


def shifted_documents(seq_lens: Tensor) -> list[Tensor]:
    """Each token's document, with the boundaries one token late and one token early."""
    document = document_of_each_token(seq_lens)
    late = torch.cat([document[:1], document[:-1]])  # the first token of a document still counted in the one before
    early = torch.cat([document[1:], document[-1:]])
    return [late, early]


def positions_in(document: Tensor) -> Tensor:
    """0, 1, 2, ... within each run of equal document ids."""
    index = torch.arange(len(document))
    new = torch.ones(len(document), dtype=torch.bool)
    new[1:] = document[1:] != document[:-1]
    starts = torch.cummax(torch.where(new, index, 0), 0).values
    return index - starts


BOUNDARY = """Your document boundaries are off by one token: each document starts one token too late or too
early (the last token of one document counted in the next, or the other way round), a cumulative sum
taken inclusive where it must be exclusive.

Hint: Document n starts at the sum of the lengths before it: 0 for the first, seq_lens[0] for the second.
`seq_lens.cumsum(0)` gives the ends (exclusive), one past each document's last token.

Fix: Take the starts as `seq_lens.cumsum(0) - seq_lens` (or `torch.cat([zero, seq_lens.cumsum(0)[:-1]])`), and
give every token its document with `torch.repeat_interleave(torch.arange(N), seq_lens)`."""


@says(BOUNDARY)
def packed_boundary_off_by_one(seq_lens: Tensor) -> list[Tensor]:
    starts = (seq_lens.cumsum(0) - seq_lens).cpu()
    return [
        face
        for document in shifted_documents(seq_lens)
        for face in (positions_in(document), torch.arange(len(document)) - starts[document])
    ]


def mask_causal_only(seq_lens: Tensor) -> Tensor:
    """Your mask is causal only: query i sees every earlier key of the whole packed row, so the second
    document attends to the first, which it never could have seen alone.

    Hint: Packing puts unrelated documents side by side; the mask must keep them apart, as if each ran
    alone. Two conditions: the same document, and j ≤ i.

    Fix: AND the causal mask with a same-document test: `document[:, None] == document[None, :]`, with
    `document = torch.repeat_interleave(torch.arange(N), seq_lens)`."""
    S = int(seq_lens.sum())
    return torch.ones(S, S, dtype=torch.bool).tril()


def mask_documents_only(seq_lens: Tensor) -> Tensor:
    """Your mask is block-diagonal only: each token sees its whole document, the keys after it included.
    A decoder trained that way reads the answer it is asked to predict.

    Hint: Two conditions together: the same document, and j ≤ i (no key after the query).

    Fix: AND the same-document test with the causal one, `torch.ones(S, S, dtype=torch.bool).tril()`
    (made on seq_lens' device)."""
    document = document_of_each_token(seq_lens)
    return document[:, None] == document[None, :]


def mask_transposed(seq_lens: Tensor) -> Tensor:
    """Your mask is transposed: True where j ≥ i, so each query sees the keys after it, not before it
    (`triu` instead of `tril`, or the query and key axes swapped).

    Hint: Rows are queries, columns keys: row i may be True only in columns 0 .. i of its document,
    the lower triangle.

    Fix: Use `.tril()` (or `j <= i` with `i` indexing rows: `arange(S)[None, :] <= arange(S)[:, None]`)."""
    return reference.document_causal_mask(seq_lens).T


def mask_diagonal_excluded(seq_lens: Tensor) -> Tensor:
    """Your mask leaves out the diagonal: query i does not see key i, itself (`tril(diagonal=-1)`, or
    j < i). The first token of every document then sees nothing at all, and its softmax is NaN.

    Hint: j ≤ i, not j < i: a token attends to itself too.

    Fix: `torch.ones(S, S, dtype=torch.bool).tril()` with the default diagonal=0, or `j <= i`."""
    S = int(seq_lens.sum())
    return reference.document_causal_mask(seq_lens) & ~torch.eye(S, dtype=torch.bool)


@says(BOUNDARY)
def mask_boundary_off_by_one(seq_lens: Tensor) -> list[Tensor]:
    S = int(seq_lens.sum())
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    return [(document[:, None] == document[None, :]) & causal for document in shifted_documents(seq_lens)]


def documents(probe: Probe) -> list[Tensor]:
    """Lengths with a document of one token, one document alone, and equal lengths (where a mistake with
    the lengths' order hides): small, so that a mask is read at a glance."""
    return [torch.tensor(lens, device=probe.device) for lens in ([3, 1, 4], [5], [2, 2, 3], [1, 6], [6, 1], [1])]


def against_reference_on(probe: Probe, fn: Callable, cases: list[Tensor]) -> None:
    """Every case against the reference and the catalogue."""
    for seq_lens in cases:
        what = f"`{probe.exercise.id}(seq_lens)` for seq_lens = {seq_lens.tolist()}"
        probe.against_reference(probe.call(fn, seq_lens, what=what), seq_lens, what=what)


def documents_device_pass(probe: Probe, fn: Callable) -> None:
    seq_lens = documents(probe)[0]
    probe.device_pass(lambda device: probe.call(fn, seq_lens.to(device)))


def check_packed_positions(fn: Callable, probe: Probe) -> None:
    against_reference_on(probe, fn, documents(probe))
    documents_device_pass(probe, fn)


def either_direction(mask: Tensor) -> Tensor:
    """Which keys a query's document lets it see, before or after it: the mask or its transpose, and itself."""
    return mask | mask.T | torch.eye(len(mask), dtype=torch.bool, device=mask.device)


def mask_inverted(seq_lens: Tensor) -> Tensor:
    """Your mask is inverted: True where query i may NOT attend key j. That is the convention of nn.Transformer's and
    nn.MultiheadAttention's boolean attn_mask (True = masked out) and of Megatron-LM's `attention_mask < 0.5`; this
    exercise's mask, like F.scaled_dot_product_attention's boolean one, is True where attention is allowed.

    Hint: Read one entry: the first token of a document must see itself, so the diagonal is True, and a token never
    sees the keys after it, so the upper triangle is False.

    Fix: Return the allowed pairs themselves, the same-document test `&` the causal one, with no `~` or `logical_not`
    (or `< 0.5`) at the end."""
    return ~reference.document_causal_mask(seq_lens)


def check_document_mask(fn: Callable, probe: Probe) -> None:
    """The convention first (an inverted mask is wrong everywhere, and each aspect below would name another part of
    it); then two independent aspects, then the whole: the causal part on one document alone (nothing to keep
    apart), the document part on several, read in either direction (whatever the causal part does)."""
    seq_lens = documents(probe)[0]
    what = f"`document_causal_mask(seq_lens)` for seq_lens = {seq_lens.tolist()}"
    out = probe.call(fn, seq_lens, what=what)
    if isinstance(out, Tensor) and not out.is_meta and close(out, mask_inverted(seq_lens)):
        probe.fail("mask_inverted", probe.explain("mask_inverted"))
    single = [torch.tensor([n], device=probe.device) for n in (5, 2)]

    def documents_apart() -> None:
        for seq_lens in documents(probe):
            call = f"`document_causal_mask(seq_lens)` for seq_lens = {seq_lens.tolist()}"
            out = probe.call(fn, seq_lens, what=call)
            if not (
                isinstance(out, Tensor) and out.dtype == torch.bool and out.dim() == 2 and out.shape[0] == out.shape[1]
            ):
                probe.against_reference(out, seq_lens, what=call)  # names the type, shape or dtype
            found = probe.known_mistakes(seq_lens)
            probe.expect(
                either_direction(out),
                either_direction(reference.document_causal_mask(seq_lens)),
                what=f"which keys each query's document lets it see in {call}, before or after it",
                mistakes=lambda found=found: {
                    code: [either_direction(face) for face in faces] for code, faces in found().items()
                },
            )

    probe.independent(lambda: against_reference_on(probe, fn, single), documents_apart)
    against_reference_on(probe, fn, documents(probe))
    documents_device_pass(probe, fn)


# --- streaming_positions ----------------------------------------------------------------------
# Each mistake takes (seq_len, n_sink, window) and returns (kept, positions).


def stream_sinks_dropped(seq_len: int, n_sink: int, window: int) -> tuple[Tensor, Tensor]:
    """Your cache keeps only the last `window` tokens: the attention sinks, the first n_sink tokens, are
    dropped. Xiao et al. show that a window without them falls apart as soon as the first token is evicted:
    the model parks attention mass on the first tokens, whatever they say.

    Hint: The kept tokens are two ranges: the first n_sink tokens, always, and the last `window`.

    Fix: `kept = torch.cat([tokens[:n_sink], tokens[seq_len - window:]])` once seq_len > n_sink + window."""
    kept = torch.arange(max(seq_len - window, 0), seq_len)
    return kept, torch.arange(len(kept))


def stream_window_off_by_one(seq_len: int, n_sink: int, window: int) -> list[tuple[Tensor, Tensor]]:
    """Your window is off by one token: it holds one token too many or too few, or the right number ending one
    token early (the newest token left out): the recent range is not seq_len - window .. seq_len - 1.

    Hint: The last `window` tokens of seq_len are seq_len - window .. seq_len - 1: exactly `window` of them, the
    newest included.

    Fix: `tokens[seq_len - window:]`, i.e. `torch.arange(seq_len - window, seq_len)`; no + 1 or - 1."""
    if seq_len <= n_sink + window:
        return []
    recent = [torch.arange(max(seq_len - w, n_sink), seq_len) for w in (window + 1, window - 1) if w >= 0]
    if window >= 1:
        recent.append(torch.arange(seq_len - window - 1, seq_len - 1))  # shifted back: the newest token missing
    kept = [torch.cat([torch.arange(n_sink), r]) for r in recent]
    return [(k, torch.arange(len(k))) for k in kept]


def stream_slots_from_one(seq_len: int, n_sink: int, window: int) -> tuple[Tensor, Tensor]:
    """Your positions count the cache's slots from 1: the kept tokens are numbered 1 .. K instead of 0 .. K-1, so
    the first sink sits at position 1 and every key is one position further from the query than it is.

    Hint: A slot is an index into the cache: the first kept token, a sink, is in slot 0, like the first token of
    any sequence.

    Fix: `positions = torch.arange(len(kept))`, with no + 1."""
    kept, positions = reference.streaming_positions(seq_len, n_sink, window)
    return kept, positions + 1


def stream_original_positions(seq_len: int, n_sink: int, window: int) -> tuple[Tensor, Tensor]:
    """Your positions are the tokens' original indices, not their slots in the cache: past n_sink + window
    tokens they grow without end, beyond the trained length, which is what StreamingLLM avoids.

    Hint: StreamingLLM rotates the cached keys by where they sit in the cache, not where they sat in the text:
    the positions are 0 .. K-1 whatever seq_len is.

    Fix: `positions = torch.arange(len(kept))`."""
    kept, _ = reference.streaming_positions(seq_len, n_sink, window)
    return kept, kept.clone()


def stream_kept_twice(seq_len: int, n_sink: int, window: int) -> tuple[Tensor, Tensor]:
    """Your cache holds some tokens twice: while seq_len ≤ n_sink + window the sinks and the window overlap,
    and concatenating both ranges repeats the tokens they share.

    Hint: Before the cache is full nothing is evicted: every token is kept, once.

    Fix: `if seq_len <= n_sink + window: kept = torch.arange(seq_len)`, and only otherwise the two ranges."""
    tokens = torch.arange(seq_len)
    kept = torch.cat([tokens[:n_sink], tokens[max(seq_len - window, 0) :]])
    return kept, torch.arange(len(kept))


def stream_zero_slice(seq_len: int, n_sink: int, window: int) -> list[tuple[Tensor, Tensor]]:
    """Your cache keeps every token once its window is down to a slice of -0: `tokens[-window:]` with window = 0,
    or the newest token plus `[-(window - 1):]` before it (room made for the coming token, as StreamingLLM's
    `evict_for_space` does) with window = 1. Python reads [-0:] as [0:], the whole sequence, not an empty slice.

    Hint: A negative index counts from the end except at -0, which is 0. Write where the window starts as a
    non-negative index, and try the smallest windows, 0 and 1.

    Fix: Start the window at `seq_len - window`: `tokens[seq_len - window:]`, the newest token included."""
    tokens = torch.arange(seq_len)
    if seq_len <= n_sink + window:
        return [(tokens, torch.arange(seq_len))]
    recent = [tokens[-window:]]
    if window >= 1:
        recent.append(torch.cat([tokens[n_sink:-1][-(window - 1) :], tokens[-1:]]))
    kept = [torch.cat([tokens[:n_sink], r]) for r in recent]
    return [(k, torch.arange(len(k))) for k in kept]


def stream_window_counts_sinks(seq_len: int, n_sink: int, window: int) -> tuple[Tensor, Tensor]:
    """Your window counts the sinks: the cache holds `window` tokens in all, the n_sink sinks among them, so only the
    last window - n_sink tokens are kept after the sinks (transformers' former `SinkCache(window_length, num_sink_tokens)`
    meant that). This exercise's window is the recent tokens alone, StreamingLLM's `recent_size`: n_sink + window in all.

    Hint: Count what the cache holds once it is full: the sinks, and then how many recent tokens?

    Fix: Keep all `window` recent tokens after the sinks: `tokens[seq_len - window:]` once seq_len > n_sink + window."""
    tokens = torch.arange(seq_len)
    recent = max(window - n_sink, 0)
    kept = (
        tokens if seq_len <= max(window, n_sink) else torch.cat([tokens[:n_sink], tokens[seq_len - recent :][:recent]])
    )
    return kept, torch.arange(len(kept))


STREAMING_CASES = [
    (20, 4, 8),  # the usual case: sinks, a gap, a window
    (10, 2, 3),
    (7, 4, 8),  # fewer tokens than the cache holds: all kept
    (12, 4, 8),  # exactly full
    (13, 4, 8),  # one evicted
    (9, 0, 4),  # no sinks: a plain window
    (9, 3, 0),  # no window: the sinks alone
    (10, 2, 1),  # a window of the newest token alone
    (6, 0, 1),
    (1, 4, 8),  # the first token
]


def check_streaming(fn: Callable, probe: Probe) -> None:
    """Two independent aspects: which tokens are kept, and their positions, the slots 0 .. K-1 of what is kept."""
    outs = []
    for seq_len, n_sink, window in STREAMING_CASES:
        what = f"`streaming_positions({seq_len}, n_sink={n_sink}, window={window})`"
        out = probe.call(fn, probe.length(seq_len), n_sink, window, what=what)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            probe.fail(
                "wrong_type",
                f"{what} should return two tensors, (kept, positions); got {type(out).__name__}.",
                hint="The caller unpacks the result into the kept tokens and their positions.",
                fix="End with `return kept, positions`: two LongTensors in a tuple.",
            )
        outs.append(((seq_len, n_sink, window), what, out))

    def kept() -> None:
        for case, what, (got, _) in outs:
            expected = reference.streaming_positions(*case)[0]
            probe.expect(got, expected, what=f"kept of {what}", mistakes=probe.known_mistakes(*case, index=0))

    def slots() -> None:
        for case, what, (got_kept, got) in outs:
            one_row = isinstance(got_kept, Tensor) and got_kept.dim() == 1
            expected = torch.arange(len(got_kept)) if one_row else reference.streaming_positions(*case)[1]
            copied = isinstance(got, Tensor) and got.dtype == got_kept.dtype and torch.equal(got, got_kept)
            if one_row and copied and not torch.equal(got, expected):
                probe.fail("positions_not_cache_slots", f"{probe.explain('positions_not_cache_slots')} ({what})")
            probe.expect(
                got,
                expected,
                what=f"positions of {what}, for the {len(expected)} tokens it keeps",
                mistakes=lambda expected=expected: {"position_offset": [expected + 1]},
            )

    probe.independent(kept, slots)


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
        },
        difficulty=2,
        importance=2,
        minutes=10,
        no_device_pass=TAKES_NO_TENSOR,
        edges=("lengths",),
        contract=STREAMING_CONTRACT,
    ),
]
