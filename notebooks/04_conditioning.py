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
# # 04 · Conditioning: how the target's hidden states reach the drafter
#
# What lets a drafter of a couple of layers draft a whole block of tokens that the target accepts is
# that it reads the target's own hidden states (`dflash_lite/decoding/target.py: context_features`, `dflash_lite/decoding/drafter.py`):
#
# 1. **Taps.** K target layers, spread from the 2nd to the 3rd-from-last:
#    `round(1 + i*(N-4)/(K-1))`, i = 0..K-1 (one tap, K = 1: the middle layer, N // 2).
# 2. **Projection.** Their outputs are concatenated per position (K*H wide) and projected to H by
#    one linear layer `fc`, then an RMSNorm (`hidden_norm`).
# 3. **KV injection.** In *every* drafter layer, the keys and values of the context come from that
#    projected feature; the block's queries attend to `[context ; block]`.
#
# Alternatives measured here: **input fusion** (the features enter once, as the context's input to
# the first layer, and the context then runs through the drafter like a prompt) and **no target
# features** (the context is only the target's token embeddings), and 1, 3 or 5 taps.

# %% [markdown]
# **In this chapter you will**
#
# * explain [taps](../docs/glossary.md#taps), the projection and [KV injection](../docs/glossary.md#kv-injection);
# * measure what the drafter loses without the target's features;
# * compare KV injection with input fusion and 1, 3 or 5 taps.
#
# **Prerequisites:** chapter 03.
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import json, statistics, textwrap, time
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import torch

from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer, generate, prefill, verify
from dflash_lite.decoding.baselines import generate_autoregressive
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
from dflash_lite.measuring.plotting import repo_dir, save_figure, subplots
from dflash_lite.decoding.timing import interleaved
from dflash_lite.decoding.variants import make_drafter
from dflash_lite.decoding.target import (SHIPPED_BASELINES, SHIPPED_DRAFTERS, context_features,
                                         tapped_layer_ids)
from dflash_lite.training.data import regenerate
from dflash_lite.training.train import position_accuracy

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end
COMMITTED = repo_dir() / "results"   # inputs measured once and committed (see the README)

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
drafter_path = str(SHIPPED_DRAFTERS["tiny"])
device = "cpu"
num_prompts = 3
max_new_tokens = 48
timing_repeats = 20
accuracy_prompts = 8            # held-out prompts per domain for section 3b

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
drafter = load_drafter(drafter_path).to(device)
stops = stop_token_ids(target, tokenizer)
N = target.config.num_hidden_layers
for n, k in ((N, 5), (28, 5), (36, 5), (36, 3), (36, 1)):
    print(f"N={n:>2} layers, K={k}: taps {tapped_layer_ids(n, k)}")
print(f"shipped drafter: {drafter.config.num_layers} layers, block size "
      f"{drafter.config.block_size}, "
      f"taps {drafter.config.target_layer_ids} of the target's {N}")
assert drafter.config.target_layer_ids == tapped_layer_ids(N, 5)

# %% [markdown]
# ## 1. Why several layers, spread out
#
# Apply the target's final norm and LM head to each layer's hidden state (the "logit lens") and ask,
# over held-out text, whether it already names the **next** token the target will pick (and, for
# contrast, whether it names the **current** token). What to look for: index 0 (the embeddings)
# names the current token and almost never the next; by the last index the share of next-token
# matches is 1 by construction (it *is* the target's output); in between it climbs with depth. The
# taps sample that climb at several depths, from shallow layers whose states the lens cannot yet
# read as a guess of the next token to deep ones that hold a sharp guess. The drafter has to
# continue the text several tokens ahead, not only name the next one, so it gets all of them.

# %%
texts = [p.prompt + " " + p.solution for p in corpus.math_problems(6, split="held_out", start=6000)]
texts += corpus.function_headers(corpus.stdlib_files("held_out"), 4, seed=41)
current, nxt = np.zeros(N + 1), np.zeros(N + 1)
count = 0
with torch.inference_mode():
    for t in texts:
        ids = tokenizer(t, return_tensors="pt").input_ids.to(device)
        out = target(ids, output_hidden_states=True)
        # the target's next-token choice
        final = out.logits[0].argmax(-1)
        for layer, h in enumerate(out.hidden_states):
            # the last entry is already normed
            h = h if layer == N else target.model.norm(h)
            guess = target.lm_head(h)[0].argmax(-1)
            current[layer] += (guess == ids[0]).sum().item()
            nxt[layer] += (guess == final).sum().item()
        count += ids.shape[1]
