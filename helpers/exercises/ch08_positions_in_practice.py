"""Chapter 08, positions in practice: how positions are counted once a model is served or trained.

Five exercises, each the few lines that public bug trackers show going wrong:

* `position_ids_from_mask`: a left- or right-padded batch numbers each row's real tokens
  0, 1, 2, ... (transformers' generate, `cumsum - 1` with the pads filled);
* `packed_position_ids` and `document_causal_mask`: documents packed into one row restart
  at position 0 and see only themselves (FlashAttention's varlen `cu_seqlens`);
* `RopeKVCache`: RoPE in a KV cache, each key rotated once, at its own absolute position
  (transformers' `cache_position`): a prompt then token-by-token steps equals one full pass;
* `streaming_positions`: StreamingLLM's cache (Xiao et al. 2023), attention sinks plus a
  window, rotated by slot in the cache.

Each mistake is runnable code written as the slip is made, one or a list of results (its faces).
RopeKVCache's mistakes replay a whole generation (`replay`): a list of (q_rot, k_all, v_all),
one per call, so that the step where the student's module parts from the reference names it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from helpers import reference
from helpers.exercises.common import TAKES_NO_TENSOR, raised, says
from helpers.exercises.rope import rope64, rotated, tensors, tolerance
from helpers.probe import Probe
from helpers.registry import Exercise
from helpers.safety import Failure

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
    "`cumsum(-1) - 1` is -1 at every pad before a row's first real token. An embedding lookup or a cos/sin "
    "table indexed with -1 silently reads the last row; transformers overwrites the pads for that reason."
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
        if not (isinstance(out, Tensor) and out.shape == mask.shape and not out.is_meta):
            return found()
        real = mask.bool()
        return {
            code: [torch.where(real, face, out.to(face.dtype)) for face in faces if face.shape == mask.shape]
            for code, faces in found().items()
        }

    return run


def masks(probe: Probe) -> list[tuple[str, Tensor]]:
    """Left and right padding, long, int32 and bool, rows of every fill (all real, one real token):
    B ≠ T everywhere, so that a sum down the wrong axis shows."""
    left = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 1]])  # (3, 7)
    right = torch.tensor([[1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])  # (4, 5)
    return [
        ("a left-padded long mask (3, 7)", left.to(probe.device)),
        ("a right-padded int32 mask (4, 5)", right.to(probe.device, torch.int32)),
        (
            "a left-padded bool mask (2, 6)",
            torch.tensor([[0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]], dtype=torch.bool).to(probe.device),
        ),
    ]


def check_position_ids(fn: Callable, probe: Probe) -> None:
    """The real tokens of every mask first (a mistake of one padding side shows on the other), then the pads."""
    outs = []
    for said, mask in masks(probe):
        what = f"`position_ids_from_mask(mask)` on {said}"
        out = probe.call(fn, mask, what=what)
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
    return [torch.tensor(lens, device=probe.device) for lens in ([3, 1, 4], [5], [2, 2, 3], [1, 6])]


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


def check_document_mask(fn: Callable, probe: Probe) -> None:
    """Two independent aspects, then the whole: the causal part on one document alone (nothing to keep apart),
    the document part on several, read in either direction (whatever the causal part does)."""
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


# --- RopeKVCache --------------------------------------------------------------------------
# Two independent aspects. The rotation: one call on a whole sequence, against RoPE in float64 (layout,
# frequencies, precision). The counting: a prompt then more calls must equal one call on the whole sequence,
# the student's own (the chapter's equivalence test), whatever the student's rotation is.
#
# A mistake replays a whole generation: mistake(chunks, turn, base), where chunks is the list of (q, k, v)
# handed to the module call after call and turn(x, first) is a rotation of x (..., T, Dh) at positions
# first .. first + T - 1 (the reference's, or the student's own); it returns a list of replays (its faces,
# even of one: a replay is a list itself), each one (q_rot, k_all, v_all) per call.

Chunks = list[tuple[Tensor, Tensor, Tensor]]
Run = list[tuple[Tensor, Tensor, Tensor]]
Turn = Callable[[Tensor, int], Tensor]


def turn_of(base: float, **knobs: Any) -> Turn:
    """RoPE at positions first .. first + T - 1 (rope.rotated, with its knobs: pairing, exponent, angle_dtype)."""
    return lambda x, first: rotated(x, torch.arange(first, first + x.shape[-2]), base, **knobs)


def replay(
    chunks: Chunks,
    turn: Turn,
    *,
    start: Callable[[int, int], int] = lambda offset, T: offset,  # the position the call's first token gets
    keys: str = "rotated",  # what the cache holds: "rotated", "raw" (kept unrotated), "again" (turned every call)
) -> Run:
    """A KV cache with RoPE, one knob turned; by default it is right."""
    run, offset, cache_k, cache_v = [], 0, None, None
    for q, k, v in chunks:
        T = q.shape[-2]
        q_rot, k_rot = turn(q, start(offset, T)), turn(k, start(offset, T))
        cache_v = v if cache_v is None else torch.cat([cache_v, v], dim=-2)
        if keys == "again":  # the cached keys, rotated already, and the raw new ones, all turned at 0 .. L-1
            cache_k = turn(k if cache_k is None else torch.cat([cache_k, k], dim=-2), 0)
            k_all = cache_k
        else:
            new = k if keys == "raw" else k_rot
            cache_k = new if cache_k is None else torch.cat([cache_k, new], dim=-2)
            k_all = torch.cat([cache_k[..., :-T, :], k_rot], dim=-2)  # the new keys rotated on the way out
        run.append((q_rot, k_all, cache_v))
        offset += T
    return run


def kv_at_zero(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Every call rotates its tokens at positions 0 .. T-1: the prompt is right, but each generated
    token is rotated as if it were the first (position 0), so the model decodes at the wrong place:
    the classic "prefill right, generation wrong".

    Hint: During generation each call brings one new token, and its position is the number of
    tokens seen before it, not 0. The module must remember that count between calls.

    Fix: Make the positions from the offset: `torch.arange(self.offset, self.offset + T, device=q.device)`,
    and advance `self.offset += T` after the call."""
    return [replay(chunks, turn, start=lambda offset, T: 0)]


