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
# # 02 · Speculative decoding
#
# A cheap **draft** proposes `k` tokens; the **target** scores all of them in one forward; we keep
# the longest prefix the target agrees with, plus one token of the target's own. Done right, the
# output is exactly what the target alone would produce: greedy output token for token, sampled
# output in distribution. This notebook builds the idea with a small independent draft model
# (classic speculative decoding, Leviathan et al. 2023), proves the acceptance rule numerically,
# and measures where the source article's rules go wrong.

# %% [markdown]
# **In this chapter you will**
#
# * build the greedy draft-then-verify loop and check it against the target alone;
# * derive the lossless sampled acceptance rule and check it with a [chi-square](../docs/glossary.md#chi-square-test) test and the [TV distance](../docs/glossary.md#tv-distance);
# * explain why DFlash's point-mass rule (sample the target, accept while equal) is lossless;
# * build seeded sampling keyed by position (Gumbel-max), see one sampled output come out the same
#   under four drafting schemes, and measure what the coupled rule costs a sampled draft;
# * compare with a training-free drafter, [prompt lookup](../docs/glossary.md#prompt-lookup).
#
# **Prerequisites:** chapters 00, 01.
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import statistics, time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy.stats import chisquare

from dflash_lite import (SamplingParams, corpus, generate_autoregressive, load_pretrained,
                         stop_token_ids)
from dflash_lite.decoding.acceptance import (accept_article_ratio, accept_article_threshold,
                                             accept_greedy, accept_point_mass, accept_speculative,
                                             target_probs)
from dflash_lite.decoding.decode import PerRow, generate
from dflash_lite.decoding.baselines import DraftModelProposer
from dflash_lite.decoding.target import SHIPPED_BASELINES
from dflash_lite.measuring.plotting import COLORBLIND, save_figure, subplots
from dflash_lite.decoding.timing import interleaved

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
draft_model_path = str(SHIPPED_BASELINES["tiny"]["draft_model"])
device = "cpu"
draft_tokens = 4               # k: tokens drafted per step
max_new_tokens = 64
num_prompts = 4
num_samples = 4000             # for the empirical distribution checks

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
draft, _ = load_pretrained(draft_model_path, device=device)       # a 2-layer Qwen3, same tokenizer
stops = stop_token_ids(target, tokenizer)
print(f"target {sum(p.numel() for p in target.parameters()) / 1e6:.1f}M parameters, "
      f"draft {sum(p.numel() for p in draft.parameters()) / 1e6:.1f}M "
      f"({draft.config.num_hidden_layers} layers)")

# %% [markdown]
# ## The picture first: a speculative step on a timeline
#
# Drawn, not measured (`dflash_lite/measuring/diagrams.py`). What to look for: the plain row needs one target
# forward per token; the speculative row pays a cheap draft and one slightly wider target forward
# per step, and each step commits the accepted guesses plus one token of the target's own (the
# first miss is replaced by the target's token, so a step never commits fewer than one).

# %%
from dflash_lite.measuring import diagrams
_ = save_figure(diagrams.decoding_timeline(), "02_diagram_timeline")

# %% [markdown]
# ## One step by hand: draft, verify, accept (greedy)
#
# The target sees `[last, d1, ..., dk]` in one forward and returns its choice after each of them.
# Draft `d_i` is kept while it equals the target's choice at the position before it
# (`dflash_lite/decoding/acceptance.py: accept_greedy`); the target's choice at the first disagreement (or
# after the last draft) is appended, so each step commits between 1 and k+1 tokens.

# %%
problem = corpus.math_problem(corpus.HELD_OUT_SEED + 77)
ids = tokenizer(problem.prompt, return_tensors="pt").input_ids.to(device)
with torch.inference_mode():
    # prompt + first token
    context = torch.cat([ids, target(ids).logits[:, -1:].argmax(-1)], dim=1)
    drafted = context
    for _ in range(draft_tokens):                                                 # k draft forwards
        drafted = torch.cat([drafted, draft(drafted).logits[:, -1:].argmax(-1)], dim=1)
    d = drafted[0, context.shape[1]:]
    # one target forward, k+1 rows
    scores = target(drafted).logits[0, context.shape[1] - 1:]
