"""The batch sweep of ``bench --batch-sizes`` (docs/method.md#batches, "The cost model at batch
b"): every method (:func:`batch_methods`) at each batch size (:func:`sweep`), with the cost model's
predictions beside it (:func:`_predicted`, :func:`_with_host`)."""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from ..decoding.acceptance import SamplingParams
from ..decoding.baselines import NoDraftProposer
from ..decoding.costs import StepCosts, measure_costs, predicted_speedup, step_costs
from ..decoding.cache import SlotCache
from ..decoding.decode import DFlashProposer, PerRow, generate, prefill
from ..decoding.ngram import NgramProposer
from ..decoding.session import DEFAULT_OPTIONS, PolicySession
from ..decoding.proposers import stack_padded
from ..decoding.shapes import EAGER, Shapes
from ..decoding.timing import interleaved
from ..decoding.tree import DFlashTreeProposer
from .report import Kind

PAYS = 1.2  # the batch after which drafting counts as no longer paying (the 1.2x line)


@dataclass
class BatchMethod:
    """One row of the sweep: ``make(prompts)`` builds a fresh proposer for a batch, and
    ``finish(proposer)``, when given, keeps what it learned for the next batch; ``rollback`` as
    :func:`dflash_lite.decoding.decode.steps` takes it."""
    name: str
    kind: Kind
    make: Callable
    block_size: int | None = None
    tree_size: int | None = None
    rollback: str = "row"
    default: bool = False
    finish: Callable | None = None


def batch_methods(target, drafter, block_sizes=(16,), tree_size: int | None = 16,
                  shapes: Shapes = EAGER, size: int = 1, costs: StepCosts | None = None,
                  session: PolicySession | None = None) -> list[BatchMethod]:
    """The sweep's methods at batch ``size``, on ``shapes``: batched plain decoding, prompt lookup
    and, with a drafter, DFlash at each block size, the draft tree, the default policy (in
    ``session``, None: a new one, kept across the sweep; on ``costs`` if size > 1) and the naive
    rollback (DFlash at the largest block size, every row rolled back to the batch's shortest)."""
    rows = [BatchMethod("plain (batched)", Kind.AUTOREGRESSIVE,
                        lambda ids: NoDraftProposer(shapes), 1),
            BatchMethod("prompt lookup k=10", Kind.NGRAM,
                        lambda ids: PerRow(NgramProposer(10, shapes=shapes)))]
    if drafter is None:
        return rows
    rows += [BatchMethod(f"DFlash B={b}", Kind.DFLASH, lambda ids, b=b: DFlashProposer(
        drafter, target, b, shapes=shapes), b) for b in block_sizes]
    if tree_size:
        rows.append(BatchMethod(f"DFlash tree N={tree_size}", Kind.DFLASH_TREE,
                                lambda ids: DFlashTreeProposer(drafter, target, tree_size,
                                                               shapes=shapes), tree_size=tree_size))
    session = session or PolicySession(drafter, target, DEFAULT_OPTIONS)
    if size > 1 and costs:
        session.batch_costs[size] = costs
    rows.append(BatchMethod("default policy", Kind.DFLASH_POLICY,
                            lambda ids: session.proposer(list(ids), shapes),
                            default=True, finish=session.finished))
    largest = max(block_sizes)
    return rows + [BatchMethod(f"naive rollback B={largest}", Kind.DFLASH, lambda ids:
                               DFlashProposer(drafter, target, largest, shapes=shapes), largest,
                               rollback="shortest")]


def policy_costs(target, drafter, prompt, size: int, repeats: int = 3) -> StepCosts | None:
    """The default policy's step costs at batch ``size``, measured at ``prompt`` (None at batch 1,
    where the policy measures its own, or without a drafter)."""
    if drafter is None or size == 1:
        return None
    return step_costs(target, drafter, prompt, drafter.config.block_size,
                      DEFAULT_OPTIONS.tree_sizes, repeats=repeats, rows=size)


