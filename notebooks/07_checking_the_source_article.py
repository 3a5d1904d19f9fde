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
# # 07 · Checking the source article
#
# **The source article.** 「DFlash 深度实战：块扩散模型如何实现 6 倍无损加速——从自回归瓶颈到并行生成的
# 范式跃迁」 ("DFlash in practice: how a block-diffusion model reaches a 6x lossless speedup, from the
# autoregressive bottleneck to parallel generation"), by 程序员茄子 (a pen name), one post of the author's
# series 「推理优化技术深度解析」 ("In-depth analyses of inference optimisation"), written in Chinese
# in 2026 (it describes the DFlash paper as published in early 2026). The text names no date or site of
# publication. The paper it describes is DFlash: Block Diffusion for Flash Speculative Decoding (arXiv 2602.06036).
#
# A Chinese-language deep-dive on DFlash (the article this course answers) makes numeric and
# algorithmic claims. Each is put next to what this repository measures or knows, with a verdict
# and the cell that produced the evidence. The paper's numbers come from DFlash (arXiv 2602.06036),
# Table 1: Qwen3-8B, one H200, greedy, **4.86x average speedup, tau 6.49**.

# %% [markdown]
# **In this chapter you will**
#
# * check each claim of the source article against what this repository measures;
# * tell a [lossless](../docs/glossary.md#lossless) acceptance rule from one that is not;
# * give each claim a verdict.
#
# **Prerequisites:** chapters 02, 03, 05, 06.
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import importlib.util, itertools, statistics, tempfile, textwrap, time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.decoding.acceptance import SamplingParams, target_probs
from dflash_lite.decoding.costs import measure_costs, predicted_speedup
from dflash_lite.prompts import builtin_prompts
from dflash_lite.decoding.checkpoints import export_dflash, load_drafter
from dflash_lite.decoding.decode import DFlashProposer, PerRow, generate
from dflash_lite.decoding.baselines import EagleProposer, generate_autoregressive
from dflash_lite.measuring.plotting import cache_dir, save_figure
from dflash_lite.decoding.target import SHIPPED_BASELINES, SHIPPED_DRAFTERS
from dflash_lite.training.data import epoch_batches, regenerate
from dflash_lite.prompts import training_prompts
from dflash_lite.training.train import drafter_loss, labelled_logits, position_weights
from dflash_lite.training.trainer import TrainConfig, Trainer

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end
verdicts = []

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
device = "cpu"
num_prompts = 3
max_new_tokens = 48
train_steps = 60          # for the CE-vs-MSE comparison (each objective)

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).to(device)
eagle = load_drafter(SHIPPED_BASELINES["tiny"]["eagle"]).to(device)
stops = stop_token_ids(target, tokenizer)
prompt_ids = [tokenizer(p, return_tensors="pt").input_ids.to(device)
              for p in builtin_prompts("math", num_prompts)]

def run(make, n=max_new_tokens):
    out = []
    for x in prompt_ids:
        make_ = make()
        generate(target, make(), x, 8, stop_token_ids=stops)                # warm-up
        out.append(generate(target, make_, x, n, stop_token_ids=stops))
    return out

def tokens_per_s(results):
    return sum(len(r.tokens) for r in results) / sum(r.total_time for r in results)

ar = [generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops) for x in prompt_ids]
# after warm-up
ar = [generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops) for x in prompt_ids]
measured = {}
for b in (8, 16):
    res = run(lambda: DFlashProposer(drafter, target, b))
    assert [r.tokens for r in res] == [r.tokens for r in ar]                              # lossless
    lengths = [a for r in res for a in r.acceptance_lengths]
    measured[b] = {"tau": float(np.mean(lengths)), "speedup": tokens_per_s(res) / tokens_per_s(ar),
                   "runs": res,
                   # the article's "acceptance rate": accepted drafts / drafted tokens
                   "draft_acceptance": sum(a - 1 for a in lengths) / (len(lengths) * (b - 1))}
    print(f"B={b}: tau {measured[b]['tau']:.2f}, speedup {measured[b]['speedup']:.2f}x "
          f"over our AR loop, share of drafted tokens accepted "
          f"{measured[b]['draft_acceptance']:.0%}")