n, extra = accept_greedy(d, scores)
print("draft   :", [tokenizer.decode([t]) for t in d.tolist()])
print("target  :", [tokenizer.decode([t]) for t in scores.argmax(-1).tolist()])
print(f"accepted {n} of {draft_tokens} drafts, then the target's {tokenizer.decode([extra])!r}: "
      f"{n + 1} tokens for one target forward")
assert 0 <= n <= draft_tokens

# %% [markdown]
# ## Build it: the greedy speculative loop
#
# Now the whole loop, written out. The target keeps a KV cache; the draft model is so small that
# it simply re-reads the sequence for each draft token. Each step:
#
# 1. **draft** `k` tokens with the small model;
# 2. **verify** `[last, d1, ..., dk]` with one target forward, reusing the cache;
# 3. **accept** the drafts up to the first disagreement, then the target's own token;
# 4. **roll back** the cache to the tokens that were kept (the rejected drafts' keys and values go).
#
# The cache bookkeeping is the only subtle part: before a step, the cache holds every committed
# token except the newest one, which is fed as `last` at the start of the block.

# %% nbgrader={"grade": false, "grade_id": "ch02_build_speculative_greedy", "locked": false, "schema_version": 3, "solution": true, "task": false}
from transformers import DynamicCache


@torch.inference_mode()
def speculative_greedy(target, draft, ids, k, max_new_tokens, stops=()):
    """Greedy speculative decoding: (the committed tokens, the number committed at each step)."""
    ### BEGIN SOLUTION
    cache = DynamicCache(config=target.config)
    # prefill: cache holds the prompt
    first = target(ids, past_key_values=cache).logits[:, -1:].argmax(-1)
    out, steps = [first.item()], []
    while len(out) < max_new_tokens and out[-1] not in stops:
        seq = torch.cat([ids, torch.tensor([out], device=ids.device)], dim=1)
        for _ in range(k):                                                   # 1. draft k tokens
            seq = torch.cat([seq, draft(seq).logits[:, -1:].argmax(-1)], dim=1)
        block = seq[:, -(k + 1):]                                            # [last, d1, ..., dk]
        choice = target(block, past_key_values=cache).logits[0].argmax(-1)  # 2. verify: k+1 choices
        n = 0
        # 3. accept while equal,
        while n < k and block[0, n + 1] == choice[n]:
            n += 1
        #    then the target's token
        new = block[0, 1:n + 1].tolist() + [choice[n].item()]
        if n < k:
            # 4. drop the k - n rejected drafts
            cache.crop(n - k)
        # never past max_new_tokens
        new = new[:max_new_tokens - len(out)]
        steps.append(len(new))
        # commit, up to a stop token
        for t in new:
            out.append(t)
            if t in stops:
                break
    return out, steps
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch02_build_speculative_greedy_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
mine, my_steps = speculative_greedy(target, draft, ids, draft_tokens, max_new_tokens, set(stops))
package = generate(target, PerRow(DraftModelProposer(draft, target, draft_tokens + 1)), ids,
                   max_new_tokens, stop_token_ids=stops)
alone = generate_autoregressive(target, ids, max_new_tokens, stop_token_ids=stops)
print(f"ours: {len(mine)} tokens in {len(my_steps)} verify steps; package: {len(package.tokens)} "
      f"tokens in "
      f"{len(package.acceptance_lengths)} steps; target alone: {len(alone.tokens)} forwards")
assert mine == package.tokens == alone.tokens
assert my_steps == package.acceptance_lengths
from dflash_lite.exercises import ch02, score                   # more prompts (both domains) and k
score(ch02.check_speculative_greedy(speculative_greedy, target, draft, tokenizer, max_new_tokens),
      3)

