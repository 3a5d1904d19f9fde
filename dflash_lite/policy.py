"""A cost-aware block size: each step drafts whatever maximises expected tokens per second.

The cost model the benchmark checks (:func:`dflash_lite.benchmark.predicted_speedup`,
``speedup = tau * t_target(1) / (t_target(B) + t_draft(B))``) says when a block of B pays: the verify of B tokens and the drafter forward must cost less than
the tokens they bring. Both sides change from prompt to prompt, so the block size is chosen per
step, as real integrations' depth controllers do:

* **costs**: ``t_target(b)`` (one target forward over b tokens, with the cache) and ``t_draft(b)``
  (one drafter forward over a block of b), measured once per target, drafter, device and dtype
  at the first prompt and cached in memory (:func:`step_costs`); a least-squares line through
  the measured sizes gives every other size.
* **acceptance**: the probability ``a_k`` that draft k is accepted given that the drafts before it
  were, counted from the steps so far with exponential forgetting: pooled over positions with a
  Beta prior, then per position with the pool as prior. A step of b - 1 drafts is then expected
  to commit ``1 + a_1 + a_1 a_2 + ... + a_1 ... a_(b-1)`` tokens.
* **choice**: the b in 1..B (b = 1 is plain decoding: no draft, one target token) with the best
  expected tokens per second; or a draft tree (:mod:`dflash_lite.tree`) of N nodes, whose
  expected length starts at ``tree_prior_gain`` x the full chain's and is then learned from the
  tree steps it takes. A tree step also updates the chain's estimates: the accepted path follows
  the chain of argmaxes as far as the chain would have been accepted (:func:`chain_accepted`).
  The default (:func:`default_policy`) offers a 16-node tree, greedy or sampled: its verify
  is as wide as the chain's at B = 16 (17 tokens against 16), so it costs about the same and holds
  more of the likely paths. On the probe split it beat the 32-node tree (math and code). The
  gain of 1.3 is the tree's tau over the chain's as measured there.

**Coming back from 1.** A plain step observes nothing, but the counts keep decaying each step, so
the estimates drift back to the optimistic prior and a draft is tried again after a number of
plain steps that grows with how clearly drafting lost. It is lossless at any temperature: the
choice depends only on tokens already committed, and each step's acceptance rule is exact.
"""
from __future__ import annotations

import statistics

import torch

from .benchmark import interleaved
from .decode import DFlashProposer, crop_cache, new_cache, verify
from .drafter import DrafterCache
from .tree import draft_tree

_COSTS: dict = {}                         # (target, drafter, device, dtype) -> StepCosts, for this process


class StepCosts:
    """Measured seconds of one target forward over b tokens and one drafter forward over a block of b.

    Between and beyond the measured sizes, a straight line fitted to them (least squares, slope
    >= 0) gives the cost, so that timing noise at one size cannot make it look cheap. One target
    token (b = 1) is its own point: a single-token forward takes a lighter path (no causal mask).
    """

    def __init__(self, t_target: dict[int, float], t_draft: dict[int, float]):
        self.t_target, self.t_draft = dict(sorted(t_target.items())), dict(sorted(t_draft.items()))
        self._target_line = self._fit({b: t for b, t in self.t_target.items() if b > 1} or self.t_target)
        self._draft_line = self._fit(self.t_draft)

    @staticmethod
    def _fit(table: dict[int, float]) -> tuple[float, float]:
        """(intercept, slope) of the least-squares line through (b, t), slope clamped at >= 0."""
        n = len(table)
        mean_b, mean_t = sum(table) / n, sum(table.values()) / n
        spread = sum((b - mean_b) ** 2 for b in table)
        slope = max(0.0, sum((b - mean_b) * (t - mean_t) for b, t in table.items()) / spread) if spread else 0.0
        return mean_t - slope * mean_b, slope

    def target(self, b: int) -> float:
        if b == 1 and 1 in self.t_target:
            return self.t_target[1]
        intercept, slope = self._target_line
        return intercept + slope * b

    def draft(self, b: int) -> float:
        if b <= 1:
            return 0.0
        intercept, slope = self._draft_line
        return intercept + slope * b


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
    timed = interleaved(fns, repeats, warmup=1, device=device)            # the one interleaved timer
    medians = {name: statistics.median(t for t, _ in calls) for name, calls in timed.items()}
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


def chain_accepted(path: list[int], chain: list[int], held: int) -> tuple[int, int]:
    """What the chain of argmaxes would have done, read off a tree step: (drafts accepted, drafts
    judged). The tree holds the chain's first ``held`` drafts, and the accepted ``path`` follows
    the chain as long as they agree. Where the path leaves it, or ends on it with the chain's next
    draft in the tree, that draft was wrong (judged, rejected); where the path ends on it beyond
    what the tree held, the next draft is unknown (not judged)."""
    agree = next((k for k, (a, b) in enumerate(zip(path, chain)) if a != b), min(len(path), len(chain)))
    return agree, agree + 1 if agree < len(path) or agree < min(held, len(chain)) else agree


