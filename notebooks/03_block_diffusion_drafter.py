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
# # 03 · The block-diffusion drafter
#
# An autoregressive drafter pays one forward per draft token. DFlash drafts a whole block in **one**
# forward: the block is `[last accepted token, <|mask|>, ..., <|mask|>]`, attention is bidirectional
# inside the block, and every layer also attends to the target's hidden states at all accepted
# positions (KV injection). The B-1 masked positions are filled at once by the target's own LM head.
#
# This notebook looks inside the shipped drafter (`dflash_lite/drafter.py`) and measures:
#
# 1. the masked block and the attention pattern (training and inference);
# 2. one forward for B-1 tokens against B-1 forwards of the EAGLE-style drafter;
# 3. what the drafter gets right at each block position;
# 4. the multi-step denoising experiment: does re-feeding the draft for a 2nd or 3rd pass pay?

# %%
import statistics, time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.checkpoints import load_drafter
from dflash_lite.decode import DFlashProposer, EagleProposer, generate_speculative
from dflash_lite.target import SHIPPED_BASELINES, SHIPPED_DRAFTERS, context_features
from dflash_lite.train import block_attention_mask
from dflash_lite.plotting import save_figure

_ = torch.manual_seed(0)

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
drafter_path = str(SHIPPED_DRAFTERS["tiny"])
eagle_path = str(SHIPPED_BASELINES["tiny"]["eagle"])
device = "cpu"
block_size = 16
num_prompts = 4
max_new_tokens = 64
timing_repeats = 20
passes = [1, 2, 3]

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
drafter = load_drafter(drafter_path).to(device)
eagle = load_drafter(eagle_path).to(device)
stops = stop_token_ids(target, tokenizer)
c = drafter.config
print(f"drafter: {c.num_layers} layers, block {c.block_size}, taps target layers {c.target_layer_ids} "
      f"of {c.num_target_layers}, mask token {tokenizer.convert_ids_to_tokens(c.mask_token_id)!r}, "
      f"{sum(p.numel() for p in drafter.parameters()) / 1e6:.2f}M trainable parameters (no embedding, no LM head)")
assert c.drafting == "block" and eagle.config.drafting == "autoregressive"

# %% [markdown]
# ## 1. The masked block and who sees what
#
# At inference the block's queries see every accepted position's context features and the whole
# block. In training, many blocks of one sequence share one forward: block *j* sees the context
# strictly before its anchor and itself, never another block (`dflash_lite/train.py: block_attention_mask`).

# %%
anchors = torch.tensor([3, 6, 9])
mask = block_attention_mask(anchors, 12, 4).int()
fig, ax = plt.subplots(figsize=(7, 3))
ax.imshow(mask, cmap="Greys", aspect="auto")
ax.axvline(11.5, color="red", lw=1)
ax.set_xlabel("keys: context positions 0-11 | block tokens of 3 blocks")
ax.set_ylabel("queries: 3 blocks x 4")
ax.set_title("Training attention mask (black = may attend)")
save_figure(fig, "03_block_attention_mask")
assert mask[0, :3].all() and not mask[0, 3:12].any() and not mask[0, 16:].any()

# %% [markdown]
# ## 2. One forward for the block against one forward per token
#
# Same context, same conditioning. The DFlash drafter fills B-1 positions in one forward; the
# EAGLE-style drafter (same layers, same taps, autoregressive) needs B-1 forwards.

# %%
prompt = corpus.math_problem(corpus.HELD_OUT_SEED + 123).prompt
ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
with torch.inference_mode():
    out = target(ids, output_hidden_states=True)
features = context_features(out.hidden_states, c.target_layer_ids)
last = out.logits[:, -1:].argmax(-1)

def time_dflash():
    p = DFlashProposer(drafter, target, block_size); p.start(ids, features)
    t0 = time.perf_counter(); p.propose(last[0], block_size - 1); return time.perf_counter() - t0

def time_eagle():
    p = EagleProposer(eagle, target, block_size); p.start(ids, features)
    t0 = time.perf_counter(); p.propose(last[0], block_size - 1); return time.perf_counter() - t0

for f in (time_dflash, time_eagle):
    f()                                                             # warm-up