# %% [markdown]
# Same tokens as the target alone, and the same accepted length at every step as the package's
# loop. From here on we use the package: `generate` (`dflash_lite/decoding/decode.py`) is this
# loop with the draft model's own KV cache, timing, and sampling. The package's loop decodes a
# batch of prompts (one prompt is a batch of one); `DraftModelProposer` drafts one request at a time,
# so it runs wrapped, `PerRow(DraftModelProposer(...))`: one copy of it per row of the batch.
#
# ## The whole loop is exact
#
# Run on more prompts, the package's greedy output must equal the target's, token for token.

# %%
prompts = corpus.prompts("held_out", "math", num_prompts)      # the named held-out split
prompt_ids = [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in prompts]
results, identical = [], 0
for x in prompt_ids:
    expected = generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens
    r = generate(target, PerRow(DraftModelProposer(draft, target, draft_tokens + 1)), x,
                 max_new_tokens, stop_token_ids=stops)
    identical += r.tokens == expected
    results.append(r)
lengths = [a for r in results for a in r.acceptance_lengths]
tau = statistics.mean(lengths)
print(f"identical on {identical}/{len(prompt_ids)} prompts; tau = {tau:.2f} tokens per target "
      f"forward")
assert identical == len(prompt_ids)

# %% [markdown]
# ## Lossless sampling, derived and checked
#
# With temperature > 0 the draft token `x` comes from the draft's distribution `q`. Accept it with
# probability `min(1, p(x)/q(x))`; on rejection sample from `r = normalise(max(p - q, 0))`. Then
#
# $$\begin{aligned}
# P(\text{out} = y) &= q(y)\min\Big(1, \tfrac{p(y)}{q(y)}\Big) \\
# &\quad + \Big(1 - \sum_x \min(p(x), q(x))\Big)\,
# \frac{\max(p(y) - q(y), 0)}{\sum_z \max(p(z) - q(z), 0)} \\
# &= \min(p(y), q(y)) + \max(p(y) - q(y), 0) = p(y),
# \end{aligned}$$
#
# because `1 - Σ min(p, q) = Σ max(p - q, 0)`. So the output is distributed exactly as the target's.
# The source article instead accepts when `p(x) >= q(x)` (else resamples from p), or when
# `p(x) >= 0.5`. Below, the exact output distribution of each rule for one real next-token
# distribution of the target: inside its own answer to the held-out problem above, at the first
# position where it is fairly sure of the next token but not certain (top probability between 0.5
# and 0.95; the cell prints the context and the likeliest tokens). Then each rule's
# total-variation distance from `p`, and a sampled check. The first two rules get drafts sampled
# from the draft model; the threshold rule gets the best possible point-mass draft, the target's
# own favourite token. (The exact distribution of the `p(x) >= q(x)` rule is exercise 2.)
#
# What to look for in the figure (log scale, so the small probabilities are visible): the bars
# are each rule's exact output distribution. The lossless rule's match the black target bars at
# every token; the article's rules leave them (a missing bar is a probability of 0). The dots are
# the sampled frequencies, noisy where a token is expected only a few times in `num_samples`
# draws. The printed TV distances say how far each rule moves the distribution; the chi-square
# lines say whether this many samples can see it.

# %%
sampling = SamplingParams(temperature=1.0)
answer = generate_autoregressive(target, ids, 64, stop_token_ids=stops).tokens
full = torch.cat([ids, torch.tensor([answer], device=device)], dim=1)
with torch.inference_mode():
    P = target_probs(target(full).logits[0], sampling).double().cpu()     # p at every position
    Q = target_probs(draft(full).logits[0], sampling).double().cpu()
pos = next(i for i in range(ids.shape[1] - 1, full.shape[1] - 1) if 0.5 <= P[i].max() < 0.95)
p, q = P[pos], Q[pos]
print("context ends:", repr(tokenizer.decode(full[0, :pos + 1].tolist())[-50:]))
top = p.topk(3)
print("target's likeliest next tokens:", ", ".join(f"{tokenizer.decode([int(t)])!r} {float(v):.3f}"
                                                   for v, t in zip(top.values, top.indices)))

