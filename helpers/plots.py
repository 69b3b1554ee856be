"""The course's figures. Each function draws one picture and shows it.

matplotlib is imported inside each function (never by `import helpers`).
Every figure has a title and labelled axes; the notebook says, above it,
what to notice.
"""

from __future__ import annotations

import torch

from helpers import reference


def _plt():
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------
# Chapter 01: lookup tables
# ---------------------------------------------------------------------------


def lookup_picture(
    weight: torch.Tensor, ids: torch.Tensor, tokens: list[str] | None = None, highlight: int | None = None
) -> None:
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
    ax.set(
        title="Gradient norm per row of W after one backward pass", xlabel="token id (row of W)", ylabel="‖∂loss/∂W[i]‖"
    )
    fig.tight_layout()
    plt.show()


# ---------------------------------------------------------------------------
# Chapter 02: scaling and weight tying
# ---------------------------------------------------------------------------

D_MODELS = (8, 16, 32, 64, 128, 256, 512, 768, 1024, 2048, 4096)
_NORMS: dict[int, dict[str, float]] = {}


def embedding_norms_at(d_model: int, rows: int = 256) -> dict[str, float]:
    """Mean norm of `rows` positional vectors and of `rows` token vectors, for two
    inits, with and without the sqrt(d_model) factor. Seeded: same numbers every run."""
    if d_model not in _NORMS:
        generator = torch.Generator().manual_seed(d_model)
        standard = torch.randn(rows, d_model, generator=generator)  # nn.Embedding's default init, N(0, 1)
        small = torch.randn(rows, d_model, generator=generator) * d_model**-0.5  # N(0, 1/d): entries of size 1/sqrt(d)
        scale = d_model**0.5
        vectors = {
            "position": reference.sinusoidal_encoding(rows, d_model),
            "N(0, 1)": standard,
            "N(0, 1) × √d": standard * scale,
            "N(0, 1/d)": small,
            "N(0, 1/d) × √d": small * scale,
        }
        _NORMS[d_model] = {name: float(v.norm(dim=1).mean()) for name, v in vectors.items()}
    return _NORMS[d_model]


_TOKEN_STYLES = {  # name -> (colour, line style, legend)
    "N(0, 1)": ("C0", "-", "token, N(0, 1) init (nn.Embedding's default)"),
    "N(0, 1) × √d": ("C0", ":", "token, N(0, 1) init, × √d"),
    "N(0, 1/d)": ("C3", "-", "token, N(0, 1/d) init (small)"),
    "N(0, 1/d) × √d": ("C3", ":", "token, N(0, 1/d) init, × √d (lies on the blue line)"),
}


