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
# # 09 · What came next: draft trees, and choosing the depth each step
#
# A DFlash step keeps only the **argmax** at each block position: a chain. But the one drafter
# forward gave a whole distribution at every position, and when the chain's j-th draft is wrong,
# the target's token is often the drafter's second or third choice there. DDTree (arXiv
# 2604.12989) keeps DFlash's single drafter forward and reads more out of it: it builds the tree
# of the N most likely continuations and verifies **all of them in one target forward**, with an
# attention mask in which every draft sees only its own ancestors. The price is a wider verify
# (N + 1 tokens instead of B).
#
# Whether that pays depends on the machine, and so does the best block size. Serving systems
# therefore choose the depth per step from measured costs and the acceptance seen so far; this
# project's default does the same (`dflash_lite.decoding.policy`), and may pick a tree.
#
# **In this chapter you will**
#
# * measure where the target's token sits in the drafter's ranking, per block position: the case
#   for a tree;
# * **build a best-first [draft tree](../docs/glossary.md#draft-tree) yourself** from one drafter
#   forward (by the product of per-position probabilities) and match `build_tree`;
# * build the [tree mask](../docs/glossary.md#tree-mask) and check that **one** forward over the
#   tree gives, at every node, exactly the logits of the chain along that node's path;
# * accept the longest path the target agrees with, keep its cache entries, and check that tree
#   decoding is identical to the target's greedy output; then sample with it, still losslessly;
# * measure tau and the verify's cost against the tree size N (does a tree pay on this machine?),
#   and watch the cost-aware [policy](../docs/glossary.md#policy) choose per step.
#
# **Prerequisites:** chapters 02, 03, 06.
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import heapq
import statistics

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import torch

from dflash_lite import (SamplingParams, corpus, generate_autoregressive, load_pretrained,
                         stop_token_ids)
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.decode import DFlashProposer, generate, new_cache, prefill
from dflash_lite.measuring.plotting import COLORBLIND, save_figure, subplots
from dflash_lite.decoding.costs import measure_step_costs
from dflash_lite.decoding.policy import chain_accepted
from dflash_lite.decoding.session import DEFAULT_TREE_SIZES, default_policy
from dflash_lite.decoding.target import SHIPPED_DRAFTERS
from dflash_lite.decoding.tree import DFlashTreeProposer, accept_tree, build_tree, verify_tree

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
drafter_path = str(SHIPPED_DRAFTERS["tiny"])
device = "cpu"
num_prompts = 3              # held-out prompts per domain (math and code)
max_new_tokens = 48
tree_sizes = [4, 16, 32, 64]
demo_tree_size = 12          # the tree drawn in sections 2 and 3
timing_repeats = 10
sampled_temperature = 1.0

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
drafter = load_drafter(drafter_path).to(device).eval()
stops = stop_token_ids(target, tokenizer)
B = drafter.config.block_size
prompt_ids = {domain: [tokenizer(p, return_tensors="pt", add_special_tokens=False).input_ids
                       .to(device) for p in corpus.prompts("held_out", domain, num_prompts)]
              for domain in ("math", "code")}
greedy = {domain: [generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens
                   for x in xs]
          for domain, xs in prompt_ids.items()}
print(f"drafter: block {B} ({B - 1} drafts per forward); {num_prompts} held-out "
      f"prompts per domain, "
      f"{max_new_tokens} new tokens each")

# %% [markdown]
# ## 1. Where is the target's token in the drafter's ranking?
#
# Run ordinary DFlash (the chain) and record the drafter's logits at every step. The decode is
# lossless, so the target's greedy output tells us, for every drafted position, which token the
# target wanted there. Its **rank** among the drafter's candidates at that position is what
# matters: rank 1 means the chain had it, rank 2 or 3 means a tree with a few siblings per position
# could have had it.


# %%
class RecordingProposer(DFlashProposer):
    """The chain, recording (position of slot 0, the drafter's logits (k, V)) at every step."""

    def start(self, ids, features, lengths=None):
        super().start(ids, features, lengths)
        self.records = []

    def block_logits(self, last, depths):                   # the one drafter forward of each step
        block, logits = super().block_logits(last, depths)
        # where `last` sits
        self.records.append((self.new_context_start[0] + self.new_context.shape[1], logits[0]))
        return block, logits


