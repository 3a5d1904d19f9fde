"""Diagrams of the method, each a matplotlib figure of a small fixed example (no model is read):
:func:`decoding_timeline` (paper section 2), :func:`kv_injection` (section 3;
docs/method.md#the-drafter), :func:`attention_masks` (section 3.2; docs/method.md#training) and
:func:`tree_verification` (docs/method.md#verification-and-acceptance)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from ..training.data import block_attention_mask

# seaborn's colour-blind-safe "colorblind" palette (dflash_lite/measuring/plotting.py, COLORBLIND)
TARGET, DRAFT, ACCEPT, REJECT, BONUS = "#0173B2", "#DE8F05", "#029E73", "#D55E00", "#CC78BC"


def _box(ax, rect, text, color, fontsize=8, text_color="white"):
    x, y, w, h = rect  # lower-left corner, width, height
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                fc=color, ec="0.25", lw=0.8))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize,
            color=text_color)


def _arrow(ax, start, end, color="0.3"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=color,
                                 lw=1))


def decoding_timeline(block_size: int = 4, accepted: tuple[int, ...] = (3, 1, 2)) -> plt.Figure:
    """Top: plain decoding, one target forward per token. Bottom: speculative decoding, where each
    step is one drafter forward (a block of ``block_size - 1`` guesses) and one target forward that
    verifies them and commits the ``accepted[i]`` tokens it agrees with plus its own next token."""
    target_time, draft_time, verify_extra = 1.0, 0.3, 0.15  # illustrative units, not measurements
    committed = sum(a + 1 for a in accepted)
    fig, ax = plt.subplots(figsize=(7, 4.4))
    # plain decoding: one forward, one token
    for i in range(committed):
        _box(ax, (i * target_time, 2.2, target_time * 0.94, 0.6), f"t{i + 1}", TARGET, 9)
    ax.text(-0.2, 2.5, "plain\n(target\nforwards)", ha="right", va="center", fontsize=9)
    # speculative: draft block, verify block, commit accepted + bonus
    x = 0.0
    for a in accepted:
        _box(ax, (x, 0.6, draft_time * 0.94, 0.6), "D", DRAFT, 9)
        x += draft_time
        w = target_time + verify_extra
        _box(ax, (x, 0.6, w * 0.96, 0.6), f"verify {block_size}", TARGET, 9)
        guesses = ([ACCEPT] * a + [REJECT] + ["0.85"] * block_size)[:block_size - 1]  # their fate
        for j, color in enumerate(guesses + [BONUS if a == block_size - 1 else "white"]):
            ax.add_patch(plt.Rectangle((x + j * w / block_size, 0.05), w / block_size * 0.9, 0.4,
                                       fc=color, ec="0.4", lw=0.5))
        ax.text(x + w / 2, -0.3, f"+{a + 1} tokens", ha="center", fontsize=9)
        x += w
    ax.text(-0.2, 0.9, "speculative", ha="right", va="center", fontsize=9)
    ax.axvline(x, color="0.5", ls=":", lw=1)
    ax.text(x, 3.05, f"speculative done: {committed} tokens", fontsize=9, ha="center", color="0.3")
    handles = [plt.Rectangle((0, 0), 1, 1, fc=c, ec="0.4")
               for c in (ACCEPT, REJECT, "0.85", BONUS, "white")]
    ax.legend(handles, ["guess accepted", "first miss (target's token used)", "not reached",
                        "all accepted: bonus token", "bonus slot, unused"],
              fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False,
              title="below each verify: its drafted guesses "
                    "(D = the drafting; for DFlash one forward)",
              title_fontsize=9)
    ax.set(xlim=(-2.2, committed * target_time + 0.2), ylim=(-0.5, 3.2))
    # time starts at 0; the row labels sit left of it
    ax.set_xticks(range(0, int(committed * target_time) + 1, 2))
    ax.set_xlabel("time (illustrative units: a target forward = 1)")
    ax.set_yticks([])
    ax.spines[["left", "top", "right"]].set_visible(False)
    ax.set_title(f"Same {committed} tokens: {committed} target forwards,\n"
                 f"or {len(accepted)} draft + verify steps")
    return fig


def kv_injection(num_target_layers: int = 8, taps: tuple[int, ...] = (1, 4, 6),
                 drafter_layers: int = 2, block_size: int = 4) -> plt.Figure:
    """The target's hidden states at the ``taps`` are concatenated, projected (fc + RMSNorm) once
    per context position, and appended to the keys and values of every drafter layer; the queries
    are the block ``[last, MASK, ...]`` alone. Drawn 7 inches wide with 9-point text."""
    fig, ax = plt.subplots(figsize=(7, 5.4))
    # the target: a stack of layers, taps highlighted
    for i in range(num_target_layers):
        tapped = i in taps
        _box(ax, (0.2, 0.6 + i * 0.5, 1.6, 0.42), f"layer {i}", TARGET if tapped else "#a9bcd8", 9,
             "white" if tapped else "black")
        if tapped:
            _arrow(ax, (1.85, 0.81 + i * 0.5), (2.75, 2.45))
    top = 0.6 + num_target_layers * 0.5 + 0.1
    ax.text(1.0, top, "target\n(dark: tapped)", ha="center", fontsize=9)
    ax.text(1.0, 0.05, "context (prompt +\naccepted tokens)", ha="center", fontsize=9)
    _box(ax, (2.8, 2.0, 1.5, 0.9), f"concat\n{len(taps)} taps\n(C, {len(taps)}H)", "0.45", 9)
    _arrow(ax, (4.3, 2.45), (4.8, 2.45))
    _box(ax, (4.8, 2.0, 1.4, 0.9), "fc + RMS-\nNorm, once\n(C, H)", "0.3", 9)
    # the drafter layers, each with K/V = [context ; block], Q = block
    for j in range(drafter_layers):
        y = 0.9 + j * 2.0
        _box(ax, (7.0, y, 2.9, 1.75), "", "#f3e3d3", 9, "black")
        ax.text(8.45, y + 1.5, f"drafter layer {j}", ha="center", fontsize=9)
        _box(ax, (7.1, y + 0.45, 1.3, 0.9), "K, V:\ncontext\n+ block", DRAFT, 9, "black")
        _box(ax, (8.5, y + 0.45, 1.35, 0.9), "Q: block\nonly, no\ncausal mask", DRAFT, 9, "black")
        ax.text(8.45, y + 0.12, "attention, MLP", ha="center", fontsize=9)
        _arrow(ax, (6.2, 2.45), (7.1, y + 0.9), color=TARGET)
        if j:                                   # the block's states go up the stack
            _arrow(ax, (8.45, y - 0.25), (8.45, y))
    ax.text(5.5, 1.75, "the same context\nin every layer", ha="center", va="top", fontsize=9,
            color=TARGET)
    for k, s in enumerate(["last"] + ["MASK"] * (block_size - 1)):
        _box(ax, (10.3, 0.6 + k * 0.5, 1.1, 0.42), s, "0.55" if k else ACCEPT, 9)
    _arrow(ax, (10.3, 1.4), (9.95, 1.6))
    ax.text(10.85, 0.7 + block_size * 0.5, "block\n(queries)", ha="center", fontsize=9)
    # the last layer's block states go through the target's LM head
    above = 0.9 + (drafter_layers - 1) * 2.0 + 1.75
    _arrow(ax, (8.45, above), (8.45, above + 0.35))
    ax.text(8.45, above + 0.4, f"LM head: {block_size - 1} drafts in one forward", ha="center",
            va="bottom", fontsize=9)
    ax.set(xlim=(-0.1, 11.6), ylim=(-0.05, max(5.5, above + 0.9)))
    ax.axis("off")
    ax.set_title("KV injection: the target's features become\n"
                 "keys and values of every drafter layer")
    return fig


def tree_mask(parents: list[int]) -> np.ndarray:
    """(N, N) bool: node i sees itself and its ancestors (``parents[0]`` is the root's, ignored)."""
    mask = np.eye(len(parents), dtype=bool)
    for i in range(1, len(parents)):                   # parents come before their children
        mask[i] |= mask[parents[i]]
    return mask


EXAMPLE_PARENTS = [-1, 0, 0, 1, 1, 2, 3, 6]            # a root, two children, ... (8 nodes)


def attention_masks() -> plt.Figure:
    """Causal mask (the target), block mask (the drafter in training) and tree mask (the target
    verifying a draft tree), black = may attend; the block mask is the one training uses."""
    fig = plt.figure(figsize=(7, 7.2))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1.1])
    axes = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, :]), fig.add_subplot(grid[0, 1])]
    panels = [
        (np.tril(np.ones((8, 8), dtype=bool)), "Causal (target decoding)\nquery i sees keys 0..i",
         "key position", "query position"),
        (block_attention_mask(torch.tensor([3, 6, 9]), 12, 4).numpy(),
         "Block mask (drafter training)\nblock j: context before its anchor + its own block",
         "keys: context 0-11 | 3 blocks x 4", "queries: 3 blocks x 4"),
        (tree_mask(EXAMPLE_PARENTS),
         "Tree mask (verifying a draft tree)\nnode i sees its ancestors",
         "key: tree node", "query: tree node"),
    ]
    for ax, (mask, title, xl, yl) in zip(axes, panels):
        ax.imshow(mask, cmap="Greys", vmin=0, vmax=1, aspect="auto")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xl, fontsize=9)
        ax.set_ylabel(yl, fontsize=9)
        ax.tick_params(labelsize=9)
    axes[1].axvline(11.5, color=REJECT, lw=1.2)
    for j in range(1, 3):
        axes[1].axhline(j * 4 - 0.5, color="0.6", lw=0.6)
    return fig


