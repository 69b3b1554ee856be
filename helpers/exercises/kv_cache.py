"""The KV cache kit of chapter 08 (its exercise, `RopeKVCache`, is declared in ch08_positions_in_practice):
the mistakes, each a whole generation replayed with one knob turned (`replay`), and the probes a cache
is checked with: one call against RoPE in float64 (`one_pass`), a prompt then more calls against the
student's own one call (`incremental`), the length check, the device pass (`check_rope_kv_cache`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from helpers import reference
from helpers.exercises.common import error_instead_of_value_error, raised
from helpers.exercises.rope import rope64, rotated, tensors, tolerance
from helpers.probe import Probe, close
from helpers.safety import Failure

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
    # "out" (rotated once, all turned again on the way out)
    reset: bool = False,  # a call of more than one token taken for a new prompt: the cache starts over
    turned: str = "qk",  # which of q, k, v are rotated
) -> Run:
    """A KV cache with RoPE, one knob turned; by default it is right."""
    run, offset, cache_k, cache_v = [], 0, None, None
    for q, k, v in chunks:
        T = q.shape[-2]
        if reset and T > 1:
            offset, cache_k, cache_v = 0, None, None
        q_rot, k_rot = (turn(x, start(offset, T)) if name in turned else x for name, x in (("q", q), ("k", k)))
        v = turn(v, start(offset, T)) if "v" in turned else v
        cache_v = v if cache_v is None else torch.cat([cache_v, v], dim=-2)
        if keys == "again":  # the cached keys, rotated already, and the raw new ones, all turned at 0 .. L-1
            cache_k = turn(k if cache_k is None else torch.cat([cache_k, k], dim=-2), 0)
            k_all = cache_k
        elif keys == "out":  # stored rotated once, returned turned again: the key at n claims 2n
            cache_k = k_rot if cache_k is None else torch.cat([cache_k, k_rot], dim=-2)
            k_all = turn(cache_k, 0)
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
    """Your cached keys are rotated again: the whole cache, whose keys were rotated already, is turned once
    more at positions 0 .. L-1, either stored back (the rotation compounds: after s calls a prompt key at n sits
    at (s + 1)·n) or on the way out only (every key claims 2n, R(n)R(n) = R(2n)). A key's position never changes,
    so it is rotated once, when it arrives.

    Hint: Store the keys already rotated, at the position each had when it arrived; from then on the cache
    is only appended to. Rotate the new k only, never the concatenated cache.

    Fix: Rotate `k` first, then `self.k_cache = torch.cat([self.k_cache, k_rot], dim=-2)` and return the cache
    as it is."""
    return [replay(chunks, turn, keys="again"), replay(chunks, turn, keys="out")]


def kv_reset_on_chunk(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Your cache starts over whenever a call brings more than one token: a call with T > 1 is taken for a new
    prompt, so its tokens are rotated at 0 .. T-1 and the keys and values cached before it are dropped. Your
    one-token steps are right; a chunk of a long prompt (chunked prefill) or of a draft (speculative decoding)
    after the first call is not a new sequence.

    Hint: Only the caller knows when a sequence starts: a new sequence is a new cache, not a call of many tokens.
    Every call, whatever its T, continues from the tokens seen before it.

    Fix: Drop the `if T > 1:` branch that resets the offset and the cache: rotate at
    `torch.arange(self.offset, self.offset + T)` and append, for every T."""
    return [replay(chunks, turn, reset=True)]


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


