"""Write the course notebooks from the cell lists below (run once after editing; outputs come from execution).

    python tools/build_notebooks.py && jupyter nbconvert --to notebook --execute --inplace notebooks/*.ipynb
"""
from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent.parent / "notebooks"


def notebook(cells):
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, text, *tags in cells:
        cell = nbf.v4.new_markdown_cell(text.strip()) if kind == "md" else nbf.v4.new_code_cell(text.strip())
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    return nb


TOUR = [
    ("md", """
# 00 · A tour of the box

What `dflash-lite` ships, and the baseline every later notebook measures against.

* a **target model**: a real Hugging Face `Qwen3ForCausalLM`, trained by this project on text that
  exists offline (the Python standard library and generated grade-school math), with its model card;
* a **tokenizer** (byte-level BPE from `tokenizers`) that reserves the `<|mask|>` token the DFlash drafter needs;
* the **autoregressive baseline**: prefill, then one target forward per new token, with the KV cache
  (`dflash_lite/decode.py`), checked token for token against `model.generate`.

Everything runs on a laptop CPU, offline, in well under two minutes.
"""),
    ("code", """
import json, time
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

import dflash_lite
from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.target import SHIPPED
from dflash_lite.plotting import figures_dir

torch.manual_seed(0)
FIGURES = figures_dir()
"""),
    ("code", """
# Parameters (papermill can override these: papermill 00_tour.ipynb out.ipynb -p max_new_tokens 32)
target_name = "tiny"
device = "cpu"
max_new_tokens = 64
num_parity_prompts = 10
""", "parameters"),
    ("code", """
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
model, tokenizer = load_pretrained(target_name, device=device)   # defined in dflash_lite/target.py
n_params = sum(p.numel() for p in model.parameters())
print(type(model).__name__, f"{n_params / 1e6:.2f}M parameters,", model.config.num_hidden_layers, "layers,",
      "hidden", model.config.hidden_size, "| vocab", len(tokenizer))
assert type(model).__name__ in ("Qwen3ForCausalLM", "LlamaForCausalLM")
"""),
    ("md", """
## The model card

Every number on the card was measured by `python -m dflash_lite.zoo card dflash_lite/models/tiny`
on held-out data: math problems from generator seeds that training never drew, and function
headers from standard-library files that training never saw.
"""),
    ("code", """
card = json.loads((SHIPPED["tiny"] / "card.json").read_text())
print(f"held-out loss: code {card['held_out_loss']['code']:.3f}, math {card['held_out_loss']['math']:.3f} (nats/token)")
print(f"math final-answer accuracy: {card['math_final_answer_accuracy']['accuracy']:.1%} of {card['math_final_answer_accuracy']['n']}")
print(f"code ast.parse rate: {card['code_ast_parse_rate']['rate']:.1%} of {card['code_ast_parse_rate']['n']}")
print(f"trained {card['training']['steps_done']} steps in {card['training']['train_seconds'] / 60:.0f} min on {card['training']['device']}")
assert card["parameters"] == sum(p.numel() for p in load_pretrained("tiny")[0].parameters())
"""),
    ("md", """
## The tokenizer and its mask token

DFlash drafts a block `[last accepted token, <|mask|>, <|mask|>, ...]`, so the tokenizer must have a
mask token that is a single id. Ours reserves it (and `<|endoftext|>`) before BPE training.
"""),
    ("code", """
text = "Question: Ava has 3 apples.<|mask|><|mask|>"
ids = tokenizer(text).input_ids
print([tokenizer.decode([i]) for i in ids])
print("mask token:", tokenizer.mask_token, "id", tokenizer.mask_token_id, "| eos:", tokenizer.eos_token, tokenizer.eos_token_id)
assert ids.count(tokenizer.mask_token_id) == 2
assert tokenizer.decode(tokenizer("def f(x):\\n    return x", add_special_tokens=False).input_ids) == "def f(x):\\n    return x"
"""),
    ("md", """
## A completion, timed

`generate_autoregressive` returns a `GenerationResult` with the tokens, the time to first token
(prefill + choosing the first token) and the time at which each token was ready.
"""),
    ("code", """
problem = corpus.math_problem(corpus.HELD_OUT_SEED + 42)      # a held-out problem
prompt_ids = tokenizer(problem.prompt, return_tensors="pt").input_ids.to(device)
stops = stop_token_ids(model, tokenizer)
generate_autoregressive(model, prompt_ids, 4, stop_token_ids=stops)   # warm-up
result = generate_autoregressive(model, prompt_ids, max_new_tokens, stop_token_ids=stops)
completion = tokenizer.decode(result.tokens, skip_special_tokens=True)
print(problem.prompt + completion)
print(f"\\n{len(result.tokens)} tokens, {result.tokens_per_s:.1f} tokens/s, "
      f"time to first token {result.time_to_first_token * 1e3:.1f} ms ({result.stop_reason})")
print("generator's answer:", problem.answer, "| model's:", corpus.final_answer(completion))
assert len(result.tokens) <= max_new_tokens and len(result.token_times) == len(result.tokens)
"""),
    ("md", """
## Per-token latency

Each new token costs one full forward of the target; the first also pays for the prompt (prefill).
This flat line is the *autoregressive bottleneck* that speculative decoding attacks.
"""),
    ("code", """
latency_ms = [t * 1e3 for t in result.per_token_latency]
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(range(1, len(latency_ms) + 1), latency_ms, marker=".", lw=1)
ax.set_xlabel("token index"); ax.set_ylabel("latency (ms)")
ax.set_title(f"Per-token latency, {target_name} target, autoregressive, {device}")
ax.set_yscale("log")
fig.tight_layout()
fig.savefig(FIGURES / "00_per_token_latency.png", dpi=120)
median = sorted(latency_ms[1:])[len(latency_ms[1:]) // 2] if len(latency_ms) > 1 else latency_ms[0]
print(f"median decode step {median:.2f} ms; first token {latency_ms[0]:.2f} ms")
assert (FIGURES / "00_per_token_latency.png").stat().st_size > 0
"""),
    ("md", """
## The baseline is exact

Speedups later are only honest if the baseline is a faithful decoder. The project's loop must
produce exactly the tokens of `model.generate(do_sample=False)` (the test suite checks 50 prompts;
here a few), and must be at least as fast.
"""),
    ("code", """
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
"""),
    ("md", """
## And the drafter

The box also holds a trained DFlash drafter for this target (`dflash_lite/models/tiny-dflash`,
notebooks 03 and 05 open it up). One speculative run next to the baseline: same tokens, fewer
target forwards. (`python -m dflash_lite demo` prints the same comparison.)
"""),
    ("code", """
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
"""),
    ("md", """
## Summary

* The shipped target is a real `Qwen3ForCausalLM`; the loader takes the same path for any local
  Qwen3/Llama directory or hub id, and fails with one line when it cannot.
* The tokenizer reserves `<|mask|>`, which the DFlash drafter uses to fill a block.
* Autoregressive decoding costs one target forward per token: the per-token latency is flat.
* The project's own loop is token-for-token identical to `model.generate` and is the baseline
  every later speedup is measured against.
* The shipped DFlash drafter produces the same tokens with far fewer target forwards.

## Exercises

1. Run this notebook with `-p max_new_tokens 256` under papermill. Does the per-token latency grow
   with the position? Why only a little at this context length? *(Hint: attention cost is linear in
   the cached length; the MLP and LM head are not.)*
2. Read `dflash_lite/corpus.py`. Write a new math template, generate 5 problems and check that
   `corpus.final_answer` parses every solution.
3. Sample with `SamplingParams(temperature=0.8, top_p=0.9)` and a fixed `torch.Generator` seed.
   Check that the same seed gives the same tokens, and a different seed different ones.
4. Load a Llama checkpoint (any local Hugging Face directory) with `load_pretrained(path)` and run
   the parity cell against it.
"""),
]


BOTTLENECK = [
    ("md", """
# 01 · The autoregressive bottleneck

A language model writes one token per forward pass. Each pass reads every weight of the model,
so on a GPU the time of a decode step is set by memory bandwidth, not arithmetic, and it barely
changes if the pass processes a few tokens instead of one. That slack is what speculative decoding
spends: guess several tokens cheaply, then check them all in **one** target forward.

This notebook measures the premise on your machine instead of assuming it:

1. where the time of one decode step goes;
2. how the forward time grows with the number of tokens processed at once (the cost of verifying a block);
3. the tokens/s of the project's autoregressive loop next to `model.generate`.
"""),
    ("code", """
import statistics, time
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.decode import new_cache, prefill
from dflash_lite.plotting import figures_dir

torch.manual_seed(0)
FIGURES = figures_dir()
"""),
    ("code", """
# Parameters
target_name = "tiny"
device = "cpu"
context_length = 128            # tokens already in the KV cache when we time a forward
token_counts = [1, 2, 4, 8, 16, 32]
repeats = 15
max_new_tokens = 48
num_prompts = 4
""", "parameters"),
    ("code", """
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
model, tokenizer = load_pretrained(target_name, device=device)      # dflash_lite/target.py
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
prompt = corpus.function_headers(corpus.stdlib_files("held_out"), 40, seed=2)
text = "".join(prompt)
context_ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=context_length).input_ids.to(device)
assert context_ids.shape[1] == context_length
print(f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}")
"""),
    ("md", """
## 1. Anatomy of one decode step

Forward hooks time the embedding, each decoder layer and the LM head for a single new token on top
of a cached context. (Hooks add a little overhead of their own; the proportions are what matter.)
"""),
    ("code", """
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
"""),
    ("md", """
## 2. Forward time against the number of tokens processed at once

We time one target forward over `n` new tokens on top of the same cached context, for
`n = 1, 2, 4, ...`. The ratio `t(n) / t(1)` is the cost of verifying a block of `n` tokens in units
of one decode step. Speculative decoding wins when this ratio is well below the number of tokens a
block commits on average (tau).
"""),
    ("code", """
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
"""),
    ("code", """
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(token_counts, [t[n] / t[1] for n in token_counts], marker="o", label="measured t(n) / t(1)")
ax.plot(token_counts, token_counts, ls="--", color="grey", label="n separate decode steps")
ax.set_xscale("log", base=2); ax.set_yscale("log", base=2)
ax.set_xlabel("tokens processed in one forward (n)"); ax.set_ylabel("cost in decode steps")
ax.set_title(f"Verifying a block: {target_name} target on {device}")
ax.legend(); fig.tight_layout()
fig.savefig(FIGURES / "01_forward_time_vs_tokens.png", dpi=120)
"""),
    ("md", """
On a GPU the measured curve stays almost flat up to dozens of tokens: the step is bound by reading
the weights. On a laptop CPU a model this small is closer to compute-bound, so the curve rises
sooner; the ratio `t(16)/t(1)` printed above is exactly the denominator term that limits the CPU
speedup in the cost model `speedup = tau * t(1) / (t(B) + t_draft(B))` (notebook 06).

## 3. The baseline: the project's loop against `model.generate`

Same prompts, same `max_new_tokens`, warm-up first, the two methods interleaved, medians over
repeats. The outputs must be identical token for token.
"""),
    ("code", """
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
"""),
    ("md", """
## Summary

* A decode step is a full forward pass; on this tiny model a good part of it is framework
  overhead outside the matrix multiplications, which is why small models gain little from batching
  work on a CPU, and why a GPU at this size is launch-bound rather than bandwidth-bound.
* Processing `n` tokens in one forward costs much less than `n` forwards. That gap is the budget
  speculative decoding spends on verification.
* The project's loop is exact (`model.generate`'s tokens) and at least as fast, so every later
  speedup is measured against an honest baseline.

## Exercises

1. Re-run with `-p context_length 512`. Which part of the step grows, and why? *(Hint: attention
   reads the whole cache; the MLP does not.)*
2. Re-run with `-p device cuda` on a GPU. How flat is `t(n)/t(1)` there, up to which `n`?
3. Use the measured `t(16)/t(1)` to compute the smallest tau that breaks even for a block of 16,
   ignoring the drafter's cost. Then include a drafter that costs a quarter of `t(16)`.
4. Threads: set `torch.set_num_threads(1)` and repeat section 2. What changes, and why?
"""),
]


