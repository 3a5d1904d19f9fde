"""A benchmark report's rows (docs/method.md#measuring, #the-cost-model): their :class:`Kind`, the
:class:`Method` that produces one, selecting rows (:func:`rows_of`, :func:`row_of`), the summary
(:func:`summarise`), the printed table, and the cost model's predicted-against-measured rows."""
from __future__ import annotations

import enum
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from ..decoding.costs import predicted_speedup


class Kind(str, enum.Enum):
    """What a method (and its report row) is; consumers select rows by kind, never by name."""
    AUTOREGRESSIVE = "autoregressive"    # the decode loop at block size 1: what speedup divides by
    HF_GENERATE = "hf_generate"          # transformers' ``model.generate``: speedup_vs_hf_generate
    DRAFT_MODEL = "draft_model"          # classic speculative decoding, a small causal LM, our loop
    HF_DRAFT_MODEL = "hf_draft_model"      # the same small LM as transformers' ``assistant_model``
    PROMPT_LOOKUP = "prompt_lookup"        # transformers' prompt lookup decoding
    NGRAM = "ngram"                        # prompt lookup in our loop (decoding.ngram)
    EAGLE = "eagle"                        # the EAGLE-style drafter (the paper's DFlash-AR, sec. 5)
    DFLASH = "dflash"                      # DFlash at the fixed ``block_size`` (paper section 3)
    DFLASH_POLICY = "dflash_policy"        # DFlash, block size chosen per step from costs: default
    DFLASH_ADAPTIVE = "dflash_adaptive"    # DFlash, block size from recent acceptance
    DFLASH_TREE = "dflash_tree"            # DFlash drafting a tree of ``tree_size`` nodes
    DFLASH_HYBRID = "dflash_hybrid"        # that tree plus prompt lookup's continuation as a branch
    HF_DFLASH = "hf_dflash"                # transformers' DFlash path with the same drafter weights
    CUSTOM = "custom"                      # a method built by hand: neither a baseline nor DFlash


BASELINE_KINDS = frozenset({Kind.AUTOREGRESSIVE, Kind.HF_GENERATE})
DFLASH_KINDS = frozenset({Kind.DFLASH, Kind.DFLASH_POLICY, Kind.DFLASH_ADAPTIVE, Kind.DFLASH_TREE,
                          Kind.DFLASH_HYBRID, Kind.HF_DFLASH})
OUR_DFLASH_KINDS = DFLASH_KINDS - {Kind.HF_DFLASH}          # DFlash in this project's decode loops
# transformers' own loops (``model.generate``): at temperature > 0 they sample from their own stream
TRANSFORMERS_KINDS = frozenset({Kind.HF_GENERATE, Kind.HF_DRAFT_MODEL, Kind.PROMPT_LOOKUP,
                                Kind.HF_DFLASH})


@dataclass
class Method:
    """A way to complete ``input_ids``: ``run(ids, max_new_tokens)`` returns (new tokens,
    GenerationResult or None). ``name`` is only shown; ``kind`` and the fields say what it is."""
    name: str
    run: Callable
    kind: Kind = Kind.CUSTOM
    block_size: int | None = None    # tokens per target forward, when fixed
    tree_size: int | None = None     # draft nodes per step, for a draft-tree row
    default: bool = False            # the headline DFlash row: what Engine.generate runs by default
    session: object | None = None    # a policy row's PolicySession, carried from prompt to prompt
    compiled: bool = False           # the loop on fixed shapes, compiled forwards (bench --compile)

    def __post_init__(self):
        self.kind = Kind(self.kind)


def kind_of(row: dict) -> Kind:
    """A report row's :class:`Kind` (its ``"kind"`` field)."""
    return Kind(row["kind"])


def rows_of(report: dict, *kinds: Kind, **fields) -> list[dict]:
    """The rows of ``report`` of any of ``kinds`` (any kind when none is given) whose ``fields``
    have the given values: ``rows_of(report, Kind.DFLASH, block_size=16)``."""
    return [r for r in report["methods"]
            if (not kinds or kind_of(r) in kinds) and all(r.get(k) == v for k, v in fields.items())]


