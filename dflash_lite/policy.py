"""A cost-aware block size: each step drafts whatever maximises expected tokens per second.

The cost model the benchmark checks (:func:`dflash_lite.costs.predicted_speedup`,
``speedup = tau * t_target(1) / (t_target(B) + t_draft(B))``) says when a block of B pays: the
verify of B tokens and the drafter forward must cost less than the tokens they bring. Both sides change from prompt to prompt, so the block size is chosen per
step, as real integrations' depth controllers do:

* **costs**: ``t_target(b)`` (one target forward over b tokens, with the cache) and ``t_draft(b)``
  (one drafter forward over a block of b), measured at the first prompt by the owner of the
  target (:class:`dflash_lite.costs.StepCosts`; an ``Engine`` measures once and keeps them); a
  least-squares line through the measured sizes gives every other size.
* **acceptance** (:class:`AcceptanceEstimate`): the probability ``a_k`` that draft k is accepted given that the drafts before it
  were, counted from the steps so far with exponential forgetting: pooled over positions with a
  Beta prior, then per position with the pool as prior. A step of b - 1 drafts is then expected
  to commit ``1 + a_1 + a_1 a_2 + ... + a_1 ... a_(b-1)`` tokens.
* **choice** (:func:`choose`, a :class:`Choice`): the b in 1..B (b = 1 is plain decoding: no draft, one target token) with the best
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

from dataclasses import dataclass, field, replace

import torch

from .costs import StepCosts, step_costs
from .decode import DFlashProposer
from .tree import draft_tree


def chain_accepted(path: list[int], chain: list[int], held: int) -> tuple[int, int]:
    """What the chain of argmaxes would have done, read off a tree step: (drafts accepted, drafts
    judged). The tree holds the chain's first ``held`` drafts, and the accepted ``path`` follows
    the chain as long as they agree. Where the path leaves it, or ends on it with the chain's next
    draft in the tree, that draft was wrong (judged, rejected); where the path ends on it beyond
    what the tree held, the next draft is unknown (not judged)."""
    agree = next((k for k, (a, b) in enumerate(zip(path, chain)) if a != b), min(len(path), len(chain)))
    return agree, agree + 1 if agree < len(path) or agree < min(held, len(chain)) else agree


@dataclass(frozen=True)
class PolicyOptions:
    """How the cost-aware policy chooses. ``max_block_size``: the longest chain (None: the drafter's
    block size); ``tree_sizes``: the draft trees it may choose; ``decay``: how much of the
    acceptance counts a drafting step keeps; ``idle_decay``: the same for a plain step (closer to 1
    retries drafting later); ``prior``, ``prior_weight``: the Beta prior the estimates start from
    and decay back to; ``tree_prior_gain``: a tree's expected length before it has been tried, as a
    multiple of the full chain's."""
    max_block_size: int | None = None
    tree_sizes: tuple[int, ...] = ()
    decay: float = 0.9
    idle_decay: float = 0.98
    prior: float = 0.7
    prior_weight: float = 3.0
    tree_prior_gain: float = 1.3

    def __post_init__(self):
        if not (0 < self.decay < 1 and 0 < self.idle_decay < 1 and 0 < self.prior < 1) \
                or self.prior_weight <= 0 or self.tree_prior_gain <= 0:
            raise ValueError("cost-aware policy needs 0 < decay, idle_decay, prior < 1, prior_weight > 0 "
                             "and tree_prior_gain > 0")
        if any(n < 1 for n in self.tree_sizes):
            raise ValueError(f"tree sizes must be >= 1, got {tuple(self.tree_sizes)}")
        object.__setattr__(self, "tree_sizes", tuple(sorted(self.tree_sizes)))


@dataclass(frozen=True)
class Choice:
    """One step's choice: a chain of ``block_size`` tokens per target forward (1: plain decoding),
    or a draft tree of ``tree_size`` nodes drafted at the full block."""
    block_size: int
    tree_size: int | None = None

    def __str__(self) -> str:
        return f"tree {self.tree_size}" if self.tree_size else str(self.block_size)