current, nxt = current / count, nxt / count
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(range(N + 1), current, "o-", label="names the current token")
ax.plot(range(N + 1), nxt, "s-", label="names the target's next token")
for l in drafter.config.target_layer_ids:
    ax.axvline(l + 1, color="grey", lw=0.6, ls=":")
ax.set_xlabel("hidden state index (0 = embeddings; dotted = tapped layers' outputs)")
ax.set_ylabel("share of positions"); ax.legend(); ax.set_title("Logit lens on the target")
save_figure(fig, "04_logit_lens")
print("current-token share by index:", np.round(current, 2))
print("next-token share by index:   ", np.round(nxt, 2))
assert current[0] > 0.5 > current[1] and nxt[N] == 1.0 and nxt[N - 1] > nxt[1]

# %% [markdown]
# ## 2. The projection
#
# `fc` maps the K*H concatenation to H. Its weight splits into K blocks of H columns, one per tap;
# the norm of each block shows how much the trained drafter reads from each layer. A norm means
# little on its own, so an untrained drafter of the same shape (the same initialisation for every
# block) is printed next to it. What to look for: a tap the drafter ignores keeps roughly its
# initial norm or shrinks; a tap it relies on grows; equal growth means it reads all taps alike.

# %%
def block_norms(d):
    W = d.fc.weight.detach().float().cpu()                                # (H, K*H)
    H = d.config.hidden_size
    return [float(W[:, i * H:(i + 1) * H].norm()) for i in range(len(d.config.target_layer_ids))]

H, K = drafter.config.hidden_size, len(drafter.config.target_layer_ids)
norms = block_norms(drafter)
initial = block_norms(DFlashDrafter(drafter.config))
print(f"fc: {tuple(drafter.fc.weight.shape)} = (H, K*H) with H={H}, K={K}")
for layer, n, n0 in zip(drafter.config.target_layer_ids, norms, initial):
    print(f"  tap layer {layer}: weight block norm {n:.2f} (untrained {n0:.2f}, x{n / n0:.2f})")
fig, ax = plt.subplots(figsize=(5, 3))
xs = np.arange(K)
ax.bar(xs - 0.2, initial, 0.4, label="untrained", color="lightgrey")
ax.bar(xs + 0.2, norms, 0.4, label="trained")
ax.set_xticks(xs, [str(l) for l in drafter.config.target_layer_ids])
ax.legend(loc="upper left", bbox_to_anchor=(1, 1), frameon=False)        # beside the bars
ax.set_xlabel("tapped target layer")
ax.set_ylabel("||fc block||")
ax.set_title("What the trained projection reads")
_ = save_figure(fig, "04_projection_norms")


# %% [markdown]
# ## 3. Take the features away from the trained drafter
#
# The same trained drafter, with the target's features replaced by zeros (after the projection it
# sees only the norm's output of a zero vector). Greedy output stays identical (the verifier
# guarantees it, and the cell asserts it); [tau](../docs/glossary.md#tau) shows what the features were worth. Its floor is 1:
# every verification commits at least the target's own token.

# %%
class NoFeatures(DFlashProposer):                  # every row's features, zeroed
    def start(self, ids, features, lengths=None):
        super().start(ids, torch.zeros_like(features), lengths)
    def accepted(self, blocks, positions, features):
        super().accepted(blocks, positions, [torch.zeros_like(f) for f in features])

prompts = [p.prompt for p in corpus.math_problems(num_prompts, split="held_out", start=7000)]
ids = [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in prompts]
taus = {}
for name, cls in (("with features", DFlashProposer), ("features zeroed", NoFeatures)):
    lengths = []
    for x in ids:
        r = generate(target, cls(drafter, target), x, max_new_tokens, stop_token_ids=stops)
        assert r.tokens == generate_autoregressive(target, x, max_new_tokens,
                                                   stop_token_ids=stops).tokens
        lengths += r.acceptance_lengths
    taus[name] = float(np.mean(lengths))
    print(f"{name:<16} tau {taus[name]:.2f}")
assert taus["features zeroed"] < taus["with features"]

