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
# # 06 · Benchmarks: every method side by side, and the cost model that explains the speedup
#
# One call of `dflash_lite.measuring.benchmark.bench` (the same as `python -m dflash_lite bench`) runs every
# method on the same prompts, after a warm-up, interleaved over repeats, and reports medians. Every
# greedy method's output is checked token for token against the target's greedy output *in the same
# run*. Speedups are ratios to the autoregressive loop (the same decode loop at block size 1)
# measured in that run; the "vs generate" column is the ratio to transformers' `model.generate`.
# Rows are told apart by their `kind` and fields (`row_of(report, Kind.DFLASH, block_size=16)`),
# never by their printed names.
#
# Set `device = "cuda"` on a machine with an NVIDIA GPU; the figures are labelled with the hardware.
# The full-size runs are behind parameters, e.g.
#
#     papermill notebooks/06_benchmarks.ipynb out.ipynb -p device cuda -p max_new_tokens 256 -p num_prompts 20

# %% [markdown]
# **In this chapter you will**
#
# * read a benchmark report: speedup, [tau](../docs/glossary.md#tau), the acceptance histogram;
# * check the [cost model](../docs/glossary.md#cost-model) against the measurements;
# * compare fixed block sizes with the adaptive and the cost-aware [policy](../docs/glossary.md#policy) and [draft trees](../docs/glossary.md#draft-tree).
#
# **Prerequisites:** chapters 02, 03 (05 helps).
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from dflash_lite.measuring.benchmark import bench
from dflash_lite.measuring.report import (DFLASH_KINDS, TRANSFORMERS_KINDS, Kind, format_cost_model,
                                          format_table, row_of, rows_of)
from dflash_lite.measuring.plotting import (hardware_label, plot_benchmark_block_sizes,
                                            plot_benchmark_cost_model, plot_benchmark_histogram,
                                            plot_benchmark_speedup, results_dir)

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end
RESULTS = results_dir()

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
device = "cpu"
domain = "math"              # built-in held-out prompts: math, code or mixed
prompts_file = None          # or any JSONL with a "prompt" (or "turns") field
num_prompts = 3
max_new_tokens = 48
block_sizes = [4, 8, 16]
tree_sizes = [16, 32]        # draft-tree rows; [] for none
repeats = 2
sampled_temperature = 1.0

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
report = bench(target=target_name, prompts=prompts_file, domain=domain, num_prompts=num_prompts,
               max_new_tokens=max_new_tokens, block_sizes=tuple(block_sizes), repeats=repeats,
               device=device, tree_sizes=tuple(tree_sizes), adaptive=True, quiet=True,
               json_out=str(RESULTS / f"06_benchmark_{device}.json"))
print(format_table(report))
assert all(r["identical_to_target"] for r in report["methods"]
           if r["error"] is None), "a greedy method diverged"

# %% [markdown]
# ## Figures
#
# `plot_benchmark(report)` writes the four standard figures, titled with the hardware; here each
# comes from its own function (`dflash_lite/measuring/plotting.py`) so it can be read on its own.
#
# **Speedup by method.** Blue bars are DFlash (ours and transformers' path with the same weights),
# grey ones the other drafters and `model.generate`; the black line is the plain loop (1x). Look at how far the best grey bar
# is from the blue ones, and whether a higher tau (printed next to each bar) always means a higher speedup.

# %%
print("hardware:", hardware_label(report["env"]))
_ = plot_benchmark_speedup(report, prefix=f"06_{device}")

# %% [markdown]
# **Acceptance length, one row per method.** Each row shades the fraction of verify steps that
# committed 1, 2, ... tokens; the white tick is tau, the mean. Look at the column at 1 (a miss on
# the first guess: a wasted draft) and at the block's last slot (the whole block accepted):
# compare B=4, 8 and 16: a bigger block can move mass to the right, while misses on the first
# guess do not go away.

# %%
_ = plot_benchmark_histogram(report, prefix=f"06_{device}")

# %% [markdown]
# **Speedup and tau against the block size.** Read the two lines together: does the speedup rise as
# fast as tau? It need not, because every step of a bigger block pays a wider verify and a wider draft.

# %%
_ = plot_benchmark_block_sizes(report, prefix=f"06_{device}")