def kv_double_counted(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Your positions jump ahead after the prompt: the offset is counted twice, e.g. advanced before the
    new tokens are rotated (their positions start at offset + T), or advanced by the whole cache length
    on top of the new tokens (offset + (offset + T)), the "offset jumps by the prompt length" bug.

    Hint: The first new token after a prompt of T tokens is at position T. Which value does your offset
    hold when you make the positions, and by how much does it grow per call?

    Fix: Rotate at `torch.arange(self.offset, self.offset + T)` first, then advance once: `self.offset += T`
    (not `self.offset = len(cache)` plus T, nor before the rotation)."""
    return [
        replay(chunks, turn, start=lambda offset, T: offset + T),
        replay(chunks, turn, start=lambda offset, T: 2 * offset),
    ]


def kv_rotated_twice(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Your cached keys are rotated again on a later call: the whole cache, whose keys were rotated
    already, is turned once more at positions 0 .. L-1. A key's position never changes, so it is
    rotated once, when it arrives.

    Hint: Store the keys already rotated, at the position each had when it arrived; from then on the cache
    is only appended to. Rotate the new k only, never the concatenated cache.

    Fix: Rotate `k` first, then `self.k_cache = torch.cat([self.k_cache, k_rot], dim=-2)` and return the cache
    as it is."""
    return [replay(chunks, turn, keys="again")]


def kv_keys_unrotated(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Your cache holds the keys as they came in, unrotated: the keys of earlier calls come back without
    their rotation, so attention sees them all at no position at all.

    Hint: Each key must carry its position. Either store it rotated (rotated once, when it arrives), or store
    it raw and rotate every cached key at its own position each time you return the cache.

    Fix: Append the rotated keys, `self.k_cache = torch.cat([self.k_cache, k_rot], dim=-2)`, not `k`."""
    return [replay(chunks, turn, keys="raw")]


def kv_interleaved(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Your rotation pairs adjacent components, (x[2i], x[2i+1]) (Meta's and GPT-J's interleaved layout);
    this exercise, like transformers' Llama, pairs x[i] with x[i + Dh/2] (`rotate_half`).

    Hint: Weights trained with one layout give wrong attention with the other. rotate_half splits the head
    into two halves; the interleaved form takes even and odd components.

    Fix: `x * cos + rotate_half(x) * sin`, with `rotate_half(x) = torch.cat([-x[..., Dh//2:], x[..., :Dh//2]], -1)`
    and each pair's angle repeated side by side: `torch.cat([angles, angles], -1)`."""
    return [replay(chunks, turn_of(base, pairing="adjacent"))]


def kv_wrong_base(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    return [replay(chunks, turn_of(other)) for other in (1000.0, 10000.0) if other != base]


kv_wrong_base.__doc__ = """Your frequencies ignore the `base` the module was built with: 1000 (a typo of popular
tutorials) or a hard-coded 10000 where another base was asked (Llama 3 uses 500000).

Hint: Keep the constructor's base and build θ_i = base^(-2i/Dh) from it.

Fix: `self.register_buffer('inv_freq', base ** (-torch.arange(0, head_dim, 2).float() / head_dim), persistent=False)`
with the `base` argument."""


def kv_wrong_exponent(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    return [replay(chunks, turn_of(base, exponent=e)) for e in ("i/d", "4i/d", "+2i/d", "integer")]


kv_wrong_exponent.__doc__ = """Your frequencies have the wrong exponent: θ_i is not base^(-2i/Dh) for
i = 0 .. Dh/2 - 1, with Dh the head dimension.

Hint: θ_0 must be 1 and the last θ just above 1/base. The usual slips: a missing 2, a missing minus sign
(or 1/), an integer division that rounds every exponent to 0.

Fix: `base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)`, true division."""


def kv_low_precision(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Your angles are computed in half precision (the input's bfloat16 or float16) instead of float32:
    bfloat16 holds every integer only up to 256, so positions past it collide and their rotations are
    wrong by up to a radian.

    Hint: The positions and θ·m must stay float32 whatever q's dtype; only the rotated result is cast back.

    Fix: `angles = positions.float()[:, None] * self.inv_freq.float()`, cos and sin in float32,
    `(q.float() * cos + rotate_half(q.float()) * sin).to(q.dtype)`."""
    return [replay(chunks, turn_of(base, angle_dtype=dtype)) for dtype in (torch.bfloat16, torch.float16)]


HEADS = (4, 2, 2)  # Hq, Hk, Hk: grouped-query attention, as Llama 3 and Mistral use it
B, DH = 2, 8


def kv_inputs(probe: Probe, sizes: list[int], dtype: torch.dtype, max_len: int) -> Chunks:
    """One (q, k, v) per call, T = sizes[i], their lengths marked (T = 1, T = max_len are the edges)."""
    return [tuple(probe.sequence(probe.randn(B, H, T, DH, dtype=dtype), max_len, dim=2) for H in HEADS) for T in sizes]


def whole(chunks: Chunks) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(torch.cat([chunk[i] for chunk in chunks], dim=-2) for i in range(3))


def described(probe: Probe, max_len: int, base: float) -> str:
    return f"`{probe.name}({DH}, max_len={max_len}, base={base:g})`"


def one_pass(probe: Probe, cls: Any, chunks: Chunks, *, base: float, max_len: int) -> None:
    """The rotation: a fresh module called once on the whole sequence, against RoPE in float64."""
    q, k, v = whole(chunks)
    L = q.shape[-2]
    module = probe.build(cls, DH, max_len, base)
    what = f"one call of {described(probe, max_len, base)} on a whole sequence (T = {L}, {q.dtype})"
    q_rot, k_all, v_all = three_tensors(probe, probe.call(module, q, k, v, what=what), what)
    positions = torch.arange(L)
    found = probe.known_mistakes([tuple(t.cpu() for t in (q, k, v))], turn_of(base), base)
    for index, (name, got, x) in enumerate((("q_rot", q_rot, q), ("k_all", k_all, k))):
        faces = lambda index=index: {code: [run[0][index] for run in runs] for code, runs in found().items()}
        probe.expect(
            got, rope64(x, positions, base), what=f"{name} of {what}", mistakes=faces, **tolerance(x, positions, base)
        )
    probe.expect(v_all, v, what=f"v_all of {what}")


INCREMENTAL_HELP = (
    "Incremental decoding must equal one pass over the whole sequence: each call's queries at their absolute positions, "
    "every key rotated once, at the position it had when it arrived, and kept as it is from then on.",
    "Print, after each call, the positions you rotate at and the shape of your cache, next to what a prompt of that many "
    "tokens would give: the first call where they part is the one to fix.",
)


def incremental(probe: Probe, cls: Any, chunks: Chunks, *, base: float, max_len: int) -> None:
    """The counting: a prompt then more calls must give what one call on the whole sequence gives, the student's
    own module's, call by call; and `offset` must count the tokens seen."""
    q, k, v = whole(chunks)
    L = q.shape[-2]
    full = three_tensors(
        probe, probe.call(probe.build(cls, DH, max_len, base), q, k, v), "one call on the whole sequence"
    )
    module = probe.build(cls, DH, max_len, base)
    offset = read_offset(probe, module, 0, "right after construction")

    def own_turn(x: Tensor, first: int) -> Tensor:
        """The student's own rotation at first .. first + T - 1: the last T rows of a fresh module's q_rot."""
        padded = torch.cat([x.new_zeros(*x.shape[:-2], first, x.shape[-1]), x], dim=-2)
        fresh = probe.build(cls, DH, max(max_len, first + 2 * x.shape[-2]), base)
        return probe.call(fresh, padded, padded[:, :1], padded[:, :1])[0][..., first:, :].cpu()

    cpu_chunks = [tuple(t.cpu() for t in chunk) for chunk in chunks]
    replays = {}

    def mistakes(step: int, index: int) -> Callable[[], dict[str, list[Tensor]]]:
        def run() -> dict[str, list[Tensor]]:
            if not replays:
                replays.update(probe.known_mistakes(cpu_chunks, own_turn, base)())
            return {code: [r[step][index].to(probe.device) for r in runs] for code, runs in replays.items()}

        return run

    for step, (q, k, v) in enumerate(chunks):
        T = q.shape[-2]
        what = f"call {step + 1} of {described(probe, max_len, base)} (T = {T}, positions {offset}..{offset + T - 1})"
        out = three_tensors(probe, probe.call(module, q, k, v, what=what), what)
        rows = (slice(offset, offset + T), slice(0, offset + T), slice(0, offset + T))
        for index, name in enumerate(("q_rot", "k_all", "v_all")):
            try:
                probe.expect(
                    out[index],
                    full[index][..., rows[index], :],
                    what=f"{name} of {what}",
                    mistakes=mistakes(step, index),
                )
            except Failure as failure:
                if failure.code != "wrong_values":
                    raise
                said = failure.message.replace("from the reference", f"from what one call on all {L} tokens gives")
                probe.fail("wrong_values", said.replace("expected", "one call gives"), *INCREMENTAL_HELP)
        offset = read_offset(probe, module, offset + T, f"after {what}")


def read_offset(probe: Probe, module: Any, expected: int, when: str) -> int:
    """The module's `offset`, which the exercise names: the tokens seen so far."""
    offset = getattr(module, "offset", None)
    if isinstance(offset, Tensor) and offset.numel() == 1 and not offset.is_meta:
        offset = int(offset)
    if not isinstance(offset, int) or isinstance(offset, bool):
        probe.fail(
            "wrong_type",
            f"`{probe.name}` has no integer attribute `offset` {when} (found {type(offset).__name__}).",
            hint="The exercise names the attribute: `offset` counts the tokens the module has seen, so that a caller can read the position of the next one.",
            fix="Set `self.offset = 0` in __init__ and add each call's T to it in forward: `self.offset += T`.",
        )
    if offset == expected:
        return offset
    if offset < expected:
        probe.fail(
            "offset_not_advanced",
            f"`{probe.name}.offset` is {offset} {when}; it should be {expected}, the number of tokens seen so far.",
            hint="The offset is the module's memory of where the sequence stands: every call must move it on by the tokens it brought.",
            fix="At the end of forward, `self.offset += q.shape[-2]` (an int, not a tensor).",
        )
    probe.fail(
        "offset_double_counted",
        f"`{probe.name}.offset` is {offset} {when}; it should be {expected}, the number of tokens seen so far.",
        hint="Count each token once: a call of T tokens moves the offset on by T, no more.",
        fix="Advance once, at the end of forward: `self.offset += T`; do not also set it from the cache's length plus T.",
    )
    return offset


def three_tensors(probe: Probe, out: Any, what: str) -> tuple[Tensor, Tensor, Tensor]:
    q_rot, k_all, v_all = tensors(
        probe,
        out,
        what,
        "(q_rot, k_all, v_all)",
        hint="The attention that calls the cache needs the rotated queries and every key and value so far, as three separate tensors.",
        fix="End forward with `return q_rot, self.k_cache, self.v_cache`.",
    )
    return q_rot, k_all, v_all


def refuses_position(probe: Probe, run: Callable[[], Any], what: str) -> None:
    """run() reaches a position ≥ max_len: it must raise a ValueError."""
    fix = (
        "At the start of forward: `if self.offset + T > self.max_len: raise ValueError(f'positions up to "
        "{self.offset + T - 1} go past max_len {self.max_len}')`, counting the tokens already cached."
    )
    hint = "The check belongs where the positions are made: the last position of a call is offset + T - 1, the tokens cached before it included."
    try:
        run()
    except Failure as failure:
        if raised(failure, "ValueError"):
            return
        if failure.code != "raised":
            raise
        error = failure.message.split(" raised ", 1)[-1].rstrip(".")
        probe.fail("no_length_check", f"{what}, `{probe.name}` raised {error}, not a ValueError.", hint=hint, fix=fix)
    probe.fail(
        "no_length_check",
        f"{what}, `{probe.name}` returned a result instead of raising a ValueError.",
        hint=hint,
        fix=fix,
    )


def length_checked(probe: Probe, cls: Any) -> None:
    """Positions up to max_len - 1 work, whether reached by a prompt of max_len tokens or by steps; the next one
    is refused, and so is a prompt of max_len + 1 (a check of offset alone lets it through). On the CPU only."""
    if probe.accelerator_pass:
        return
    Dh, max_len = 8, 6

    def call(module: Any, T: int) -> Any:
        q = probe.sequence(probe.randn(1, 2, T, Dh, device="cpu"), max_len, dim=2)
        return probe.call(
            module, q, q.clone(), q.clone(), what=f"`{probe.name}(8, max_len={max_len})` called with T = {T}"
        )

    module = probe.call(cls, Dh, max_len, what=f"`{probe.name}(8, max_len={max_len})`")
    try:
        call(module, max_len)
    except Failure as failure:
        if raised(failure, "ValueError"):
            probe.fail(
                "length_check_off_by_one",
                f"`{probe.name}(8, max_len={max_len})` refused a prompt of exactly {max_len} tokens, yet its positions 0..{max_len - 1} are all below max_len.",
                hint="The last position a call reaches is offset + T - 1: only a position of max_len or more is past the end.",
                fix="Refuse when `self.offset + T > self.max_len` (with `>`, not `>=`).",
            )
        raise
    refuses_position(
        probe, lambda: call(module, 1), f"For one more token after a prompt of max_len = {max_len} (position {max_len})"
    )
    module = probe.call(cls, Dh, max_len, what=f"`{probe.name}(8, max_len={max_len})`")
    refuses_position(
        probe, lambda: call(module, max_len + 1), f"For a first call of T = max_len + 1 = {max_len + 1} tokens"
    )


def kv_device_pass(probe: Probe, cls: Any) -> None:
    """A prompt and one step on the meta device (and with CPU factories on meta): the step's positions must be
    made on q's device too."""

    def run(device: torch.device) -> Any:
        module = probe.call(cls, 8, 16, what=f"`{probe.name}(8, 16)`")
        module = probe.call(module.to, device, what=f"`{probe.name}.to(device)`")
        for T in (3, 1):
            q = probe.randn(1, 2, T, 8, device=device)
            out = probe.call(module, q, q.clone(), q.clone())
        return out

    probe.device_pass(run)


def check_rope_kv_cache(cls: Any, probe: Probe) -> None:
    # a prompt, two decode steps, a chunk of two (chunked prefill), a step
    steps = kv_inputs(probe, [5, 1, 1, 2, 1], torch.float32, 16)
    # a long prompt in bfloat16 with another base: positions past 256, where half-precision angles collide
    long = kv_inputs(probe, [300, 1, 1], torch.bfloat16, 4096)
    probe.independent(
        lambda: one_pass(probe, cls, steps, base=10000.0, max_len=16),
        lambda: one_pass(probe, cls, long, base=500000.0, max_len=4096),
        lambda: incremental(probe, cls, steps, base=10000.0, max_len=16),
        lambda: length_checked(probe, cls),
        lambda: kv_device_pass(probe, cls),
    )


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
    """Your window holds one token too many or too few: the recent range does not start at
    seq_len - window.

    Hint: The last `window` tokens of seq_len are seq_len - window .. seq_len - 1: exactly `window` of them.

    Fix: `tokens[seq_len - window:]`, i.e. `torch.arange(seq_len - window, seq_len)`; no + 1 or - 1."""
    faces = []
    for w in (window + 1, window - 1):
        if w >= 0 and seq_len > n_sink + window:
            kept = torch.cat([torch.arange(n_sink), torch.arange(max(seq_len - w, n_sink), seq_len)])
            faces.append((kept, torch.arange(len(kept))))
    return faces


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


def stream_zero_slice(seq_len: int, n_sink: int, window: int) -> tuple[Tensor, Tensor]:
    """With window = 0 your cache keeps every token: a slice [-window:] is [-0:], which Python reads as
    [0:], the whole sequence, not an empty slice.

    Hint: A negative index counts from the end except at -0, which is 0. Write the window's start as a
    non-negative index.

    Fix: Start the window at `seq_len - window`: `tokens[seq_len - window:]`."""
    tokens = torch.arange(seq_len)
    if seq_len <= n_sink + window:
        return tokens, torch.arange(seq_len)
    kept = torch.cat([tokens[:n_sink], tokens[-window:]])
    return kept, torch.arange(len(kept))


STREAMING_CASES = [
    (20, 4, 8),  # the usual case: sinks, a gap, a window
    (10, 2, 3),
    (7, 4, 8),  # fewer tokens than the cache holds: all kept
    (12, 4, 8),  # exactly full
    (13, 4, 8),  # one evicted
    (9, 0, 4),  # no sinks: a plain window
    (9, 3, 0),  # no window: the sinks alone
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
            probe.expect(got, expected, what=f"positions of {what}, for the {len(expected)} tokens it keeps")

    probe.independent(kept, slots)


# --- the exercises ------------------------------------------------------------------------------

# Positions and kept tokens are indices, a mask says yes or no: a float result is the usual slip.
INDICES_ARE_LONG = (
    "Positions index tables (an nn.Embedding, a cos/sin cache), so they are integers: torch.long, as torch.arange "
    "and a cumulative sum of a long tensor make them. A float or int32 result has to be cast by every caller.",
    "Keep the computation in integers, e.g. `attention_mask.long().cumsum(-1)` (no `.float()` on the way), or end "
    "with `.long()`.",
)
MASK_IS_BOOL = (
    "This mask says yes or no: True where query i may attend key j. An additive mask of 0 and -inf is what attention "
    "adds to its scores; transformers builds that from the boolean one.",
    "Return the comparison itself, a BoolTensor: the same-document test `&` the causal one, with no `.float()`, "
    "`masked_fill(..., float('-inf'))` or `.int()` after it.",
)

EXERCISES = [
    Exercise(
        id="RopeKVCache",
        chapter=8,
        points=3,
        kind="module",
        reference=reference.RopeKVCache,
        check=check_rope_kv_cache,
        mistakes={
            "decode_at_position_zero": kv_at_zero,
            "offset_double_counted": kv_double_counted,
            "keys_rotated_twice": kv_rotated_twice,
            "cache_keys_unrotated": kv_keys_unrotated,
            "rope_interleaved_convention": kv_interleaved,
            "wrong_base": kv_wrong_base,
            "wrong_exponent": kv_wrong_exponent,
            "low_precision_angles": kv_low_precision,
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
            "position_offset": ids_from_one,
            "mask_ignored": ids_mask_ignored,
            "left_padding_only": ids_left_padding_only,
            "batch_seq_confusion": ids_batch_axis,
        },
        difficulty=1,
        importance=3,
        minutes=10,
    ),
    Exercise(
        id="packed_position_ids",
        chapter=8,
        points=1,
        kind="function",
        reference=reference.packed_position_ids,
        check=check_packed_positions,
        advice={"wrong_dtype": INDICES_ARE_LONG},
        mistakes={
            "positions_not_restarted": packed_not_restarted,
            "position_offset": packed_from_one,
            "document_boundary_off_by_one": packed_boundary_off_by_one,
        },
        difficulty=2,
        importance=2,
        minutes=10,
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
            "document_boundary_off_by_one": mask_boundary_off_by_one,
        },
        difficulty=2,
        importance=2,
        minutes=10,
    ),
    Exercise(
        id="streaming_positions",
        chapter=8,
        points=1,
        kind="function",
        reference=reference.streaming_positions,
        check=check_streaming,
        advice={"wrong_dtype": INDICES_ARE_LONG},
        mistakes={
            "sinks_dropped": stream_sinks_dropped,
            "window_off_by_one": stream_window_off_by_one,
            "positions_not_cache_slots": stream_original_positions,
            "tokens_kept_twice": stream_kept_twice,
            "window_zero_slice": stream_zero_slice,
        },
        difficulty=2,
        importance=2,
        minutes=10,
        no_device_pass=TAKES_NO_TENSOR,
        edges=("lengths",),
    ),
]