# %% [markdown]
# ## 3b. What the drafter takes from slot 0
#
# The features are one input; the block's slot 0, the last committed token, is the other. Here is
# each draft position's accuracy under teacher forcing (blocks at random anchors in the target's
# own continuations of held-out prompts, as in training), for the shipped drafter as it is and
# with MASK in slot 0 as well. The [EAGLE](../docs/glossary.md#eagle)-style drafter of the same size, trained on the same data
# for the same steps, makes its first prediction from exactly the information DFlash has at
# position 1 (the context's features and the last token, the token in its own residual stream);
# its later predictions see the real tokens before them, which a block drafter never does, so
# only position 1 is a like-for-like comparison.

# %%
eagle_path = SHIPPED_BASELINES.get(target_name, {}).get("eagle")
shipped_pair = drafter_path == str(SHIPPED_DRAFTERS["tiny"])
eagle = load_drafter(eagle_path).to(device) if eagle_path and shipped_pair else None
reads = {}
for domain in ("math", "code"):
    data = regenerate(target, tokenizer, corpus.prompts("held_out", domain, accuracy_prompts),
                      max_new_tokens)
    pad = tokenizer.pad_token_id
    reads[domain] = {"DFlash": position_accuracy(drafter, target, data, pad),
                     "DFlash, MASK in slot 0": position_accuracy(drafter, target, data, pad,
                                                                 anchor_token=False)}
    if eagle is not None:
        reads[domain]["EAGLE-style (same budget)"] = position_accuracy(eagle, target, data, pad)
    print(f"{domain}, accuracy of draft position 1: " +
          ", ".join(f"{name} {acc[0]:.2f}" for name, acc in reads[domain].items()))

fig, axes = subplots(1, 2, height=3.6, sharey=True)
for ax, (domain, rows) in zip(axes, reads.items()):
    for name, acc in rows.items():
        ax.plot(range(1, len(acc) + 1), acc, marker="o", ms=3, label=name)
    ax.set_title(f"held-out {domain}"); ax.set_xlabel("draft position"); ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
axes[0].set_ylabel("teacher-forced accuracy")
fig.legend(*axes[1].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.02),
           ncol=2, frameon=False)
_ = save_figure(fig, "04_slot0")

# %% [markdown]
# Read position 1. Where masking slot 0 costs little, the features already told the drafter what
# the last token was (the target computed it from them); where it costs more, the drafter needed
# the token itself. The gap between DFlash's position 1 and the EAGLE-style drafter's first
# prediction is information both had, which the block drafter's two layers read less well: it
# must first copy the token from slot 0 through attention, where the EAGLE-style drafter finds
# it in place. That gap is one limit of this drafter on code; the figure shows a larger one, its
# accuracy at the later positions, well below position 1's, where neither slot 0 nor copying helps.

# %% [markdown]
# ## 4. KV injection vs input fusion vs no target features; 1, 3 and 5 taps
#
# Each variant was trained from scratch with the same budget (steps, batch, anchors, learning
# rate, seed) and measured on held-out in-domain prompts by
#
#     python tools/train_ablations.py --workers 2 && python tools/train_ablations.py --collect
#
# (the cell below prints how long the runs took; the numbers land in `results/ablations.json`).
#
# The loss curves are smoothed with a trailing mean over the last few logged points. (A centred
# `np.convolve(..., mode="same")` pads the ends with zeros, which draws a rise and a drop at both
# ends of every curve that are not in the data.)

# %%
ablations = json.loads((COMMITTED / "ablations.json").read_text())
v = ablations["variants"]
names = {"reference": "KV injection, 5 taps (DFlash)", "input_fusion": "input fusion, 5 taps",
         "no_target_features": "no target features", "taps_3": "KV injection, 3 taps",
         "taps_1": "KV injection, 1 tap"}
print(f"budget: {v['reference']['steps']} steps each; tau on "
      f"{v['reference']['eval']['prompts_per_domain']} "
      f"held-out prompts per domain, B=16")
wall = sum(r["wall_seconds"] for r in v.values())
print(f"all {len(v)} runs of the file (notebook 05 reads the other {len(v) - len(names)}): "
      f"{wall / 60:.0f} min of one CPU thread, two at a time with --workers 2")
print(f"{'variant':<32} {'taps':<16} {'final loss':>10} {'tau math':>9} {'tau code':>9}")
for key, label in names.items():
    r = v[key]
    t = r["tau_by_inference_block_size"]["16"]
    taps = "embeddings" if r["options"].get("conditioning") == "none" else \
        str(tapped_layer_ids(N, r["options"].get("num_taps", 5)))
    print(f"{label:<32} {taps:<16} {r['final_loss']:>10.3f} {t['math']:>9.2f} {t['code']:>9.2f}")
