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
# # 00 · A tour of the box
#
# What `dflash-lite` ships, and the baseline every later notebook measures against.
#
# * a **target model**: a real Hugging Face `Qwen3ForCausalLM`, trained by this project on text that
#   exists offline (the Python standard library and generated grade-school math), with its model card;
# * a **tokenizer** (byte-level BPE from `tokenizers`) that reserves the `<|mask|>` token the DFlash drafter needs;
# * the **autoregressive baseline**: prefill, then one target forward per new token, with the KV cache
#   (`dflash_lite/decode.py`), checked token for token against `model.generate`.
#
# Everything runs on a laptop CPU, offline, in well under two minutes.

# %%
import json, time
from pathlib import Path

import matplotlib.pyplot as plt
import torch

import dflash_lite
from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.target import SHIPPED
from dflash_lite.plotting import save_figure

_ = torch.manual_seed(0)

# %% tags=["parameters"]
# Parameters (papermill can override these: papermill 00_tour.ipynb out.ipynb -p max_new_tokens 32)
target_name = "tiny"
device = "cpu"
max_new_tokens = 64
num_parity_prompts = 10

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
model, tokenizer = load_pretrained(target_name, device=device)   # defined in dflash_lite/target.py
n_params = sum(p.numel() for p in model.parameters())
print(type(model).__name__, f"{n_params / 1e6:.2f}M parameters,", model.config.num_hidden_layers, "layers,",
      "hidden", model.config.hidden_size, "| vocab", len(tokenizer))
assert type(model).__name__ in ("Qwen3ForCausalLM", "LlamaForCausalLM")

# %% [markdown]
# ## The model card
#
# Every number on the card was measured by `python -m dflash_lite.zoo card dflash_lite/models/tiny`
# on held-out data: math problems from generator seeds that training never drew, and function
# headers from standard-library files that training never saw.

# %%
card = json.loads((SHIPPED["tiny"] / "card.json").read_text())
print(f"held-out loss: code {card['held_out_loss']['code']:.3f}, math {card['held_out_loss']['math']:.3f} (nats/token)")
print(f"math final-answer accuracy: {card['math_final_answer_accuracy']['accuracy']:.1%} of {card['math_final_answer_accuracy']['n']}")
print(f"code ast.parse rate: {card['code_ast_parse_rate']['rate']:.1%} of {card['code_ast_parse_rate']['n']}")
print(f"trained {card['training']['steps_done']} steps in {card['training']['train_seconds'] / 60:.0f} min on {card['training']['device']}")
assert card["parameters"] == sum(p.numel() for p in load_pretrained("tiny")[0].parameters())

# %% [markdown]
# ## The tokenizer and its mask token
#
# DFlash drafts a block `[last accepted token, <|mask|>, <|mask|>, ...]`, so the tokenizer must have a
# mask token that is a single id. Ours reserves it (and `<|endoftext|>`) before BPE training.

# %%
text = "Question: Ava has 3 apples.<|mask|><|mask|>"
ids = tokenizer(text).input_ids
print([tokenizer.decode([i]) for i in ids])
print("mask token:", tokenizer.mask_token, "id", tokenizer.mask_token_id, "| eos:", tokenizer.eos_token, tokenizer.eos_token_id)
assert ids.count(tokenizer.mask_token_id) == 2
assert tokenizer.decode(tokenizer("def f(x):\n    return x", add_special_tokens=False).input_ids) == "def f(x):\n    return x"

# %% [markdown]
# ## A completion, timed
#
# `generate_autoregressive` returns a `GenerationResult` with the tokens, the time to first token
# (prefill + choosing the first token) and the time at which each token was ready.

# %%
problem = corpus.math_problem(corpus.HELD_OUT_SEED + 42)      # a held-out problem
prompt_ids = tokenizer(problem.prompt, return_tensors="pt").input_ids.to(device)
stops = stop_token_ids(model, tokenizer)
generate_autoregressive(model, prompt_ids, 4, stop_token_ids=stops)   # warm-up
result = generate_autoregressive(model, prompt_ids, max_new_tokens, stop_token_ids=stops)
completion = tokenizer.decode(result.tokens, skip_special_tokens=True)
print(problem.prompt + completion)
print(f"\n{len(result.tokens)} tokens, {result.tokens_per_s:.1f} tokens/s, "
      f"time to first token {result.time_to_first_token * 1e3:.1f} ms ({result.stop_reason})")
print("generator's answer:", problem.answer, "| model's:", corpus.final_answer(completion))
assert len(result.tokens) <= max_new_tokens and len(result.token_times) == len(result.tokens)

# %% [markdown]
# ## Per-token latency
#
# Each new token costs one full forward of the target; the first also pays for the prompt (prefill).
# This flat line is the *autoregressive bottleneck* that speculative decoding attacks.

