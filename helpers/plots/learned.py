"""Chapter 04: learned positions and BERT: its figures."""

from __future__ import annotations

import torch

from helpers import reference
from helpers.plots.figure import pyplot


def _unit_rows(table: torch.Tensor) -> torch.Tensor:
    table = table.detach().float().cpu()
    return table / table.norm(dim=-1, keepdim=True)  # (N, d): cosine similarity is then a dot product


def learned_vs_sinusoidal(learned: torch.Tensor, untrained: torch.Tensor | None = None) -> None:
    """Cosine similarity between every pair of position vectors, (N, N), for
    a learned table, the sinusoidal table of the same size and, optionally,
    an untrained (randomly initialised) one."""
    plt = pyplot()
    N, d = learned.shape
    panels = {} if untrained is None else {"before training (random init)": untrained}
    panels["learned (MiniLM, after training)"] = learned
    panels["sinusoidal (fixed formula)"] = reference.sinusoidal_encoding(N, d)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1, 4.4))
    fig.subplots_adjust(
        left=0.06, right=0.9, bottom=0.12, top=0.84, wspace=0.3
    )  # fixed layout: constrained layout is slow
    for ax, (title, table) in zip(axes, panels.items()):
        unit = _unit_rows(table)
        image = ax.imshow(unit @ unit.T, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set(title=title, xlabel="position j", ylabel="position i")
    fig.colorbar(image, cax=fig.add_axes((0.92, 0.12, 0.012, 0.72)), label="cos(P[i], P[j])")
    fig.suptitle(f"Cosine similarity between {N} position vectors of size {d}")
    plt.show()


def position_similarity_row(learned: torch.Tensor, position: int) -> None:
    """One row of both heatmaps: how similar `position` is to every other one."""
    plt = pyplot()
    N, d = learned.shape
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for label, table in (("learned (MiniLM)", learned), ("sinusoidal", reference.sinusoidal_encoding(N, d))):
        unit = _unit_rows(table)
        ax.plot(range(N), unit @ unit[position], label=label, linewidth=1.2)
    ax.axvline(position, color="0.5", linestyle=":", linewidth=1)
    ax.set(
        title=f"How similar is position {position} to every other position?",
        xlabel="position j",
        ylabel=f"cos(P[{position}], P[j])",
        ylim=(-0.6, 1.05),
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    plt.show()


def position_components(table: torch.Tensor, zoom: int = 48) -> None:
    """The learned positions along their top principal directions: each
    position's coordinates on PC1..PC4 of the centred (N, d) table."""
    plt = pyplot()
    table = table.detach().float().cpu()
    centred = table - table.mean(dim=0)  # (N, d)
    U, S, _ = torch.linalg.svd(centred, full_matrices=False)
    scores = U * S  # (N, r): coordinates of each position along each principal direction
    share = S**2 / (S**2).sum()  # fraction of the variance along each direction
    N = table.shape[0]
    period = N / float(torch.fft.rfft(scores[:, 0]).abs()[1:].argmax() + 1)  # PC1's strongest frequency, as a period
    fig, (fast, slow, circle) = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    fig.subplots_adjust(
        left=0.05, right=0.95, bottom=0.13, top=0.83, wspace=0.3
    )  # fixed layout: constrained layout is slow
    for k in (0, 1):
        fast.plot(
            range(zoom), scores[:zoom, k], "o-", markersize=3, label=f"PC{k + 1} ({share[k]:.0%} of the variance)"
        )
    fast.set(
        title=f"PC1 and PC2, first {zoom} positions (period ≈ {period:.1f})", xlabel="position", ylabel="coordinate"
    )
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
