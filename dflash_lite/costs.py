"""What a DFlash step costs (paper section 3; docs/method.md#the-cost-model).

A step is one drafter forward over a block of b and one target forward over b tokens; it commits
tau tokens where plain decoding commits one per target forward, so the predicted speedup is
``tau * t_target(1) / (t_target(b) + t_draft(b))`` (:func:`predicted_speedup`). Here:
the forwards measured (:func:`measure_step_costs`, interleaved so that load drift hits every size
alike), :class:`StepCosts` (those seconds, and a line through them for every other size) that
the cost-aware policy (:mod:`dflash_lite.policy`) reads, and :func:`measure_costs`, the
benchmark's record of the same forwards.
"""
from __future__ import annotations

import statistics

import torch

from .decode import crop_cache, new_cache, verify
from .drafter import DrafterCache
from .timing import interleaved


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
    size N). Measuring takes a few seconds: the owner of the target (an ``Engine``, a benchmark
    method) measures once and passes the result to every policy it builds."""
    grid = sorted({b for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) if b < max_block_size} | {max_block_size})
    measured = measure_step_costs(target, drafter, prompt_ids, set(grid) | {n + 1 for n in tree_sizes},
                                  [b for b in grid if b > 1], repeats)
    return StepCosts(measured["t_target"], measured["t_draft"])


@torch.inference_mode()
def measure_costs(target, drafter, prompt_ids: torch.Tensor, block_sizes=(16,), repeats: int = 10,
                  tree_sizes=()) -> dict:
    """Median seconds of the three forwards a DFlash step is made of, at the prompt's context length:
    ``t_target[b]``, one target forward over b new tokens (b = 1 is one autoregressive step; N+1 for a
    tree of N drafts), and ``t_draft[b]``, one drafter forward over a block of b (one new context
    position, as in a step; a tree is drafted with the drafter's own block size)."""
    tree_block = drafter.config.block_size
    measured = measure_step_costs(target, drafter, prompt_ids, {1, *block_sizes, *(n + 1 for n in tree_sizes)},
                                  {*block_sizes, *((tree_block,) if tree_sizes else ())}, repeats)
    # keys are strings, as they will be in the JSON
    return {"context_length": prompt_ids.shape[1], "repeats": repeats, "tree_block_size": tree_block,
            "t_target": {str(b): t for b, t in measured["t_target"].items()},
            "t_draft": {str(b): t for b, t in measured["t_draft"].items()}}


def predicted_speedup(tau: float, t_target_1: float, t_target_b: float, t_draft_b: float) -> float:
    """The paper's cost model: tau tokens per step, one step costs a verify plus a draft."""
    return tau * t_target_1 / (t_target_b + t_draft_b)
