"""What a DFlash step costs (paper section 3; docs/method.md#the-cost-model): the forwards measured
(:func:`step_costs`), the model of every size and context length that the cost-aware policy reads
(:class:`StepCosts`), whether it still fits (:class:`DriftMonitor`), the benchmark's record
(:func:`measure_costs`) and :func:`predicted_speedup`."""
from __future__ import annotations

import math
import statistics
import time
from collections import deque

import torch

from .cache import SlotCache
from .decode import prefill, verify
from .timing import interleaved

EXTRA_CONTEXT = 256          # step_costs' second context length: the prompt's + this many
DRIFT_WINDOW = 8             # steps in the running median of measured / predicted step time
DRIFT_MARGIN = 1.3           # that median may move this far either way before the model is stale
EXPLORE = 0.05               # in a batch, the most of its time a kind that lost spends trying again
BACKOFF = 5                  # ... halved after each loss in a row, at most this many times


def _fit(points: dict[int, float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y), slope clamped at >= 0, so that
    timing noise can never make a longer block or a longer context look cheaper."""
    n = len(points)
    mean_x, mean_y = sum(points) / n, sum(points.values()) / n
    spread = sum((x - mean_x) ** 2 for x in points)
    slope = (max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in points.items()) / spread)
             if spread else 0.0)
    return mean_y - slope * mean_x, slope


class StepCosts:
    """Seconds of a target forward over b tokens and a drafter forward over a block of b, measured
    ({b: s}) at one context length or several (:meth:`by_context`), as a model of any b and context
    (:meth:`target`, :meth:`draft`). ``per_position``: what each new context position past the
    first adds to a drafter forward; ``calibration_seconds``: what measuring took; ``rows``: the
    batch size. Only ``measured`` costs (seconds here, :func:`step_costs`) learn from timed steps;
    hand-written ones (in other units, as in the tests) are taken as they are."""

    def __init__(self, t_target: dict[int, float], t_draft: dict[int, float],
                 context_length: int = 0, calibration_seconds: float = 0.0,
                 measured: bool = False, per_position: float = 0.0, rows: int = 1):
        self.calibration_seconds, self.measured = calibration_seconds, measured
        self.per_position, self.rows = per_position, rows
        self._model({context_length: (t_target, t_draft)})

    @classmethod
    def by_context(cls, tables: dict[int, tuple[dict, dict]], calibration_seconds: float = 0.0,
                   measured: bool = False, per_position: float = 0.0, rows: int = 1) -> StepCosts:
        """From ``{context_length: (t_target, t_draft)}`` measured at each length."""
        first = min(tables)
        costs = cls(*tables[first], first, calibration_seconds, measured, per_position, rows)
        costs._model(tables)
        return costs

    def _model(self, tables: dict[int, tuple[dict, dict]]) -> None:
        self.tables = {n: (dict(sorted(t.items())), dict(sorted(d.items())))
                       for n, (t, d) in sorted(tables.items())}
        self.drift = DriftMonitor()
        self.timed: dict[str, list[float]] = {}     # per kind: decayed [measured, predicted] s
        self._ratios: dict[str, float] = {}         # correction() per kind (asked per option)
        # per kind: decayed tokens its batch steps committed, what the estimates expected and what
        # plain decoding would have committed in the same time; then their prior
        self.yields: dict[str, list[float]] = {}
        self.steps = 0                             # batch steps observed
        self.resting: dict[str, int] = {}          # kind -> the batch step its rest ends at
        self.losses: dict[str, int] = {}           # kind -> its tries lost in a row
        self.drafter_idle = False                  # the last batch request never ran the drafter
        # per length: the target line (b > 1), the draft line, one target token
        lines = {n: (_fit({b: t for b, t in t_target.items() if b > 1} or t_target),
                     _fit(t_draft), t_target.get(1))
                 for n, (t_target, t_draft) in self.tables.items()}
        # each coefficient as a line in the context length: (intercept, slope) per coefficient
        self._target = [_fit({n: line[0][i] for n, line in lines.items()}) for i in (0, 1)]
        self._draft = [_fit({n: line[1][i] for n, line in lines.items()}) for i in (0, 1)]
        ones = {n: line[2] for n, line in lines.items() if line[2] is not None}
        self._one = _fit(ones) if ones else None
        # the fastest forward of each model measured: no prediction goes below it
        self._floor = [min((x for tables in self.tables.values() for x in tables[i].values()),
                           default=0.0) for i in (0, 1)]

    @property
    def t_target(self) -> dict[int, float]:
        """The measured target seconds at the shortest measured context length."""
        return next(iter(self.tables.values()))[0]

    @property
    def t_draft(self) -> dict[int, float]:
        return next(iter(self.tables.values()))[1]

    @property
    def context_lengths(self) -> list[int]:
        return list(self.tables)

    def target(self, b: int, context: int | None = None) -> float:
        """Seconds of a target forward of b tokens after ``context`` cached ones (None: fewest)."""
        n = self.context_lengths[0] if context is None else context
        one = None if self._one is None else max(self._one[0] + self._one[1] * n, self._floor[0])
        if b == 1 and one is not None:
            return one
        (a0, a1), (s0, s1) = self._target
        return max((a0 + a1 * n) + (s0 + s1 * n) * b, self._floor[0] if one is None else one)

    def observe(self, kind: str, measured: float, predicted: float, decay: float = 0.95) -> None:
        """A step of ``kind`` (the policy's option kinds) took ``measured`` seconds where the
        forwards alone were predicted to take ``predicted``. In a batch, plain decoding's steps
        give the machine's pace; every other kind is kept against the pace of its own steps, so a
        machine that slows down or speeds up moves every kind's cost alike, not only the kind it
        runs (and one slow moment in plain's timing cannot price it out: the drafts pay it too)."""
        if kind == "plain" and self.rows > 1 and "plain" not in self.timed:   # the others' records,
            self.timed.clear()                               # kept without a pace, start again
        sums = self.timed.setdefault(kind, [0.0, 0.0])
        sums[0] = sums[0] * decay + measured
        sums[1] = sums[1] * decay + predicted * (1.0 if kind == "plain" else self.pace or 1.0)
        self._ratios.clear()

    @property
    def pace(self) -> float | None:
        """A batch's plain decoding's measured / predicted seconds (None: not timed, or one row,
        where plain decoding is timed on few steps, and its ratio is its own)."""
        sums = self.timed.get("plain") if self.rows > 1 else None
        return sums[0] / sums[1] if sums and sums[1] > 0 else None

    def observe_yield(self, kind: str, committed: float, expected: float, rows: int = 0,
                      slower: float = 1.0, decay: float = 0.9, idle_decay: float = 0.98) -> None:
        """A batch step of ``kind`` moved its ``rows`` rows by ``committed`` tokens
        (``choice.counted``) where the estimates expected ``expected``, and cost ``slower`` times a
        plain step; other kinds' records fade by ``idle_decay``. A kind that moved the batch less
        than plain decoding would have rests (docs/method.md#batches). Plain keeps no record."""
        self.steps += 1
        for other, sums in self.yields.items():
            if other != kind:                              # the prior (last) does not fade
                sums[:3] = [x * idle_decay for x in sums[:3]]
        if kind == "plain":
            return
        sums = self.yields.setdefault(kind, [0.0, 0.0, 0.0, 2.0 * expected])  # prior: 2 steps of 1
        sums[:3] = [x * decay + y for x, y in zip(sums, (committed, expected, rows * slower))]
        if sums[0] >= sums[2]:
            self.losses[kind] = 0
            return
        lost = self.losses[kind] = self.losses.get(kind, 0) + 1
        self.resting[kind] = self.steps + math.ceil((slower - 1) / EXPLORE) * 2 ** min(lost - 1,
                                                                                     BACKOFF)

    def carry(self, smaller: StepCosts, kinds, scale: float) -> None:
        """Start the record of those of ``kinds`` whose last step lost in ``smaller`` (a smaller
        batch size's costs) where it stands there: yields (x ``scale``, rows here over rows
        there), runs of losses and what is left of rests (docs/method.md#batches)."""
        lost = [k for k in kinds if smaller.losses.get(k)]
        self.yields = {k: [x * scale for x in smaller.yields[k]] for k in lost}
        self.losses = {k: smaller.losses[k] for k in lost}
        self.resting = {k: max(0, smaller.resting[k] - smaller.steps) for k in lost}
        self.steps = 0

    def rests(self, kind: str) -> bool:
        """Whether ``kind`` lost in a batch and still rests (:meth:`observe_yield`); a tree whose
        last step here did not pay (or that never ran here) also rests while the chain does."""
        return self.steps < self.resting.get(kind, 0) or (
            kind == "tree" and self.losses.get("tree") != 0 and self.rests("chain"))

    def lost(self, kinds) -> bool:
        """Whether the last batch step of any of ``kinds`` lost."""
        return any(self.losses.get(kind, 0) for kind in kinds)

    def rests_all(self, kinds) -> bool:
        """Whether every one of ``kinds`` that ran in a batch lost and rests (and one did)."""
        ran = [kind for kind in kinds if kind in self.yields]
        return bool(ran) and all(self.rests(kind) for kind in ran)

    def yield_ratio(self, kind: str) -> float:
        """committed / expected tokens of the batch steps of ``kind`` so far, pulled towards 1 by a
        prior of two steps' worth (1 before any)."""
        committed, expected, _, prior = self.yields.get(kind, (0.0, 0.0, 0.0, 1.0))
        return (committed + prior) / (expected + prior)

    def correction(self, kind: str) -> float:
        """measured / predicted seconds of the steps of ``kind`` timed so far (in a batch, at the
        machine's pace now: :meth:`observe`); a kind never timed takes the ratio over the others
        (1 before any step). Kept until the next :meth:`observe`."""
        if kind not in self._ratios:
            pace = self.pace            # untimed: the others' pooled ratio (paced: the drafts')
            measured, predicted = self.timed.get(kind) or [sum(x) for x in zip(*(
                sums for k, sums in self.timed.items() if not (pace and k == "plain")))] \
                or (1.0, 1.0)
            self._ratios[kind] = pace if kind == "plain" and pace else \
                (pace or 1.0) * (measured / predicted if predicted > 0 else 1.0)
        return self._ratios[kind]

    def draft(self, b: int, context: int | None = None, new: int = 1) -> float:
        """Seconds of a drafter forward of b positions taking in ``new`` ones (0 for b <= 1)."""
        if b <= 1:
            return 0.0
        n = self.context_lengths[0] if context is None else context
        (a0, a1), (s0, s1) = self._draft
        line = max((a0 + a1 * n) + (s0 + s1 * n) * b, self._floor[1])
        return line + self.per_position * (new - 1)


class DriftMonitor:
    """Whether the cost model still describes the steps it is used for: the first ``window``
    measured / predicted ratios set the reference, and the model has drifted once the running
    median of the last ``window`` leaves [reference / ``margin``, reference x ``margin``]."""

    def __init__(self, window: int = DRIFT_WINDOW, margin: float = DRIFT_MARGIN):
        self.recent: deque[float] = deque(maxlen=window)
        self.margin = margin
        self.reference = None

    def observe(self, measured: float, predicted: float) -> bool:
        """Record one step; True when the model has drifted."""
        if predicted <= 0 or measured <= 0:
            return False
        self.recent.append(measured / predicted)
        if len(self.recent) < self.recent.maxlen:
            return False
        median = statistics.median(self.recent)
        if self.reference is None:
            self.reference = median
            return False
        return not self.reference / self.margin <= median <= self.reference * self.margin


@torch.inference_mode()
def measure_step_costs(target, drafter, prompt_ids: torch.Tensor, target_sizes, draft_sizes,
                       repeats: int = 5, rows: int = 1, new_context: int = 1) -> dict:
    """Median seconds, interleaved, at the prompt's context length for ``rows`` rows: target
    forwards over b tokens (``target_sizes``), drafter forwards over blocks of b (``draft_sizes``)
    taking in one context position, and with ``new_context`` > 1 the largest block taking in that
    many. ``{"t_target": {b: s}, "t_draft": {b: s}, "per_position": s}``, the last what each
    position past the first added (0 unless measured; never below 0)."""
    device, length = target.device, prompt_ids.shape[1]
    ids = prompt_ids.to(device).expand(rows, -1)
    layer_ids, mask_id = drafter.config.target_layer_ids, drafter.config.mask_token_id
    cache = SlotCache.for_target(target, rows=rows)
    _, features = prefill(target, ids, cache, layer_ids, [length] * rows)
    dcache = SlotCache(drafter.config.num_layers, rows=rows, device=device)
    drafter.draft_logits(target, torch.full((rows, 2), mask_id, device=device), features[:, :-1],
                         0, dcache)

    def target_step(b):             # b tokens after the prompt; the next one overwrites them
        cache.rewind(length)
        verify(target, ids[:, -1:].expand(rows, b), cache, layer_ids)

    def draft_step(b, new=1):       # the last ``new`` context positions, written at their slots
        drafter.draft_logits(target, torch.full((rows, b), mask_id, device=device),
                             features[:, -new:], length - new, dcache)

    fns = {("target", b): (lambda b=b: target_step(b)) for b in sorted(set(target_sizes))}
    fns.update({("draft", b): (lambda b=b: draft_step(b)) for b in sorted(set(draft_sizes))})
    new_context = min(new_context, length - 1)
    if new_context > 1 and draft_sizes:
        block = max(draft_sizes)
        fns["wide", new_context] = lambda: draft_step(block, new_context)
    timed = interleaved(fns, repeats, warmup=1, device=device)
    medians = {name: statistics.median(t for t, _ in calls) for name, calls in timed.items()}
    wide = medians.get(("wide", new_context))
    per_position = 0.0 if wide is None else \
        max(0.0, (wide - medians["draft", block]) / (new_context - 1))
    return {"t_target": {b: t for (kind, b), t in medians.items() if kind == "target"},
            "t_draft": {b: t for (kind, b), t in medians.items() if kind == "draft"},
            "per_position": per_position}


def longer_context(target, ids: torch.Tensor, extra: int = EXTRA_CONTEXT) -> torch.Tensor:
    """``ids`` (1, T) repeated to T + ``extra`` tokens, kept inside the target's context with room
    for a block: the second length :func:`step_costs` measures at."""
    limit = getattr(target.config, "max_position_embeddings", None) or ids.shape[1] + extra + 128
    length = max(ids.shape[1], min(ids.shape[1] + extra, limit - 128))
    return ids.repeat(1, -(-length // ids.shape[1]))[:, :length]


def step_costs(target, drafter, prompt_ids: torch.Tensor, max_block_size: int, tree_sizes=(),
               repeats: int = 7, longer_ids: torch.Tensor | None = None,
               rows: int = 1) -> StepCosts:
    """:func:`measure_step_costs` on a grid of sizes up to ``max_block_size`` (and N+1, N+1+B for
    each tree size N: a tree alone, or with a prompt-lookup branch) at two context lengths: the
    prompt's and ``longer_ids``' (default :func:`longer_context`); ``rows``: the batch size (every
    row the same prompt). ``per_position``: at the prompt, the largest block taking in a block's
    worth. It takes seconds (``calibration_seconds``): measure once, pass it to every policy."""
    started = time.perf_counter()
    grid = sorted({b for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) if b < max_block_size}
                  | {max_block_size})
    wide = {n + 1 for n in tree_sizes} | {n + max_block_size for n in tree_sizes}
    longer = longer_context(target, prompt_ids) if longer_ids is None else longer_ids
    tables = {}
    per_position = None
    for ids in (prompt_ids, longer):
        measured = measure_step_costs(target, drafter, ids, set(grid) | wide,
                                      [b for b in grid if b > 1], repeats, rows,
                                      max_block_size if per_position is None else 1)
        tables[ids.shape[1]] = (measured["t_target"], measured["t_draft"])
        per_position = measured["per_position"] if per_position is None else per_position
    return StepCosts.by_context(tables, time.perf_counter() - started, measured=True,
                                per_position=per_position, rows=rows)


@torch.inference_mode()
def measure_costs(target, drafter, prompt_ids: torch.Tensor, block_sizes=(16,), repeats: int = 10,
                  tree_sizes=(), rows: int = 1) -> dict:
    """Median seconds of the three forwards a DFlash step is made of, at the prompt's context
    length (:func:`measure_step_costs`): ``t_target[b]`` (b = 1: one autoregressive step; N+1: a
    tree of N drafts), ``t_draft[b]`` (a tree is drafted with the drafter's own block size) and
    ``per_position``, at the largest block; sizes as strings, as the benchmark's JSON has them."""
    tree_block = drafter.config.block_size
    drafts = {*block_sizes, *((tree_block,) if tree_sizes else ())}
    measured = measure_step_costs(target, drafter, prompt_ids,
                                  {1, *block_sizes, *(n + 1 for n in tree_sizes)}, drafts,
                                  repeats, rows, max(drafts, default=1))
    return {"context_length": prompt_ids.shape[1], "repeats": repeats, "batch_size": rows,
            "tree_block_size": tree_block, "per_position": measured["per_position"],
            "t_target": {str(b): t for b, t in measured["t_target"].items()},
            "t_draft": {str(b): t for b, t in measured["t_draft"].items()}}


def predicted_speedup(tau: float, t_target_1: float, t_target_b: float, t_draft_b: float) -> float:
    """The paper's cost model: tau tokens per step, one step costs a verify plus a draft."""
    return tau * t_target_1 / (t_target_b + t_draft_b)
