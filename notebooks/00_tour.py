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
#   (`dflash_lite/decoding/decode.py`), checked token for token against `model.generate`.
#
# Everything runs on a laptop CPU, offline, in a minute or two.

# %% [markdown]
# **In this chapter you will**
#
# * load the shipped target and tokenizer and say what they were trained on;
# * run the autoregressive baseline and check it token for token against `model.generate`;
# * run a first DFlash generation and read its [tau](../docs/glossary.md#tau) (the mean [acceptance length](../docs/glossary.md#acceptance-length)) and speedup.
#
# **Prerequisites:** none: start here.
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import json, time
from pathlib import Path

import matplotlib.pyplot as plt
import torch

import dflash_lite
from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.decoding.target import SHIPPED
from dflash_lite.measuring.plotting import save_figure

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end

# %% tags=["parameters"]
# Parameters (papermill can override these: papermill 00_tour.ipynb out.ipynb -p max_new_tokens 32)
target_name = "tiny"
device = "cpu"
max_new_tokens = 64
num_parity_prompts = 10

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
# defined in dflash_lite/decoding/target.py
model, tokenizer = load_pretrained(target_name, device=device)
n_params = sum(p.numel() for p in model.parameters())
print(type(model).__name__, f"{n_params / 1e6:.2f}M parameters,", model.config.num_hidden_layers,
      "layers,", "hidden", model.config.hidden_size, "| vocab", len(tokenizer))
assert type(model).__name__ in ("Qwen3ForCausalLM", "LlamaForCausalLM")

# %% [markdown]
# ## The model card
#
# Every number on the card was measured by `python -m dflash_lite.zoo card dflash_lite/models/tiny`
# on held-out data: math problems from generator seeds that training never drew, and function
# headers from standard-library files that training never saw.

# %%
card = json.loads((SHIPPED["tiny"] / "card.json").read_text())
print(f"held-out loss: code {card['held_out_loss']['code']:.3f}, math "
      f"{card['held_out_loss']['math']:.3f} (nats/token)")
print(f"math final-answer accuracy: {card['math_final_answer_accuracy']['accuracy']:.1%} of "
      f"{card['math_final_answer_accuracy']['n']}")
print(f"code ast.parse rate: {card['code_ast_parse_rate']['rate']:.1%} of "
      f"{card['code_ast_parse_rate']['n']}")
print(f"trained {card['training']['steps_done']} steps in "
      f"{card['training']['train_seconds'] / 60:.0f} min on {card['training']['device']}")
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
print("mask token:", tokenizer.mask_token, "id", tokenizer.mask_token_id, "| eos:",
      tokenizer.eos_token, tokenizer.eos_token_id)
assert ids.count(tokenizer.mask_token_id) == 2
assert tokenizer.decode(tokenizer("def f(x):\n    return x",
                                  add_special_tokens=False).input_ids) == "def f(x):\n    return x"

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
# The same greedy completion is run a few times more (the grey lines, one per run); the blue line
# is the median over the runs at each token. What to look for: the first point above the rest (the
# prefill), then a roughly flat line, one forward per token. It does not grow with the number of
# tokens already written; what moves a single run is the machine (an isolated spike, or a step up
# or down when other work starts or stops on these cores), and the median over runs and tokens
# printed below the plot sets such moments aside. This flat line is the *autoregressive
# bottleneck* that speculative decoding attacks.

# %%
latency_runs = 5
runs = [result] + [generate_autoregressive(model, prompt_ids, max_new_tokens, stop_token_ids=stops)
                   for _ in range(latency_runs - 1)]           # greedy: the same tokens each time
per_run = torch.tensor([r.per_token_latency for r in runs]) * 1e3        # (runs, tokens), ms
latency_ms = per_run.median(dim=0).values.tolist()
fig, ax = plt.subplots(figsize=(7, 3))
tokens = range(1, len(latency_ms) + 1)
for run in per_run:
    ax.plot(tokens, run.tolist(), color="0.75", lw=0.8)
ax.plot(tokens, latency_ms, marker=".", lw=1.2, label=f"median of {latency_runs} runs")
ax.legend(loc="upper right")
ax.set_xlabel("token index"); ax.set_ylabel("latency (ms)")
ax.set_title(f"Per-token latency, {target_name} target, autoregressive, {device}")
ax.set_ylim(0, 1.3 * max(latency_ms))      # a single run's outliers may leave the frame
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
# here a few; asserted), and should be about as fast. The speed ratio printed is a single pass over
# the prompts, so it moves by several percent from run to run; notebook 01 measures it with repeats.

