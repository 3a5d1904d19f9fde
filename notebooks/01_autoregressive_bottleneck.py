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
# Notebook 10 (`10_gpu_benchmarks`) shows this premise measured on an NVIDIA H200.
#
# This notebook measures the premise on your machine instead of assuming it:
#
# 1. where the time of one decode step goes;
# 2. how the forward time grows with the number of tokens processed at once (the cost of verifying a block);
# 3. the tokens/s of the project's autoregressive loop next to `model.generate`.

# %% [markdown]
# **In this chapter you will**
#
# * split one decode step into the weight multiplications and the per-forward overhead;
# * measure how the forward time grows with the number of tokens in one forward;
# * state the [cost model](../docs/glossary.md#cost-model) that turns these times and [tau](../docs/glossary.md#tau) into a speedup.
#
# **Prerequisites:** chapter 00.
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import statistics, time
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.decoding.decode import new_cache, prefill
from dflash_lite.measuring.plotting import save_figure, subplots
from dflash_lite.decoding.timing import interleaved

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end

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
model, tokenizer = load_pretrained(target_name, device=device)      # dflash_lite/decoding/target.py
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
prompt = corpus.function_headers(corpus.stdlib_files("held_out"), 40, seed=2)
text = "".join(prompt)
context_ids = tokenizer(text, return_tensors="pt", truncation=True,
                        max_length=context_length).input_ids.to(device)
assert context_ids.shape[1] == context_length
print(f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters "
      f"on {device}")


# %% [markdown]
# ## 1. Anatomy of one decode step
#
# Forward hooks time the embedding, each decoder layer, the final norm and the LM head for a single
# new token on top of a cached context, and, separately, every `nn.Linear`: the multiplications by
# the weight matrices, which is the arithmetic a bigger model scales up. Everything else in the
# step (attention over the cache, norms, RoPE, and the Python and dispatch work of launching dozens
# of small operations) does little arithmetic, and much of it costs about the same whether the
# forward holds one token or many. Hooks add a little overhead of their own; the
# proportions are what matter.

# %%
@torch.inference_mode()
def step_anatomy(repeats):
    parts = {"embedding": model.model.embed_tokens,
             **{f"layer {i}": l for i, l in enumerate(model.model.layers)},
             "final norm": model.model.norm, "LM head": model.lm_head}
    linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    times = {name: [] for name in parts}
    linear_time = [0.0]
    starts = {}
    # hooks must return None, or they replace the inputs/outputs
    def before(name):
        sync()
        starts[name] = time.perf_counter()

    def after(name):
        sync()
        return time.perf_counter() - starts[name]

    hooks = []
    for name, module in parts.items():
        hooks.append(module.register_forward_pre_hook(lambda m, a, name=name: before(name)))
        hooks.append(module.register_forward_hook(
            lambda m, a, o, name=name: times[name].append(after(name))))
    for name, module in linears.items():
        key = "linear " + name
        hooks.append(module.register_forward_pre_hook(lambda m, a, key=key: before(key)))
        hooks.append(module.register_forward_hook(
            lambda m, a, o, key=key: linear_time.__setitem__(0, linear_time[0] + after(key))))
    cache = new_cache(model)
    prefill(model, context_ids, cache)
    model(context_ids[:, -1:], past_key_values=cache, use_cache=True)   # a warm-up step, untimed
    cache.rewind(context_ids.shape[1])
    for name in times:
        times[name].clear()                  # keep the timed decode steps only
    totals, in_linear = [], []
    for _ in range(repeats):
        linear_time[0] = 0.0
        t0 = time.perf_counter()
        model(context_ids[:, -1:], past_key_values=cache, use_cache=True)
        sync()
        totals.append(time.perf_counter() - t0)
        in_linear.append(linear_time[0])
        cache.rewind(context_ids.shape[1])          # back to the same cached context
    for h in hooks:
        h.remove()
    calls = {name: len(v) for name, v in times.items()}
    return ({name: statistics.median(v) for name, v in times.items()}, statistics.median(totals),
            statistics.median(in_linear), calls)

