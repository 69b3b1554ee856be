"""Chapter 06: comparing, and ALiBi: its figures."""

from __future__ import annotations

import torch

from helpers.plots.figure import pyplot


def alibi_heads(bias: torch.Tensor, heads: list[int]) -> None:
    """A few heads' (T, T) bias matrices side by side: -inf (masked) in grey."""
    plt = pyplot()
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
    plt = pyplot()
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
    plt = pyplot()
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
