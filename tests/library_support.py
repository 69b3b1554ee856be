"""The transformers functions only the tests call (tests/test_library.py): each shows, on the library's
own tiny models, that a piece of helpers.library or of the course's reference is what the library does.
The course's notebooks and checks use helpers.library; these stay beside the tests that need them."""

from __future__ import annotations

import torch

from helpers.library import _path, library_attr


def llama_cos_sin(model, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The library's cos and sin, (B, T, head_dim) each, for position_ids (B, T)."""
    rotary = _path(model, "model.rotary_emb")
    with torch.no_grad():
        return rotary(torch.zeros(1, dtype=torch.float32), position_ids)  # x only tells it the dtype and device


def llama_rotate_half(x: torch.Tensor) -> torch.Tensor:
    return library_attr("models.llama.modeling_llama", "rotate_half")(x)


def llama_apply_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama's apply_rotary_pos_emb: q (B, Hq, T, Dh), k (B, Hk, T, Dh), cos/sin (B, T, Dh)."""
    return library_attr("models.llama.modeling_llama", "apply_rotary_pos_emb")(q, k, cos, sin)


def llama_projections(model, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's q_proj and k_proj weights, (Hq·Dh, d) and (Hk·Dh, d), rows in HF's half-split order."""
    attention = _path(model, f"model.layers.{layer}.self_attn")
    return _path(attention, "q_proj.weight"), _path(attention, "k_proj.weight")


def neox_cos_sin(model, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-NeoX's cos and sin, (B, T, rotary_ndims) each: only the rotated dims."""
    rotary = _path(model, "gpt_neox.rotary_emb")
    with torch.no_grad():
        return rotary(torch.zeros(1, dtype=torch.float32), position_ids)


def neox_apply_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """NeoX's apply_rotary_pos_emb on the whole q (B, H, T, Dh) and k: the current one
    rotates the first cos.shape[-1] dims itself and passes the rest through."""
    apply = library_attr("models.gpt_neox.modeling_gpt_neox", "apply_rotary_pos_emb")
    try:
        return apply(q, k, cos, sin)
    except RuntimeError:  # an older one, whose caller (GPTNeoXAttention) cut q and k first
        r = cos.shape[-1]
        q_rot, k_rot = apply(q[..., :r], k[..., :r], cos, sin)
        return torch.cat([q_rot, q[..., r:]], dim=-1), torch.cat([k_rot, k[..., r:]], dim=-1)


def gptj_sinusoidal_positions(num_pos: int, dim: int) -> torch.Tensor:
    """GPT-J's table, (num_pos, dim): the dim/2 sines, then the dim/2 cosines, of m·θ_i."""
    return library_attr("models.gptj.modeling_gptj", "create_sinusoidal_positions")(num_pos, dim)


def gptj_rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...); x must be 4-D."""
    return library_attr("models.gptj.modeling_gptj", "rotate_every_two")(x)


def gptj_rotary(model, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """GPT-J's rotary step on q or k, as GPTJAttention.forward does it. x is in GPT-J's
    layout (B, T, H, Dh), heads AFTER positions; position_ids (B, T). The first
    rotary_dim dims are turned by the library's apply_rotary_pos_emb, the rest pass."""
    apply = library_attr("models.gptj.modeling_gptj", "apply_rotary_pos_emb")
    attention = _path(model, "transformer.h.0.attn")
    rotary_dim = _path(attention, "rotary_dim") or x.shape[-1]
    table = _path(attention, "embed_positions").to(x.device)  # (max_pos, rotary_dim): sin | cos
    sincos = table[position_ids]  # (B, T, rotary_dim): the attention's gather, by indexing
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)  # (B, T, rotary_dim/2) each
    rotated = apply(x[..., :rotary_dim], sin, cos)
    return torch.cat([rotated, x[..., rotary_dim:]], dim=-1)


def gpt2_block_input(model, input_ids: torch.Tensor) -> torch.Tensor:
    """What the first block receives: drop(wte(ids) + wpe(positions)), (B, T, d). In eval mode
    the dropout is the identity. Read by a pre-hook, the same in transformers 4 and 5."""
    block = _path(model, "transformer.h.0")
    captured = {}
    hook = block.register_forward_pre_hook(
        lambda module, args, kwargs: captured.update(x=args[0] if args else kwargs["hidden_states"]), with_kwargs=True
    )
    try:
        with torch.no_grad():
            model(input_ids=input_ids)
    finally:
        hook.remove()
    return captured["x"]


def gpt2_final_hidden_and_logits(model, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The final hidden state (after ln_f), (B, T, d), and lm_head's logits, (B, T, V)."""
    with torch.no_grad():
        hidden = _path(model, "transformer")(input_ids=input_ids).last_hidden_state
        logits = model(input_ids=input_ids).logits
    return hidden, logits