anatomy, step_total, linear_total, calls = step_anatomy(repeats)
layers = sum(v for k, v in anatomy.items() if k.startswith("layer"))
outside = step_total - layers - anatomy["LM head"] - anatomy["embedding"] - anatomy["final norm"]
print(f"one decode step: {step_total * 1e3:.2f} ms (median of {repeats})")
for name in ["embedding", "final norm", "LM head"]:
    print(f"  {name:<11} {anatomy[name] * 1e3:6.3f} ms")
print(f"  {model.config.num_hidden_layers} layers    {layers * 1e3:6.3f} ms "
      f"({layers / model.config.num_hidden_layers * 1e3:.3f} ms each)")
print(f"  outside the modules (Python, masks, cache bookkeeping): {outside * 1e3:.2f} ms")
print(f"in the weight matrices (every nn.Linear, LM head included): {linear_total * 1e3:.2f} ms "
      f"= {linear_total / step_total:.0%} of the step")
print(f"everything else (attention, norms, RoPE, dispatch, Python): "
      f"{(step_total - linear_total) * 1e3:.2f} ms "
      f"= {1 - linear_total / step_total:.0%} of the step")
assert all(n == repeats for n in calls.values()), "every module runs once per decode step"

# %% [markdown]
# Read the last two lines. The first share is the arithmetic on the weights; on a GPU, for a large
# model, it is where a step's time goes (reading the weights from memory). Much of the second share
# is paid once per forward, however many tokens the forward holds. The larger it is, the cheaper
# it is to put more tokens in one forward, which is what section 2 measures.
#
# ## 2. Forward time against the number of tokens processed at once
#
# We time one target forward over `n` new tokens on top of the same cached context, for
# `n = 1, 2, 4, ...`. The ratio `t(n) / t(1)` is the cost of verifying a block of `n` tokens in units
# of one decode step. Speculative decoding wins when this ratio is well below the number of tokens a
# block commits on average (tau).
#
# Timings of a few milliseconds on a shared machine are noisy, so each size is timed many times
# with the project's one interleaved timer (`dflash_lite/decoding/timing.py`): a warm-up round, then rounds
# that visit every size in turn, each round starting one size further along (so a burst of machine
# load hits all sizes alike). We keep the median and the interquartile range (the middle half of
# the samples). `t(1)` is one decode step, like section 1's; the cell prints the two side by side,
# and how far apart they are is a measure of the machine's noise (and of the hooks' overhead).

# %%
@torch.inference_mode()
def forward_times(token_counts, rounds):
    cache = new_cache(model)
    prefill(model, context_ids, cache)
    blocks = {n: torch.randint(10, len(tokenizer), (1, n),
                               generator=torch.Generator().manual_seed(n)).to(device)
              for n in token_counts}

    def forward(n):
        model(blocks[n], past_key_values=cache, use_cache=True)
        cache.rewind(context_ids.shape[1])                   # back to the same cached context

    timed = interleaved({n: (lambda n=n: forward(n)) for n in token_counts}, repeats=rounds,
                        warmup=1, device=device)
    return {n: [seconds for seconds, _ in timed[n]] for n in token_counts}

samples = forward_times(token_counts, 3 * repeats)
t = {n: statistics.median(v) for n, v in samples.items()}
quartiles = {n: statistics.quantiles(v, n=4)[::2] for n, v in samples.items()}     # [q1, q3]
for n in token_counts:
    q1, q3 = quartiles[n]
    print(f"n = {n:3d}: {t[n] * 1e3:7.2f} ms (middle half {q1 * 1e3:.2f}..{q3 * 1e3:.2f})   "
          f"t(n)/t(1) = {t[n] / t[1]:5.2f}   per token {t[n] / n * 1e3:6.3f} ms")
spread = (quartiles[1][1] - quartiles[1][0]) / t[1]
print(f"spread of t(1): the middle half of its {len(samples[1])} samples spans {spread:.0%} of its "
      f"median")
print(f"t(1) = {t[1] * 1e3:.2f} ms here; section 1's decode step (with its hooks) took "
      f"{step_total * 1e3:.2f} ms: {max(t[1], step_total) / min(t[1], step_total):.1f}x apart")