# per domain, per position j
ranks = {domain: [[] for _ in range(B - 1)] for domain in prompt_ids}
for domain, xs in prompt_ids.items():
    for x, expected in zip(xs, greedy[domain]):
        proposer = RecordingProposer(drafter, target, B)
        assert generate(target, proposer, x, max_new_tokens,
                        stop_token_ids=stops).tokens == expected
        full = x[0].tolist() + expected
        for position, logits in proposer.records:
            for j in range(1, logits.shape[0] + 1):
                # the target's token at block position j
                if position + j < len(full):
                    truth = full[position + j]
                    above = int((logits[j - 1] > logits[j - 1, truth]).sum())
                    ranks[domain][j - 1].append(above + 1)

buckets = [("rank 1 (the chain)", 1, 1), ("rank 2", 2, 2), ("rank 3-4", 3, 4),
           ("rank 5+", 5, 10 ** 9)]
fig, axes = subplots(1, 2, height=3.8, sharey=True)
for ax, domain in zip(axes, prompt_ids):
    positions = [j for j in range(1, B) if ranks[domain][j - 1]]
    bottom = np.zeros(len(positions))
    for label, lo, hi in buckets:
        share = np.array([np.mean([lo <= r <= hi for r in ranks[domain][j - 1]])
                          for j in positions])
        ax.bar(positions, share, bottom=bottom, label=label)
        bottom += share
    ax.set_xlabel("block position j"); ax.set_title(f"{domain} (held-out)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
axes[0].set_ylabel("share of the target's tokens")
fig.legend(*axes[1].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.02),
           ncol=4, frameon=False)
fig.suptitle("Rank of the target's token among the drafter's candidates")
_ = save_figure(fig, "09_target_token_rank")
for domain in prompt_ids:
    first = ranks[domain][0]
    print(f"{domain}: position 1 -- rank 1 {np.mean([r == 1 for r in first]):.2f}, "
          f"rank 2-4 {np.mean([2 <= r <= 4 for r in first]):.2f}, "
          f"rank 5+ {np.mean([r >= 5 for r in first]):.2f} "
          f"(over {len(first)} steps)")

# %% [markdown]
# Where the chain misses (everything above the first bar segment), the target's token is often
# among the drafter's next few choices (the printed shares at position 1). A tree that keeps those
# siblings can accept them, and then keep going below them. Where it is far down the ranking
# (rank 5+), no small tree holds it.
#
# ## 2. Build it: the best-first tree
#
# A path of depth d scores the product of its tokens' probabilities at positions 1..d (a sum of
# log-probabilities). Products only shrink as a path grows, so a path never scores above its
# parent: the N best paths form a tree that is closed under prefixes. Best-first search finds them
# with a heap. Represent a path by the rank of its token at each position; a popped path has two
# successors: its **first child** (the top token one position deeper) and its **next sibling** (the
# next-ranked token at its own position).
#
# The setting is the first step of a code prompt: the target has read the prompt and chosen its
# first token (the root); the drafter drafts from there.

# %% nbgrader={"grade": false, "grade_id": "ch09_build_best_paths", "locked": false, "schema_version": 3, "solution": true, "task": false}
x = prompt_ids["code"][0]
P = x.shape[1]                                                  # the root sits at position P
cache = new_cache(target)
with torch.inference_mode():
    logits0, features = prefill(target, x, cache, drafter.config.target_layer_ids)
    root = logits0.argmax(dim=-1)                               # (1,) the target's first token
    block = torch.full((1, B), drafter.config.mask_token_id, device=device)
    block[0, 0] = root                                          # [root, MASK x (B-1)]
    draft_logits = drafter.draft_logits(target, block, features, 0,
                                        SlotCache(drafter.config.num_layers))[0]
    logprobs = torch.log_softmax(draft_logits.float(), dim=-1)  # (B-1, V)
# (B-1, N): each position's candidates, sorted
top_logp, top_ids = logprobs.topk(demo_tree_size, dim=-1)