def tree_verification() -> plt.Figure:
    """A small draft tree: the target's argmax at each visited node picks the child to follow; the
    walk stops where no child holds it, and that argmax is the bonus token."""
    tokens = ["=", " 12", " 3", " +", " *", " 4", " 5", " 6"]
    parents = EXAMPLE_PARENTS
    depth = (tree_mask(parents).sum(axis=1) - 1).tolist()     # a node's ancestors, itself not
    rows = {0: 0.0, 1: 1.0, 2: -1.0, 3: 1.5, 4: 0.5, 5: -1.0, 6: 1.5, 7: 0.7}
    accepted_path = [0, 1, 3, 6]                        # the target's argmax leads here
    target_choice = {0: " 12", 1: " +", 3: " 5", 6: " 7"}   # " 7" is in no child of 6: the bonus
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i in range(1, len(parents)):
        on_path = i in accepted_path and parents[i] in accepted_path
        ax.plot([depth[parents[i]], depth[i]], [rows[parents[i]], rows[i]],
                color=ACCEPT if on_path else "0.75", lw=2.5 if on_path else 1, zorder=1)
    for i, t in enumerate(tokens):
        color = "lightblue" if i == 0 else ("#cfe8d4" if i in accepted_path else "0.93")
        ax.text(depth[i], rows[i], repr(t), ha="center", va="center", fontsize=10, zorder=2,
                bbox=dict(boxstyle="round", fc=color, ec=ACCEPT if i in accepted_path else "0.6"))
        if i in target_choice:
            ax.text(depth[i], rows[i] - 0.4, f"target: {target_choice[i]!r}", ha="center",
                    fontsize=9, color=TARGET)
    end = accepted_path[-1]
    ax.text(depth[end] + 1, rows[end], repr(target_choice[end]), ha="center", va="center",
            fontsize=10, bbox=dict(boxstyle="round", fc=BONUS, ec="0.3"), color="white")
    _arrow(ax, (depth[end] + 0.25, rows[end]), (depth[end] + 0.78, rows[end]), color=BONUS)
    ax.text(depth[end] + 1, rows[end] - 0.4, "bonus", ha="center", fontsize=9, color=BONUS)
    ax.set(xlim=(-0.5, max(depth) + 1.6), ylim=(-1.6, 2.1))
    depths = ["root"] + [f"depth {d}" for d in range(1, max(depth) + 2)]
    ax.set_xticks(range(max(depth) + 2), depths, fontsize=9)
    ax.set_yticks([])
    ax.spines[["left", "top", "right"]].set_visible(False)
    ax.set_title(f"One target forward scores all {len(tokens)} nodes (tree mask);\n"
                 f"the walk accepts {len(accepted_path) - 1} drafts and adds the bonus token",
                 fontsize=10)
    return fig