def kv_query_unrotated(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Your q_rot is the query as it came in: the keys are rotated, the queries are not. The score q·R(n)k then
    reads every key as if the query sat at position 0, whatever its own position.

    Hint: RoPE's score depends on m - n only because both sides turn: the query by its position m, the key by n.

    Fix: Rotate q exactly as k, at the same positions, and return that: `q_rot = rotate(q, positions)`."""
    return [replay(chunks, turn, turned="k")]


def kv_values_rotated(chunks: Chunks, turn: Turn, base: float) -> list[Run]:
    """Your values are rotated too: RoPE turns the queries and the keys, whose dot product is the score, and leaves
    the values alone; a rotated value changes what attention returns, not where it looks.

    Hint: Position enters attention through the scores only: which of q, k and v meet in a dot product?

    Fix: Rotate q and k, and cache v as it comes: `self.v_cache = torch.cat([self.v_cache, v], dim=-2)`."""
    return [replay(chunks, turn, turned="qkv")]


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
    probe.expect(
        v_all, v, what=f"v_all of {what}", mistakes=lambda: {c: [r[0][2] for r in runs] for c, runs in found().items()}
    )


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
    replays: dict[str, list[Any]] = {}

    def mistakes(step: int, index: int) -> Callable[[], dict[str, list[Tensor]]]:
        """The catalogue replayed with the student's own rotation, less the faces the right counting gives too: where
        the student's own one call is off (a cache that rotates a call of T at T .. 2T-1), every replay reproduces
        its first call, and none of them says what is wrong."""

        def run() -> dict[str, list[Tensor]]:
            if not replays:
                replays.update(probe.known_mistakes(cpu_chunks, own_turn, base)())
                replays["right"] = [replay(cpu_chunks, own_turn)]
            right = replays["right"][0][step][index]
            return {
                code: [r[step][index].to(probe.device) for r in runs if not torch.equal(r[step][index], right)]
                for code, runs in replays.items()
                if code != "right"
            }

        return run

    for step, (q, k, v) in enumerate(chunks):
        T = q.shape[-2]
        what = f"call {step + 1} of {described(probe, max_len, base)} (T = {T}, positions {offset}..{offset + T - 1})"
        out = three_tensors(probe, probe.call(module, q, k, v, what=what), what)
        rows = (slice(offset, offset + T), slice(0, offset + T), slice(0, offset + T))
        for index, name in enumerate(("q_rot", "k_all", "v_all")):
            hint, fix = sequence_advice(out[index], full[index][..., rows[index], :])
            try:
                probe.expect(
                    out[index],
                    full[index][..., rows[index], :],
                    what=f"{name} of {what}",
                    mistakes=mistakes(step, index),
                    hint=hint,
                    fix=fix,
                )
            except Failure as failure:
                if failure.code != "wrong_values":
                    raise
                said = failure.message.replace("from the reference", f"from what one call on all {L} tokens gives")
                probe.fail("wrong_values", said.replace("expected", "one call gives"), *INCREMENTAL_HELP)
        offset = read_offset(probe, module, offset + T, f"after {what}")


def sequence_advice(got: Tensor, expected: Tensor) -> tuple[str, str]:
    """(hint, fix), empty where they do not apply: a k_all or v_all of the right heads but another length holds
    some other set of tokens than every one so far, not the GQA question the exercise's wrong_shape advice answers."""
    if got.dim() != expected.dim() or got.shape[:-2] != expected.shape[:-2] or got.shape[-2] == expected.shape[-2]:
        return "", ""
    return (
        "k_all and v_all hold every key and value seen so far, the earlier calls' and this one's: their "
        "sequence axis (dim -2) is offset + T long after a call of T tokens.",
        "Keep both caches across calls and append each call's keys and values along the sequence axis, "
        "`torch.cat([self.v_cache, v], dim=-2)`, then return the caches, not this call's k and v.",
    )


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
        if (error := error_instead_of_value_error(failure)) is None:
            return
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


def defaults_kept(probe: Probe, cls: Any) -> None:
    """Built with head_dim alone, the module takes the exercise's defaults, max_len = 4096 and base = 10000: a prompt
    of 4096 tokens reads the table at its last position and is rotated at base 10000; one more token is refused. On
    the CPU only (the rotation's own probes pass max_len and base explicitly, so a default copied from another
    codebase, 2048 or 500000, shows only here)."""
    if probe.accelerator_pass:
        return
    max_len, base = 4096, 10000.0
    x = probe.randn(1, 1, max_len, DH, device="cpu")
    built = f"`{probe.name}({DH})`, built without max_len and base (defaults 4096 and 10000),"
    advice = {
        "hint": "A constructor's defaults are part of the exercise: code that builds your cache with the head size alone "
        "counts on max_len = 4096 and base = 10000, whatever another codebase uses (2048 in GPT-NeoX's and LitGPT's "
        "configs, 500000 in Llama 3's).",
        "fix": "Write the signature as the docstring gives it, `def __init__(self, head_dim, max_len=4096, base=10000.0)`, "
        "and use both arguments themselves.",
    }
    module = probe.build(cls, DH)
    try:
        out = probe.call(module, x, x.clone(), x.clone(), what=f"{built}, on a prompt of 4096 tokens")
    except Failure as failure:
        if raised(failure, "ValueError"):
            probe.fail(
                "default_changed", f"{built} refused a prompt of 4096 tokens: its default max_len is smaller.", **advice
            )
        raise
    q_rot = three_tensors(probe, out, f"{built}, on a prompt of 4096 tokens")[0][..., -16:, :]  # the far end
    positions = torch.arange(max_len - 16, max_len)
    tail = x[..., -16:, :]
    if not close(q_rot, rope64(tail, positions, base), **tolerance(tail, positions, base)):
        probe.fail(
            "default_changed",
            f"{built} rotates a prompt of 4096 tokens otherwise than RoPE at base 10000 does: its default base is another.",
            **advice,
        )
    try:
        probe.call(module, x[..., :1, :], x[..., :1, :], x[..., :1, :], what=f"{built}, one token after 4096")
    except Failure as failure:
        if raised(failure, "ValueError"):
            return
        raise
    probe.fail(
        "default_changed",
        f"{built} accepted a token at position 4096, one past its default max_len of 4096: its default is larger.",
        **advice,
    )


def gradients_flow(probe: Probe, cls: Any) -> None:
    """A first call is a training forward too: q_rot, k_all and v_all carry the gradient back to q, k and v (the
    rotation's transpose, and v as it is), as the reference's do. Read only where the outputs are right (else the
    rotation's own probes name what is wrong). On the CPU only."""
    if probe.accelerator_pass:
        return
    q, k, v = (probe.randn(B, H, 5, DH, device="cpu").requires_grad_() for H in HEADS)
    what = f"one call of {described(probe, 16, 10000.0)} on q, k, v that require grad (T = 5)"
    outs = three_tensors(probe, probe.call(probe.build(cls, DH, 16, 10000.0), q, k, v, what=what), what)
    mirror = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    expected = reference.RopeKVCache(DH, 16, 10000.0)(*mirror)
    if not all(close(out, want) for out, want in zip(outs, expected)):
        return
    cut = [name for name, out in zip(("q_rot", "k_all", "v_all"), outs) if not out.requires_grad]
    if cut:
        probe.fail(
            "gradient_cut",
            f"After {what}, {' and '.join(f'`{name}`' for name in cut)} {'does' if len(cut) == 1 else 'do'} not require "
            "grad: the call is cut off from autograd, so no projection before it could be trained through it.",
            hint="A KV cache's first call is the forward pass of a training step when the model runs with it: the rotation "
            "is a product like any other, and torch.no_grad(), inference_mode or .detach() around it ends autograd's record.",
            fix="Rotate q and k outside any `with torch.no_grad():` or `@torch.inference_mode()`, with no `.detach()` on the "
            "way; only the cos/sin tables may be made without gradient.",
        )
    upstream = [probe.randn(*want.shape, device="cpu") for want in expected]
    probe.call(
        lambda: sum((out * u).sum() for out, u in zip(outs, upstream)).backward(),
        what=f"backward through `{probe.name}`",
    )
    sum((want * u).sum() for want, u in zip(expected, upstream)).backward()
    for name, got, want in zip("qkv", (q, k, v), mirror):
        if got.grad is None:
            probe.fail(
                "gradient_cut",
                f"After a backward pass through {what}, `{name}` has no gradient: the outputs were computed from a copy of it.",
            )
        probe.expect(got.grad, want.grad, what=f"the gradient of `{name}` after a backward pass through {what}")


def views_taken(probe: Probe, cls: Any) -> None:
    """q, k and v as a model hands them over: (B, T, H, Dh) projections viewed as (B, H, T, Dh) by a transpose,
    not contiguous. A prompt and a step, against the reference."""
    module = probe.build(cls, DH, 16, 10000.0)
    mirror = reference.RopeKVCache(DH, 16, 10000.0).to(probe.device)
    for T in (4, 1):
        q, k, v = (probe.randn(B, T, H, DH).transpose(1, 2) for H in HEADS)
        what = f"a call of {described(probe, 16, 10000.0)} on q, k, v transposed from (B, T, H, Dh) (T = {T})"
        try:
            out = probe.call(module, q, k, v, what=what)
        except Failure as failure:
            if failure.code == "raised" and "view size is not compatible" in failure.message:
                error = failure.message.split(" raised ", 1)[-1]
                probe.fail(
                    "contiguity_assumed",
                    f"On q, k and v that are views, not contiguous tensors, as a model hands them over, {what} raised {error}",
                )
            raise
        for name, got, want in zip(("q_rot", "k_all", "v_all"), three_tensors(probe, out, what), mirror(q, k, v)):
            probe.expect(got, want, what=f"{name} of {what}")


COUNTING = {"decode_at_position_zero", "offset_double_counted", "offset_not_advanced", "cache_reset_on_chunk"}


def check_rope_kv_cache(cls: Any, probe: Probe) -> None:
    # a prompt, two decode steps, a chunk of two (chunked prefill), a step
    steps = kv_inputs(probe, [5, 1, 1, 2, 1], torch.float32, 16)
    # a long prompt in bfloat16 with another base: positions past 256, where half-precision angles collide
    long = kv_inputs(probe, [300, 1, 1], torch.bfloat16, 4096)
    counted: list[str] = []  # a counting mistake one call already shows (its positions shifted): said once

    def rotation(chunks: Chunks, **kwargs: Any) -> None:
        try:
            one_pass(probe, cls, chunks, **kwargs)
        except Failure as failure:
            counted.extend([failure.code] if failure.code in COUNTING else [])
            raise

    def counting() -> None:  # silent where rotation already named a counting mistake
        if not counted:
            incremental(probe, cls, steps, base=10000.0, max_len=16)

    def defaults() -> None:
        if probe.passed("rotation") and probe.passed("length"):
            defaults_kept(probe, cls)

    def views() -> None:
        if probe.passed("rotation") and probe.passed("counting"):
            views_taken(probe, cls)

    # the last three read what the others leave right: each is silent where an earlier aspect names the mistake
    probe.independent(
        rotation=lambda: rotation(steps, base=10000.0, max_len=16),
        long=lambda: rotation(long, base=500000.0, max_len=4096),
        counting=counting,
        length=lambda: length_checked(probe, cls),
        device=lambda: kv_device_pass(probe, cls),
        defaults=defaults,
        gradients=lambda: gradients_flow(probe, cls),
        views=views,
    )