# %% [markdown]
# ## Claim 1: "~6x speedup; 6.51x at B = 8 and 7.72x at B = 16"
#
# The article prints these from a table it typed in; no run produced them. The paper's own best in
# Table 1 is 6.09x (Qwen3-4B on MATH-500; 6.08x for Qwen3-8B), and its averages are 4.86x (Qwen3-8B)
# and 4.91x (Qwen3-4B), on an H200. Our measurement, with the shipped toy pair on this CPU, is printed
# above. It is far lower, and should be: a target of a few million parameters on a CPU pays much
# more for a 16-token verify relative to a 1-token forward than an 8B model on a GPU does (notebook 01).

# %%
verdicts.append(("6.51x (B=8) / 7.72x (B=16) speedup", "hard-coded; paper: 4.86x avg (H200)",
                 f"{measured[8]['speedup']:.2f}x / {measured[16]['speedup']:.2f}x "
                 "(tiny pair, this CPU)",
                 "not supported"))

# %% [markdown]
# ## Claim 2: "acceptance rate about 78% at B = 8 and 65% at B = 16"
#
# The paper reports the **acceptance length [tau](../docs/glossary.md#tau)** (tokens committed per verification), not a
# per-token rate. A block-level "rate" falls with B by construction: the later block positions are
# only reached when every earlier one was right.

# %%
for b in (8, 16):
    print(f"B={b}: tau {measured[b]['tau']:.2f}; accepted drafts / drafted tokens "
          f"{measured[b]['draft_acceptance']:.0%}")
# longer blocks: lower share
assert measured[16]["draft_acceptance"] < measured[8]["draft_acceptance"] + 0.05
verdicts.append(("acceptance 78% (B=8) / 65% (B=16)", "hard-coded; the paper reports tau",
                 f"{measured[8]['draft_acceptance']:.0%} / {measured[16]['draft_acceptance']:.0%}; "
                 f"tau {measured[8]['tau']:.2f} / {measured[16]['tau']:.2f}",
                 "wrong metric, made-up values"))

# %% [markdown]
# ## Claim 3: the speedup formula `k*a / (k*a*0.15 + 1)` and its block-size table
#
# It assumes a drafter that is always 15% of a target forward *per accepted token* and a verify that
# costs the same for any k; neither constant is measured. The measured alternative is
# $\tau\, t_\text{target}(1) / (t_\text{target}(B) + t_\text{draft}(B))$ per step with every *t*
# measured, and over a whole generation both decoders also pay the prefill once. The predictions,
# from our measured acceptance, next to the measured speedup:

# %%
costs = measure_costs(target, drafter, prompt_ids[0], block_sizes=(8, 16), repeats=30)
t = costs["t_target"]
print("one step, (t_target(B) + t_draft(B)) / t_target(1): "
      + ", ".join(f"B={b} {(t[str(b)] + costs['t_draft'][str(b)]) / t['1']:.2f}" for b in (8, 16))
      + f" (medians of {costs['repeats']} interleaved rounds)")
rows = []
for b in (8, 16):
    article = b * measured[b]["draft_acceptance"] / (b * measured[b]["draft_acceptance"] * 0.15 + 1)
    per_step = predicted_speedup(measured[b]["tau"], t["1"], t[str(b)], costs["t_draft"][str(b)])
    # the whole generation: both decoders also pay the prefill once per prompt (measured time to
    # first token)
    ar_time = sum(r.time_to_first_token + (len(r.tokens) - 1) * t["1"] for r in ar)
    step = t[str(b)] + costs["t_draft"][str(b)]
    spec_time = sum(r.time_to_first_token + len(r.acceptance_lengths) * step
                    for r in measured[b]["runs"])
    honest = ar_time / spec_time
    rows.append((b, article, honest, measured[b]["speedup"]))
    print(f"B={b}: article formula {article:.2f}x | cost model per step {per_step:.2f}x, "
          f"with prefill {honest:.2f}x | measured {measured[b]['speedup']:.2f}x")
