"""The best draft for every step: each step drafts whatever maximises expected tokens per second.

The cost model the benchmark checks (:func:`dflash_lite.costs.predicted_speedup`,
``speedup = tau * t_target(1) / (t_target(B) + t_draft(B))``) says when a draft pays: its verify
and the drafter forward must cost less than the tokens they bring. Both sides change from prompt
to prompt and from step to step, so the draft is chosen per step, as real integrations' depth
controllers do.

**Options** (a :class:`Choice`, its ``kind``):

* ``plain``: no draft, one target token (b = 1);
* ``chain``: a DFlash chain of b - 1 drafts (b in 2..B), costing ``t_target(b) + t_draft(b)``;
* ``tree``: a DFlash draft tree of N nodes (:mod:`dflash_lite.tree`),
  ``t_target(N+1) + t_draft(B)``;
* ``ngram``: prompt lookup's m drafts (:mod:`dflash_lite.ngram`), only when the matcher finds a
  continuation: ``t_target(m+1)`` and no drafter forward at all;
* ``hybrid``: the tree with that continuation added as one more branch (``tree.add_branch``),
  one verify: ``t_target(N+1+m) + t_draft(B)``.

The default (:data:`DEFAULT_OPTIONS`, :func:`default_policy`) offers all five;
:data:`NO_NGRAM_OPTIONS` leaves prompt lookup out (the first three).

Every draft is a point mass (argmaxes, the tree's top paths, copied tokens), so each step's rule
is exact (``acceptance.accept_point_mass``, ``tree.accept_tree``) and the choice depends only on
tokens already committed: lossless at every temperature.

**Estimates** (:class:`AcceptanceEstimate`): for the DFlash chain and for prompt lookup's chain,
each its own, the probability ``a_k`` that draft k is accepted given that the drafts before it
were, from decayed counts (pooled over positions with a Beta prior, then per position with the
pool as prior); a chain of b - 1 drafts is expected to commit ``1 + a_1 + a_1 a_2 + ...`` tokens.
Trees and hybrid trees keep their own decayed mean tokens per step, pulled towards a prior
(``tree_prior_gain`` x the full chain's estimate; for the hybrid, the tree and prompt lookup as
two independent tries at every depth). A tree or hybrid step also tells the chain estimate what the
chain would have done (:func:`chain_accepted`), and every step with a lookup continuation tells
prompt lookup's estimate how far its tokens would have gone, whichever option ran. The estimates
outlive a request: the
owner (:class:`PolicySession`, kept by an ``Engine``) hands them to the next request's policy,
whose counts are first decayed by ``request_decay``.

**Costs by context** (:class:`dflash_lite.costs.StepCosts`): ``t_target(b)`` and ``t_draft(b)``
measured at two context lengths, each a line in b whose intercept and slope are lines in the
context length; :func:`choose` reads them at the step's context length. The policy times its own
steps (``time.perf_counter``); when the running median of measured / predicted over
:data:`~dflash_lite.costs.DRIFT_WINDOW` steps moves by more than
:data:`~dflash_lite.costs.DRIFT_MARGIN` (either way) from what it was on the first steps, the policy
reports ``drifted`` and the session measures again, between requests, at the current context
length.

**Coming back from 1.** A step that does not run the drafter observes nothing of it, but its
counts keep decaying (``idle_decay``), so its estimate drifts back to the optimistic prior and a
draft is tried again after a number of steps that grows with how clearly drafting lost. Prompt
lookup needs no such retry: its continuation is known every step, and the target's own next token
judges it even when the step ran something else (:func:`chain_accepted`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from .costs import StepCosts, step_costs
from .decode import ChainDraft, DFlashProposer, RowProposers, stack_rows
from .ngram import NgramProposer
from .shapes import EAGER, Shapes
from .tree import DFlashTreeProposer, add_branch, draft_tree, draft_trees


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def chain_accepted(path: list[int], chain: list[int], held: int,
                   next_token: int | None = None) -> tuple[int, int]:
    """What a chain of drafts would have done, read off a step that verified something else:
    (drafts accepted, drafts judged). The step's draft held the chain's first ``held`` tokens, and
    the accepted ``path`` follows the chain as long as they agree. Where the path leaves it, or ends
    on it with the chain's next draft held, that draft was wrong (judged, rejected). Where the path
    ends on it beyond what was held, the target's own token after the path (``next_token``) judges
    the chain's next draft: a point mass is accepted exactly when the target picks it (greedy), or
    with the probability the target would pick it (sampled; after a tree step whose other branches
    were rejected the token comes from what is left, so the read is a little optimistic). Without
    ``next_token`` that draft is not judged."""
    agree = _common_prefix(path, chain)
    if agree < len(path) or agree < min(held, len(chain)):
        return agree, agree + 1
    if next_token is not None and agree < len(chain):
        return agree + (chain[agree] == next_token), agree + 1
    return agree, agree


@dataclass(frozen=True)
class PolicyOptions:
    """How the policy chooses. ``max_block_size``: the longest chain (None: the drafter's block
    size); ``tree_sizes``: the draft trees it may choose; ``ngram_drafts``: the most prompt-lookup
    drafts (0: no ``ngram`` or ``hybrid`` options), matching up to ``max_ngram`` tokens;
    ``decay``: how much of its counts an estimate keeps on a step that observed it; ``idle_decay``:
    the same on a step that did not (closer to 1 retries a losing draft later); ``request_decay``:
    the same between requests; ``prior``, ``prior_weight``: the Beta prior the estimates start from
    and decay back to; ``tree_prior_gain``: a tree's expected length before it has been tried, as a
    multiple of the full chain's."""
    max_block_size: int | None = None
    tree_sizes: tuple[int, ...] = ()
    ngram_drafts: int = 0
    max_ngram: int = 3
    decay: float = 0.9
    idle_decay: float = 0.99
    request_decay: float = 0.5
    prior: float = 0.7
    prior_weight: float = 3.0
    tree_prior_gain: float = 1.3

    def __post_init__(self):
        if not all(0 < x < 1 for x in (self.decay, self.idle_decay, self.prior)) \
                or not 0 < self.request_decay <= 1 \
                or self.prior_weight <= 0 or self.tree_prior_gain <= 0:
            raise ValueError("cost-aware policy needs 0 < decay, idle_decay, prior < 1, "
                             "0 < request_decay <= 1, "
                             "prior_weight > 0 and tree_prior_gain > 0")
        if any(n < 1 for n in self.tree_sizes) or self.ngram_drafts < 0 or self.max_ngram < 1:
            raise ValueError(f"tree sizes and max_ngram must be >= 1 and ngram_drafts >= 0, got "
                             f"{tuple(self.tree_sizes)}, {self.max_ngram}, {self.ngram_drafts}")
        object.__setattr__(self, "tree_sizes", tuple(sorted(self.tree_sizes)))