# %%
prompts = [p.prompt
           for p in corpus.math_problems(num_parity_prompts // 2, split="held_out", start=300)]
prompts += corpus.function_headers(corpus.stdlib_files("held_out"),
                                   num_parity_prompts - len(prompts), seed=5)
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
      f"generate {n_tokens / t_hf:.1f} tokens/s, ratio {t_hf / t_ours:.2f}x "
      "(one run; see `python -m dflash_lite bench`)")
assert same == len(prompts)

# %% [markdown]
# ## And the drafter
#
# The box also holds a trained DFlash drafter for this target (`dflash_lite/models/tiny-dflash`,
# notebooks 03 and 05 open it up). One speculative run next to the baseline: same tokens, fewer
# target forwards. (`python -m dflash_lite demo` prints the same comparison.)
#
# Tokens/s are wall-clock rates, so they move with whatever else the machine is doing: compare the
# two methods within this cell, where they alternate and the median of three runs is kept, not with
# the rates of earlier cells. The count of verification steps does not depend on the machine at all.

# %%
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.decoding.target import default_drafter_path

drafter = load_drafter(default_drafter_path("tiny")).to(device)
runs = {"autoregressive": [], "DFlash": []}
for _ in range(3):
    runs["autoregressive"].append(
        generate_autoregressive(model, prompt_ids, max_new_tokens, stop_token_ids=stops))
    runs["DFlash"].append(
        generate(model, DFlashProposer(drafter, model), prompt_ids, max_new_tokens,
                 stop_token_ids=stops))
ar, sd = (sorted(r, key=lambda x: x.total_time)[1] for r in runs.values())
print(f"autoregressive {ar.tokens_per_s:.1f} tokens/s; DFlash {sd.tokens_per_s:.1f} tokens/s "
      f"({sd.tokens_per_s / ar.tokens_per_s:.2f}x), tau {sd.tau:.2f}, "
      f"{len(sd.acceptance_lengths)} verification steps for {len(sd.tokens)} tokens")
assert sd.tokens == ar.tokens

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# ## Summary
#
# * The shipped target is a real `Qwen3ForCausalLM`; the loader takes the same path for any local
#   Qwen3/Llama directory or hub id, and fails with one line when it cannot.
# * The tokenizer reserves `<|mask|>`, which the DFlash drafter uses to fill a block.
# * Autoregressive decoding costs one target forward per token: the per-token latency does not
#   grow with the tokens written.
# * The project's own loop is token-for-token identical to `model.generate` and is the baseline
#   every later speedup is measured against.
# * The shipped DFlash drafter produces the same tokens with far fewer target forwards.
# * What the toy cannot show: it was trained on templated text the project wrote, so its drafter's
#   acceptance on that text is far above what any drafter reaches on text no one here wrote.
#   Notebook 08 runs the same benchmark on a real public model, SmolLM2-135M, with the drafter
#   trained for it here, and prints what DFlash gains there.
#
# ## Review questions
#
# 1. Why must `<|mask|>` be a single token id, reserved before the tokenizer is trained?
# 2. What does a `GenerationResult`'s time to first token include, and why is it longer than the
#    later per-token latencies?
# 3. What makes a math problem "held out", and why does the model card measure only on such problems?
# 4. Why is the project's loop checked token for token against `model.generate` before any speedup
#    is reported?
# 5. In the last cell, how are tau, the number of verification steps and the number of tokens related?
# 6. Why can the autoregressive tokens/s differ between two cells of this notebook, and which
#    comparison of rates is fair?
# 7. Greedy speculative decoding returned exactly the autoregressive tokens. Which part of the
#    method guarantees that, the drafter or the verification?
#
# ## Exercises
#
# Difficulty: ★ a few minutes, ★★ about an hour, ★★★ a project. Each exercise has a check:
# put your answer in place of `None` and run the check cell under it, which shows the points scored. Worked solutions: `notebooks/solutions/00_tour.py`.
#
# **1. ★ Counting forwards.** On this notebook's held-out problem, with `max_new_tokens=64` and the
# stop tokens, how many target forwards (prefill included) does the autoregressive loop make, and how
# many does DFlash make? *(Hint: a forward hook on `model` can count them for you; then explain the
# count from the printed results.)*

# %% nbgrader={"grade": false, "grade_id": "ch00_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch00 import check_target_forwards
### BEGIN SOLUTION
answer_1 = None   # your answer: (autoregressive forwards, DFlash forwards)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch00_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_target_forwards(answer_1), 1)

# %% [markdown]
# **2. ★ Seeds.** Sample this notebook's problem with `SamplingParams(temperature=0.8, top_p=0.9)`
# (from `dflash_lite`), 32 new tokens and the stop tokens, passing
# `generator=torch.Generator().manual_seed(seed)` to `generate_autoregressive`. Check that the same
# seed gives the same tokens. How many distinct completions do seeds 0 to 9 give? What does that
# count say about how sure the target is of its next token on a templated math problem?

# %% nbgrader={"grade": false, "grade_id": "ch00_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch00 import check_distinct_samples
### BEGIN SOLUTION
answer_2 = None   # your answer: an integer from 1 to 10
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch00_exercise_2_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_distinct_samples(answer_2), 1)

# %% [markdown]
# **3. ★★ A new kind of problem.** Read `dflash_lite/corpus.py` and write a new math template: a
# function `template(r: random.Random) -> corpus.MathProblem` that draws every choice from `r`, writes
# one step per line (`a * b = c`) and ends with `The answer is N.`. The check draws 20 problems and
# tests that they vary, that the arithmetic adds up and that `corpus.final_answer` reads each answer.

# %% nbgrader={"grade": false, "grade_id": "ch00_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch00 import check_math_template
### BEGIN SOLUTION
answer_3 = None   # your answer: the template function itself
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch00_exercise_3_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_math_template(answer_3), 2)

# %% [markdown]
# **4. ★★ Another architecture.** No Llama ships with the repository, so make one offline: a small
# random `transformers.LlamaForCausalLM` (a `LlamaConfig` with `vocab_size=len(tokenizer)`, a hidden size
# of 64, 2 layers, 4 attention heads, 2 key-value heads, `eos_token_id=tokenizer.eos_token_id`), saved
# with `save_pretrained(path)` next to this tokenizer (`tokenizer.save_pretrained(path)`). Load it with
# `load_pretrained(path)` and run the parity cell on it. The check does the same on two prompts.

# %% nbgrader={"grade": false, "grade_id": "ch00_exercise_4", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch00 import check_llama_parity
### BEGIN SOLUTION
answer_4 = None   # your answer: the directory you saved the model to
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch00_exercise_4_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_llama_parity(answer_4), 2)