def best_paths(top_logp, top_ids, budget):
    """The ``budget`` most likely paths, best first, as tuples of token ids."""
    ### BEGIN SOLUTION
    def score(ranks):                                          # the path's log-probability
        return sum(float(top_logp[d, r]) for d, r in enumerate(ranks))

    heap, found = [(-score((0,)), (0,))], []
    while heap and len(found) < budget:
        _, ranks = heapq.heappop(heap)
        found.append(tuple(int(top_ids[d, r]) for d, r in enumerate(ranks)))
        if len(ranks) < top_ids.shape[0]:                                       # first child
            heapq.heappush(heap, (-score(ranks + (0,)), ranks + (0,)))
        if ranks[-1] + 1 < top_ids.shape[1]:                                    # next sibling
            sibling = ranks[:-1] + (ranks[-1] + 1,)
            heapq.heappush(heap, (-score(sibling), sibling))
    return found
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch09_build_best_paths_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# dflash_lite/decoding/tree.py
tree = build_tree(root, logprobs, demo_tree_size)


def node_path(tree, i):
    """The draft tokens from the root's child down to node i."""
    tokens = []
    while i > 0:
        tokens.append(int(tree.tokens[i])); i = tree.parents[i]
    return tuple(reversed(tokens))


mine = best_paths(top_logp, top_ids, demo_tree_size)
assert set(mine) == {node_path(tree, i) for i in range(1, len(tree))}
# closed under prefixes
assert all(len(p) == 1 or p[:-1] in set(mine) for p in mine)
print(f"{len(mine)} paths, depths {sorted({len(p) for p in mine})}; the same set as build_tree's")
print("the chain (top token at each position):",
      repr(tokenizer.decode([int(t) for t in top_ids[:6, 0]])), "...")

# %% [markdown]
# Drawn with the root on the left, each column a block position. Node labels are tokens; the
# chain is the top row of each branch.


# %%
def draw_tree(tree, ax, title):
    kids = [[] for _ in range(len(tree))]
    for i, p in enumerate(tree.parents[1:], 1):
        kids[p].append(i)
    y, leaves = {}, [0]

    # leaves in depth-first order, parents centred
    def place(i):
        if not kids[i]:
            y[i] = leaves[0]; leaves[0] += 1
        else:
            for k in kids[i]:
                place(k)
            y[i] = statistics.mean(y[k] for k in kids[i])
    place(0)
    for i in range(1, len(tree)):
        p = tree.parents[i]
        ax.plot([tree.depths[p], tree.depths[i]], [-y[p], -y[i]], color="0.6", zorder=1)
    for i in range(len(tree)):
        label = tokenizer.decode([int(tree.tokens[i])]).replace("\n", "\\n") or "·"
        ax.text(tree.depths[i], -y[i], f" {label} ", ha="center", va="center", fontsize=10,
                zorder=2, bbox=dict(boxstyle="round", fc="lightyellow" if i else "lightblue",
                                    ec="0.5"))
    ax.set_xlim(-0.5, max(tree.depths) + 0.5); ax.set_ylim(-leaves[0] + 0.5, 0.5)
    ax.set_xlabel("depth = block position"); ax.set_yticks([]); ax.set_title(title)


fig, ax = subplots(height=4.4)
draw_tree(tree, ax, f"A {demo_tree_size}-node draft tree from one drafter forward\n"
                    "(first step of a held-out code prompt)")
_ = save_figure(fig, "09_draft_tree")

# %% [markdown]
# ## 3. One forward for the whole tree
#
# All N + 1 tokens (root and drafts) go through the target together. Two things make that equal
# to N separate chain forwards:
#
# * **the mask**: every node attends to the whole cached context and to its own ancestors (and
#   itself), never to a sibling's branch;
# * **the positions**: a node at depth d sits at position P + d, whatever its index in the batch.
#
# transformers passes a boolean 4D mask straight to SDPA. Build the tree part of the mask, then
# check every node's logits against a plain forward over its own path.

# %% nbgrader={"grade": false, "grade_id": "ch09_build_tree_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
ancestors = torch.eye(len(tree), dtype=torch.bool)
### BEGIN SOLUTION
for i in range(1, len(tree)):                                   # parents come before their children
    ancestors[i] |= ancestors[tree.parents[i]]
### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch09_build_tree_mask_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert torch.equal(ancestors, tree.ancestor_mask())

fig, ax = plt.subplots(figsize=(5, 4.5))
ax.imshow(ancestors.numpy(), cmap="Blues")
ax.set_xlabel("key: tree node"); ax.set_ylabel("query: tree node")
ax.set_title("Tree attention mask (the context columns, all visible, left out)")
_ = save_figure(fig, "09_tree_mask")

