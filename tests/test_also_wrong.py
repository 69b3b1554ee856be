"""Every independent mistake is named, by its own code (issue 22, item 4).

For each exercise whose catalogue holds two or more mistakes, INDEPENDENT says which pairs are
independent aspects of the code (the layout and the frequencies of a table, the turn's direction
and the positions it reads...), and ONE_ASPECT why an exercise has none: there every catalogue
mistake is another value of one and the same choice, so two of them cannot be made at once.
Each declared pair has a submission in some `ALSO` list of tests/submissions that makes both
mistakes; tests/test_checks.py runs them all and asserts that the first is the diagnosis and the
other is listed under "Also wrong" by its own code, never as wrong_values."""

from helpers.exercises import all_exercises
from tests.conftest import submission_modules

INDEPENDENT = {
    # the sum over a repeated id's uses, and the padding row zeroed (transposed_weight: the whole result's layout, which hides both)
    "embedding_backward": [("no_accumulation", "padding_row_updated")],
    # the Parameter shared, the bias, the softmax: three separate lines of the module
    "TiedLMHead": [
        ("copy_not_tied", "has_bias"),
        ("copy_not_tied", "returns_probabilities"),
        ("returns_probabilities", "has_bias"),
    ],
    # a table's layout (sin_cos_swapped, concatenated_halves), its frequencies (wrong_base, wrong_exponent) and its
    # positions (position_offset); all_zeros leaves nothing else to see
    "sinusoidal_encoding": [
        ("concatenated_halves", "wrong_exponent"),
        ("concatenated_halves", "position_offset"),
        ("sin_cos_swapped", "position_offset"),
        ("concatenated_halves", "wrong_base"),
    ],
    "relative_shift_matrix": [("concatenated_halves", "wrong_base")],
    "PositionalEncoding": [("concatenated_halves", "wrong_exponent")],
    # the table (its layout, its frequencies) and the token scale
    "TokenAndPositionEmbedding": [("concatenated_halves", "wrong_exponent"), ("sin_cos_swapped", "missing_scale")],
    # what is summed, and the LayerNorm's eps (seed 002)
    "BertEmbeddings": [("missing_token_type", "layernorm_eps")],
    # RoPE: which components pair up (the layout), the angles' frequencies, the turn's direction, the positions read
    "rope_cache": [("rope_interleaved_convention", "wrong_exponent")],
    "rotate_half": [("rope_interleaved_convention", "rope_sign_flip")],
    "apply_rope": [("rope_interleaved_convention", "rope_sign_flip")],
    "rope_interleaved": [("rope_half_split_convention", "rope_sign_flip"), ("rope_sign_flip", "wrong_exponent")],
    "RotaryEmbedding": [("rope_interleaved_convention", "wrong_exponent")],
    "rope_from_shift_matrix": [("rope_sign_flip", "rope_ignores_positions")],
    # where the turned part sits in the head, and the turn's direction
    "apply_partial_rope": [("partial_rope_last_dims", "rope_sign_flip")],
    # ALiBi: the slopes' sign, the rule for a head count that is not a power of two, the mask
    "alibi_slopes": [("wrong_sign", "non_power_of_two")],
    "alibi_bias": [
        ("missing_causal_mask", "wrong_sign"),
        ("missing_causal_mask", "non_power_of_two"),
        ("wrong_sign", "non_power_of_two"),
    ],
    # T5's buckets: the split by sign, and the clamp of the far distances (two separate steps)
    "t5_relative_bucket": [("bucket_sign_split_missing", "bucket_not_clamped")],
    # dynamic NTK: what happens up to the trained length, and what past it (two sides of one if)
    "dynamic_ntk_scaling": [("scaled_within_original_length", "dynamic_wrong_scale")],
    # YaRN: which pairs are interpolated (the ramp), and the attention temperature (a second output)
    "yarn_scaling": [("ramp_reversed", "missing_temperature")],
}

ONE_ASPECT = {
    "linear_scaling": "factor_inverted and wrong_exponent are two wrong values of the one frequency vector, θ_i/s: "
    "its attention scale, the other output, has no catalogue mistake",
    "ntk_scaling": "factor_inverted and ntk_wrong_exponent are two answers to the one question 'what is the new base'",
    "llama3_scaling": "its four mistakes all move the one piecewise rule that maps each θ_i (the bands' edges, their "
    "direction, the wavelength, the factor): the scale it returns is always 1.0",
    "ScaledEmbedding": "missing_scale, divided_by_scale and wrong_scale are three values of the one factor the rows are multiplied by",
    "LearnedPositionalEmbedding": "same_row_every_position, batch_seq_confusion and position_offset are three answers to the one question "
    "'which rows of the table are added': row 0 everywhere, rows along the batch, rows from 1",
}

ALSO = [case for m in submission_modules() for case in getattr(m, "ALSO", [])]


def test_every_exercise_with_two_mistakes_says_which_are_independent():
    several = {e.id for e in all_exercises().values() if len(e.mistakes) >= 2}
    assert several - set(INDEPENDENT) - set(ONE_ASPECT) == set()
    assert not set(INDEPENDENT) & set(ONE_ASPECT)
    for exercise, pairs in INDEPENDENT.items():
        codes = set(all_exercises()[exercise].mistakes)
        assert pairs and all(set(pair) <= codes for pair in pairs), f"{exercise}: {pairs} are not all its catalogue's"


def test_every_independent_pair_has_a_submission_that_makes_both():
    made = {(exercise, frozenset((code, also))) for exercise, code, also, _ in ALSO}
    missing = [
        (exercise, pair)
        for exercise, pairs in INDEPENDENT.items()
        for pair in pairs
        if (exercise, frozenset(pair)) not in made
    ]
    assert missing == []
