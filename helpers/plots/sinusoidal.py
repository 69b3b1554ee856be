"""Chapter 03: sinusoidal encodings: its figures."""

from __future__ import annotations

import torch

from helpers.plots.figure import pyplot


def sinusoidal_heatmap(pe: torch.Tensor, base: float = 10000.0) -> None:
    """The (max_len, d) table as a picture, positions down, dimensions across,
    with each column pair's wavelength 2π·base^(2i/d) along the top."""
    plt = pyplot()
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
    plt = pyplot()
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
    plt = pyplot()
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
    plt = pyplot()
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
    plt = pyplot()
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
