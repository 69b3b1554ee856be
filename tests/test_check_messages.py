"""What a check says about a student's code is true of that code (issue 22, item 2).

Each test holds the student's code as the November teaching review wrote it
(shared/reviews/teaching-2026-11.md) and asserts the corrected message: the
old one said something false about it."""

import inspect
import math
import re

import pytest
import torch
from torch import nn

from helpers import check
from helpers.checking import CheckResult
from helpers.exercises import all_exercises
from helpers.probe import advice
from helpers.registry import GENERIC_ADVICE
from tests.submissions.ch02 import (
    ClonedParameter,
    DataAttribute,
    Float64Table,
    LMHeadDataShared,
    RescalesHiddenInPlace,
    RescalesLogits,
    TransposedView,
    WeightAsBuffer,
    WrappedInNewParameter,
)
from tests.submissions.ch03 import (
    PositionalEncodingAnnotated,
    PositionalEncodingFrozenEmbedding,
    PositionalEncodingFrozenParameter,
    TokenAndPositionConcatenated,
    shift_abs_k,
)
from tests.submissions.ch04 import BertPlain, LearnedLastPositionOffByOne
from tests.submissions.ch05 import (
    RotaryCached,
    RotaryLetsMaxLenThrough,
    RotaryNoLengthCheck,
    cache_base_1000,
    cache_ignores_base,
    rope_cache_llama31,
)
from tests.submissions.ch06 import slopes_official

# --- chapter 01 ------------------------------------------------------------------------


def one_hot_lookup_by_indexing(weight, ids):
    return weight[ids]


def one_hot_lookup_index_select(weight, ids):
    return weight.index_select(0, ids.reshape(-1)).reshape(*ids.shape, weight.shape[1])


def one_hot_lookup_elementwise(weight, ids):
    one_hot = torch.nn.functional.one_hot(ids, weight.shape[0]).to(weight.dtype)
    return (one_hot[..., None] * weight).sum(-2)  # a (..., V, d) intermediate


@pytest.mark.parametrize("fn", [one_hot_lookup_by_indexing, one_hot_lookup_index_select])
def test_one_hot_lookup_by_indexing_is_told_indexing(fn):
    result = check("one_hot_lookup", fn)
    assert result.diagnosis == "not_a_matrix_product", str(result)
    assert "by indexing the table" in result.message and "element by element" not in result.message


def test_one_hot_lookup_element_by_element_is_told_so():
    result = check("one_hot_lookup", one_hot_lookup_elementwise)
    assert result.diagnosis == "not_a_matrix_product" and "element by element" in result.message, str(result)


def embedding_backward_plus_equals(grad_out, ids, vocab_size, padding_idx=None):
    grad = torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device)
    grad[ids] += grad_out
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


def test_plus_equals_is_not_told_it_assigns():
    result = check("embedding_backward", embedding_backward_plus_equals)
    assert result.diagnosis == "no_accumulation", str(result)
    assert "`grad[ids] += grad_out` does the same" in result.message


def lookup_plus_bias(weight, ids):
    return weight[ids] + 0.01


def relative_shift_matrix_symmetric(k, d_model, base=10000.0):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        c, s = math.cos(k * base ** (-2 * i / d_model)), math.sin(k * base ** (-2 * i / d_model))
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [s, c]])
    return M


@pytest.mark.parametrize(
    "exercise, fn, says",
    [
        ("lookup", lookup_plus_bias, "weight[ids[b, t]]"),
        ("relative_shift_matrix", relative_shift_matrix_symmetric, "k = 1 and d_model = 2"),
    ],
)
def test_wrong_values_hints_fit_the_exercise(exercise, fn, says):
    """No "position 0, one token" where an exercise has no positions; a fix that is not the hint again."""
    result = check(exercise, fn)
    assert result.diagnosis == "wrong_values", str(result)
    assert says in result.hint and "position 0" not in result.hint + result.fix and result.hint != result.fix


