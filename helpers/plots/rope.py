"""Chapter 05: rotary embeddings (RoPE): its figures."""

from __future__ import annotations

import torch

from helpers.plots.figure import pyplot


def rope_pairs(position: int, thetas: list[float], pair: tuple[float, float] = (1.0, 0.0), trail: int = 400) -> None:
    """One panel per frequency: pair j turned by position·θ_j,
    with the positions before it as a fading trail."""
    import math

    plt = pyplot()
    fig, axes = plt.subplots(1, len(thetas), figsize=(3 * len(thetas), 3.3))
    radius = math.hypot(*pair)
    start = math.atan2(pair[1], pair[0])
    for i, (ax, theta) in enumerate(zip(axes, thetas)):
        earlier = torch.arange(max(0, position - trail), position + 1, dtype=torch.float64)
        angles = start + earlier * theta
        ax.plot(radius * torch.cos(angles), radius * torch.sin(angles), ".", color="C0", alpha=0.25, markersize=3)
        angle = start + position * theta
        ax.annotate(
            "",
            xy=(radius * math.cos(angle), radius * math.sin(angle)),
            xytext=(0, 0),
            arrowprops={"arrowstyle": "->", "color": "C3", "lw": 2},
        )
        ax.annotate(
            "",
            xy=(radius * math.cos(start), radius * math.sin(start)),
            xytext=(0, 0),
            arrowprops={"arrowstyle": "->", "color": "0.6", "lw": 1, "ls": "--"},
        )
        ax.add_patch(plt.Circle((0, 0), radius, fill=False, color="0.85"))
        ax.set(
            xlim=(-1.2 * radius, 1.2 * radius),
            ylim=(-1.2 * radius, 1.2 * radius),
            aspect="equal",
            xlabel="1st component of the pair",
            ylabel="2nd component",
        )
        ax.set_title(f"pair {i}: θ = {theta:.3g}\nangle = {position * theta:.3g} rad", fontsize=10)
    fig.suptitle(f"RoPE at position m = {position}: pair j turns by m·θ_j (grey: position 0)")
    fig.tight_layout()
    plt.show()


def rope_frequencies(head_dim: int, bases: list[float]) -> None:
    """θ_j and the wavelength 2π/θ_j (in tokens) of every pair j, for a few bases."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    for base in bases:
        theta = base ** (-2 * i / head_dim)
        left.semilogy(i, theta, label=f"base {base:g}")
        right.semilogy(i, 2 * torch.pi / theta, label=f"base {base:g}")
    left.set(title=f"Frequencies θ_j = base^(-2j/{head_dim})", xlabel="pair index j", ylabel="θ_j (radians per token)")
    right.set(title="Wavelength: tokens for one full turn", xlabel="pair index j", ylabel="2π / θ_j (tokens)")
    left.legend()
    right.legend()
    fig.tight_layout()
    plt.show()


def rope_table(cos: torch.Tensor, positions: int = 64) -> None:
    """The cos table of rope_cache: the left and right halves are the same picture."""
    plt = pyplot()
    table = cos[:positions].detach().cpu()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    image = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    half = table.shape[1] / 2 - 0.5
    ax.axvline(half, color="black", lw=1.5, ls="--")
    ax.set(
        title="cos(m·θ_j), half-split layout: columns j and j + d/2 hold pair j's angle",
        xlabel="column of the table (head dimension)",
        ylabel="position m",
    )
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    plt.show()


def rope_matrices(matrices: dict[str, torch.Tensor], position: int) -> None:
    """The (d, d) matrix that RoPE applies at one position, for each layout, every
    non-zero entry written in (a cos or a ±sin of m·θ_j), with a colour scale."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(matrices), figsize=(4.6 * len(matrices), 4.2), layout="constrained")
    for ax, (name, matrix) in zip(axes, matrices.items()):
        matrix = matrix.detach().cpu()
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
        if matrix.shape[0] <= 16:  # small enough to read every entry
            for (row, column), value in zip(matrix.nonzero().tolist(), matrix[matrix != 0].tolist()):
                ax.text(
                    column,
                    row,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    color="white" if abs(value) > 0.6 else "black",
                )
        ax.set(title=name, xlabel="input component", ylabel="output component")
    fig.colorbar(image, ax=list(axes), label="entry: cos(m·θ_j) or ±sin(m·θ_j)", shrink=0.8)
    fig.suptitle(f"The rotation RoPE applies at position {position}: same angles, different pairs")
    plt.show()


