"""The cost-aware policy (docs/method.md#the-cost-aware-policy): :class:`CostAwareProposer` drafts,
each step, whichever of plain decoding, a DFlash chain, a draft tree, prompt lookup or the hybrid
tree :func:`choose` rates the most expected tokens per second (across requests: :mod:`.session`)."""
from __future__ import annotations

import math
import time
from dataclasses import replace

import torch

from .choice import (DRAFTER_KINDS, PLAIN, Choice, PolicyOptions, choose,  # noqa: F401
                     counted, step_seconds)
from .costs import StepCosts, step_costs
from .decode import ChainDraft
from .estimate import AcceptanceEstimate, _common_prefix, chain_accepted  # noqa: F401 (public)
from .ngram import NgramIndex, read_in
from .proposers import DFlashProposer, stack_padded
from .shapes import EAGER, Shapes
from .tree import DFlashTreeProposer, add_branch, draft_trees


class CostAwareProposer(DFlashTreeProposer):
    """Each step, the ONE option :func:`choose` rates best for every row of the batch. ``costs``:
    measured at this batch size (None: at the first prompt); ``estimate``: what earlier requests
    left, one for all rows (None: the prior); ``context``: the length its first step is priced at
    (None: the costs'). ``drifted``: one row's costs no longer fit its steps. A request that will
    not run the drafter has ``layer_ids`` None (no features tapped)."""

    def __init__(self, drafter, target, options: PolicyOptions = PolicyOptions(),
                 costs: StepCosts | None = None,
                 estimate: AcceptanceEstimate | None = None, shapes: Shapes = EAGER,
                 context: int | None = None):
        super().__init__(drafter, target, (options.tree_sizes or (1,))[0],
                         options.max_block_size, shapes)
        self.options = replace(options, max_block_size=self.block_size)
        self.costs = costs
        self.estimate = estimate
        idle = costs is not None and (costs.lost(DRAFTER_KINDS) or costs.drafter_idle)
        self.drafting = not idle or choose(
            estimate if estimate is not None else AcceptanceEstimate.for_options(self.options),
            costs, self.options, context_length=context,
            depth=self.block_size - 1)[0].uses_drafter
        if not self.drafting:
            self.layer_ids = None

    @property
    def tree_sizes(self) -> tuple[int, ...]:
        return self.options.tree_sizes

    def start(self, ids, features, lengths=None) -> None:
        lengths = list(lengths or [ids.shape[1]] * ids.shape[0])
        super().start(ids, features, lengths)
        o, rows = self.options, len(lengths)
        if self.costs is None:
            self.costs = step_costs(self.target, self.drafter, ids[:1, : lengths[0]],
                                    o.max_block_size, o.tree_sizes, rows=rows)
        if self.estimate is None:
            self.estimate = AcceptanceEstimate.for_options(o)
        else:                                      # what earlier requests learned, at a discount
            self.estimate.decay(o.request_decay)
        # prompt lookup: per row, an index of its tokens, and what it has not read in yet
        self.lookup = [NgramIndex(o.max_ngram) for _ in lengths] if o.ngram_drafts else None
        self.unread = [[ids[r: r + 1, :n]] if self.lookup else [] for r, n in enumerate(lengths)]
        # per row: the features no drafter forward has seen yet, where they start, where the row's
        # last token sits, and how many positions wait
        self.waiting = [[features[r: r + 1, :n]] if self.drafting else []
                        for r, n in enumerate(lengths)]
        self.waiting_start = [0] * rows
        self.context = list(lengths)
        self.waited = list(lengths)
        self.emitted = [0] * rows                  # per row, the tokens committed so far
        self.no_draft = ChainDraft(ids[0, :0])     # a plain step's, every row's
        self.chosen: list[Choice] = []
        self.forecast: list[float] = []            # per step, its forwards' predicted seconds
        self.drifted = False
        self.quiet = 0                             # plain steps left before the next choice
        self.timed = None                          # the last step's (kind, start, predicted)
        self.fed = False                           # whether the drafter has run this request
        self.judged = False                        # whether the last step matched prompt lookup
        self.rows, self.prompt_lengths = rows, list(lengths)   # the starting batch: these stay
        # per row: (estimate, path, chain, held) that the row's next token judges further
        self.pending: list[list[tuple]] = [[] for _ in lengths]
        self._reset(rows)

    def _reset(self, rows: int) -> None:
        """Before each step: one that never reaches :meth:`propose` (no room to draft) is plain."""
        self.choice = PLAIN
        self.expected = float(rows)
        self.started = None
        self.drafted = False
        self.ahead = [0.0] * rows                  # per row, tokens past the batch's last row
        self.continuations: list[list[int]] = [[]] * rows     # none matched (never appended to)

    def propose(self, last, depths):
        self.started = time.perf_counter()
        if self.timed is not None:                 # the last step, from its start to this one's
            kind, started, predicted = self.timed
            self.costs.observe(kind, self.started - started, predicted)
            if self.rows == 1:                     # one request's costs are measured again on drift
                self.drifted |= self.costs.drift.observe(self.started - started, predicted)
        if self.quiet:                             # a quiet spell's step: plain, nothing chosen
            self.quiet -= 1
            self.chosen.append(PLAIN)
            return [self.no_draft] * len(depths)
        lasts = last.tolist()                      # one host read, for the judging and the match
        if any(self.pending):                      # each row's last token judges its pending drafts
            self.observe_pending(lasts)
        context = sum(self.context) // len(self.context)
        waiting = max(self.waited)          # what a drafter forward would take in: the widest row
        # the rows that can hold the batch up: not finished, not at their last token
        self.ahead = [e if d else math.inf for e, d in zip(self.emitted, depths)]

        def rate(continuations):
            return choose(self.estimate, self.costs, self.options, continuations, context,
                          max(depths), waiting, self.ahead, self.drafting)
        # one row matches prompt lookup every step (cheap there): the target's next token then
        # judges its draft. A batch matches only where lookup can win: if it loses with every
        # row's longest continuation, it loses with any, and the choice stands as made
        matched = self.lookup is not None and self.rows == 1
        if not matched:
            c, self.expected = rate([min(d, self.options.ngram_drafts) for d in depths])
            matched = self.lookup is not None and c.ngram > 0
        if matched:
            read_in(self.lookup, self.unread)   # every row's tokens since its last match
            self.unread = [[] for _ in self.unread]
            self.continuations = [x.continuation(t, min(d, self.options.ngram_drafts))
                                  for x, t, d in zip(self.lookup, lasts, depths)]
            # a batch verifies lookup's drafts only on a step after one that matched them
            runs = self.rows == 1 or self.judged
            c, self.expected = rate([len(x) if runs else 0 for x in self.continuations])
        self.judged = matched
        # every draft loses at this batch (drafter off, lookup's best case beaten): a quiet spell
        if c.kind == "plain" and not (matched or self.drafting) and self.rows > 1:
            self.quiet = self.options.quiet_steps
        # a batch times plain decoding, the line every draft must beat and the machine's pace
        if 1 < len(depths) == self.rows and self.costs.timed and "plain" not in self.costs.timed:
            c, self.expected = PLAIN, float(len(depths))
        self.choice = c
        self.chosen.append(c)
        if c.kind == "plain":                      # one empty draft serves every row
            return [self.no_draft] * len(depths)
        if not c.uses_drafter:                     # prompt lookup's
            return [ChainDraft(torch.tensor(x[: c.ngram], dtype=torch.long, device=last.device))
                    for x in self.continuations]
        # the drafter takes in every row's features since its last forward
        self.new_context = stack_padded([torch.cat(w, dim=1) for w in self.waiting])
        self.new_context_start = list(self.waiting_start)
        self.new_context_lengths = list(self.waited)
        # a forward that catches the drafter up (the prompt, or steps that ran no drafter) is not
        # what a step of its kind costs: it is not timed
        self.catching_up = not self.fed or any(len(w) > 1 for w in self.waiting)
        self.drafted = True
        self.fed = True
        depths = [min(d, c.block_size - 1) for d in depths]
        if c.tree_size:
            self.trees = draft_trees(self, last, depths, c.tree_size)
            if c.ngram:                            # the hybrid tree: lookup's draft as a branch
                self.trees = [add_branch(t, x[: c.ngram])
                              for t, x in zip(self.trees, self.continuations)]
            return self.trees
        self.proposed = DFlashProposer.propose(self, last, depths)
        return self.proposed

    def accepted(self, blocks, positions, features) -> None:
        c, e, o, kind = self.choice, self.estimate, self.options, self.choice.kind
        context = sum(self.context) // len(self.context)
        # the step's forwards, as the model says, with the context its drafter took in
        taken = max(self.new_context_lengths) if self.drafted else 1
        cost = step_seconds(c, self.costs, context, taken)
        predicted = cost / self.costs.correction(kind)
        self.forecast.append(predicted)
        # timed when the next step starts, and only while the batch is whole: the costs are its
        whole = self.started is not None and self.costs.measured and len(blocks) == self.rows \
            and not (self.drafted and self.catching_up)
        self.timed = (kind, self.started, predicted) if whole else None
        # in a batch, what the step moved the batch against what the estimates expected (one
        # row's estimate is that row's own counts: a ratio on it lowered tau)
        if self.rows > 1 and self.costs.measured:
            plain = kind == "plain"                # the line the others are judged against
            moved = 0.0 if plain else counted(self.ahead, [b.shape[1] for b in blocks])
            slower = 1.0 if plain else cost / step_seconds(PLAIN, self.costs, context)
            self.costs.observe_yield(kind, moved, self.expected, len(blocks), slower)
        looked = e.ngram is not None and any(self.continuations)
        e.decay(o.decay if self.drafted else o.idle_decay, o.decay if looked else o.idle_decay)
        for r, (block, position, hidden) in enumerate(zip(blocks, positions, features)):
            n = block.shape[1] - 1
            if n < 0:                               # a finished row kept as padding
                continue
            if self.continuations[r] or kind != "plain":     # else nothing to observe
                self.pending[r] = self._observe(r, block[0, 1:].tolist(), n)
            if self.drafted:
                self.waiting[r] = [hidden]
                self.waiting_start[r] = position
                self.waited[r] = 0
            elif self.drafting:                     # no drafter forward: the features wait
                self.waiting[r].append(hidden)
            self.waited[r] += n + 1
            self.context[r] = position + n + 1
            self.emitted[r] += n + 1
            if self.lookup is not None:             # read in at lookup's next match
                self.unread[r].append(block)
        # every kind that runs the drafter lost and rests: it will not run in this request
        if self.drafting and self.costs.rests_all(DRAFTER_KINDS):
            self.drafting = False
            self.layer_ids = None
            self.waiting = [[] for _ in self.waiting]
        self._reset(len(blocks))

    def _observe(self, r: int, path: list[int], n: int) -> list[tuple]:
        """Tell the estimates what row ``r``'s step (``path``: its n accepted drafts) says; return
        what its next token judges further, the drafter's and lookup's (:func:`chain_accepted`)."""
        c, e, pending = self.choice, self.estimate, []
        lookup, drafts = self.continuations[r], []
        if c.tree_size:
            tree = self.trees[r]
            e.observe_tree(c.tree_size, n + 1, hybrid=bool(c.ngram))
            # what the chain would have done in the same step
            pending.append((e, path, tree.chain, tree.path_length(tree.chain)))
        elif c.kind == "chain":
            drafts = self.proposed[r].tokens.tolist()
            e.observe_chain(n, min(n + 1, len(drafts)))   # 1..n accepted, n+1 (if any) rejected
        if e.ngram is not None and lookup:          # how far prompt lookup's tokens would have gone
            held = (self.trees[r].path_length(lookup) if c.tree_size
                    else {"plain": 0, "ngram": min(c.ngram, len(lookup)),
                          "chain": _common_prefix(drafts, lookup)}[c.kind])
            pending.append((e.ngram, path, lookup, held))
        return pending

    def observe_pending(self, next_tokens: list[int] | None = None,
                        rows: list[int] | None = None) -> None:
        """Each row's (of ``rows``; None: all) last step's chains, each (estimate, path, chain,
        held), judged up to ``next_tokens[r]``, the target's token after its path
        (:func:`chain_accepted`; None, at a request's end: as far as the step judged)."""
        for r in range(len(self.pending)) if rows is None else rows:
            token = None if next_tokens is None else next_tokens[r]
            for estimate, path, chain, held in self.pending[r]:
                estimate.observe_chain(*chain_accepted(path, chain, held, token))
            self.pending[r] = []

    def keep(self, index: list[int]) -> None:
        self.timed = None                        # rows leaving is no step's cost
        # a finished row's last drafts, as far as held
        self.observe_pending(rows=[r for r in range(len(self.pending)) if r not in index])
        super().keep(index)
        for name in ("waiting", "waiting_start", "waited", "context", "pending", "continuations",
                     "emitted", "unread") + (("lookup",) if self.lookup is not None else ()):
            setattr(self, name, [getattr(self, name)[i] for i in index])