# %%
with torch.inference_mode():
    tree_logits, tree_features = verify_tree(target, tree, cache, drafter.config.target_layer_ids)
    # forget the tree again: the next write starts at P
    cache.rewind(P)
    worst = 0.0
    for i in range(len(tree)):
        path = torch.tensor([int(root)] + list(node_path(tree, i)), device=device)[None]
        chain_logits = target(path, past_key_values=cache, use_cache=True).logits[0, -1]
        cache.rewind(P)
        worst = max(worst, float((chain_logits - tree_logits[i]).abs().max()))
        torch.testing.assert_close(tree_logits[i], chain_logits, atol=1e-4, rtol=1e-4)
print(f"{len(tree)} nodes in one forward of {len(tree)} tokens; largest logit difference against "
      f"the per-path forwards: {worst:.1e}")

# %% [markdown]
# ### 3b. The hybrid tree
#
# A tree verify takes any set of paths, so the drafter's tree can carry a guess from somewhere
# else too. Prompt lookup (`dflash_lite/decoding/ngram.py`) copies what followed the last few tokens the
# last time they occurred; `add_branch` (`dflash_lite/decoding/tree.py`) hangs that continuation under the
# root, sharing the nodes the tree already holds. Build the hybrid tree by hand and check that one
# verify of it still equals the per-path forwards. The default policy (`session.DEFAULT_OPTIONS`,
# section 6) chooses this hybrid tree, or prompt lookup's chain alone, when its estimates say
# they pay.

# %%
from dflash_lite.decoding.ngram import ngram_continuation
from dflash_lite.decoding.tree import add_branch

history = torch.cat([x[0], root.view(1)]).tolist()             # the prompt and the root token
branch = ngram_continuation(history, max_ngram=3, k=6) or tree.chain[:1] + [int(root)] * 5
hybrid = add_branch(tree, branch)
print(f"prompt lookup proposes {len(branch)} tokens; the tree grows from {len(tree)} to "
      f"{len(hybrid)} nodes "
      f"({hybrid.path_length(branch)} of them on the branch's path)")
assert hybrid.path_length(branch) == len(branch) and len(hybrid) <= len(tree) + len(branch)

with torch.inference_mode():
    hybrid_logits, _ = verify_tree(target, hybrid, cache, drafter.config.target_layer_ids)
    cache.rewind(P)
    for i in range(len(hybrid)):
        path = torch.tensor([int(root)] + list(node_path(hybrid, i)), device=device)[None]
        chain_logits = target(path, past_key_values=cache, use_cache=True).logits[0, -1]
        cache.rewind(P)
        torch.testing.assert_close(hybrid_logits[i], chain_logits, atol=1e-4, rtol=1e-4)
print("one verify of the hybrid tree equals the per-path forwards at every node")

# %% [markdown]
# The three masks of this course side by side (`dflash_lite/measuring/diagrams.py`). What to look for: the
# causal mask is a triangle; the block mask gives each block the context before its anchor and its
# own block in both directions; the tree mask gives each node its ancestors only, so siblings never
# see each other.

# %%
from dflash_lite.measuring import diagrams
_ = save_figure(diagrams.attention_masks(), "09_diagram_masks")

# %% [markdown]
# ## 4. Accept the longest path, keep only its cache
#
# Greedy acceptance walks down from the root: at each node, the target's argmax there names the
# child to follow; when no child holds it, the walk stops and that argmax is the bonus token. The
# target's cache now holds all N + 1 tree entries: the accepted path's entries are moved to
# consecutive slots (`cache.keep_path`), the next write starts after them, and only the path's features go to the
# drafter's context.

# %%
with torch.inference_mode():
    path, bonus = accept_tree(tree, tree_logits)
    chain = [int(t) for t in top_ids[:, 0]]
    accepted, _ = chain_accepted([int(tree.tokens[i]) for i in path[1:]], chain,
                                 tree.path_length(chain))
    # again: the cache holds the tree
    verify_tree(target, tree, cache, drafter.config.target_layer_ids)
    cache.keep_path(P, path)
    assert cache.get_seq_length() == P + len(path)
    expected = greedy["code"][0]
    # root, accepted drafts, bonus
    committed = [int(tree.tokens[i]) for i in path] + [bonus]
    assert committed[: len(expected)] == expected[: len(committed)]