fig, (ax, bx) = subplots(2, 1, height=7.4)
xs = np.arange(len(names))
ax.bar(xs - 0.2, [v[k]["tau_by_inference_block_size"]["16"]["math"] for k in names], 0.4,
       label="math")
ax.bar(xs + 0.2, [v[k]["tau_by_inference_block_size"]["16"]["code"] for k in names], 0.4,
       label="code")
ax.set_xticks(xs, [textwrap.fill(n.replace(",", ""), 13) for n in names.values()])
ax.set_ylabel("tau (held-out, B=16)")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
ax.set_title("Conditioning variants, equal budget")
# trailing mean of 5 logged points: no padding, no look-ahead
window = 5
for k, label in names.items():
    steps, losses = zip(*v[k]["loss_curve"])
    bx.plot(steps[window - 1:], np.convolve(losses, np.ones(window) / window, mode="valid"),
            label=label)
bx.set_xlabel("step"); bx.set_ylabel(f"training loss\n(mean of last {window} logs)")
bx.legend(loc="upper right", frameon=False)
bx.set_title("Training loss of each variant")
save_figure(fig, "04_conditioning_variants")
ref_math = v["reference"]["tau_by_inference_block_size"]["16"]["math"]
# see below
assert v["no_target_features"]["tau_by_inference_block_size"]["16"]["math"] > 0.8 * ref_math

# %% [markdown]
# **The loss rises in the second half.** In the lower panel every curve falls to a low point and
# then climbs again for a stretch of steps; the cell below prints where. Every variant does it,
# including the one without the target's features, and at the same steps. That points at the data
# rather than at the model: the runs share a seed, so they see the same batches in the same order,
# and each logged point is the loss of one batch of sequences out of a few thousand, whose share
# of code (which the drafter predicts far worse than math) changes from batch to batch. The
# learning rate is not at its peak there: it warms up early and is already decaying on its cosine
# (`dflash_lite/training/trainer.py`). So the rise most likely comes from a stretch of harder batches, and
# the held-out tau in the table, measured after training, is the number to compare variants by.

# %%
logged_steps = [step for step, _ in v["reference"]["loss_curve"]][window - 1:]
lowest_steps = set()
for k, label in names.items():
    smoothed = np.convolve([loss for _, loss in v[k]["loss_curve"]], np.ones(window) / window,
                           mode="valid")
    low = int(smoothed.argmin())
    lowest_steps.add(logged_steps[low])
    print(f"{label:<32} lowest {smoothed[low]:.2f} at step {logged_steps[low]}, "
          f"then up to {smoothed[low:].max():.2f} "
          f"(at step {logged_steps[low + int(smoothed[low:].argmax())]})")
print("steps where the variants' curves are lowest:", sorted(lowest_steps))

# %% [markdown]
# ## 4b. At a longer budget
#
# The budget above is short. Two runs at a longer budget (25 minutes on one CPU thread, the recipe
# of an earlier shipped drafter, with tau probed on held-out prompts every 100 steps), with and
# without the target's features (the current shipped drafter trained longer: its model card,
# `dflash_lite/models/tiny-dflash/MODEL_CARD.md`, gives its recipe):
#
#     python -m dflash_lite train --target tiny --block-size 16 --layers 2 --steps 100000 --time-budget-s 1500 \
#         --eval-every 100 --batch-size 8 --num-anchors 16 --lr 1e-3 --out OUT [--conditioning none]
#
# Their curves are kept in `results/budget_1500s_*.json`.

# %%
long = {name: json.loads((COMMITTED / f"budget_1500s_{name}.json").read_text())
        for name in ("kv_injection", "no_target_features")}
fig, ax = plt.subplots(figsize=(6, 3.4))
for name, run in long.items():
    curve = run["tau_curve"]
    shown = name.replace("_", " ").replace("kv", "KV")         # as the prose names the variant
    ax.plot([c["elapsed_s"] / 60 for c in curve], [c["tau_math"] for c in curve], "o-",
            label=f"{shown}: math")
    ax.plot([c["elapsed_s"] / 60 for c in curve], [c["tau_code"] for c in curve], "s--",
            label=f"{shown}: code")
    final = curve[-1]
    print(f"{name:<20} {run['training']['steps']} steps: final tau math {final['tau_math']:.2f}, "
          f"code {final['tau_code']:.2f}; minutes to tau >= 5 on math: "
          f"{run['training']['minutes_to_tau_5']['math']}")
