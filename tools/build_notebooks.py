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

torch.manual_seed(0)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "pyproject.toml").exists())
FIGURES = ROOT / "figures"
FIGURES.mkdir(exist_ok=True)
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

torch.manual_seed(0)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "pyproject.toml").exists())
FIGURES = ROOT / "figures"
FIGURES.mkdir(exist_ok=True)
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

torch.manual_seed(0)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "pyproject.toml").exists())
FIGURES = ROOT / "figures"
FIGURES.mkdir(exist_ok=True)
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

torch.manual_seed(0)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "pyproject.toml").exists())
FIGURES = ROOT / "figures"
FIGURES.mkdir(exist_ok=True)
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


if __name__ == "__main__":
    HERE.mkdir(exist_ok=True)
    for name, cells in (("00_tour", TOUR), ("01_autoregressive_bottleneck", BOTTLENECK),
                        ("02_speculative_decoding", SPECULATIVE), ("03_block_diffusion_drafter", BLOCK_DIFFUSION)):
        nbf.write(notebook(cells), HERE / f"{name}.ipynb")
        print("wrote", HERE / f"{name}.ipynb")