SPECULATIVE = [
    ("md", """
# 02 · Speculative decoding

A cheap **draft** proposes `k` tokens; the **target** scores all of them in one forward; we keep
the longest prefix the target agrees with, plus one token of the target's own. Done right, the
output is exactly what the target alone would produce: greedy output token for token, sampled
output in distribution. This notebook builds the idea with a small independent draft model
(classic speculative decoding, Leviathan et al. 2023), proves the acceptance rule numerically,
and measures where the source article's rules go wrong.
"""),
    ("code", """
import statistics, time
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from dflash_lite import SamplingParams, corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.acceptance import (accept_article_ratio, accept_article_threshold, accept_greedy,
                                    accept_speculative, target_probs)
from dflash_lite.decode import DraftModelProposer, generate_speculative
from dflash_lite.target import SHIPPED_BASELINES
from dflash_lite.plotting import figures_dir

torch.manual_seed(0)
FIGURES = figures_dir()
"""),
    ("code", """
# Parameters
target_name = "tiny"
draft_model_path = str(SHIPPED_BASELINES["tiny"]["draft_model"])
device = "cpu"
draft_tokens = 4               # k: tokens drafted per step
max_new_tokens = 64
num_prompts = 4
num_samples = 4000             # for the empirical distribution checks
""", "parameters"),
    ("code", """
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
draft, _ = load_pretrained(draft_model_path, device=device)       # a 2-layer Qwen3, same tokenizer
stops = stop_token_ids(target, tokenizer)
print(f"target {sum(p.numel() for p in target.parameters()) / 1e6:.1f}M parameters, "
      f"draft {sum(p.numel() for p in draft.parameters()) / 1e6:.1f}M ({draft.config.num_hidden_layers} layers)")
"""),
    ("md", """
## One step by hand: draft, verify, accept (greedy)

The target sees `[last, d1, ..., dk]` in one forward and returns its choice after each of them.
Draft `d_i` is kept while it equals the target's choice at the position before it
(`dflash_lite/acceptance.py: accept_greedy`); the target's choice at the first disagreement (or
after the last draft) is appended, so each step commits between 1 and k+1 tokens.
"""),
    ("code", """
problem = corpus.math_problem(corpus.HELD_OUT_SEED + 77)
ids = tokenizer(problem.prompt, return_tensors="pt").input_ids.to(device)
with torch.inference_mode():
    context = torch.cat([ids, target(ids).logits[:, -1:].argmax(-1)], dim=1)     # prompt + first token
    drafted = context
    for _ in range(draft_tokens):                                                 # k draft forwards
        drafted = torch.cat([drafted, draft(drafted).logits[:, -1:].argmax(-1)], dim=1)
    d = drafted[0, context.shape[1]:]
    scores = target(drafted).logits[0, context.shape[1] - 1:]                     # one target forward, k+1 rows
n, extra = accept_greedy(d, scores)
print("draft   :", [tokenizer.decode([t]) for t in d.tolist()])
print("target  :", [tokenizer.decode([t]) for t in scores.argmax(-1).tolist()])
print(f"accepted {n} of {draft_tokens} drafts, then the target's {tokenizer.decode([extra])!r}: {n + 1} tokens for one target forward")
assert 0 <= n <= draft_tokens
"""),
    ("md", """
## The whole loop is exact

`generate_speculative` (`dflash_lite/decode.py`) runs that step until the end, cropping the target's
KV cache back to the accepted tokens each time. Its greedy output must equal the target's.
"""),
    ("code", """
prompts = [p.prompt for p in corpus.math_problems(num_prompts, split="held_out", start=1200)]
prompt_ids = [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in prompts]
results, identical = [], 0
for x in prompt_ids:
    expected = generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens
    r = generate_speculative(target, DraftModelProposer(draft, target, draft_tokens + 1), x, max_new_tokens,
                             stop_token_ids=stops)
    identical += r.tokens == expected
    results.append(r)
lengths = [a for r in results for a in r.acceptance_lengths]
tau = statistics.mean(lengths)
print(f"identical on {identical}/{len(prompt_ids)} prompts; tau = {tau:.2f} tokens per target forward")
assert identical == len(prompt_ids)
"""),
    ("md", r"""
## Lossless sampling, derived and checked

With temperature > 0 the draft token `x` comes from the draft's distribution `q`. Accept it with
probability `min(1, p(x)/q(x))`; on rejection sample from `r = normalise(max(p - q, 0))`. Then

$$P(\text{out} = y) = q(y)\min\Big(1, \tfrac{p(y)}{q(y)}\Big) + \Big(1 - \sum_x \min(p(x), q(x))\Big)\,
\frac{\max(p(y) - q(y), 0)}{\sum_z \max(p(z) - q(z), 0)} = \min(p(y), q(y)) + \max(p(y) - q(y), 0) = p(y),$$

because `1 - Σ min(p, q) = Σ max(p - q, 0)`. So the output is distributed exactly as the target's.
The source article instead accepts when `p(x) >= q(x)` (else resamples from p), or when
`p(x) >= 0.5`. Below, the exact output distribution of each rule for the target's real next-token
distribution at the start of a math problem, its total-variation distance from `p`, and a sampled
check. The first two rules get drafts sampled from the draft model; the threshold rule gets the
best possible point-mass draft, the target's own favourite token.
"""),
    ("code", """
sampling = SamplingParams(temperature=1.0)
x = tokenizer("Question: ", return_tensors="pt").input_ids.to(device)     # the start of a math problem
with torch.inference_mode():
    p = target_probs(target(x).logits[0, -1:], sampling)[0].double().cpu()
    q = target_probs(draft(x).logits[0, -1:], sampling)[0].double().cpu()

def exact_output(rule):
    if rule == "lossless (min(1, p/q))":
        residual = (p - q).clamp(min=0)
        return torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * residual / residual.sum()
    if rule == "article: p(x) >= q(x)":
        keep = (p >= q).double()
        return q * keep + (q * (1 - keep)).sum() * p
    if rule == "article: p(x) >= 0.5 (argmax draft)":
        out = p.clone() * 0
        star = int(p.argmax())                      # a good drafter proposes the target's favourite
        if p[star] >= 0.5:
            out[star] = 1.0
        else:
            out = p.clone()
        return out

rules = ["lossless (min(1, p/q))", "article: p(x) >= q(x)", "article: p(x) >= 0.5 (argmax draft)"]
tv = {r: 0.5 * float((exact_output(r) - p).abs().sum()) for r in rules}
for r in rules:
    print(f"{r:<40} TV distance from the target: {tv[r]:.4f}")
assert tv[rules[0]] < 1e-6 and tv[rules[1]] > 1e-3 and tv[rules[2]] > 1e-3
"""),
    ("code", """
# the same, sampled through the acceptance functions of dflash_lite/acceptance.py (one draft token)
g = torch.Generator().manual_seed(0)
counts = {r: np.zeros(len(p)) for r in rules}
pp, qq = p.float()[None].repeat(2, 1), q.float()[None]      # p at the draft position and the one after
argmax_draft = p.float().argmax().view(1)                    # a good point-mass drafter
for _ in range(num_samples):
    sampled_draft = torch.multinomial(q.float(), 1, generator=g)
    for r in rules:
        if r == rules[0]:
            d, (n, nxt) = sampled_draft, accept_speculative(sampled_draft, qq, pp, g)
        elif r == rules[1]:
            d, (n, nxt) = sampled_draft, accept_article_ratio(sampled_draft, qq, pp, g)
        else:
            d, (n, nxt) = argmax_draft, accept_article_threshold(argmax_draft, pp, 0.5, g)
        counts[r][int(d[0]) if n >= 1 else nxt] += 1        # the first emitted token
support = p.topk(10).indices.tolist()                       # the target's ten likeliest tokens
fig, ax = plt.subplots(figsize=(8, 3.5))
width = 0.2
xs = np.arange(len(support))
ax.bar(xs - 1.5 * width, p[support], width, label="target p", color="black")
for i, r in enumerate(rules):
    ax.bar(xs + (i - 0.5) * width, counts[r][support] / num_samples, width, label=f"{r} (TV {tv[r]:.3f})")
ax.set_xticks(xs, [repr(tokenizer.decode([t])) for t in support], rotation=45, fontsize=8)
ax.set_ylabel("probability"); ax.legend(fontsize=7); ax.set_title("Output distribution of one speculative step")
fig.tight_layout(); fig.savefig(FIGURES / "02_acceptance_rules.png", dpi=120)
from scipy.stats import chisquare
def chi2_p(rule):            # the ten likeliest tokens and "everything else", against p
    observed = [counts[rule][t] for t in support]
    expected = [float(p[t]) * num_samples for t in support]
    return chisquare(observed + [num_samples - sum(observed)], expected + [num_samples - sum(expected)]).pvalue
pvalues = {r: chi2_p(r) for r in rules}
for r, pv in pvalues.items():
    print(f"{r:<40} sampled, chi-square p = {pv:.3g}")
assert pvalues[rules[0]] > 0.001
"""),
    ("md", """
## Expected tau under a constant acceptance rate

If every draft token were accepted independently with probability `a`, a step with `k` drafts
would commit `(1 - a^(k+1)) / (1 - a)` tokens on average. Measure `a` from the run above (the
fraction of draft tokens that were accepted, counting only positions that were reached) and compare.
"""),
    ("code", """
reached = accepted = 0
for a_len in lengths:
    n = a_len - 1                                  # accepted drafts in that step
    accepted += n
    reached += min(n + 1, draft_tokens)            # drafts that were looked at
a = accepted / reached
predicted = (1 - a ** (draft_tokens + 1)) / (1 - a) if a < 1 else draft_tokens + 1
print(f"per-token acceptance a = {a:.3f}; predicted tau = {predicted:.2f}, measured tau = {tau:.2f}")
"""),
    ("md", """
The prediction is close when acceptance is roughly independent of position; it overestimates when
drafts fail in bursts (a hard token stays hard), which is the usual case in real text.

## A training-free peer: prompt lookup

Prompt-lookup decoding (transformers' `prompt_lookup_num_tokens`) drafts by copying the tokens that
followed the last n-gram's earlier occurrence in the prompt. It needs no model at all.
"""),
    ("code", """
def timed(fn):
    t0 = time.perf_counter(); out = fn(); return out, time.perf_counter() - t0

rows = {"target alone (generate)": [], "prompt lookup (generate)": [], "draft model (ours)": []}
for x in prompt_ids[:2]:
    for _ in range(2):
        base, t_base = timed(lambda: target.generate(x, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stops,
                                                     pad_token_id=tokenizer.pad_token_id)[0, x.shape[1]:].tolist())
        pl, t_pl = timed(lambda: target.generate(x, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stops,
                                                 pad_token_id=tokenizer.pad_token_id, prompt_lookup_num_tokens=draft_tokens)[0, x.shape[1]:].tolist())
        sd, t_sd = timed(lambda: generate_speculative(target, DraftModelProposer(draft, target, draft_tokens + 1), x,
                                                      max_new_tokens, stop_token_ids=stops).tokens)
        assert pl == base and sd == base
        rows["target alone (generate)"].append(len(base) / t_base)
        rows["prompt lookup (generate)"].append(len(pl) / t_pl)
        rows["draft model (ours)"].append(len(sd) / t_sd)
for name, v in rows.items():
    print(f"{name:<26} {statistics.median(v):7.1f} tokens/s")
"""),
    ("md", """
## Summary

* Speculative decoding commits 1..k+1 tokens per target forward and never changes the output:
  greedy acceptance keeps the prefix the target agrees with; sampled acceptance uses
  `min(1, p/q)` and the residual `max(p - q, 0)`.
* The source article's rules are not lossless: they visibly move probability mass (TV distance above).
* tau depends on how well the draft imitates the target, and the speedup on how cheap drafting is.
  An autoregressive draft pays one forward per draft token; DFlash (next notebook) pays one per block.

## Exercises

1. Change `draft_tokens` to 2 and 8 (papermill `-p draft_tokens 8`). How do tau and tokens/s move? Why
   does tau saturate while the drafting cost keeps growing?
2. Prove that accepting when `p(x) >= q(x)` and otherwise resampling from `p` over-represents tokens
   where `p >= q`. *(Hint: compute `P(out = y)` for such a `y`.)*
3. Sample with `SamplingParams(temperature=0.7, top_p=0.9)` and repeat the TV check. Which processors
   must be applied to `q` as well as to `p`, and why does it not matter for losslessness?
4. When does prompt lookup beat the draft model? Try a code prompt that repeats identifiers.
"""),
]