def relative_scores(scores: torch.Tensor) -> None:
    """q_m·k_n for every (m, n): constant along each diagonal m − n = const."""
    plt = pyplot()
    scores = scores.detach().cpu()
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    image = ax.imshow(scores, cmap="RdBu_r", vmin=-scores.abs().max(), vmax=scores.abs().max())
    ax.set(title="q_m · k_n: the same q and k at every position", xlabel="key position n", ylabel="query position m")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    plt.show()


def rope_decay(
    distances: torch.Tensor,
    bounds: dict[str, torch.Tensor],
    random_pairs: dict[str, torch.Tensor],
    aligned: dict[str, torch.Tensor],
) -> None:
    """Three views of "long-term decay" against the distance m − n, side by side:
    RoFormer's §3.4.3 upper bound (a worst case, not a score), statistics of the
    score of independent random q and k (flat: a rotation of a random vector is
    another random vector), and the mean score of aligned q and k (it decays)."""
    plt = pyplot()
    x = distances.cpu()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = [
        (bounds, "RoFormer's bound (a worst case, not a score)", "relative upper bound  (2/d) Σ_r |S_r|"),
        (random_pairs, "Independent random q and k: no decay", "score q_m·k_n, over the random pairs"),
        (aligned, "Aligned q and k: the mean score decays", "mean score q_m·k_n"),
    ]
    for ax, (curves, title, ylabel) in zip(axes, panels):
        for n, (name, curve) in enumerate(curves.items()):
            ax.plot(x, curve.cpu(), "--" if "formula" in name else "-", color=f"C{n}", linewidth=1.2, label=name)
        ax.axhline(0, color="0.7", linewidth=0.8)
        ax.set(title=title, xlabel="distance m − n (tokens)", ylabel=ylabel)
        ax.legend(fontsize=8)
    fig.suptitle("Long-term decay: the bound and aligned pairs decay with distance, unrelated pairs do not")
    fig.tight_layout()
    plt.show()


def bf16_positions(positions: torch.Tensor, zoom: tuple[int, int] = (248, 272), theta: float = 1.0) -> None:
    """What bfloat16 does to positions (zoomed in around 256), and to the angle m·θ."""
    plt = pyplot()
    positions = positions.to(torch.float64)
    stored = positions.to(torch.bfloat16).to(torch.float64)
    angle_error = (stored * theta - positions * theta).abs()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    near = (positions >= zoom[0]) & (positions <= zoom[1])
    left.plot(positions[near], positions[near], "o", color="0.6", markersize=4, label="exact position")
    left.plot(positions[near], stored[near], "s", color="C3", markersize=4, label="stored in bfloat16")
    left.set(title="Past 256, bfloat16 skips integers", xlabel="position m", ylabel="value stored")
    left.legend()
    right.plot(positions, angle_error, ".", markersize=2)
    right.set(
        title=f"Angle error with bfloat16 positions (θ = {theta:g})",
        xlabel="position m",
        ylabel="|angle(bf16) − angle(exact)| (rad)",
    )
    fig.tight_layout()
    plt.show()


def rotary_pairs_of_model(
    wavelengths: torch.Tensor, trained: int, norms: dict[str, torch.Tensor], name: str = "the model"
) -> None:
    """A trained model's rotary pairs: left, each pair's wavelength 2π/θ_j against the trained length
    (pairs above it never complete a turn in training); right, the size of the weights that feed each pair
    (norms: label -> (pairs,) mean norm of the q_proj or k_proj rows of pair j)."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    pairs = torch.arange(len(wavelengths))
    never = wavelengths > trained
    left.semilogy(pairs[~never], wavelengths[~never], "o", color="C0", label="turns at least once within L")
    left.semilogy(pairs[never], wavelengths[never], "o", color="C3", label="never a full turn within L")
    left.axhline(trained, color="0.3", ls=":", label=f"trained length L = {trained:,}")
    left.set(title=f"{name}: wavelength of each rotary pair", xlabel="pair index j", ylabel="2π / θ_j (tokens)")
    left.legend(fontsize=8)
    for label, values in norms.items():
        right.plot(pairs, values, "o-", markersize=3, label=label)
    right.axvspan(
        float(pairs[never][0]) - 0.5, float(pairs[-1]) + 0.5, color="C3", alpha=0.08, label="pairs that never turn"
    )
    right.set(
        title="Trained weights: norm of the rows that feed each pair",
        xlabel="pair index j",
        ylabel="mean row norm (layers, heads)",
    )
    right.legend(fontsize=8)
    fig.tight_layout()
    plt.show()