# the article's own table, recomputed from its own inputs, to show it comes from the formula,
# not a run
table = {4: 0.92, 6: 0.85, 8: 0.78, 10: 0.72, 12: 0.68, 16: 0.65}
print("article table from its formula:",
      {k: round(k * a / (k * a * 0.15 + 1), 2) for k, a in table.items()})
# not the 6.51x its table prints for B=8
assert abs(8 * 0.78 / (8 * 0.78 * 0.15 + 1) - 3.23) < 0.01
err_article = np.mean([abs(a - m) / m for _, a, _, m in rows])
err_honest = np.mean([abs(h - m) / m for _, _, h, m in rows])
print(f"mean relative error: article formula {err_article:.0%}, cost model {err_honest:.0%}: "
      + ("the measured model is closer" if err_honest < err_article else
         "the article formula lands closer here, by luck: its constants are not measured"))
verdicts.append(("speedup = k*a/(k*a*0.15+1)",
                 "ad hoc constants; its table does not follow from it",
                 f"error {err_article:.0%}; measured cost model with prefill {err_honest:.0%}",
                 "unfounded (any fit is luck)"))

# %% [markdown]
# A lower error for the article's formula would not make it a model: its constants are not
# measured, so where it lands near the measurement it does so by chance, while the measured model's
# gap has causes one can name (timing noise and what the per-step model leaves out). The cell's
# last line says which is closer on this run.
#
# The article's own table does not follow from its formula either: the cell recomputes the table
# from the formula and the article's own acceptance values; compare the B = 8 entry with the 6.51x
# the article prints beside it.
#
# ## Claim 4: "trained with MSE on logits (diffusion predicts the denoised target)"
#
# DFlash trains with **cross-entropy** on the masked positions, weighted by block position. Train
# the same drafter for the same steps with both objectives and compare held-out next-token accuracy.
# The MSE version regresses the logits onto the one-hot labels, the closest reading of the
# article's `mse_loss(predicted, target_block)`.

# %%
cache = cache_dir()
data = regenerate(target, tokenizer, training_prompts(32, 0, seed=0), 40, batch_size=16,
                  cache_dir=cache)
held = regenerate(target, tokenizer, [p.prompt for p in corpus.split_math_problems("held_out", 16)],
                  40, batch_size=16, cache_dir=cache)
B = 8
weights = position_weights(B)

def mse_loss(model, batch):
    # the same forward as the CE loss
    logits, labels, position = labelled_logits(model, target, batch, B)
    onehot = torch.nn.functional.one_hot(labels, logits.shape[-1]).float()
    loss = torch.nn.functional.mse_loss(logits, onehot)
    with torch.no_grad():
        acc1 = (logits.argmax(-1) == labels)[position == 1].float().mean().item()
    return loss, {"loss": loss.item(), "accuracy_per_position": [acc1]}

def held_out_accuracy(model):
    g = torch.Generator().manual_seed(1)
    batch = next(epoch_batches(held, 16, B, 4, tokenizer, g))
    with torch.no_grad():
        return drafter_loss(model.eval(), target, batch, weights)[1]["accuracy_per_position"]

from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
accuracy, curves = {}, {}
for name, loss_fn in (("cross-entropy (DFlash)", lambda m, b: drafter_loss(m, target, b, weights)),
                      ("MSE on logits (article)", mse_loss)):
    torch.manual_seed(0)
    model = DFlashDrafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id,
                                                    num_layers=1, block_size=B)).train()
    g = torch.Generator().manual_seed(0)
    history = Trainer(model, loss_fn, lambda: epoch_batches(data, 4, B, 8, tokenizer, g),
                      TrainConfig(steps=train_steps, lr=3e-3, log_every=1)).run()
    curves[name] = [h["accuracy_per_position"][0] for h in history]
    accuracy[name] = held_out_accuracy(model)
    print(f"{name:<26} held-out accuracy at positions 1-3: "
          + ", ".join(f"{a:.2f}" for a in accuracy[name][:3]))
fig, ax = plt.subplots(figsize=(5.5, 3.2))
for name, c in curves.items():
    # each mean of 5 steps drawn at its last step
    ax.plot(np.arange(5, len(c) + 1), np.convolve(c, np.ones(5) / 5, mode="valid"), label=name)
