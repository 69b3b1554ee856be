"""Packed documents of chapter 08 (their exercises, `packed_position_ids` and `document_causal_mask`, are
declared in ch08_positions_in_practice): the mistakes, each taking the lengths seq_lens (N,) and returning what
the mistaken code makes, and the checks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from helpers import reference
from helpers.exercises.common import says
from helpers.probe import Probe, close

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


def mask_sees_next_token(seq_lens: Tensor) -> Tensor:
    """Your mask lets each token see the next one: the diagonal just above the main one is True (`tril(1)`, or
    `j <= i + 1`), so within a document query i attends key i + 1, a token of its future. A model trained with
    this mask on packed rows reads the very token it is asked to predict.

    Hint: torch.tril's `diagonal` counts diagonals above the main one: diagonal=1 keeps one more. Causal attention
    keeps j ≤ i, the main diagonal and the ones below it.

    Fix: `torch.ones(S, S, dtype=torch.bool).tril()` with the default diagonal=0, or `j <= i`."""
    S = int(seq_lens.sum())
    document = document_of_each_token(seq_lens)
    return (document[:, None] == document[None, :]) & torch.ones(S, S, dtype=torch.bool).tril(1)


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
                mistakes=functools.partial(either_direction_of_each, found),
            )

    probe.independent(lambda: against_reference_on(probe, fn, single), documents_apart)
    against_reference_on(probe, fn, documents(probe))
    documents_device_pass(probe, fn)


def either_direction_of_each(found: Callable[[], dict[str, Any]]) -> dict[str, list[Tensor]]:
    """The known mistakes' faces, each read in both directions as the documents' masks are compared."""
    return {code: [either_direction(face) for face in faces] for code, faces in found().items()}