@dataclass
class AcceptanceEstimate:
    """Decayed counts of drafts the target accepted and judged, pooled and per draft position
    1..``depth``, and of tokens per tree step for each tree size; with a Beta prior (``prior``,
    ``prior_weight``) that the estimates start from and drift back to as the counts decay."""
    depth: int
    tree_sizes: tuple[int, ...] = ()
    prior: float = 0.7
    prior_weight: float = 3.0
    accepted: float = 0.0
    judged: float = 0.0
    accepted_at: list[float] = field(default_factory=list)
    judged_at: list[float] = field(default_factory=list)
    tree_tokens: dict[int, float] = field(default_factory=dict)     # decayed sums per tree size
    tree_steps: dict[int, float] = field(default_factory=dict)

    def __post_init__(self):
        self.accepted_at = self.accepted_at or [0.0] * self.depth
        self.judged_at = self.judged_at or [0.0] * self.depth
        self.tree_tokens = self.tree_tokens or dict.fromkeys(self.tree_sizes, 0.0)
        self.tree_steps = self.tree_steps or dict.fromkeys(self.tree_sizes, 0.0)

    def decay(self, factor: float) -> None:
        self.accepted, self.judged = self.accepted * factor, self.judged * factor
        self.accepted_at = [a * factor for a in self.accepted_at]
        self.judged_at = [t * factor for t in self.judged_at]
        for size in self.tree_sizes:
            self.tree_tokens[size] *= factor
            self.tree_steps[size] *= factor

    def observe_chain(self, accepted: int, judged: int) -> None:
        """Drafts 1..``accepted`` were accepted, of the first ``judged`` the target judged."""
        self.accepted += accepted
        self.judged += judged
        for k in range(judged):
            self.accepted_at[k] += k < accepted
            self.judged_at[k] += 1

    def observe_tree(self, tree_size: int, tokens: int) -> None:
        self.tree_tokens[tree_size] += tokens
        self.tree_steps[tree_size] += 1

    def acceptance(self) -> float:
        """P(a draft is accepted | the drafts before it were), pooled over positions, with the prior."""
        return (self.accepted + self.prior_weight * self.prior) / (self.judged + self.prior_weight)

    def acceptance_by_position(self) -> list[float]:
        """The same per draft position k, with the pooled estimate as its prior: positions seen often
        speak for themselves (acceptance comes in runs, so deep positions, once reached, are
        accepted more often than early ones), positions seen rarely follow the pool."""
        pooled, w = self.acceptance(), self.prior_weight
        return [(a + w * pooled) / (t + w) for a, t in zip(self.accepted_at, self.judged_at)]

    def expected_tokens(self) -> list[float]:
        """Tokens a chain step of b tokens is expected to commit, bonus included, for b = 1..depth+1:
        ``1 + a_1 + a_1 a_2 + ... + a_1 ... a_(b-1)``."""
        expected, survive = [1.0], 1.0
        for a in self.acceptance_by_position():
            survive *= a
            expected.append(expected[-1] + survive)
        return expected

    def expected_tree_tokens(self, tree_size: int, gain: float) -> float:
        """Observed mean of tree steps, pulled towards a prior of ``gain`` x the full chain's estimate."""
        prior = gain * self.expected_tokens()[-1]
        return (self.tree_tokens[tree_size] + self.prior_weight * prior) / (self.tree_steps[tree_size] + self.prior_weight)


def choose(estimate: AcceptanceEstimate, costs: StepCosts, options: PolicyOptions) -> Choice:
    """The chain length b in 1..B, or the tree, with the most expected tokens per second of step."""
    rates = [e / (costs.target(b) + costs.draft(b)) for b, e in enumerate(estimate.expected_tokens(), 1)]
    best_rate = max(rates)
    choice = Choice(rates.index(best_rate) + 1)
    full = len(rates)
    for n in options.tree_sizes:     # a tree: one drafter forward at full depth, a verify of N+1
        rate = estimate.expected_tree_tokens(n, options.tree_prior_gain) / (costs.target(n + 1) + costs.draft(full))
        if rate > best_rate:
            choice, best_rate = Choice(full, n), rate
    return choice


