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
# # 01 · The autoregressive bottleneck
#
# A language model writes one token per forward pass. Each pass reads every weight of the model,
# so on a GPU the time of a decode step is set by memory bandwidth, not arithmetic, and it barely
# changes if the pass processes a few tokens instead of one. That slack is what speculative decoding
# spends: guess several tokens cheaply, then check them all in **one** target forward.
#
# This notebook measures the premise on your machine instead of assuming it:
#
# 1. where the time of one decode step goes;
# 2. how the forward time grows with the number of tokens processed at once (the cost of verifying a block);
# 3. the tokens/s of the project's autoregressive loop next to `model.generate`.

# %%
import statistics, time
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.decode import new_cache, prefill
from dflash_lite.plotting import save_figure

_ = torch.manual_seed(0)

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
device = "cpu"
context_length = 128            # tokens already in the KV cache when we time a forward
token_counts = [1, 2, 4, 8, 16, 32]
repeats = 15
max_new_tokens = 48
num_prompts = 4

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
model, tokenizer = load_pretrained(target_name, device=device)      # dflash_lite/target.py
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
prompt = corpus.function_headers(corpus.stdlib_files("held_out"), 40, seed=2)
text = "".join(prompt)
context_ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=context_length).input_ids.to(device)
assert context_ids.shape[1] == context_length
print(f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}")


# %% [markdown]
# ## 1. Anatomy of one decode step
#
# Forward hooks time the embedding, each decoder layer and the LM head for a single new token on top
# of a cached context. (Hooks add a little overhead of their own; the proportions are what matter.)

# %%
@torch.inference_mode()
def step_anatomy(repeats):
    parts = {"embedding": model.model.embed_tokens, **{f"layer {i}": l for i, l in enumerate(model.model.layers)},
             "final norm": model.model.norm, "LM head": model.lm_head}
    times = {name: [] for name in parts}
    starts = {}
    def before(module, args, name):          # hooks must return None, or they replace the inputs/outputs
        sync()
        starts[name] = time.perf_counter()

    def after(module, args, output, name):
        sync()
        times[name].append(time.perf_counter() - starts[name])

    hooks = []
    for name, module in parts.items():
        hooks.append(module.register_forward_pre_hook(lambda m, a, name=name: before(m, a, name)))
        hooks.append(module.register_forward_hook(lambda m, a, o, name=name: after(m, a, o, name)))
    totals = []
    for _ in range(repeats):
        cache = new_cache(model)
        prefill(model, context_ids, cache)
        t0 = time.perf_counter()
        model(context_ids[:, -1:], past_key_values=cache, use_cache=True)
        sync()
        totals.append(time.perf_counter() - t0)
    for h in hooks:
        h.remove()
    # the hooks also fired during prefill; keep the decode-step calls (every second one)
    return {name: statistics.median(v[1::2]) for name, v in times.items()}, statistics.median(totals)

anatomy, step_total = step_anatomy(repeats)
layers = sum(v for k, v in anatomy.items() if k.startswith("layer"))
print(f"one decode step: {step_total * 1e3:.2f} ms")
for name in ["embedding", "final norm", "LM head"]:
    print(f"  {name:<11} {anatomy[name] * 1e3:6.3f} ms")
print(f"  {model.config.num_hidden_layers} layers    {layers * 1e3:6.3f} ms ({layers / model.config.num_hidden_layers * 1e3:.3f} ms each)")
print(f"  outside the modules (Python, masks, cache bookkeeping): {(step_total - layers - anatomy['LM head'] - anatomy['embedding'] - anatomy['final norm']) * 1e3:.2f} ms")
assert layers < step_total


# %% [markdown]
# ## 2. Forward time against the number of tokens processed at once
#
# We time one target forward over `n` new tokens on top of the same cached context, for
# `n = 1, 2, 4, ...`. The ratio `t(n) / t(1)` is the cost of verifying a block of `n` tokens in units
# of one decode step. Speculative decoding wins when this ratio is well below the number of tokens a
# block commits on average (tau).

# %%
@torch.inference_mode()
def forward_time(n, repeats):
    times = []
    block = torch.randint(10, len(tokenizer), (1, n), generator=torch.Generator().manual_seed(n)).to(device)
    for _ in range(repeats):
        cache = new_cache(model)
        prefill(model, context_ids, cache)
        sync()
        t0 = time.perf_counter()
        model(block, past_key_values=cache, use_cache=True)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)