largest = max(token_counts)
print(f"verifying {largest} tokens at once cost {t[largest] / t[1]:.2f} decode steps "
      f"({'fewer' if t[largest] / t[1] < largest else 'not fewer'} than {largest} single steps)")
assert all(len(v) == 3 * repeats for v in samples.values())     # every size timed in every round

# %%
fig, ax = subplots(height=3.8)
ratio = [t[n] / t[1] for n in token_counts]
ax.fill_between(token_counts, [quartiles[n][0] / t[1] for n in token_counts],
                [quartiles[n][1] / t[1] for n in token_counts], alpha=0.25,
                label="middle half of the samples")
ax.plot(token_counts, ratio, marker="o", label="measured t(n) / t(1), median")
ax.plot(token_counts, token_counts, ls="--", color="grey", label="n separate decode steps")
ax.set_xscale("log", base=2); ax.set_yscale("log", base=2)
ax.set_xlabel("tokens processed in one forward (n)"); ax.set_ylabel("cost in decode steps")
ax.set_title(f"Verifying a block: {target_name} target on {device}")
ax.legend()
_ = save_figure(fig, "01_forward_time_vs_tokens")

# %% [markdown]
# What to look for: how far the curve stays below the dashed line, and from which `n` it bends
# upward. At small `n` the fixed cost per forward from section 1 dominates, so the curve starts
# nearly flat; it bends up once the arithmetic on `n` rows outweighs that fixed cost. On a GPU, for
# a large model, the curve stays flat up to dozens of tokens, because the step is bound by reading
# the weights. At the shipped block size B = 16, `t(16)/t(1)` is the verify's part of the
# denominator that limits the CPU speedup in the cost model
# `speedup = tau * t(1) / (t(B) + t_draft(B))` (notebook 06).
#
# The curve need not rise monotonically at small `n`: you may see `t(2)/t(1)` above `t(8)/t(1)`.
# Compare such a gap with the spread printed above; a gap inside it is noise. Beyond noise, the CPU
# library picks different kernels by shape (a matrix-vector product for one row, blocked
# matrix-matrix products for several), so a 2-row forward is not simply "a bit more than a 1-row
# one". Only the trend over powers of two carries information at this scale.
#
# ## 3. The baseline: the project's loop against `model.generate`
#
# Same prompts, same `max_new_tokens`, warm-up first, the two methods interleaved, medians over
# repeats. The outputs must be identical token for token (asserted). What to look for in the ratio:
# a value near 1 or above, meaning the project's loop is not a slow strawman; one measurement on a
# shared machine moves by several percent either way.

# %%
prompts = [p.prompt for p in corpus.math_problems(num_prompts, split="held_out", start=700)]
ids = [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in prompts]
stops = stop_token_ids(model, tokenizer)

def ours(x):
    return generate_autoregressive(model, x, max_new_tokens, stop_token_ids=stops).tokens

def hf(x):
    return model.generate(x, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stops,
                          pad_token_id=tokenizer.pad_token_id)[0, x.shape[1]:].tolist()

assert all(ours(x) == hf(x) for x in ids)            # the identity check
timed = interleaved({"ours": lambda: [ours(x) for x in ids],
                     "generate": lambda: [hf(x) for x in ids]}, repeats=3, warmup=1, device=device)
median = {name: statistics.median(sum(map(len, out)) / seconds for seconds, out in rounds)
          for name, rounds in timed.items()}
