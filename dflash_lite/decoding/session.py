"""What outlives one request of the cost-aware policy: :class:`PolicySession`, its costs and
estimates; the default's options, and :func:`default_policy`, what ``Engine`` and ``bench`` run."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .choice import DRAFTER_KINDS, PolicyOptions
from .costs import StepCosts, step_costs
from .estimate import AcceptanceEstimate
from .policy import CostAwareProposer
from .shapes import EAGER, Shapes


@dataclass
class PolicySession:
    """What outlives one request, kept by the owner of the target (an ``Engine``, a benchmark row):
    the step costs of each batch size and the acceptance estimates the last request left, for the
    next at any batch size. ``recalibrate``: measure one row's costs again when they drifted."""
    drafter: object
    target: object
    options: PolicyOptions
    costs: StepCosts | None = None             # one row's
    estimate: AcceptanceEstimate | None = None
    recalibrate: bool = True
    calibration_seconds: float = 0.0           # every measurement of the costs so far
    batch_costs: dict = field(default_factory=dict)      # rows (> 1) -> StepCosts

    def costs_for(self, rows: int) -> StepCosts | None:
        return self.costs if rows == 1 else self.batch_costs.get(rows)

    def proposer(self, prompts: torch.Tensor | list[torch.Tensor] | None = None,
                 shapes: Shapes = EAGER, rows: int | None = None) -> CostAwareProposer:
        """The next request's policy, on ``shapes``, for ``prompts``: one prompt's ids or a batch's
        list of them (``rows``: how many where none are given; default 1). A batch size's costs are
        measured at its first prompt the first time; its first step at the prompts' mean length."""
        batch = prompts if isinstance(prompts, list) else [] if prompts is None else [prompts]
        rows = rows or len(batch) or 1
        if batch and self.costs_for(rows) is None:
            self._measure(batch[0], rows=rows)
        costs = self.costs_for(rows)
        # a batch size's first request: the drafter as it stood at the next smaller batch size
        if rows > 1 and costs is not None and not costs.steps:
            below = max((n for n, c in self.batch_costs.items() if n < rows and c.steps),
                        default=None)
            if below:
                costs.carry(self.batch_costs[below], DRAFTER_KINDS, rows / below)
        context = sum(x.shape[-1] for x in batch) // len(batch) if batch else None
        return CostAwareProposer(self.drafter, self.target, self.options, costs, self.estimate,
                                 shapes, context)

    def finished(self, proposer: CostAwareProposer,
                 sequence_ids: torch.Tensor | None = None) -> None:
        """Keep what ``proposer`` learned; for one request, measure the costs again (at its prompt
        and at ``sequence_ids``, its prompt and output) when they drifted."""
        proposer.observe_pending()
        self.estimate = proposer.estimate
        rows = proposer.rows
        if rows > 1:                   # a request that never drafted: the next taps only to draft
            proposer.costs.drafter_idle = not proposer.fed
        if self.costs_for(rows) is None:
            self._keep(rows, proposer.costs)
        elif rows == 1 and proposer.drifted and self.recalibrate and sequence_ids is not None:
            self._measure(sequence_ids[:, : proposer.prompt_lengths[0]], sequence_ids, repeats=3)

    def _keep(self, rows: int, costs: StepCosts) -> None:
        self.calibration_seconds += costs.calibration_seconds
        if rows == 1:
            self.costs = costs
        else:
            self.batch_costs[rows] = costs

    def _measure(self, ids: torch.Tensor, longer: torch.Tensor | None = None,
                 repeats: int = 7, rows: int = 1) -> None:
        o = self.options
        block = o.max_block_size or self.drafter.config.block_size
        self._keep(rows, step_costs(self.target, self.drafter, ids, block, o.tree_sizes, repeats,
                                    longer, rows=rows))


DEFAULT_TREE_SIZES = (16,)      # the tree the default may choose; measured on the probe split
DEFAULT_NGRAM_DRAFTS = 10       # prompt lookup's drafts per step (prompt_lookup_num_tokens)
DEFAULT_OPTIONS = PolicyOptions(tree_sizes=DEFAULT_TREE_SIZES, ngram_drafts=DEFAULT_NGRAM_DRAFTS)
NO_NGRAM_OPTIONS = PolicyOptions(tree_sizes=DEFAULT_TREE_SIZES)


def default_policy(drafter, target, costs: StepCosts | None = None,
                   estimate: AcceptanceEstimate | None = None) -> CostAwareProposer:
    """The policy of ``Engine.generate``, ``demo`` and ``bench``'s headline row."""
    return CostAwareProposer(drafter, target, DEFAULT_OPTIONS, costs, estimate)
