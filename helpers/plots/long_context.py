"""Chapter 07: long context: its figures."""

from __future__ import annotations

import torch

from helpers.plots.figure import pyplot


def slowdown_by_pair(
    methods: dict[str, tuple[torch.Tensor, float]], plain: torch.Tensor, trained: int, factor: float
) -> None:
    """For each method's (inv_freq, attention_scale): how much it slows each pair down,
    θ_i / θ'_i, against the pair's original wavelength 2π/θ_i (log axes). Pairs left of
    the dotted line turned at least once within the trained length L; right of it, never."""
    plt = pyplot()
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
    plt = pyplot()
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
    plt = pyplot()
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