ax.set_xlabel("step"); ax.set_ylabel("training accuracy, position 1 (5-step mean)"); ax.legend()
ax.set_title("Same drafter, same data, same steps: CE vs MSE on logits")
save_figure(fig, "07_ce_vs_mse")
ce, mse = accuracy.values()
# a handful of steps (a papermill smoke run) leaves both near zero
if train_steps >= 40:
    assert ce[0] > mse[0]
verdicts.append(("MSE training on logits", "wrong objective",
                 f"held-out acc@1 after {train_steps} steps: CE {ce[0]:.2f} vs MSE {mse[0]:.2f}",
                 "wrong"))

# %% [markdown]
# ## Claim 5: multi-step DDPM-style denoising from random tokens
#
# DFlash drafts in **one** forward from MASK tokens. Notebook 03 runs the fair version of the
# article's idea (re-feed the draft for a 2nd pass); here is the short form:

# %%
passes = {}
for n in (1, 2):
    res = run(lambda: DFlashProposer(drafter, target, 16, passes=n))
    passes[n] = (float(np.mean([a for r in res for a in r.acceptance_lengths])), tokens_per_s(res))
    print(f"{n} pass(es): tau {passes[n][0]:.2f}, {passes[n][1]:.0f} tokens/s")
verdicts.append(("multi-step denoising", "DFlash uses one pass from masks",
                 f"2nd pass: tau {passes[1][0]:.2f} -> {passes[2][0]:.2f}, speed "
                 f"{passes[2][1] / passes[1][1]:.2f}x", "not how DFlash works; does not pay"))


# %% [markdown]
# ## Claim 6: "fusion" through a fresh `torch.randn` projection, and a "parallel" engine that drafts autoregressively
#
# A projection drawn anew at inference throws away what training learned. Replace the trained
# `fc` with a fresh random matrix on every call and measure tau. Then count drafter forwards per
# step: DFlash does one per block; an autoregressive engine does one per draft token, whatever it
# is called.

# %%
class RandomFusion(DFlashProposer):                      # the article's inference-time fusion
    def propose(self, last, depths):
        with torch.no_grad():
            self.drafter.fc.weight.copy_(torch.randn_like(self.drafter.fc.weight) * 0.02)
        return super().propose(last, depths)

trained_fc = drafter.fc.weight.detach().clone()
res = run(lambda: RandomFusion(drafter, target, 16))
with torch.no_grad():
    drafter.fc.weight.copy_(trained_fc)
tau_random = float(np.mean([a for r in res for a in r.acceptance_lengths]))
print(f"tau with the trained projection {measured[16]['tau']:.2f}; with a fresh randn projection "
      f"{tau_random:.2f}")

from dflash_lite.decoding.target import context_features
with torch.inference_mode():
    out = target(prompt_ids[0], output_hidden_states=True)
last = out.logits[0, -1:].argmax(-1)

def forwards_per_block(model, proposer):                 # drafter forwards to draft one block of 15
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    proposer.start(prompt_ids[0],
                   context_features(out.hidden_states, model.config.target_layer_ids),
                   [prompt_ids[0].shape[1]])
    proposer.propose(last, [15])
    hook.remove()
    return len(calls)

dflash_per_step = forwards_per_block(drafter, DFlashProposer(drafter, target, 16))
# drafts one request
eagle_per_step = forwards_per_block(eagle, PerRow(EagleProposer(eagle, target, 16)))
print(f"drafter forwards to draft 15 tokens: DFlash {dflash_per_step}, autoregressive drafting "
      f"{eagle_per_step}")
assert dflash_per_step == 1 and eagle_per_step == 15 and tau_random < measured[16]["tau"]
verdicts.append(("fusion via fresh torch.randn", "discards the trained projection",
                 f"tau {measured[16]['tau']:.2f} -> {tau_random:.2f}", "wrong"))
verdicts.append(("'parallel' engine drafting token by token", "1 drafter forward per block",
                 f"forwards/step: DFlash {dflash_per_step:.0f}, AR {eagle_per_step:.0f}",
                 "mislabelled"))