# %% [markdown]
# **The cost model.** Top: for each block size (B) or tree size (N), the model's step (the two
# forwards timed in isolation, solid left bar) next to the measured step split into its phases
# (hatched right bar), one colour per phase; the dotted line is one plain forward. Bottom: the
# speedup the model predicts next to the measured one. Look at whether the two bars of a pair agree
# in height, and whether the predicted and measured speedups rank the sizes the same way; the next
# section explains the gap.

# %%
_ = plot_benchmark_cost_model(report, prefix=f"06_{device}")

# %% [markdown]
# ## The cost model
#
# One DFlash step costs a target forward over B tokens plus one drafter forward, and commits tau
# tokens on average. Against one target forward per token:
#
# $$\text{speedup} \approx \frac{\tau \, t_\text{target}(1)}{t_\text{target}(B) + t_\text{draft}(B)}$$
#
# Each *t* below is measured (median of interleaved repeats at the first prompt's context length),
# and the prediction sits next to the speedup measured in the run above. Three things separate
# them, and the last table puts them in one at a time: the loop's per-step overhead (the phases
# measured inside the loop, in place of the two isolated forwards; "accept" is the acceptance
# rule, the cache's rewind and the drafter's context update); the prefill, which both decoders pay
# once per prompt (measured in the run, `phase_times`); and the baseline itself: the measured
# speedup divides by the plain loop's time per token, the prediction by `t_target(1)` timed in
# isolation at one context length. The `left` column is the measured speedup over the last
# estimate: what the three terms do not explain (for instance the last step's tokens cut at
# `max_new_tokens`).
#
# How to read the overhead column: it is the measured step minus the two forwards timed in
# isolation. Those are timed at the first prompt's context length; the loop's steps run at every
# length its prompts and answers reach. So the column can come out negative (the loop's average
# step was cheaper than the isolated forwards at that one length). A negative value is not free
# work: it says the per-step overhead is smaller than the model's error at this scale.

# %%
cost = report["cost_model"]
print(format_cost_model(cost["rows"]))
t = cost["costs"]["t_target"]
print(f"\nt_target(B)/t_target(1): " + ", ".join(f"B={b}: {t[str(b)] / t['1']:.2f}"
                                                 for b in block_sizes))
ar = row_of(report, Kind.AUTOREGRESSIVE)
per_token = 1 / ar["tokens_per_s"]
print(f"autoregressive loop: {per_token * 1e3:.2f} ms per token (prefill included) against "
      f"t_target(1) = {t['1'] * 1e3:.2f} ms for the bare forward")
# From the prediction to the measurement, one term at a time: the measured step in place of the two
# isolated forwards (the loop's overhead), then the prefill added to the steps, then the plain
# loop's time per token in place of t_target(1) (the baseline); what is left is not explained.
print(f"\n{'method':<20} {'predicted':>9} {'+overhead':>9} {'+prefill':>9} {'+baseline':>9} "
      f"{'measured':>9} {'left':>6}")
for r in cost["rows"]:
    # the method row this cost row models: a chain by its block size, a tree by its size
    fields = {"tree_size": r["tree_size"]} if r["tree_size"] else {"block_size": r["block_size"]}
    run = row_of(report, Kind(r["kind"]), compiled=False, **fields)
    steps, prefill = run["steps_per_run"], run["phase_times"].get("prefill", 0.0)
    with_overhead = r["tau"] * t["1"] / r["step_s"]
    with_prefill = with_overhead * steps * r["step_s"] / (steps * r["step_s"] + prefill)
    with_baseline = with_prefill * per_token / t["1"]
    measured = r["measured_speedup"]
    print(f"{r['name']:<20} {r['predicted_speedup']:>8.2f}x {with_overhead:>8.2f}x "
          f"{with_prefill:>8.2f}x {with_baseline:>8.2f}x {measured:>8.2f}x "
          f"{measured / with_baseline:>6.0%}")
for r in cost["rows"]:
    forwards_only = r["tau"] * t["1"] / (r["t_target_b"] + r["t_draft_b"])
    assert abs(r["predicted_speedup"] - forwards_only) < 1e-9