@dataclass(frozen=True)
class Choice:
    """One step's choice: ``block_size`` tokens per target forward for a chain (1: plain decoding;
    for prompt lookup, its ``ngram`` drafts + 1), or a draft tree of ``tree_size`` nodes drafted at
    depth ``block_size - 1``, with a prompt-lookup branch of ``ngram`` drafts for a hybrid tree."""
    block_size: int
    tree_size: int | None = None
    ngram: int = 0

    @property
    def kind(self) -> str:
        """``plain``, ``chain``, ``tree``, ``ngram`` or ``hybrid``."""
        if self.tree_size:
            return "hybrid" if self.ngram else "tree"
        return "ngram" if self.ngram else "chain" if self.block_size > 1 else "plain"

    @property
    def uses_drafter(self) -> bool:
        return self.kind in ("chain", "tree", "hybrid")

    @property
    def verify_width(self) -> int:
        """Tokens in the step's target forward (an upper bound for a hybrid tree: the branch may
        share nodes)."""
        return self.tree_size + 1 + self.ngram if self.tree_size else self.block_size

    def __str__(self) -> str:
        return {"tree": f"tree {self.tree_size}", "ngram": f"ngram {self.ngram}",
                "hybrid": f"tree {self.tree_size} + ngram {self.ngram}"}.get(
                    self.kind, str(self.block_size))