def embedding_backward_mean(grad_out, ids, vocab_size, padding_idx=None):
    """Averages the uses of a repeated id instead of summing them."""
    d = grad_out.shape[-1]
    total = torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device).index_add_(
        0, ids.reshape(-1), grad_out.reshape(-1, d)
    )
    count = torch.bincount(ids.reshape(-1), minlength=vocab_size).clamp(min=1).to(grad_out.dtype)
    grad = total / count[:, None]
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


def test_embedding_backward_wrong_values_hint_is_one_id_used_twice():
    result = check("embedding_backward", embedding_backward_mean)
    assert result.diagnosis == "wrong_values", str(result)
    assert "one id used twice" in result.hint and "position 0" not in result.hint + result.fix


def test_the_generic_wrong_values_advice_names_no_positions_and_differs():
    hint, fix = GENERIC_ADVICE["wrong_values"]
    assert "position 0" not in hint + fix and hint != fix


def test_no_text_starts_with_a_capitalised_identifier():
    """advice() capitalises the first letter of each text: "nn.Embedding" must not become "Nn.Embedding"."""
    texts = [
        text for exercise in all_exercises().values() for code in exercise.mistakes for text in advice(exercise, code)
    ]
    assert texts and not [text for text in texts if text.startswith(("Nn.", "Torch.", "F."))]
    docstrings = [inspect.getdoc(m) or "" for e in all_exercises().values() for m in e.mistakes.values()]
    parts = [part.strip() for doc in docstrings for part in re.split(r"(?m)^(?:Hint|Fix):", doc) if part.strip()]
    identifiers = {part.split()[0] for part in parts if re.match(r"[a-z]\w*[_.(\[]|[^\x00-\x7f]", part)}
    assert not [text for text in texts if text.split()[0] in {i[:1].upper() + i[1:] for i in identifiers}]


def test_advice_capitalises_a_sentence_but_never_an_identifier():
    from helpers import registry

    def mistake():
        """relative_position is key minus query.

        Hint: θ_i is an angle per token.

        Fix: your code, then x.dtype."""

    exercise = registry.Exercise(
        id="t", chapter=0, points=1, kind="function", reference=len, check=len, mistakes={"wrong_values": mistake}
    )
    assert advice(exercise, "wrong_values") == (
        "relative_position is key minus query.",
        "θ_i is an angle per token.",
        "Your code, then x.dtype.",
    )


# --- chapter 03 ------------------------------------------------------------------------


class TokenAndPositionLearned(nn.Module):
    """An nn.Embedding as the position table: chapter 04's learned positions."""

    def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.d = d_model
        self.drop = nn.Dropout(dropout)

    def forward(self, ids):
        T = ids.shape[1]
        return self.drop(self.tok(ids) * math.sqrt(self.d) + self.pos(torch.arange(T, device=ids.device)))


def test_a_learned_position_table_is_named_and_its_fix_is_valid_code():
    result = check("TokenAndPositionEmbedding", TokenAndPositionLearned)
    assert result.diagnosis == "pe_is_parameter", str(result)
    assert "learned position table" in result.message and "drift" not in result.message
    assert "register_buffer('pe'" in result.fix and "pos.weight" not in result.fix