# %%
latency_ms = [t * 1e3 for t in result.per_token_latency]
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(range(1, len(latency_ms) + 1), latency_ms, marker=".", lw=1)
ax.set_xlabel("token index"); ax.set_ylabel("latency (ms)")
ax.set_title(f"Per-token latency, {target_name} target, autoregressive, {device}")
ax.set_yscale("log")
fig.tight_layout()
path = save_figure(fig, "00_per_token_latency")
median = sorted(latency_ms[1:])[len(latency_ms[1:]) // 2] if len(latency_ms) > 1 else latency_ms[0]
print(f"median decode step {median:.2f} ms; first token {latency_ms[0]:.2f} ms")
assert path.stat().st_size > 0

# %% [markdown]
# ## The baseline is exact
#
# Speedups later are only honest if the baseline is a faithful decoder. The project's loop must
# produce exactly the tokens of `model.generate(do_sample=False)` (the test suite checks 50 prompts;
# here a few), and must be at least as fast.

# %%
prompts = [p.prompt for p in corpus.math_problems(num_parity_prompts // 2, split="held_out", start=300)]
prompts += corpus.function_headers(corpus.stdlib_files("held_out"), num_parity_prompts - len(prompts), seed=5)
same, t_ours, t_hf, n_tokens = 0, 0.0, 0.0, 0
for prompt in prompts:
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
    t0 = time.perf_counter()
    ours = generate_autoregressive(model, ids, max_new_tokens, stop_token_ids=stops).tokens
    t1 = time.perf_counter()
    ref = model.generate(ids, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stops,
                         pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
    t2 = time.perf_counter()
    same += ours == ref
    t_ours, t_hf, n_tokens = t_ours + t1 - t0, t_hf + t2 - t1, n_tokens + len(ours)
print(f"identical on {same}/{len(prompts)} prompts; ours {n_tokens / t_ours:.1f} tokens/s, "
      f"generate {n_tokens / t_hf:.1f} tokens/s, ratio {t_hf / t_ours:.2f}x (one run; see `python -m dflash_lite bench`)")
assert same == len(prompts)

# %% [markdown]
# ## And the drafter
#
# The box also holds a trained DFlash drafter for this target (`dflash_lite/models/tiny-dflash`,
# notebooks 03 and 05 open it up). One speculative run next to the baseline: same tokens, fewer
# target forwards. (`python -m dflash_lite demo` prints the same comparison.)

# %%
from dflash_lite.checkpoints import load_drafter
from dflash_lite.decode import DFlashProposer, generate_speculative
from dflash_lite.target import default_drafter_path

drafter = load_drafter(default_drafter_path("tiny")).to(device)
runs = {"autoregressive": [], "DFlash": []}
for _ in range(3):
    runs["autoregressive"].append(generate_autoregressive(model, prompt_ids, max_new_tokens, stop_token_ids=stops))
    runs["DFlash"].append(generate_speculative(model, DFlashProposer(drafter, model), prompt_ids, max_new_tokens,
                                               stop_token_ids=stops))
ar, sd = (sorted(r, key=lambda x: x.total_time)[1] for r in runs.values())
print(f"autoregressive {ar.tokens_per_s:.1f} tokens/s; DFlash {sd.tokens_per_s:.1f} tokens/s "
      f"({sd.tokens_per_s / ar.tokens_per_s:.2f}x), tau {sd.tau:.2f}, {len(sd.acceptance_lengths)} verification steps "
      f"for {len(sd.tokens)} tokens")
assert sd.tokens == ar.tokens

# %% [markdown]
# ## Summary
#
# * The shipped target is a real `Qwen3ForCausalLM`; the loader takes the same path for any local
#   Qwen3/Llama directory or hub id, and fails with one line when it cannot.
# * The tokenizer reserves `<|mask|>`, which the DFlash drafter uses to fill a block.
# * Autoregressive decoding costs one target forward per token: the per-token latency is flat.
# * The project's own loop is token-for-token identical to `model.generate` and is the baseline
#   every later speedup is measured against.
# * The shipped DFlash drafter produces the same tokens with far fewer target forwards.
#
# ## Exercises
#
# 1. Run this notebook with `-p max_new_tokens 256` under papermill. Does the per-token latency grow
#    with the position? Why only a little at this context length? *(Hint: attention cost is linear in
#    the cached length; the MLP and LM head are not.)*
# 2. Read `dflash_lite/corpus.py`. Write a new math template, generate 5 problems and check that
#    `corpus.final_answer` parses every solution.
# 3. Sample with `SamplingParams(temperature=0.8, top_p=0.9)` and a fixed `torch.Generator` seed.
#    Check that the same seed gives the same tokens, and a different seed different ones.
# 4. Load a Llama checkpoint (any local Hugging Face directory) with `load_pretrained(path)` and run
#    the parity cell against it.