def step_seconds(choice: Choice, costs: StepCosts, context_length: int | None = None) -> float:
    """What the cost model says ``choice``'s step costs: the verify, plus a drafter forward over the
    full block if the drafter runs."""
    drafting = costs.draft(choice.block_size, context_length) if choice.uses_drafter else 0.0
    return ((costs.target(choice.verify_width, context_length) + drafting)
            * costs.correction(choice.kind))


@dataclass
class AcceptanceEstimate:
    """Decayed counts of drafts the target accepted and judged, pooled and per draft position
    1..``depth``, and of tokens per step for each tree size, alone and as a hybrid tree; with a
    Beta prior (``prior``, ``prior_weight``) that the estimates start from and drift back to as
    the counts decay. ``ngram``: prompt lookup's own chain estimate (None: not offered)."""
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
    hybrid_tokens: dict[int, float] = field(default_factory=dict)   # the same for hybrid trees
    hybrid_steps: dict[int, float] = field(default_factory=dict)
    ngram: AcceptanceEstimate | None = None
    _expected: list[float] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.accepted_at = self.accepted_at or [0.0] * self.depth
        self.judged_at = self.judged_at or [0.0] * self.depth
        for sums in (self.tree_tokens, self.tree_steps, self.hybrid_tokens, self.hybrid_steps):
            sums.update({n: sums.get(n, 0.0) for n in self.tree_sizes})

    @classmethod
    def for_options(cls, options: PolicyOptions) -> AcceptanceEstimate:
        """A fresh estimate of every option ``options`` offers (the chain's depth:
        ``max_block_size - 1``)."""
        lookup = (cls(options.ngram_drafts, (), options.prior, options.prior_weight)
                  if options.ngram_drafts else None)
        return cls(options.max_block_size - 1, options.tree_sizes, options.prior,
                   options.prior_weight, ngram=lookup)

    def decay(self, factor: float, lookup_factor: float | None = None) -> None:
        """Keep ``factor`` of every count; prompt lookup's estimate keeps ``lookup_factor`` (None:
        the same)."""
        self._expected = None
        self.accepted, self.judged = self.accepted * factor, self.judged * factor
        self.accepted_at = [a * factor for a in self.accepted_at]
        self.judged_at = [t * factor for t in self.judged_at]
        for sums in (self.tree_tokens, self.tree_steps, self.hybrid_tokens, self.hybrid_steps):
            for size in sums:
                sums[size] *= factor
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
        """A tree step (a hybrid one with ``hybrid``) of ``tree_size`` nodes committed
        ``tokens``."""
        tokens_sum, steps = ((self.hybrid_tokens, self.hybrid_steps) if hybrid
                             else (self.tree_tokens, self.tree_steps))
        tokens_sum[tree_size] += tokens
        steps[tree_size] += 1

    def acceptance(self) -> float:
        """P(a draft is accepted | the drafts before it were), pooled over positions, with the
        prior."""
        return (self.accepted + self.prior_weight * self.prior) / (self.judged + self.prior_weight)

    def acceptance_by_position(self) -> list[float]:
        """The same per draft position k, with the pooled estimate as its prior: positions seen
        often speak for themselves (acceptance comes in runs, so deep positions, once reached, are
        accepted more often than early ones), positions seen rarely follow the pool."""
        pooled, w = self.acceptance(), self.prior_weight
        return [(a + w * pooled) / (t + w) for a, t in zip(self.accepted_at, self.judged_at)]

    def expected_tokens(self) -> list[float]:
        """Tokens a chain step of b tokens is expected to commit, bonus included, for
        b = 1..depth+1: ``1 + a_1 + a_1 a_2 + ... + a_1 ... a_(b-1)``. Computed once until the
        counts change."""
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
        return self._mean(self.tree_tokens[tree_size], self.tree_steps[tree_size], prior)

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
        # P(reach depth j)
        reach_tree = [min(1.0, scale * (b - a)) for a, b in zip(chain, chain[1:])]
        reach_lookup = [b - a for a, b in zip(lookup, lookup[1:])]
        reach_lookup += [0.0] * (len(reach_tree) - len(reach_lookup))
        prior = 1 + sum(1 - (1 - t) * (1 - m) for t, m in zip(reach_tree, reach_lookup))
        return self._mean(self.hybrid_tokens[tree_size], self.hybrid_steps[tree_size], prior)