def embedding_norms(d_model: int | None = None) -> None:
    """Left: the norm of token and positional vectors against d_model (log-log).
    With `d_model`, a marker there and, right, the four token norms at that width
    next to the positional norm, with the token's share of the sum."""
    plt = _plt()
    table = {d: embedding_norms_at(d) for d in D_MODELS}
    panels = 1 if d_model is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.3), squeeze=False)
    left = axes[0, 0]
    left.plot(
        D_MODELS, [table[d]["position"] for d in D_MODELS], "k--", linewidth=2.5, label="position (sinusoidal): √(d/2)"
    )
    for name, (colour, style, label) in _TOKEN_STYLES.items():
        marker, width = ("x", 2.5) if style == ":" else ("o", 1.5)
        left.plot(
            D_MODELS,
            [table[d][name] for d in D_MODELS],
            color=colour,
            linestyle=style,
            linewidth=width,
            marker=marker,
            markersize=4,
            label=label,
        )
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set(
        title="Token vs positional vector norm as d_model grows",
        xlabel="d_model",
        ylabel="norm of the vector (mean of 256)",
    )
    left.legend(fontsize=8)
    if d_model is not None:
        left.axvline(d_model, color="0.5", linewidth=1)
        right = axes[0, 1]
        norms = embedding_norms_at(d_model)
        position = norms["position"]
        names = list(_TOKEN_STYLES)
        bars = right.bar(
            range(4),
            [norms[n] for n in names],
            color=[_TOKEN_STYLES[n][0] for n in names],
            hatch=["", "//", "", "//"],
            edgecolor="white",
        )
        right.axhline(position, color="k", linestyle="--", linewidth=2, label=f"position: √(d/2) = {position:.1f}")
        for bar, name in zip(bars, names):
            share = norms[name] ** 2 / (norms[name] ** 2 + position**2)  # random vectors are nearly orthogonal
            right.annotate(
                f"{norms[name]:.1f}\n{share:.1%} token",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        right.set_xticks(range(4), ["N(0, 1)", "N(0, 1)\n× √d", "N(0, 1/d)", "N(0, 1/d)\n× √d"])
        right.set_yscale("log")
        right.set_ylim(0.3, max(norms.values()) * 4)
        right.set(
            title=f"d_model = {d_model}: token norms and the token's share of ‖token + position‖²",
            xlabel="init of the token table, and the factor",
            ylabel="norm (log scale)",
        )
        right.title.set_fontsize(9)
        right.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    plt.show()


def tied_gradients(input_use: torch.Tensor, output_use: torch.Tensor, used: list[int], targets: list[int] = ()) -> None:
    """The gradient of one tied matrix, row by row: the norm of the lookup's
    part, of the logits' part and of their sum, on a log scale, so that the
    small gradients the logits send to every row show next to the large ones
    of the rows in the batch. A zero (nothing to draw on a log axis) is marked 0.
    The x labels mark the input tokens (`used`) and the `targets`."""
    plt = _plt()
    parts = {
        "from the lookup (input use)": input_use.detach().cpu(),
        "from the logits (output use)": output_use.detach().cpu(),
    }
    parts["tied: their sum, one gradient"] = (
        parts["from the lookup (input use)"] + parts["from the logits (output use)"]
    )
    norms = {name: part.norm(dim=1) for name, part in parts.items()}  # (V,) each
    V = len(norms["from the lookup (input use)"])
    floor = min(float(n[n > 0].min()) for n in norms.values()) / 4
    width = 0.27
    fig, ax = plt.subplots(figsize=(10, 3.9))
    for k, (name, n) in enumerate(norms.items()):
        x = torch.arange(V) + (k - 1) * width
        ax.bar(x[n > 0], n[n > 0], width=width, color=f"C{k}", label=name)
        for position in x[n == 0].tolist():
            ax.text(position, floor * 1.15, "0", ha="center", va="bottom", fontsize=8, color=f"C{k}")
    ax.set_yscale("log")
    ax.set_ylim(floor, float(max(n.max() for n in norms.values())) * 2)
    roles = [", ".join(role for role, rows in (("input", used), ("target", targets)) if i in rows) for i in range(V)]
    ax.set_xticks(range(V), [f"{i}\n({role})" if role else str(i) for i, role in enumerate(roles)], fontsize=8)
    ax.set(
        title="One backward pass through a tied model: gradient norm per row (log scale)",
        xlabel="token id (row of the matrix)",
        ylabel="‖∂loss/∂W[i]‖",
    )
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    plt.show()


def loss_curves(curves: dict[str, list[float]], floor: float | None = None) -> None:
    """Training loss per step for a few small models."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, losses in curves.items():
        ax.plot(losses, label=name)
    if floor is not None:
        ax.axhline(floor, color="0.5", linestyle="--", linewidth=1, label="best possible (the corpus' own entropy)")
    ax.set(
        title="Next-token loss while training, tied embedding", xlabel="training step", ylabel="cross-entropy (nats)"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()


# ---------------------------------------------------------------------------
# Chapter 03: sinusoidal encodings
# ---------------------------------------------------------------------------


def sinusoidal_heatmap(pe: torch.Tensor, base: float = 10000.0) -> None:
    """The (max_len, d) table as a picture, positions down, dimensions across,
    with each column pair's wavelength 2π·base^(2i/d) along the top."""
    plt = _plt()
    pe = pe.detach().float().cpu()
    N, d = pe.shape
    fig, ax = plt.subplots(figsize=(9, 4.6))
    mesh = ax.pcolormesh(
        torch.arange(d + 1) - 0.5, torch.arange(N + 1) - 0.5, pe, cmap="RdBu_r", vmin=-1, vmax=1, shading="flat"
    )
    ax.invert_yaxis()
    ax.set(
        title=f"Sinusoidal encoding, {N} positions × d_model = {d}",
        xlabel="dimension (column): sin in even, cos in odd columns",
        ylabel="position",
    )
    pairs = list(range(0, d, max(2, d // 8) // 2 * 2))
    top = ax.secondary_xaxis("top")
    top.set_xticks(pairs, [f"{2 * torch.pi * base ** (j / d):.3g}" for j in pairs], fontsize=8)
    top.set_xlabel("wavelength in positions (2π·base^(2i/d))", fontsize=9)
    fig.colorbar(mesh, ax=ax, label="value")
    fig.tight_layout()
    plt.show()


def sinusoidal_slices(pe: torch.Tensor, position: int, pair: int, base: float = 10000.0) -> None:
    """Left: the vector of one position. Right: one (sin, cos) column pair around it, the rows as dots on the wave."""
    plt = _plt()
    pe = pe.detach().float().cpu()
    N, d = pe.shape
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [1, 1.3]})
    left.bar(range(d), pe[position], color=["C0" if j % 2 == 0 else "C1" for j in range(d)], width=0.9)
    left.set(
        title=f"PE[{position}]: the vector of position {position}",
        xlabel="dimension (blue sin, orange cos)",
        ylabel="value",
        ylim=(-1.1, 1.1),
    )
    sin_col, cos_col = 2 * pair, min(2 * pair + 1, d - 1)
    wavelength = 2 * torch.pi * base ** (2 * pair / d)
    # a window of about three waves around the position (40 positions at least): a fast pair's wave stays visible
    half = min(max(int(1.5 * wavelength), 20), N)
    lo, hi = max(0, min(position - half, N - 2 * half)), min(N, max(position + half, 2 * half))
    fine = torch.linspace(lo, hi - 1, 20 * (hi - lo), dtype=torch.float64)  # the continuous wave the rows sample
    columns = ((sin_col, torch.sin, "C0"), (cos_col, torch.cos, "C1"))[: 1 if cos_col == sin_col else 2]
    for col, fn, colour in columns:  # odd d_model: the last pair has no cos column
        kind = "sin" if col == sin_col else "cos"
        right.plot(fine, fn(fine / base ** (2 * pair / d)), color=colour, linewidth=0.8, alpha=0.45)
        right.plot(
            range(lo, hi), pe[lo:hi, col], "o", color=colour, markersize=2.5, label=f"column {col}: {kind}, per row"
        )
    right.axvline(position, color="0.5", linestyle=":")
    right.set(
        title=f"pair {pair}: wavelength {wavelength:.4g} positions; the line is the wave the rows sample",
        xlabel="position",
        ylabel="value",
        ylim=(-1.1, 1.1),
    )
    right.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    plt.show()


def shift_matrix(M: torch.Tensor, k: int, zoom: int = 8) -> None:
    """M_k whole (block-diagonal) and its top-left corner with the numbers."""
    plt = _plt()
    M = M.detach().float().cpu()
    fig, (whole, corner) = plt.subplots(1, 2, figsize=(10, 4.4))
    for ax, shown in ((whole, M), (corner, M[:zoom, :zoom])):
        ax.imshow(shown, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set(xlabel="column", ylabel="row")
    for (r, c), value in zip(
        torch.cartesian_prod(torch.arange(zoom), torch.arange(zoom)).tolist(), M[:zoom, :zoom].flatten().tolist()
    ):
        if value != 0:
            corner.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=8)
    whole.set_title(f"M_{k}, {tuple(M.shape)}: 2×2 blocks on the diagonal")
    corner.set_title(f"its top-left {zoom}×{zoom}: [[cos kω, sin kω], [-sin kω, cos kω]]")
    fig.suptitle(f"PE[pos + {k}] = M_{k} @ PE[pos], the same matrix for every pos")
    fig.tight_layout()
    plt.show()


def dot_product_vs_offset(pe: torch.Tensor, starts: list[int], max_offset: int) -> None:
    """PE[p]·PE[p + k] against k, for a few p: the curves lie on top of each other. Below, the
    largest gap between them at each k, on a log scale: rounding, far below the curves' size."""
    plt = _plt()
    pe = pe.detach().double().cpu()
    offsets = torch.arange(-max_offset, max_offset + 1)
    fig, (ax, gap) = plt.subplots(2, 1, figsize=(9, 5.2), sharex=True, gridspec_kw={"height_ratios": [2.2, 1]})
    curves = []
    for n, p in enumerate(starts):  # thick to thin, so that curves on top of each other all show
        keep = (p + offsets >= 0) & (p + offsets < len(pe))
        curve = torch.full((len(offsets),), float("nan"), dtype=torch.float64)
        curve[keep] = pe[p + offsets[keep]] @ pe[p]
        curves.append(curve)
        ax.plot(offsets, curve, label=f"p = {p}", linewidth=1.2 + 2.5 * (len(starts) - 1 - n), alpha=0.8)
    ax.set(title="PE[p] · PE[p + k] depends on the offset k only, and is symmetric in k", ylabel="dot product")
    ax.legend(loc="upper right", fontsize=8)
    stacked = torch.stack(curves)  # (len(starts), 2·max_offset + 1)
    spread = (stacked.nan_to_num(nan=-torch.inf).amax(0) - stacked.nan_to_num(nan=torch.inf).amin(0)).clamp(min=1e-12)
    gap.semilogy(offsets, spread, color="black", linewidth=1)
    ratio = (spread.max() / stacked.nan_to_num(nan=0.0).abs().max()).item()
    gap.set(
        ylim=(1e-12, 1e2),
        xlabel="offset k",
        ylabel="largest gap",
        title=f"the largest gap between the curves at each k: at most {ratio:.0e} of their size (the table's rounding)",
    )
    fig.tight_layout()
    plt.show()


def additive_vs_rotary(
    terms: dict[str, torch.Tensor], additive: torch.Tensor, rotary: torch.Tensor, offset: int
) -> None:
    """The attention score of two fixed tokens at positions m and m + offset, as
    the pair slides along the text. Left: the four terms of the additive score
    (x + p_m) W_Q W_K^T (y + p_n)^T, and the position-position term with
    W_Q W_K^T = I. Right: the whole additive score next to the rotary one."""
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1.3, 1]})
    m = torch.arange(len(additive))
    for n, (name, values) in enumerate(terms.items()):
        style = "--" if "= I" in name else "-"
        left.plot(m, values.detach().cpu(), style, color=f"C{n}", linewidth=1.2, label=name)
    left.set(
        title=f"Additive: the four terms, offset n − m = {offset} fixed",
        xlabel="query position m",
        ylabel="term of the score",
    )
    left.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)  # below the axes: no line hidden
    right.plot(m, additive.detach().cpu(), color="C7", linewidth=1.2, label="additive: (x + p_m) W_Q · (y + p_n) W_K")
    right.plot(
        m, rotary.detach().cpu(), color="k", linewidth=2, label="rotary: (M_m q) · (M_n k), q = x W_Q, k = y W_K"
    )
    right.set(
        title="The whole score: only the rotary one is relative", xlabel="query position m", ylabel="attention score"
    )
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    plt.show()


