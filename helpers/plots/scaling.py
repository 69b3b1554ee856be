"""Chapter 02: scaling and weight tying: its figures."""

from __future__ import annotations

import torch

from helpers import reference
from helpers.plots.figure import pyplot

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
    plt = pyplot()
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


def tied_gradients(
    input_use: torch.Tensor, output_use: torch.Tensor, used: list[int], targets: tuple[int, ...] | list[int] = ()
) -> None:
    """The gradient of one tied matrix, row by row: the norm of the lookup's
    part, of the logits' part and of their sum, on a log scale, so that the
    small gradients the logits send to every row show next to the large ones
    of the rows in the batch. A zero (nothing to draw on a log axis) is marked 0.
    The x labels mark the input tokens (`used`) and the `targets`."""
    plt = pyplot()
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
    plt = pyplot()
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


def trained_row_norms(norms: torch.Tensor, marks: dict[str, float], model: str) -> None:
    """A histogram of a trained table's row norms (log scale), with the norms that
    inits of the chapter would give (vertical lines): where training took the rows."""
    plt = pyplot()
    norms = norms.detach().float().cpu()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    bins = torch.logspace(torch.log10(torch.tensor(0.3)), torch.log10(torch.tensor(30.0)), 80)
    ax.hist(norms.numpy(), bins=bins.numpy(), color="0.45", label=f"{model}'s {len(norms):,} trained rows")
    for n, (name, value) in enumerate(marks.items()):
        ax.axvline(value, color=f"C{n}", linestyle="--", label=f"{name}: {value:.2f}")
    ax.set_xscale("log")
    ax.set(
        title=f"{model}'s tied table: its trained rows against the norms an init gives",
        xlabel="row norm ‖E[v]‖ (log scale)",
        ylabel="number of rows",
    )
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    plt.show()