def sinusoidal_encoding_half(max_len, d_model, base=10000.0):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    angles = pos / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)[:, : d_model // 2]
    return pe.half()


def test_a_table_in_the_wrong_dtype_is_not_told_to_copy_an_input_dtype():
    """sinusoidal_encoding takes no tensor: `dtype=x.dtype` is no fix there."""
    result = check("sinusoidal_encoding", sinusoidal_encoding_half)
    assert result.diagnosis == "wrong_dtype", str(result)
    assert "x.dtype" not in result.fix and "float32" in result.fix


# --- chapter 04 ------------------------------------------------------------------------


class BertSeed002(nn.Module):
    """Seed 002's class with its device bug fixed: eps hard-coded to BERT's 1e-12."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


def test_a_hard_coded_eps_is_told_the_eps_it_uses():
    result = check("BertEmbeddings", BertSeed002)
    assert result.diagnosis == "layernorm_eps", str(result)
    assert result.message.startswith("Your LayerNorm uses eps = 1e-12") and "(1e-07 here)" in result.message
    assert "default is 1e-5" not in result.message


class BertBareDropout(BertPlain):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dropout = nn.Dropout()  # p = 0.5


def test_a_bare_dropout_is_told_its_rate_and_the_argument_to_use():
    result = check("BertEmbeddings", BertBareDropout)
    assert result.diagnosis == "dropout_rate_ignored", str(result)
    assert "p = 0.5" in result.message and "hidden_dropout_prob=0.25" in result.message
    assert "nn.Dropout(hidden_dropout_prob)" in result.fix


class LearnedIndexError(nn.Module):
    """Checks the length, then raises the wrong exception."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.pos = nn.Embedding(max_len, d_model)

    def forward(self, x):
        T = x.shape[1]
        if T > self.max_len:
            raise IndexError(f"sequence length {T} > max_len {self.max_len}")
        return x + self.pos(torch.arange(T, device=x.device))


def test_a_length_check_that_raises_index_error_is_told_it_checks():
    result = check("LearnedPositionalEmbedding", LearnedIndexError)
    assert result.diagnosis == "no_length_check", str(result)
    assert "checks the length, but raises IndexError" in result.message and "raise ValueError" in result.fix


class LearnedIndexedNoCheck(nn.Module):
    """No check at all: a Parameter indexed past its end raises torch's own IndexError (review L10)."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.table = nn.Parameter(torch.randn(max_len, d_model))

    def forward(self, x):
        return x + self.table[torch.arange(x.shape[1], device=x.device)]


class RotaryChecksTOnly(RotaryCached):
    """Checks T, never the positions it is given (review R7)."""

    def forward(self, q, k, positions=None):
        if q.shape[2] > self.max_len:
            raise ValueError(f"sequence length {q.shape[2]} > max_len {self.max_len}")
        return RotaryNoLengthCheck.forward(self, q, k, positions)


@pytest.mark.parametrize(
    "exercise, fn",
    [
        ("LearnedPositionalEmbedding", LearnedIndexedNoCheck),
        ("RotaryEmbedding", RotaryNoLengthCheck),
        ("RotaryEmbedding", RotaryChecksTOnly),
    ],
)
def test_torch_s_own_index_error_is_not_taken_for_a_check(exercise, fn):
    """torch's IndexError past a table means nothing refused the position: never "your check is in the right place"."""
    result = check(exercise, fn)
    assert result.diagnosis == "no_length_check", str(result)
    assert "checks the length" not in result.message and "right place" not in result.hint, str(result)
    assert "nothing in your forward refused the position" in result.message, str(result)


@pytest.mark.parametrize(
    "exercise, fn",
    [("RotaryEmbedding", RotaryLetsMaxLenThrough), ("LearnedPositionalEmbedding", LearnedLastPositionOffByOne)],
)
def test_a_check_that_lets_the_first_position_past_the_table_through_is_told_so(exercise, fn):
    """`>` where `>=` is needed (review R3): torch's own error at max_len, the module's ValueError one further. The
    check exists: the message says so, never "nothing refused" or "no check"."""
    result = check(exercise, fn)
    assert result.diagnosis == "length_check_off_by_one", str(result)
    assert "lets the first position past the table through" in result.message, str(result)
    assert "nothing in your forward refused" not in result.message and ">=" in result.fix, str(result)


class PositionalEncodingAddsInPlace(PositionalEncodingAnnotated):
    def forward(self, x):
        x += self.pe[:, : x.size(1)]
        return self.dropout(x)


@pytest.mark.parametrize(
    "exercise, fn, name",
    [("PositionalEncoding", PositionalEncodingAddsInPlace, "`x`"), ("TiedLMHead", RescalesHiddenInPlace, "`h`")],
)
def test_a_module_s_input_is_named_not_numbered(exercise, fn, name):
    result = check(exercise, fn)
    assert result.diagnosis == "mutated_input", str(result)
    assert f"changed its input {name} in place" in result.message and "argument 0" not in result.message


def test_the_verb_agrees_with_a_plural_subject():
    result = check("TiedLMHead", RescalesLogits)
    assert result.diagnosis == "wrong_values", str(result)
    assert (
        "the logits for h of shape (3, 5, 12): " in result.message
        and " entries differ from the reference" in result.message
    )


# --- chapters 01-04, the blind review of 2026-11-27 (shared/reviews/teaching-2026-11-27.md) -------------


@pytest.mark.parametrize(
    "exercise, name, says",
    [
        ("sinusoidal_encoding", "table_tf_tutorial_numpy", "use base 10000 where the `base` argument asked for 500"),
        ("sinusoidal_encoding", "table_base_1000", "use base 1000 instead of 10000"),
        ("relative_shift_matrix", "shift_hard_coded_base", "use base 10000 where the `base` argument asked for 500"),
        ("relative_shift_matrix", "shift_base_1000", "use base 1000 instead of 10000"),
        ("PositionalEncoding", "PositionalEncodingBase1000", "base 1000 where the exercise's is 10000"),
        ("TokenAndPositionEmbedding", "TokenAndPositionHardcodedBase", "base 1000 where the exercise's is 10000"),
    ],
)
def test_a_wrong_base_is_told_the_one_base_it_used(exercise, name, says):
    """E8: the probe knows which base the code used; a module, which takes no base, is never told of an argument."""
    from tests.submissions import ch03

    result = check(exercise, getattr(ch03, name))
    assert result.diagnosis == "wrong_base" and says in result.message, str(result)
    assert " or a hard-coded" not in result.message and "1000 instead of 10000 (a typo" not in result.message


@pytest.mark.parametrize("name", ["lookup_flattened_with_view", "lookup_squeezes_a_batch_of_one"])
def test_a_lookup_of_the_wrong_shape_is_given_shape_advice_not_the_values(name):
    """L4/L5: a wrong shape was told to compare out[0, 0] with a row, which its values already match."""
    from tests.submissions import ch01

    result = check("lookup", getattr(ch01, name))
    assert result.diagnosis == "wrong_shape", str(result)
    assert "keeps the shape of ids" in result.hint and "axis fewer" in result.fix and "out[0, 0]" not in result.fix


@pytest.mark.parametrize("name", ["one_hot_in_half", "one_hot_in_bfloat16_by_einsum"])
def test_a_one_hot_cast_to_another_float_is_not_told_it_holds_integers(name):
    """O5: the one-hot was converted, to the wrong float; the fix names the weight, the only tensor there is."""
    from tests.submissions import ch01

    result = check("one_hot_lookup", getattr(ch01, name))
    assert result.diagnosis == "raised", str(result)
    assert "converted to a float, but not to the weight's dtype" in result.hint and "integers" not in result.hint
    assert "weight.dtype" in result.fix and "x.dtype" not in result.fix


def test_a_float32_one_hot_is_told_to_take_the_weight_s_dtype_not_x_s():
    from tests.submissions.ch01 import one_hot_dot_float

    result = check("one_hot_lookup", one_hot_dot_float)
    assert result.diagnosis == "fixed_dtype" and "`dtype=weight.dtype`" in result.fix, str(result)
    assert "x.dtype" not in result.fix + result.hint


@pytest.mark.parametrize("name", ["TiedHeadTorchMm", "TiedHeadAddmm"])
def test_a_2d_only_product_is_told_it_takes_matrices_only(name):
    """T13: "self must be a matrix" was met with "read the last line of the error"."""
    from tests.submissions import ch02

    result = check("TiedLMHead", getattr(ch02, name))
    assert result.diagnosis == "raised", str(result)
    assert "2-D matrices" in result.hint and "h here is 3-D" in result.hint and "F.linear(h, self.weight)" in result.fix


@pytest.mark.parametrize("fn, loses_gradient", [("TiedHeadDetachedBuffer", True), ("WeightAsBuffer", False)])
def test_a_detached_buffer_is_told_it_loses_the_logits_gradient(fn, loses_gradient):
    """T14: the worst effect of a detached buffer; a buffer that is the Parameter itself still passes gradients."""
    from tests.submissions import ch02

    result = check("TiedLMHead", getattr(ch02, fn))
    assert result.diagnosis == "copy_not_tied", str(result)
    assert ("no gradient reaches the matrix through your logits" in result.message) == loses_gradient, str(result)


@pytest.mark.parametrize(
    "exercise, name, table",
    [
        ("PositionalEncoding", "PositionalEncoding2DSliced", "`pe` is 2-D, (50, 12)"),
        ("TokenAndPositionEmbedding", "TokenAndPosition2DSliced", "`pe` is 2-D, (30, 10)"),
        ("LearnedPositionalEmbedding", "LearnedWeightColumns", "`pos.weight` is 2-D, (20, 12)"),
    ],
)
def test_a_2d_table_sliced_as_pe_colon_t_is_told_it_takes_columns(exercise, name, table):
    """P1: `pe[:, :T]` on a 2-D buffer raised, and got the generic "read the last line of the error"."""
    from tests.submissions import ch03, ch04

    result = check(exercise, getattr(ch03, name, None) or getattr(ch04, name))
    assert result.diagnosis == "columns_sliced", str(result)
    assert table in result.message and "first T = 7 columns" in result.message and "[:T]`" in result.fix


def test_a_transposed_table_is_not_told_to_keep_batch_dimensions():
    """E7: a (d_model, max_len) table has no batch dimension to keep."""
    from tests.submissions.ch03 import table_exp_log

    result = check(
        "sinusoidal_encoding", lambda max_len, d_model, base=10000.0: table_exp_log(max_len, d_model, base).T
    )
    assert result.diagnosis == "wrong_shape" and "one row per position" in result.hint, str(result)
    assert "batch" not in result.fix and "positions along the rows" in result.fix


@pytest.mark.parametrize("name", ["TokenAndPositionReusesEncoding", "TokenAndPositionReusesEncodingFixedRate"])
def test_a_rate_not_passed_on_to_an_inner_module_is_told_so(name):
    """Q3: told of `nn.Dropout()` or a fixed 0.1, which the outer module does not hold."""
    from tests.submissions import ch03

    result = check("TokenAndPositionEmbedding", getattr(ch03, name))
    assert result.diagnosis == "dropout_rate_ignored", str(result)
    assert "inside your `positions` (PositionalEncodingAnnotated)" in result.hint and "dropout=dropout" in result.fix


@pytest.mark.parametrize("name", ["ScaledEmbeddingFreqScaled", "ScaledEmbeddingFunctionalFreqScaled"])
def test_a_gradient_divided_by_the_counts_is_told_so(name):
    """S9: scale_grad_by_freq got the generic "work out one entry by hand"."""
    from tests.submissions import ch02

    result = check("ScaledEmbedding", getattr(ch02, name))
    assert result.diagnosis == "grad_scaled_by_frequency", str(result)
    assert "rows used twice get half" in result.message and "scale_grad_by_freq" in result.fix


@pytest.mark.parametrize(
    "name, width", [("BertOneHotSegments", "a one-hot 1 wide"), ("BertOneHotWords", "one-hot 26659 wide")]
)
def test_a_one_hot_as_wide_as_the_ids_is_told_so_not_to_handle_none(name, width):
    """Issue 41, ids that never reach the last row: a one-hot without num_classes met a taller table. With
    token_type_ids=None it was told to handle None, which it does."""
    from tests.submissions import ch04

    result = check("BertEmbeddings", getattr(ch04, name))
    assert result.diagnosis == "size_from_ids" and width in result.message, str(result)
    assert "num_classes" in result.fix and "is None" not in result.fix


@pytest.mark.parametrize("name", ["BertTypesOrZeros", "BertTypesIfNot"])
def test_a_tensor_asked_for_its_truth_is_told_to_test_for_none(name):
    """BE5: `token_type_ids or ...` raised the generic "read the last line of the error"."""
    from tests.submissions import ch04

    result = check("BertEmbeddings", getattr(ch04, name))
    assert result.diagnosis == "raised" and "token_type_ids given" in result.message, str(result)
    assert "Only None" in result.hint and "is None" in result.fix


# --- chapter 06 ------------------------------------------------------------------------


def bias_minus_1e4(n_heads, seq_len):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return (-slopes_official(n_heads)[:, None, None] * (i - j)).masked_fill(j > i, -1e4)


def test_a_minus_1e4_mask_is_not_told_it_gives_the_future_weight():
    result = check("alibi_bias", bias_minus_1e4)
    assert result.diagnosis == "missing_causal_mask", str(result)
    assert "underflows to exactly 0" in result.message and "gives the future a weight" not in result.message
    assert "0 there is no mask" not in result.message


def slopes_odd_extras(n_heads):
    """The extra heads take slopes [1::2] of 2n' heads instead of [0::2]."""
    closest = 2 ** math.floor(math.log2(n_heads))
    rule = lambda n: [2 ** (-8 * (h + 1) / n) for h in range(n)]
    return torch.tensor(rule(closest) + rule(2 * closest)[1::2][: n_heads - closest])


def slopes_sorted(n_heads):
    return slopes_official(n_heads).sort(descending=True).values


@pytest.mark.parametrize("fn", [slopes_odd_extras, slopes_sorted])
def test_the_slopes_message_leads_with_what_the_slopes_are(fn):
    result = check("alibi_slopes", fn)
    assert result.diagnosis == "non_power_of_two", str(result)
    assert (
        result.message.startswith("Your slopes for")
        and "follow 2^(-8(h+1)/n) for every head count" not in result.message
    )


def alibi_slopes(n_heads):  # the student's own alibi_slopes, wrong for 12 heads
    return torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)])