# %% [markdown]
# ## Claim 7: the lossless acceptance rules
#
# `accept if p_target(x) >= p_draft(x)` and `accept if p_target(x) >= 0.5` change the output
# distribution (notebook 02 shows it in full). The exact output distribution of one step, for the
# target and the shipped draft model at temperature 1 (the `p >= 0.5` rule with the best draft it
# can get, the target's own argmax, as in notebook 02), and its [total-variation distance](../docs/glossary.md#tv-distance) from the
# target. The context is the one notebook 02 uses: inside the target's own answer to a held-out
# problem, at the first position where it is fairly sure of the next token but not certain (top
# probability between 0.5 and 0.95; the cell prints the likeliest tokens):

# %%
from dflash_lite.decoding.target import load_pretrained as _load
draft_lm = _load(str(SHIPPED_BASELINES["tiny"]["draft_model"]), device=device)[0]
s = SamplingParams(temperature=1.0)
x = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 77).prompt,
              return_tensors="pt").input_ids.to(device)
answer = generate_autoregressive(target, x, 64, stop_token_ids=stops).tokens
full = torch.cat([x, torch.tensor([answer], device=device)], 1)
with torch.inference_mode():
    P = target_probs(target(full).logits[0], s).double().cpu()
    Q = target_probs(draft_lm(full).logits[0], s).double().cpu()
pos = next(i for i in range(x.shape[1] - 1, full.shape[1] - 1) if 0.5 <= P[i].max() < 0.95)
p, q = P[pos], Q[pos]
top = p.topk(3)
print("likeliest next tokens:",
      ", ".join(f"{tokenizer.decode([int(t)])!r} {float(v):.3f}" for v,
                t in zip(top.values, top.indices)))
residual = (p - q).clamp(min=0)
one_hot = lambda token: torch.nn.functional.one_hot(torch.tensor(token), len(p)).double()
outputs = {
    "min(1, p/q) (lossless)":
        torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * residual / residual.sum(),
    # each draft x, enumerated
    "p >= q (article)": sum(q[x] * (one_hot(x) if p[x] >= q[x] else p) for x in range(len(p))),
}
star = int(p.argmax())
outputs["p >= 0.5 (article)"] = one_hot(star) if p[star] >= 0.5 else p
tv = {k: 0.5 * float((v - p).abs().sum()) for k, v in outputs.items()}
for k, v in tv.items():
    print(f"{k:<26} TV from the target: {v:.4f}")
assert tv["min(1, p/q) (lossless)"] < 1e-6
assert min(tv["p >= q (article)"], tv["p >= 0.5 (article)"]) > 1e-3
verdicts.append(("acceptance p>=q, p>=0.5", "not lossless",
                 f"TV {tv['p >= q (article)']:.3f} / {tv['p >= 0.5 (article)']:.3f} "
                 "vs 0 for min(1, p/q)", "wrong"))

# %% [markdown]
# ## Claim 8: `from vllm.assets.dflash import DFlashModel`, `use_dflash=True`
#
# That module and flag do not exist. Serving goes through vLLM or SGLang loading a drafter
# checkpoint in the public DFlash layout, e.g.
# `vllm serve Qwen/Qwen3-8B --speculative-config '{"method": "dflash", "model": PATH, "num_speculative_tokens": 15}'`.
# This repo writes that layout (`export_dflash`); what is checkable offline is the layout itself:

# %%
import json
with tempfile.TemporaryDirectory() as d:
    export_dflash(drafter, d)
    files = sorted(p.name for p in Path(d).iterdir())
    cfg = json.loads((Path(d) / "config.json").read_text())
print(files, "| dflash_config:", cfg["dflash_config"], "| block_size:", cfg["block_size"])
assert files == ["config.json", "model.safetensors"]
assert cfg["dflash_config"]["target_layer_ids"] == drafter.config.target_layer_ids
vllm_here = importlib.util.find_spec("vllm") is not None
print("vLLM installed here:", vllm_here, "(not needed: the export is the interface)")
verdicts.append(("vllm.assets.dflash / use_dflash=True", "does not exist",
                 "export_dflash writes config.json + model.safetensors (public layout)",
                 "wrong API"))

