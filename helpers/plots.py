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

# (end of chapter 04)


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------


def rope_pairs(position: int, thetas: list[float], pair: tuple[float, float] = (1.0, 0.0), trail: int = 400) -> None:
    """One panel per frequency: pair i turned by position·θ_i,
    with the positions before it as a fading trail."""
    import math

    plt = _plt()
    fig, axes = plt.subplots(1, len(thetas), figsize=(3 * len(thetas), 3.3))
    radius = math.hypot(*pair)
    start = math.atan2(pair[1], pair[0])
    for i, (ax, theta) in enumerate(zip(axes, thetas)):
        earlier = torch.arange(max(0, position - trail), position + 1, dtype=torch.float64)
        angles = start + earlier * theta
        ax.plot(radius * torch.cos(angles), radius * torch.sin(angles), ".", color="C0", alpha=0.25, markersize=3)
        angle = start + position * theta
        ax.annotate("", xy=(radius * math.cos(angle), radius * math.sin(angle)), xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": "C3", "lw": 2})
        ax.annotate("", xy=(radius * math.cos(start), radius * math.sin(start)), xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": "0.6", "lw": 1, "ls": "--"})
        ax.add_patch(plt.Circle((0, 0), radius, fill=False, color="0.85"))
        ax.set(xlim=(-1.2 * radius, 1.2 * radius), ylim=(-1.2 * radius, 1.2 * radius), aspect="equal", xlabel="1st component of the pair", ylabel="2nd component")
        ax.set_title(f"pair {i}: θ = {theta:.3g}\nangle = {position * theta:.3g} rad", fontsize=10)
    fig.suptitle(f"RoPE at position m = {position}: pair i turns by m·θ_i (grey: position 0)")
    fig.tight_layout()
    plt.show()


def rope_frequencies(head_dim: int, bases: list[float]) -> None:
    """θ_i and the wavelength 2π/θ_i (in tokens) of every pair, for a few bases."""
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    for base in bases:
        theta = base ** (-2 * i / head_dim)
        left.semilogy(i, theta, label=f"base {base:g}")
        right.semilogy(i, 2 * torch.pi / theta, label=f"base {base:g}")
    left.set(title=f"Frequencies θ_i = base^(-2i/{head_dim})", xlabel="pair index i", ylabel="θ_i (radians per token)")
    right.set(title="Wavelength: tokens for one full turn", xlabel="pair index i", ylabel="2π / θ_i (tokens)")
    left.legend()
    right.legend()
    fig.tight_layout()
    plt.show()


def rope_table(cos: torch.Tensor, positions: int = 64) -> None:
    """The cos table of rope_cache: the left and right halves are the same picture."""
    plt = _plt()
    table = cos[:positions].detach().cpu()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    image = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    half = table.shape[1] / 2 - 0.5
    ax.axvline(half, color="black", lw=1.5, ls="--")
    ax.set(title="cos(m·θ_i), half-split layout: column i and column i + d/2 hold the same angle", xlabel="column j of the table (head dimension)", ylabel="position m")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    plt.show()


def rope_matrices(matrices: dict[str, torch.Tensor], position: int) -> None:
    """The (d, d) matrix that RoPE applies at one position, for each layout."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(matrices), figsize=(4.2 * len(matrices), 4))
    for ax, (name, matrix) in zip(axes, matrices.items()):
        ax.imshow(matrix.detach().cpu(), cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set(title=name, xlabel="input component", ylabel="output component")
    fig.suptitle(f"The rotation RoPE applies at position {position}: same angles, different pairs")
    fig.tight_layout()
    plt.show()


def relative_scores(scores: torch.Tensor) -> None:
    """q_m·k_n for every (m, n): constant along each diagonal m − n = const."""
    plt = _plt()
    scores = scores.detach().cpu()
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    image = ax.imshow(scores, cmap="RdBu_r", vmin=-scores.abs().max(), vmax=scores.abs().max())
    ax.set(title="q_m · k_n: the same q and k at every position", xlabel="key position n", ylabel="query position m")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    plt.show()


def rope_decay(distances: torch.Tensor, bounds: dict[str, torch.Tensor]) -> None:
    """RoFormer §3.4.3: the relative upper bound of q_m·k_n against m − n."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for name, bound in bounds.items():
        ax.plot(distances.cpu(), bound.cpu(), label=name)
    ax.set(title="Long-term decay: the bound on |q_m·k_n| shrinks with distance", xlabel="relative distance m − n (tokens)", ylabel="relative upper bound  (2/d) Σ_j |S_j|")
    ax.legend()
    fig.tight_layout()
    plt.show()


def bf16_positions(positions: torch.Tensor, zoom: tuple[int, int] = (248, 272), theta: float = 1.0) -> None:
    """What bfloat16 does to positions (zoomed in around 256), and to the angle m·θ."""
    plt = _plt()
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
    right.set(title=f"Angle error with bfloat16 positions (θ = {theta:g})", xlabel="position m", ylabel="|angle(bf16) − angle(exact)| (rad)")
    fig.tight_layout()
    plt.show()


def position_interpolation(trained: int, scale: float, theta: float) -> None:
    """Linear position interpolation: the angle of one slow pair, with and without m → m/s."""
    plt = _plt()
    m = torch.arange(int(trained * scale), dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.axhspan(0, trained * theta, color="C2", alpha=0.15, label=f"angles seen in training (m < {trained})")
    ax.plot(m, m * theta, label="m·θ: extrapolation (unseen angles)")
    ax.plot(m, m / scale * theta, label=f"(m/{scale:g})·θ: interpolation")
    ax.set(title=f"Position interpolation, s = {scale:g}, pair with θ = {theta:.2g}", xlabel="position m", ylabel="angle (rad)")
    ax.legend()
    fig.tight_layout()
    plt.show()


def ntk_wavelengths(head_dim: int, base: float, scale: float) -> None:
    """How much each pair's wavelength is stretched by PI and by NTK-aware scaling."""
    plt = _plt()
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    theta = base ** (-2 * i / head_dim)
    ntk_base = base * scale ** (head_dim / (head_dim - 2))
    stretch = {"position interpolation: θ_i / s": torch.full_like(i, scale), f"NTK-aware: base' = base·s^(d/(d−2)) = {ntk_base:.3g}": theta / ntk_base ** (-2 * i / head_dim)}
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for name, factor in stretch.items():
        ax.plot(i, factor, label=name)
    ax.axhline(1, color="0.6", ls="--", label="unchanged")
    ax.legend(loc="center left")
    ax.set(title=f"How much each pair is slowed down, s = {scale:g}, d = {head_dim}", xlabel="pair index i (fast → slow)", ylabel="new wavelength / old wavelength")
    fig.tight_layout()
    plt.show()


# (end of chapter 05)