# ---------------------------------------------------------------------------
# Chapter 04: learned positions and BERT
# ---------------------------------------------------------------------------


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
    plt = _plt()
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
    plt = _plt()
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


# ---------------------------------------------------------------------------
# Chapter 05: rotary embeddings (RoPE)
# ---------------------------------------------------------------------------


def rope_pairs(position: int, thetas: list[float], pair: tuple[float, float] = (1.0, 0.0), trail: int = 400) -> None:
    """One panel per frequency: pair j turned by position·θ_j,
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
    plt = _plt()
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
    plt = _plt()
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
    plt = _plt()
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
    plt = _plt()
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
    plt = _plt()
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
    right.set(
        title=f"Angle error with bfloat16 positions (θ = {theta:g})",
        xlabel="position m",
        ylabel="|angle(bf16) − angle(exact)| (rad)",
    )
    fig.tight_layout()
    plt.show()


# ---------------------------------------------------------------------------
# Chapter 06: comparing, and ALiBi
# ---------------------------------------------------------------------------


def alibi_heads(bias: torch.Tensor, heads: list[int]) -> None:
    """A few heads' (T, T) bias matrices side by side: -inf (masked) in grey."""
    plt = _plt()
    bias = bias.detach().float().cpu()
    fig, axes = plt.subplots(1, len(heads), figsize=(3.4 * len(heads) + 1, 3.6))
    finite = bias[torch.isfinite(bias)]
    cmap = plt.get_cmap("viridis").with_extremes(bad="0.85")
    for ax, h in zip(axes, heads):
        image = ax.imshow(
            bias[h].masked_fill(~torch.isfinite(bias[h]), float("nan")), cmap=cmap, vmin=float(finite.min()), vmax=0
        )
        ax.set(
            title=f"head {h}  (m = {2 ** (-8 * (h + 1) / bias.shape[0]):.3g})"
            if bias.shape[0] & (bias.shape[0] - 1) == 0
            else f"head {h}",
            xlabel="key position j",
        )
        ax.locator_params(integer=True)
    axes[0].set_ylabel("query position i")
    fig.colorbar(image, ax=list(axes), label="bias -m·(i - j)  (grey: -inf)")
    fig.suptitle(
        f"ALiBi biases for {bias.shape[0]} heads, {bias.shape[1]} positions: steep heads look near, flat heads look far"
    )
    plt.show()


