"""The public contract: the diagnosis codes and what an exercise declares.

Every graded exercise is one `Exercise`, declared once, with keyword
arguments, in its chapter's module under `helpers/exercises/`: its public id,
its chapter, its points, the reference that defines "right", the catalogue of
known-wrong variants that lets a check *name* a mistake, and the probes that
run them. Exercise ids and diagnosis codes are public (the README lists them):
never rename one, add freely.

This module imports nothing else from `helpers`, so everything may import it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

# code -> what it means, in one line. A check's message says the specifics;
# this table is what the grader's summary and the docs show.
DIAGNOSES: dict[str, str] = {
    # any exercise
    "not_implemented": "the stub still raises NotImplementedError",
    "raised": "the code raised an exception",
    "wrong_type": "the result (or the submission itself) has the wrong type",
    "wrong_shape": "the result has the wrong shape",
    "wrong_dtype": "the result has the wrong dtype",
    "wrong_device": "the result, or a tensor made inside, is on the wrong device",
    "nan_or_inf": "the result holds NaN or infinity",
    "low_precision": "a float32 result carries half-precision (float16 or bfloat16) rounding from somewhere on the way",
    "mutated_input": "the code changed one of its inputs in place",
    "timeout": "the code ran past the time limit (an endless loop?)",
    "out_of_memory": "the code tried to allocate far more memory than the task needs",
    "changed_global_state": "the code changed torch's global state (default dtype, grad mode, ...)",
    "forbidden_api": "the code used a function this exercise asks you to do without",
    "wrong_values": "the values differ from the reference (no more specific mistake matched)",
    "method_not_used": "the values are right, but not computed the way the exercise asks (indexing for lookup, chapter 03's shift matrix for rope_from_shift_matrix)",
    "changes_own_weights": "the module changes its own weights or tables while computing its output (nn.Embedding(max_norm=...), an in-place clamp or renorm)",
    "uses_reference": "the submission is, wraps or calls the course's own reference",
    # lookup, one_hot_lookup
    "transposed_weight": "the weight was read as (d_model, vocab) instead of (vocab, d_model)",
    "not_a_matrix_product": "one_hot_lookup must multiply a one-hot matrix by the weight",
    "no_gradient": "the output is cut off from the weight's gradient",
    "frozen_rows": "rows (or all) of a table the module trains never get a gradient: padding_idx, requires_grad=False, .detach(), a hook",
    # embedding_backward
    "no_accumulation": "a token used several times keeps one gradient instead of their sum",
    "padding_row_updated": "the padding row gets a gradient",
    # ScaledEmbedding, TokenAndPositionEmbedding
    "missing_scale": "the token embeddings are not multiplied by sqrt(d_model)",
    "divided_by_scale": "the token embeddings are divided by sqrt(d_model) instead of multiplied",
    "wrong_scale": "the token embeddings are scaled by something other than sqrt(d_model)",
    "scaled_position_too": "the positional encoding was scaled by sqrt(d_model) as well",
    "scale_is_parameter": "the sqrt(d_model) factor is a trainable Parameter: the optimizer will move it away from sqrt(d_model)",
    # TiedLMHead
    "copy_not_tied": "the head holds a copy of the embedding weight, not the same Parameter",
    "has_bias": "the tied head adds a bias",
    "returns_probabilities": "the head returns softmax probabilities (or log-probabilities) instead of logits",
    # sinusoidal_encoding, relative_shift_matrix
    "sin_cos_swapped": "cos is in the even columns and sin in the odd ones",
    "shift_reversed": "the shift matrix moves the other way, PE[pos] to PE[pos - k]: each 2×2 block is transposed",
    "concatenated_halves": "sin and cos laid out as two halves (fairseq/tensor2tensor) instead of interleaved",
    "wrong_base": "the frequencies use a base other than the one asked for (1000 instead of 10000?)",
    "wrong_exponent": "the frequency exponent is off (i/d instead of 2i/d?)",
    "all_zeros": "the table is all zeros: a result computed and never stored?",
    "position_offset": "positions start at 1 instead of 0",
    "odd_d_model": "an odd d_model fails or is laid out wrongly",
    # PositionalEncoding, LearnedPositionalEmbedding
    "pe_is_parameter": "the fixed encoding is a trainable Parameter",
    "pe_not_buffer": "the encoding is a plain attribute, not a registered buffer",
    "same_row_every_position": "every position gets the same vector",
    "batch_seq_confusion": "positions are taken along the batch axis instead of the sequence axis",
    "missing_dropout": "dropout is not applied in training mode",
    "no_length_check": "a sequence longer than max_len is not refused with a ValueError",
    "positions_on_cpu": "position ids are built on the CPU whatever the input's device",
    # BertEmbeddings
    "layernorm_eps": "LayerNorm uses PyTorch's default eps 1e-5 instead of BERT's 1e-12",
    "missing_token_type": "the segment (token type) embedding is not added",
    "missing_layernorm": "LayerNorm is not applied",
    "layernorm_order": "LayerNorm and the sum or dropout are in the wrong order",
    "state_dict_mismatch": "the pretrained state_dict does not load into the module",
    # LearnedPositionalEmbedding, BertEmbeddings (added with chapter 04)
    "positions_not_trainable": "the learned position table is not a trainable Parameter (a buffer, frozen, or cut off from the gradient)",
    "length_check_off_by_one": "the length check is off by one: a sequence of exactly max_len is refused, or the first position past the table let through",
    "unexpected_dropout": "the output changes in training mode: dropout where the module has none",
    "layernorm_unbiased_var": "a hand-written LayerNorm divides by the unbiased variance (d - 1) instead of d",
    "input_scaled": "PositionalEncoding multiplies its input by sqrt(d_model), the token embedding's job",
    "layernorm_eps_outside_sqrt": "a hand-written LayerNorm adds eps to the standard deviation, (x - mean) / (std + eps), not under the square root",
    "columns_sliced": "a 2-D (max_len, d) table sliced as pe[:, :T], as if it had a leading batch axis: its first T columns, not its first T rows",
    "grad_scaled_by_frequency": "the table's gradient is divided by each token's count in the batch (nn.Embedding's scale_grad_by_freq=True)",
    "unexpected_scale": "the token embeddings are multiplied by sqrt(d_model), which BERT does not do",
    "dropout_rate_ignored": "dropout does not use the hidden_dropout_prob it was given",
    "missing_padding_idx": "the word embedding ignores pad_token_id: the padding row still gets a gradient",
    "dropout_twice": "dropout applied twice in a row (a reused module's and one's own): the rate is 1 - (1 - p)², not p",
    "dropout_in_eval": "dropout still drops values in eval mode (F.dropout without training=self.training?)",
    # RoPE
    "rope_interleaved_convention": "the adjacent-pair (Meta/GPT-J) layout where half-split is asked",
    "rope_half_split_convention": "the half-split (HF/NeoX) layout where adjacent pairs are asked",
    "rope_sign_flip": "the rotation goes the wrong way (sin with the wrong sign)",
    "rope_mixed_pairing": "the two halves of a pair do not belong to the same frequency",
    "rope_ignores_positions": "the given positions are ignored",
    "low_precision_angles": "the angles are computed in the input's low precision instead of float32",
    "cache_is_parameter": "the cos/sin cache is a Parameter or a persistent buffer",
    # apply_partial_rope (GPT-NeoX's rotary_pct, GPT-J's rotary_dim)
    "partial_rope_whole_head": "the whole head is rotated where only its first rotary_dim dims should be",
    "partial_rope_pairs_across_head": "pairs span the whole head (i, i + head_dim/2) instead of the rotated part (i, i + rotary_dim/2)",
    "partial_rope_last_dims": "the rotated part sits in the last rotary_dim dims of the head instead of the first",
    "partial_rope_pass_dropped": "the dims past rotary_dim are dropped or zeroed instead of passed through",
    "partial_rope_width_guessed": "fewer dims turned than the tables are wide: a width guessed from head_dim, not cos.shape[-1]",
    # ALiBi
    "non_power_of_two": "the slopes for a head count that is not a power of two do not follow Press et al.'s rule",
    "wrong_sign": "the bias rewards distance (or the slopes are negative) instead of penalising it",
    "missing_causal_mask": "keys after the query are not masked with -inf",
    "slopes_from_zero": "the slopes start at 2^0 = 1 (heads counted from 0) instead of 2^(-8/n)",
    "slopes_reversed": "the slopes are in reverse order, the gentlest head first",
    # T5's relative position buckets
    "bucket_sign_split_missing": "bidirectional buckets without the split by sign: a key d after the query shares the bucket of the key d before it",
    "bucket_direction_reversed": "the relative position is read as query minus key: keys after the query get the buckets of keys before it",
    "bucket_exact_region": "the exact buckets do not cover distances 0 .. n/2 - 1 (n the buckets of one direction)",
    "bucket_log_spacing": "the buckets past the exact ones are not log-spaced from n/2 up to max_distance, truncated as T5 does",
    "bucket_not_clamped": "distances from max_distance on are not clamped into the last bucket: bucket ids reach num_buckets or more",
    "bias_row_offset": "the bias is -m_h·(i - j) plus a constant per row (the m_h·j shortcut): equal under softmax, but not the bias asked for",
    # long context: RoPE scaling (chapter 07)
    "factor_inverted": "the frequencies are multiplied by the scaling factor where they should be divided (or the base made smaller instead of larger)",
    "ntk_wrong_exponent": "the NTK-aware base is raised by the factor to a power other than d/(d-2)",
    "scaled_within_original_length": "dynamic scaling changes the frequencies at or below the original (trained) length, where it must leave them alone",
    "dynamic_wrong_scale": "past the original length, dynamic scaling uses another factor than factor·T/L - (factor - 1)",
    "ramp_reversed": "the ramp between kept and interpolated pairs goes the wrong way: fast pairs interpolated, slow ones kept",
    "wavelength_without_2pi": "wavelengths or turns computed without 2π: the band edges fall on the wrong pairs",
    "wrong_band_edges": "the edges between the bands (YaRN's beta_fast/beta_slow, Llama 3.1's low/high_freq_factor) are not where the method puts them",
    "yarn_not_truncated": "YaRN's band edges are not rounded outward to whole pairs (transformers' default truncate=True)",
    "missing_temperature": "YaRN's attention scale is left at 1.0: the temperature 0.1·ln(s) + 1 is missing",
    "wrong_temperature": "YaRN's attention scale is not 0.1·ln(s) + 1 (its square, square root or inverse, another log, no +1)",
    "unexpected_attention_scale": "an attention scale other than 1.0 from a method that scales no attention",
    "yarn_edge_clamped_to_half": "YaRN's slow band edge is clamped to the last pair (d/2 - 1) where transformers and the authors' code clamp it to d - 1",
    "temperature_without_guard": "YaRN's attention scale is 0.1·ln(s) + 1 below 1 for a factor under 1, where the library returns 1.0",
    "paper_ramp": "YaRN's ramp is the paper's γ(r), linear in the turns r = L/λ, where transformers ramps linearly over the pair index",
    "missing_middle_band": "Llama 3.1's scaling with two bands only: the pairs between the edges are kept or divided instead of blended",
    "head_size_hard_coded": "a constant right for one head size only (NTK's exponent written as 64/63, d/(d-2) for d = 128) instead of computed from d",
    "trained_length_hard_coded": "the trained length is a constant (4096, 8192, ...) instead of the original_max_len given",
    "band_factor_hard_coded": "the band parameters are constants (Llama 3.1's 1 and 4, YaRN's 32 and 1) instead of the arguments given",
    "band_from_stretched_length": "the bands are computed from the stretched length factor × L (max_position_embeddings) instead of the trained length L",
    "bucket_log_in_float64": "T5's log-spaced buckets computed in float64: at some boundaries a distance lands one bucket away from transformers' float32 bucket",
    # positions in practice (chapter 08)
    "mask_ignored": "position ids ignore the attention mask: every row gets 0 .. T-1, wrong for a left-padded row",
    "left_padding_only": "position ids subtract each row's pad count: right for left padding only, negative for right padding",
    "pad_position_out_of_range": "a pad gets a position outside [0, T) (the -1 of cumsum - 1 left in place)",
    "positions_not_restarted": "packed documents' positions run on through the row instead of restarting at 0 in each document",
    "document_boundary_off_by_one": "packed documents start one token too late or too early",
    "mask_causal_only": "the packed mask is causal only: a document attends to the documents before it",
    "mask_documents_only": "the packed mask is block-diagonal only: a token attends to the keys after it",
    "mask_transposed": "the mask is transposed: True where j ≥ i instead of j ≤ i",
    "mask_diagonal_excluded": "the mask leaves out the diagonal: a token does not attend to itself",
    "decode_at_position_zero": "each call of the KV cache rotates its tokens at 0 .. T-1: every decoded token at position 0",
    "offset_not_advanced": "the KV cache's offset does not move on by the tokens of each call",
    "offset_double_counted": "the KV cache's offset is counted twice: positions jump ahead after the prompt",
    "keys_rotated_twice": "cached keys are rotated again on a later call instead of once, when they arrived",
    "cache_keys_unrotated": "the cache holds the keys unrotated: earlier keys come back without their rotation",
    "sinks_dropped": "the streaming cache keeps the last window only: the attention sinks are dropped",
    "window_off_by_one": "the streaming window keeps one token too many or too few",
    "positions_not_cache_slots": "streaming positions are the tokens' original indices instead of their slots in the cache",
    "tokens_kept_twice": "the streaming cache keeps some tokens twice while sinks and window overlap",
    "window_zero_slice": "window = 0 keeps every token: tokens[-0:] is the whole sequence",
    "mask_sees_next_token": "the packed mask keeps the diagonal above the main one (tril(1)): each token sees the next",
    "positions_first_row": "(B, T) positions read from their first row only: every sequence turned at the first one's positions",
    "blend_linear_in_wavelength": "Llama 3.1's middle band blended with a weight linear in the wavelength instead of in the turns L/λ",
    "positions_ring_buffer_slots": "streaming positions are ring-buffer slots (kept % K) instead of the order of the tokens kept",
    # decode_position_ids, and the axes of issue 41 in chapter 08
    "decode_offset_shared": "a padded batch decodes at one position for every row (its padded length T, a cache's offset) instead of each row's own count",
    "decode_position_last": "decode positions start at each row's last position (n - 1) instead of the next one (n)",
    "decode_counts_left_pads": "decode positions count the pads before each row's text: the column after its last real token instead of its number of real tokens",
    "mask_inverted": "the mask is read the other way round: 1/True taken for a pad or a masked entry (nn.Transformer's convention) where it means a real token or attend",
    "new_tokens_ignored": "decode positions ignore new_tokens: one position per row, or the same position for every new token",
    "padding_side_per_batch": "the padding side is decided once per batch: rows padded on the other side, or on both sides, are counted wrong",
    "cache_reset_on_chunk": "the KV cache starts over on every call of more than one token: a chunk after the prompt is taken for a new prompt",
    "query_not_rotated": "the KV cache rotates the keys but returns the queries unrotated",
    "values_rotated": "the KV cache rotates the values too: RoPE turns queries and keys only",
    "window_counts_sinks": "the streaming window counts the sinks (transformers' former SinkCache window_length): the recent tokens kept are window - n_sink, not window",
    # chapter 05's rope axes (helpers/exercises/rope_axes.py), beside the contracts' codes
    "argument_ignored": "an argument's value is ignored: apply_rope or apply_partial_rope builds angles of its own instead of using the cos and sin tables it is handed",
    # the library as a second oracle (helpers/exercises/oracle.py)
    "library_mismatch": "dropped into transformers' own model (Llama, GPT-J, GPT-NeoX, BLOOM or GPT-2), the code gives other logits than the model's own step",
    "library_raised": "the code raised inside transformers' own model, on inputs as the model makes them (non-contiguous views, GQA, left padding)",
    # the axes every contract admits (helpers/contracts.py): any exercise
    "squeezed_size_one": "a size-1 axis of the result was dropped (a .squeeze() on a batch of one, or on a single token)",
    "contiguity_assumed": "the code fails on inputs that are views (transposed, sliced): a .view where .reshape is needed",
    "gradient_cut": "the result is cut off from autograd: no gradient reaches an input that needs one (no_grad, inference_mode, .detach(), NumPy)",
    "fixed_dtype": "the code works in float32 only: it fails on another dtype the exercise admits (a .float(), a float32 factory)",
    "precision_lost": "a float64 result carries float32 rounding: a step on the way ran in float32",
    "default_changed": "an optional argument's default differs from the exercise's (a max_len, base or dropout copied from elsewhere, or not passed on)",
    "size_from_ids": "the result's size is read off the ids (ids.max() + 1, bincount without minlength), not from the size given",
}


# Public codes that no check gives any more, with why (kept in DIAGNOSES: reports and summaries may name them).
RETIRED: dict[str, str] = {
    "temperature_without_guard": "YaRN is probed only on its domain, factor >= 1 (issue 41), where 0.1·ln(s) + 1 needs no guard",
}

# The staged help for the codes any exercise can get: (hint, fix). A hint is the
# idea that leads to the fix, without code; the fix is the concrete change. An
# exercise's own mistakes carry theirs in their docstrings ("Hint:" and "Fix:"
# paragraphs), and a probe may pass its own to Probe.fail.
GENERIC_ADVICE: dict[str, tuple[str, str]] = {
    "not_implemented": (
        "Read the exercise's docstring: it gives the signature, the shapes and the idea. Then write the few lines it asks for.",
        "Replace `raise NotImplementedError` with your code, run that cell, then run the check cell again.",
    ),
    "raised": (
        "Read the last line of the error: it names the operation that failed and, usually, the shapes or types it got.",
        "Run your code on a small input in a cell of its own and print the shape of every intermediate tensor.",
    ),
    "wrong_type": (
        "check() calls your code as the exercise's docstring says and expects what the docstring promises back.",
        "Return the value (a tensor, or a tuple of tensors where asked); pass the function or class itself to check(), not its result.",
    ),
    "wrong_shape": (
        "Write the shape of each tensor next to the line that makes it, e.g. `# (B, T, d)`, and follow them to the result.",
        "Make the result the shape the docstring gives: keep every batch dimension, and check which axis is which.",
    ),
    "wrong_dtype": (
        "Factory functions (torch.zeros, torch.arange, torch.tensor) pick a dtype of their own unless you pass one.",
        "Pass `dtype=` taken from an input (e.g. `dtype=x.dtype`), or cast the result with `.to(x.dtype)`.",
    ),
    "wrong_device": (
        "A tensor made inside your code (torch.arange, torch.zeros, ...) lives on the CPU unless you say otherwise; on a GPU it cannot mix with the inputs.",
        "Make new tensors on an input's device: `torch.arange(T, device=x.device)`, `torch.zeros_like(x)`.",
    ),
    "positions_on_cpu": (
        "A tensor created in forward without a device lives on the CPU, whatever device the module and its input are on; only registered parameters and buffers travel with .to(device).",
        "Create it on the input's device, e.g. `positions = torch.arange(T, device=x.device)` (`input_ids.device` if that is your input), "
        "or slice a buffer registered in __init__, which .to(device) moves with the module.",
    ),
    "nan_or_inf": (
        "NaN comes from 0/0, inf - inf, 0 * inf or the log of a negative number; uninitialised memory (torch.empty) holds anything.",
        "Find the first intermediate tensor with NaN (`torch.isnan(t).any()`) and guard the division or fill the tensor you left empty.",
    ),
    "low_precision": (
        "float32 keeps 24 bits of mantissa, bfloat16 8 and float16 11: one step through a half dtype rounds every value to 2 or 3 significant digits, and casting back to float32 does not bring them back.",
        "Find the `.half()`, `.bfloat16()` or `dtype=torch.float16` / `torch.bfloat16` on the way (or a tensor made from one) and keep that step in float32.",
    ),
    "mutated_input": (
        "In-place operations (`+=`, `.mul_()`, `x[...] = ...`) write into the caller's tensor, and the caller may still need it.",
        "Work on a new tensor: `x = x + y` instead of `x += y`, or `x.clone()` before changing it.",
    ),
    "timeout": (
        "A loop whose condition never changes, or a loop over millions of elements in Python, never finishes in time.",
        "Replace the Python loop by tensor operations, or make sure every loop's condition moves toward its end.",
    ),
    "out_of_memory": (
        "The exercise's tensors are small: an allocation this big is a shape mistake (a one-hot of the whole vocabulary per element?).",
        "Print the shape of each tensor you create and build only those the result needs.",
    ),
    "changes_own_weights": (
        "A forward pass computes an output from the weights; changing them is the optimizer's job, in its step. nn.Embedding's max_norm renormalises, in place, every row it looks up.",
        "Remove max_norm from the nn.Embedding (or the in-place `.clamp_()` / `.renorm_()` on the table); to bound the rows, do it out of place on what you looked up: `rows = rows.clamp(...)`.",
    ),
    "changed_global_state": (
        "torch's global settings (default dtype, grad mode, ...) belong to the whole notebook, not to one function.",
        "Change them locally (`with torch.no_grad():`, an explicit `dtype=`) or not at all.",
    ),
    "forbidden_api": (
        "This exercise is about building the operation yourself, from indexing and tensor arithmetic.",
        "Replace the library call by the indexing or arithmetic it stands for.",
    ),
    "uses_reference": (
        "The course's reference is the answer key: the exercise is to write it yourself.",
        "Delete the import of `helpers.reference` (or the `solution_or_reference` call) and write your own code.",
    ),
    "frozen_rows": (
        "An optimizer moves only what gets a gradient. nn.Embedding(padding_idx=k) never gives row k one; requires_grad=False, a buffer, "
        ".detach() or .data on some rows, and a hook that zeroes part of the gradient each freeze rows just as silently.",
        "Build the table so that every row trains, `nn.Embedding(num_rows, d)` with no padding_idx unless the exercise asks for one, and "
        "look rows up in the Parameter itself: no requires_grad_(False), .detach(), .data or gradient hook on the way.",
    ),
    # the axes of helpers/contracts.py (their codes are in DIAGNOSES' last block)
    "squeezed_size_one": (
        "A batch of one is still a batch, and a single token still a sequence: `.squeeze()` without a dimension drops every axis of size 1, "
        "wherever it is, and an index `[0]` drops the first.",
        "Drop the `.squeeze()` (or name the one axis you mean, `.squeeze(-1)`, only where that axis is always 1), and keep every axis the "
        "docstring gives, however small.",
    ),
    "contiguity_assumed": (
        "`.view` reinterprets memory as it is laid out and refuses a tensor whose elements are not in order: a transposed or sliced tensor, "
        "as a model hands its queries and keys over. torch.randn always makes contiguous tensors, so a test of your own never meets one.",
        "Use `.reshape(...)` instead of `.view(...)` (it copies only when it must), or call `.contiguous()` before the view.",
    ),
    "gradient_cut": (
        "Autograd records only the torch operations run while it is on: torch.no_grad() or torch.inference_mode() around the computation, "
        ".detach(), .data, .item() or a trip through NumPy each end the record, and nothing before that point is trained.",
        "Compute the result from the inputs with torch operations, outside any torch.no_grad() / inference_mode block, with no .detach(), "
        ".data or NumPy round trip on the way.",
    ),
    "fixed_dtype": (
        "A `.float()`, a torch.zeros or torch.tensor without dtype=, or a float32 constant meets an input of another dtype, "
        "and torch refuses to mix them in a product (or rounds silently elsewhere).",
        "Take every dtype from the inputs: `.to(weight.dtype)` instead of `.float()`, `dtype=x.dtype` in every factory call.",
    ),
    "precision_lost": (
        "A float64 input asks for float64 all the way: one step in float32 (a `.float()`, a float32 buffer or zeros, a float32 "
        "accumulator cast back at the end) rounds every value to 7 digits, and casting back does not bring them back.",
        "Make every intermediate tensor in the input's dtype: `dtype=` taken from an input in each factory, `.to(x.dtype)`, no `.float()`.",
    ),
    "wrong_values": (  # an exercise with a smallest case of its own passes its (hint, fix) to Probe.expect
        "Work out one entry of the expected result by hand, from the exercise's formula, on the smallest input it takes, and compare it with what your code gives.",
        "Run your code on that small input, print every intermediate tensor next to the value you expect for it, and correct the first step where the two part.",
    ),
}


# The kinds of input whose edges every probe reaches on purpose (Probe.ids, Probe.sequence...):
# the first and the last value a table has a row for, and the shortest and longest sequence. A module
# that makes its own positions 0 .. T-1 reaches position max_len - 1 through T = max_len.
EDGE_KINDS = {
    "ids": "token ids 0 and vocab_size - 1",
    "positions": "positions 0 and max_len - 1",
    "segments": "segment ids 0 and type_vocab_size - 1",
    "lengths": "sequences of length T = 1 and T = max_len",
}


@dataclass(frozen=True, kw_only=True)
class Exercise:
    """One graded exercise. `check(submission, probe)` raises `Failure` on the
    first probe that fails and returns when every probe passed.

    `mistakes` maps a diagnosis code to a known-wrong variant of the reference;
    all of one exercise's mistakes take the same arguments (its module says
    which), and the check reaches them only through this table, so a mistake
    declared here is a mistake diagnosed."""

    id: str
    chapter: int
    points: int
    kind: Literal["function", "module"]  # what the student passes to check()
    reference: Callable[..., Any]
    check: Callable[[Any, Any], None]  # check(submission, probe): a helpers.probe.Check
    mistakes: dict[str, Callable[..., Any]] = field(default_factory=dict)
    forbidden: tuple[Callable[..., Any], ...] = ()
    # What a pass also takes from the torch functions the code called (helpers.safety.Watch), said as "that ...":
    # graded, that is the kernel's word, and the verdict says so (best effort).
    method_seen: str = ""
    difficulty: int = 1  # 1 (a few lines) .. 3 (a module with several parts)
    importance: int = 2  # 1 (good to know) .. 3 (every transformer does this)
    minutes: int = 10  # a fair estimate for a student who read the section
    # Every exercise that takes or makes tensors runs a device pass (a CPU-made
    # tensor breaks on a GPU); one that needs none says why here.
    no_device_pass: str = ""
    # The kinds of input (EDGE_KINDS) the exercise takes: its probes reach both edges of each.
    edges: tuple[str, ...] = ()
    # code -> (hint, fix): the generic advice of a code made specific to this exercise. A failure's
    # own hint and fix come first, then its mistake's docstring, then these, then GENERIC_ADVICE
    # (helpers.probe.advice resolves them, once, for check()).
    advice: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The second oracle: oracle(probe, submission) holds the student's code against the library itself
    # (helpers.exercises.oracle: inside a tiny transformers model), once, after `check` passed on the CPU
    # (checking.check runs it; a GPU's second pass does not).
    oracle: Callable[[Any, Any], None] | None = None  # a helpers.probe.Oracle
    # A module whose forward changes its own buffers on purpose (a KV cache appends to them): the probe's
    # check that a forward leaves the module's tensors as they were then looks at its Parameters only.
    stateful: bool = False
    # What the exercise takes and gives (a helpers.contracts.Contract): the axes it derives run after `check`
    # passed (the catalogue wraps `check` with them), on every call the contract admits and no other.
    contract: Any = None

    @property
    def badge(self) -> str:
        """The one line each chapter shows above this exercise (a test keeps the two in step)."""

        def dots(n: int) -> str:
            return "●" * n + "○" * (3 - n)

        return f"**Exercise `{self.id}`** · difficulty {dots(self.difficulty)} · importance {dots(self.importance)} · about {self.minutes} min · {self.points} point{'s' if self.points != 1 else ''}"

    def __post_init__(self) -> None:
        unknown = (set(self.mistakes) | set(self.advice)) - set(DIAGNOSES)
        if unknown:  # a typo here would silently never be reported
            raise ValueError(f"{self.id}: undocumented diagnosis codes {sorted(unknown)}")
        if set(self.edges) - set(EDGE_KINDS):
            raise ValueError(f"{self.id}: unknown edge kinds {sorted(set(self.edges) - set(EDGE_KINDS))}")
        for name in ("difficulty", "importance"):
            if getattr(self, name) not in (1, 2, 3):
                raise ValueError(f"{self.id}: {name} must be 1, 2 or 3")

    @property
    def signature(self) -> str:
        """What the stub shows, e.g. `lookup(weight, ids)`: the reference's own signature."""
        target = self.reference.__init__ if self.kind == "module" else self.reference
        parameters = [p for name, p in inspect.signature(target).parameters.items() if name != "self"]
        return f"{self.id}({', '.join(str(p) for p in parameters)})"