class CostAwareProposer(DFlashProposer):
    """DFlash with the block size (1 = plain decoding .. ``max_block_size``), or a draft tree of one
    of ``tree_sizes`` nodes, chosen each step for the most expected tokens per second.

    ``costs``: a :class:`StepCosts` (measured at the first prompt when None). ``decay``: how much
    of the acceptance counts a drafting step keeps; ``idle_decay``: the same for a plain step (how
    soon drafting is tried again after falling to 1: closer to 1 retries later). ``prior`` and
    ``prior_weight``: the Beta prior the estimates start from and decay back to.
    """

    def __init__(self, drafter, target, max_block_size: int | None = None, tree_sizes=(), costs: StepCosts | None = None,
                 decay: float = 0.9, idle_decay: float = 0.98, prior: float = 0.7, prior_weight: float = 3.0,
                 tree_prior_gain: float = 1.3):
        super().__init__(drafter, target, max_block_size)
        if not (0 < decay < 1 and 0 < idle_decay < 1 and 0 < prior < 1) or prior_weight <= 0 or tree_prior_gain <= 0:
            raise ValueError("cost-aware policy needs 0 < decay, idle_decay, prior < 1, prior_weight > 0 "
                             "and tree_prior_gain > 0")
        if any(n < 1 for n in tree_sizes):
            raise ValueError(f"tree sizes must be >= 1, got {tuple(tree_sizes)}")
        self.max_block_size, self.tree_sizes, self.costs = self.block_size, tuple(sorted(tree_sizes)), costs
        self.decay, self.idle_decay, self.prior, self.prior_weight = decay, idle_decay, prior, prior_weight
        self.tree_prior_gain = tree_prior_gain

    def start(self, prompt_ids, target_hidden) -> None:
        super().start(prompt_ids, target_hidden)
        if self.costs is None:
            self.costs = step_costs(self.target, self.drafter, prompt_ids, self.max_block_size, self.tree_sizes)
        c = self.costs                   # seconds of one step of each kind, looked up once
        self.step_seconds = [0.0] + [c.target(b) + c.draft(b) for b in range(1, self.max_block_size + 1)]
        self.tree_seconds = {n: c.target(n + 1) + c.draft(self.max_block_size) for n in self.tree_sizes}
        self.accepted_count = self.judged_count = 0.0             # decayed counts of chain drafts, pooled
        depth = self.max_block_size - 1                            # ... and per draft position 1..depth
        self.accepted_at, self.judged_at = [0.0] * depth, [0.0] * depth
        self.tree_tokens = dict.fromkeys(self.tree_sizes, 0.0)                   # decayed sums per tree size
        self.tree_steps = dict.fromkeys(self.tree_sizes, 0.0)
        self.pending = True                        # the prompt's features are not in the drafter's cache yet
        self.waiting = [target_hidden]             # features of positions no drafter forward has seen
        self.chosen: list[int | str] = []          # per step: a block size, or "tree N"
        self._choose()

    # -------------------------------------------------------------- the estimates
    def acceptance(self) -> float:
        """Estimated P(a draft is accepted | the drafts before it were), pooled over block positions:
        accepted drafts over drafts the target judged, with the Beta prior."""
        return (self.accepted_count + self.prior_weight * self.prior) / (self.judged_count + self.prior_weight)

    def acceptance_by_position(self) -> list[float]:
        """The same per draft position k, with the pooled estimate as its prior: positions seen often
        speak for themselves (acceptance comes in runs, so deep positions, once reached, are
        accepted more often than early ones), positions seen rarely follow the pool."""
        pooled, w = self.acceptance(), self.prior_weight
        return [(a + w * pooled) / (t + w) for a, t in zip(self.accepted_at, self.judged_at)]

    def expected_tokens(self, block_size: int) -> float:
        """Tokens a chain step with ``block_size - 1`` drafts is expected to commit, bonus included:
        ``1 + a_1 + a_1 a_2 + ... + a_1 ... a_(block_size-1)``."""
        return self._expected_by_size()[block_size - 1]

    def _expected_by_size(self) -> list[float]:
        expected, survive = [1.0], 1.0
        for a in self.acceptance_by_position():
            survive *= a
            expected.append(expected[-1] + survive)
        return expected                                                     # [E(1), E(2), ..., E(max)]

    def expected_tree_tokens(self, tree_size: int) -> float:
        """Observed mean of tree steps, pulled towards a prior of the full chain's estimate x a gain."""
        prior = self.tree_prior_gain * self.expected_tokens(self.max_block_size)
        return (self.tree_tokens[tree_size] + self.prior_weight * prior) / (self.tree_steps[tree_size] + self.prior_weight)

    def _choose(self) -> None:
        rates = [e / t for e, t in zip(self._expected_by_size(), self.step_seconds[1:])]
        best_rate = max(rates)
        self.block_size, self.tree_size = rates.index(best_rate) + 1, None
        for n in self.tree_sizes:        # a tree: one drafter forward at full depth, a verify of N+1
            rate = self.expected_tree_tokens(n) / self.tree_seconds[n]
            if rate > best_rate:
                self.block_size, self.tree_size, best_rate = self.max_block_size, n, rate
        self.chosen.append(f"tree {self.tree_size}" if self.tree_size else self.block_size)

    # -------------------------------------------------------------- the proposer calls
    def _catch_up(self) -> None:
        """The drafter's next forward takes in every position decoded since its last one."""
        if len(self.waiting) > 1:
            self.new_context = torch.cat(self.waiting, dim=1)
        self.pending, self.waiting = False, []

    def propose(self, last_token, k):
        self._catch_up()
        if self.tree_size:
            self.tree = draft_tree(self, last_token, k, self.tree_size)    # read again in accepted()
            return self.tree
        return super().propose(last_token, k)

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        if self.pending:             # no draft this step: the features wait for the next drafter forward
            self.waiting.append(target_hidden[:, : n + 1])
        else:
            super().accepted(block, n, position, target_hidden)
            self.waiting = [self.new_context]
        decay = self.idle_decay if self.pending else self.decay
        self.pending = True
        self.accepted_count *= decay
        self.judged_count *= decay
        self.accepted_at = [a * decay for a in self.accepted_at]
        self.judged_at = [t * decay for t in self.judged_at]
        for size in self.tree_sizes:
            self.tree_tokens[size] *= decay
            self.tree_steps[size] *= decay
        if self.tree_size:
            self.tree_tokens[self.tree_size] += n + 1
            self.tree_steps[self.tree_size] += 1
            chain = self.tree.chain                   # what the chain would have done in the same step
            accepted, judged = chain_accepted(block[0, 1: n + 1].tolist(), chain, self.tree.path_length(chain))
        else:                                         # drafts 1..n accepted; draft n+1 (if there was one) rejected
            accepted, judged = n, min(n + 1, block.shape[1] - 1)
        self.accepted_count += accepted
        self.judged_count += judged
        for k in range(judged):
            self.accepted_at[k] += k < accepted
            self.judged_at[k] += 1
        self._choose()


