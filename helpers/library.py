"""The library's side of every positional step, in the course's terms.

The references in helpers.reference define what "right" means in the course;
this module lets that notion be checked against HF transformers itself. It
builds tiny random-weight models from configs (no download: seconds, offline,
seeded, eval mode, float32, one per process) and calls the library's OWN
functions for each positional step:

    Llama      model.model.rotary_emb (cos, sin), rotate_half, apply_rotary_pos_emb   half-split RoPE, GQA
    GPT-NeoX   model.gpt_neox.rotary_emb, apply_rotary_pos_emb                        half-split, partial (rotary_pct)
    GPT-J      create_sinusoidal_positions, rotate_every_two, apply_rotary_pos_emb    interleaved, partial (rotary_dim)
    BLOOM      build_alibi_tensor, and the first layer's attention probabilities      ALiBi
    GPT-2      wte + wpe before the first block, lm_head tied to wte                  learned positions, tying
    BERT       MiniLM's real embedding block (helpers.models)                         learned positions, segments
    Llama      modeling_rope_utils.ROPE_INIT_FUNCTIONS, its rope_parameters            RoPE scaling for long context (chapter 07)

The single steps only the tests compare with (cos and sin, rotate_half, GPT-J's table, GPT-2's block
input) are in tests/library_support.py. The *_logits functions run a whole tiny model with one positional step swapped
for the caller's (a student's function, or the course's reference): "your code,
dropped into the library's own model, gives the library's own logits".

transformers is imported inside the functions, never by `import helpers`.
Anything this transformers version lacks (a module, a function, an attribute
the layout moved) raises LibraryUnavailable with one line saying what is
missing, so a caller can report "skipped" instead of crashing.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
import threading
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # transformers is imported inside the functions, never by `import helpers`
    from transformers import BertModel

SEED = 0  # every tiny model is built from this seed: the same weights in every process
# Random weights at the configs' default std 0.02 make a tiny model all but blind to position: dropping
# RoPE moved the logits by 5e-3 and changed no prediction. At 0.2 a wrong positional step flips a clear
# share of the predictions, so a notebook's control shows a bug, not noise.
INITIALIZER_RANGE = 0.2
VOCAB = 96  # tiny vocabularies and tables: the models build in well under a second
MAX_POSITIONS = 64
_TINY_SPECIAL_TOKENS = {
    "bos_token_id": VOCAB - 1,
    "eos_token_id": VOCAB - 1,
}  # GPT-2's and GPT-J's default 50256 is past a tiny vocabulary


class LibraryUnavailable(RuntimeError):
    """This transformers (or none at all) lacks something a cross-check needs."""


# ---------------------------------------------------------------------------
# Finding things in transformers, or saying what is missing
# ---------------------------------------------------------------------------


def transformers_version() -> str:
    try:
        import transformers
    except ImportError as error:
        raise LibraryUnavailable(f"transformers is not installed ({error})") from error
    return transformers.__version__


def library_attr(module: str, name: str) -> Any:
    """`name` from `transformers.<module>`, e.g. library_attr("models.llama.modeling_llama", "rotate_half")."""
    version = transformers_version()
    try:
        found = importlib.import_module(f"transformers.{module}")
    except ImportError as error:
        raise LibraryUnavailable(f"transformers {version} has no module transformers.{module} ({error})") from error
    if not hasattr(found, name):
        raise LibraryUnavailable(f"transformers {version} has no transformers.{module}.{name}")
    return getattr(found, name)


def _path(obj: Any, dotted: str):
    """obj.a.b.c, or LibraryUnavailable naming the first missing step (the model layout moved)."""
    for step in dotted.split("."):
        if step.isdigit():
            obj = obj[int(step)]
        elif hasattr(obj, step):
            obj = getattr(obj, step)
        else:
            raise LibraryUnavailable(
                f"transformers {transformers_version()}: {type(obj).__name__} has no attribute {step!r} (looking for {dotted})"
            )
    return obj


def _build(module: str, model_class: str, config_class: str, **config_kwargs: Any) -> torch.nn.Module:
    """A random-weight model from a config: seeded, float32, eval mode, CPU."""
    config = library_attr(module, config_class)(**config_kwargs)
    config._attn_implementation = (
        "eager"  # plain softmax attention: what the course writes, and it returns probabilities
    )
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(SEED)
        model = library_attr(module, model_class)(config)
    return model.float().eval()


def rope_base(config: Any) -> float:
    """RoPE's base θ: config.rope_parameters["rope_theta"] in transformers 5, config.rope_theta in 4."""
    parameters = getattr(config, "rope_parameters", None)
    if isinstance(parameters, dict) and "rope_theta" in parameters:
        return float(parameters["rope_theta"])
    if getattr(config, "rope_theta", None) is not None:
        return float(config.rope_theta)
    raise LibraryUnavailable(f"transformers {transformers_version()}: {type(config).__name__} states no rope_theta")