BLOCK_DIFFUSION = [
    ("md", """
# 03 · The block-diffusion drafter

An autoregressive drafter pays one forward per draft token. DFlash drafts a whole block in **one**
forward: the block is `[last accepted token, <|mask|>, ..., <|mask|>]`, attention is bidirectional
inside the block, and every layer also attends to the target's hidden states at all accepted
positions (KV injection). The B-1 masked positions are filled at once by the target's own LM head.

This notebook looks inside the shipped drafter (`dflash_lite/drafter.py`) and measures:

1. the masked block and the attention pattern (training and inference);
2. one forward for B-1 tokens against B-1 forwards of the EAGLE-style drafter;
3. what the drafter gets right at each block position;
4. the multi-step denoising experiment: does re-feeding the draft for a 2nd or 3rd pass pay?
"""),
    ("code", """
import statistics, time
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.checkpoints import load_drafter
from dflash_lite.decode import DFlashProposer, EagleProposer, generate_speculative
from dflash_lite.target import SHIPPED_BASELINES, SHIPPED_DRAFTERS, context_features
from dflash_lite.train import block_attention_mask
from dflash_lite.plotting import figures_dir

torch.manual_seed(0)
FIGURES = figures_dir()
"""),
    ("code", """
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
""", "parameters"),
    ("code", """
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
"""),
    ("md", """
## 1. The masked block and who sees what

At inference the block's queries see every accepted position's context features and the whole
block. In training, many blocks of one sequence share one forward: block *j* sees the context
strictly before its anchor and itself, never another block (`dflash_lite/train.py: block_attention_mask`).
"""),
    ("code", """
anchors = torch.tensor([3, 6, 9])
mask = block_attention_mask(anchors, 12, 4).int()
fig, ax = plt.subplots(figsize=(7, 3))
ax.imshow(mask, cmap="Greys", aspect="auto")
ax.axvline(11.5, color="red", lw=1)
ax.set_xlabel("keys: context positions 0-11 | block tokens of 3 blocks")
ax.set_ylabel("queries: 3 blocks x 4")
ax.set_title("Training attention mask (black = may attend)")
fig.tight_layout(); fig.savefig(FIGURES / "03_block_attention_mask.png", dpi=120)
assert mask[0, :3].all() and not mask[0, 3:12].any() and not mask[0, 16:].any()
"""),
    ("md", """
## 2. One forward for the block against one forward per token

Same context, same conditioning. The DFlash drafter fills B-1 positions in one forward; the
EAGLE-style drafter (same layers, same taps, autoregressive) needs B-1 forwards.
"""),
    ("code", """
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
"""),
    ("md", """
## 3. What the drafter gets right at each block position

A draft at block position *j* only counts if positions 1..j-1 were accepted too. From the
acceptance lengths of real greedy runs we get the share of steps that reached each position.
"""),
    ("code", """
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
fig.tight_layout(); fig.savefig(FIGURES / "03_acceptance_by_position.png", dpi=120)
"""),
    ("md", """
## 4. Multi-step denoising: does a second pass pay?

The source article describes a multi-step, DDPM-style denoising loop. DFlash drafts in **one**
pass from masks. A fair experiment: after the first pass, feed the drafted tokens back in place of
the masks and run the drafter again (`DFlashProposer(..., passes=n)`). Each pass costs one more
drafter forward; it pays only if tau rises by more than the extra cost.
"""),
    ("code", """
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
"""),
    ("md", """
The drafter was trained for exactly one pass from masks, so re-fed drafts are inputs it never saw
in training: tau does not rise with more passes (with the shipped drafter it falls), while every pass
adds a drafter forward. One pass is the method, as the paper says.

## Summary

* A DFlash step drafts B-1 tokens with one drafter forward conditioned on the target's own hidden
  states; the EAGLE-style drafter with the same conditioning needs B-1 forwards.
* Acceptance decays with the block position, which is why the training loss weights early
  positions more (`exp(-(k-1)/gamma)`, notebook 05).
* Extra denoising passes do not pay for themselves here.

## Exercises

1. Run with `-p block_size 8`. The drafter was trained with 16: what happens to tau and speed?
2. Print the drafter's top-3 candidates at each block position for one step. Where is it unsure?
3. Change `passes` to `[1, 2, 4, 8]`. Plot tau and tokens/s against the number of passes.
4. Why must a training block never see the target's features at its own anchor position?
   *(Hint: what does the target's hidden state at position a already encode about position a+1?)*
"""),
]