print(f"accepted path: {len(path) - 1} drafts {tokenizer.decode(committed[1:-1])!r}, "
      f"then the bonus "
      f"{tokenizer.decode([bonus])!r}; the chain alone would have kept {accepted}")

# %% [markdown]
# That is one step. `DFlashTreeProposer` runs it in the ordinary decode loop: its `propose`
# returns one `DraftTree` per row, and `decode.steps` treats it as it treats a chain draft: it lays
# it out for the verify (`layout`), accepts along it (`accept`), and keeps the cache entries of the
# accepted path (`cache.keep_paths`). The test that matters: on every prompt, the output is the
# target's greedy output, token for token (`tests/test_tree.py` does this on 50 prompts with a
# random drafter, where wrong drafts are the rule).

# %%
for domain, xs in prompt_ids.items():
    for x_, expected in zip(xs, greedy[domain]):
        for n in tree_sizes:
            got = generate(target, DFlashTreeProposer(drafter, target, n), x_, max_new_tokens,
                           stop_token_ids=stops).tokens
            assert got == expected, f"tree N={n} diverged on a {domain} prompt"
print(f"trees of {tree_sizes} nodes: identical to greedy on all {2 * num_prompts} prompts")

# %% [markdown]
# ### 4b. At temperature > 0
#
# The drafts are deterministic, so sampling needs no new rule, only the chain's (notebook 02):
# at each node of the walk, draw the target's token from its distribution given that node's path,
# and follow the child holding that token; if no child holds it, it is the bonus token. Every
# committed token is then a sample of the target given the tokens before it, exactly as in plain
# sampling; the tree only changes how many one forward commits. A tree keeps the drafter's likely
# siblings, and a sample often lands on a sibling instead of the argmax. `tests/test_sampling_lossless.py`
# checks the rule with a chi-square test against exact distributions (a toy target, and the
# shipped target end to end). Below, the chain and the default policy's tree size, sampled:

# %%
sampling = SamplingParams(temperature=sampled_temperature)
for domain, xs in prompt_ids.items():
    taus_t = {}
    for label, make in (("chain B=16", lambda: DFlashProposer(drafter, target, B)),
                        (f"tree N={DEFAULT_TREE_SIZES[0]}",
                         lambda: DFlashTreeProposer(drafter, target, DEFAULT_TREE_SIZES[0]))):
        g = torch.Generator().manual_seed(0)
        lengths = [a for x_ in xs
                   for a in generate(target, make(), x_, max_new_tokens, sampling,
                                     stop_token_ids=stops, generator=g).acceptance_lengths]
        taus_t[label] = float(np.mean(lengths))
    print(f"{domain}, temperature {sampled_temperature:g}: "
          + ", ".join(f"{k} tau {v:.2f}" for k, v in taus_t.items()))

# %% [markdown]
# Verification of a tree, drawn (`dflash_lite/measuring/diagrams.py`; the tokens are made up). What to look
# for: the target's argmax at each node on the path names the child to follow; at the first node
# with no such child the walk stops, and that argmax becomes the bonus token.

# %%
_ = save_figure(diagrams.tree_verification(), "09_diagram_tree_verification")

# %% [markdown]
# ## 5. Does a tree pay on this machine?
#
# A tree raises tau, and a step still costs one drafter forward, but its verify is N + 1 tokens
# wide. The cost model of notebook 06 with the tree's verify:
#
# $$\text{speedup} \approx \frac{\tau_N \, t_\text{target}(1)}{t_\text{target}(N+1) + t_\text{draft}(B)}$$
#
# Below, tau is measured per domain on the prompts above, and each *t* is measured once here
# (median of interleaved repeats at the first prompt's length); the chain is the row with B = 16
# (a verify of B tokens). The prediction leaves out the loop's overhead (notebook 06 measures it);
# `python -m dflash_lite bench --tree-sizes 16,32,64` measures the real speed.

# %%
costs = measure_step_costs(target, drafter, prompt_ids["math"][0],
                           [1, B] + [n + 1 for n in tree_sizes], [B], repeats=timing_repeats)