# %% [markdown]
# ## Choosing the block size: fixed, adaptive, cost-aware, trees
#
# A longer block can commit more tokens, but its verify costs more than a one-token forward (the
# `t_target(B)/t_target(1)` ratios printed above) and the drafts late in a block are rarely accepted.
# Four ways to choose, all lossless and all in the table above:
#
# * **fixed B**: the paper's setting;
# * **adaptive** (the source article's section 5.3): the smallest of {4, 8, 16} that is at least
#   twice the recent mean acceptance length;
# * **cost-aware** (the default of `Engine.generate`, `demo` and the row marked `*`): each step,
#   the block size from 1 (plain decoding) to 16 with the most expected tokens per second, from the
#   measured forward costs and the acceptance observed so far, or a draft tree of 16 nodes
#   when its measured verify cost is paid for by the tokens trees have been committing, or
#   [prompt lookup](../docs/glossary.md#prompt-lookup)'s continuation alone (no drafter forward),
#   or the hybrid tree (the tree with that continuation as one more branch); it falls back to
#   plain decoding where drafts are rarely accepted and probes again now and then. The row
#   "cost-aware, no n-gram" is the same policy without prompt lookup;
# * **draft trees**: one drafter forward, then the best-first tree of `N` likely continuations,
#   verified in one target forward with a tree attention mask; the hybrid rows add prompt
#   lookup's continuation as a branch (notebook 09).
#
# What to look for: whether the cost-aware row gets close to the best fixed size on these prompts
# (where acceptance is high, the best fixed size is the long block; the policy may lose a little
# to it by being cautious, or beat it where it picks a tree), and whether a tree's higher tau pays
# for its wider verify.

# %%
dflash = [r for r in rows_of(report, *DFLASH_KINDS) if r["error"] is None and r["tau"] is not None]
fixed = {r["block_size"]: r for r in dflash if r["kind"] == Kind.DFLASH}
best_fixed = max(fixed.values(), key=lambda r: r["speedup"])
for r in dflash:
    print(f"{r['name']:<36} {r['speedup']:5.2f}x  tau {r['tau']:5.2f}"
          + ("   <- default" if r.get("default") else ""))
default = next(r for r in dflash if r.get("default"))
print(f"\ncost-aware default / best fixed (B={best_fixed['block_size']}): "
      f"{default['speedup'] / best_fixed['speedup']:.2f}")
for n in tree_sizes:
    print(f"t_target({n + 1})/t_target(1) = {t[str(n + 1)] / t['1']:.2f}: the verify a tree of "
          f"{n} drafts pays")

# %% [markdown]
# ## Temperature 1
#
# Sampled, every run draws its noise per position from the benchmark's seed (`seed`, default 0:
# the seeded sampling of notebook 02), so each row of this project's loop must give the
# autoregressive row's seeded sample token for token, as at temperature 0; transformers' rows
# sample from their own stream and are not checked (None). Losslessness in distribution is tested
# statistically in `tests/test_sampling_lossless.py` and in notebook 02. Speed, tau and identity:

# %%
sampled = bench(target=target_name, prompts=prompts_file, domain=domain, num_prompts=num_prompts,
                max_new_tokens=max_new_tokens, block_sizes=(max(block_sizes),), repeats=repeats,
                device=device, temperature=sampled_temperature, baselines=False, hf_dflash=False,
                quiet=True, tree_sizes=tuple(tree_sizes),
                json_out=str(RESULTS / f"06_benchmark_{device}_t{sampled_temperature:g}.json"))
print(format_table(sampled))
greedy_tau = fixed[max(block_sizes)]["tau"]
sampled_tau = row_of(sampled, Kind.DFLASH, block_size=max(block_sizes))["tau"]
print(f"tau at B={max(block_sizes)}: greedy {greedy_tau:.2f}, temperature {sampled_temperature:g}: "
      f"{sampled_tau:.2f}")
ours = [r for r in sampled["methods"] if Kind(r["kind"]) not in TRANSFORMERS_KINDS]
print(f"identical to plain decoding's seeded sample: "
      f"{sum(r['identical_to_target'] is True for r in ours)} "
      f"of {len(ours)} rows of our loop")