class CostAwareProposer(DFlashProposer):
    """DFlash with the block size (1 = plain decoding .. ``options.max_block_size``), or a draft
    tree of one of ``options.tree_sizes`` nodes, chosen each step by :func:`choose` for the most
    expected tokens per second. ``costs``: a :class:`StepCosts` (measured at the first prompt
    when None; the owner of the target keeps ``self.costs`` for the next proposer it builds)."""

    def __init__(self, drafter, target, options: PolicyOptions = PolicyOptions(), costs: StepCosts | None = None):
        super().__init__(drafter, target, options.max_block_size)
        self.options = replace(options, max_block_size=self.block_size)
        self.costs = costs

    @property
    def tree_sizes(self) -> tuple[int, ...]:
        return self.options.tree_sizes

    def start(self, prompt_ids, target_hidden) -> None:
        super().start(prompt_ids, target_hidden)
        o = self.options
        if self.costs is None:
            self.costs = step_costs(self.target, self.drafter, prompt_ids, o.max_block_size, o.tree_sizes)
        self.estimate = AcceptanceEstimate(o.max_block_size - 1, o.tree_sizes, o.prior, o.prior_weight)
        self.drafted = False                       # the prompt's features are not in the drafter's cache yet
        self.waiting = [target_hidden]             # features of positions no drafter forward has seen
        self.chosen: list[Choice] = []             # per step
        self._choose()

    def _choose(self) -> None:
        self.choice = choose(self.estimate, self.costs, self.options)
        self.block_size = self.choice.block_size
        self.chosen.append(self.choice)

    def propose(self, last_token, k):
        if len(self.waiting) > 1:                  # the drafter takes in every position decoded since its last forward
            self.new_context = torch.cat(self.waiting, dim=1)
        self.drafted, self.waiting = True, []
        if self.choice.tree_size:
            self.tree = draft_tree(self, last_token, k, self.choice.tree_size)    # read again in accepted()
            return self.tree
        return super().propose(last_token, k)

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        if self.drafted:
            super().accepted(block, n, position, target_hidden)
            self.waiting = [self.new_context]
        else:                        # no draft this step: the features wait for the next drafter forward
            self.waiting.append(target_hidden[:, : n + 1])
        self.estimate.decay(self.options.decay if self.drafted else self.options.idle_decay)
        if self.drafted and self.choice.tree_size:
            self.estimate.observe_tree(self.choice.tree_size, n + 1)
            chain = self.tree.chain                   # what the chain would have done in the same step
            self.estimate.observe_chain(*chain_accepted(block[0, 1: n + 1].tolist(), chain, self.tree.path_length(chain)))
        else:                                         # drafts 1..n accepted; draft n+1 (if there was one) rejected
            self.estimate.observe_chain(n, min(n + 1, block.shape[1] - 1))
        self.drafted = False
        self._choose()


DEFAULT_TREE_SIZES = (16,)      # the tree the default may choose; measured on the probe split


def default_policy(drafter, target, costs: StepCosts | None = None) -> CostAwareProposer:
    """What ``Engine.generate``, ``demo`` and ``bench``'s headline row run: the cost-aware block size,
    which may also choose a draft tree of :data:`DEFAULT_TREE_SIZES` nodes, greedy or sampled
    (both acceptance rules are lossless, :mod:`dflash_lite.tree`)."""
    return CostAwareProposer(drafter, target, PolicyOptions(tree_sizes=DEFAULT_TREE_SIZES), costs)


def default_costs(drafter, target, prompt_ids: torch.Tensor) -> StepCosts:
    """The step costs :func:`default_policy` needs, measured at ``prompt_ids``' context length."""
    return step_costs(target, drafter, prompt_ids, drafter.config.block_size, DEFAULT_TREE_SIZES)


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