ax.axhline(5, color="grey", lw=0.6, ls=":")
ax.set_xlabel("training minutes (1 CPU thread, probes excluded)")
ax.set_ylabel("tau (held-out, B=16)")
ax.legend(); ax.set_title("With and without the target's features, 25-minute budget")
save_figure(fig, "04_features_at_full_budget")
finals = {name: run["tau_curve"][-1]["tau_math"] for name, run in long.items()}
# see below
assert finals["no_target_features"] > 0.8 * finals["kv_injection"]

# %% [markdown]
# ## 5. What each variant costs per draft
#
# Timing does not depend on the weights, so random drafters of each shape will do. One step's
# drafter forward: a block of 16, four new context positions, the rest of the context cached.
# Input fusion also runs the new context positions through its layers (queries and MLP), which
# KV injection never does; "no target features" projects H instead of K*H inputs. What to look for:
# whether any difference between the three is large next to a whole speculative step (a target
# forward of a block, notebook 01, timed in the same rounds), which is what decides whether a
# variant's tau is worth its cost.

# %%
x = ids[0]
with torch.inference_mode():
    out = target(x, output_hidden_states=True)
drafters = {}
for label, kw in (("KV injection", {}), ("input fusion", {"conditioning": "input_fusion"}),
                  ("no target features", {"conditioning": "none"})):
    d = make_drafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=2,
                                               block_size=16, **kw)).to(device).eval()
    drafters[label] = d, context_features(out.hidden_states, d.config.target_layer_ids)
block = torch.full((1, 16), tokenizer.mask_token_id, device=device)


def one_step(d, f):
    """One step's drafter forward on a cached context; returns its own seconds (the cache fill
    before it is not timed)."""
    cache = SlotCache(2)
    d.draft_logits(target, block, f[:, :-4], 0, cache)                    # the cached context
    t0 = time.perf_counter()
    d.draft_logits(target, block, f[:, -4:], f.shape[1] - 4, cache)       # one step
    return time.perf_counter() - t0


def target_verify():
    """The target's forward over 16 tokens after the same context (a verify): its own seconds."""
    cache = SlotCache.for_target(target)
    prefill(target, x, cache)
    t0 = time.perf_counter()
    verify(target, x[:, :16], cache, None)
    return time.perf_counter() - t0


# the one interleaved timer (dflash_lite/decoding/timing.py): a warm-up, then each in turn
with torch.inference_mode():
    timed = interleaved({**{label: (lambda d=d, f=f: one_step(d, f))
                            for label, (d, f) in drafters.items()},
                         "target verify": target_verify},
                        repeats=timing_repeats, warmup=1, device=device)
cost = {label: statistics.median(step for _, step in rounds) for label, rounds in timed.items()}
verify_cost = cost.pop("target verify")
for label, seconds in cost.items():
    print(f"{label:<20} {seconds * 1e3:.2f} ms per draft, {seconds / verify_cost:.2f}x a target "
          f"verify of 16 tokens (median of {timing_repeats} interleaved rounds)")