assert all(r["identical_to_target"] is True for r in ours)
assert all(r["identical_to_target"] is None for r in sampled["methods"] if r not in ours)

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# ## Summary
#
# * Every method ran on the same prompts in one process, interleaved; the table's ratios are the
#   result, the absolute tokens/s are only for this machine.
# * The cost model predicts the speedup from three measured forwards and tau. The measured speedup
#   differs; the cost-model cell puts in the loop's overhead, the prefill and the baseline one at a
#   time, and prints how far each one moves the prediction and what is left unexplained.
# * On this CPU a wide verify is expensive, so long blocks pay only where acceptance is high; the
#   cost-aware default uses the measured costs to decide, down to plain decoding. On a GPU a wide
#   verify costs much less relative to one token; notebook 08 and `tools/gpu_bench.sh` measure it.
#   Notebook 10 shows it measured on an NVIDIA H200.
# * These numbers are the toy's: a target of a few million parameters on text of the project's
#   own, where its drafter is right far more often than on anyone else's text. Notebook 08 shows
#   the same table on a real public model (SmolLM2-135M and the drafter trained for it here), where
#   tau is lower and the default's edge over the fixed blocks comes mostly from knowing when not to
#   draft.
# * Every run here decodes one request at a time. Notebook 11 runs the same methods on batches of
#   requests (`bench --batch-sizes`) and finds where speculation stops paying as the batch grows.
#
# ## Exercises
#
# Difficulty: ★ a few minutes, ★★ up to an hour, ★★★ a small project. Each has a self-check that
# reads the `report` of the run above (or your own); worked solutions:
# `notebooks/solutions/06_benchmarks.py`.
#
# **1. ★ The prediction by hand.** From `report["cost_model"]["costs"]` and the tau of the
# `B=16` row, compute the cost model's predicted speedup for B = 16.

# %% nbgrader={"grade": false, "grade_id": "ch06_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises import ch06
### BEGIN SOLUTION
answer_1 = None   # a float: the predicted speedup
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch06_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch06.check_predicted_speedup(answer_1, report), 1)

# %% [markdown]
# **2. ★ Break-even tau.** For each block size of the run, the tau at which DFlash would only
# match plain decoding on this machine: give a dict `{B: tau_break_even}`. Which blocks were above
# it here, and what does that say about where a longer block stops paying?

# %% nbgrader={"grade": false, "grade_id": "ch06_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_2 = None   # a dict {block size: float}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch06_exercise_2_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch06.check_break_even(answer_2, report), 1)

# %% [markdown]
# **3. ★★ Code prompts.** Re-run the benchmark cell with `domain = "code"` (or
# `papermill ... -p domain code`) into a report of your own, and name its fastest method. Why does
# prompt lookup do well on code, and what does the cost-aware row do when drafts are rarely accepted?

# %% nbgrader={"grade": false, "grade_id": "ch06_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
# code_report = bench(..., domain="code", ...); answer_3 = the row's name
code_report, answer_3 = None, None
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch06_exercise_3_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch06.check_fastest_method(answer_3, code_report), 2)

# %% [markdown]
# **4. ★★ Your own prompts.** Write a JSONL file with at least three prompts of your own (one
# `{"prompt": ...}` object per line; for example questions in this corpus's `Question: ...\nAnswer:`
# format, or any text you like), run `bench(..., prompts="your.jsonl")`, and give the default row's
# speedup. How far is it from the built-in held-out prompts, and why?

# %% nbgrader={"grade": false, "grade_id": "ch06_exercise_4", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
own_file, own_report, answer_4 = None, None, None
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch06_exercise_4_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch06.check_own_prompts(answer_4, own_file, own_report), 2)

# %% [markdown]
# ## Review questions
#
# 1. Why are speedups reported as ratios within one run, and why interleaved?
# 2. Which three forwards does the cost model need, and at which context length are they measured here?
# 3. The measured speedup can land on either side of the cost model's prediction. What does the per-step model leave out, and which of those parts can put the measurement above it?
# 4. What does a negative overhead in the cost-model table mean?
# 5. Why does a longer block not always pay, even when tau grows?
# 6. What does the cost-aware policy do on prompts where drafts are rarely accepted, and how does it come back?
# 7. What does a draft tree buy, and what does it cost in the verify?
# 8. At temperature 1, what does each row of our loop have to equal token for token, why do transformers'
#    rows get no such check, and where is losslessness in distribution tested?