def left_padding(T: int, pads: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """attention_mask (B, T) with pads[b] pad tokens on the left of row b, and the
    position_ids generate() derives from it: 0, 1, ... from the first real token (the
    pads get 1, a dummy: attention masks them out anyway)."""
    mask = torch.ones(len(pads), T, dtype=torch.long)
    for b, p in enumerate(pads):
        mask[b, :p] = 0
    return mask, (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


_SWAP_LOCK = threading.RLock()  # one swapped module function at a time, in this process


@contextlib.contextmanager
def swapped(module: str, name: str, replacement: Callable) -> Iterator[None]:
    """transformers.<module>.<name> replaced for the duration: the attention layers look
    the function up in their module when they run, so they call the replacement."""
    found = importlib.import_module(f"transformers.{module}")
    library_attr(module, name)  # LibraryUnavailable, said in one line, if the layout moved
    with _SWAP_LOCK:
        original = getattr(found, name)
        setattr(found, name, replacement)
        try:
            yield
        finally:
            setattr(found, name, original)


# ---------------------------------------------------------------------------
# The tiny models, one per process
# ---------------------------------------------------------------------------


# Llama's and GPT-NeoX's configs name their sizes alike: 4 heads of 16 dims, 2 layers
_LLAMA_LIKE_SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=MAX_POSITIONS,
)


@cache
def tiny_llama() -> torch.nn.Module:
    """LlamaForCausalLM, 4 query heads sharing 2 key/value heads (GQA), head_dim 16."""
    return _build(
        "models.llama.modeling_llama",
        "LlamaForCausalLM",
        "LlamaConfig",
        num_key_value_heads=2,
        initializer_range=INITIALIZER_RANGE,
        **_LLAMA_LIKE_SIZES,
    )


@cache
def tiny_gptj() -> torch.nn.Module:
    """GPTJForCausalLM, 4 heads of 16 dims, the first rotary_dim = 8 of them rotated (interleaved pairs)."""
    return _build(
        "models.gptj.modeling_gptj",
        "GPTJForCausalLM",
        "GPTJConfig",
        vocab_size=VOCAB,
        n_embd=64,
        n_head=4,
        n_layer=2,
        rotary_dim=8,
        n_positions=MAX_POSITIONS,
        initializer_range=INITIALIZER_RANGE,
        **_TINY_SPECIAL_TOKENS,
    )


@cache
def tiny_neox() -> torch.nn.Module:
    """GPTNeoXForCausalLM, 4 heads of 16 dims, rotary_pct 0.25: the first 4 dims rotated (half-split)."""
    return _build(
        "models.gpt_neox.modeling_gpt_neox",
        "GPTNeoXForCausalLM",
        "GPTNeoXConfig",
        rotary_pct=0.25,
        initializer_range=INITIALIZER_RANGE,
        **_LLAMA_LIKE_SIZES,
    )


@cache
def tiny_bloom() -> torch.nn.Module:
    """BloomForCausalLM, 4 heads of 16 dims, ALiBi (no positional vector at all)."""
    return _build(
        "models.bloom.modeling_bloom",
        "BloomForCausalLM",
        "BloomConfig",
        vocab_size=VOCAB,
        hidden_size=64,
        n_head=4,
        n_layer=2,
    )


@cache
def tiny_gpt2() -> torch.nn.Module:
    """GPT2LMHeadModel, learned positions (wpe) and an lm_head tied to the token table (wte)."""
    return _build(
        "models.gpt2.modeling_gpt2",
        "GPT2LMHeadModel",
        "GPT2Config",
        vocab_size=VOCAB,
        n_embd=64,
        n_head=4,
        n_layer=2,
        n_positions=MAX_POSITIONS,
        initializer_range=INITIALIZER_RANGE,
        **_TINY_SPECIAL_TOKENS,
    )


def minilm() -> BertModel:
    """The real pretrained MiniLM (a BERT) of helpers.models, or LibraryUnavailable."""
    transformers_version()
    from helpers import models

    try:
        return models.bert()
    except (ImportError, OSError) as error:
        raise LibraryUnavailable(f"MiniLM cannot be loaded offline ({type(error).__name__}: {error})") from error


# ---------------------------------------------------------------------------
# Llama and GPT-NeoX: half-split RoPE
# ---------------------------------------------------------------------------


def llama_head_dim(model: torch.nn.Module) -> int:
    config = model.config
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def neox_rotary_ndims(model: torch.nn.Module) -> int:
    return int(_path(model, "gpt_neox.layers.0.attention.rotary_ndims"))


RopeStep = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _rope_model_logits(
    model: torch.nn.Module,
    module: str,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    rope: RopeStep | None,
) -> torch.Tensor:
    """logits (B, T, V). With rope, every layer's rotary step is rope(q, k, position_ids)
    instead of the library's apply_rotary_pos_emb(q, k, cos, sin): the library's cos and
    sin are ignored, the positions are what the caller's code gets."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if position_ids is None:
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    step = (
        contextlib.nullcontext()
        if rope is None
        else swapped(module, "apply_rotary_pos_emb", lambda q, k, cos, sin, *args, **kwargs: rope(q, k, position_ids))
    )
    with torch.no_grad(), step:
        return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits


def llama_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    rope: RopeStep | None = None,
) -> torch.Tensor:
    """A Llama's logits; rope(q (B, Hq, T, Dh), k (B, Hk, T, Dh), position_ids (B, T)) -> (q, k) replaces its rotary step."""
    return _rope_model_logits(model, "models.llama.modeling_llama", input_ids, attention_mask, position_ids, rope)


def neox_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    rope: RopeStep | None = None,
) -> torch.Tensor:
    """A GPT-NeoX's logits; rope gets whole heads (B, H, T, Dh) and must turn only the first rotary_ndims dims."""
    return _rope_model_logits(model, "models.gpt_neox.modeling_gpt_neox", input_ids, attention_mask, position_ids, rope)