def row_of(report: dict, kind: Kind, **fields) -> dict:
    """The first row of ``kind`` with ``fields`` (:func:`rows_of`), or a LookupError naming it."""
    found = rows_of(report, kind, **fields)
    if not found:
        wanted = ", ".join([Kind(kind).value, *(f"{k}={v}" for k, v in fields.items())])
        raise LookupError(f"this report has no row of {wanted}")
    return found[0]


def summarise(stats: dict, env: dict, max_new_tokens: int, num_prompts: int, repeats: int) -> dict:
    """The report's rows: medians, tau and its histogram, phases, and the speedups, each the ratio
    of tokens/s to that of the autoregressive row, the ``model.generate`` row or the compiled
    autoregressive row (None without that row; the last only in reports with compiled rows)."""
    rows = []
    for s in stats.values():
        m = s.method
        tps = [n / t for n, t in zip(s.tokens, s.times) if t > 0]
        counts = Counter(s.acceptance_lengths)
        hist = [counts[a] for a in range(1, max(counts, default=0) + 1)]
        rows.append({
            "name": m.name, "kind": m.kind.value, "block_size": m.block_size,
            "tree_size": m.tree_size, "compiled": m.compiled, "baseline": m.kind in BASELINE_KINDS,
            "default": m.default, "tokens_per_s": statistics.median(tps) if tps else None,
            "tokens_per_s_spread": [min(tps), max(tps)] if tps else None,
            "speedup": None, "speedup_vs_hf_generate": None,
            "tau": statistics.fmean(s.acceptance_lengths) if s.acceptance_lengths else None,
            "tau_histogram": hist,
            # seconds per phase over all prompts: the median over repeats (one run's worth)
            "phase_times": {k: round(statistics.median(run.get(k, 0.0) for run in s.phase_runs), 5)
                            for k in (s.phase_runs[0] if s.phase_runs else {})},
            "steps_per_run": statistics.median(s.step_runs) if s.step_runs else None,
            "identical_to_target": s.identical, "error": s.error,
        })
    columns = [("speedup", Kind.AUTOREGRESSIVE, False),
               ("speedup_vs_hf_generate", Kind.HF_GENERATE, False)]
    if any(r["compiled"] for r in rows):
        columns.append(("speedup_vs_compiled", Kind.AUTOREGRESSIVE, True))
    for column, kind, compiled in columns:
        base = next((r["tokens_per_s"] for r in rows
                     if r["kind"] == kind and r["compiled"] == compiled and r["tokens_per_s"]),
                    None)
        for r in rows:
            r[column] = r["tokens_per_s"] / base if base and r["tokens_per_s"] else None
    return {"env": {**env, "max_new_tokens": max_new_tokens, "prompts": num_prompts,
                    "repeats": repeats},
            "methods": rows}


def _ratio(x: float | None, width: int) -> str:
    return f"{x:>{width - 1}.2f}x" if x is not None else f"{'-':>{width}}"


def format_table(report: dict) -> str:
    compiled = any("speedup_vs_compiled" in r for r in report["methods"])   # it has compiled rows
    lines = [f"{'method':<36} {'B':>3} {'tokens/s':>9} {'spread':>15} {'speedup':>8} "
             f"{'vs generate':>11} {'tau':>6} {'identical':>9}"
             + (f" {'vs compiled':>11}" if compiled else "")]
    for r in report["methods"]:
        if r["error"]:
            lines.append(f"{r['name']:<36} {'':>3} failed: {r['error']}")
            continue
        spread = "{:.1f}-{:.1f}".format(*r["tokens_per_s_spread"])
        tau = f"{r['tau']:.2f}" if r["tau"] is not None else "-"
        name = r["name"] + (" *" if r.get("default") else "")
        lines.append(f"{name:<36} {r['block_size'] or '':>3} {r['tokens_per_s']:>9.1f} "
                     f"{spread:>15} {_ratio(r['speedup'], 8)} "
                     f"{_ratio(r.get('speedup_vs_hf_generate'), 11)} "
                     f"{tau:>6} {str(r['identical_to_target']):>9}"
                     + (f" {_ratio(r.get('speedup_vs_compiled'), 11)}" if compiled else ""))
    env = report["env"]
    lines.append(f"({env['prompts']} prompts x {env['max_new_tokens']} new tokens, "
                 f"median of {env['repeats']} interleaved repeats; "
                 "speedup: against the autoregressive loop, vs generate: against model.generate"
                 + ("; vs compiled: against compiled plain decoding" if compiled else "")
                 + f"; {env['device']}, {env['threads']} threads, torch {env['torch']}, "
                 f"transformers {env['transformers']})"
                 + ("; * the default (the cost-aware policy)"
                    if any(r.get("default") for r in report["methods"]) else ""))
    if env.get("policy_session"):
        lines.append("(cost-aware rows run as one user's session: each keeps its acceptance "
                     "estimates from prompt to prompt, in the order run, warm-up included; "
                     "step costs measured once per row, before the timed runs, "
                     f"in {env['policy_session']['calibration_seconds']:.1f} s)")
    return "\n".join(lines)


