"""Evaluating a causal language model on a stream of tokens, as the long-context papers do, at a size a CPU
affords (chapters 07 and 08, on helpers.models.decoder()):

    nll_by_position(model, ids, window=None)        the loss on every token: full context, or a sliding window
    streaming_nll(model, ids, n_sink, window)       the same through StreamingLLM's cache (Xiao et al. 2023)
    perplexity(nll, bucket=None)                    exp(mean loss), overall or by consecutive bucket of positions
    first_token_attention(model, ids)               the share of attention on the first token, by layer and head
    passkey_prompt(tokenizer, n_tokens, depth, key) Mohtashami & Jaggi's passkey prompt, the key at a depth
    passkey_margin(model, prompts, answers, chunk)  by how much greedy decoding writes the key (> 0) or not

`nll[..., i]` is always the loss on token i + 1: -log p(ids[i + 1] | what the model saw of ids[: i + 1]).
The loss functions take ids (T,) or a batch (B, T) and return the same leading shape. Everything runs in
eval mode under no_grad, the losses in chunks, so memory and time stay bounded whatever the length.

The models are HF causal LMs with Llama's half-split RoPE (Llama, Mistral, Qwen, SmolLM2, and
helpers.library.tiny_llama for the tests). transformers is never imported here: the caller's model brings it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
import torch.nn.functional as F

from helpers.reference import streaming_positions

# (seq_len, n_sink, window) -> (kept (K,) stream indices, slots (K,) positions): chapter 08's streaming_positions
Positions = Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]
_Function = TypeVar("_Function", bound=Callable[..., Any])


def _no_grad(fn: _Function) -> _Function:
    """torch.no_grad() as a decorator whose type mypy can read (torch's types are not analysed here)."""
    return cast(_Function, torch.no_grad()(fn))


def _full_context(seq_len: int, n_sink: int, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Nothing evicted, every token at its index in the stream: a growing cache."""
    return torch.arange(seq_len), torch.arange(seq_len)


def _batch(ids: torch.Tensor) -> torch.Tensor:
    if ids.dim() not in (1, 2) or ids.dtype != torch.long or ids.shape[-1] < 2:
        raise ValueError(f"ids must be (T,) or (B, T) long with T >= 2, not {tuple(ids.shape)} {ids.dtype}")
    return ids if ids.dim() == 2 else ids[None]


def _token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits, (B, T) targets -> (B, T) float32 losses."""
    return F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers 5.x renamed `past_key_values` to `cache`; the range pyproject.toml allows has both."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _rotate_keys(keys: torch.Tensor, shift: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Keys (B, H, K, D) already rotated at their positions, moved by shift (K,) positions: RoPE's rotations
    compose, R(p + s) k = R(s) R(p) k. Llama's half-split layout: dimension j pairs with j + D/2."""
    angle = shift[:, None].to(inv_freq) * inv_freq  # (K, D/2) on the model's device (shift is bookkeeping, on the CPU)
    cos, sin = torch.cat([angle, angle], -1).cos(), torch.cat([angle, angle], -1).sin()  # (K, D)
    first, second = keys.chunk(2, dim=-1)
    return keys * cos.to(keys.dtype) + torch.cat([-second, first], -1) * sin.to(keys.dtype)


@_no_grad
def _stream(
    model: torch.nn.Module, ids: torch.Tensor, chunk: int, positions: Positions, n_sink: int, window: int
) -> torch.Tensor:
    """The loss on every token, fed chunk by chunk through a KV cache that `positions` evicts and places.

    Before chunk [s, s + c) is fed, positions(s + c, n_sink, window) says which tokens the cache keeps
    (the chunk must be its last c) and the slot of each: cached keys are rotated from the slot they had to
    their new one, the chunk's tokens are fed at theirs, and each of its queries sees the kept tokens and
    the chunk's tokens up to itself. With chunk = 1 this is the rolling cache exactly."""
    from_cache = _cache_kwarg(model)
    inv_freq = model.model.rotary_emb.inv_freq
    cache, stored, slots_of_stored = None, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    losses = []
    for start in range(0, ids.shape[1] - 1, chunk):
        new = torch.arange(start, min(start + chunk, ids.shape[1] - 1))  # the last token is only a target
        kept, slots = positions(int(new[-1]) + 1, n_sink, window)
        c = len(new)
        if len(kept) < c or not torch.equal(kept[-c:], new) or not torch.isin(kept[:-c], stored).all():
            raise ValueError(
                f"positions({int(new[-1]) + 1}, {n_sink}, {window}) must keep the newest {c} tokens (chunk <= window)"
                " and only tokens the cache holds"
            )
        if cache is not None:
            rows = torch.searchsorted(stored, kept[:-c])
            shift = slots[:-c] - slots_of_stored[rows]
            for layer in cache.layers:
                layer.keys = _rotate_keys(layer.keys[:, :, rows], shift, inv_freq)
                layer.values = layer.values[:, :, rows]
        out = model(
            ids[:, new],
            position_ids=slots[-c:].expand(ids.shape[0], c).to(ids.device),  # the bookkeeping stays on the CPU
            use_cache=True,
            **({from_cache: cache} if cache is not None else {}),
        )
        cache, stored, slots_of_stored = getattr(out, from_cache), kept, slots
        losses.append(_token_nll(out.logits, ids[:, new + 1]))
    return torch.cat(losses, 1)


def nll_by_position(
    model: torch.nn.Module, ids: torch.Tensor, window: int | None = None, stride: int | None = None, chunk: int = 512
) -> torch.Tensor:
    """The loss on every token of ids (T,) or (B, T): (T - 1,) or (B, T - 1) float32, entry i for token i + 1.

    window=None: the full context, fed `chunk` tokens at a time through a KV cache (the same losses as one
    forward pass over the whole sequence, up to float rounding, in bounded memory); token i + 1 sees ids[: i + 1]
    at their positions 0 .. i.

    window=W: a sliding window with recomputation, as HF's perplexity guide does it: each forward pass reads
    at most W tokens afresh, at positions 0 .. W - 1, and scores the `stride` newest (default W // 2) of them.
    Token i + 1 then sees all before it if i < W, else between W - stride and W - 1 of them: never a
    position past W. Costs about T / stride passes of W tokens."""
    batch = _batch(ids)
    model.eval()
    if window is None:
        losses = _stream(model, batch, chunk, _full_context, 0, 0)
        return losses if ids.dim() == 2 else losses[0]
    stride = stride or max(window // 2, 1)
    if not 0 < stride <= window - 1:
        raise ValueError(f"stride must be between 1 and window - 1 = {window - 1}, not {stride}")
    losses, scored = [], 0  # tokens 1 .. scored have their loss
    with torch.no_grad():
        for end in range(window, batch.shape[1] + stride, stride):
            end = min(end, batch.shape[1])
            piece = batch[:, max(end - window, 0) : end]
            logits = model(piece, use_cache=False).logits[:, :-1]
            new = end - 1 - scored  # the targets not scored yet: the last `new` of this piece
            losses.append(_token_nll(logits[:, -new:], piece[:, -new:]))
            scored = end - 1
            if end == batch.shape[1]:
                break
    losses = torch.cat(losses, 1)
    return losses if ids.dim() == 2 else losses[0]


def streaming_nll(
    model: torch.nn.Module,
    ids: torch.Tensor,
    n_sink: int,
    window: int,
    chunk: int = 32,
    positions: Positions = streaming_positions,
) -> torch.Tensor:
    """The loss on every token through StreamingLLM's rolling cache: the first n_sink tokens and the most
    recent ones, at their slots in the cache (positions never exceed n_sink + window - 1). n_sink=0 is
    window attention, the baseline whose perplexity explodes once the first token is evicted.
    ids (T,) or (B, T) -> (T - 1,) or (B, T - 1) float32, entry i for token i + 1.

    `positions` is chapter 08's `streaming_positions(seq_len, n_sink, window) -> (kept, slots)` (yours, or
    the course's): it decides what the cache keeps and where. The cache holds keys as the model computed
    them, each in the context it had when it arrived (evicting never recomputes them), rotated from slot to
    slot as the window slides: what StreamingLLM does.

    What differs from a true rolling cache, to save a CPU: the tokens are fed `chunk` at a time. The last of
    each chunk sees the sinks and exactly `window` recent tokens (itself included); the first sees
    window - chunk + 1 of them. chunk=1 is the rolling cache exactly, one forward pass per token. The
    losses agree with the full context's until the first eviction (token n_sink + window)."""
    if not 1 <= chunk <= window:
        raise ValueError(f"chunk must be between 1 and window = {window}, not {chunk}")
    batch = _batch(ids)
    model.eval()
    losses = _stream(model, batch, chunk, positions, n_sink, window)
    return losses if ids.dim() == 2 else losses[0]


def perplexity(nll: torch.Tensor, bucket: int | None = None) -> torch.Tensor:
    """exp of the mean loss: over everything (a 0-d tensor), or over each run of `bucket` consecutive
    positions (the last dimension; a batch's rows are averaged together), which is perplexity by position:
    (ceil(n / bucket),), the last bucket possibly shorter."""
    if bucket is None:
        return nll.float().mean().exp()
    by_position = nll.float().reshape(-1, nll.shape[-1]).mean(0)
    return torch.stack([piece.mean() for piece in by_position.split(bucket)]).exp()


@_no_grad
def first_token_attention(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The attention sinks: the share of each head's attention that lands on the first token, averaged over
    the queries 1 .. T - 1 (query 0 can attend to nothing else) and the batch: (layers, heads) float32.
    A uniform head would give it 1 / (i + 1) at query i. Computed with eager attention (the only path that
    returns the probabilities), one layer at a time through a hook, so memory stays small; the model's
    attention implementation is put back afterwards."""
    batch = _batch(ids)
    shares: list[torch.Tensor] = []

    def keep_share(module: torch.nn.Module, args: Any, output: tuple[torch.Tensor, torch.Tensor]) -> None:
        probabilities = output[1]  # (B, heads, T, T)
        shares.append(probabilities[:, :, 1:, 0].float().mean(dim=(0, 2)))

    previous = model.config._attn_implementation
    layers = model.model.layers
    hooks = [layer.self_attn.register_forward_hook(keep_share) for layer in layers]
    try:
        model.set_attn_implementation("eager")
        model.eval()
        model(batch, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
        model.set_attn_implementation(previous)
    return torch.stack(shares)


# Mohtashami & Jaggi (2023, Landmark Attention)'s passkey test, as Chen et al. (2023, PI) and Peng et al.
# (2023, YaRN) run it: the task, filler, the key's line at some depth of the filler, more filler, the question.
PASSKEY_TASK = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there."
)
PASSKEY_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
PASSKEY_QUESTION = "What is the pass key? The pass key is"


def passkey_prompt(tokenizer: Any, n_tokens: int, depth: float, key: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt (T,), answer (k,)) long: the passkey prompt, T <= n_tokens, and the tokens of " {key}", the
    continuation that retrieves the key.

    The filler sentence is repeated as often as fits in n_tokens, round(depth * repetitions) of them before
    the key's line (depth 0: right after the task; 1: right before the question). The lines are joined by
    newlines and the repetitions by spaces, as in the original, but the filler is counted in whole
    repetitions (the original cuts it at a character count), and the pieces are tokenised one by one and
    concatenated: with a tokenizer that spells the sentence and its repetition (" The grass ...") in as
    many tokens, as SmolLM2's does, T is the same at every depth and prompts of different depths batch."""
    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be between 0 and 1, not {depth}")

    def tokens(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False).input_ids)

    first, again, newline = tokens(PASSKEY_FILLER), tokens(" " + PASSKEY_FILLER), tokens("\n")
    task, question = tokens(PASSKEY_TASK) + newline, tokens(PASSKEY_QUESTION)
    line = tokens(f"The pass key is {key}. Remember it. {key} is the pass key.") + newline

    def filler(n: int) -> list[int]:
        return (first + again * (n - 1) if n else []) + newline

    def prompt(n: int) -> list[int]:
        before = round(depth * n)
        return task + filler(before) + line + filler(n - before) + question

    n = max((n_tokens - len(prompt(0))) // len(again), 0)  # the repetitions that fit, give or take one
    while n > 0 and len(prompt(n)) > n_tokens:
        n -= 1
    if len(prompt(n)) > n_tokens:
        raise ValueError(f"the passkey prompt needs at least {len(prompt(0))} tokens, not {n_tokens}")
    return torch.tensor(prompt(n)), torch.tensor(tokens(f" {key}"))


@_no_grad
def passkey_margin(
    model: torch.nn.Module, prompts: torch.Tensor, answers: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """prompts (B, T), answers (B, k) -> (B,) float32: over the answer's k tokens, the smallest lead of the
    answer's token over the model's best other token, in logits, each predicted from the prompt and the
    answer's tokens before it (teacher forcing: one forward pass). Positive exactly when greedy decoding
    writes the whole answer; its size says how far rounding is from changing that verdict. Only the last k
    positions' logits are computed (`logits_to_keep`): the vocabulary projection of a long prompt is not.

    chunk=C: the prompt is fed C tokens at a time through a KV cache, as a server prefills a long prompt, so
    that attention holds (B, heads, C, T) scores, not (B, heads, T, T): 32,768 tokens in one pass need more
    than an 80 GB GPU. The same margins up to float rounding (a "dynamic" RoPE rescales by each call's length)."""
    if prompts.dim() != 2 or answers.dim() != 2 or len(prompts) != len(answers):
        raise ValueError(
            f"prompts (B, T) and answers (B, k) please, not {tuple(prompts.shape)}, {tuple(answers.shape)}"
        )
    model.eval()
    k = answers.shape[1]
    fed, cached = torch.cat([prompts, answers[:, :-1]], 1), dict[str, object]()  # the cache, once there is one
    if chunk is not None:  # all but the last k tokens into the cache; those k, whose logits are read, after them
        from_cache = _cache_kwarg(model)
        for start in range(0, fed.shape[1] - k, chunk):
            out = model(
                fed[:, start : min(start + chunk, fed.shape[1] - k)], use_cache=True, logits_to_keep=1, **cached
            )
            cached = {from_cache: getattr(out, from_cache)}
        fed = fed[:, -k:]
    logits = model(fed, use_cache=chunk is not None, logits_to_keep=k, **cached).logits.float()  # (B, k, V)
    right = logits.gather(-1, answers[..., None])[..., 0]
    best_other = logits.scatter(-1, answers[..., None], float("-inf")).amax(-1)
    return (right - best_other).amin(-1)