def exact_output(rule):
    if rule == "lossless (min(1, p/q))":
        residual = (p - q).clamp(min=0)
        return torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * residual / residual.sum()
    # by enumeration of the draft; its formula is exercise 2
    if rule == "article: p(x) >= q(x)":
        out = torch.zeros_like(p)
        for x in range(len(p)):
            point = torch.nn.functional.one_hot(torch.tensor(x), len(p)).double()
            out += q[x] * (point if p[x] >= q[x] else p)
        return out
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

# %%
# the same, sampled through the acceptance functions of dflash_lite/decoding/acceptance.py
# (one draft token)
g = torch.Generator().manual_seed(0)
counts = {r: np.zeros(len(p)) for r in rules}
# p at the draft position and the one after
pp, qq = p.float()[None].repeat(2, 1), q.float()[None]
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


def chi2_against_p(tally, n):
    """Chi-square p-value of ``tally`` (counts per token, n draws) against n * p. Tokens expected
    fewer than 5 times are pooled with the rest, where the chi-square approximation holds."""
    bins = [t for t in support if float(p[t]) * n >= 5]
    observed = [tally[t] for t in bins] + [n - sum(tally[t] for t in bins)]
    expected = [float(p[t]) * n for t in bins] + [n - sum(float(p[t]) * n for t in bins)]
    return chisquare(observed, expected).pvalue


fig, ax = subplots(height=4.2)
width = 0.2
xs = np.arange(len(support))
ax.bar(xs - 1.5 * width, p[support], width, label="target p", color="black")
for i, r in enumerate(rules):
    at = xs + (i - 0.5) * width
    ax.bar(at, exact_output(r)[support].numpy(), width, label=f"{r} (TV {tv[r]:.3f})")
    ax.plot(at, counts[r][support] / num_samples, "o", markersize=3, color="0.25",
            label="sampled frequency" if i == 0 else None)
ax.set_xticks(xs, [tokenizer.decode([t]).strip() or repr(tokenizer.decode([t])) for t in support])
ax.set_xlabel("the target's ten likeliest next tokens")
ax.set_yscale("log"); ax.set_ylim(0.5 / num_samples, 1)
ax.set_ylabel("probability (log scale)")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
ax.set_title("Output distribution of one speculative step")
_ = save_figure(fig, "02_acceptance_rules")
pvalues = {r: chi2_against_p(counts[r], num_samples) for r in rules}
for r, pv in pvalues.items():
    verdict = ("the sample rejects 'distributed as p'" if pv < 0.001
               else "the sample cannot tell it from p")
    print(f"{r:<40} sampled, chi-square p = {pv:.3g}: {verdict}")
assert pvalues[rules[0]] > 0.001

# %% [markdown]
# ## The rule DFlash uses: argmax drafts, a sampled target, accept while equal
#
# DFlash does not sample its drafts. It proposes the drafter's argmax `d`, so the draft
# distribution is a point mass: `q(d) = 1` and `q(x) = 0` elsewhere. Put that into the rule above:
#
# * accept `d` with probability `min(1, p(d) / q(d)) = p(d)`;
# * on rejection, sample from `normalise(max(p - q, 0))`: that is `p(y) / (1 - p(d))` for `y != d`,
#   and 0 for `d`, i.e. the target's distribution *conditioned on not being d*.
#
# Now do something simpler: **sample `y ~ p` and accept the draft if `y == d`, else emit `y`.**
# That accepts with probability `p(d)`, and when it rejects, `y` is a sample of `p` given `y != d`,
# exactly the residual. So the two procedures emit the same distribution, and
# `P(out = y) = p(d) 1[y = d] + (1 - p(d)) p(y) 1[y != d] / (1 - p(d)) = p(y)`.
#
# Per block this becomes: sample the target's token at every position of the verify forward, and
# accept drafts while they equal the samples. The first sample that differs is the target's token
# for that step. No draft probabilities are needed, and a better drafter (one whose argmax is
# often the target's sample) accepts more without changing the output distribution.
# `accept_point_mass` in `dflash_lite/decoding/acceptance.py` is this rule. Check it against `p`, at the
# position where the draft is the target's favourite and at one where it is a poor guess:

# %%
def emitted_first_token(draft_token, n_samples, seed=0):
    gen = torch.Generator().manual_seed(seed)
    d, pp2 = torch.tensor([draft_token]), p.float()[None].repeat(2, 1)
    tally, accepted = np.zeros(len(p)), 0
    for _ in range(n_samples):
        n, nxt = accept_point_mass(d, pp2, gen)
        accepted += n
        tally[draft_token if n >= 1 else nxt] += 1
    return tally, accepted / n_samples

for name, token in (("the target's argmax", int(p.argmax())),
                    ("the 5th likeliest token", int(p.topk(5).indices[-1]))):
    tally, rate = emitted_first_token(token, num_samples)
    pv = chi2_against_p(tally, num_samples)
    print(f"draft = {name:<24} acceptance rate {rate:.3f} (p(d) = {float(p[token]):.3f}); "
          f"chi-square p = {pv:.3g}")
    std = (float(p[token]) * (1 - float(p[token])) / num_samples) ** 0.5
    assert pv > 0.001 and abs(rate - float(p[token])) < 4 * std + 1e-9

# %% [markdown]
# What to look for: the acceptance rate is `p(d)` (high for the argmax, low for the poor guess),
# and in both cases the chi-square test does not reject "the output is distributed as `p`". The two
# p-values are the same number, and that is no accident: the emitted token is always the target's
# own sample (when it equals the draft, the draft *is* the sample), so with the same random seed
# both drafts emit exactly the same tokens. The draft only decides how far a step gets before the
# first disagreement. A bad draft costs speed, never correctness.

# %% [markdown]
# ## Seeded sampling: the same text, whatever was drafted
#
# The rule above emits the target's own sample at every position, but *which* sample depends on
# the random stream: a step that drafts more tokens draws its samples in another order, so one
# seed gives different text at block size 4 and at block size 16. Fix the noise by position
# instead. The Gumbel-max trick samples from `p` as `argmax(log p + g)`, with `g = -log(-log u)`
# for uniform `u`. If `u` is a function of (seed, position, token) only, the target's token at
# position i is a fixed function of the seed and of the tokens before it, and a point-mass draft
# is accepted exactly when it equals that token. Whatever is drafted, the committed text is the
# target's own seeded sample (drafter-invariant speculative decoding, arXiv 2408.07978).
# `PositionNoise` in `dflash_lite/decoding/acceptance.py` computes `u` with a counter-based hash of the
# three numbers. Build the sampler from its uniforms, and check it against `p`:

# %%
from dflash_lite.decoding.acceptance import PositionNoise, choose_tokens

noise = PositionNoise(seed=11)
positions = torch.arange(num_samples)                      # one draw per position, one seed
u = noise.uniform(positions, len(p))                       # (n, V) uniforms in (0, 1)
logp = p.log().float()
gumbel_max = (logp.double()[None] - torch.log(-torch.log(u))).argmax(dim=-1)
package = choose_tokens(logp[None].expand(num_samples, -1), sampling, None, noise, positions)
tally = np.bincount(gumbel_max.numpy(), minlength=len(p))
pv = chi2_against_p(tally, num_samples)
print(f"Gumbel-max by hand equals the package's sampler: {bool(torch.equal(gumbel_max, package))}; "
      f"chi-square against p: p-value {pv:.3g}")
assert torch.equal(gumbel_max, package) and pv > 0.001

# %% [markdown]
# One seeded sampled completion of the held-out problem, four ways: plain decoding; DFlash with
# the shipped drafter as a chain of block size 16 and as a
# [draft tree](../docs/glossary.md#draft-tree) of 16 nodes (notebook 09); and the small
# draft model drafting `draft_tokens` tokens with the same noise, `argmax(log q + g)` (the
# *coupled* rule). Same seed, same text, whatever tau each scheme reaches:

# %%
from dflash_lite.decoding.baselines import NoDraftProposer
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer
from dflash_lite.decoding.target import default_drafter_path
from dflash_lite.decoding.tree import DFlashTreeProposer

