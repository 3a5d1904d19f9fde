"""The cost-aware policy's choice (docs/method.md#the-cost-aware-policy): its options
(:class:`PolicyOptions`), one step's :class:`Choice`, what it costs (:func:`step_seconds`), and
:func:`choose`, the option with the most expected tokens per second, one for every row of a batch.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .costs import StepCosts
from .estimate import AcceptanceEstimate


@dataclass(frozen=True)
class PolicyOptions:
    """How the policy chooses; ``decay``, ``idle_decay``, ``request_decay``: the share of its
    counts an estimate keeps on a step that observed it, on one that did not, between requests."""
    max_block_size: int | None = None   # the longest chain (None: the drafter's block size)
    tree_sizes: tuple[int, ...] = ()    # the draft trees it may choose
    ngram_drafts: int = 0               # the most prompt-lookup drafts (0: no ngram, no hybrid)
    max_ngram: int = 3                  # prompt lookup matches up to this many tokens
    quiet_steps: int = 3                # at a batch, plain steps after a choice that nothing wins
    decay: float = 0.9
    idle_decay: float = 0.99            # closer to 1: a losing draft is retried later
    request_decay: float = 0.5
    # the Beta prior the estimates start from and decay back to, and its weight
    prior: float = 0.7
    prior_weight: float = 3.0
    tree_prior_gain: float = 1.3        # a tree's expected length, untried, x the full chain's

    def __post_init__(self):
        if not all(0 < x < 1 for x in (self.decay, self.idle_decay, self.prior)) \
                or not 0 < self.request_decay <= 1 or self.quiet_steps < 0 \
                or self.prior_weight <= 0 or self.tree_prior_gain <= 0:
            raise ValueError("cost-aware policy needs 0 < decay, idle_decay, prior < 1, 0 < "
                             "request_decay <= 1, prior_weight, tree_prior_gain > 0 and "
                             "quiet_steps >= 0")
        if any(n < 1 for n in self.tree_sizes) or self.ngram_drafts < 0 or self.max_ngram < 1:
            raise ValueError(f"tree sizes and max_ngram must be >= 1 and ngram_drafts >= 0, got "
                             f"{tuple(self.tree_sizes)}, {self.max_ngram}, {self.ngram_drafts}")
        object.__setattr__(self, "tree_sizes", tuple(sorted(self.tree_sizes)))


DRAFTER_KINDS = ("chain", "tree", "hybrid")     # the kinds of step that run the drafter


@dataclass(frozen=True)
class Choice:
    """One step's choice, of :func:`choose`."""
    block_size: int                 # a chain's tokens per forward (1: plain; lookup: ngram + 1)
    tree_size: int | None = None    # a draft tree's nodes, drafted at depth block_size - 1
    ngram: int = 0                  # prompt lookup's drafts (for a hybrid tree, its branch)

    @property
    def kind(self) -> str:
        """``plain``, ``chain``, ``tree``, ``ngram`` or ``hybrid``."""
        if self.tree_size:
            return "hybrid" if self.ngram else "tree"
        return "ngram" if self.ngram else "chain" if self.block_size > 1 else "plain"

    @property
    def uses_drafter(self) -> bool:
        return self.kind in DRAFTER_KINDS

    @property
    def verify_width(self) -> int:
        """Tokens in the step's target forward (for a hybrid tree an upper bound: shared nodes)."""
        return self.tree_size + 1 + self.ngram if self.tree_size else self.block_size

    def __str__(self) -> str:
        return {"tree": f"tree {self.tree_size}", "ngram": f"ngram {self.ngram}",
                "hybrid": f"tree {self.tree_size} + ngram {self.ngram}"}.get(
                    self.kind, str(self.block_size))


PLAIN = Choice(1)                 # plain decoding: no draft, one target token


def step_seconds(choice: Choice, costs: StepCosts, context_length: int | None = None,
                 new_context: int = 1) -> float:
    """What the cost model says ``choice``'s step costs: the verify, plus a drafter forward over the
    full block, taking in ``new_context`` positions, if the drafter runs."""
    return _seconds(costs, choice.kind, choice.verify_width, choice.block_size, context_length,
                    new_context)


def _seconds(costs: StepCosts, kind: str, width: int, block_size: int, context: int | None,
             new_context: int) -> float:
    """:func:`step_seconds` of a step of ``kind`` verifying ``width`` tokens."""
    drafting = costs.draft(block_size, context, new_context) if kind in DRAFTER_KINDS else 0.0
    return (costs.target(width, context) + drafting) * costs.correction(kind)


LEAD = 8    # tokens past the batch's last row that a row's tokens still count for (choice.counted)