TRAINING = [
    ("md", """
# 05 · Training a DFlash drafter

The recipe (paper section 4.2; `dflash_lite/train.py`):

1. **Data is regenerated by the target.** Prompts from the training split are answered by the
   target itself, greedily, so the drafter learns *the target's* distribution, not the dataset's.
2. **Random anchors.** In each response, sample anchor positions *a*. Each opens a block
   `[x_a, MASK x (B-1)]` whose labels are `x_{a+1} .. x_{a+B-1}`. Anchors are resampled every epoch.
3. **One forward for all blocks** of a sequence, under a block attention mask: block *j* sees the
   target's features at positions `< a_j` and itself (bidirectionally), never another block.
4. **Decay-weighted cross-entropy**: position *k* of a block gets weight
   $w_k = e^{-(k-1)/\\gamma}$, normalised by $\\sum_k w_k$ (gamma = 7 for B = 16), because a miss at
   position *k* throws away everything after it.

The source article trains with **MSE on logits** against a noised random block; notebook 07 puts
that next to this objective.
"""),
    ("code", """
import json, time
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from dflash_lite import load_pretrained
from dflash_lite.drafter import DFlashDrafter, DrafterConfig
from dflash_lite.plotting import figures_dir
from dflash_lite.train import (Trainer, TrainConfig, block_attention_mask, drafter_loss, epoch_batches,
                               loss_gamma, make_batch, position_weights, regenerate, tau_probe, training_prompts)

torch.manual_seed(0)
FIGURES = figures_dir()
ROOT = FIGURES.parent
"""),
    ("code", """
# Parameters
target_name = "tiny"
device = "cpu"
num_prompts = 48          # training prompts to regenerate (2/3 math, 1/3 code)
max_new_tokens = 48
block_size = 8
steps = 60
batch_size = 4
num_anchors = 8
lr = 3e-3
probe_prompts = 2         # held-out prompts per domain for tau before/after
""", "parameters"),
    ("code", """
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
for p in target.parameters():
    p.requires_grad_(False)
"""),
    ("md", """
## 1. Regenerating the data with the target

Batched greedy generation with a progress bar. The result is cached (by prompts, length and a
fingerprint of the target's weights) under `.cache/dflash_lite`; the file only gets its final
name once it is complete, so an interrupted run is never mistaken for a finished one.
"""),
    ("code", """
prompts = training_prompts(num_prompts - num_prompts // 3, num_prompts // 3, seed=0)   # train split only
t0 = time.perf_counter()
data = regenerate(target, tokenizer, prompts, max_new_tokens, batch_size=16,
                  cache_dir=ROOT / ".cache" / "dflash_lite")       # a second run reads the cache
print(f"{len(data)} sequences in {time.perf_counter() - t0:.1f} s; "
      f"mean response {np.mean([len(s) - p for s, p in zip(data.sequences, data.prompt_lengths)]):.1f} tokens")
i = 0
print("prompt:  ", repr(tokenizer.decode(data.sequences[i][: data.prompt_lengths[i]])))
print("response:", repr(tokenizer.decode(data.sequences[i][data.prompt_lengths[i]:])))
assert all(len(s) > p for s, p in zip(data.sequences, data.prompt_lengths))
"""),
    ("md", """
## 2. Anchors and the block mask of one real sequence
"""),
    ("code", """
g = torch.Generator().manual_seed(0)
seq, plen = data.sequences[0], data.prompt_lengths[0]
batch = make_batch([seq], [plen], block_size, 3, tokenizer.mask_token_id, tokenizer.pad_token_id, g)
anchors = batch.block_positions[0, ::block_size][:3]
print("anchors:", anchors.tolist(), "(response starts at", plen, ")")
for j, a in enumerate(anchors.tolist()):
    ids = batch.block_ids[0, j * block_size:(j + 1) * block_size]
    labels = batch.labels[0, j * block_size + 1:(j + 1) * block_size]
    print(f"block {j}: input {tokenizer.convert_ids_to_tokens(ids.tolist())[:3]}... "
          f"labels {tokenizer.decode([t for t in labels.tolist() if t >= 0])!r}")
mask = batch.attn_mask[0, 0].int()
fig, ax = plt.subplots(figsize=(8, 3))
ax.imshow(mask, cmap="Greys", aspect="auto", interpolation="nearest")
ax.axvline(len(seq) - 0.5, color="red", lw=1)
for a in anchors.tolist():
    ax.axvline(a - 0.5, color="tab:blue", lw=0.6, ls=":")
ax.set_xlabel(f"keys: {len(seq)} context positions | {3 * block_size} block tokens"); ax.set_ylabel("block queries")
ax.set_title("Block attention mask of one training sequence (black = may attend; dotted = anchors)")
fig.tight_layout(); fig.savefig(FIGURES / "05_anchors_and_mask.png", dpi=120)
assert (anchors >= plen).all() and (anchors <= len(seq) - 2).all()
for j, a in enumerate(anchors.tolist()):                         # block j sees exactly the context before it
    assert mask[j * block_size, :a].all() and not mask[j * block_size, a:len(seq)].any()
"""),
    ("md", """
## 3. The loss weights
"""),
    ("code", """
fig, ax = plt.subplots(figsize=(5.5, 3.2))
for b in (8, 10, 16):
    w = position_weights(b)
    ax.plot(range(1, b), (w / w.sum()).numpy(), marker="o", label=f"B={b}, gamma={loss_gamma(b):g}")
    assert torch.allclose(w, torch.exp(-(torch.arange(1, b) - 1) / loss_gamma(b)))
ax.set_xlabel("block position k"); ax.set_ylabel("normalised weight"); ax.legend()
ax.set_title("w_k = exp(-(k-1)/gamma) / sum w")
fig.tight_layout(); fig.savefig(FIGURES / "05_loss_weights.png", dpi=120)
"""),
    ("md", """
## 4. A short training run: loss, per-position accuracy, tau before and after

A 2-layer drafter from scratch, `steps` AdamW steps with warm-up and cosine decay. Only the
drafter's layers, `fc` and norms train; the target (embedding and LM head included) is frozen.
Per-position accuracy is the number to watch: tau is roughly one plus the sum over positions of
the probability that every position up to there is right.
"""),
    ("code", """
config = DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=2, block_size=block_size)
drafter = DFlashDrafter(config).to(device).train()
measure = tau_probe(target, tokenizer, num_prompts=probe_prompts, max_new_tokens=32)
tau_before = measure(drafter)
weights = position_weights(block_size)
gen = torch.Generator().manual_seed(0)
trainer = Trainer(drafter, lambda m, b: drafter_loss(m, target, b, weights),
                  lambda: epoch_batches(data, batch_size, block_size, num_anchors, tokenizer.mask_token_id,
                                        tokenizer.pad_token_id, gen),
                  TrainConfig(steps=steps, lr=lr, log_every=1))
t0 = time.perf_counter()
history = trainer.run()
train_s = time.perf_counter() - t0
tau_after = measure(drafter)
print(f"{steps} steps in {train_s:.0f} s; loss {history[0]['loss']:.2f} -> {history[-1]['loss']:.2f}")
print(f"tau (held-out, B={block_size}): math {tau_before['math']:.2f} -> {tau_after['math']:.2f}, "
      f"code {tau_before['code']:.2f} -> {tau_after['code']:.2f}")
assert history[-1]["loss"] < history[0]["loss"]
"""),
    ("code", """
fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.4))
smooth = lambda v, n=5: np.convolve(v, np.ones(n) / n, mode="valid")
ax.plot([h["step"] for h in history], [h["loss"] for h in history], alpha=0.3, color="tab:blue")
ax.plot([h["step"] for h in history][4:], smooth([h["loss"] for h in history]), color="tab:blue")
ax.set_xlabel("step"); ax.set_ylabel("weighted CE"); ax.set_title("training loss")
acc = np.array([h["accuracy_per_position"] for h in history])
for k in range(min(4, block_size - 1)):
    bx.plot([h["step"] for h in history][4:], smooth(acc[:, k]), label=f"position {k + 1}")
bx.set_xlabel("step"); bx.set_ylabel("accuracy (5-step mean)"); bx.legend(fontsize=8)
bx.set_title("per-position accuracy: early positions learn first")
fig.tight_layout(); fig.savefig(FIGURES / "05_training_curves.png", dpi=120)
"""),
    ("md", """
A minute moves the loss a long way and tau only a little: tau needs the first several positions
right *in a row*. The same recipe at the shipped drafter's budget (25 minutes on one CPU thread,
tau probed on held-out prompts every 100 steps, probe time excluded from the clock), from

    python -m dflash_lite train --target tiny --block-size 16 --layers 2 --steps 100000 --time-budget-s 1500 \\
        --eval-every 100 --batch-size 8 --num-anchors 16 --lr 1e-3 --out OUT
"""),
    ("code", """
run = json.loads((ROOT / "results" / "budget_1500s_kv_injection.json").read_text())
curve = run["tau_curve"]
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot([c["elapsed_s"] / 60 for c in curve], [c["tau_math"] for c in curve], "o-", label="math (held-out)")
ax.plot([c["elapsed_s"] / 60 for c in curve], [c["tau_code"] for c in curve], "s--", label="code (held-out)")
ax.axhline(5, color="grey", lw=0.6, ls=":")
ax.set_xlabel("training minutes (1 CPU thread)"); ax.set_ylabel("tau, B=16"); ax.legend()
ax.set_title(f"tau during training ({run['training']['steps']} steps)")
fig.tight_layout(); fig.savefig(FIGURES / "05_tau_vs_training_time.png", dpi=120)
print(f"minutes of training to tau >= 5: {run['training']['minutes_to_tau_5']}")
print(f"final: math {curve[-1]['tau_math']:.2f}, code {curve[-1]['tau_code']:.2f}")
"""),
    ("md", """
## 5. Ablations at an equal budget: anchors and block sizes

Longer runs than a notebook should do. `tools/train_ablations.py` trains every variant with the
same steps, batch, anchors per sequence, learning rate and seed, then measures tau on held-out
in-domain prompts. Regenerate its numbers with

    python tools/train_ablations.py --workers 2 && python tools/train_ablations.py --collect

* **random anchors vs fixed block boundaries**: with fixed boundaries the drafter only ever
  sees blocks that start at `prompt_length + k*B`; at inference a block starts wherever the last
  step ended.
* **training block size vs inference block size**: a B=16 drafter run at 8, and a B=8 drafter
  run at 16 (its positions 8..15 were never trained).
"""),
    ("code", """
ablations = json.loads((ROOT / "results" / "ablations.json").read_text())
v = ablations["variants"]
print(f"budget per variant: {v['reference']['steps']} steps x batch {ablations['common']['batch_size']} x "
      f"{ablations['common']['num_anchors']} anchors; tau on {v['reference']['eval']['prompts_per_domain']} "
      f"held-out prompts per domain, {v['reference']['eval']['max_new_tokens']} tokens")
rows = [("random anchors (reference), B=16", v["reference"]["tau_by_inference_block_size"]["16"]),
        ("fixed block boundaries, B=16", v["fixed_anchors"]["tau_by_inference_block_size"]["16"]),
        ("trained B=16, run at B=8", v["reference"]["tau_by_inference_block_size"]["8"]),
        ("trained B=8, run at B=8", v["block_8"]["tau_by_inference_block_size"]["8"]),
        ("trained B=8, run at B=16", v["block_8"]["tau_by_inference_block_size"]["16"])]
print(f"{'variant':<36} {'tau math':>9} {'tau code':>9}")
for name, t in rows:
    print(f"{name:<36} {t['math']:>9.2f} {t['code']:>9.2f}")
fig, ax = plt.subplots(figsize=(7, 3.2))
xs = np.arange(len(rows))
ax.bar(xs - 0.2, [t["math"] for _, t in rows], 0.4, label="math")
ax.bar(xs + 0.2, [t["code"] for _, t in rows], 0.4, label="code")
ax.set_xticks(xs, [n.replace(", ", "\\n") for n, _ in rows], fontsize=7)
ax.set_ylabel("tau (held-out)"); ax.legend(); ax.set_title("Anchors and block sizes at an equal training budget")
fig.tight_layout(); fig.savefig(FIGURES / "05_ablations.png", dpi=120)
assert v["fixed_anchors"]["tau_by_inference_block_size"]["16"]["math"] < v["reference"]["tau_by_inference_block_size"]["16"]["math"]
"""),
    ("md", """
Random anchors beat fixed block boundaries clearly, as in the paper: with fixed boundaries a
response of ~50 tokens offers only three or four blocks per pass instead of sixteen, and every
block starts at the same offsets, while at inference a block starts wherever the last step ended.
The block-size mismatch does *not* show at this budget: acceptance still ends within the first
few positions, which a B=8 and a B=16 drafter learn alike. The paper's losses for 16->8 and 8->16
come from drafters whose acceptance reaches deep into the block; repeating this table with
`--steps 1200` is the experiment to run.
"""),
    ("md", """
## Summary

* The drafter is trained on the target's own answers, with blocks opened at random anchors, all
  blocks of a sequence in one forward under the block mask, and a loss that weights early block
  positions most.
* A minute of training moves the loss a long way and tau barely; the full-budget curve shows how
  long tau takes to pass 5 on held-out math on one CPU thread, and that code stays far lower.
* At an equal budget random anchors beat fixed block boundaries; the block-size mismatch the
  paper reports needs longer-trained drafters to show.

## Exercises

1. Set `num_anchors` to 1 and to 32 at the same `steps`. Which learns faster per step, and per second?
2. Train with uniform weights (`weights = torch.ones(block_size - 1)`). What happens to the
   accuracy at position 1 and at the last position?
3. Plot tau against training time using `train_drafter(..., eval_every=20)` and its `training_curve.json`.
4. Why do the labels come from the target's regenerated answers rather than the dataset's?
   *(Hint: what does the verifier accept?)*
"""),
]


