"""The course's sliders. Each function returns a live ipywidgets control
whose figure redraws as the slider moves. ipywidgets is imported inside
each function, never by `import helpers`."""

from __future__ import annotations

import torch

from helpers import plots

# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def lookup_explorer(weight: torch.Tensor, ids: torch.Tensor, tokens: list[str]):
    """Slide over the positions of a text: the token's row lights up in W."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=0, min=0, max=len(tokens) - 1, description="position", continuous_update=False)
    return widgets.interactive(lambda position: plots.lookup_picture(weight, ids, tokens, highlight=position), position=slider)


# ---------------------------------------------------------------------------
# Chapter 02: scaling and weight tying
# ---------------------------------------------------------------------------

# (end of chapter 02)


# ---------------------------------------------------------------------------
# Chapter 03: sinusoidal encodings
# ---------------------------------------------------------------------------

# (end of chapter 03)


# ---------------------------------------------------------------------------
# Chapter 04: learned positions and BERT
# ---------------------------------------------------------------------------


def position_similarity_explorer(learned: torch.Tensor, position: int = 10):
    """Pick a position: its cosine similarity to every other position, learned vs sinusoidal."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=position, min=0, max=learned.shape[0] - 1, description="position", continuous_update=False)
    return widgets.interactive(lambda position: plots.position_similarity_row(learned, position), position=slider)


# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# (end of chapter 05)