def choose(estimate: AcceptanceEstimate, costs: StepCosts, options: PolicyOptions,
           ngram_drafts: int = 0, context_length: int | None = None,
           depth: int | None = None) -> Choice:
    """The option with the most expected tokens per second of step (:func:`step_seconds` at
    ``context_length``): a chain of b in 1..B, a tree, or, when prompt lookup found
    ``ngram_drafts`` tokens, its chain of m <= ``ngram_drafts`` or a hybrid tree. ``depth``: the
    most drafts this step may hold (None: the chain's depth). Ties go to the cheaper kind."""
    depth = estimate.depth if depth is None else min(depth, estimate.depth)
    gain = options.tree_prior_gain
    candidates = [(e, Choice(b)) for b, e in enumerate(estimate.expected_tokens()[: depth + 1], 1)]
    lookup = min(ngram_drafts, depth) if estimate.ngram is not None else 0
    if lookup:
        expected = estimate.ngram.expected_tokens()
        candidates += [(expected[m], Choice(m + 1, None, m))
                       for m in range(1, min(lookup, estimate.ngram.depth) + 1)]
    for n in options.tree_sizes if depth else ():     # one drafter forward at the step's full depth
        candidates.append((estimate.expected_tree_tokens(n, gain, depth), Choice(depth + 1, n)))
        if lookup:
            m = min(lookup, estimate.ngram.depth)
            candidates.append((estimate.expected_hybrid_tokens(n, gain, m, depth),
                               Choice(depth + 1, n, m)))
    rates = [e / step_seconds(c, costs, context_length) for e, c in candidates]
    return candidates[rates.index(max(rates))][1]