def counted(ahead: Sequence[float], tokens: Sequence[float], lead: float | None = None) -> float:
    """What a step's committed ``tokens`` (per row) are worth to a batch that nothing joins
    (docs/method.md#batches). ``ahead``: per row, the tokens it has committed beyond the
    least-advanced row (``math.inf``: finished or at its last token); ``lead``: :data:`LEAD`."""
    low = min(ahead)
    lead = LEAD if lead is None else lead
    if low == math.inf or min(tokens) == max(tokens):     # level (a plain step): rows x each
        return min(tokens) * len(tokens)
    ahead = [a - low for a in ahead]                 # the least-advanced row at 0
    gain = min(a + n for a, n in zip(ahead, tokens))  # where the least-advanced row ends up
    return sum(gain if a == math.inf else max(gain, min(a + n, gain + lead) - a)
               for a, n in zip(ahead, tokens))


def _lookup_may_win(estimate: AcceptanceEstimate, costs: StepCosts, most: int,
                    context: int | None) -> bool:
    """Whether some length of prompt lookup's chain may beat plain decoding: its best case (every
    row at ``most`` drafts, the cheapest of its verifies: the target's cost is a line in the
    width) against plain decoding's rate (whose yield ratio is 1: plain keeps no record)."""
    top = min(most, estimate.ngram.depth)
    cheapest = min(_seconds(costs, "ngram", w, w, context, 1) for w in (2, top + 1))
    best = estimate.ngram.expected_tokens()[top] * costs.yield_ratio("ngram") / cheapest
    return best > 1 / _seconds(costs, "plain", 1, 1, context, 1)


def choose(estimate: AcceptanceEstimate, costs: StepCosts, options: PolicyOptions,
           continuations: Sequence[int] = (0,), context_length: int | None = None,
           depth: int | None = None, new_context: int = 1,
           ahead: Sequence[float] | None = None, drafter: bool = True) -> tuple[Choice, float]:
    """ONE option for every row of a batch, the most expected tokens per second
    (docs/method.md#batches), and the tokens the estimates expect of it; ``costs``: measured at
    this batch size. ``continuations``: per row, how many drafts prompt lookup found; ``depth``:
    the most drafts this step may hold (None: the chain's); ``ahead``: as :func:`counted` takes it
    (None: rows level); ``new_context``: the positions the drafter would take in (the widest
    row's); ``drafter=False``: no features were tapped. Ties go to the first of plain, chains by
    length, lookup, trees."""
    depth = estimate.depth if depth is None else min(depth, estimate.depth)
    rows, gain = len(continuations), options.tree_prior_gain
    chain = depth if drafter and not costs.rests("chain") else 0    # a kind that rests: no option
    # (expected tokens, kind, verify width, block size, tree size, lookup drafts) per option
    candidates = [(float(rows), "plain", 1, 1, None, 0)]            # plain decoding: one token
    chains = estimate.expected_tokens()[1: chain + 1] if chain else ()
    candidates += [(rows * e, "chain", b, b, None, 0) for b, e in enumerate(chains, 2)]
    most = min(max(continuations, default=0), depth) if estimate.ngram is not None else 0
    if most and not costs.rests("ngram") and _lookup_may_win(estimate, costs, most,
                                                            context_length):
        expected = estimate.ngram.expected_tokens()
        level = min(continuations) >= most           # every row as far: counted is rows x each
        ahead = [0.0] * rows if ahead is None else ahead
        candidates += [(rows * expected[m] if level else
                        counted(ahead, [expected[min(m, c)] for c in continuations]),
                        "ngram", m + 1, m + 1, None, m)
                       for m in range(1, min(most, estimate.ngram.depth) + 1)]
    sizes = options.tree_sizes if depth and drafter else ()     # one drafter forward, full depth
    tree = sizes and not costs.rests("tree")
    for n in sizes:
        if tree:
            candidates.append((rows * estimate.expected_tree_tokens(n, gain, depth), "tree",
                               n + 1, depth + 1, n, 0))
        if most and rows == 1 and not costs.rests("hybrid"):   # lookup's draft as a branch
            m = min(most, estimate.ngram.depth)
            candidates.append((estimate.expected_hybrid_tokens(n, gain, m, depth), "hybrid",
                               n + 1 + m, depth + 1, n, m))
    if len(candidates) > 1:                           # else plain decoding alone: nothing to rate
        ratio = {kind: costs.yield_ratio(kind) for kind in {c[1] for c in candidates}}
        rates = [e * ratio[kind] / _seconds(costs, kind, width, b, context_length,
                                            min(new_context, max(1, round(e / rows))))
                 for e, kind, width, b, *_ in candidates]
        candidates = [candidates[rates.index(max(rates))]]
    expected, kind, _, block_size, tree_size, ngram = candidates[0]
    return PLAIN if kind == "plain" else Choice(block_size, tree_size, ngram), expected