drafter = load_drafter(default_drafter_path(target_name)).to(device).eval()
schemes = {"plain decoding": NoDraftProposer(),
           "DFlash B=16": DFlashProposer(drafter, target, 16),
           "DFlash tree N=16": DFlashTreeProposer(drafter, target, 16),
           f"draft model k={draft_tokens}, coupled": PerRow(DraftModelProposer(
               draft, target, draft_tokens + 1, sampling, sample=True,
               generator=PositionNoise(21)))}
seeded = {name: generate(target, proposer, ids, max_new_tokens, sampling, stops, PositionNoise(21))
          for name, proposer in schemes.items()}
for name, result in seeded.items():
    print(f"{name:<26} tau {result.tau:5.2f}   {tokenizer.decode(result.tokens)[:50]!r}")
same = len({tuple(r.tokens) for r in seeded.values()}) == 1
print("the same tokens under every scheme:", same)
assert same

# %% [markdown]
# The coupled rule is not free. With the `min(1, p/q)` rule a sampled draft is accepted with
# probability `1 - TV(p, q)`, the most any rule can reach; coupled through the same noise it is
# accepted when the two Gumbel-max samples agree, which happens at least `(1 - TV) / (1 + TV)` of
# the time. Measure it at every position of the target's answer above, with the small draft
# model's `q` (`draws` in the cell: the noise seeds tried at each position), against both lines:

# %%
coupling_noise, draws = PositionNoise(5), torch.arange(2000)
answer_rows = list(range(ids.shape[1] - 1, full.shape[1] - 1))
tv_at, coupled_at = [], []
for i in answer_rows:
    g = -torch.log(-torch.log(coupling_noise.uniform(draws + 10_000 * i, P.shape[1])))
    same = (P[i].log() + g).argmax(-1) == (Q[i].log() + g).argmax(-1)
    coupled_at.append(float(same.double().mean()))
    tv_at.append(0.5 * float((P[i] - Q[i]).abs().sum()))
tv_at, coupled_at = np.array(tv_at), np.array(coupled_at)
bound = (1 - tv_at) / (1 + tv_at)
print(f"{len(answer_rows)} positions, mean acceptance of one sampled draft: min(1, p/q) rule "
      f"{np.mean(1 - tv_at):.3f}, coupled rule {coupled_at.mean():.3f}, bound (1 - TV)/(1 + TV) "
      f"{bound.mean():.3f}")
assert np.all(coupled_at >= bound - 0.05) and np.all(coupled_at <= 1 - tv_at + 0.05)

fig, ax = subplots(height=3.2)
grid = np.linspace(0, 1, 101)
ax.plot(grid, 1 - grid, color=COLORBLIND[0], label="min(1, p/q) rule: 1 - TV")
ax.plot(grid, (1 - grid) / (1 + grid), color=COLORBLIND[1], ls="--", label="coupled, bound: (1 - "
        "TV)/(1 + TV)")
ax.scatter(tv_at, coupled_at, s=14, color=COLORBLIND[2], label="coupled, measured", zorder=3)
ax.set_xlabel("TV(p, q) at a position of the answer")
ax.set_ylabel("P(the draft is accepted)")
ax.set_xlim(0, max(0.05, tv_at.max() * 1.1))
ax.legend(loc="lower left")
_ = save_figure(fig, "02_coupled_acceptance")

# %% [markdown]
# What to look for: every measured point lies between the two lines. Where the draft model agrees
# with the target (small TV) the two rules accept almost alike; the gap grows with TV. The coupled
# rule buys a sampled output that does not depend on the drafter, the block size or the policy's
# choices, at the price of some acceptance for a sampled draft; for DFlash's argmax drafts there
# is no price at all, since a point mass is accepted exactly when it is the target's sample either way.

# %% [markdown]
# ## Expected tau under a constant acceptance rate
#
# If every draft token were accepted independently with probability `a`, a step with `k` drafts
# would commit `(1 - a^(k+1)) / (1 - a)` tokens on average. Measure `a` from the run above (the
# fraction of draft tokens that were accepted, counting only positions that were reached) and compare.