def alibi_bias(n_heads, seq_len):  # right, on the slopes above
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return (-alibi_slopes(n_heads)[:, None, None] * (i - j)).masked_fill(j > i, float("-inf"))


def test_a_right_bias_on_wrong_slopes_is_told_to_fix_the_slopes():
    result = check("alibi_bias", alibi_bias)
    assert result.diagnosis == "non_power_of_two", str(result)
    assert "The rest of your bias is right" in result.message and 'check("alibi_slopes", alibi_slopes)' in result.fix
    assert "Build the bias from" not in result.fix


def bias_with_batch_axis(n_heads, seq_len):
    i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
    return (-slopes_official(n_heads)[:, None, None] * (i - j)).masked_fill(j > i, float("-inf"))[None]


def test_a_leading_axis_of_one_is_not_told_about_heads_last():
    result = check("alibi_bias", bias_with_batch_axis)
    assert result.diagnosis == "wrong_shape", str(result)
    assert "leading axis of size 1" in result.message and "(seq_len, seq_len, n_heads)" not in result.fix


# --- the panel --------------------------------------------------------------------------


def test_the_panel_shows_code_as_code_and_escapes_it_first():
    result = CheckResult(
        "lookup",
        False,
        "wrong_values",
        "use `a < b` and `x`",
        0,
        2,
        hint="the `<script>` hint",
        fix="`w[ids]`",
        also=["wrong_shape: `T`"],
    )
    page = result._repr_html_()
    assert "<code>a &lt; b</code>" in page and "<code>x</code>" in page and "<code>&lt;script&gt;</code>" in page
    assert "<code>w[ids]</code>" in page and "<code>T</code>" in page and "`" not in page