def batches_of(prompts: list, size: int) -> list[list]:
    """``prompts`` in batches of ``size``, cycled to fill the last one (so every batch size
    decodes every prompt, and a batch larger than the list repeats it)."""
    rows = -(-len(prompts) // size) * size
    cycled = [prompts[i % len(prompts)] for i in range(rows)]
    return [cycled[i: i + size] for i in range(0, rows, size)]


def sweep(target, drafter, prompts: list, max_new_tokens: int, batch_sizes, block_sizes=(16,),
          tree_size: int | None = 16, sampling=None, stops=(), repeats: int = 3,
          cost_repeats: int = 5, device: str = "cpu", shapes: Shapes = EAGER,
          progress=print) -> dict:
    """Every method at every batch size: ``{"rows": [...], "costs": {b: measured forwards}}``, one
    row per (batch size, method), each with its ``batch_size``."""
    sampling = sampling or SamplingParams()
    alone = [generate(target, NoDraftProposer(), p, max_new_tokens, sampling, stops).tokens
             for p in prompts]                   # every prompt decoded alone: the reference
    rows, costs = [], {}
    session = None if drafter is None else PolicySession(drafter, target, DEFAULT_OPTIONS)
    for size in batch_sizes:
        groups = batches_of(list(range(len(prompts))), size)
        batches = [[prompts[i] for i in g] for g in groups]
        order = [i for g in groups for i in g]
        methods = batch_methods(target, drafter, block_sizes, tree_size, shapes, size,
                                policy_costs(target, drafter, prompts[0], size), session)
        # plain decoding once more, in the slot before the default's: what a tie reads as here
        again = BatchMethod("plain (batched, again)", Kind.AUTOREGRESSIVE, methods[0].make, 1)
        methods.insert(next((i for i, m in enumerate(methods) if m.default), len(methods)), again)
        made: dict[str, list] = {}       # each method's proposers, of its last run

        def run(m: BatchMethod):
            results = []
            made[m.name] = []
            for batch in batches:
                proposer = m.make(batch)
                made[m.name].append(proposer)
                results += generate(target, proposer, batch, max_new_tokens, sampling, stops,
                                    rollback=m.rollback)
                if m.finish is not None:
                    m.finish(proposer)
            return results
        timed = interleaved({m.name: (lambda m=m: run(m)) for m in methods}, repeats, 1, device)
        measured = costs[size] = None if drafter is None else measure_costs(
            target, drafter, prompts[0], block_sizes, cost_repeats,
            (tree_size,) if tree_size else (), rows=size)
        if measured is not None:       # what every method pays alike: the prompts through
            measured["prefill_s"] = prefill_seconds(target, batches, cost_repeats, device)
        first = len(rows)
        for m in methods:
            if m is again:
                continue
            calls = timed[m.name]
            results = calls[-1][1]
            seconds = statistics.median(t for t, _ in calls)
            tokens = sum(len(r.tokens) for r in results)
            lengths = [n for r in results for n in r.acceptance_lengths]
            row = {"batch_size": size, "name": m.name, "kind": m.kind.value,
                   "block_size": m.block_size, "tree_size": m.tree_size, "rollback": m.rollback,
                   "default": m.default, "seconds": seconds, "tokens_per_s": tokens / seconds,
                   "tokens_per_s_spread": [tokens / t for t, _ in calls],
                   "tau": sum(lengths) / len(lengths) if lengths else None,
                   "discarded_tokens": sum(r.discarded for r in results), "error": None,
                   "identical_to_target": all(r.tokens == alone[i]
                                              for r, i in zip(results, order))
                   if sampling.greedy or sampling.seed is not None else None}
            if m.kind is Kind.AUTOREGRESSIVE:
                plain = row
            row["predicted_speedup"] = _predicted(row, measured)
            # steps per batch: its longest row's, summed over the batches
            row["steps"] = sum(max(len(r.acceptance_lengths) for r in results[i: i + len(g)])
                               for i, g in zip(range(0, len(results), size), groups))
            if m.kind is Kind.DFLASH_POLICY:
                row["choices"] = dict(Counter(str(c) for p in made[m.name] for c in p.chosen))
                row["forecast_s"] = sum(f for p in made[m.name] for f in p.forecast)
                row["model_scale"] = _model_scale(made[m.name][0].costs, measured)
            rows.append(row)
        plain["again"] = plain["seconds"] / statistics.median(t for t, _ in timed[again.name])
        for row in rows[first:]:
            row["speedup"] = row["tokens_per_s"] / plain["tokens_per_s"]
            row["predicted_with_host"] = _with_host(row, plain, measured)
        if progress is not None:
            progress(f"batch {size}: " + ", ".join(f"{r['name']} {r['speedup']:.2f}x"
                                                   for r in rows[first:])
                     + f"; plain again {plain['again']:.2f}x")
    return {"rows": rows, "costs": {str(b): c for b, c in costs.items()}}


def _step_forwards(row: dict, measured: dict) -> tuple[float, float] | None:
    """The measured seconds of a fixed row's step: its verify (a chain of b, or a tree of N: N+1)
    and its drafter forward (the block, or the drafter's own block for a tree; 0 for plain
    decoding). None for a row the forwards were not measured for (prompt lookup, the default)."""
    t, d = measured["t_target"], measured["t_draft"]
    width, b = ((row["tree_size"] + 1, measured["tree_block_size"]) if row["tree_size"]
                else (row["block_size"], row["block_size"]))
    if b is None or str(width) not in t or (width > 1 and str(b) not in d):
        return None
    return t[str(width)], d[str(b)] if width > 1 else 0.0


def _predicted(row: dict, measured: dict | None) -> float | None:
    """The cost model at the row's batch size (its own tau), from the forwards alone."""
    step = None if measured is None or row["tau"] is None else _step_forwards(row, measured)
    return None if step is None else predicted_speedup(row["tau"], measured["t_target"]["1"], *step)


def prefill_seconds(target, batches: list[list], repeats: int, device="cpu") -> float:
    """Median seconds of the prefill of every batch (each padded as the loop pads it)."""
    def run():
        for batch in batches:
            cache = SlotCache.for_target(target, rows=len(batch))
            prefill(target, stack_padded([p[..., None] for p in batch])[..., 0], cache, None,
                    [p.shape[1] for p in batch])
    return statistics.median(t for t, _ in interleaved({"prefill": run}, repeats, 1,
                                                        device)["prefill"])


def _with_host(row: dict, plain: dict, measured: dict | None) -> float | None:
    """``predicted_with_host`` (docs/method.md#batches), P and h read off batched plain decoding
    (``plain``); the default's forwards are its forecast, scaled by :func:`_model_scale`."""
    if measured is None or row["tau"] is None:
        return None
    prefill_s = measured["prefill_s"]
    host = (plain["seconds"] - prefill_s) / plain["steps"] - measured["t_target"]["1"]
    if row["kind"] == Kind.DFLASH_POLICY.value:
        forwards = row["forecast_s"] * row.get("model_scale", 1.0)
    else:
        step = _step_forwards(row, measured)
        if step is None:
            return None
        taken = measured.get("per_position", 0.0) * (row["tau"] - 1) if step[1] else 0.0
        forwards = row["steps"] * (sum(step) + taken)
    return plain["seconds"] / (prefill_s + forwards + row["steps"] * host)


def _model_scale(costs, measured: dict | None) -> float:
    """The sweep's measured forwards over what the policy's ``costs`` (calibrated before its first
    step) say the same forwards cost at the same context length; 1.0 without either."""
    if measured is None or costs is None:
        return 1.0
    n, t, d = measured["context_length"], measured["t_target"], measured["t_draft"]
    model = sum(costs.target(int(b), n) for b in t) + sum(costs.draft(int(b), n) for b in d)
    return (sum(t.values()) + sum(d.values())) / model if model > 0 else 1.0


def crossover(rows: list[dict], line: float = PAYS, key: str = "speedup") -> int | None:
    """The smallest batch size at which the best speculative row's ``key`` (the measured speedup,
    or ``predicted_speedup``) falls below ``line``; None if it never does."""
    for size in sorted({r["batch_size"] for r in rows}):
        best = max((r[key] for r in rows if r["batch_size"] == size and r[key] is not None
                    and r["kind"] != Kind.AUTOREGRESSIVE.value and r["rollback"] == "row"),
                   default=None)
        if best is not None and best < line:
            return size
    return None


def format_batch_table(rows: list[dict]) -> str:
    """The sweep as text: per batch size and method, tokens/s, speedup, tau, identity, what the
    naive rollback threw away and the cost model's prediction."""
    lines = [f"{'batch':>5}  {'method':<26}{'tok/s':>9}{'speedup':>9}{'tau':>7}"
             f"{'predicted':>11}{'w/ host':>9}{'thrown':>8}  identical"]
    for r in rows:
        tau = f"{r['tau']:.2f}" if r["tau"] is not None else "-"
        predicted, host = (f"{r[k]:.2f}x" if r.get(k) else "-"
                           for k in ("predicted_speedup", "predicted_with_host"))
        lines.append(f"{r['batch_size']:>5}  {r['name']:<26}{r['tokens_per_s']:>9.1f}"
                     f"{r['speedup']:>8.2f}x{tau:>7}{predicted:>11}{host:>9}"
                     f"{r['discarded_tokens']:>8}  {r['identical_to_target']}")
    ties = [f"{r['batch_size']}{' compiled' if r.get('compiled') else ''} {r['again']:.2f}x"
            for r in rows if r.get("again")]
    if ties:
        lines.append("plain decoding timed again in the default's slot, at each batch size (what a "
                     "tie reads as in this run): " + ", ".join(ties))
    return "\n".join(lines)