def alibi_reach(slopes: torch.Tensor, head: int, length: int = 64) -> None:
    """One head, seen from the last query of a sequence: its bias for every key, and
    the attention weights that bias alone gives (all content scores equal)."""
    plt = _plt()
    slope = float(slopes[head])
    distance = torch.arange(length, dtype=torch.float64)  # how far back each key is
    weights = torch.softmax(-slope * distance, dim=0)
    reach = int((weights.cumsum(0) < 0.9).sum()) + 1  # keys that hold 90% of the weight
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
    left.plot(distance, -slope * distance, color="C0")
    left.set(title=f"head {head}: slope m = {slope:.4g}", xlabel="distance back i - j", ylabel="bias -m·(i - j)")
    right.bar(distance, weights, color="C2", width=1.0)
    right.axvline(reach - 0.5, color="0.4", linestyle=":")
    right.set(
        title=f"softmax of the bias alone: 90% of the weight on the nearest {reach} keys",
        xlabel="distance back i - j",
        ylabel="attention weight",
    )
    fig.tight_layout()
    plt.show()


def accuracy_by_position(accuracy: dict[str, torch.Tensor], trained: int, chance: float) -> None:
    """Accuracy at each position, one line per positional method: the mean over the
    seeds (rows of each (seeds, T) tensor), with the band from the worst seed to the
    best. NaN where a model has no answer (position 0, or past a learned table)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.4))
    for n, (method, runs) in enumerate(accuracy.items()):
        runs = runs.detach().float().cpu()
        positions = torch.arange(runs.shape[1])
        known = ~runs.isnan().any(0)
        mean, low, high = runs.mean(0), runs.min(0).values, runs.max(0).values
        label = f"{method} (no row past position {int(positions[known].max())})" if not known[-1] else method
        ax.plot(positions[known], mean[known], color=f"C{n}", linewidth=1.5, label=label)
        ax.fill_between(positions[known], low[known], high[known], color=f"C{n}", alpha=0.2, linewidth=0)
    ax.axvline(trained - 0.5, color="0.4", linestyle=":")
    ax.text(trained * 0.95, 0.14, f"trained on\npositions 0 to {trained - 1}", color="0.3", fontsize=9, ha="right")
    ax.axhline(chance, color="0.3", linestyle="--", linewidth=1, label=f"chance: 1/vocab = {chance:.3g}")
    ax.set_xscale("log", base=2)
    last = max(runs.shape[1] for runs in accuracy.values())
    ticks = [2**k for k in range(0, last.bit_length()) if 2**k < last]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    title = "Repeat the previous token: accuracy at each position (line: mean of the seeds; band: worst to best)"
    ax.set(title=title, xlabel="position in the sequence (log scale)", ylabel="accuracy", ylim=(0, 1.05))
    ax.title.set_fontsize(10)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    plt.show()


# ---------------------------------------------------------------------------
# Chapter 07: long context
# ---------------------------------------------------------------------------


def slowdown_by_pair(
    methods: dict[str, tuple[torch.Tensor, float]], plain: torch.Tensor, trained: int, factor: float
) -> None:
    """For each method's (inv_freq, attention_scale): how much it slows each pair down,
    θ_i / θ'_i, against the pair's original wavelength 2π/θ_i (log axes). Pairs left of
    the dotted line turned at least once within the trained length L; right of it, never."""
    plt = _plt()
    plain = plain.detach().double().cpu()
    wavelength = 2 * torch.pi / plain
    fig, ax = plt.subplots(figsize=(11.5, 4.6))
    for n, (name, (inv_freq, scale)) in enumerate(methods.items()):
        slowdown = plain / inv_freq.detach().double().cpu()
        label = f"{name}" + (f"  (attention scale {scale:.3f})" if scale != 1.0 else "")
        ax.plot(wavelength, slowdown, marker="o", markersize=2.5, linewidth=1.4, color=f"C{n}", label=label)
    ax.axvline(trained, color="0.3", linestyle=":", label=f"wavelength = trained length L = {trained}")
    ax.axvspan(trained, float(wavelength.max()) * 1.5, color="C3", alpha=0.06)
    ax.axhline(factor, color="0.6", linestyle="--", linewidth=1, label=f"slowed by the whole factor s = {factor:g}")
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    largest = max(float((plain / inv_freq.detach().double().cpu()).max()) for inv_freq, _ in methods.values())
    ax.set(
        title=f"How much each method slows each pair down, s = {factor:g}\n(red: pairs that never completed a turn within L)",
        xlabel="the pair's original wavelength 2π/θ_i (tokens; fast pairs left, slow pairs right)",
        ylabel="slow-down θ_i / θ'_i",
        ylim=(0.8, max(largest, factor, 1.0) * 1.4),
    )
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    plt.show()


def extrapolation_by_task(
    accuracy: dict[str, torch.Tensor], tasks: list[str], trained: int, chance: float, title: str
) -> None:
    """Accuracy at each position, one panel per task and one line per method (mean over the
    seeds, the band from the worst seed to the best), against the trained length and chance.
    accuracy[method]: (seeds, T, tasks), NaN where a position has no answer or was not scored."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.2 * len(tasks) + 1.6, 3.2), sharey=True)
    for column, (ax, task) in enumerate(zip(axes, tasks)):
        for n, (method, runs) in enumerate(accuracy.items()):
            runs = runs[..., column].detach().float().cpu()  # (seeds, T)
            scored = ~runs.isnan().any(0)
            positions = torch.arange(runs.shape[1])[scored]
            runs = runs[:, scored]
            ax.plot(positions, runs.mean(0), color=f"C{n}", linewidth=1.2, label=method)
            ax.fill_between(positions, runs.min(0).values, runs.max(0).values, color=f"C{n}", alpha=0.15, linewidth=0)
        ax.axvline(trained - 0.5, color="0.4", linestyle=":", label=f"trained length {trained}")
        ax.axhline(chance, color="0.3", linestyle="--", linewidth=1, label=f"chance {chance:.3g}")
        ax.set(title=task, xlabel="position", ylim=(0, 1.05))
        ax.title.set_fontsize(10)
    axes[0].set_ylabel("accuracy")
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    plt.show()


