"""What the cost-aware policy expects a draft to commit (docs/method.md#the-cost-aware-policy):
:class:`AcceptanceEstimate`, from decayed counts of what the target accepted, and
:func:`chain_accepted`, what a chain would have done in a step that verified something else."""
from __future__ import annotations

from dataclasses import dataclass, field


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def chain_accepted(path: list[int], chain: list[int], held: int,
                   next_token: int | None = None) -> tuple[int, int]:
    """(drafts accepted, drafts judged) of a chain, read off a step that verified something else
    and held the chain's first ``held`` tokens: accepted ``path``, then the target's token after
    it (``next_token``; None: not judged). Sampled, after a tree step whose other branches were
    rejected, that token comes from what is left: the read is a little optimistic."""
    agree = _common_prefix(path, chain)
    if agree < len(path) or agree < min(held, len(chain)):
        return agree, agree + 1
    if next_token is not None and agree < len(chain):
        return agree + (chain[agree] == next_token), agree + 1
    return agree, agree


@dataclass
class AcceptanceEstimate:
    """Decayed counts, and a Beta prior the estimates start from and drift back to as they decay."""
    depth: int                                  # draft positions 1..depth
    tree_sizes: tuple[int, ...] = ()
    prior: float = 0.7                          # the Beta prior, of weight prior_weight
    prior_weight: float = 3.0
    accepted: float = 0.0                       # drafts the target accepted and judged, pooled
    judged: float = 0.0
    accepted_at: list[float] = field(default_factory=list)          # the same per draft position
    judged_at: list[float] = field(default_factory=list)
    trees: dict[tuple, list[float]] = field(default_factory=dict)  # (hybrid, size): [tokens, steps]
    ngram: AcceptanceEstimate | None = None     # prompt lookup's chain estimate (None: not offered)
    _expected: list[float] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.accepted_at = self.accepted_at or [0.0] * self.depth
        self.judged_at = self.judged_at or [0.0] * self.depth
        self.trees = {(h, n): self.trees.get((h, n), [0.0, 0.0]) for h in (False, True)
                      for n in self.tree_sizes}

    @classmethod
    def for_options(cls, options) -> AcceptanceEstimate:
        """A fresh estimate of every option a :class:`~dflash_lite.decoding.choice.PolicyOptions`
        offers (the chain's depth: ``max_block_size - 1``)."""
        lookup = (cls(options.ngram_drafts, (), options.prior, options.prior_weight)
                  if options.ngram_drafts else None)
        return cls(options.max_block_size - 1, options.tree_sizes, options.prior,
                   options.prior_weight, ngram=lookup)

    def decay(self, factor: float, lookup_factor: float | None = None) -> None:
        """Keep ``factor`` of every count, prompt lookup's ``lookup_factor`` (None: the same)."""
        self._expected = None
        self.accepted *= factor
        self.judged *= factor
        self.accepted_at = [a * factor for a in self.accepted_at]
        self.judged_at = [t * factor for t in self.judged_at]
        for sums in self.trees.values():            # decayed sums of tree steps
            sums[:] = [x * factor for x in sums]
        if self.ngram is not None:
            self.ngram.decay(factor if lookup_factor is None else lookup_factor)

    def observe_chain(self, accepted: int, judged: int) -> None:
        """Drafts 1..``accepted`` were accepted, of the first ``judged`` the target judged."""
        self._expected = None
        self.accepted += accepted
        self.judged += judged
        for k in range(min(judged, self.depth)):
            self.accepted_at[k] += k < accepted
            self.judged_at[k] += 1

    def observe_tree(self, tree_size: int, tokens: int, hybrid: bool = False) -> None:
        """A tree step (hybrid with ``hybrid``) of ``tree_size`` nodes committed ``tokens``."""
        sums = self.trees[hybrid, tree_size]
        sums[:] = sums[0] + tokens, sums[1] + 1

    def acceptance(self) -> float:
        """P(a draft is accepted | the drafts before it were), pooled over positions, with prior."""
        return (self.accepted + self.prior_weight * self.prior) / (self.judged + self.prior_weight)

    def acceptance_by_position(self) -> list[float]:
        """The same per draft position k, with the pooled estimate as its prior: positions seen
        often speak for themselves (acceptance comes in runs, so deep positions, once reached, are
        accepted more often than early ones), positions seen rarely follow the pool."""
        pooled, w = self.acceptance(), self.prior_weight
        return [(a + w * pooled) / (t + w) for a, t in zip(self.accepted_at, self.judged_at)]

    def expected_tokens(self) -> list[float]:
        """Tokens a chain step of b tokens is expected to commit, bonus included, b = 1..depth+1:
        ``1 + a_1 + a_1 a_2 + ... + a_1 ... a_(b-1)``; computed once until the counts change."""
        if self._expected is None:
            expected, survive = [1.0], 1.0
            for a in self.acceptance_by_position():
                survive *= a
                expected.append(expected[-1] + survive)
            self._expected = expected
        return list(self._expected)

    def _mean(self, tokens: float, steps: float, prior: float) -> float:
        return (tokens + self.prior_weight * prior) / (steps + self.prior_weight)

    def expected_tree_tokens(self, tree_size: int, gain: float, depth: int | None = None) -> float:
        """Observed mean of tree steps, pulled towards a prior of ``gain`` x the chain's estimate at
        ``depth`` drafts (None: the full chain)."""
        prior = gain * self.expected_tokens()[self.depth if depth is None else depth]
        return self._mean(*self.trees[False, tree_size], prior)

    def expected_hybrid_tokens(self, tree_size: int, gain: float, ngram_drafts: int,
                               depth: int | None = None) -> float:
        """Observed mean of hybrid tree steps, pulled towards a prior: the two drafts as independent
        tries at every depth j, ``1 + sum_j [1 - (1 - t_j)(1 - l_j)]``, with ``l_j`` prompt lookup's
        chance to reach depth j and ``t_j`` the chain's, scaled to the tree's estimate."""
        chain = self.expected_tokens()[: (self.depth if depth is None else depth) + 1]
        tree = self.expected_tree_tokens(tree_size, gain, depth)
        scale = (tree - 1) / (chain[-1] - 1) if chain[-1] > 1 else 0.0
        lookup = (self.ngram.expected_tokens()[: ngram_drafts + 1] if self.ngram is not None
                  else [1.0])
        reach_tree = [min(1.0, scale * (b - a)) for a, b in zip(chain, chain[1:])]  # P(reach j)
        reach_lookup = [b - a for a, b in zip(lookup, lookup[1:])]
        reach_lookup += [0.0] * (len(reach_tree) - len(reach_lookup))
        prior = 1 + sum(1 - (1 - t) * (1 - m) for t, m in zip(reach_tree, reach_lookup))
        return self._mean(*self.trees[True, tree_size], prior)
