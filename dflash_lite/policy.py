"""A cost-aware block size: each step drafts whatever maximises expected tokens per second.

The paper's cost model (section 4, "speedup = tau * t_target(1) / (t_target(B) + t_draft(B))")
says when a block of B pays: the verify of B tokens and the drafter forward must cost less than
the tokens they bring. Both sides change from prompt to prompt, so the block size is chosen per
step, as real integrations' depth controllers do:

* **costs**: ``t_target(b)`` (one target forward over b tokens, with the cache) and ``t_draft(b)``
  (one drafter forward over a block of b), measured once per target, drafter, device and dtype
  at the first prompt and cached in memory (:func:`step_costs`); sizes between the measured ones
  are interpolated.
* **acceptance**: per block position k, the probability that draft k is accepted given that
  drafts 1..k-1 were, counted from the steps so far with exponential forgetting and a Beta prior.
  A chain of b drafts-plus-one is then expected to commit ``1 + sum_j prod_{k<=j} a_k`` tokens.
* **choice**: the b in 1..B (b = 1 is plain decoding: no draft, one target token) with the best
  expected tokens per second; optionally a draft tree (:mod:`dflash_lite.tree`) of N nodes,
  whose expected length is learned the same way from the tree steps it takes.

**Coming back from 1.** A plain step observes nothing, but the counts keep decaying each step, so
the estimates drift back to the optimistic prior and a draft is tried again after a number of
plain steps that grows with how clearly drafting lost. It is lossless at any temperature: the
choice depends only on tokens already committed, and each step's acceptance rule is exact.
"""
from __future__ import annotations

import statistics
import time

import torch

from .decode import DFlashProposer, crop_cache, new_cache, verify
from .drafter import DrafterCache

_COSTS: dict = {}                         # (target, drafter, device, dtype) -> StepCosts, for this process


class StepCosts:
    """Measured seconds of one target forward over b tokens and one drafter forward over a block of b."""

    def __init__(self, t_target: dict[int, float], t_draft: dict[int, float]):
        self.t_target, self.t_draft = self._monotone(t_target), self._monotone(t_draft)

    @staticmethod
    def _monotone(table: dict[int, float]) -> dict[int, float]:
        """A forward over more tokens never costs less: timing noise must not make a size look cheap."""
        out, most = {}, 0.0
        for b, t in sorted(table.items()):
            most = max(most, t)
            out[b] = most
        return out

    @staticmethod
    def _at(table: dict[int, float], b: int) -> float:
        """Linear interpolation between measured sizes (clamped slope beyond the largest)."""
        sizes = list(table)
        if b in table:
            return table[b]
        lo = max((s for s in sizes if s < b), default=sizes[0])
        hi = min((s for s in sizes if s > b), default=None)
        if hi is None:                                         # extrapolate from the last two sizes
            if len(sizes) < 2:
                return table[lo]
            lo, hi = sizes[-2], sizes[-1]
        return table[lo] + (table[hi] - table[lo]) * (b - lo) / (hi - lo)

    def target(self, b: int) -> float:
        return self._at(self.t_target, b)

    def draft(self, b: int) -> float:
        return 0.0 if b <= 1 else self._at(self.t_draft, b)


@torch.inference_mode()
def measure_step_costs(target, drafter, prompt_ids: torch.Tensor, target_sizes, draft_sizes,
                       repeats: int = 5) -> dict:
    """Median seconds of target forwards over b tokens (``target_sizes``) and drafter forwards over
    blocks of b (``draft_sizes``) at the prompt's context length, interleaved so that load drift hits
    all sizes alike. Returns ``{"t_target": {b: s}, "t_draft": {b: s}}``."""
    device = target.device
    ids = prompt_ids.to(device)
    length = ids.shape[1]
    layer_ids = drafter.config.target_layer_ids
    cache = new_cache(target)
    _, features = verify(target, ids, cache, layer_ids, logits_to_keep=1)
    dcache = DrafterCache(drafter.config.num_layers)
    mask_id = drafter.config.mask_token_id
    drafter.draft_logits(target, torch.full((1, 2), mask_id, device=device), features[:, :-1], 0, dcache)
    saved = (list(dcache.keys), list(dcache.values))

    def target_step(b):
        verify(target, ids[:, -1:].expand(1, b), cache, layer_ids)
        crop_cache(cache, length)

    def draft_step(b):
        drafter.draft_logits(target, torch.full((1, b), mask_id, device=device), features[:, -1:], length - 1, dcache)
        dcache.keys, dcache.values = list(saved[0]), list(saved[1])       # forget the new context again

    fns = {("target", b): (lambda b=b: target_step(b)) for b in sorted(set(target_sizes))}
    fns.update({("draft", b): (lambda b=b: draft_step(b)) for b in sorted(set(draft_sizes))})
    times = {key: [] for key in fns}
    for fn in fns.values():                                               # warm-up
        fn()
    for _ in range(repeats):
        for key, fn in fns.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[key].append(time.perf_counter() - t0)
    medians = {key: statistics.median(t) for key, t in times.items()}
    return {"t_target": {b: t for (kind, b), t in medians.items() if kind == "target"},
            "t_draft": {b: t for (kind, b), t in medians.items() if kind == "draft"}}


def step_costs(target, drafter, prompt_ids: torch.Tensor, max_block_size: int, tree_sizes=(),
               repeats: int = 7) -> StepCosts:
    """:func:`measure_step_costs` on a grid of sizes up to ``max_block_size`` (and N+1 for each tree
    size N), once per target, drafter, device and dtype in this process."""
    dtype = next(target.parameters()).dtype
    key = (id(target), id(drafter), str(target.device), str(dtype), max_block_size, tuple(sorted(tree_sizes)))
    if key not in _COSTS:
        grid = sorted({b for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) if b < max_block_size} | {max_block_size})
        measured = measure_step_costs(target, drafter, prompt_ids, set(grid) | {n + 1 for n in tree_sizes},
                                      [b for b in grid if b > 1], repeats)
        _COSTS[key] = StepCosts(measured["t_target"], measured["t_draft"])
    return _COSTS[key]


