"""Chapter 08: positions in practice: its figures."""

from __future__ import annotations

import torch

from helpers.plots.figure import pyplot


def packed_masks(seq_lens: list[int], layouts: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """One packed row, several ways to run it: each layout's (positions (S,), mask (S, S) bool,
    True where query i may attend key j) as a heatmap, the position ids along both axes, and a
    line at every document boundary."""
    plt = pyplot()
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
    plt = pyplot()
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
    plt = pyplot()
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


def first_token_share(shares: dict[str, torch.Tensor], uniform: float, model_name: str) -> None:
    """Layer by layer of a trained decoder, for each text (label -> (layers,) shares): the share of
    attention its queries put on the first token (mean over heads and queries), against the share
    a uniform attention row would give it."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11.5, 3.8))
    width = 0.8 / len(shares)
    for n, (label, share) in enumerate(shares.items()):
        layers = torch.arange(len(share)) + (n - (len(shares) - 1) / 2) * width
        ax.bar(layers.tolist(), share.detach().cpu().tolist(), width=width, color=f"C{n + 1}", label=label)
    ax.axhline(uniform, color="0.3", linestyle=":", label=f"a uniform row ({uniform:.0%})")
    ax.set(
        title=f"{model_name}: the share of attention on the first token, layer by layer",
        xlabel="layer",
        ylabel="mean share of the attention",
        ylim=(0, 1),
    )
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    plt.show()