def meta_layout_llama(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of a Llama with every q_proj and k_proj in Meta's interleaved row order
    (what Meta's checkpoints hold): run with interleaved RoPE, it gives the original's logits."""
    meta = copy.deepcopy(model)
    config = meta.config
    for layer in range(config.num_hidden_layers):
        attention = _path(meta, f"model.layers.{layer}.self_attn")
        for projection, heads in (("q_proj", config.num_attention_heads), ("k_proj", config.num_key_value_heads)):
            weight = _path(attention, f"{projection}.weight")
            with torch.no_grad():
                weight.copy_(interleave_projection_rows(weight, heads))
    return meta


# ---------------------------------------------------------------------------
# GPT-J: interleaved RoPE on the first rotary_dim dims
# ---------------------------------------------------------------------------


def gptj_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    rope: Callable | None = None,
) -> torch.Tensor:
    """A GPT-J's logits; rope(x (1, H, T, rotary_dim), positions (T,)) -> x replaces its
    rotary step, one sequence at a time (each row of a left-padded batch has its own
    positions). GPT-J cuts the first rotary_dim dims of q and k itself and passes the rest."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if position_ids is None:
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

    def rotary_step(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
        assert rope is not None  # swapped in only when the caller gave one
        x = x.transpose(1, 2)  # GPT-J's (B, T, H, r) to the course's (B, H, T, r)
        rows = [rope(x[b : b + 1], position_ids[b]) for b in range(len(x))]
        return torch.cat(rows).transpose(1, 2)

    step = (
        contextlib.nullcontext()
        if rope is None
        else swapped("models.gptj.modeling_gptj", "apply_rotary_pos_emb", rotary_step)
    )
    with torch.no_grad(), step:
        return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits


# ---------------------------------------------------------------------------
# Meta <-> HF: the two RoPE layouts are one row permutation apart
# ---------------------------------------------------------------------------


def half_split_to_interleaved_rows(head_dim: int) -> torch.Tensor:
    """The order [0, d/2, 1, d/2 + 1, ..., d/2 - 1, d - 1] (d = head_dim).

    HF's half-split pair i is (x[i], x[i + d/2]); Meta's interleaved pair i is
    (x[2i], x[2i + 1]). Taking the half-split coordinates in this order puts
    pair i in columns 2i, 2i + 1: x_interleaved = x_half_split[..., order].
    For weights, W_meta = W_hf[order] within each head (the inverse of the
    `permute` in transformers' convert_llama_weights_to_hf.py)."""
    half = head_dim // 2
    return torch.stack([torch.arange(half), torch.arange(half) + half], dim=-1).flatten()  # (d,)


def interleave_projection_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """A q_proj / k_proj weight (n_heads·Dh, d_model) from HF's half-split row order to Meta's interleaved one."""
    head_dim = weight.shape[0] // n_heads
    order = half_split_to_interleaved_rows(head_dim)
    rows = (torch.arange(n_heads)[:, None] * head_dim + order).flatten()  # the same order inside every head
    return weight[rows]


# ---------------------------------------------------------------------------
# BLOOM: ALiBi
# ---------------------------------------------------------------------------


def bloom_alibi(attention_mask: torch.Tensor, num_heads: int) -> torch.Tensor:
    """build_alibi_tensor, as (B, H, 1, T): m_h · j for key j (j counted from the first
    unpadded token), the same for every query row. No causal mask in it."""
    build = library_attr("models.bloom.modeling_bloom", "build_alibi_tensor")
    B, T = attention_mask.shape
    return build(attention_mask, num_heads, torch.float32).view(B, num_heads, 1, T)


def bloom_slopes(num_heads: int) -> torch.Tensor:
    """BLOOM's head slopes, read off build_alibi_tensor: the bias of key 1 is m_h · 1."""
    return bloom_alibi(torch.ones(1, 2, dtype=torch.long), num_heads)[0, :, 0, 1]


def bloom_first_layer_attention(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first layer's attention probabilities (B, H, T, T), as BLOOM computes them
    (its alibi and its causal mask, eager softmax), with that layer's q and k
    (B, H, T, Dh), split from the fused projection by the attention's own _reshape."""
    attention = _path(model, "transformer.h.0.self_attention")
    split = _path(attention, "_reshape")
    captured: dict[str, torch.Tensor] = {}
    hook = _path(attention, "query_key_value").register_forward_hook(
        lambda module, inputs, output: captured.update(fused=output)
    )
    try:
        with torch.no_grad():
            out = model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=True)
    finally:
        hook.remove()
    if not getattr(out, "attentions", None):
        raise LibraryUnavailable(
            f"transformers {transformers_version()}: BLOOM returned no attentions with output_attentions=True"
        )
    q, k, _ = split(captured["fused"])
    return out.attentions[0], q, k


def bloom_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    slopes: Callable | None = None,
    bias: Callable | None = None,
) -> torch.Tensor:
    """A BLOOM's logits, with its ALiBi from the caller's code:
    slopes(n_heads) -> (n_heads,): BLOOM's own row-constant form m_h · j, j counted from each row's first real token;
    bias(n_heads, T) -> (n_heads, T, T): the textbook -m_h · (i - j), -inf above the diagonal, added whole.
    BLOOM's causal and padding mask is added on top in both cases. Neither: the library's own."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    transformer = _path(model, "transformer")
    _path(transformer, "build_alibi_tensor")  # the hook point: LibraryUnavailable if this version has none

    def build(mask: torch.Tensor, num_heads: int, dtype: torch.dtype) -> torch.Tensor:
        B, T = mask.shape
        if bias is not None:  # (H, T, T) for every sequence: -m·(i - j) needs no first-real-token offset
            return bias(num_heads, T).to(dtype).expand(B, num_heads, T, T).reshape(B * num_heads, T, T)
        assert slopes is not None  # build is swapped in only when the caller gave slopes or bias
        key_positions = ((mask.cumsum(-1) - 1) * mask)[:, None, :]  # (B, 1, T), as BLOOM counts them
        return (slopes(num_heads)[None, :, None] * key_positions).reshape(B * num_heads, 1, T).to(dtype)

    with torch.no_grad():
        if slopes is None and bias is None:
            return model(input_ids=input_ids, attention_mask=attention_mask).logits
        transformer.build_alibi_tensor = build  # an instance attribute: this model only, removed after
        try:
            return model(input_ids=input_ids, attention_mask=attention_mask).logits
        finally:
            del transformer.build_alibi_tensor


# ---------------------------------------------------------------------------
# GPT-2: learned positions and the tied head
# ---------------------------------------------------------------------------


def gpt2_tables(model: torch.nn.Module) -> tuple[torch.nn.Embedding, torch.nn.Embedding, torch.nn.Linear]:
    """GPT-2's token table wte (V, d), position table wpe (n_positions, d), and its lm_head."""
    return _path(model, "transformer.wte"), _path(model, "transformer.wpe"), _path(model, "lm_head")


def gpt2_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    positions: Callable | None = None,
    head: Callable | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """A GPT-2's logits, (B, T, V), with the caller's steps:
    positions(x (B, T, d)) -> x + P[:T], applied to wte(ids) in place of the library's wte + wpe;
    head(h (B, T, d)) -> logits, in place of lm_head.
    attention_mask and position_ids (B, T) go to the model as they are: GPT-2's default
    position_ids are 0..T-1 whatever the mask, so a left-padded row needs its own."""
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
    wte = _path(model, "transformer.wte")
    block = _path(model, "transformer.h.0")

    def own_positions(
        module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:  # the first block's input, rebuilt from the caller's step
        assert positions is not None  # the hook is registered only when the caller gave one
        x = positions(wte(input_ids))
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    hook = block.register_forward_pre_hook(own_positions, with_kwargs=True) if positions is not None else None
    try:
        with torch.no_grad():
            if head is None:
                return model(**inputs).logits
            return head(_path(model, "transformer")(**inputs).last_hidden_state)
    finally:
        if hook is not None:
            hook.remove()


def from_first_real_token(positions: Callable, attention_mask: torch.Tensor) -> Callable:
    """A `positions` step for gpt2_logits on a left-padded batch: each row's real tokens go through
    `positions` (x (1, T', d) -> x + P[:T']) on their own, so its rows 0, 1, ... meet the row's first
    real token, the next, ...; the pads before them pass unchanged (the mask hides them)."""
    starts = (attention_mask == 0).sum(-1).tolist()  # the pads before each row's first real token

    def step(x: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, T, d)
        return torch.stack([torch.cat((x[b, :s], positions(x[b : b + 1, s:])[0])) for b, s in enumerate(starts)])

    return step


# ---------------------------------------------------------------------------
# Chapter 08: a left-padded batch against each row alone
# ---------------------------------------------------------------------------


def left_pad(rows: list[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows of different lengths -> (input_ids (B, T), attention_mask (B, T) long), each row
    padded on the left with pad_id to the longest: every row's last real token in column T - 1."""
    T = max(len(row) for row in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, T - len(row) :], mask[b, T - len(row) :] = row, 1
    return ids, mask


def _rows_verdict(label: str, batch: torch.Tensor, alone: list[torch.Tensor], mask: torch.Tensor, equal: bool) -> bool:
    """One line: ✓ when "every row of the batch generated what it generates alone" is what `equal`
    expects; the rows that differ are named with their pads and how many of their tokens differ."""
    wrong = []
    for b, tokens in enumerate(alone):
        differ = sum(x != y for x, y in zip(batch[b].tolist(), tokens.tolist())) + abs(len(tokens) - batch.shape[1])
        if differ:
            wrong.append(f"row {b} ({int((mask[b] == 0).sum())} pads): {differ} of {batch.shape[1]} tokens differ")
    same = not wrong
    shown = "every row generates what it generates alone" if same else "; ".join(wrong)
    print(f"{'✓' if same == equal else '✗'} {label}: {shown}")
    return same


def _greedy(new_tokens: int) -> dict[str, Any]:
    """`generate`'s settings for a comparison: greedy (no sampling), pads as token 0."""
    return {"max_new_tokens": new_tokens, "do_sample": False, "pad_token_id": 0}


def _alone(model: torch.nn.Module, rows: list[torch.Tensor], new_tokens: int) -> list[torch.Tensor]:
    """Each row's greedy continuation with no batch and no pads: the reference a batch must equal."""
    alone = []
    with torch.no_grad():
        for row in rows:
            ones = torch.ones(1, len(row), dtype=torch.long)
            alone.append(model.generate(row[None], attention_mask=ones, **_greedy(new_tokens))[0, len(row) :])
    return alone


def padded_generate(
    label: str,
    model: torch.nn.Module,
    rows: list[torch.Tensor],
    position_ids_of: Callable,
    new_tokens: int = 8,
    *,
    equal: bool = True,
) -> bool:
    """`model.generate` (greedy) on the left-padded batch of `rows`, its position_ids from
    position_ids_of(attention_mask) (generate extends them by 1 a step), against each row alone.
    Prints one ✓/✗ line (see compare_logits for `equal`); returns whether every row equals itself alone.
    For a RoPE model a wrong function that shifts a whole row passes (RoPE sees only differences);
    for GPT-2's learned positions it does not."""
    ids, mask = left_pad(rows)
    with torch.no_grad():
        batch = model.generate(ids, attention_mask=mask, position_ids=position_ids_of(mask), **_greedy(new_tokens))
    batch = batch[:, ids.shape[1] :]  # the new tokens only
    return _rows_verdict(label, batch, _alone(model, rows, new_tokens), mask, equal)


def padded_decode(
    label: str,
    model: torch.nn.Module,
    rows: list[torch.Tensor],
    position_ids_of: Callable,
    decode_positions_of: Callable,
    new_tokens: int = 8,
    *,
    equal: bool = True,
) -> bool:
    """A hand-written greedy decode loop, as a server writes one, on the left-padded batch of `rows`:
    the prefill with position_ids_of(attention_mask) (B, T), then one token a row per step, at
    decode_positions_of(the attention mask so far) (B, 1), the mask growing by one real column.
    Against each row alone (`model.generate`); prints one ✓/✗ line, returns whether every row equals it."""
    require_cache_argument(model)
    ids, mask = left_pad(rows)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, position_ids=position_ids_of(mask), use_cache=True)
        tokens = [out.logits[:, -1:].argmax(-1)]  # (B, 1)
        for _ in range(new_tokens - 1):
            mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=torch.long)], 1)  # the token just chosen is real
            position_ids = decode_positions_of(mask[:, :-1])  # where the row's next token goes, from what came before
            out = model(tokens[-1], attention_mask=mask, cache=out.cache, position_ids=position_ids, use_cache=True)
            tokens.append(out.logits[:, -1:].argmax(-1))
    return _rows_verdict(label, torch.cat(tokens, 1), _alone(model, rows, new_tokens), mask, equal)


# ---------------------------------------------------------------------------
# For the notebooks: a cell that uses the library, and what it prints
# ---------------------------------------------------------------------------


def require_cache_argument(model: torch.nn.Module) -> None:
    """Chapter 08's decode loops hand a forward call's cache back as `cache=`, the name transformers uses
    from 5.23 on; before, it was `past_key_values` (which now warns). Where the model's forward has no
    `cache`, the cell is skipped with that said, not run with the cache silently dropped."""
    import inspect

    if "cache" not in inspect.signature(model.forward).parameters:
        raise LibraryUnavailable(
            f"transformers {transformers_version()} passes a model's cache as `past_key_values`; these cells use `cache`, its name from 5.23 on"
        )


@contextlib.contextmanager
def skip_if_unavailable() -> Iterator[None]:
    """`with library.skip_if_unavailable():` around a notebook cell's library part: where this
    transformers lacks something, the cell prints one line "skipped: ..." instead of a traceback."""
    try:
        yield
    except LibraryUnavailable as error:
        print(f"skipped: {error}")


def compare_logits(label: str, mine: torch.Tensor, theirs: torch.Tensor, *, equal: bool = True) -> bool:
    """Print one line: are `mine` and the library's `theirs` equal to float32 tolerance
    (torch.testing.assert_close's: the tiny models' logits are small, a loose tolerance
    would let a wrong step through)? ✓ when that is what `equal` expects: a cell shows a
    wrong step with equal=False. Two equal computations differ by float noise whose size
    depends on the CPU's vector instructions and thread count, so an equal pair prints the
    tolerance it met, never the noise: the notebooks' outputs must be the same on every
    machine. A real difference is far above the noise and is printed. Returns the verdict."""
    same = torch.allclose(mine, theirs, rtol=1.3e-6, atol=1e-5)
    if same:
        shown = "equal to float32 tolerance (every |difference| ≤ 1e-5 + 1.3e-6·|logit|)"
    else:
        shown = f"max |difference| {(mine - theirs).abs().max().item():.1e}, different"
    print(f"{'✓' if same == equal else '✗'} {label}: {shown}")
    return same


def prediction_change(label: str, mine: torch.Tensor, theirs: torch.Tensor) -> float:
    """Print how much `mine` (..., V) changes the model's predictions against `theirs`: the
    difference relative to the logits' size, ‖mine − theirs‖ / ‖theirs‖, and the share of
    positions whose top-1 token is the same. A max |difference| alone cannot tell a wrong
    positional step from float noise; a flipped prediction can. Rounded to whole percents,
    so the line is the same on every CPU. Returns the top-1 agreement."""
    relative = ((mine - theirs).norm() / theirs.norm()).item()
    same = mine.argmax(-1) == theirs.argmax(-1)
    agreement = same.float().mean().item()
    print(
        f"{label}: logits {relative:.0%} away (relative), top-1 agreement {agreement:.0%} ({int(same.sum())} of {same.numel()} predictions)"
    )
    return agreement


@cache
def gpt2_small_shapes() -> torch.nn.Module:
    """GPT-2 small at full size (GPT2Config()'s defaults: wte 50257 × 768, wpe 1024 × 768,
    12 blocks) on the meta device: every shape and the tying, in milliseconds, without the
    ~1 GB and ~2 s that its 124M random weights take on this machine."""
    with torch.device("meta"):
        return _build("models.gpt2.modeling_gpt2", "GPT2LMHeadModel", "GPT2Config")


# ---------------------------------------------------------------------------
# Long context: transformers' own RoPE scalings (chapter 07)
# ---------------------------------------------------------------------------

# The transformers versions the chapter 07 oracle was run on (pyproject.toml pins the same range);
# outside it a check still compares, and says in one line which version it compared against.
TESTED_TRANSFORMERS = ("5.23", "6")


def outside_tested_range() -> str | None:
    """None when the installed transformers is in TESTED_TRANSFORMERS, else one line naming it."""
    from packaging.version import Version

    version = transformers_version()
    low, high = TESTED_TRANSFORMERS
    if Version(low) <= Version(version) < Version(high):
        return None
    return f"transformers {version} is installed, outside the range {low} to <{high} the course was tested on"


def _rope_config(rope_parameters: dict, head_dim: int, max_position_embeddings: int, **sizes: Any):
    """A LlamaConfig whose RoPE is `rope_parameters` ({"rope_type": ..., "rope_theta": ..., "factor": ...})."""
    sizes = {
        "vocab_size": VOCAB,
        "hidden_size": 2 * head_dim,
        "intermediate_size": 4 * head_dim,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        **sizes,
    }
    config_class = library_attr("models.llama.configuration_llama", "LlamaConfig")
    return config_class(
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters=dict(rope_parameters),
        **sizes,
    )


def rope_parameters(
    rope_type: str, base: float, factor: float, original_max_len: int, **extra: Any
) -> tuple[dict, int]:
    """(rope_parameters, max_position_embeddings) as a config states a scaled RoPE. For "linear"
    and "dynamic" the trained length is max_position_embeddings itself (the library reads it
    there); "yarn" and "llama3" name it original_max_position_embeddings, beside a
    max_position_embeddings of factor × that."""
    parameters = {"rope_type": rope_type, "rope_theta": float(base), "factor": float(factor), **extra}
    if rope_type in ("linear", "dynamic"):
        return parameters, original_max_len
    parameters["original_max_position_embeddings"] = original_max_len
    return parameters, math.ceil(original_max_len * factor)


def rope_init(
    rope_type: str, d: int, base: float, factor: float, original_max_len: int, seq_len: int | None = None, **extra: Any
) -> tuple[torch.Tensor, float]:
    """transformers' own ROPE_INIT_FUNCTIONS[rope_type] for a head of d dims: (inv_freq (d/2,), attention_scale).
    extra: low_freq_factor and high_freq_factor ("llama3"), beta_fast and beta_slow ("yarn")."""
    functions = library_attr("modeling_rope_utils", "ROPE_INIT_FUNCTIONS")
    if rope_type not in functions:
        raise LibraryUnavailable(f"transformers {transformers_version()} has no RoPE type {rope_type!r}")
    parameters, max_positions = rope_parameters(rope_type, base, factor, original_max_len, **extra)
    inv_freq, scale = functions[rope_type](_rope_config(parameters, d, max_positions), "cpu", seq_len=seq_len)
    return inv_freq, float(scale)


# the arguments of each rope type's course function, read from a config's rope_parameters
_ROPE_ARGUMENTS = {
    "linear": lambda p, config, seq_len: (p["factor"],),
    # dynamic: built at the trained length (seq_len None); rerun with T = max(position_ids) + 1, a tensor, once a sequence grows past it
    "dynamic": lambda p, config, seq_len: (
        p["factor"],
        config.max_position_embeddings if seq_len is None else int(seq_len),
        config.max_position_embeddings,
    ),
    "yarn": lambda p, config, seq_len: (
        p["factor"],
        p["original_max_position_embeddings"],
        float(p.get("beta_fast") or 32),
        float(p.get("beta_slow") or 1),
    ),
    "llama3": lambda p, config, seq_len: (
        p["factor"],
        p["low_freq_factor"],
        p["high_freq_factor"],
        p["original_max_position_embeddings"],
    ),
}


@contextlib.contextmanager
def rope_type_from(rope_type: str, fn: Callable[..., tuple[torch.Tensor, float]]) -> Iterator[None]:
    """While inside, transformers computes RoPE type `rope_type` with `fn`, a course-signature
    function fn(d, base, factor, ...): every model built, and every forward of a "dynamic" one
    (which recomputes its frequencies when a sequence grows past the trained length), calls it."""
    functions = library_attr("modeling_rope_utils", "ROPE_INIT_FUNCTIONS")
    if rope_type not in functions or rope_type not in _ROPE_ARGUMENTS:
        raise LibraryUnavailable(f"transformers {transformers_version()} has no RoPE type {rope_type!r}")

    def init(
        config: Any,
        device: torch.device | str | None = None,
        seq_len: int | None = None,
        layer_type: str | None = None,
        **kwargs: Any,
    ):
        p = config.rope_parameters
        d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        inv_freq, scale = fn(d, p["rope_theta"], *_ROPE_ARGUMENTS[rope_type](p, config, seq_len))
        return inv_freq.to(device=device), scale

    with _SWAP_LOCK:
        original = functions[rope_type]
        functions[rope_type] = init  # the dict the models import: the entry, not the name, is swapped
        try:
            yield
        finally:
            functions[rope_type] = original


def tiny_scaled_llama(
    rope_parameters: dict, max_position_embeddings: int, initializer_range: float = 0.2
) -> torch.nn.Module:
    """A LlamaForCausalLM (4 heads of 16 dims, 2 layers) with this RoPE scaling, seeded: the same
    weights whatever the scaling. initializer_range 0.2 (the default is 0.02) makes q·k large
    enough that the angles, so the positions, change the predictions visibly."""
    sizes = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=initializer_range,
    )
    config = _rope_config(rope_parameters, 16, max_position_embeddings, **sizes)
    config._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = library_attr("models.llama.modeling_llama", "LlamaForCausalLM")(config)
    return model.float().eval()