forward_time(1, 2)                                   # warm-up
# interleave the sizes, so machine noise hits all of them alike
samples = {n: [] for n in token_counts}
for _ in range(3):
    for n in token_counts:
        samples[n].append(forward_time(n, max(1, repeats // 3)))
t = {n: statistics.median(v) for n, v in samples.items()}
for n in token_counts:
    print(f"n = {n:3d}: {t[n] * 1e3:7.2f} ms   t(n)/t(1) = {t[n] / t[1]:5.2f}   per token {t[n] / n * 1e3:6.3f} ms")
assert all(t[n] / t[1] < n for n in token_counts if n >= 4), "verifying n tokens at once must beat n single steps"

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(token_counts, [t[n] / t[1] for n in token_counts], marker="o", label="measured t(n) / t(1)")
ax.plot(token_counts, token_counts, ls="--", color="grey", label="n separate decode steps")
ax.set_xscale("log", base=2); ax.set_yscale("log", base=2)
ax.set_xlabel("tokens processed in one forward (n)"); ax.set_ylabel("cost in decode steps")
ax.set_title(f"Verifying a block: {target_name} target on {device}")
ax.legend(); fig.tight_layout()
save_figure(fig, "01_forward_time_vs_tokens")

# %% [markdown]
# On a GPU the measured curve stays almost flat up to dozens of tokens: the step is bound by reading
# the weights. On a laptop CPU a model this small is closer to compute-bound, so the curve rises
# sooner; the ratio `t(16)/t(1)` printed above is exactly the denominator term that limits the CPU
# speedup in the cost model `speedup = tau * t(1) / (t(B) + t_draft(B))` (notebook 06).
#
# ## 3. The baseline: the project's loop against `model.generate`
#
# Same prompts, same `max_new_tokens`, warm-up first, the two methods interleaved, medians over
# repeats. The outputs must be identical token for token.

# %%
prompts = [p.prompt for p in corpus.math_problems(num_prompts, split="held_out", start=700)]
ids = [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in prompts]
stops = stop_token_ids(model, tokenizer)

def ours(x):
    return generate_autoregressive(model, x, max_new_tokens, stop_token_ids=stops).tokens

def hf(x):
    return model.generate(x, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stops,
                          pad_token_id=tokenizer.pad_token_id)[0, x.shape[1]:].tolist()

assert all(ours(x) == hf(x) for x in ids)            # warm-up and the identity check
rates = {"ours": [], "generate": []}
for r in range(3):
    for name, fn in (("ours", ours), ("generate", hf)) if r % 2 == 0 else (("generate", hf), ("ours", ours)):
        t0 = time.perf_counter(); n = sum(len(fn(x)) for x in ids); sync()
        rates[name].append(n / (time.perf_counter() - t0))
median = {k: statistics.median(v) for k, v in rates.items()}
print(f"ours {median['ours']:.1f} tokens/s, generate {median['generate']:.1f} tokens/s, "
      f"ratio {median['ours'] / median['generate']:.2f}x")

# %% [markdown]
# ## Summary
#
# * A decode step is a full forward pass; on this tiny model a good part of it is framework
#   overhead outside the matrix multiplications, which is why small models gain little from batching
#   work on a CPU, and why a GPU at this size is launch-bound rather than bandwidth-bound.
# * Processing `n` tokens in one forward costs much less than `n` forwards. That gap is the budget
#   speculative decoding spends on verification.
# * The project's loop is exact (`model.generate`'s tokens) and at least as fast, so every later
#   speedup is measured against an honest baseline.
#
# ## Exercises
#
# 1. Re-run with `-p context_length 512`. Which part of the step grows, and why? *(Hint: attention
#    reads the whole cache; the MLP does not.)*
# 2. Re-run with `-p device cuda` on a GPU. How flat is `t(n)/t(1)` there, up to which `n`?
# 3. Use the measured `t(16)/t(1)` to compute the smallest tau that breaks even for a block of 16,
#    ignoring the drafter's cost. Then include a drafter that costs a quarter of `t(16)`.
# 4. Threads: set `torch.set_num_threads(1)` and repeat section 2. What changes, and why?