# %%
reached = accepted = 0
for a_len in lengths:
    n = a_len - 1                                  # accepted drafts in that step
    accepted += n
    reached += min(n + 1, draft_tokens)            # drafts that were looked at
a = accepted / reached
predicted = (1 - a ** (draft_tokens + 1)) / (1 - a) if a < 1 else draft_tokens + 1
verdict = "overestimates" if predicted > tau else "underestimates"
print(f"per-token acceptance a = {a:.3f}; predicted tau = {predicted:.2f}, measured tau = "
      f"{tau:.2f}: the formula {verdict} by {abs(predicted - tau):.2f}")


# %% [markdown]
# The prediction is close when acceptance is roughly independent of position. Dependence can push
# it either way: drafts that fail in bursts (a hard token stays hard) make it overestimate, and
# easy stretches that are accepted whole (a number copied from the question) make it underestimate.
# The last line above says which way it went on these prompts; with a few prompts the gap is small
# and its sign is not a property of the method.
#
# ## A training-free peer: prompt lookup
#
# Prompt-lookup decoding (transformers' `prompt_lookup_num_tokens`) drafts by copying the tokens that
# followed the last n-gram's earlier occurrence in the prompt. It needs no model at all.

# %%
def hf_generate(x, **kw):
    out = target.generate(x, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stops,
                          pad_token_id=tokenizer.pad_token_id, **kw)
    return out[0, x.shape[1]:].tolist()


runs = {"target alone (generate)": lambda x: hf_generate(x),
        "prompt lookup (generate)": lambda x: hf_generate(x, prompt_lookup_num_tokens=draft_tokens),
        "draft model (ours)": lambda x: generate(
            target, PerRow(DraftModelProposer(draft, target, draft_tokens + 1)), x, max_new_tokens,
            stop_token_ids=stops).tokens}
# the one interleaved timer (dflash_lite/decoding/timing.py): a warm-up round, then rounds in turn
timed = interleaved({name: (lambda f=f: [f(x) for x in prompt_ids[:2]])
                     for name, f in runs.items()}, repeats=3, warmup=1, device=device)
base = timed["target alone (generate)"][0][1]
rates = {}
for name, rounds in timed.items():
    assert all(outputs == base for _, outputs in rounds)           # the same tokens, every round
    rates[name] = statistics.median(sum(map(len, outputs)) / seconds for seconds, outputs in rounds)
    print(f"{name:<26} {rates[name]:7.1f} tokens/s (median of {len(rounds)} interleaved rounds)")
print("fastest here: " + max(rates, key=rates.get))

# %% [markdown]
# How to read this: every row produced the same tokens (the cell asserts it), so the differences
# are speed only. Prompt lookup costs no drafter forward at all, but it can only propose text that
# already appeared: on these math answers it copies names and quantities from the question, and
# little else. The draft model pays a forward per draft token, and wins when its guesses are
# accepted often enough to cover that cost. Which one is faster here (the last line) depends on the
# prompts, on `draft_tokens` and on how expensive a wider verify is on this machine (notebook 01).
# The rounds are interleaved after a warm-up, as in notebook 06, which times the same methods on
# its own prompts and settings (prompt lookup there drafts more tokens per step), so its tokens/s
# and even its ranking need not match these. The exercise below makes prompt lookup yours to study.

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# ## Summary
#
# * Speculative decoding commits 1..k+1 tokens per target forward and never changes the output:
#   greedy acceptance keeps the prefix the target agrees with; sampled acceptance uses
#   `min(1, p/q)` and the residual `max(p - q, 0)`.
# * With an argmax draft the rule becomes "sample the target, accept while equal": DFlash's rule,
#   lossless by the derivation and the chi-square check above.
# * With noise keyed by position (seed, position, token), sampling is Gumbel-max and the committed
#   text is the target's own seeded sample whatever was drafted; a sampled draft model coupled to
#   the same noise is accepted at least (1 - TV)/(1 + TV) of the time, against 1 - TV for
#   `min(1, p/q)`.
# * The source article's rules are not lossless: their TV distance from `p` is not zero. How much
#   mass they move depends on the position: the printed TV distances and chi-square lines above say
#   which shift this many samples can see here (exercise 2 shows why the ratio rule is biased everywhere).
# * tau depends on how well the draft imitates the target, and the speedup on how cheap drafting is.
#   An autoregressive draft pays one forward per draft token; DFlash (next notebook) pays one per block.
#
# ## Exercises
#
# Difficulty: ★ a few minutes, ★★ up to an hour, ★★★ a small project. Each exercise has a
# self-check; run its cell with your answer. Worked solutions: `notebooks/solutions/02_speculative_decoding.py`.
#
# **1. ★ Draft length.** Run `speculative_greedy` (above) on the first prompt of `prompt_ids` with
# `k = 2` and `k = 8`, `max_new_tokens` and `set(stops)` as in the cell that ran it, and give the two values of tau (mean accepted length per verify step) as a
# dict `{2: ..., 8: ...}`. Why does tau saturate while the drafting cost keeps growing with `k`?

