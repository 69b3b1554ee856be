"""The course's references, cross-checked against HF transformers.

Every reference in helpers.reference that has a counterpart in the library is
run side by side with it, on real numbers: MiniLM's real BERT embeddings,
and tiny random-weight Llama, GPT-J, GPT-NeoX, BLOOM and GPT-2 models built
offline from configs (helpers.library). So the course's notion of "right" is
anchored outside the course.

Where the library computes the same thing in another form, the test says which
equivalence it checks (BLOOM's row-constant ALiBi, Meta's vs HF's RoPE layout).
A transformers whose layout differs raises LibraryUnavailable, and the test is
skipped with that reason instead of failing.

Tolerances: torch.testing.assert_close's float32 defaults (rtol 1.3e-6,
atol 1e-5) throughout. The references build RoPE angles in float64, the
library in float32: at the positions used here (< 64) they agree to ~1e-6.
"""

from __future__ import annotations

import functools
import math
import sys

import pytest
import torch
from torch.testing import assert_close

from helpers import library, reference
from helpers.library import LibraryUnavailable
from tests import library_support


def needs_library(test):
    """Skip, saying what is missing, when this transformers lacks a function or layout."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        try:
            return test(*args, **kwargs)
        except LibraryUnavailable as missing:
            pytest.skip(f"cannot cross-check against this transformers: {missing}")

    return run


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


PADDINGS = {"no padding": (0, 0), "left padding": (0, 3)}


# ---------------------------------------------------------------------------
# BERT: the embedding block, with MiniLM's real weights on real text
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("with_token_types", [True, False], ids=["token_type_ids", "no token_type_ids"])
@needs_library
def test_bert_embeddings_match_minilm(with_token_types):
    from helpers import models

    bert = library.minilm()
    config = bert.config
    ours = reference.BertEmbeddings(
        config.vocab_size,
        config.hidden_size,
        config.max_position_embeddings,
        config.type_vocab_size,
        config.layer_norm_eps,
        pad_token_id=config.pad_token_id,
    ).eval()
    ours.load_state_dict(models.bert_embeddings_state_dict())  # strict: exactly HF's five tensors, under HF's names

    firsts, seconds = zip(*models.SENTENCE_PAIRS)
    encoded = models.tokenizer()(list(firsts), list(seconds), padding=True, return_tensors="pt")
    ids, types = encoded["input_ids"], encoded["token_type_ids"]  # (3, 19): padded, two segments
    assert types.any() and (ids == config.pad_token_id).any()  # sentence B and [PAD] are really there
    types = types if with_token_types else None

    with torch.no_grad():
        theirs = bert.embeddings(input_ids=ids, token_type_ids=types)
        got = ours(ids, types)
    assert_close(got, theirs)


# ---------------------------------------------------------------------------
# Llama: half-split RoPE, grouped-query attention
# ---------------------------------------------------------------------------


@needs_library
def test_rotate_half_matches_llama():
    x = randn(2, 3, 5, 16)
    assert torch.equal(reference.rotate_half(x), library_support.llama_rotate_half(x))


@pytest.mark.parametrize("padding", PADDINGS.values(), ids=PADDINGS.keys())
@needs_library
def test_rope_matches_llama(padding):
    model = library.tiny_llama()
    config = model.config
    Hq, Hk, Dh, T = config.num_attention_heads, config.num_key_value_heads, library.llama_head_dim(model), 9
    assert Hk < Hq  # GQA: q and k have different head counts, cos/sin must broadcast over both
    _, position_ids = library.left_padding(T, padding)  # (B, T)
    q, k = randn(2, Hq, T, Dh, seed=1), randn(2, Hk, T, Dh, seed=2)

    cos_lib, sin_lib = library_support.llama_cos_sin(model, position_ids)  # (B, T, Dh)
    cos_ref, sin_ref = reference.rope_cache(
        Dh, config.max_position_embeddings, base=library.rope_base(config)
    )  # (max_len, Dh)
    assert_close(cos_ref[position_ids], cos_lib)
    assert_close(sin_ref[position_ids], sin_lib)

    q_lib, k_lib = library_support.llama_apply_rope(q, k, cos_lib, sin_lib)
    q_ref, k_ref = reference.apply_rope(q, k, cos_ref, sin_ref, positions=position_ids)
    assert_close(q_ref, q_lib)
    assert_close(k_ref, k_lib)


# ---------------------------------------------------------------------------
# GPT-J: interleaved RoPE on the first rotary_dim dims of each head
# ---------------------------------------------------------------------------


@needs_library
def test_gptj_table_is_the_rope_angles():
    """GPT-J's create_sinusoidal_positions(n, r) is [sin | cos] of the angles m·θ_i of an r-dim head."""
    n, r = 64, library.tiny_gptj().config.rotary_dim
    cos, sin = reference.rope_cache(r, n)  # half-split: each angle written twice, take it once
    assert_close(
        library_support.gptj_sinusoidal_positions(n, r), torch.cat([sin[:, : r // 2], cos[:, : r // 2]], dim=-1)
    )


@pytest.mark.parametrize("padding", PADDINGS.values(), ids=PADDINGS.keys())
@needs_library
def test_rope_interleaved_matches_gptj(padding):
    model = library.tiny_gptj()
    config = model.config
    H, r, T = config.n_head, config.rotary_dim, 9
    Dh = config.n_embd // H
    assert r < Dh  # partial rotary: the last Dh - r dims of every head carry no position
    _, position_ids = library.left_padding(T, padding)
    position_ids = position_ids + 5  # as after a cached prefix of 5 tokens: no row starts at 0
    x = randn(2, T, H, Dh, seed=3)  # GPT-J's own layout for q and k: heads after positions

    theirs = library_support.gptj_rotary(model, x, position_ids)

    x = x.transpose(1, 2)  # the course's layout (B, H, T, Dh)
    rows = [
        reference.rope_interleaved(x[b : b + 1, ..., :r], positions=position_ids[b]) for b in range(len(x))
    ]  # positions (T,): one row at a time
    ours = torch.cat([torch.cat(rows), x[..., r:]], dim=-1).transpose(1, 2)
    assert_close(ours, theirs)
    assert torch.equal(theirs[..., r:], x.transpose(1, 2)[..., r:])  # the pass-through dims are untouched


# ---------------------------------------------------------------------------
# GPT-NeoX: half-split RoPE on the first rotary_pct of each head
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("padding", PADDINGS.values(), ids=PADDINGS.keys())
@needs_library
def test_partial_rope_matches_neox(padding):
    model = library.tiny_neox()
    config = model.config
    H, T = config.num_attention_heads, 9
    Dh, r = config.hidden_size // H, library.neox_rotary_ndims(model)
    assert r == Dh // 4  # rotary_pct = 0.25
    _, position_ids = library.left_padding(T, padding)
    q, k = randn(2, H, T, Dh, seed=4), randn(2, H, T, Dh, seed=5)

    # The frequencies are those of an r-dim head, θ_i = base^(-2i/r), not of the whole Dh-dim head.
    cos_lib, sin_lib = library_support.neox_cos_sin(model, position_ids)  # (B, T, r)
    cos_ref, sin_ref = reference.rope_cache(r, config.max_position_embeddings, base=library.rope_base(config))
    assert_close(cos_ref[position_ids], cos_lib)
    assert_close(sin_ref[position_ids], sin_lib)

    q_lib, k_lib = library_support.neox_apply_rope(q, k, cos_lib, sin_lib)
    q_rot, k_rot = reference.apply_rope(q[..., :r], k[..., :r], cos_ref, sin_ref, positions=position_ids)
    assert_close(torch.cat([q_rot, q[..., r:]], dim=-1), q_lib)
    assert_close(torch.cat([k_rot, k[..., r:]], dim=-1), k_lib)
    assert torch.equal(q_lib[..., r:], q[..., r:])


# ---------------------------------------------------------------------------
# Meta <-> HF: interleaved and half-split RoPE are one row permutation apart
# ---------------------------------------------------------------------------


def test_half_split_to_interleaved_rows():
    assert library.half_split_to_interleaved_rows(8).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    # It undoes the permutation of transformers' convert_llama_weights_to_hf.py (Meta -> HF):
    #   permute(w) = w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)
    n_heads, head_dim, d_model = 3, 8, 5
    w_meta = randn(n_heads * head_dim, d_model, seed=6)
    w_hf = w_meta.view(n_heads, head_dim // 2, 2, d_model).transpose(1, 2).reshape(n_heads * head_dim, d_model)
    assert torch.equal(library.interleave_projection_rows(w_hf, n_heads), w_meta)


@needs_library
def test_meta_interleaved_rope_gives_hf_attention_scores():
    """HF's Llama checkpoints have q_proj/k_proj rows permuted so that the half-split
    rotation does what Meta's interleaved one does on the original rows. Permuting the
    rows back and rotating with rope_interleaved must give the same q·k scores."""
    model = library.tiny_llama()
    config = model.config
    Hq, Hk, Dh, T = config.num_attention_heads, config.num_key_value_heads, library.llama_head_dim(model), 9
    x = randn(2, T, config.hidden_size, seed=7)
    positions = torch.arange(T)

    def heads(h: torch.Tensor, n: int) -> torch.Tensor:
        return h.view(2, T, n, Dh).transpose(1, 2)  # (B, T, n·Dh) -> (B, n, T, Dh)

    def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        k = k.repeat_interleave(Hq // Hk, dim=1)  # GQA: query head h reads key head h // (Hq/Hk), as repeat_kv does
        return q @ k.transpose(-1, -2)  # (B, Hq, T, T)

    with torch.no_grad():
        wq, wk = library_support.llama_projections(model)  # (Hq·Dh, d), (Hk·Dh, d): HF row order
        cos, sin = library_support.llama_cos_sin(model, positions.expand(2, T))
        q_hf, k_hf = library_support.llama_apply_rope(heads(x @ wq.T, Hq), heads(x @ wk.T, Hk), cos, sin)

        base = library.rope_base(config)
        wq_meta, wk_meta = library.interleave_projection_rows(wq, Hq), library.interleave_projection_rows(wk, Hk)
        q_meta = reference.rope_interleaved(heads(x @ wq_meta.T, Hq), positions, base)
        k_meta = reference.rope_interleaved(heads(x @ wk_meta.T, Hk), positions, base)
        q_wrong = reference.rope_interleaved(heads(x @ wq.T, Hq), positions, base)  # HF's rows, the other layout
        k_wrong = reference.rope_interleaved(heads(x @ wk.T, Hk), positions, base)

    order = library.half_split_to_interleaved_rows(Dh)
    assert_close(q_meta, q_hf[..., order])  # the same rotated vectors, coordinates reordered...
    assert_close(k_meta, k_hf[..., order])
    assert_close(scores(q_meta, k_meta), scores(q_hf, k_hf))  # ...so the same dot products
    assert not torch.allclose(scores(q_wrong, k_wrong), scores(q_hf, k_hf), atol=1e-3)  # the permutation is needed
    # and the library's two 90-degree turns are the same map in the two layouts
    assert torch.equal(
        library_support.gptj_rotate_every_two(q_hf[..., order]), library_support.llama_rotate_half(q_hf)[..., order]
    )


# ---------------------------------------------------------------------------
# BLOOM: ALiBi
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_heads", [8, 12, 6])
@needs_library
def test_alibi_slopes_match_bloom(n_heads):
    assert_close(reference.alibi_slopes(n_heads), library.bloom_slopes(n_heads))


@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (10, 50), (8, 20), (64, 256), (32, 1000)])
def test_t5_relative_bucket_matches_t5(bidirectional, num_buckets, max_distance):
    """Every relative position from -3000 to 3000, long and int32: transformers' own T5 bucketing is the oracle."""
    t5 = pytest.importorskip(
        "transformers.models.t5.modeling_t5", reason="cannot cross-check against this transformers: no T5"
    )
    relative = torch.arange(-3000, 3001)
    for positions in (relative, relative.int()):
        expected = t5.T5Attention._relative_position_bucket(positions, bidirectional, num_buckets, max_distance)
        assert torch.equal(reference.t5_relative_bucket(positions, bidirectional, num_buckets, max_distance), expected)
        assert (
            reference.t5_relative_bucket(positions, bidirectional, num_buckets, max_distance).dtype
            == expected.dtype
            == torch.long
        )


@needs_library
def test_bloom_alibi_is_the_textbook_bias_plus_a_row_constant():
    """BLOOM adds m·j (key position only); the textbook bias is -m·(i - j) = m·j - m·i.
    They differ by m·i, the same for every key of query row i."""
    H, T = 12, 7
    theirs = library.bloom_alibi(torch.ones(1, T, dtype=torch.long), H)[0]  # (H, 1, T): one row for every query
    ours = reference.alibi_bias(H, T)  # (H, T, T), -inf above the diagonal
    i = torch.arange(T)[:, None]
    visible = torch.arange(T)[None, :] <= i  # (T, T): keys at or before the query
    row_constant = reference.alibi_slopes(H)[:, None, None] * i  # (H, T, 1): m_h · i
    assert_close((theirs - ours)[:, visible], row_constant.expand(H, T, T)[:, visible])


@needs_library
def test_bloom_attention_matches_alibi_bias():
    """BLOOM's first-layer attention probabilities (its build_alibi_tensor, its causal
    mask, its softmax) equal softmax(q·kᵀ/√Dh + reference.alibi_bias) on the same q, k.
    Equal although the biases differ: softmax is shift-invariant in each row, and BLOOM's
    m·j differs from the textbook -m·(i - j) by m·i, constant in row i. With left padding,
    BLOOM counts key positions from the first real token, so a padded row is the
    unpadded sequence's attention, with zeros for the pad keys."""
    model = library.tiny_bloom()
    H, T = model.config.n_head, 8
    padding = (0, 3)
    mask, _ = library.left_padding(T, padding)
    ids = torch.randint(0, model.config.vocab_size, (2, T), generator=torch.Generator().manual_seed(8))
    probs, q, k = library.bloom_first_layer_attention(model, ids, mask)  # (B, H, T, T), (B, H, T, Dh) x 2
    Dh = q.shape[-1]

    for b, p in enumerate(padding):
        n = T - p  # the real tokens of row b
        scores = q[b, :, p:] @ k[b, :, p:].transpose(-1, -2) / math.sqrt(Dh) + reference.alibi_bias(H, n)  # (H, n, n)
        assert_close(probs[b, :, p:, p:], scores.softmax(dim=-1))
        assert (probs[b, :, p:, :p] == 0).all()  # nobody attends to a pad


# ---------------------------------------------------------------------------
# GPT-2: learned positions, and the head tied to the token table
# ---------------------------------------------------------------------------


@needs_library
def test_learned_positions_match_gpt2():
    model = library.tiny_gpt2()
    wte, wpe, _ = library.gpt2_tables(model)
    ids = torch.randint(0, model.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(9))

    learned = reference.LearnedPositionalEmbedding(*wpe.weight.shape)  # (n_positions, n_embd)
    learned.load_state_dict({"position_embeddings.weight": wpe.weight})
    with torch.no_grad():
        ours = learned(reference.lookup(wte.weight, ids))  # wte[ids] + wpe[0..T-1]
    assert_close(
        ours, library_support.gpt2_block_input(model, ids)
    )  # what GPT-2's first block receives (dropout off in eval)


@needs_library
def test_tied_head_matches_gpt2():
    model = library.tiny_gpt2()
    wte, _, lm_head = library.gpt2_tables(model)
    assert lm_head.weight is wte.weight  # tied: one Parameter, not a copy
    head = reference.TiedLMHead(wte)
    assert head.weight is wte.weight

    ids = torch.randint(0, model.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(10))
    hidden, logits = library_support.gpt2_final_hidden_and_logits(model, ids)  # after ln_f, and lm_head's output
    with torch.no_grad():
        assert_close(head(hidden), logits)


# ---------------------------------------------------------------------------
# Whole models: the reference's step swapped into the library's model gives its logits
# ---------------------------------------------------------------------------


def real_tokens(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return logits[mask.bool()]  # the pads' logits are nobody's prediction


def left_padded_batch(model, T: int = 9) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mask, position_ids = library.left_padding(T, (0, 3))
    ids = torch.randint(0, model.config.vocab_size, (2, T), generator=torch.Generator().manual_seed(11))
    return ids, mask, position_ids


@needs_library
def test_llama_logits_with_the_reference_rotary():
    model = library.tiny_llama()
    config = model.config
    ids, mask, position_ids = left_padded_batch(model)
    theirs = library.llama_logits(model, ids, mask, position_ids)
    rotary = reference.RotaryEmbedding(
        library.llama_head_dim(model), config.max_position_embeddings, library.rope_base(config)
    )
    ours = library.llama_logits(model, ids, mask, position_ids, rope=rotary)
    assert_close(real_tokens(ours, mask), real_tokens(theirs, mask))
    # the swap is real: the interleaved rotation on HF's rows gives other logits
    wrong = library.llama_logits(
        model,
        ids,
        mask,
        position_ids,
        rope=lambda q, k, p: (reference.rope_interleaved(q, p[0]), reference.rope_interleaved(k, p[0])),
    )
    assert not torch.allclose(wrong, theirs, atol=1e-4)


@needs_library
def test_meta_layout_llama_gives_the_same_logits_with_interleaved_rope():
    """Meta's row order + interleaved RoPE == HF's row order + half-split RoPE, on the whole model."""
    model = library.tiny_llama()
    base = library.rope_base(model.config)
    ids, mask, position_ids = left_padded_batch(model)

    def interleaved(q, k, positions):
        turn = lambda x: torch.cat(
            [reference.rope_interleaved(x[b : b + 1], positions[b], base) for b in range(len(x))]
        )
        return turn(q), turn(k)

    theirs = library.llama_logits(model, ids, mask, position_ids)
    ours = library.llama_logits(library.meta_layout_llama(model), ids, mask, position_ids, rope=interleaved)
    assert_close(real_tokens(ours, mask), real_tokens(theirs, mask))
    assert not torch.allclose(library.llama_logits(model, ids, mask, position_ids, rope=interleaved), theirs, atol=1e-4)


@needs_library
def test_neox_logits_with_the_reference_partial_rope():
    model = library.tiny_neox()
    r = library.neox_rotary_ndims(model)
    ids, mask, position_ids = left_padded_batch(model)
    cos, sin = reference.rope_cache(r, model.config.max_position_embeddings, library.rope_base(model.config))
    theirs = library.neox_logits(model, ids, mask, position_ids)
    ours = library.neox_logits(
        model, ids, mask, position_ids, rope=lambda q, k, p: reference.apply_partial_rope(q, k, cos, sin, p)
    )
    assert_close(real_tokens(ours, mask), real_tokens(theirs, mask))
    whole = reference.rope_cache(library.llama_head_dim(model), 64)  # the whole head turned: not NeoX
    assert not torch.allclose(
        library.neox_logits(model, ids, mask, position_ids, rope=lambda q, k, p: reference.apply_rope(q, k, *whole, p)),
        theirs,
        atol=1e-4,
    )


@needs_library
def test_gptj_logits_with_the_reference_interleaved_rope():
    model = library.tiny_gptj()
    ids, mask, position_ids = left_padded_batch(model)
    theirs = library.gptj_logits(model, ids, mask, position_ids)
    ours = library.gptj_logits(model, ids, mask, position_ids, rope=reference.rope_interleaved)
    assert_close(real_tokens(ours, mask), real_tokens(theirs, mask))
    half_split = lambda x, p: reference.apply_rope(x, x, *reference.rope_cache(x.shape[-1], 64), p)[0]
    assert not torch.allclose(library.gptj_logits(model, ids, mask, position_ids, rope=half_split), theirs, atol=1e-4)


@needs_library
def test_bloom_logits_with_the_reference_slopes_and_bias():
    """Both forms give BLOOM's logits: its row-constant m·j from the slopes, and the
    textbook -m·(i - j) bias, equal under softmax's shift-invariance."""
    model = library.tiny_bloom()
    ids, mask, _ = left_padded_batch(model)
    theirs = library.bloom_logits(model, ids, mask)
    assert_close(
        real_tokens(library.bloom_logits(model, ids, mask, slopes=reference.alibi_slopes), mask),
        real_tokens(theirs, mask),
    )
    assert_close(
        real_tokens(library.bloom_logits(model, ids, mask, bias=reference.alibi_bias), mask), real_tokens(theirs, mask)
    )
    flipped = library.bloom_logits(model, ids, mask, slopes=lambda n: -reference.alibi_slopes(n))
    assert not torch.allclose(flipped, theirs, atol=1e-4)
    assert "build_alibi_tensor" not in vars(model.transformer)  # the swap is undone: the class's own method again


@needs_library
def test_gpt2_logits_with_the_reference_positions_and_tied_head():
    model = library.tiny_gpt2()
    wte, wpe, _ = library.gpt2_tables(model)
    ids, _, _ = left_padded_batch(model)
    learned = reference.LearnedPositionalEmbedding(*wpe.weight.shape)
    learned.load_state_dict({"position_embeddings.weight": wpe.weight})
    theirs = library.gpt2_logits(model, ids)
    assert_close(library.gpt2_logits(model, ids, positions=learned, head=reference.TiedLMHead(wte)), theirs)
    shifted = lambda x: x + wpe.weight[1 : x.shape[1] + 1]  # positions counted from 1
    assert not torch.allclose(library.gpt2_logits(model, ids, positions=shifted), theirs, atol=1e-4)


# ---------------------------------------------------------------------------
# The notebooks' helpers: a library cell skips in one line, and says ✓ or ✗ rightly
# ---------------------------------------------------------------------------


def test_a_library_cell_without_the_model_skips_in_one_line(monkeypatch, capsys):
    """What a notebook cell meets when this transformers has no BLOOM module: one printed line."""
    monkeypatch.setitem(sys.modules, "transformers.models.bloom.modeling_bloom", None)  # import fails
    with library.skip_if_unavailable():
        library.bloom_alibi(torch.ones(1, 4, dtype=torch.long), 4)
        raise AssertionError("unreachable: the library call above must raise LibraryUnavailable")
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].startswith("skipped: ") and "modeling_bloom" in printed[0]


def test_skip_if_unavailable_lets_other_errors_through():
    with pytest.raises(ValueError), library.skip_if_unavailable():
        raise ValueError("a bug in the cell is not a missing library")


def test_compare_logits_says_equal_only_to_float32_tolerance(capsys):
    theirs = randn(3, 5) * 0.1  # the tiny models' logits are this small
    assert library.compare_logits("same", theirs.clone(), theirs)
    assert not library.compare_logits("a wrong step's size of difference", theirs + 4e-3, theirs)
    assert not library.compare_logits("shown as a control", theirs + 4e-3, theirs, equal=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("✓ same: equal to float32 tolerance")
    assert lines[1].startswith("✗ a wrong step's") and "4.0e-03" in lines[1]
    assert lines[2].startswith("✓ shown as a control") and lines[2].endswith("different")


def test_compare_logits_prints_the_same_line_whatever_the_float_noise(capsys):
    """Equal computations differ by noise that depends on the CPU's vector instructions and the thread
    count: the line printed for an equal pair must not show it (a stored output would flip)."""
    theirs = randn(3, 5) * 2  # logits of the tiny models at initializer_range 0.2
    for noise in (0.0, 3e-7, 2.5e-6, 9e-6):
        assert library.compare_logits("float noise", theirs + noise, theirs)
    lines = capsys.readouterr().out.splitlines()
    assert len(set(lines)) == 1 and lines[0].startswith("✓ float noise: equal to float32 tolerance")


def test_prediction_change_counts_flipped_predictions(capsys):
    theirs = torch.eye(4) * 3  # position i predicts token i
    mine = theirs[[0, 1, 3, 2]]  # positions 2 and 3 now predict each other's token
    assert library.prediction_change("two swapped", mine, theirs) == 0.5
    assert library.prediction_change("unchanged", theirs.clone(), theirs) == 1.0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "two swapped: logits 100% away (relative), top-1 agreement 50% (2 of 4 predictions)"
    assert lines[1] == "unchanged: logits 0% away (relative), top-1 agreement 100% (4 of 4 predictions)"


@needs_library
def test_left_padding_needs_position_ids_in_gpt2():
    """The lesson of chapter 04's GPT-2 cell: GPT-2's default position_ids ignore the mask, so
    a left-padded text gets wrong positions; mask.cumsum(-1) - 1 gives its unpadded logits."""
    model = library.tiny_gpt2()
    pads, text = 4, torch.randint(0, model.config.vocab_size - 1, (1, 8), generator=torch.Generator().manual_seed(12))
    ids = torch.cat([torch.full((1, pads), model.config.eos_token_id), text], dim=1)
    mask = (torch.arange(ids.shape[1]) >= pads).long()[None]  # (1, 12): 0 on the pads
    alone = library.gpt2_logits(model, text)[0]
    default = library.gpt2_logits(model, ids, attention_mask=mask)[0, pads:]
    fixed = library.gpt2_logits(model, ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))[
        0, pads:
    ]
    assert (default.argmax(-1) == alone.argmax(-1)).float().mean() < 0.5  # position matters in the tiny model
    assert_close(fixed, alone)


@needs_library
def test_chapter_04s_last_gpt2_line_calls_the_students_forward_and_can_fail():
    """Chapter 04's "your forward from each row's first real token" line: the reference's forward, handed each
    row's real tokens, gives the unpadded logits; a forward that starts at row 1, or adds rows 0..T-1 to the whole
    padded row, does not (the line prints ✗ for it)."""
    model = library.tiny_gpt2()
    _, wpe, _ = library.gpt2_tables(model)
    pads, text = 4, torch.randint(0, model.config.vocab_size - 1, (1, 8), generator=torch.Generator().manual_seed(12))
    ids = torch.cat([torch.cat([text, text[:, :pads]], dim=1), torch.cat([torch.full((1, pads), 0), text], dim=1)])
    ids[1, :pads] = model.config.eos_token_id
    mask = torch.ones_like(ids)
    mask[1, :pads] = 0
    alone = library.gpt2_logits(model, text)[0]
    learned = reference.LearnedPositionalEmbedding(*wpe.weight.shape)
    learned.load_state_dict({"position_embeddings.weight": wpe.weight})
    mine = lambda step: library.gpt2_logits(model, ids, attention_mask=mask, positions=step)[1, pads:]
    assert_close(mine(library.from_first_real_token(learned, mask)), alone)
    from_one = lambda x: x + wpe.weight[1 : x.shape[1] + 1]  # positions counted from 1
    assert not torch.allclose(mine(library.from_first_real_token(from_one, mask)), alone, atol=1e-4)
    assert not torch.allclose(mine(learned), alone, atol=1e-4)  # the whole padded row: rows 4..11 for the text


@needs_library
def test_gpt2_small_shapes_are_gpt2_small():
    model = library.gpt2_small_shapes()
    wte, wpe, lm_head = library.gpt2_tables(model)
    assert tuple(wte.weight.shape) == (50257, 768) and tuple(wpe.weight.shape) == (1024, 768)
    assert lm_head.weight is wte.weight and wte.weight.device.type == "meta"
    assert sum(p.numel() for p in model.parameters()) == 124_439_808  # GPT-2 small's 124M, the tied matrix once


def test_a_forward_without_the_cache_keyword_skips_chapter_08s_decode_cells_with_a_reason():
    """transformers before 5.23 names the cache `past_key_values`: chapter 08's decode loops say so and skip,
    rather than pass `cache=` into **kwargs, where it would be dropped and every step decoded without it."""

    class OldForward(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, **kwargs):
            return input_ids

    with pytest.raises(library.LibraryUnavailable, match="past_key_values"):
        library.require_cache_argument(OldForward())
    library.require_cache_argument(library.tiny_llama())  # the tested range names it `cache`