def all_dflash_failed(report: dict) -> str | None:
    """The first error when the report has DFlash rows and every one of them failed, else None
    (the CLI then exits non-zero: a run that measured no DFlash at all is not a result)."""
    rows = rows_of(report, *DFLASH_KINDS)
    if rows and all(r["error"] for r in rows):
        return f"every DFlash method failed ({rows[0]['name']}: {rows[0]['error']})"
    return None


def cost_model(report: dict, costs: dict) -> list[dict]:
    """Predicted against measured speedup (docs/method.md#the-cost-model) for every fixed-block and
    draft-tree DFlash row of a report whose forwards were measured, with the measured per-step
    phases; ``overhead_per_step_s`` is what the loop adds beyond the two forwards."""
    rows = []
    t, d = costs["t_target"], costs["t_draft"]           # seconds by width, as strings
    for r in [r for r in rows_of(report, Kind.DFLASH, Kind.DFLASH_TREE) if not r.get("compiled")]:
        kind = kind_of(r)                        # a tree: verify N+1 tokens, draft one full block
        b, draft_b = ((r["tree_size"] + 1, costs.get("tree_block_size")) if kind is Kind.DFLASH_TREE
                      else (r["block_size"], r["block_size"]))
        if r["tau"] is None or str(draft_b) not in d or str(b) not in t:
            continue
        t1, tb, td = t["1"], t[str(b)], d[str(draft_b)]
        steps = r.get("steps_per_run") or sum(r["tau_histogram"])
        phases = ({k: v / steps for k, v in r["phase_times"].items() if k != "prefill"}
                  if steps else {})
        step_s = sum(phases.values())
        rows.append({
            "name": r["name"], "kind": kind.value, "block_size": b, "tree_size": r.get("tree_size"),
            "tau": r["tau"], "t_target_1": t1, "t_target_b": tb, "t_draft_b": td,
            "predicted_speedup": predicted_speedup(r["tau"], t1, tb, td),
            "measured_speedup": r["speedup"],
            "measured_speedup_vs_hf_generate": r.get("speedup_vs_hf_generate"),
            "measured_per_step_s": phases, "step_s": step_s,
            "overhead_per_step_s": step_s - (tb + td) if steps else None,
        })
    return rows


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f}ms"


def format_cost_model(rows: list[dict]) -> str:
    lines = [f"{'method':<20} {'tau':>5} {'t_tgt(1)':>9} {'t_tgt(B)':>9} {'t_draft':>8} "
             f"{'predicted':>9} {'measured':>8} {'step':>8} {'overhead':>9}"]
    for r in rows:
        lines.append(f"{r['name']:<20} {r['tau']:>5.2f} {_ms(r['t_target_1']):>9} "
                     f"{_ms(r['t_target_b']):>9} {_ms(r['t_draft_b']):>8} "
                     f"{r['predicted_speedup']:>8.2f}x {_ratio(r['measured_speedup'], 8)} "
                     f"{_ms(r['step_s']):>8} {_ms(r['overhead_per_step_s'] or 0):>9}")
    return "\n".join(lines)