BENCHMARKS = [
    ("md", """
# 06 · Benchmarks: every method side by side, and the cost model that explains the speedup

One call of `dflash_lite.benchmark.bench` (the same as `python -m dflash_lite bench`) runs every
method on the same prompts, after a warm-up, interleaved over repeats, and reports medians. Every
greedy method's output is checked token for token against the target's greedy output *in the same
run*. Speedups are ratios to the faster of the two autoregressive baselines measured in that run.

Set `device = "cuda"` on a machine with an NVIDIA GPU; the figures are labelled with the hardware.
The full-size runs are behind parameters, e.g.

    papermill notebooks/06_benchmarks.ipynb out.ipynb -p device cuda -p max_new_tokens 256 -p num_prompts 20
"""),
    ("code", """
import json
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from dflash_lite.benchmark import bench, format_cost_model, format_table
from dflash_lite.plotting import figures_dir, hardware_label, plot_benchmark

torch.manual_seed(0)
FIGURES = figures_dir()
RESULTS = FIGURES.parent / "results"
RESULTS.mkdir(exist_ok=True)
"""),
    ("code", """
# Parameters
target_name = "tiny"
device = "cpu"
domain = "math"              # built-in held-out prompts: math, code or mixed
prompts_file = None          # or any JSONL with a "prompt" (or "turns") field
num_prompts = 3
max_new_tokens = 48
block_sizes = [4, 8, 16]
repeats = 2
sampled_temperature = 1.0
""", "parameters"),
    ("code", """
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
report = bench(target=target_name, prompts=prompts_file, domain=domain, num_prompts=num_prompts,
               max_new_tokens=max_new_tokens, block_sizes=tuple(block_sizes), repeats=repeats, device=device,
               adaptive=True, quiet=True, json_out=str(RESULTS / f"06_benchmark_{device}.json"))
print(format_table(report))
rows = {r["name"]: r for r in report["methods"]}
assert all(r["identical_to_target"] for r in report["methods"] if r["error"] is None), "a greedy method diverged"
"""),
    ("md", """
## Figures

`plot_benchmark(report)` writes the four standard figures (speedup by method, acceptance-length
histogram, speedup against block size, cost model), titled with the hardware.
"""),
    ("code", """
paths = plot_benchmark(report, FIGURES, prefix=f"06_{device}")
print("\\n".join(str(p.relative_to(FIGURES.parent)) for p in paths))
print("hardware:", hardware_label(report["env"]))
"""),
    ("md", """
## The cost model

One DFlash step costs a target forward over B tokens plus one drafter forward, and commits tau
tokens on average. Against one target forward per token:

$$\\text{speedup} \\approx \\frac{\\tau \\, t_\\text{target}(1)}{t_\\text{target}(B) + t_\\text{draft}(B)}$$

Each *t* below is measured (median of interleaved repeats at the first prompt's context length),
and the prediction sits next to the speedup measured in the run above. The gap is the loop's
overhead: the per-step phases measured inside the loop (verify includes the acceptance rule,
"bookkeeping" is the cache crop, feature slicing and token appends), plus prefill, which both
decoders pay once per prompt.
"""),
    ("code", """
cost = report["cost_model"]
print(format_cost_model(cost["rows"]))
t = cost["costs"]["t_target"]
print(f"\\nt_target(B)/t_target(1): " + ", ".join(f"B={b}: {t[str(b)] / t['1']:.2f}" for b in block_sizes))
ar = rows["autoregressive (ours)"]
per_token = 1 / ar["tokens_per_s"]
print(f"autoregressive loop: {per_token * 1e3:.2f} ms per token (prefill included) against "
      f"t_target(1) = {t['1'] * 1e3:.2f} ms for the bare forward")
for r in cost["rows"]:
    assert abs(r["predicted_speedup"] - r["tau"] * t["1"] / (r["t_target_b"] + r["t_draft_b"])) < 1e-9
"""),
    ("md", """
## Adaptive block size

The source article (section 5.3) suggests choosing the block size per step from recent acceptance.
`AdaptiveDFlashProposer` picks the smallest of {4, 8, 16} that is at least twice the recent mean
acceptance length. It is an option, not the default: on a machine where a 16-token verify costs
little more than a 1-token one (the t_target ratios above), a shorter block saves little and can
only lose accepted tokens.
"""),
    ("code", """
adaptive = next(r for r in report["methods"] if "adaptive" in r["name"])
fixed = {r["block_size"]: r for r in report["methods"] if r["name"].startswith("DFlash (ours) B=")}
best_fixed = max(fixed.values(), key=lambda r: r["speedup"])
print(f"adaptive: {adaptive['speedup']:.2f}x (tau {adaptive['tau']:.2f}); best fixed: B={best_fixed['block_size']} "
      f"{best_fixed['speedup']:.2f}x (tau {best_fixed['tau']:.2f})")
print("adaptive wins" if adaptive["speedup"] > best_fixed["speedup"] else "a fixed block size wins here")
"""),
    ("md", """
## Temperature 1

With sampling there is no identity check (outputs are random); losslessness at temperature > 0 is
tested statistically in `tests/test_sampling_lossless.py` and in notebook 02. Speed and tau:
"""),
    ("code", """
sampled = bench(target=target_name, prompts=prompts_file, domain=domain, num_prompts=num_prompts,
                max_new_tokens=max_new_tokens, block_sizes=(max(block_sizes),), repeats=repeats, device=device,
                temperature=sampled_temperature, baselines=False, hf_dflash=False, quiet=True,
                json_out=str(RESULTS / f"06_benchmark_{device}_t{sampled_temperature:g}.json"))
print(format_table(sampled))
greedy_tau = fixed[max(block_sizes)]["tau"]
sampled_tau = next(r for r in sampled["methods"] if r["name"].startswith("DFlash"))["tau"]
print(f"tau at B={max(block_sizes)}: greedy {greedy_tau:.2f}, temperature {sampled_temperature:g}: {sampled_tau:.2f}")
assert all(r["identical_to_target"] is None for r in sampled["methods"])
"""),
    ("md", """
## Summary

* Every method ran on the same prompts in one process, interleaved; the table's ratios are the
  result, the absolute tokens/s are only for this machine.
* The cost model predicts the speedup from three measured forwards and tau; the measured speedup
  is lower by the loop's overhead and prefill.
* On a GPU the target's t(B)/t(1) stays near 1 for much larger B, so tau translates into speedup
  more directly; the same notebook runs there with `-p device cuda`.

## Exercises

1. Run with `-p domain code`. Which method wins, and why does prompt lookup do well on code?
2. Add `-p max_new_tokens 256`. How does the speedup change as prefill matters less?
3. Use the cost model to find the block size at which a larger block stops paying on this machine.
4. Run on the held-out judges: `-p prompts_file ../../shared/benchmarks/<file>.jsonl`
   (evaluation only). How far is this from the in-domain numbers, and why?
"""),
]

