"""StreamingLLM's cache of chapter 08 (its exercise, `streaming_positions`, is declared in
ch08_positions_in_practice): the mistakes, each taking (seq_len, n_sink, window) and returning the (kept,
positions) the mistaken code makes, and the check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from helpers import reference
from helpers.probe import Probe

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


def stream_ring_buffer_slots(seq_len: int, n_sink: int, window: int) -> list[tuple[Tensor, Tensor]]:
    """Your positions are ring-buffer slots: where a rolling cache writes each kept token (its index modulo the cache
    size, `kept % K`, or modulo the window after the sinks), not the tokens' order. Once the window has wrapped round,
    the positions no longer follow the order of the tokens kept: a newer token gets a smaller position than an older
    one, and the rotation tells the model the wrong order.

    Hint: A slot in memory (where a ring buffer writes) is not a position. StreamingLLM rotates the cached keys by
    their place in the cache's order, the sinks first, then the window from its oldest token to its newest: 0 .. K-1.

    Fix: `positions = torch.arange(len(kept))`: the order of the kept tokens, whatever slot each sits in."""
    kept, _ = reference.streaming_positions(seq_len, n_sink, window)
    in_window = torch.cat([kept[:n_sink], n_sink + (kept[n_sink:] - n_sink) % max(window, 1)])
    return [(kept, kept % max(n_sink + window, 1)), (kept, in_window)]


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
                mistakes=functools.partial(position_mistakes, expected, case),
            )

    probe.independent(kept, slots)


def position_mistakes(expected: Tensor, case: tuple[Any, ...]) -> dict[str, list[Tensor]]:
    """The faces of the positions' known mistakes for one streaming case (read only when the positions are wrong)."""
    return {
        "position_offset": [expected + 1],
        "positions_ring_buffer_slots": [face for _, face in stream_ring_buffer_slots(*case)],
    }