t, t_draft = costs["t_target"], costs["t_draft"][B]
taus = {}
for domain, xs in prompt_ids.items():
    for label, make in [("chain", lambda: DFlashProposer(drafter, target, B))] + \
            [(n, lambda n=n: DFlashTreeProposer(drafter, target, n)) for n in tree_sizes]:
        lengths = [a for x_ in xs
                   for a in generate(target, make(), x_, max_new_tokens,
                                     stop_token_ids=stops).acceptance_lengths]
        taus[domain, label] = float(np.mean(lengths))
predicted = {(d, label): taus[d, label] * t[1] / ((t[B] if label == "chain"
                                                   else t[label + 1]) + t_draft)
             for d, label in taus}
print(f"{'':<10}" + "".join(f"{str(label):>10}" for label in ["chain"] + tree_sizes))
print(f"{'verify':<10}" + "".join(f"{(t[B] if label == 'chain' else t[label + 1]) / t[1]:>9.2f}x"
                                  for label in ["chain"] + tree_sizes) + "   of t_target(1)")
for domain in prompt_ids:
    print(f"{domain + ' tau':<10}" + "".join(f"{taus[domain, label]:>10.2f}"
                                             for label in ["chain"] + tree_sizes))
    print(f"{domain + ' pred':<10}" + "".join(f"{predicted[domain, label]:>9.2f}x"
                                              for label in ["chain"] + tree_sizes))
# does each added node add less tau?
for domain in prompt_ids:
    # per node added: the steps up in N add different numbers of nodes
    gains = [(taus[domain, b] - taus[domain, a]) / (b - a)
             for a, b in zip(tree_sizes, tree_sizes[1:])]
    shrinking = all(g2 <= g1 for g1, g2 in zip(gains, gains[1:]))
    steps_up = zip(zip(tree_sizes, tree_sizes[1:]), gains)
    print(f"{domain}: tau gain per added node "
          + ", ".join(f"{a}->{b}: {g:+.3f}" for (a, b), g in steps_up)
          + f" ({'diminishing' if shrinking else 'not diminishing'})")

fig, axes = subplots(1, 3, height=3.6)
for domain in prompt_ids:
    axes[0].plot(tree_sizes, [taus[domain, n] for n in tree_sizes], marker="o",
                 label=f"{domain}: tree")
    axes[0].axhline(taus[domain, "chain"], ls="--", color=axes[0].lines[-1].get_color(),
                    label=f"{domain}: chain B={B}")
    axes[2].plot(tree_sizes, [predicted[domain, n] for n in tree_sizes], marker="o",
                 label=f"{domain}: tree")
    axes[2].axhline(predicted[domain, "chain"], ls="--", color=axes[2].lines[-1].get_color(),
                    label=f"{domain}: chain")
widths = sorted({1, B, *(n + 1 for n in tree_sizes)})
axes[1].plot(widths, [t[b] / t[1] for b in widths], marker="o")
axes[1].set_xlabel("tokens in the verify"); axes[1].set_ylabel("t_target / t_target(1)")
axes[1].set_title("What the verify costs")
axes[0].set_xlabel("tree size N"); axes[0].set_ylabel("tau"); axes[0].set_title("Tokens per step")
axes[2].set_xlabel("tree size N")
axes[2].set_ylabel("predicted speedup")
axes[2].set_title("The cost model")
for ax in axes[[0, 2]]:
    ax.set_xscale("log", base=2)
fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.02),
           ncol=4, frameon=False)
_ = save_figure(fig, "09_tree_tau_and_cost")
for domain in prompt_ids:
    best = max(["chain"] + tree_sizes, key=lambda label: predicted[domain, label])
    print(f"{domain}: the cost model's pick is "
          f"{'the chain' if best == 'chain' else f'the tree of {best}'}")