class CostAwareProposer(DFlashProposer):
    """Each step, the option :func:`choose` rates best: plain decoding, a DFlash chain of up to
    ``options.max_block_size``, a draft tree of one of ``options.tree_sizes`` nodes, prompt lookup's
    continuation (up to ``options.ngram_drafts``), or a hybrid tree. ``costs``: a :class:`StepCosts`
    (measured at the first prompt when None); ``estimate``: the estimates a previous request left
    (decayed by ``options.request_decay`` at :meth:`start`; None: the prior). The choice is made in
    :meth:`propose`, where the last token, and so prompt lookup's continuation, is known; the loop
    always asks for up to ``block_size`` tokens, and a plain step is an empty draft."""

    def __init__(self, drafter, target, options: PolicyOptions = PolicyOptions(),
                 costs: StepCosts | None = None,
                 estimate: AcceptanceEstimate | None = None, shapes: Shapes = EAGER):
        super().__init__(drafter, target, options.max_block_size, shapes=shapes)
        self.options = replace(options, max_block_size=self.block_size)
        self.costs, self.estimate = costs, estimate

    @property
    def tree_sizes(self) -> tuple[int, ...]:
        return self.options.tree_sizes

    def start(self, prompt_ids, target_hidden) -> None:
        super().start(prompt_ids, target_hidden)
        o = self.options
        if self.costs is None:
            self.costs = step_costs(self.target, self.drafter, prompt_ids, o.max_block_size,
                                    o.tree_sizes)
        if self.estimate is None:
            self.estimate = AcceptanceEstimate.for_options(o)
        else:                                      # what earlier requests learned, at a discount
            self.estimate.decay(o.request_decay)
        self.lookup = NgramProposer(o.ngram_drafts, o.max_ngram) if o.ngram_drafts else None
        if self.lookup is not None:
            self.lookup.start(prompt_ids, target_hidden)
        self.context_length = self.prompt_length = prompt_ids.shape[1]   # where `last` sits
        # the prompt's features are not in the drafter's cache yet
        self.drafted, self.drifted = False, False
        # features of positions no drafter forward has seen
        self.waiting = [target_hidden]
        self.chosen: list[Choice] = []             # per step
        # (estimate, path, chain, held) the next token judges further
        self.pending: list[tuple] = []
        self._reset()

    def _reset(self) -> None:
        """Before each step: a step that never reaches :meth:`propose` (no room for a draft) is
        plain."""
        self.choice, self.continuation, self.started = Choice(1), [], None

    def propose(self, last_token, k):
        self.started = time.perf_counter()
        last = int(last_token)
        # `last_token` is the last step's token after its path
        self.observe_pending(last)
        self.continuation = self.lookup.continuation(last, min(k, self.lookup.block_size - 1)) \
            if self.lookup is not None else []
        self.choice = c = choose(self.estimate, self.costs, self.options, len(self.continuation),
                                 self.context_length, k)
        self.chosen.append(c)
        if not c.uses_drafter:                     # plain (an empty draft) or prompt lookup's chain
            return ChainDraft(torch.tensor(self.continuation[: c.ngram], dtype=torch.long,
                                           device=last_token.device))
        # the drafter takes in every position decoded since its last forward
        if len(self.waiting) > 1:
            self.new_context = torch.cat(self.waiting, dim=1)
        self.drafted, self.waiting = True, []
        if c.tree_size:
            # read again in accepted()
            self.tree = draft_tree(self, last_token, c.block_size - 1, c.tree_size)
            if c.ngram:
                self.tree = add_branch(self.tree, self.continuation[: c.ngram])
            return self.tree
        self.proposed = super().propose(last_token, c.block_size - 1)
        return self.proposed

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        # how long the step took against what the model said
        if self.started is not None and self.costs.measured:
            seconds, c = time.perf_counter() - self.started, self.choice
            predicted = (step_seconds(c, self.costs, self.context_length)
                         / self.costs.correction(c.kind))
            self.costs.observe(c.kind, seconds, predicted)
            self.drifted |= self.costs.drift.observe(seconds, predicted)
        if self.drafted:
            super().accepted(block, n, position, target_hidden)
            self.waiting = [self.new_context]
        else:
            # no drafter forward this step: the features wait for the next one
            self.waiting.append(target_hidden[:, : n + 1])
        if self.lookup is not None:
            self.lookup.accepted(block, n, position, target_hidden)
        self._observe(self._verified(block), n)
        self.context_length, self.drafted = position + n + 1, False
        self._reset()

    def _verified(self, block) -> list[int]:
        """The drafts the step verified: a chain's (read back), prompt lookup's (on the host
        already), or for a tree the accepted path (the committed ``block`` after ``last``)."""
        c = self.choice
        if c.tree_size:
            return block[0, 1:].tolist()
        return self.proposed.tokens.tolist() if c.kind == "chain" else self.continuation[: c.ngram]

    def _observe(self, drafts: list[int], n: int) -> None:
        """What the step tells each estimate (``drafts``: the verified chain, or the tree's accepted
        path). An estimate the step observed keeps ``decay`` of its counts, one it did not
        ``idle_decay``: prompt lookup's steps say nothing of the drafter, and back. Where a chain
        would have gone on past what the step held, the next step's first token judges its next
        draft (:func:`chain_accepted`), so that is read in :meth:`propose` (``pending``)."""
        c, e, o, path = self.choice, self.estimate, self.options, drafts[:n]
        looked = e.ngram is not None and bool(self.continuation)
        e.decay(o.decay if c.uses_drafter else o.idle_decay, o.decay if looked else o.idle_decay)
        self.pending = []
        if c.tree_size:
            e.observe_tree(c.tree_size, n + 1, hybrid=bool(c.ngram))
            # what the chain would have done in the same step
            chain = self.tree.chain
            self.pending.append((e, path, chain, self.tree.path_length(chain)))
        elif c.kind == "chain":
            # drafts 1..n accepted; draft n+1 (if there was one) rejected
            e.observe_chain(n, min(n + 1, len(drafts)))
        # how far prompt lookup's tokens would have gone
        if looked:
            held = {"plain": 0, "ngram": c.ngram,
                    "chain": _common_prefix(drafts, self.continuation)}.get(c.kind)
            held = self.tree.path_length(self.continuation) if held is None else held
            self.pending.append((e.ngram, path, self.continuation, held))

    def observe_pending(self, next_token: int | None = None) -> None:
        """The last step's chains, judged up to ``next_token``, the target's own token after its
        path (:func:`chain_accepted`; None at the end of a request: only as far as the step itself
        judged)."""
        for estimate, path, chain, held in self.pending:
            estimate.observe_chain(*chain_accepted(path, chain, held, next_token))
        self.pending = []


