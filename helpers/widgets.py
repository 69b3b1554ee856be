"""The course's sliders. Each function returns a live ipywidgets control
whose figure redraws as the slider moves. ipywidgets is imported inside
each function, never by `import helpers`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from helpers import plots

if TYPE_CHECKING:  # imported inside each function, never by `import helpers`
    import ipywidgets


def _explorer(draw: Callable[..., None], **controls: Any) -> ipywidgets.interactive:
    """`ipywidgets.interactive(draw, **controls)`, with its first figure drawn
    outside the Output widget and handed to it as widget state.

    Why: drawn inside the Output widget while the cell runs (what
    `interactive` does), the figure reaches a plain nbclient (nbconvert
    --execute, papermill, nbgrader, helpers.release) as output captured by
    its mock Output widget, which answers with a comm message sent on the
    shell socket while another coroutine waits on that same socket for the
    cell's execute_reply. Under load the reply's wake-up is then lost and the
    cell stalls until nbclient's timeout (for ever without one): nbclient's
    https://github.com/jupyter/nbclient/issues/312 (fix proposed in
    https://github.com/jupyter/nbclient/pull/311). `Output.append_display_data`
    sets the figure as state from the kernel, which a client only receives.
    Later redraws (a slider moved in JupyterLab) go through the Output widget
    as usual: no nbclient is waiting then."""
    import ipywidgets as widgets
    from IPython.utils.capture import capture_output

    drawing = False  # `interactive` calls draw once while it is built: skipped, done below

    def redraw(**values: Any) -> None:
        if drawing:
            draw(**values)

    explorer = widgets.interactive(redraw, **controls)
    with capture_output(stdout=False, stderr=False) as first:  # the figure's display_data, not shown in the cell
        draw(**explorer.kwargs)  # the controls' values, as `interactive` read them
    for output in first.outputs:
        explorer.out.append_display_data(output)
    drawing = True
    return explorer


# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def lookup_explorer(weight: torch.Tensor, ids: torch.Tensor, tokens: list[str]) -> ipywidgets.interactive:
    """Slide over the positions of a text: the token's row lights up in W."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=0, min=0, max=len(tokens) - 1, description="position", continuous_update=False)
    return _explorer(lambda position: plots.lookup_picture(weight, ids, tokens, highlight=position), position=slider)


# ---------------------------------------------------------------------------
# Chapter 02: scaling and weight tying
# ---------------------------------------------------------------------------


def scale_explorer(d_model: int = 512) -> ipywidgets.interactive:
    """Slide over d_model: token norms (two inits, with and without × √d) against the positional norm."""
    import ipywidgets as widgets

    slider = widgets.SelectionSlider(
        options=list(plots.D_MODELS), value=d_model, description="d_model", continuous_update=False
    )
    return _explorer(lambda d_model: plots.embedding_norms(d_model), d_model=slider)


# (end of chapter 02)


# ---------------------------------------------------------------------------
# Chapter 03: sinusoidal encodings
# ---------------------------------------------------------------------------


def sinusoidal_explorer(pe: torch.Tensor, position: int = 10, pair: int = 0) -> ipywidgets.interactive:
    """Two sliders: a position (its vector) and a column pair (its wave along the positions)."""
    import ipywidgets as widgets

    N, d = pe.shape
    positions = widgets.IntSlider(value=position, min=0, max=N - 1, description="position", continuous_update=False)
    pairs = widgets.IntSlider(value=pair, min=0, max=(d + 1) // 2 - 1, description="pair i", continuous_update=False)
    return _explorer(lambda position, pair: plots.sinusoidal_slices(pe, position, pair), position=positions, pair=pairs)


# (end of chapter 03)


# ---------------------------------------------------------------------------
# Chapter 04: learned positions and BERT
# ---------------------------------------------------------------------------


def position_similarity_explorer(learned: torch.Tensor, position: int = 10) -> ipywidgets.interactive:
    """Pick a position: its cosine similarity to every other position, learned vs sinusoidal."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(
        value=position, min=0, max=learned.shape[0] - 1, description="position", continuous_update=False
    )
    return _explorer(lambda position: plots.position_similarity_row(learned, position), position=slider)


# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------


def rope_rotation_explorer(thetas: list[float], max_position: int = 300) -> ipywidgets.interactive:
    """Slide the position: each pair turns by position·θ_i, fast pairs spin, slow ones creep."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=10, min=0, max=max_position, description="position m", continuous_update=False)
    return _explorer(lambda position: plots.rope_pairs(position, thetas), position=slider)


# (end of chapter 05)


# ---------------------------------------------------------------------------
# Chapter 06: comparing, and ALiBi
# ---------------------------------------------------------------------------


def alibi_explorer(slopes: torch.Tensor, head: int = 0) -> ipywidgets.interactive:
    """Slide over the heads: how far back each one looks."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=head, min=0, max=len(slopes) - 1, description="head", continuous_update=False)
    return _explorer(lambda head: plots.alibi_reach(slopes, head), head=slider)


# (end of chapter 06)


# ---------------------------------------------------------------------------
# Chapter 07: long context
# ---------------------------------------------------------------------------

FACTORS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0, 64.0)


def scaling_explorer(methods: dict, plain: torch.Tensor, trained: int, factor: float = 4.0) -> ipywidgets.interactive:
    """Slide the factor s: each method (name -> s -> (inv_freq, attention_scale)) redrawn, pair by pair."""
    import ipywidgets as widgets

    slider = widgets.SelectionSlider(
        options=list(FACTORS), value=factor, description="factor s", continuous_update=False
    )
    return _explorer(
        lambda factor: plots.slowdown_by_pair(
            {name: method(factor) for name, method in methods.items()}, plain, trained, factor
        ),
        factor=slider,
    )


# (end of chapter 07)


# ---------------------------------------------------------------------------
# Chapter 08: positions in practice
# ---------------------------------------------------------------------------


def streaming_explorer(
    streaming_positions: Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]],
    n_sink: int = 4,
    window: int = 12,
    seq_len: int = 24,
    longest: int = 64,
) -> ipywidgets.interactive:
    """Slide the number of tokens seen: which ones a StreamingLLM cache keeps, and at which slots."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=seq_len, min=1, max=longest, description="tokens seen", continuous_update=False)
    return _explorer(
        lambda seq_len: plots.streaming_cache(seq_len, *streaming_positions(seq_len, n_sink, window), n_sink, window),
        seq_len=slider,
    )