# %% [markdown]
# What to look for:
#
# * **tau grows with N**: more paths hold the target's token more often. Whether the returns
#   diminish is for the printed gain per added node to say; each extra node is a less likely
#   path, but a deeper tree can also reach tokens a shallow one cannot. A tree
#   smaller than the block cannot go as deep as the chain (N = 4 holds at most 4 drafts), so where
#   chains run long it can lose to the chain.
# * **The verify is not free on a CPU.** The middle panel is this machine's price of a wider
#   forward, and the `verify` row prints it. A 16-node tree is verified over 17 tokens, the
#   chain at B = 16 over 16: the same width, nearly the same cost, but the tree holds the likely
#   siblings the chain throws away. That is why the default policy's tree has 16 nodes. Bigger
#   trees add tau, and each costs more to verify on this CPU: the cost model's pick, printed per
#   domain, weighs the two.
# * **On a GPU** a forward over 64 tokens costs about what one token costs (the weights are read
#   once either way), which is why DDTree's reported gains are GPU gains; notebook 08 and
#   `tools/gpu_bench.sh` measure that curve on real hardware. Notebook 10 shows it measured on an NVIDIA H200.
#
# ## 6. Choosing per step: the cost-aware policy
#
# `session.default_policy` (what `Engine.generate`, `demo` and `bench`'s headline row run) picks,
# before each step and at any temperature, one of five kinds for the most expected tokens per
# second: plain decoding, a DFlash chain of b - 1 drafts, a 16-node tree, prompt lookup's
# continuation alone, or the hybrid tree of section 3b; from measured costs as above and
# acceptance estimated from the steps so far. A tree step also tells it what the chain would have
# done (the tree holds the chain), and every step with a lookup continuation tells the lookup
# estimate whether it would have held, so the estimates keep learning whichever it picks. Its
# choices on one prompt of each domain:

# %%
KIND_COLORS = dict(zip(("plain", "chain", "tree", "ngram", "hybrid"),
                       (COLORBLIND[7], *COLORBLIND[:3], COLORBLIND[4])))
KIND_LABELS = {"plain": "plain decoding (B=1)", "chain": "chain: b - 1 drafts",
               "tree": "tree of N nodes", "ngram": "prompt lookup: M drafts",
               "hybrid": "hybrid tree + prompt lookup"}
fig, axes = subplots(2, 1, height=5.6)
seen = set()
for ax, domain in zip(axes, prompt_ids):
    x_ = prompt_ids[domain][0]
    policy = default_policy(drafter, target)
    r = generate(target, policy, x_, max_new_tokens, stop_token_ids=stops)
    assert r.tokens == greedy[domain][0]
    # a Choice per step that had room for a draft
    choices = policy.chosen
    labels = [f"B={c.block_size}" if c.kind in ("plain", "chain") else str(c) for c in choices]
    seen |= {c.kind for c in choices}
    steps_ = range(1, len(choices) + 1)
    ax.bar(steps_, r.acceptance_lengths[: len(choices)],
           color=[KIND_COLORS[c.kind] for c in choices])
    ax.set_xlabel("step"); ax.set_ylabel("tokens committed")
    ax.set_title(f"{domain}: tau {r.tau:.2f} over {len(choices)} steps")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    counts = {c: labels.count(c) for c in dict.fromkeys(labels)}
    print(f"{domain}: " + ", ".join(f"{c} x{k}" for c, k in counts.items()) + f"; tau {r.tau:.2f}")
    plain = sum(c.kind == "plain" for c in choices)
    print(f"{domain}: {plain} of {len(choices)} steps were plain decoding (B=1)")
print(f"the prior: acceptance {policy.options.prior}, a tree expected to commit "
      f"{policy.options.tree_prior_gain}x the chain's tokens")

kinds = [k for k in KIND_COLORS if k in seen]                  # the legend lists the kinds chosen
fig.legend([plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS[k]) for k in kinds],
           [KIND_LABELS[k] for k in kinds], loc="upper center", bbox_to_anchor=(0.5, 0.02),
           ncol=min(3, len(kinds)), frameon=False)
fig.suptitle("What the cost-aware policy chose, step by step\n"
             "(the kinds and sizes are printed above)")