def choose_batch(estimate: AcceptanceEstimate, costs: StepCosts, options: PolicyOptions,
                 continuations: list[int], context_length: int | None = None,
                 depth: int | None = None) -> tuple[Choice, float]:
    """ONE option for every row of a batch (SmartSpec's goodput rule, arXiv 2406.14066): the
    most expected committed tokens over all rows per second of the step at this batch size
    (``costs`` measured for it), and the tokens the estimates expect of it. ``continuations``:
    per row, how many drafts prompt lookup has; a row without one commits a single token on a
    lookup step. Each kind's expectation is scaled by what its batch steps have committed
    against it so far (``costs.yield_ratio``). Plain decoding is always a candidate, so a batch
    where no draft pays decodes plainly. Ties go to the cheaper kind."""
    depth = estimate.depth if depth is None else min(depth, estimate.depth)
    rows = len(continuations)
    candidates = [(rows * e, Choice(b))
                  for b, e in enumerate(estimate.expected_tokens()[: depth + 1], 1)]
    for n in options.tree_sizes if depth else ():
        candidates.append((rows * estimate.expected_tree_tokens(n, options.tree_prior_gain, depth),
                           Choice(depth + 1, n)))
    most = min(max(continuations, default=0), depth)
    if estimate.ngram is not None and most:
        expected = estimate.ngram.expected_tokens()
        candidates += [(sum(expected[min(m, c)] for c in continuations), Choice(m + 1, None, m))
                       for m in range(1, min(most, estimate.ngram.depth) + 1)]
    rates = [e * costs.yield_ratio(c.kind) / step_seconds(c, costs, context_length)
             for e, c in candidates]
    expected, choice = candidates[rates.index(max(rates))]
    return choice, expected