t_dflash = statistics.median(time_dflash() for _ in range(timing_repeats))
t_eagle = statistics.median(time_eagle() for _ in range(timing_repeats))
print(f"draft {block_size - 1} tokens: DFlash {t_dflash * 1e3:.2f} ms (1 forward), "
      f"EAGLE-style {t_eagle * 1e3:.2f} ms ({block_size - 1} forwards): {t_eagle / t_dflash:.1f}x")
assert t_dflash < t_eagle

# %% [markdown]
# ## 3. What the drafter gets right at each block position
#
# A draft at block position *j* only counts if positions 1..j-1 were accepted too. From the
# acceptance lengths of real greedy runs we get the share of steps that reached each position.

# %%
prompts = [p.prompt for p in corpus.math_problems(num_prompts // 2, split="held_out", start=4000)]
prompts += corpus.function_headers(corpus.stdlib_files("held_out"), num_prompts - len(prompts), seed=31)
prompt_ids = [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in prompts]
lengths = {"DFlash": [], "EAGLE-style": []}
for x in prompt_ids:
    expected = generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens
    for name, make in (("DFlash", lambda: DFlashProposer(drafter, target, block_size)),
                       ("EAGLE-style", lambda: EagleProposer(eagle, target, block_size))):
        r = generate_speculative(target, make(), x, max_new_tokens, stop_token_ids=stops)
        assert r.tokens == expected
        lengths[name] += r.acceptance_lengths
fig, ax = plt.subplots(figsize=(6, 3.5))
for name, ls in lengths.items():
    reach = [np.mean([a > j for a in ls]) for j in range(1, block_size)]
    ax.plot(range(1, block_size), reach, marker="o", label=f"{name} (tau {np.mean(ls):.2f})")
    shown = ", ".join(f"{j}: {reach[j - 1]:.2f}" for j in (1, 2, 4, 8, 15) if j < block_size)
    print(f"{name:<12} tau {np.mean(ls):.2f}; share of steps with the draft at position j accepted: {shown}")
ax.set_xlabel("block position j"); ax.set_ylabel("share of steps with draft j accepted")
ax.set_ylim(0, 1); ax.legend(); ax.set_title("Acceptance by block position")
save_figure(fig, "03_acceptance_by_position")

# %% [markdown]
# ## 4. Multi-step denoising: does a second pass pay?
#
# The source article describes a multi-step, DDPM-style denoising loop. DFlash drafts in **one**
# pass from masks. A fair experiment: after the first pass, feed the drafted tokens back in place of
# the masks and run the drafter again (`DFlashProposer(..., passes=n)`). Each pass costs one more
# drafter forward; it pays only if tau rises by more than the extra cost.

# %%
rows = []
for n_passes in passes:
    taus, rates = [], []
    for x in prompt_ids:
        generate_speculative(target, DFlashProposer(drafter, target, block_size, passes=n_passes), x, 8)  # warm-up
        r = generate_speculative(target, DFlashProposer(drafter, target, block_size, passes=n_passes), x,
                                 max_new_tokens, stop_token_ids=stops)
        taus += r.acceptance_lengths
        rates.append(len(r.tokens) / r.total_time)
    rows.append((n_passes, float(np.mean(taus)), statistics.median(rates)))
    print(f"passes {n_passes}: tau {rows[-1][1]:.2f}, {rows[-1][2]:.1f} tokens/s")
best = max(rows, key=lambda r: r[2])
print(f"fastest: {best[0]} pass(es)")

# %% [markdown]
# The drafter was trained for exactly one pass from masks, so re-fed drafts are inputs it never saw
# in training: tau does not rise with more passes (with the shipped drafter it falls), while every pass
# adds a drafter forward. One pass is the method, as the paper says.
#
# ## Summary
#
# * A DFlash step drafts B-1 tokens with one drafter forward conditioned on the target's own hidden
#   states; the EAGLE-style drafter with the same conditioning needs B-1 forwards.
# * Acceptance decays with the block position, which is why the training loss weights early
#   positions more (`exp(-(k-1)/gamma)`, notebook 05).
# * Extra denoising passes do not pay for themselves here.
#
# ## Exercises
#
# 1. Run with `-p block_size 8`. The drafter was trained with 16: what happens to tau and speed?
# 2. Print the drafter's top-3 candidates at each block position for one step. Where is it unsure?
# 3. Change `passes` to `[1, 2, 4, 8]`. Plot tau and tokens/s against the number of passes.
# 4. Why must a training block never see the target's features at its own anchor position?
#    *(Hint: what does the target's hidden state at position a already encode about position a+1?)*