_ = save_figure(fig, "09_policy_choices")

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# The first step is decided by the policy's prior (an optimistic acceptance, and a tree expected
# to commit `tree_prior_gain` times the chain's tokens, printed above); after that the observed
# steps speak. Where drafts are rarely accepted it can shorten the block, down to plain decoding
# (B = 1), and then now and then tries a draft again, since its counts decay back towards the
# prior. The policy's cell (before the run time) prints how many steps of each prompt were plain
# decoding: it can be none, on prompts whose drafts are accepted often enough. Exercise 4 finds
# prompts where it does.
#
# ## Summary
#
# * One drafter forward gives a distribution per block position; the chain keeps the argmaxes,
#   a tree keeps the N most likely paths (best-first by the product of probabilities).
# * One target forward verifies the whole tree: an ancestor-only attention mask and positions by
#   depth make every node's logits those of its own path. Greedy acceptance follows the target's
#   argmax down the tree; the cache keeps the accepted path only. The output is the target's.
# * A tree raises tau, but its verify is N + 1 tokens wide: on a CPU that costs real time, on a GPU
#   much less. Measure both sides before choosing; the cost-aware policy does it per step.
# * At temperature > 0 the same walk samples the target's token at each node instead of taking
#   its argmax: still lossless, because the drafts are deterministic (section 4b).
#
# ## Review questions
#
# 1. Why can a path never score higher than its parent, and why does that make the N best paths a tree?
# 2. In the best-first search, what are the two successors of a popped path?
# 3. Which keys may a tree node attend to in the verify, and what position id does it get?
# 4. After a tree verify, why must the cache entries of the accepted path be moved before the next step writes?
# 5. Why is a tree's verify more expensive on this CPU than on a GPU, relative to one token?
# 6. Why does the policy's first step say little about the prompt, and how does it come back from plain decoding?
# 7. At temperature > 0, why may the walk follow a child only when the target's *sample* at its parent is that child's token?
#
# ## Exercises
#
# Each exercise has a self-check from `dflash_lite/exercises/ch09.py`: leave the answer at `None`
# and it says so; a wrong answer raises an `AssertionError` with a hint. Worked solutions:
# `notebooks/solutions/09_draft_trees.py`. Difficulty: ★ minutes, ★★ an hour, ★★★ a project.
#
# **1. ★ Visible keys.** In the tree verify of section 3 (context of `P` positions, the `tree`
# drawn above), how many keys may the deepest node attend to?

# %% nbgrader={"grade": false, "grade_id": "ch09_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises import ch09
### BEGIN SOLUTION
answer_1 = None   # an int
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch09_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch09.check_visible_keys(answer_1, tree, P), 1)

# %% [markdown]
# **2. ★ Break-even.** With this machine's costs (`t`, `t_draft` of section 5), how many times the
# chain's tau must a 32-node tree commit just to match the chain's speed? (Solve
# `tau_tree / (t(33) + t_draft) = tau_chain / (t(16) + t_draft)` for `tau_tree / tau_chain`.)

# %% nbgrader={"grade": false, "grade_id": "ch09_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_2 = None   # a float
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch09_exercise_2_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch09.check_break_even_gain(answer_2, t, t_draft, tree_size=32, block_size=B), 1)

# %% [markdown]
# **3. ★★ Sharper or flatter.** The tree's shape follows the drafter's confidence. Divide the
# drafter's logits of section 2 (`draft_logits`) by a temperature of 0.5 (sharper) before the log-softmax, build a
# 32-node tree from them with `build_tree`, and give its greatest depth. Compare it with the same
# tree at temperature 1 and 2: when does a tree go deep, and when wide?

# %% nbgrader={"grade": false, "grade_id": "ch09_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_3 = None   # an int: the greatest depth at temperature 0.5
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch09_exercise_3_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch09.check_sharper_tree(answer_3, draft_logits, root), 2)

# %% [markdown]
# **4. ★★ Back to plain decoding.** Find a prompt of your own on which the default policy falls
# back to plain decoding (block size 1) at least once in 48 new tokens. Run
# `policy = default_policy(drafter, target)` and `generate(target, policy, ids, 48, stop_token_ids=stops)`
# on it; the check reads `policy.chosen`. What kind of text makes the drafter's guesses fail?
# (The policy weighs acceptance against this machine's measured step times, so a prompt on the
# edge can fall back on one run and not the next: pick one far from math and code.)

# %% nbgrader={"grade": false, "grade_id": "ch09_exercise_4", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_4 = None   # the policy object after your run
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch09_exercise_4_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch09.check_falls_back(answer_4), 2)

# %% [markdown]
# **5. ★ How much does the branch add?** A prompt-lookup branch that starts like one of the
# tree's paths shares those nodes. Without calling `add_branch`, how many new nodes does the
# branch `tree.chain[:2] + [int(root)] * 3` add to `tree` (section 2's tree)?

# %% nbgrader={"grade": false, "grade_id": "ch09_exercise_5", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_5 = None   # the number of new nodes
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch09_exercise_5_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch09.check_branch_nodes(answer_5, tree, tree.chain[:2] + [int(root)] * 3), 1)