ARTICLE = [
    ("md", """
# 07 · Checking the source article

The Chinese-language deep-dive this project answers (`shared/source-article.zh.txt`) makes numeric
and algorithmic claims. Each is put next to what this repository measures or knows, with a verdict
and the cell that produced the evidence. The paper's numbers come from DFlash (arXiv 2602.06036),
Table 1: Qwen3-8B, one H200, greedy, **4.86x average speedup, tau 6.49**.
"""),
    ("code", """
import importlib.util, statistics, tempfile, time
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.acceptance import SamplingParams, target_probs
from dflash_lite.benchmark import builtin_prompts, measure_costs, predicted_speedup
from dflash_lite.checkpoints import export_dflash, load_drafter
from dflash_lite.decode import DFlashProposer, EagleProposer, generate_autoregressive, generate_speculative
from dflash_lite.plotting import figures_dir
from dflash_lite.target import SHIPPED_BASELINES, SHIPPED_DRAFTERS
from dflash_lite.train import (Trainer, TrainConfig, drafter_loss, epoch_batches, labelled_logits,
                               position_weights, regenerate, training_prompts)

torch.manual_seed(0)
FIGURES = figures_dir()
verdicts = []
"""),
    ("code", """
# Parameters
target_name = "tiny"
device = "cpu"
num_prompts = 3
max_new_tokens = 48
train_steps = 60          # for the CE-vs-MSE comparison (each objective)
""", "parameters"),
    ("code", """
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).to(device)
eagle = load_drafter(SHIPPED_BASELINES["tiny"]["eagle"]).to(device)
stops = stop_token_ids(target, tokenizer)
prompt_ids = [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in builtin_prompts("math", num_prompts)]

def run(make, n=max_new_tokens):
    out = []
    for x in prompt_ids:
        make_ = make()
        generate_speculative(target, make(), x, 8, stop_token_ids=stops)                # warm-up
        out.append(generate_speculative(target, make_, x, n, stop_token_ids=stops))
    return out

def tokens_per_s(results):
    return sum(len(r.tokens) for r in results) / sum(r.total_time for r in results)

ar = [generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops) for x in prompt_ids]
ar = [generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops) for x in prompt_ids]  # after warm-up
measured = {}
for b in (8, 16):
    res = run(lambda: DFlashProposer(drafter, target, b))
    assert [r.tokens for r in res] == [r.tokens for r in ar]                              # lossless
    lengths = [a for r in res for a in r.acceptance_lengths]
    measured[b] = {"tau": float(np.mean(lengths)), "speedup": tokens_per_s(res) / tokens_per_s(ar), "runs": res,
                   # the article's "acceptance rate": accepted drafts / drafted tokens
                   "draft_acceptance": sum(a - 1 for a in lengths) / (len(lengths) * (b - 1))}
    print(f"B={b}: tau {measured[b]['tau']:.2f}, speedup {measured[b]['speedup']:.2f}x over our AR loop, "
          f"share of drafted tokens accepted {measured[b]['draft_acceptance']:.0%}")
"""),
    ("md", """
## Claim 1: "~6x speedup; 6.51x at B = 8 and 7.72x at B = 16"

The article prints these from a table it typed in; no run produced them. The paper's own best is
6.08x (MATH-500, Qwen3-8B) and 4.86x on average. Our measurement, with the shipped toy pair on
this CPU, is above.
"""),
    ("code", """
verdicts.append(("6.51x (B=8) / 7.72x (B=16) speedup", "hard-coded; paper: 4.86x avg (H200)",
                 f"{measured[8]['speedup']:.2f}x / {measured[16]['speedup']:.2f}x (tiny pair, this CPU)",
                 "not supported"))
"""),
    ("md", """
## Claim 2: "acceptance rate about 78% at B = 8 and 65% at B = 16"

The paper reports the **acceptance length tau** (tokens committed per verification), not a
per-token rate. A block-level "rate" falls with B by construction: the later block positions are
only reached when every earlier one was right.
"""),
    ("code", """
for b in (8, 16):
    print(f"B={b}: tau {measured[b]['tau']:.2f}; accepted drafts / drafted tokens {measured[b]['draft_acceptance']:.0%}")
assert measured[16]["draft_acceptance"] < measured[8]["draft_acceptance"] + 0.05   # longer blocks: lower share
verdicts.append(("acceptance 78% (B=8) / 65% (B=16)", "hard-coded; the paper reports tau",
                 f"{measured[8]['draft_acceptance']:.0%} / {measured[16]['draft_acceptance']:.0%}; "
                 f"tau {measured[8]['tau']:.2f} / {measured[16]['tau']:.2f}", "wrong metric, made-up values"))
"""),
    ("md", """
## Claim 3: the speedup formula `k*a / (k*a*0.15 + 1)` and its block-size table

It assumes a drafter that is always 15% of a target forward *per accepted token* and a verify that
costs the same for any k; neither constant is measured. The honest model is
$\\tau\\, t_\\text{target}(1) / (t_\\text{target}(B) + t_\\text{draft}(B))$ per step with every *t*
measured, and over a whole generation both decoders also pay the prefill once. The predictions,
from our measured acceptance, next to the measured speedup:
"""),
    ("code", """
costs = measure_costs(target, drafter, prompt_ids[0], block_sizes=(8, 16), repeats=10)
t = costs["t_target"]
rows = []
for b in (8, 16):
    article = b * measured[b]["draft_acceptance"] / (b * measured[b]["draft_acceptance"] * 0.15 + 1)
    per_step = predicted_speedup(measured[b]["tau"], t["1"], t[str(b)], costs["t_draft"][str(b)])
    # the whole generation: both decoders also pay the prefill once per prompt (measured time to first token)
    ar_time = sum(r.time_to_first_token + (len(r.tokens) - 1) * t["1"] for r in ar)
    spec_time = sum(r.time_to_first_token + len(r.acceptance_lengths) * (t[str(b)] + costs["t_draft"][str(b)])
                    for r in measured[b]["runs"])
    honest = ar_time / spec_time
    rows.append((b, article, honest, measured[b]["speedup"]))
    print(f"B={b}: article formula {article:.2f}x | cost model per step {per_step:.2f}x, with prefill "
          f"{honest:.2f}x | measured {measured[b]['speedup']:.2f}x")
# the article's own table, recomputed from its own inputs, to show it comes from the formula, not a run
table = {4: 0.92, 6: 0.85, 8: 0.78, 10: 0.72, 12: 0.68, 16: 0.65}
print("article table from its formula:", {k: round(k * a / (k * a * 0.15 + 1), 2) for k, a in table.items()})
assert abs(8 * 0.78 / (8 * 0.78 * 0.15 + 1) - 3.23) < 0.01     # not the 6.51x its table prints for B=8
err_article = np.mean([abs(a - m) / m for _, a, _, m in rows])
err_honest = np.mean([abs(h - m) / m for _, _, h, m in rows])
print(f"mean relative error: article formula {err_article:.0%}, cost model {err_honest:.0%}")
verdicts.append(("speedup = k*a/(k*a*0.15+1)", "ad hoc constants; its table does not follow from it",
                 f"error {err_article:.0%}; measured cost model with prefill {err_honest:.0%}",
                 "unfounded (any fit is luck)"))
"""),
    ("md", """
The article's own table does not follow from its formula either: with a = 0.78 and k = 8 the
formula gives 3.23x, not the 6.51x printed beside it.

## Claim 4: "trained with MSE on logits (diffusion predicts the denoised target)"

DFlash trains with **cross-entropy** on the masked positions, weighted by block position. Train
the same drafter for the same steps with both objectives and compare held-out next-token accuracy.
The MSE version regresses the logits onto the one-hot labels, the closest reading of the
article's `mse_loss(predicted, target_block)`.
"""),
    ("code", """
cache = FIGURES.parent / ".cache" / "dflash_lite"
data = regenerate(target, tokenizer, training_prompts(32, 0, seed=0), 40, batch_size=16, cache_dir=cache)
held = regenerate(target, tokenizer, [p.prompt for p in corpus.math_problems(16, split="held_out", start=5000)], 40,
                  batch_size=16, cache_dir=cache)
B = 8
weights = position_weights(B)

def mse_loss(model, batch):
    logits, labels, position = labelled_logits(model, target, batch, B)      # the same forward as the CE loss
    onehot = torch.nn.functional.one_hot(labels, logits.shape[-1]).float()
    loss = torch.nn.functional.mse_loss(logits, onehot)
    with torch.no_grad():
        acc1 = (logits.argmax(-1) == labels)[position == 1].float().mean().item()
    return loss, {"loss": loss.item(), "accuracy_per_position": [acc1]}

def held_out_accuracy(model):
    g = torch.Generator().manual_seed(1)
    batch = next(epoch_batches(held, 16, B, 4, tokenizer.mask_token_id, tokenizer.pad_token_id, g))
    with torch.no_grad():
        return drafter_loss(model.eval(), target, batch, weights)[1]["accuracy_per_position"]

from dflash_lite.drafter import DFlashDrafter, DrafterConfig
accuracy, curves = {}, {}
for name, loss_fn in (("cross-entropy (DFlash)", lambda m, b: drafter_loss(m, target, b, weights)),
                      ("MSE on logits (article)", mse_loss)):
    torch.manual_seed(0)
    model = DFlashDrafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1,
                                                    block_size=B)).train()
    g = torch.Generator().manual_seed(0)
    history = Trainer(model, loss_fn, lambda: epoch_batches(data, 4, B, 8, tokenizer.mask_token_id,
                                                            tokenizer.pad_token_id, g),
                      TrainConfig(steps=train_steps, lr=3e-3, log_every=1)).run()
    curves[name] = [h["accuracy_per_position"][0] for h in history]
    accuracy[name] = held_out_accuracy(model)
    print(f"{name:<26} held-out accuracy at positions 1-3: " + ", ".join(f"{a:.2f}" for a in accuracy[name][:3]))
fig, ax = plt.subplots(figsize=(5.5, 3.2))
for name, c in curves.items():
    ax.plot(np.convolve(c, np.ones(5) / 5, mode="valid"), label=name)
ax.set_xlabel("step"); ax.set_ylabel("training accuracy, position 1 (5-step mean)"); ax.legend(fontsize=8)
ax.set_title("Same drafter, same data, same steps: CE vs MSE on logits")
fig.tight_layout(); fig.savefig(FIGURES / "07_ce_vs_mse.png", dpi=120)
ce, mse = accuracy.values()
if train_steps >= 40:                 # a handful of steps (a papermill smoke run) leaves both near zero
    assert ce[0] > mse[0]
verdicts.append(("MSE training on logits", "wrong objective", f"held-out acc@1 after {train_steps} steps: "
                 f"CE {ce[0]:.2f} vs MSE {mse[0]:.2f}", "wrong"))
"""),
    ("md", """
## Claim 5: multi-step DDPM-style denoising from random tokens

DFlash drafts in **one** forward from MASK tokens. Notebook 03 runs the fair version of the
article's idea (re-feed the draft for a 2nd pass); here is the short form:
"""),
    ("code", """
passes = {}
for n in (1, 2):
    res = run(lambda: DFlashProposer(drafter, target, 16, passes=n))
    passes[n] = (float(np.mean([a for r in res for a in r.acceptance_lengths])), tokens_per_s(res))
    print(f"{n} pass(es): tau {passes[n][0]:.2f}, {passes[n][1]:.0f} tokens/s")
verdicts.append(("multi-step denoising", "DFlash uses one pass from masks",
                 f"2nd pass: tau {passes[1][0]:.2f} -> {passes[2][0]:.2f}, speed "
                 f"{passes[2][1] / passes[1][1]:.2f}x", "not how DFlash works; does not pay"))
"""),
    ("md", """
## Claim 6: "fusion" through a fresh `torch.randn` projection, and a "parallel" engine that drafts autoregressively

A projection drawn anew at inference throws away what training learned. Replace the trained
`fc` with a fresh random matrix on every call and measure tau. Then count drafter forwards per
step: DFlash does one per block; an autoregressive engine does one per draft token, whatever it
is called.
"""),
    ("code", """
class RandomFusion(DFlashProposer):                      # the article's inference-time fusion
    def propose(self, last, k):
        with torch.no_grad():
            self.drafter.fc.weight.copy_(torch.randn_like(self.drafter.fc.weight) * 0.02)
        return super().propose(last, k)

trained_fc = drafter.fc.weight.detach().clone()
res = run(lambda: RandomFusion(drafter, target, 16))
with torch.no_grad():
    drafter.fc.weight.copy_(trained_fc)
tau_random = float(np.mean([a for r in res for a in r.acceptance_lengths]))
print(f"tau with the trained projection {measured[16]['tau']:.2f}; with a fresh randn projection {tau_random:.2f}")

from dflash_lite.target import context_features
with torch.inference_mode():
    out = target(prompt_ids[0], output_hidden_states=True)
last = out.logits[0, -1:].argmax(-1)

def forwards_per_block(model, proposer_cls):             # drafter forwards to draft one block of 15
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    proposer = proposer_cls(model, target, 16)
    proposer.start(prompt_ids[0], context_features(out.hidden_states, model.config.target_layer_ids))
    proposer.propose(last, 15)
    hook.remove()
    return len(calls)

dflash_per_step, eagle_per_step = forwards_per_block(drafter, DFlashProposer), forwards_per_block(eagle, EagleProposer)
print(f"drafter forwards to draft 15 tokens: DFlash {dflash_per_step}, autoregressive drafting {eagle_per_step}")
assert dflash_per_step == 1 and eagle_per_step == 15 and tau_random < measured[16]["tau"]
verdicts.append(("fusion via fresh torch.randn", "discards the trained projection",
                 f"tau {measured[16]['tau']:.2f} -> {tau_random:.2f}", "wrong"))
verdicts.append(("'parallel' engine drafting token by token", "1 drafter forward per block",
                 f"forwards/step: DFlash {dflash_per_step:.0f}, AR {eagle_per_step:.1f}", "mislabelled"))
"""),
    ("md", """
## Claim 7: the lossless acceptance rules

`accept if p_target(x) >= p_draft(x)` and `accept if p_target(x) >= 0.5` change the output
distribution (notebook 02 shows it in full). The exact output distribution of one step, for the
target and the shipped draft model at temperature 1, and its total-variation distance from the target:
"""),
    ("code", """
from dflash_lite.target import load_pretrained as _load
draft_lm = _load(str(SHIPPED_BASELINES["tiny"]["draft_model"]), device=device)[0]
x = tokenizer("Question: ", return_tensors="pt").input_ids.to(device)
s = SamplingParams(temperature=1.0)
with torch.inference_mode():
    p = target_probs(target(x).logits[0, -1:], s)[0].double().cpu()
    q = target_probs(draft_lm(x).logits[0, -1:], s)[0].double().cpu()
residual = (p - q).clamp(min=0)
outputs = {
    "min(1, p/q) (lossless)": torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * residual / residual.sum(),
    "p >= q (article)": q * (p >= q) + (q * (p < q)).sum() * p,
}
star = int(p.argmax())
outputs["p >= 0.5 (article)"] = torch.nn.functional.one_hot(torch.tensor(star), len(p)).double() if p[star] >= 0.5 else p
tv = {k: 0.5 * float((v - p).abs().sum()) for k, v in outputs.items()}
for k, v in tv.items():
    print(f"{k:<26} TV from the target: {v:.4f}")
assert tv["min(1, p/q) (lossless)"] < 1e-6 and min(tv["p >= q (article)"], tv["p >= 0.5 (article)"]) > 1e-3
verdicts.append(("acceptance p>=q, p>=0.5", "not lossless",
                 f"TV {tv['p >= q (article)']:.3f} / {tv['p >= 0.5 (article)']:.3f} vs 0 for min(1, p/q)", "wrong"))
"""),
    ("md", """
## Claim 8: `from vllm.assets.dflash import DFlashModel`, `use_dflash=True`

That module and flag do not exist. Serving goes through vLLM or SGLang loading a drafter
checkpoint in the public DFlash layout, e.g.
`vllm serve Qwen/Qwen3-8B --speculative-config '{"method": "dflash", "model": PATH, "num_speculative_tokens": 15}'`.
This repo writes that layout (`export_dflash`); what is checkable offline is the layout itself:
"""),
    ("code", """
import json
with tempfile.TemporaryDirectory() as d:
    export_dflash(drafter, d)
    files = sorted(p.name for p in Path(d).iterdir())
    cfg = json.loads((Path(d) / "config.json").read_text())
print(files, "| dflash_config:", cfg["dflash_config"], "| block_size:", cfg["block_size"])
assert files == ["config.json", "model.safetensors"] and cfg["dflash_config"]["target_layer_ids"] == drafter.config.target_layer_ids
vllm_here = importlib.util.find_spec("vllm") is not None
print("vLLM installed here:", vllm_here, "(not needed: the export is the interface)")
verdicts.append(("vllm.assets.dflash / use_dflash=True", "does not exist",
                 "export_dflash writes config.json + model.safetensors (public layout)", "wrong API"))
"""),
    ("md", """
## The verdicts
"""),
    ("code", """
print(f"{'claim':<44} {'what is known':<42} {'measured here':<58} verdict")
for claim, known, evidence, verdict in verdicts:
    print(f"{claim:<44} {known:<42} {evidence:<58} {verdict}")
assert len(verdicts) == 9
"""),
    ("md", """
## Summary

The article's outline is a good map (the autoregressive bottleneck, drafting a block at once,
conditioning on the target, verifying losslessly), but its numbers are typed in, its speedup
formula does not reproduce its own table, two of its acceptance rules are biased, its training
objective and multi-step denoising are not DFlash, and its serving API does not exist. Everything
in the right-hand column above was measured in this notebook.

## Exercises

1. Re-run claim 3 with `-p max_new_tokens 128`. Does the cost model's error shrink? Why?
2. Replace the MSE loss with MSE on softmax probabilities. Is it any closer to cross-entropy?
3. For claim 7, find a prompt where `p >= 0.5` is harmless (TV 0). What must hold?
"""),
]