class BertSeed002AllFour(nn.Module):
    """Seed 002's class as written: positions on the CPU, no segment, eps hard-coded, a bare nn.Dropout()."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        pad_token_id=0,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout()

    def forward(self, input_ids, token_type_ids=None):
        positions = torch.arange(input_ids.shape[1])
        return self.dropout(self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions)))


def test_seed_002s_four_bugs_are_all_named_in_one_run():
    result = check("BertEmbeddings", BertSeed002AllFour)
    found = {result.diagnosis} | {finding.split(":")[0] for finding in result.also}
    assert found == {"missing_token_type", "layernorm_eps", "dropout_rate_ignored", "positions_on_cpu"}, str(result)


# --- chapter 05 (05-D11) ------------------------------------------------------------------


def rope_interleaved_cat_back(x, positions=None, base=10000.0):
    """Right pairs, written back with torch.cat: two halves instead of interleaved."""
    d = x.shape[-1]
    positions = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    angles = positions.float()[:, None] * base ** (-torch.arange(0, d, 2, device=x.device).float() / d)  # (T, d/2)
    x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
    y0, y1 = x0 * angles.cos() - x1 * angles.sin(), x0 * angles.sin() + x1 * angles.cos()
    return torch.cat((y0, y1), dim=-1).to(x.dtype)


def test_pairs_written_back_as_halves_are_told_so():
    result = check("rope_interleaved", rope_interleaved_cat_back)
    assert result.diagnosis == "wrong_values", str(result)
    assert "your pairs are turned right" in result.message and "stack((y0, y1), dim=-1).flatten(-2)" in result.fix


def apply_rope_sliced_then_gathered(q, k, cos, sin, positions=None):
    T = q.shape[-2]
    c, s = cos[:T], sin[:T]
    if positions is not None:
        c, s = c[positions], s[positions]  # positions >= T fall off the sliced rows
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]
    rotate = lambda x: torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)
    return q * c + rotate(q) * s, k * c + rotate(k) * s


def test_rows_sliced_before_the_gather_are_told_so():
    result = check("apply_rope", apply_rope_sliced_then_gathered)
    assert result.diagnosis == "raised", str(result)
    assert "cos[:T][positions]" in result.message and "cos[positions]" in result.fix


class BertPositionsByTokenIds(BertPlain):
    """04-D10: the position table looked up by the token ids."""

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.position_embeddings(
            input_ids.clamp(max=self.position_embeddings.num_embeddings - 1)
        )
        return self.dropout(self.LayerNorm(x + self.token_type_embeddings(token_type_ids)))


def test_bert_wrong_values_hint_fits_bert():
    """No "position 0, one token, d_model = 2" for a module whose sizes MiniLM fixes."""
    result = check("BertEmbeddings", BertPositionsByTokenIds)
    assert result.diagnosis == "wrong_values", str(result)
    assert (
        "three different ids" in result.hint
        and "position 0, one token" not in result.hint + result.fix
        and result.hint != result.fix
    )


# --- issue 32 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, how",
    [
        (WrappedInNewParameter, "a Parameter"),
        (LMHeadDataShared, "a Parameter"),
        (DataAttribute, "a plain attribute"),
        (TransposedView, "a plain attribute"),
        (WeightAsBuffer, "a buffer"),
    ],
)
def test_a_tie_through_shared_storage_is_told_its_real_faults(fn, how):
    """.data, a view or a buffer share the numbers: they never drift apart. The split gradient (two Parameters),
    the double count and the conversion by .to() that leaves them apart are what goes wrong."""
    result = check("TiedLMHead", fn)
    assert result.diagnosis == "copy_not_tied", str(result)
    assert f"{how} over the embedding's own storage" in result.message and "drift apart" not in result.message
    assert ("splits the gradient" in result.message) == (how == "a Parameter") and "`.to()`" in result.message


def test_a_real_copy_is_told_it_drifts_apart():
    result = check("TiedLMHead", ClonedParameter)
    assert result.diagnosis == "copy_not_tied" and "drift apart" in result.message, str(result)
    assert ".data" not in result.message


@pytest.mark.parametrize("fn", [PositionalEncodingFrozenParameter, PositionalEncodingFrozenEmbedding])
def test_a_frozen_table_is_not_told_the_optimizer_trains_it(fn):
    result = check("PositionalEncoding", fn)
    assert result.diagnosis == "pe_is_parameter", str(result)
    assert "nothing trains it now" in result.message and "would train it" not in result.message
    assert "requires_grad_(True)" in result.message and "register_buffer('pe'" in result.fix


def test_a_concatenation_is_not_told_to_drop_its_token_table():
    result = check("TokenAndPositionEmbedding", TokenAndPositionConcatenated)
    assert result.diagnosis == "wrong_shape" and "token embedding table" in result.message, str(result)
    assert "emb.weight (37, 5)" in result.message and "Drop `self.emb`" not in result.fix


def test_rescaled_frequencies_are_not_told_the_exponent_is_wrong():
    """Llama 3.1's bands keep some pairs and slow others: no exponent and no base makes that."""
    result = check("rope_cache", rope_cache_llama31)
    assert result.diagnosis == "wrong_values", str(result)
    assert "rescaling" in result.message and "exponent" not in result.hint.lower() + result.fix.lower(), str(result)