DEFAULT_TREE_SIZES = (16,)      # the tree the default may choose; measured on the probe split


def default_policy(drafter, target) -> CostAwareProposer:
    """What ``Engine.generate``, ``demo`` and ``bench``'s headline row run: the cost-aware block size,
    which may also choose a draft tree of :data:`DEFAULT_TREE_SIZES` nodes, greedy or sampled
    (both acceptance rules are lossless, :mod:`dflash_lite.tree`)."""
    return CostAwareProposer(drafter, target, tree_sizes=DEFAULT_TREE_SIZES)


# ----------------------------------------------------------------------------- the source article's rule
class AdaptiveDFlashProposer(DFlashProposer):
    """DFlash with the block size chosen per step from recent acceptance (the source article's
    section 5.3): the smallest of ``sizes`` that is at least ``headroom`` x the mean acceptance
    length of the last ``window`` steps. Low acceptance -> short, cheap blocks; high -> long ones.
    An option only: notebook 06 measures it against fixed sizes."""

    def __init__(self, drafter, target, sizes=(4, 8, 16), window: int = 4, headroom: float = 2.0):
        sizes = sorted(set(sizes))
        super().__init__(drafter, target, sizes[-1])
        if sizes[0] < 2 or window < 1 or headroom <= 0:
            raise ValueError("adaptive block sizes must be >= 2, with window >= 1 and headroom > 0")
        self.sizes, self.window, self.headroom = sizes, window, headroom

    def start(self, prompt_ids, target_hidden) -> None:
        super().start(prompt_ids, target_hidden)
        self.recent, self.block_size, self.chosen = [], self.sizes[-1], []

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        super().accepted(block, n, position, target_hidden)
        self.chosen.append(block.shape[1])
        self.recent = (self.recent + [n + 1])[-self.window:]
        want = self.headroom * sum(self.recent) / len(self.recent)
        self.block_size = next((b for b in self.sizes if b >= want), self.sizes[-1])