# %% nbgrader={"grade": false, "grade_id": "ch02_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises import ch02
### BEGIN SOLUTION
answer_1 = None   # a dict {2: float, 8: float}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch02_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch02.check_tau_by_draft_length(answer_1, target, draft, tokenizer, max_new_tokens), 1)

# %% [markdown]
# **2. ★★ The article's ratio rule, exactly.** Write `article_output(p, q)` that returns the exact
# distribution of the token emitted by "draw `x ~ q`; keep it if `p(x) >= q(x)`, else resample from
# `p`" (one draft token), for probability vectors `p`, `q` (1-D tensors). Then show on paper that
# it under-represents every `y` with `p(y) < q(y)`, so the tokens with `p(y) >= q(y)` get too much
# mass as a group. *(Hint: compute `P(out = y)` for such a `y`.)*

# %% nbgrader={"grade": false, "grade_id": "ch02_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
def article_output(p, q):
    ### BEGIN SOLUTION
    return None   # your code here
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch02_exercise_2_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch02.check_article_output(article_output), 2)

# %% [markdown]
# **3. ★ Processors on both sides.** Recompute `p` and `q` after `Question:` with
# `SamplingParams(temperature=0.7, top_p=0.9)` (`target_probs(logits, params)`), and give the TV
# distance between `p` and the output of the `p(x) >= q(x)` rule. Why must the same processors be
# applied to `q`, and why does it not matter for losslessness which ones the draft uses?

# %% nbgrader={"grade": false, "grade_id": "ch02_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_3 = None   # a float: the TV distance
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch02_exercise_3_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch02.check_tv_with_processors(answer_3, target, draft, tokenizer), 1)

# %% [markdown]
# **4. ★★ Prompt lookup by hand.** Write `lookup_draft(tokens, k, ngram=2)`: find the most recent
# earlier occurrence of the last `ngram` tokens of the list `tokens`, and return (up to) the `k`
# tokens that followed it; return `[]` if there is none. Then think about which prompts (math, code)
# give it long matches.

# %% nbgrader={"grade": false, "grade_id": "ch02_exercise_4", "locked": false, "schema_version": 3, "solution": true, "task": false}
def lookup_draft(tokens, k, ngram=2):
    ### BEGIN SOLUTION
    return None   # your code here
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch02_exercise_4_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch02.check_lookup_draft(lookup_draft), 2)

# %% [markdown]
# ## Review questions
#
# 1. Why is a step of speculative decoding never worse than one token per target forward?
# 2. In the greedy loop, which cached positions does the rollback remove, and why is the newest
#    committed token never in the cache at the start of a step?
# 3. What does the target compute at each of the `k + 1` positions of the verify forward?
# 4. Write the lossless acceptance probability for a sampled draft, and the distribution sampled on rejection.
# 5. Why does "sample the target, accept while equal" need no draft probabilities?
# 6. What does total-variation distance measure, and why is any non-zero value a failure here?
# 7. When does the independent-acceptance formula for tau overestimate the measured tau?
# 8. What does prompt lookup draft from, and what does it cost per step?