class CostAwareProposer(DFlashProposer):
    """DFlash with the block size (1 = plain decoding .. ``max_block_size``), or a draft tree of one
    of ``tree_sizes`` nodes, chosen each step for the most expected tokens per second.

    ``costs``: a :class:`StepCosts` (measured at the first prompt when None). ``decay``: how much
    of the acceptance counts each step keeps (lower forgets faster and retries drafting sooner
    after falling to 1). ``prior`` and ``prior_weight``: the Beta prior every per-position
    acceptance estimate starts from and decays back to. Trees are greedy only.
    """

    def __init__(self, drafter, target, max_block_size: int | None = None, tree_sizes=(), costs: StepCosts | None = None,
                 decay: float = 0.9, prior: float = 0.8, prior_weight: float = 1.0, tree_prior_gain: float = 1.1):
        super().__init__(drafter, target, max_block_size)
        if not 0 < decay < 1 or not 0 < prior < 1 or prior_weight <= 0 or tree_prior_gain <= 0:
            raise ValueError("cost-aware policy needs 0 < decay < 1, 0 < prior < 1, prior_weight > 0 "
                             "and tree_prior_gain > 0")
        if any(n < 1 for n in tree_sizes):
            raise ValueError(f"tree sizes must be >= 1, got {tuple(tree_sizes)}")
        self.max_block_size, self.tree_sizes, self.costs = self.block_size, tuple(sorted(tree_sizes)), costs
        self.decay, self.prior, self.prior_weight, self.tree_prior_gain = decay, prior, prior_weight, tree_prior_gain
        self.uses_trees = bool(self.tree_sizes)

    def start(self, prompt_ids, target_hidden) -> None:
        super().start(prompt_ids, target_hidden)
        if self.costs is None:
            self.costs = step_costs(self.target, self.drafter, prompt_ids, self.max_block_size, self.tree_sizes)
        depth = self.max_block_size - 1
        self.accepted_counts, self.tried_counts = [0.0] * depth, [0.0] * depth   # per draft position 1..depth
        self.tree_tokens = dict.fromkeys(self.tree_sizes, 0.0)                   # decayed sums per tree size
        self.tree_steps = dict.fromkeys(self.tree_sizes, 0.0)
        self.pending = True                        # the prompt's features are not in the drafter's cache yet
        self.chosen: list[int | str] = []          # per step: a block size, or "tree N"
        self._choose()

    # -------------------------------------------------------------- the estimates
    def acceptance(self) -> list[float]:
        """Per draft position k: estimated P(draft k accepted | drafts 1..k-1 accepted)."""
        w, p = self.prior_weight, self.prior
        return [(a + w * p) / (t + w) for a, t in zip(self.accepted_counts, self.tried_counts)]

    def expected_tokens(self, block_size: int) -> float:
        """Tokens a chain step with ``block_size - 1`` drafts is expected to commit (bonus included)."""
        expected, survive = 1.0, 1.0
        for a in self.acceptance()[: block_size - 1]:
            survive *= a
            expected += survive
        return expected

    def expected_tree_tokens(self, tree_size: int) -> float:
        """Observed mean of tree steps, pulled towards a prior of the full chain's estimate x a gain."""
        prior = self.tree_prior_gain * self.expected_tokens(self.max_block_size)
        return (self.tree_tokens[tree_size] + self.prior_weight * prior) / (self.tree_steps[tree_size] + self.prior_weight)

    def _choose(self) -> None:
        c = self.costs
        rates = {b: self.expected_tokens(b) / (c.target(b) + c.draft(b)) for b in range(1, self.max_block_size + 1)}
        self.block_size = max(rates, key=rates.get)
        self.tree_size, best_rate = None, rates[self.block_size]
        for n in self.tree_sizes:        # a tree: one drafter forward at full depth, a verify of N+1
            rate = self.expected_tree_tokens(n) / (c.target(n + 1) + c.draft(self.max_block_size))
            if rate > best_rate:
                self.block_size, self.tree_size, best_rate = self.max_block_size, n, rate
        self.chosen.append(f"tree {self.tree_size}" if self.tree_size else self.block_size)

    # -------------------------------------------------------------- the proposer calls
    def propose(self, last_token, k):
        self.pending = False
        return super().propose(last_token, k)

    def propose_tree(self, last_token, depth, tree_size=None):
        from .tree import DFlashTreeProposer
        self.pending = False
        return DFlashTreeProposer.propose_tree(self, last_token, depth, tree_size)

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        if self.pending:             # no draft this step: the features wait for the next drafter forward
            self.new_context = torch.cat([self.new_context, target_hidden[:, : n + 1]], dim=1)
        else:
            super().accepted(block, n, position, target_hidden)
        self.pending = True
        self.accepted_counts = [a * self.decay for a in self.accepted_counts]
        self.tried_counts = [t * self.decay for t in self.tried_counts]
        for size in self.tree_sizes:
            self.tree_tokens[size] *= self.decay
            self.tree_steps[size] *= self.decay
        if self.tree_size:
            self.tree_tokens[self.tree_size] += n + 1
            self.tree_steps[self.tree_size] += 1
        else:                        # drafts 1..n accepted; draft n+1 (if there was one) rejected
            drafted = block.shape[1] - 1
            for k in range(min(n + 1, drafted)):
                self.tried_counts[k] += 1
                self.accepted_counts[k] += k < n
        self._choose()
