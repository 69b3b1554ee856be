"""Chapter 08: the references against transformers' own conventions, the messages on real
wrong code, and the grader's handling of a stateful module and of tuple results.

A KV cache's references must rotate as transformers' Llama does at its `cache_position`s; the
position ids of a padded batch must equal what `generate` makes of the mask on the real tokens;
a check's words must be true of the student's own code (an incremental run is compared with the
student's own one call, not with the reference); and the grader, whose kernel holds the cache,
must reach the verdict check() reaches for every right and wrong module of the catalogue.
"""

from __future__ import annotations

import pytest
import torch

from helpers import check, reference
from helpers.grading import wire
from tests.submissions import ch08
from tests.test_remote import graded


def test_the_kv_cache_rotates_as_transformers_llama_at_its_cache_positions():
    """A prompt then steps through the reference: each call's q_rot and k_all as apply_rotary_pos_emb makes them
    at the absolute positions (GQA: 4 query heads, 2 key heads)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=500000.0)
    rotary = LlamaRotaryEmbedding(config)
    cache = reference.RopeKVCache(8, max_len=32, base=500000.0)
    generator = torch.Generator().manual_seed(8)
    keys, offset = [], 0
    for T in (6, 1, 1, 3):
        q, k, v = (torch.randn(2, H, T, 8, generator=generator) for H in (4, 2, 2))
        q_rot, k_all, v_all = cache(q, k, v)
        positions = torch.arange(offset, offset + T)[None]
        cos, sin = rotary(q, positions)
        their_q, their_k = apply_rotary_pos_emb(q, k, cos, sin)
        keys.append(their_k)
        torch.testing.assert_close(q_rot, their_q)
        torch.testing.assert_close(k_all, torch.cat(keys, dim=-2))
        offset += T
        assert cache.offset == offset and v_all.shape[-2] == offset


def test_position_ids_equal_generates_on_every_real_token():
    """transformers' generate: `attention_mask.long().cumsum(-1) - 1`, pads filled with 1; equal wherever the mask is 1."""
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1], [1, 1, 1, 0, 0]])
    generate = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
    ours = reference.position_ids_from_mask(mask)
    assert torch.equal(ours[mask.bool()], generate[mask.bool()])
    assert ours.dtype == torch.long and bool(((ours >= 0) & (ours < 5)).all())


def test_packing_references_agree_with_documents_run_alone():
    seq_lens = torch.tensor([3, 1, 4])
    positions, mask = reference.packed_position_ids(seq_lens), reference.document_causal_mask(seq_lens)
    assert positions.tolist() == [0, 1, 2, 0, 0, 1, 2, 3]
    starts = [0, 3, 4]
    for start, n in zip(starts, seq_lens.tolist()):
        block = mask[start : start + n, start : start + n]
        assert torch.equal(block, torch.ones(n, n, dtype=torch.bool).tril())
        assert int(mask[start : start + n].sum()) == int(block.sum())  # nothing outside its own document


@pytest.mark.parametrize(
    "case, kept",
    [
        ((20, 4, 8), [0, 1, 2, 3, *range(12, 20)]),
        ((7, 4, 8), list(range(7))),
        ((9, 0, 4), [5, 6, 7, 8]),
        ((9, 3, 0), [0, 1, 2]),
    ],
)
def test_streaming_keeps_the_sinks_and_the_window(case, kept):
    got, positions = reference.streaming_positions(*case)
    assert got.tolist() == kept and positions.tolist() == list(range(len(kept)))


def test_an_incremental_mistake_is_compared_with_the_students_own_single_call():
    """A wrong cache whose counting matches no catalogue mistake: the message says what one call of the student's own
    module gives, not 'the reference' (its rotation passes the one-call probe)."""

    class ThreeAhead(ch08.CacheCat):
        def positions(self, T, device):
            return (
                torch.arange(self.offset + 3, self.offset + 3 + T, device=device)
                if T == 1
                else super().positions(T, device)
            )

    result = check("RopeKVCache", ThreeAhead)
    assert result.diagnosis == "wrong_values", str(result)
    assert "one call on all 10 tokens gives" in result.message and "reference" not in result.message, str(result)


def test_an_offset_by_another_name_is_asked_for_by_its_name():
    class Position(ch08.CacheCat):
        def __init__(self, head_dim, max_len=4096, base=10000.0):
            super().__init__(head_dim, max_len, base)
            self.pos = self.__dict__.pop("offset")

        def forward(self, q, k, v):
            self.offset = self.pos
            out = super().forward(q, k, v)
            self.pos = self.__dict__.pop("offset")
            return out

    result = check("RopeKVCache", Position)
    assert result.diagnosis == "wrong_type" and "attribute `offset`" in result.message, str(result)


def test_a_pad_out_of_range_is_named_with_its_place_and_value():
    result = check("position_ids_from_mask", ch08.ids_minus_one_left)
    assert result.diagnosis == "pad_position_out_of_range"
    assert "row 0, column 0 gets position -1" in result.message, str(result)


@pytest.mark.parametrize("cache", ch08.RIGHT["RopeKVCache"], ids=lambda cls: cls.__name__)
def test_every_right_cache_passes_in_the_grader_on_a_secret_seed(cache):
    """Concatenated, preallocated (its k_all a slice of a buffer of max_len) and re-rotated-raw caches: the kernel
    keeps the state, the grader reads every call's result and `offset`."""
    assert graded(cache, "RopeKVCache", salt=20261126).passed


