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

**Estimates** (:mod:`dflash_lite.estimate`): what each option is expected to commit, from decayed
counts of what the target accepted. **The choice** (:mod:`dflash_lite.choice`): the options, the
cost of each, and the rule that picks the most expected tokens per second of step.

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
from dataclasses import dataclass, replace

import torch

from .choice import Choice, PolicyOptions, choose, choose_batch, step_seconds  # noqa: F401 (public)
from .costs import StepCosts, step_costs
from .decode import ChainDraft
from .estimate import AcceptanceEstimate, _common_prefix, chain_accepted  # noqa: F401 (public)
from .ngram import NgramProposer
from .proposers import DFlashProposer, PerRow, stack_padded
from .shapes import EAGER, Shapes
from .tree import DFlashTreeProposer, add_branch, draft_tree, draft_trees


class CostAwareProposer(DFlashProposer):
    """Each step, the option :func:`choose` rates best: plain decoding, a DFlash chain of up to
    ``options.max_block_size``, a draft tree of one of ``options.tree_sizes`` nodes, prompt lookup's
    continuation (up to ``options.ngram_drafts``), or a hybrid tree. ``costs``: a :class:`StepCosts`
    (measured at the first prompt when None); ``estimate``: the estimates a previous request left
    (decayed by ``options.request_decay`` at :meth:`start`; None: the prior). The choice is made in
    :meth:`propose`, where the last token, and so prompt lookup's continuation, is known; the loop
    always asks for up to ``block_size`` tokens, and a plain step is an empty draft. It serves one
    request, a batch of one row (:class:`BatchPolicy` serves batches)."""

    def __init__(self, drafter, target, options: PolicyOptions = PolicyOptions(),
                 costs: StepCosts | None = None,
                 estimate: AcceptanceEstimate | None = None, shapes: Shapes = EAGER):
        super().__init__(drafter, target, options.max_block_size, shapes=shapes)
        self.options = replace(options, max_block_size=self.block_size)
        self.costs, self.estimate = costs, estimate

    @property
    def tree_sizes(self) -> tuple[int, ...]:
        return self.options.tree_sizes

    def start(self, ids, features, lengths=None) -> None:
        if ids.shape[0] != 1:
            raise ValueError(f"{type(self).__name__} serves one request; a batch of "
                             f"{ids.shape[0]} runs BatchPolicy (batch_policy)")
        prompt_ids, target_hidden = ids[:, : (lengths or [ids.shape[1]])[0]], features
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
            self.lookup.start(prompt_ids, None)
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

    def propose(self, last, depths):
        self.started = time.perf_counter()
        last_token, k = last.reshape(1), depths[0]
        last = int(last_token)
        # `last_token` is the last step's token after its path
        self.observe_pending(last)
        self.continuation = self.lookup.continuation(last, min(k, self.lookup.block_size - 1)) \
            if self.lookup is not None else []
        self.choice = c = choose(self.estimate, self.costs, self.options, len(self.continuation),
                                 self.context_length, k)
        self.chosen.append(c)
        if not c.uses_drafter:                     # plain (an empty draft) or prompt lookup's chain
            return [ChainDraft(torch.tensor(self.continuation[: c.ngram], dtype=torch.long,
                                            device=last_token.device))]
        # the drafter takes in every position decoded since its last forward
        if len(self.waiting) > 1:
            self.new_context = torch.cat(self.waiting, dim=1)
            self.new_context_lengths = [self.new_context.shape[1]]
        self.drafted, self.waiting = True, []
        if c.tree_size:
            # read again in accepted()
            self.tree = draft_tree(self, last_token, c.block_size - 1, c.tree_size)
            if c.ngram:
                self.tree = add_branch(self.tree, self.continuation[: c.ngram])
            return [self.tree]
        self.proposed = super().propose(last_token, [c.block_size - 1])[0]
        return [self.proposed]

    def accepted(self, blocks, positions, features) -> None:
        block, position, target_hidden = blocks[0], positions[0], features[0]
        n = block.shape[1] - 1
        # how long the step took against what the model said
        if self.started is not None and self.costs.measured:
            seconds, c = time.perf_counter() - self.started, self.choice
            predicted = (step_seconds(c, self.costs, self.context_length)
                         / self.costs.correction(c.kind))
            self.costs.observe(c.kind, seconds, predicted)
            self.drifted |= self.costs.drift.observe(seconds, predicted)
        if self.drafted:
            super().accepted(blocks, positions, features)
            self.waiting = [self.new_context]
        else:
            # no drafter forward this step: the features wait for the next one
            self.waiting.append(target_hidden[:, : n + 1])
        if self.lookup is not None:
            self.lookup.accepted(block, n, position, None)
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

    def start(self, ids, features, lengths=None) -> None:
        lengths = list(lengths or [ids.shape[1]] * ids.shape[0])
        super().start(ids, features, lengths)
        o, rows = self.options, len(lengths)
        if self.costs is None:
            self.costs = step_costs(self.target, self.drafter, ids[:1, : lengths[0]],
                                    o.max_block_size, o.tree_sizes, rows=rows)
        if self.estimate is None:
            self.estimate = AcceptanceEstimate.for_options(o)
        else:                                      # what earlier batches learned, at a discount
            self.estimate.decay(o.request_decay)
        self.lookup = PerRow(NgramProposer(o.ngram_drafts, o.max_ngram)) \
            if o.ngram_drafts else None
        if self.lookup is not None:
            self.lookup.start(ids, None, lengths)
        # per row: the features no drafter forward has seen yet, and where they start
        self.waiting = [[features[r: r + 1, :n]] for r, n in enumerate(lengths)]
        self.waiting_start, self.context = [0] * rows, list(lengths)
        self.choice, self.drafted, self.chosen, self.started = Choice(1), False, [], None
        self.continuations = [[] for _ in lengths]

    def propose(self, last, depths):
        self.started = time.perf_counter()
        lasts = last.tolist()
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
                                            device=last.device))
                    for x in self.continuations]
        # the drafter takes in every row's features since its last forward
        self.new_context = stack_padded([torch.cat(w, dim=1) for w in self.waiting])
        self.new_context_start = list(self.waiting_start)
        self.new_context_lengths = [sum(x.shape[1] for x in w) for w in self.waiting]
        self.drafted = True
        depths = [min(d, c.block_size - 1) for d in depths]
        if c.tree_size:
            return draft_trees(self, last, depths, c.tree_size)
        return DFlashProposer.propose(self, last, depths)

    def accepted(self, blocks, positions, features) -> None:
        c, e, o = self.choice, self.estimate, self.options
        if self.started is not None and self.costs.measured:     # the step against the model
            context = sum(self.context) // len(self.context)
            predicted = step_seconds(c, self.costs, context) / self.costs.correction(c.kind)
            self.costs.observe(c.kind, time.perf_counter() - self.started, predicted)
            self.costs.observe_yield(c.kind, sum(b.shape[1] for b in blocks), self.expected)
        self.started = None
        looked = e.ngram is not None and any(self.continuations)
        e.decay(o.decay if c.uses_drafter else o.idle_decay, o.decay if looked else o.idle_decay)
        for r, (block, position, hidden) in enumerate(zip(blocks, positions, features)):
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
            self.lookup.accepted(blocks, positions, features)
        self.choice, self.drafted, self.continuations = Choice(1), False, [[] for _ in blocks]

    def keep(self, index: list[int]) -> None:
        super().keep(index)
        self.waiting = [self.waiting[i] for i in index]
        self.waiting_start = [self.waiting_start[i] for i in index]
        self.context = [self.context[i] for i in index]
        if self.lookup is not None:
            self.lookup.keep(index)


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