print(f"ours {median['ours']:.1f} tokens/s, generate {median['generate']:.1f} tokens/s, "
      f"ratio {median['ours'] / median['generate']:.2f}x")

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# ## Summary
#
# * A decode step is a full forward pass. Section 1 splits it into the multiplications by the
#   weights and a cost mostly paid once per forward (attention, norms, dispatch, Python); the printed
#   shares say which dominates on your machine. The once-per-forward share is what makes putting
#   several tokens in one forward cheap.
# * Processing `n` tokens in one forward costs much less than `n` forwards. That gap is the budget
#   speculative decoding spends on verification. Small wiggles in `t(n)/t(1)` are noise; compare
#   them with the printed spread.
# * The project's loop is exact (`model.generate`'s tokens) and about as fast, so every later
#   speedup is measured against an honest baseline.
# * A server spends the same slack differently: it puts many requests' tokens in one forward.
#   Notebook 11 measures t(b, w) for b requests of w tokens each, and what batching leaves for
#   speculative decoding.
#
# ## Review questions
#
# 1. Why does every decode step read every weight of the model, whatever the prompt?
# 2. Which part of a decode step grows with the context length, and which does not?
# 3. Why does the first token take longer than the ones after it?
# 4. What does `t(n)/t(1)` measure, and why is it the cost of verifying a block of `n` tokens?
# 5. Why are the forward times taken in an interleaved, rotating order and summarised by a median
#    and a spread?
# 6. When `t(2)/t(1)` comes out above `t(8)/t(1)`, what two explanations should you weigh, and how
#    do you tell them apart?
# 7. In `speedup = tau * t(1) / (t(B) + t_draft(B))`, which terms does the drafter control, and
#    which does the hardware?
# 8. On a GPU, for an 8B model, would you expect `t(16)/t(1)` to be closer to 1 or to 16? Why?
# 9. Why must the baseline produce exactly `model.generate`'s tokens before any speedup is reported?
#
# ## Exercises
#
# Difficulty: ★ a few minutes, ★★ about an hour, ★★★ a project. Each exercise has a check:
# put your answer in place of `None` and run the check cell under it, which shows the points scored. Worked solutions:
# `notebooks/solutions/01_autoregressive_bottleneck.py`.
#
# **1. ★ What the cache holds.** Run `generate_autoregressive(model, x, 16)` (no stop tokens) on
# the prompt of `corpus.math_problems(1, split="held_out", start=700)[0]`. How many positions does
# the target's KV cache hold at the end? *(Hint: is the last new token ever fed to the model?)*

# %% nbgrader={"grade": false, "grade_id": "ch01_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch01 import check_cache_positions
### BEGIN SOLUTION
answer_1 = None   # your answer: an integer
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch01_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_cache_positions(answer_1), 1)

# %% [markdown]
# **2. ★ Bytes per step.** How many bytes of weights does one decode step of this target read, in
# float32? The embedding lookup reads one row of its table; check `model.config.tie_word_embeddings`
# before you count the LM head.

# %% nbgrader={"grade": false, "grade_id": "ch01_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch01 import check_weight_bytes
### BEGIN SOLUTION
answer_2 = None   # your answer: a number of bytes
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch01_exercise_2_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_weight_bytes(answer_2), 1)

# %% [markdown]
# **3. ★★ When the cache outweighs the model.** Each cached position adds a key and a value per
# layer. At what context length does the float32 KV cache hold as many bytes as the weights of
# exercise 2? The answer may lie past the target's context window
# (`model.config.max_position_embeddings`): then it is a number on paper for this model, and a
# real one for a model with a longer window. Re-run section 1 with `-p context_length 512` under
# papermill: which part of the step grew, and does it match the bytes you computed? *(The check
# tests the context length.)*

# %% nbgrader={"grade": false, "grade_id": "ch01_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch01 import check_kv_crossover
### BEGIN SOLUTION
answer_3 = None   # your answer: a context length in tokens
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch01_exercise_3_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_kv_crossover(answer_3), 2)

# %% [markdown]
# **4. ★ Break-even tau.** From the measured `t` of section 2 (run with 16 in `token_counts`),
# what is the smallest tau for which a block of 16 breaks even, ignoring the drafter's cost? And
# with a drafter that costs a quarter of `t(16)`? Answer a pair; the check uses your `t`.

# %% nbgrader={"grade": false, "grade_id": "ch01_exercise_4", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch01 import check_break_even
### BEGIN SOLUTION
answer_4 = None   # your answer: (tau without drafter cost, tau with the drafter)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch01_exercise_4_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_break_even(answer_4, t), 1)