# %% [markdown]
# ## The verdicts

# %%
widths = (34, 30, 44, 16)          # each column wrapped to its width, a space between columns
for row in [("claim", "what is known", "measured here", "verdict"), *verdicts]:
    cells = [textwrap.wrap(text, width) for text, width in zip(row, widths)]
    for line in itertools.zip_longest(*cells, fillvalue=""):
        print(" ".join(f"{part:<{width}}" for part, width in zip(line, widths)).rstrip())
    print()
assert len(verdicts) == 9

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# ## Summary
#
# The article's outline is a good map (the autoregressive bottleneck, drafting a block at once,
# conditioning on the target, verifying losslessly), but its numbers are typed in, its speedup
# formula does not reproduce its own table, two of its acceptance rules are biased, its training
# objective and multi-step denoising are not DFlash, and its serving API does not exist. Everything
# in the "measured here" column above was measured in this notebook.
#
# ## Exercises
#
# Difficulty: ★ a few minutes, ★★ up to an hour, ★★★ a small project. Each has a self-check;
# worked solutions: `notebooks/solutions/07_checking_the_source_article.py`.
#
# **1. ★ Rate against length.** Run the shipped drafter at B = 16 on the first held-out prompt
# (`generate(target, DFlashProposer(drafter, target, 16), prompt_ids[0], max_new_tokens,
# stop_token_ids=stops)`) and compute, from its `acceptance_lengths`, both tau and the article's
# "acceptance rate" (accepted drafts / drafted tokens). Give `(tau, rate)`. Which one predicts the
# speedup, and why does the rate fall as B grows even for the same drafter?

# %% nbgrader={"grade": false, "grade_id": "ch07_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises import ch07
### BEGIN SOLUTION
answer_1 = None   # (tau, rate)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch07_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch07.check_rate_and_tau(answer_1, target, drafter, tokenizer, max_new_tokens), 1)

# %% [markdown]
# **2. ★★ MSE on probabilities.** Write `mse_on_probs(logits, labels, weights)`: the position-weighted
# mean squared error between `softmax(logits)` and the one-hot labels, for `logits` of shape
# (N, k, V), `labels` (N, k) and `weights` (k,) (weights normalised by their sum, as in the CE loss).
# Then try the same error on probabilities in claim 4's training run: claim 4's `mse_loss` gets
# flat logits (M, V) from `labelled_logits`, with each row's block `position` (M,), so there weight
# each row by the weight of its position. Is it any closer to cross-entropy, and why do
# squared errors on a 4096-way softmax give so little gradient to the right token?

# %% nbgrader={"grade": false, "grade_id": "ch07_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mse_on_probs(logits, labels, weights):
    ### BEGIN SOLUTION
    return None   # your code here
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch07_exercise_2_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch07.check_mse_on_probs(mse_on_probs), 2)

# %% [markdown]
# **3. ★ When is `p >= 0.5` harmless?** Find a prompt (a string) after which the threshold rule with
# an argmax draft emits exactly the target's distribution (TV 0) at temperature 1. What must hold for
# the target's next-token distribution?

# %% nbgrader={"grade": false, "grade_id": "ch07_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_3 = None   # a prompt string
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch07_exercise_3_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch07.check_harmless_threshold(answer_3, target, tokenizer), 1)

# %% [markdown]
# ## Review questions
#
# 1. Why is a per-token "acceptance rate" a worse summary of a drafter than tau?
# 2. Which measured quantities does the honest cost model need, and which constants does the article's formula assume instead?
# 3. Both decoders pay the prefill once. Which way does that move the whole-generation prediction against the per-step one, and why can the measured speedup still land above both?
# 4. What does DFlash train with, and what would an MSE on logits fail to reward?
# 5. How many drafter forwards does DFlash take per block, and how many does an autoregressive drafter take?
# 6. What does a fresh random projection at inference do to the conditioning the drafter was trained on?
# 7. What makes an acceptance rule lossless, and how does `p >= 0.5` break it?
# 8. What files and config keys make a drafter loadable by vLLM's or SGLang's `dflash` method?