class BatchPolicy(DFlashTreeProposer):
    """The policy of a batch: each step, :func:`choose_batch`'s one option for every row (plain
    decoding, a DFlash chain of b, a draft tree of ``options.tree_sizes[0]`` nodes, or prompt
    lookup's continuation), from one acceptance estimate pooled over the rows and step costs
    measured at this batch size (:func:`~dflash_lite.costs.step_costs` with ``rows``). Features
    of steps that ran no drafter wait, per row, for the next drafter forward. Every draft is a
    point mass, so every step is lossless (docs/method.md#batches). As the one-request policy
    does, it times its own steps against the model (``costs.observe``: the host's work per row
    is in no forward), and ``estimate``, what an earlier batch learned, starts the next one."""

    def __init__(self, drafter, target, options: PolicyOptions = PolicyOptions(),
                 costs: StepCosts | None = None, shapes: Shapes = EAGER,
                 estimate: AcceptanceEstimate | None = None):
        super().__init__(drafter, target, (options.tree_sizes or (1,))[0],
                         options.max_block_size, shapes)
        self.options = replace(options, max_block_size=self.block_size,
                               tree_sizes=options.tree_sizes[:1])
        self.costs, self.estimate = costs, estimate

    def start(self, prompt_ids, target_hidden) -> None:
        self.start_rows(prompt_ids, target_hidden, None)

    def start_rows(self, prompt_ids, target_hidden, lengths) -> None:
        lengths = lengths or [prompt_ids.shape[1]]
        super().start_rows(prompt_ids, target_hidden, lengths)
        o, rows = self.options, len(lengths)
        if self.costs is None:
            self.costs = step_costs(self.target, self.drafter, prompt_ids[:1, : lengths[0]],
                                    o.max_block_size, o.tree_sizes, rows=rows)
        if self.estimate is None:
            self.estimate = AcceptanceEstimate.for_options(o)
        else:                                      # what earlier batches learned, at a discount
            self.estimate.decay(o.request_decay)
        self.lookup = RowProposers(NgramProposer(o.ngram_drafts, o.max_ngram), rows) \
            if o.ngram_drafts else None
        if self.lookup is not None:
            self.lookup.start_rows(prompt_ids, None, lengths)
        # per row: the features no drafter forward has seen yet, and where they start
        self.waiting = [[target_hidden[r: r + 1, :n]] for r, n in enumerate(lengths)]
        self.waiting_start, self.context = [0] * rows, list(lengths)
        self.choice, self.drafted, self.chosen, self.started = Choice(1), False, [], None
        self.continuations = [[] for _ in lengths]

    def propose(self, last_token, k):
        return self.propose_rows(last_token, [k])[0]

    def propose_rows(self, last_token, k):
        self.started = time.perf_counter()
        lasts, depths = last_token.tolist(), [k] * len(last_token) if isinstance(k, int) else k
        self.continuations = [p.continuation(t, min(d, p.block_size - 1))
                              for p, t, d in zip(self.lookup.proposers, lasts, depths)] \
            if self.lookup is not None else [[] for _ in lasts]
        c, self.expected = choose_batch(self.estimate, self.costs, self.options,
                                        [len(x) for x in self.continuations],
                                        sum(self.context) // len(self.context), max(depths))
        self.choice = c
        self.chosen.append(c)
        if not c.uses_drafter:                     # plain (empty drafts) or prompt lookup's
            return [ChainDraft(torch.tensor(x[: c.ngram], dtype=torch.long,
                                            device=last_token.device))
                    for x in self.continuations]
        # the drafter takes in every row's features since its last forward
        self.new_context = stack_rows([torch.cat(w, dim=1) for w in self.waiting])
        self.new_context_start = list(self.waiting_start)
        self.new_context_lengths = [sum(x.shape[1] for x in w) for w in self.waiting]
        self.drafted = True
        depths = [min(d, c.block_size - 1) for d in depths]
        if c.tree_size:
            return draft_trees(self, last_token, depths, c.tree_size)
        return DFlashProposer.propose_rows(self, last_token, depths)

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        self.accepted_rows([block[:, : n + 1]], [position], [target_hidden[:, : n + 1]])

    def accepted_rows(self, blocks, positions, target_hidden) -> None:
        c, e, o = self.choice, self.estimate, self.options
        if self.started is not None and self.costs.measured:     # the step against the model
            context = sum(self.context) // len(self.context)
            predicted = step_seconds(c, self.costs, context) / self.costs.correction(c.kind)
            self.costs.observe(c.kind, time.perf_counter() - self.started, predicted)
            self.costs.observe_yield(c.kind, sum(b.shape[1] for b in blocks), self.expected)
        self.started = None
        looked = e.ngram is not None and any(self.continuations)
        e.decay(o.decay if c.uses_drafter else o.idle_decay, o.decay if looked else o.idle_decay)
        for r, (block, position, hidden) in enumerate(zip(blocks, positions, target_hidden)):
            n = block.shape[1] - 1
            if n < 0:                               # a finished row kept as padding
                continue
            if c.tree_size:
                e.observe_tree(c.tree_size, n + 1)
            elif c.kind == "chain":
                e.observe_chain(n, min(n + 1, c.block_size - 1))
            elif c.kind == "ngram" and self.continuations[r][: c.ngram]:
                e.ngram.observe_chain(n, min(n + 1, len(self.continuations[r][: c.ngram])))
            if self.drafted:
                self.waiting[r], self.waiting_start[r] = [hidden], position
            else:
                self.waiting[r].append(hidden)
            self.context[r] = position + n + 1
        if self.lookup is not None:
            self.lookup.accepted_rows(blocks, positions, target_hidden)
        self.choice, self.drafted, self.continuations = Choice(1), False, [[] for _ in blocks]

    def keep_rows(self, index: list[int]) -> None:
        super().keep_rows(index)
        self.waiting = [self.waiting[i] for i in index]
        self.waiting_start = [self.waiting_start[i] for i in index]
        self.context = [self.context[i] for i in index]
        if self.lookup is not None:
            self.lookup.keep_rows(index)


def batch_policy(drafter, target, costs: StepCosts | None = None, shapes: Shapes = EAGER,
                 estimate: AcceptanceEstimate | None = None) -> BatchPolicy:
    """The default's options (:data:`DEFAULT_OPTIONS`) as one choice per step for a whole batch
    (what ``Engine.generate`` and ``bench --batch-sizes`` run on more than one prompt)."""
    return BatchPolicy(drafter, target, DEFAULT_OPTIONS, costs, shapes, estimate)


@dataclass
class PolicySession:
    """What outlives one request, kept by the owner of the target (an ``Engine``, a benchmark row):
    the step costs (measured at the first request, measured again between requests when a policy
    reports that they drifted, if ``recalibrate``) and the acceptance estimates the last request
    left, which the next request's policy starts from."""
    drafter: object
    target: object
    options: PolicyOptions
    costs: StepCosts | None = None
    estimate: AcceptanceEstimate | None = None
    recalibrate: bool = True
    calibration_seconds: float = 0.0           # every measurement of the costs so far

    def proposer(self, prompt_ids: torch.Tensor | None = None,
                 shapes: Shapes = EAGER) -> CostAwareProposer:
        """The next request's policy, on ``shapes``; the costs are measured at ``prompt_ids`` the
        first time."""
        if prompt_ids is not None and self.costs is None:
            self._measure(prompt_ids)
        return CostAwareProposer(self.drafter, self.target, self.options, self.costs, self.estimate,
                                 shapes)

    def finished(self, proposer: CostAwareProposer,
                 sequence_ids: torch.Tensor | None = None) -> None:
        """Keep what ``proposer`` learned; measure the costs again (at the request's prompt and at
        ``sequence_ids``, its prompt and output) when they drifted."""
        proposer.observe_pending()
        self.estimate = proposer.estimate
        if self.costs is None:
            self.costs = proposer.costs
            self.calibration_seconds += proposer.costs.calibration_seconds
        elif proposer.drifted and self.recalibrate and sequence_ids is not None:
            self._measure(sequence_ids[:, : proposer.prompt_length], sequence_ids, repeats=3)

    def _measure(self, ids: torch.Tensor, longer: torch.Tensor | None = None,
                 repeats: int = 7) -> None:
        o = self.options
        block = o.max_block_size or self.drafter.config.block_size
        self.costs = step_costs(self.target, self.drafter, ids, block, o.tree_sizes, repeats,
                                longer)
        self.calibration_seconds += self.costs.calibration_seconds


DEFAULT_TREE_SIZES = (16,)      # the tree the default may choose; measured on the probe split
# prompt lookup's drafts per step, as transformers' prompt_lookup_num_tokens
DEFAULT_NGRAM_DRAFTS = 10
# all five kinds
DEFAULT_OPTIONS = PolicyOptions(tree_sizes=DEFAULT_TREE_SIZES, ngram_drafts=DEFAULT_NGRAM_DRAFTS)
# chains and the tree only: no prompt lookup
NO_NGRAM_OPTIONS = PolicyOptions(tree_sizes=DEFAULT_TREE_SIZES)


def default_policy(drafter, target, costs: StepCosts | None = None,
                   estimate: AcceptanceEstimate | None = None) -> CostAwareProposer:
    """What ``Engine.generate``, ``demo`` and ``bench``'s headline row run: :data:`DEFAULT_OPTIONS`,
    each step plain decoding, a DFlash chain, a draft tree of :data:`DEFAULT_TREE_SIZES` nodes,
    prompt lookup's continuation, or the hybrid tree (the tree with that continuation as a branch),
    greedy or sampled (every rule is lossless, :mod:`dflash_lite.tree`). :data:`NO_NGRAM_OPTIONS`
    leaves prompt lookup out (``bench``'s "cost-aware, no n-gram" row)."""
    return CostAwareProposer(drafter, target, DEFAULT_OPTIONS, costs, estimate)


def default_costs(drafter, target, prompt_ids: torch.Tensor) -> StepCosts:
    """The step costs :func:`default_policy` needs, measured at ``prompt_ids``' context length and
    a longer one."""
    return step_costs(target, drafter, prompt_ids, drafter.config.block_size, DEFAULT_TREE_SIZES)