print(f"the target's verify: {verify_cost * 1e3:.2f} ms; the dearest variant costs "
      f"{max(cost.values()) / min(cost.values()):.2f}x the cheapest")

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# ## What the numbers say, on this toy
#
# * The trained DFlash drafter **uses** its features: zero them and tau falls to near its floor of 1.
# * But on this target it did not **need** them. Trained from scratch at an equal budget, a drafter
#   that only sees the context's token embeddings does as well as one conditioned on five target
#   layers (compare the rows of section 4 and the finals of section 4b), at the ablation budget and
#   at the longer one. The gaps between input fusion and KV injection, and between 1, 3 and 5
#   taps, are small; with few held-out prompts per domain and no spread computed, too small to
#   rank them.
# * This does **not** reproduce the paper's ablations (KV injection over input fusion, 5 taps over
#   3, and about a third of tau lost without target features). The likely reason is the target:
#   its text is templated math and stdlib-flavoured prose, predictable from the tokens alone by a
#   2-layer model, whereas an 8B model's next tokens depend on computation a small drafter cannot
#   redo, which is what its hidden states carry. Per draft, input fusion does the most work;
#   section 5's timings show what that costs on your machine, to be set against a target forward
#   of a block (notebook 01).
#
# ## Summary
#
# * The taps sample the target from shallow to deep layers; the logit lens shows the next-token
#   guess sharpening with depth.
# * Conditioning matters for a drafter trained with it; whether it is *needed* depends on how much
#   of the target's next token is computation rather than pattern, and on this toy it is mostly pattern.
#
# ## Review questions
#
# 1. Why does the drafter tap several layers spread through the target instead of only the last one?
# 2. In the logit lens, why does index 0 name the current token, and why is the next-token share at
#    the last index exactly 1?
# 3. What are the shapes of `fc`'s input and output, and where does each come from?
# 4. Why does the drafter's cache hold each layer's keys and values of the context rather than the
#    raw taps? What would every step recompute otherwise?
# 5. What is the difference between KV injection and input fusion? Which one runs the context
#    through the drafter's layers, and why must that context attention be causal at inference?
# 6. Zeroing the features of the trained drafter collapses tau, yet a drafter trained without
#    features does as well. How can both be true?
# 7. Why does greedy output stay identical when the drafter's features are zeroed?
# 8. Why might this toy target fail to reproduce the paper's conditioning ablations when an 8B
#    target does?
# 9. Why does a centred moving average with zero padding draw features at the ends of a curve that
#    are not in the data?
#
# ## Exercises
#
# Difficulty: ★ a few minutes, ★★ about an hour, ★★★ a project. Each exercise has a check:
# put your answer in place of `None` and run the check cell under it, which shows the points scored. Worked solutions:
# `notebooks/solutions/04_conditioning.py`.
#
# **1. ★ Which hidden states.** A drafter built with `target_layer_ids=[5, 6]`: which entries of the
# target's `output_hidden_states` tuple does `context_features` read (`dflash_lite/decoding/target.py`), and
# how many inputs does its `fc` have?

# %% nbgrader={"grade": false, "grade_id": "ch04_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch04 import check_tap_indices
### BEGIN SOLUTION
answer_1 = None   # your answer: ([indices into output_hidden_states], fc input width)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch04_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_tap_indices(answer_1), 1)

# %% [markdown]
# **2. ★ What the drafter caches.** For the shipped drafter, how many numbers per context position
# does its `SlotCache` hold (all layers, keys and values), and how many would the raw tapped
# features take? *(Draft once on the prompt above: `features = context_features(out.hidden_states,
# drafter.config.target_layer_ids)`, `cache = SlotCache(drafter.config.num_layers)`, then
# `drafter.draft_logits(target, block, features, 0, cache)`; count
# what each layer's `cache.layers[i].keys` and `.values` hold at the context's positions: they are
# buffers with room to spare, so take `[:, :, :n]` of them for n positions. Or work it out from
# `drafter.config`.)*

# %% nbgrader={"grade": false, "grade_id": "ch04_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch04 import check_cache_numbers
### BEGIN SOLUTION
answer_2 = None   # your answer: (numbers cached per position, raw tapped numbers per position)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch04_exercise_2_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_cache_numbers(answer_2), 1)

# %% [markdown]
# **3. ★★★ Deep taps or shallow taps?** Train two drafters alike, one tapping only deep layers
# (`[5, 6]`), one only shallow ones (`[0, 1]`), and say which drafts worse. `--num-taps` spreads the
# taps evenly and cannot select these, so use the Python API, as `train_drafter` does in
# `dflash_lite/training/train.py`: `DrafterConfig.from_target(target.config, tokenizer.mask_token_id,
# num_layers=..., block_size=..., target_layer_ids=[5, 6])`, then `regenerate`, `epoch_batches`,
# `drafter_loss` and `Trainer` from `dflash_lite.training.train`. The check measures both drafters' tau on
# held-out prompts itself, and when the taus tie, their held-out accuracy over the block positions;
# drafters that tie on both score nothing, so give them enough steps to differ.

# %% nbgrader={"grade": false, "grade_id": "ch04_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch04 import check_taps_experiment
### BEGIN SOLUTION
answer_3 = None          # your answer: "deep" or "shallow", whichever drafts worse
deep_drafter = None      # your drafter trained with target_layer_ids=[5, 6]
shallow_drafter = None   # your drafter trained with target_layer_ids=[0, 1]
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch04_exercise_3_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_taps_experiment(answer_3, deep_drafter, shallow_drafter), 3)