def curves_by_position(
    curves: dict[str, torch.Tensor], trained: int, ylabel: str, title: str, log: bool = False
) -> None:
    """One line per curve (mean over the seeds, the band from the worst seed to the best) against
    the position: attention entropy or perplexity by position. curves[name]: (seeds, T), NaN where unscored."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for n, (name, runs) in enumerate(curves.items()):
        runs = runs.detach().float().cpu()
        scored = ~runs.isnan().any(0)
        positions, runs = torch.arange(runs.shape[1])[scored], runs[:, scored]
        ax.plot(positions, runs.mean(0), color=f"C{n}", linewidth=1.2, label=name)
        ax.fill_between(positions, runs.min(0).values, runs.max(0).values, color=f"C{n}", alpha=0.15, linewidth=0)
    ax.axvline(trained - 0.5, color="0.4", linestyle=":", label=f"trained length {trained}")
    if log:
        ax.set_yscale("log")
    ax.set(title=title, xlabel="position in the sequence", ylabel=ylabel)
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    plt.show()


# ---------------------------------------------------------------------------
# Chapter 08: positions in practice
# ---------------------------------------------------------------------------


def packed_masks(seq_lens: list[int], layouts: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """One packed row, several ways to run it: each layout's (positions (S,), mask (S, S) bool,
    True where query i may attend key j) as a heatmap, the position ids along both axes, and a
    line at every document boundary."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(layouts), figsize=(4.6 * len(layouts), 4.8))
    edges = torch.tensor(seq_lens).cumsum(0)[:-1].tolist()
    for ax, (title, (positions, mask)) in zip(axes, layouts.items()):
        S = mask.shape[-1]
        ax.imshow(mask.detach().cpu().float(), cmap="Greens", vmin=0, vmax=1.4)
        labels = [str(int(p)) for p in positions.detach().cpu()]
        ax.set_xticks(range(S), labels, fontsize=6)
        ax.set_yticks(range(S), labels, fontsize=6)
        for edge in edges:  # document boundaries
            ax.axhline(edge - 0.5, color="C3", linewidth=0.8)
            ax.axvline(edge - 0.5, color="C3", linewidth=0.8)
        ax.set(title=title, xlabel="key j (labelled with its position id)", ylabel="query i (its position id)")
        ax.title.set_fontsize(9)
    fig.suptitle(
        f"One packed row of documents {seq_lens} (green: may attend; red lines: document boundaries)", fontsize=10
    )
    fig.tight_layout()
    plt.show()


