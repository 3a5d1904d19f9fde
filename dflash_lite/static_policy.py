"""The cost-aware policy on the static-shape path (docs/method.md#the-cost-aware-policy).

The eager policy (:mod:`dflash_lite.policy`) picks each step's draft from chains of every length,
trees, prompt lookup and hybrid trees. On the static path every verify width is a recorded graph,
so the menu is fixed to the widths the decoder was built with: plain decoding (width 1), the
DFlash chain of B (width B) and, when it has one, the draft tree of N nodes (width N + 1). Each is
rated as :func:`dflash_lite.policy.choose` rates it: the :class:`~dflash_lite.policy.AcceptanceEstimate`'s
expected tokens over :func:`~dflash_lite.policy.step_seconds` under the step costs.

The drafter forward runs at the end of the step before (its logits are the next step's drafts),
so that is where the next step is chosen: a plain step skips the drafter forward, and the
features of the positions it commits wait for the next one that runs. Every draft is a point
mass and the choice depends only on committed tokens, so every choice is lossless, at every
temperature. The static path does not time its steps (that would add host syncs), so the costs are
taken as they are given, with no drift check.
"""
from __future__ import annotations

from dataclasses import replace

from .costs import StepCosts
from .policy import AcceptanceEstimate, Choice, PolicyOptions, chain_accepted, step_seconds
from .tree import DraftTree


class StaticPolicy:
    """Chooses each static step from the decoder's menu. ``costs``: a :class:`~dflash_lite.costs.StepCosts`
    (``costs.step_costs``; hand-written ones work too); ``options``: the decays, prior and tree prior
    of the eager policy (its block and tree sizes are the decoder's); ``estimate``: what an earlier
    request left (decayed by ``options.request_decay`` at :meth:`start`; None: the prior).
    ``chosen``: the current request's choices, one per step."""

    def __init__(self, costs: StepCosts, options: PolicyOptions = PolicyOptions(),
                 estimate: AcceptanceEstimate | None = None):
        self.costs, self.options, self.estimate = costs, options, estimate
        self.menu: list[Choice] = [Choice(1)]
        self.chosen: list[Choice] = []

    def start(self, block_size: int, tree_size: int | None) -> None:
        """A new request on a decoder with chains of ``block_size`` and trees of ``tree_size``."""
        self.options = replace(self.options, max_block_size=block_size, tree_sizes=(tree_size,) if tree_size else ())
        self.menu = [Choice(1), Choice(block_size)] + ([Choice(block_size, tree_size)] if tree_size else [])
        if self.estimate is None:
            self.estimate = AcceptanceEstimate.for_options(self.options)
        else:                                           # what earlier requests learned, at a discount
            self.estimate.decay(self.options.request_decay)
        self.chosen = []

    def choose(self, context_length: int, depth: int) -> Choice:
        """The menu's option with the most expected tokens per second of step, for a step after
        ``context_length`` tokens that may keep up to ``depth`` drafts. Ties go to the cheaper one."""
        if depth == 0:
            return Choice(1)
        e, gain = self.estimate, self.options.tree_prior_gain
        expected = {"plain": 1.0, "chain": e.expected_tokens()[min(depth, e.depth)]}
        rates = []
        for c in self.menu:
            tokens = e.expected_tree_tokens(c.tree_size, gain, depth) if c.tree_size else expected[c.kind]
            rates.append(tokens / step_seconds(c, self.costs, context_length))
        return self.menu[rates.index(max(rates))]

    def observe(self, choice: Choice, drafts: list[int], n: int, tree: DraftTree | None = None) -> None:
        """What a step of ``choice`` tells the estimate: ``drafts`` the chain it verified (a tree
        step: the accepted path's tokens), of which the first ``n`` were accepted."""
        e = self.estimate
        self.chosen.append(choice)
        e.decay(self.options.decay if choice.uses_drafter else self.options.idle_decay)
        if tree is not None:                            # and what the chain would have done in the same step
            e.observe_tree(choice.tree_size, n + 1)
            e.observe_chain(*chain_accepted(drafts[:n], tree.chain, tree.path_length(tree.chain)))
        elif choice.kind == "chain":                    # drafts 1..n accepted; draft n+1 (if there was one) rejected
            e.observe_chain(n, min(n + 1, len(drafts)))