CONDITIONING = [
    ("md", """
# 04 · Conditioning: how the target's hidden states reach the drafter

What makes a 2-layer drafter draft 15 tokens that a target accepts is that it reads the target's
own hidden states (`dflash_lite/target.py: context_features`, `dflash_lite/drafter.py`):

1. **Taps.** K target layers, spread from the 2nd to the 3rd-from-last:
   `round(1 + i*(N-4)/(K-1))`, i = 0..K-1.
2. **Projection.** Their outputs are concatenated per position (K*H wide) and projected to H by
   one linear layer `fc`, then an RMSNorm (`hidden_norm`).
3. **KV injection.** In *every* drafter layer, the keys and values of the context come from that
   projected feature; the block's queries attend to `[context ; block]`.

Alternatives measured here: **input fusion** (the features enter once, as the context's input to
the first layer, and the context then runs through the drafter like a prompt) and **no target
features** (the context is only the target's token embeddings), and 1, 3 or 5 taps.
"""),
    ("code", """
import json, statistics, time
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.checkpoints import load_drafter
from dflash_lite.decode import DFlashProposer, generate_autoregressive, generate_speculative
from dflash_lite.drafter import DFlashDrafter, DrafterCache, DrafterConfig
from dflash_lite.plotting import figures_dir
from dflash_lite.target import SHIPPED_DRAFTERS, context_features, tapped_layer_ids

torch.manual_seed(0)
FIGURES = figures_dir()
ROOT = FIGURES.parent
"""),
    ("code", """
# Parameters
target_name = "tiny"
drafter_path = str(SHIPPED_DRAFTERS["tiny"])
device = "cpu"
num_prompts = 3
max_new_tokens = 48
timing_repeats = 20
""", "parameters"),
    ("code", """
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
drafter = load_drafter(drafter_path).to(device)
stops = stop_token_ids(target, tokenizer)
N = target.config.num_hidden_layers
for n, k in ((N, 5), (28, 5), (36, 5), (36, 3), (36, 1)):
    print(f"N={n:>2} layers, K={k}: taps {tapped_layer_ids(n, k)}")
assert drafter.config.target_layer_ids == tapped_layer_ids(N, 5)
"""),
    ("md", """
## 1. Why several layers, spread out

Apply the target's final norm and LM head to each layer's hidden state (the "logit lens") and ask,
over held-out text, whether it already names the **next** token the target will pick (and, for
contrast, whether it names the **current** token). The embeddings name the current token; from the
first layer on, the next-token guess sharpens steadily with depth. The taps sample that climb:
shallow taps still carry the detail of the input, deeper ones a sharper guess of what comes next,
and the drafter has to continue the text several tokens ahead, so it gets all of them.
"""),
    ("code", """
texts = [p.prompt + " " + p.solution for p in corpus.math_problems(6, split="held_out", start=6000)]
texts += corpus.function_headers(corpus.stdlib_files("held_out"), 4, seed=41)
current, nxt = np.zeros(N + 1), np.zeros(N + 1)
count = 0
with torch.inference_mode():
    for t in texts:
        ids = tokenizer(t, return_tensors="pt").input_ids.to(device)
        out = target(ids, output_hidden_states=True)
        final = out.logits[0].argmax(-1)                                     # the target's next-token choice
        for layer, h in enumerate(out.hidden_states):
            h = h if layer == N else target.model.norm(h)                    # the last entry is already normed
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
ax.set_ylabel("share of positions"); ax.legend(fontsize=8); ax.set_title("Logit lens on the target")
fig.tight_layout(); fig.savefig(FIGURES / "04_logit_lens.png", dpi=120)
print("current-token share by index:", np.round(current, 2))
print("next-token share by index:   ", np.round(nxt, 2))
assert current[0] > 0.5 > current[1] and nxt[N] == 1.0 and nxt[N - 1] > nxt[1]
"""),
    ("md", """
## 2. The projection

`fc` maps the K*H concatenation to H. Its weight splits into K blocks of H columns, one per tap;
the norm of each block shows how much the trained drafter reads from each layer.
"""),
    ("code", """
W = drafter.fc.weight.detach().float().cpu()                              # (H, K*H)
H, K = drafter.config.hidden_size, len(drafter.config.target_layer_ids)
norms = [float(W[:, i * H:(i + 1) * H].norm()) for i in range(K)]
print(f"fc: {tuple(W.shape)} = (H, K*H) with H={H}, K={K}")
for layer, n in zip(drafter.config.target_layer_ids, norms):
    print(f"  tap layer {layer}: weight block norm {n:.2f}")
fig, ax = plt.subplots(figsize=(5, 3))
ax.bar([str(l) for l in drafter.config.target_layer_ids], norms)
ax.set_xlabel("tapped target layer"); ax.set_ylabel("||fc block||"); ax.set_title("What the trained projection reads")
fig.tight_layout(); fig.savefig(FIGURES / "04_projection_norms.png", dpi=120)
"""),
    ("md", """
## 3. Take the features away from the trained drafter

The same trained drafter, with the target's features replaced by zeros (after the projection it
sees only the norm's output of a zero vector). Greedy output stays identical (the verifier
guarantees it); tau shows what the features were worth.
"""),
    ("code", """
class NoFeatures(DFlashProposer):
    def start(self, prompt_ids, target_hidden):
        super().start(prompt_ids, torch.zeros_like(target_hidden))
    def accepted(self, block, n, position, target_hidden):
        super().accepted(block, n, position, torch.zeros_like(target_hidden))

prompts = [p.prompt for p in corpus.math_problems(num_prompts, split="held_out", start=7000)]
ids = [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in prompts]
taus = {}
for name, cls in (("with features", DFlashProposer), ("features zeroed", NoFeatures)):
    lengths = []
    for x in ids:
        r = generate_speculative(target, cls(drafter, target), x, max_new_tokens, stop_token_ids=stops)
        assert r.tokens == generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens
        lengths += r.acceptance_lengths
    taus[name] = float(np.mean(lengths))
    print(f"{name:<16} tau {taus[name]:.2f}")
assert taus["features zeroed"] < taus["with features"]
"""),
    ("md", """
## 4. KV injection vs input fusion vs no target features; 1, 3 and 5 taps

Each variant was trained from scratch with the same budget (steps, batch, anchors, learning
rate, seed) and measured on held-out in-domain prompts by

    python tools/train_ablations.py --workers 2 && python tools/train_ablations.py --collect

(about 40 minutes on 2 CPU cores; the numbers land in `results/ablations.json`).
"""),
    ("code", """
ablations = json.loads((ROOT / "results" / "ablations.json").read_text())
v = ablations["variants"]
names = {"reference": "KV injection, 5 taps (DFlash)", "input_fusion": "input fusion, 5 taps",
         "no_target_features": "no target features", "taps_3": "KV injection, 3 taps",
         "taps_1": "KV injection, 1 tap"}
print(f"budget: {v['reference']['steps']} steps each; tau on {v['reference']['eval']['prompts_per_domain']} "
      f"held-out prompts per domain, B=16")
print(f"{'variant':<32} {'taps':<16} {'final loss':>10} {'tau math':>9} {'tau code':>9}")
for key, label in names.items():
    r = v[key]
    t = r["tau_by_inference_block_size"]["16"]
    taps = "embeddings" if r["options"].get("conditioning") == "none" else \\
        str(tapped_layer_ids(N, r["options"].get("num_taps", 5)))
    print(f"{label:<32} {taps:<16} {r['final_loss']:>10.3f} {t['math']:>9.2f} {t['code']:>9.2f}")
fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.6))
xs = np.arange(len(names))
ax.bar(xs - 0.2, [v[k]["tau_by_inference_block_size"]["16"]["math"] for k in names], 0.4, label="math")
ax.bar(xs + 0.2, [v[k]["tau_by_inference_block_size"]["16"]["code"] for k in names], 0.4, label="code")
ax.set_xticks(xs, [n.replace(", ", "\\n") for n in names.values()], fontsize=7)
ax.set_ylabel("tau (held-out, B=16)"); ax.legend(); ax.set_title("Conditioning variants, equal budget")
for k, label in names.items():
    steps, losses = zip(*v[k]["loss_curve"])
    bx.plot(steps, np.convolve(losses, np.ones(5) / 5, mode="same"), label=label)
bx.set_xlabel("step"); bx.set_ylabel("training loss (smoothed)"); bx.legend(fontsize=7)
fig.tight_layout(); fig.savefig(FIGURES / "04_conditioning_variants.png", dpi=120)
ref_math = v["reference"]["tau_by_inference_block_size"]["16"]["math"]
assert v["no_target_features"]["tau_by_inference_block_size"]["16"]["math"] > 0.8 * ref_math   # see below
"""),
    ("md", """
## 4b. At the shipped drafter's budget

400 steps is short. Two runs at the shipped drafter's full recipe (25 minutes on one CPU thread,
tau probed on held-out prompts every 100 steps), with and without the target's features:

    python -m dflash_lite train --target tiny --block-size 16 --layers 2 --steps 100000 --time-budget-s 1500 \\
        --eval-every 100 --batch-size 8 --num-anchors 16 --lr 1e-3 --out OUT [--conditioning none]

Their curves are kept in `results/budget_1500s_*.json`.
"""),
    ("code", """
long = {name: json.loads((ROOT / "results" / f"budget_1500s_{name}.json").read_text())
        for name in ("kv_injection", "no_target_features")}
fig, ax = plt.subplots(figsize=(6, 3.4))
for name, run in long.items():
    curve = run["tau_curve"]
    ax.plot([c["elapsed_s"] / 60 for c in curve], [c["tau_math"] for c in curve], "o-", label=f"{name}: math")
    ax.plot([c["elapsed_s"] / 60 for c in curve], [c["tau_code"] for c in curve], "s--", label=f"{name}: code")
    final = curve[-1]
    print(f"{name:<20} {run['training']['steps']} steps: final tau math {final['tau_math']:.2f}, "
          f"code {final['tau_code']:.2f}; minutes to tau >= 5 on math: {run['training']['minutes_to_tau_5']['math']}")
ax.axhline(5, color="grey", lw=0.6, ls=":")
ax.set_xlabel("training minutes (1 CPU thread, probes excluded)"); ax.set_ylabel("tau (held-out, B=16)")
ax.legend(fontsize=7); ax.set_title("With and without the target's features, shipped budget")
fig.tight_layout(); fig.savefig(FIGURES / "04_features_at_full_budget.png", dpi=120)
finals = {name: run["tau_curve"][-1]["tau_math"] for name, run in long.items()}
assert finals["no_target_features"] > 0.8 * finals["kv_injection"]                           # see below
"""),
    ("md", """
## 5. What each variant costs per draft

Timing does not depend on the weights, so random drafters of each shape will do. One step's
drafter forward: a block of 16, four new context positions, the rest of the context cached.
Input fusion also runs the new context positions through its layers (queries and MLP), which
KV injection never does; "no target features" projects H instead of K*H inputs.
"""),
    ("code", """
x = ids[0]
with torch.inference_mode():
    out = target(x, output_hidden_states=True)
cost = {}
for label, kw in (("KV injection", {}), ("input fusion", {"conditioning": "input_fusion"}),
                  ("no target features", {"conditioning": "none"})):
    d = DFlashDrafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=2,
                                                block_size=16, **kw)).to(device).eval()
    f = context_features(out.hidden_states, d.config.target_layer_ids)
    block = torch.full((1, 16), tokenizer.mask_token_id, device=device)
    def once():
        cache = DrafterCache(2)
        d.draft_logits(target, block, f[:, :-4], 0, cache)                    # the cached context
        t0 = time.perf_counter()
        d.draft_logits(target, block, f[:, -4:], f.shape[1] - 4, cache)       # one step
        return time.perf_counter() - t0
    once()
    cost[label] = statistics.median(once() for _ in range(timing_repeats))
    print(f"{label:<20} {cost[label] * 1e3:.2f} ms per draft")
"""),
    ("md", """
## What the numbers say, on this toy

* The trained DFlash drafter **uses** its features: zero them and tau collapses to about 1.
* But on this target it did not **need** them. Trained from scratch at an equal budget, a drafter
  that only sees the context's token embeddings does as well as one conditioned on five target
  layers, at 400 steps and at the full 25-minute budget; input fusion and 1/3/5 taps are within
  the noise of 8 prompts per domain too.
* This does **not** reproduce the paper's ablations (KV injection over input fusion, 5 taps over
  3, and about a third of tau lost without target features). The likely reason is the target:
  its text is templated math and stdlib-flavoured prose, predictable from the tokens alone by a
  2-layer model, whereas an 8B model's next tokens depend on computation a small drafter cannot
  redo, which is what its hidden states carry. Per draft the variants differ by well under a
  millisecond at this size (timed above); input fusion does the most work.

## Summary

* The taps sample the target from shallow to deep layers; the logit lens shows the next-token
  guess sharpening with depth.
* Conditioning matters for a drafter trained with it; whether it is *needed* depends on how much
  of the target's next token is computation rather than pattern, and on this toy it is mostly pattern.

## Exercises

1. Tap only deep layers (`target_layer_ids=[5, 6]`) or only shallow ones (`[0, 1]`) with
   `python -m dflash_lite train --num-taps ...` or your own `DrafterConfig`. Which is worse?
2. Why must the drafter cache hold the *projected* features rather than the raw ones?
   *(Hint: what would every step recompute?)*
3. For input fusion the context runs causally through the drafter. What would bidirectional
   context attention break at inference?
"""),
]


NOTEBOOKS = {"00_tour": TOUR, "01_autoregressive_bottleneck": BOTTLENECK, "02_speculative_decoding": SPECULATIVE,
             "03_block_diffusion_drafter": BLOCK_DIFFUSION, "04_conditioning": CONDITIONING, "05_training": TRAINING,
             "06_benchmarks": BENCHMARKS, "07_checking_the_source_article": ARTICLE}


if __name__ == "__main__":
    import sys

    HERE.mkdir(exist_ok=True)
    wanted = sys.argv[1:]                     # e.g. `05 06`: only those (rebuilding wipes their outputs)
    for name, cells in NOTEBOOKS.items():
        if wanted and not any(name.startswith(w) for w in wanted):
            continue
        nbf.write(notebook(cells), HERE / f"{name}.ipynb")
        print("wrote", HERE / f"{name}.ipynb")