def decode_positions(used: dict[str, list[int]], prompt_len: int) -> None:
    """For each cache (name -> the position it rotated each new token at, prompt first): the
    position against the token's true index in the sequence. Right is the diagonal."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11.5, 4.2))
    for n, (name, positions) in enumerate(used.items()):
        style = dict(marker="o", markersize=3, linewidth=1.4, color=f"C{n}", label=name)
        if n == 0:
            style.update(linewidth=5, alpha=0.3, marker=None)  # the right one, drawn wide beneath the others
        ax.plot(range(len(positions)), positions, **style)
    ax.axvline(prompt_len - 0.5, color="0.4", linestyle=":", label=f"prefill | decode (prompt of {prompt_len})")
    ax.set(
        title="Where each cache rotates each new token (the prefill is right in all of them)",
        xlabel="the token's index in the sequence",
        ylabel="the position RoPE rotates it at",
    )
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    plt.show()


def streaming_cache(seq_len: int, kept: torch.Tensor, positions: torch.Tensor, n_sink: int, window: int) -> None:
    """Every token seen so far, 0 .. seq_len - 1, in one strip: the attention sinks, the recent
    window and the evicted tokens; above each kept token, the cache slot RoPE rotates it by."""
    plt = _plt()
    kept, positions = kept.detach().cpu().tolist(), positions.detach().cpu().tolist()
    slot = dict(zip(kept, positions))
    fig, ax = plt.subplots(figsize=(11.5, 2.3))
    for t in range(seq_len):
        colour = "C1" if t in slot and t < n_sink else "C0" if t in slot else "0.85"
        ax.add_patch(plt.Rectangle((t, 0), 0.9, 1, color=colour))
        if t in slot and (len(kept) <= 40 or t % 2 == 0):
            ax.text(t + 0.45, 1.15, str(slot[t]), ha="center", va="bottom", fontsize=6)
    ax.set(
        xlim=(0, max(seq_len, n_sink + window) + 0.5),
        ylim=(0, 2.0),
        yticks=[],
        xlabel="token index in the stream (grey: evicted; orange: sinks; blue: the recent window; the number: its slot, the position RoPE uses)",
        title=f"StreamingLLM after {seq_len} tokens: {len(kept)} kept ({n_sink} sinks + a window of {window}), slots 0 .. {len(kept) - 1}",
    )
    ax.title.set_fontsize(10)
    ax.xaxis.label.set_fontsize(8)
    fig.tight_layout()
    plt.show()
