"""Chapter 01: lookup tables: its figures."""

from __future__ import annotations

import torch

from helpers.plots.figure import pyplot


def lookup_picture(
    weight: torch.Tensor, ids: torch.Tensor, tokens: list[str] | None = None, highlight: int | None = None
) -> None:
    """The table W (V, d) on the left, the looked-up rows on the right:
    out[j] = W[ids[j]]. Arrows join each id to its row."""
    plt = pyplot()
    weight, ids = weight.detach().cpu(), ids.detach().cpu().flatten()
    out = weight[ids]
    tokens = tokens or [str(int(i)) for i in ids]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1, 1.1]})
    limit = float(weight.abs().max())
    left.imshow(weight, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit)
    left.set(title=f"embedding table W  {tuple(weight.shape)}", xlabel="dimension (d_model)", ylabel="token id (row)")
    if weight.shape[0] <= 40:  # a tick per row, so every id the text uses can be read off: bold if used, grey if not
        used = set(ids.tolist())
        left.set_yticks(range(weight.shape[0]))
        for row, label in enumerate(left.get_yticklabels()):
            label.set(fontweight="bold" if row in used else "normal", color="black" if row in used else "0.6")
    right.imshow(out, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit)
    right.set(title=f"out = W[ids]  {tuple(out.shape)}", xlabel="dimension (d_model)", ylabel="position in the text")
    right.set_yticks(range(len(ids)), [f"{t}  (id {int(i)})" for t, i in zip(tokens, ids)])
    for j, i in enumerate(ids.tolist()):
        chosen = highlight is None or highlight == j
        colour, width = ("black", 1.5) if chosen else ("0.75", 0.6)
        left.add_patch(
            plt.Rectangle((-0.5, i - 0.5), weight.shape[1], 1, fill=False, edgecolor=colour, linewidth=width)
        )
        if chosen:
            right.add_patch(
                plt.Rectangle((-0.5, j - 0.5), weight.shape[1], 1, fill=False, edgecolor="black", linewidth=2)
            )
    fig.suptitle("An embedding is a lookup: row ids[j] of W becomes output row j")
    fig.tight_layout()
    plt.show()


def lookup_cost(vocab_sizes: list[int], gather_ms: list[float], one_hot_ms: list[float]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.loglog(vocab_sizes, one_hot_ms, "o-", label="one_hot(ids) @ W")
    ax.loglog(vocab_sizes, gather_ms, "s-", label="W[ids] (gather)")
    ax.set(title="Same result, very different cost", xlabel="vocabulary size V", ylabel="time per call (ms)")
    ax.legend()
    fig.tight_layout()
    plt.show()


def gradient_rows(grad: torch.Tensor, used: list[int]) -> None:
    """Which rows of the table received a gradient."""
    plt = pyplot()
    norms = grad.detach().cpu().norm(dim=1)
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.bar(range(len(norms)), norms, color=["C3" if i in used else "0.7" for i in range(len(norms))])
    ax.set(
        title="Gradient norm per row of W after one backward pass", xlabel="token id (row of W)", ylabel="‖∂loss/∂W[i]‖"
    )
    fig.tight_layout()
    plt.show()
