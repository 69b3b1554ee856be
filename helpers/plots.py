"""The course's figures. Each function draws one picture and shows it.

matplotlib is imported inside each function (never by `import helpers`).
Every figure has a title and labelled axes; the notebook says, above it,
what to notice.
"""

from __future__ import annotations

import torch


def _plt():
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def lookup_picture(weight: torch.Tensor, ids: torch.Tensor, tokens: list[str] | None = None, highlight: int | None = None) -> None:
    """The table W (V, d) on the left, the looked-up rows on the right:
    out[j] = W[ids[j]]. Arrows join each id to its row."""
    plt = _plt()
    weight, ids = weight.detach().cpu(), ids.detach().cpu().flatten()
    out = weight[ids]
    tokens = tokens or [str(int(i)) for i in ids]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1, 1.1]})
    limit = float(weight.abs().max())
    left.imshow(weight, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit)
    left.set(title=f"embedding table W  {tuple(weight.shape)}", xlabel="dimension (d_model)", ylabel="token id (row)")
    right.imshow(out, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit)
    right.set(title=f"out = W[ids]  {tuple(out.shape)}", xlabel="dimension (d_model)", ylabel="position in the text")
    right.set_yticks(range(len(ids)), [f"{t}  (id {int(i)})" for t, i in zip(tokens, ids)])
    for j, i in enumerate(ids.tolist()):
        chosen = highlight is None or highlight == j
        colour, width = ("black", 1.5) if chosen else ("0.75", 0.6)
        left.add_patch(plt.Rectangle((-0.5, i - 0.5), weight.shape[1], 1, fill=False, edgecolor=colour, linewidth=width))
        if chosen:
            right.add_patch(plt.Rectangle((-0.5, j - 0.5), weight.shape[1], 1, fill=False, edgecolor="black", linewidth=2))
    fig.suptitle("An embedding is a lookup: row ids[j] of W becomes output row j")
    fig.tight_layout()
    plt.show()


def lookup_cost(vocab_sizes: list[int], gather_ms: list[float], one_hot_ms: list[float]) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.loglog(vocab_sizes, one_hot_ms, "o-", label="one_hot(ids) @ W")
    ax.loglog(vocab_sizes, gather_ms, "s-", label="W[ids] (gather)")
    ax.set(title="Same result, very different cost", xlabel="vocabulary size V", ylabel="time per call (ms)")
    ax.legend()
    fig.tight_layout()
    plt.show()


def gradient_rows(grad: torch.Tensor, used: list[int]) -> None:
    """Which rows of the table received a gradient."""
    plt = _plt()
    norms = grad.detach().cpu().norm(dim=1)
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.bar(range(len(norms)), norms, color=["C3" if i in used else "0.7" for i in range(len(norms))])
    ax.set(title="Gradient norm per row of W after one backward pass", xlabel="token id (row of W)", ylabel="‖∂loss/∂W[i]‖")
    fig.tight_layout()
    plt.show()


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


def _sinusoidal(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al.'s fixed table, interleaved (sin in even columns, cos in
    odd ones), only for comparison pictures; chapter 03 builds it properly."""
    import math

    position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (N, 1)
    frequency = torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (ceil(d/2),)
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table


def _unit_rows(table: torch.Tensor) -> torch.Tensor:
    table = table.detach().float().cpu()
    return table / table.norm(dim=-1, keepdim=True)  # (N, d): cosine similarity is then a dot product


def learned_vs_sinusoidal(learned: torch.Tensor, untrained: torch.Tensor | None = None) -> None:
    """Cosine similarity between every pair of position vectors, (N, N), for
    a learned table, the sinusoidal table of the same size and, optionally,
    an untrained (randomly initialised) one."""
    plt = _plt()
    N, d = learned.shape
    panels = {} if untrained is None else {"before training (random init)": untrained}
    panels["learned (MiniLM, after training)"] = learned
    panels["sinusoidal (fixed formula)"] = _sinusoidal(N, d)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1, 4.4))
    fig.subplots_adjust(left=0.06, right=0.9, bottom=0.12, top=0.84, wspace=0.3)  # fixed layout: constrained layout is slow
    for ax, (title, table) in zip(axes, panels.items()):
        unit = _unit_rows(table)
        image = ax.imshow(unit @ unit.T, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set(title=title, xlabel="position j", ylabel="position i")
    fig.colorbar(image, cax=fig.add_axes((0.92, 0.12, 0.012, 0.72)), label="cos(P[i], P[j])")
    fig.suptitle(f"Cosine similarity between {N} position vectors of size {d}")
    plt.show()


def position_similarity_row(learned: torch.Tensor, position: int) -> None:
    """One row of both heatmaps: how similar `position` is to every other one."""
    plt = _plt()
    N, d = learned.shape
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for label, table in (("learned (MiniLM)", learned), ("sinusoidal", _sinusoidal(N, d))):
        unit = _unit_rows(table)
        ax.plot(range(N), unit @ unit[position], label=label, linewidth=1.2)
    ax.axvline(position, color="0.5", linestyle=":", linewidth=1)
    ax.set(title=f"How similar is position {position} to every other position?", xlabel="position j", ylabel=f"cos(P[{position}], P[j])", ylim=(-0.6, 1.05))
    ax.legend(loc="lower right")
    fig.tight_layout()
    plt.show()


def position_components(table: torch.Tensor, zoom: int = 48) -> None:
    """The learned positions along their top principal directions: each
    position's coordinates on PC1..PC4 of the centred (N, d) table."""
    plt = _plt()
    table = table.detach().float().cpu()
    centred = table - table.mean(dim=0)  # (N, d)
    U, S, _ = torch.linalg.svd(centred, full_matrices=False)
    scores = U * S  # (N, r): coordinates of each position along each principal direction
    share = S**2 / (S**2).sum()  # fraction of the variance along each direction
    N = table.shape[0]
    period = N / float(torch.fft.rfft(scores[:, 0]).abs()[1:].argmax() + 1)  # PC1's strongest frequency, as a period
    fig, (fast, slow, circle) = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    fig.subplots_adjust(left=0.05, right=0.95, bottom=0.13, top=0.83, wspace=0.3)  # fixed layout: constrained layout is slow
    for k in (0, 1):
        fast.plot(range(zoom), scores[:zoom, k], "o-", markersize=3, label=f"PC{k + 1} ({share[k]:.0%} of the variance)")
    fast.set(title=f"PC1 and PC2, first {zoom} positions (period ≈ {period:.1f})", xlabel="position", ylabel="coordinate")
    fast.legend(loc="lower right", fontsize=8)
    for k in (2, 3):
        slow.plot(range(N), scores[:, k], label=f"PC{k + 1} ({share[k]:.0%})")
    slow.set(title="PC3 and PC4, all positions", xlabel="position", ylabel="coordinate")
    slow.legend(loc="lower right", fontsize=8)
    points = circle.scatter(scores[:, 0], scores[:, 1], c=range(N), cmap="viridis", s=6)
    circle.set(title="PC1 against PC2", xlabel="PC1", ylabel="PC2", aspect="equal")
    fig.colorbar(points, ax=circle, label="position")
    fig.suptitle(f"Principal components of the {N} learned position vectors")
    plt.show()


# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------

# (end of chapter 05)