def sinusoidal_encoding_with_batch_axis(max_len, d_model, base=10000.0):
    """The Annotated Transformer's table, returned with its leading axis: (1, max_len, d)."""
    pe = torch.zeros(max_len, d_model)
    pos = torch.arange(max_len).float()[:, None]
    angles = pos * torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(base) / d_model))
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)[:, : d_model // 2]
    return pe.unsqueeze(0)


def test_an_extra_axis_is_told_to_drop_it_not_to_keep_batch_dimensions():
    result = check("sinusoidal_encoding", sinusoidal_encoding_with_batch_axis)
    assert result.diagnosis == "wrong_shape", str(result)
    assert "1 axis more" in result.fix and "keep every batch dimension" not in result.fix.lower()


def test_a_module_in_the_wrong_dtype_is_not_told_to_copy_its_ids_dtype():
    """ScaledEmbedding's input is Long ids: `dtype=x.dtype` would be no fix there."""
    result = check("ScaledEmbedding", Float64Table)
    assert result.diagnosis == "wrong_dtype", str(result)
    assert "x.dtype" not in result.fix and "torch.float32" in result.fix


def test_a_shift_matrix_right_for_positive_k_is_told_the_sign_is_lost():
    """abs(k): only k < 0 is wrong, so "each of your blocks is transposed" would be false for k = 3."""
    result = check("relative_shift_matrix", shift_abs_k)
    assert result.diagnosis == "shift_reversed", str(result)
    assert "right for k = 3" in result.message and "transpose" not in result.message


@pytest.mark.parametrize(
    "fn, says",
    [(cache_base_1000, "uses base 1000 where the default is 10000"), (cache_ignores_base, "ignores the base")],
)
def test_a_wrong_base_is_told_which_base_its_tables_hold(fn, says):
    result = check("rope_cache", fn)
    assert result.diagnosis == "wrong_base" and says in result.message, str(result)
    assert " or a hard-coded" not in result.message


def test_frequencies_that_grow_with_the_pair_are_said_to_grow_not_read_as_their_aliases():
    """pos * base ** (+2i/d) in float32: read off whole positions, its fast frequencies alias; the message says the
    pairs speed up and that the numbers past the first are not the code's own (review: 3.121 shown for 10^0.5)."""
    from tests.submissions.ch03 import table_times_the_power_float32

    result = check("sinusoidal_encoding", table_times_the_power_float32)
    assert result.diagnosis == "wrong_exponent", str(result)
    assert "turns faster than the first" in result.message and "not your frequencies" in result.message, str(result)