def test_a_slice_of_a_large_buffer_travels_contiguous_and_a_small_view_keeps_its_strides():
    tensors: dict[str, torch.Tensor] = {}
    buffer = torch.randn(2, 2, 4096, 8)
    sliced = wire.tensor_entry(buffer[:, :, :10], "k", tensors, token="k")
    transposed = wire.tensor_entry(buffer[0, 0, :6].T, "t", tensors, token="t")
    assert "stride" not in sliced and transposed["stride"] == [1, 8]
    tree, got = wire.unpack(wire.pack({"k": sliced}, tensors))
    back = wire.Decoder(got, {"cpu"}, [wire.Budget(wire.REPLY_BUDGET)], {}).tensor(tree["k"])
    assert torch.equal(back, buffer[:, :, :10])


def test_decode_positions_continue_each_row_as_generate_does_and_as_the_row_alone():
    """generate grows the mask by one real token per step and reads cumsum - 1 at the new column; a row of n real
    tokens run alone has positions 0 .. n-1, so its next ones are n, n + 1, ...: the same, on every padding side."""
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    grown, generate = mask, []
    for _ in range(3):
        grown = torch.cat([grown, torch.ones(4, 1, dtype=torch.long)], dim=-1)
        generate.append(grown.cumsum(-1)[:, -1:] - 1)
    ours = reference.decode_position_ids(mask, 3)
    assert torch.equal(ours, torch.cat(generate, dim=-1)) and ours.dtype == torch.long
    for row, n in zip(ours, mask.sum(-1).tolist()):
        assert row.tolist() == [n, n + 1, n + 2]  # alone: positions 0 .. n-1 used, the next free
    assert reference.decode_position_ids(mask).shape == (4, 1)


@pytest.mark.parametrize("fn", [ch08.decode_side_from_last_column, ch08.ids_side_from_first_column])
def test_a_padding_side_chosen_per_batch_is_right_on_one_sided_batches_and_named_on_a_mixed_one(fn):
    """The class only a batch mixing the sides shows (issue 41): right on a left-padded and on a right-padded batch
    alone, named padding_side_per_batch with nothing else when checked."""
    left, right = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]]), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    exercise = "decode_position_ids" if fn.__name__.startswith("decode") else "position_ids_from_mask"
    right_answer = getattr(reference, exercise)
    for mask in (left, right):
        real = mask.bool() if exercise == "position_ids_from_mask" else torch.ones(2, 1, dtype=torch.bool)
        assert torch.equal(fn(mask)[real], right_answer(mask)[real])
    result = check(exercise, fn)
    assert (result.diagnosis, result.also) == ("padding_side_per_batch", []), str(result)


def test_a_streaming_window_of_one_keeps_the_newest_token_only():
    kept, positions = reference.streaming_positions(10, 2, 1)
    assert kept.tolist() == [0, 1, 9] and positions.tolist() == [0, 1, 2]
    assert ch08.stream_newest_plus_recent(10, 2, 1)[0].tolist() == list(range(10))  # [-0:]: the wrong one keeps all


def test_a_default_copied_from_another_codebase_is_named_with_the_argument_it_changes():
    max_len, base = (check("RopeKVCache", cls) for cls in (ch08.CacheMaxLen2048, ch08.CacheLlama3Base))
    assert max_len.diagnosis == base.diagnosis == "default_changed"
    assert "default max_len is smaller" in max_len.message and "default base is another" in base.message


def test_a_cache_cut_off_from_autograd_is_named_and_a_right_one_matches_the_rotations_transpose():
    result = check("RopeKVCache", ch08.CacheNoGrad)
    assert result.diagnosis == "gradient_cut" and "`q_rot` and `k_all` do not require grad" in result.message
    q = torch.randn(1, 2, 3, 8, requires_grad=True)
    q_rot = ch08.CacheCat(8, 16)(q, q.detach(), q.detach())[0]
    (q_rot * q_rot).sum().backward()  # |R q|² = |q|²: the gradient is 2q, through the rotation and back
    torch.testing.assert_close(q.grad, 2 * q.detach())


@pytest.mark.parametrize("fn", [ch08.decode_view_sum, ch08.ids_flat_view])
def test_a_view_refused_by_a_non_contiguous_mask_is_named_as_such(fn):
    exercise = "decode_position_ids" if fn.__name__.startswith("decode") else "position_ids_from_mask"
    result = check(exercise, fn)
    assert result.diagnosis == "contiguity_assumed" and "a view, not a contiguous tensor" in result.message, str(result)
    assert result.passed is False and fn(torch.ones(2, 3, dtype=torch.long)).shape[0] == 2  # contiguous: it runs


def test_a_cache_under_inference_mode_is_cut_off_from_autograd_in_a_notebook():
    result = check("RopeKVCache", ch08.CacheInferenceMode)
    assert result.diagnosis == "gradient_cut", str(result)


def test_a_cache_under_inference_mode_is_cut_off_from_autograd_through_the_grader_too():
    assert graded(ch08.CacheInferenceMode, "RopeKVCache").diagnosis == "gradient_cut"
