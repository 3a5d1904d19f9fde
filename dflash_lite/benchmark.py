"""Benchmarks that a reviewer can trust (docs/method.md#measuring, #the-cost-model).

Every method runs on the same prompts, with the same ``max_new_tokens``, after a warm-up, in
interleaved order (each repeat visits the methods in a rotated order, so drift in machine load
hits all of them alike). Speed is reported as tokens/s (median over repeats of total tokens /
total time) and as ratios measured in the same run: ``speedup`` against the project's
autoregressive loop (the decode loop at block size 1), ``speedup_vs_hf_generate`` against
transformers' ``model.generate``. Every greedy method's tokens are checked against the target's
greedy output in the run itself.

:func:`bench` (``python -m dflash_lite bench``) is three steps a notebook can also take one by
one: :func:`resolve` (load the target, the drafters and the prompts; build the :class:`Method`
list), :func:`run` (time them, interleaved, and the cost model's forwards) and :func:`report`
(the summary below, printed and optionally written as JSON)::

    {"env": {...}, "methods": [{"name", "kind", "block_size", "tree_size", "default", "tokens_per_s",
                                "tokens_per_s_spread", "speedup", "speedup_vs_hf_generate", "tau",
                                "tau_histogram", "identical_to_target", "error", "phase_times", ...}],
     "cost_model": {"costs": {...}, "rows": [...]}}

Rows are told apart by ``"kind"`` (a :class:`Kind`) and their fields, never by the display
``"name"``: select them with :func:`rows_of` and :func:`row_of`. ``"default": true`` marks the
headline DFlash row: the cost-aware block size that ``Engine.generate`` runs by default
(:mod:`dflash_lite.policy`). Fixed block sizes and draft trees (:mod:`dflash_lite.tree`) have
rows of their own.
"""
from __future__ import annotations

import enum
import inspect
import json
import logging
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable

import torch

from . import corpus, validate
from .acceptance import SamplingParams
from .baselines import NoDraftProposer
from .decode import DFlashProposer, generate
from .files import atomic_write_text
from .ngram import NgramProposer


# ----------------------------------------------------------------------------- what a row is
class Kind(str, enum.Enum):
    """What a method (and its report row) is; consumers select rows by kind, never by name."""
    AUTOREGRESSIVE = "autoregressive"      # the decode loop at block size 1: what ``speedup`` divides by
    HF_GENERATE = "hf_generate"            # transformers' ``model.generate``: ``speedup_vs_hf_generate``
    DRAFT_MODEL = "draft_model"            # classic speculative decoding with a small causal LM, our loop
    HF_DRAFT_MODEL = "hf_draft_model"      # the same small LM as transformers' ``assistant_model``
    PROMPT_LOOKUP = "prompt_lookup"        # transformers' prompt lookup decoding
    NGRAM = "ngram"                        # prompt lookup in our loop (:mod:`dflash_lite.ngram`)
    EAGLE = "eagle"                        # the EAGLE-style drafter (the paper's DFlash-AR, section 5)
    DFLASH = "dflash"                      # DFlash at the fixed ``block_size`` (paper section 3)
    DFLASH_POLICY = "dflash_policy"        # DFlash, block size chosen per step from costs: the default
    DFLASH_ADAPTIVE = "dflash_adaptive"    # DFlash, block size from recent acceptance
    DFLASH_TREE = "dflash_tree"            # DFlash drafting a tree of ``tree_size`` nodes
    HF_DFLASH = "hf_dflash"                # transformers' DFlash path with the same drafter weights
    CUSTOM = "custom"                      # a method built by hand: neither a baseline nor DFlash


BASELINE_KINDS = frozenset({Kind.AUTOREGRESSIVE, Kind.HF_GENERATE})
DFLASH_KINDS = frozenset({Kind.DFLASH, Kind.DFLASH_POLICY, Kind.DFLASH_ADAPTIVE, Kind.DFLASH_TREE, Kind.HF_DFLASH})
OUR_DFLASH_KINDS = DFLASH_KINDS - {Kind.HF_DFLASH}          # DFlash in this project's decode loop

# Reports written before rows carried a "kind" (committed results/*.json, the benchmarks inside
# dflash_lite/models/*/card.json) name their rows only; for those rows alone, the kind is read
# back from the names that standard_methods gave them.
_KIND_OF_OLD_NAME = (("autoregressive (ours)", Kind.AUTOREGRESSIVE), ("model.generate", Kind.HF_GENERATE),
                     ("draft model (ours)", Kind.DRAFT_MODEL), ("draft model (transformers)", Kind.HF_DRAFT_MODEL),
                     ("prompt lookup (transformers)", Kind.PROMPT_LOOKUP), ("EAGLE-style (ours)", Kind.EAGLE),
                     ("DFlash (ours) B=", Kind.DFLASH), ("DFlash (ours) cost-aware", Kind.DFLASH_POLICY),
                     ("DFlash (ours) adaptive", Kind.DFLASH_ADAPTIVE), ("DFlash tree N=", Kind.DFLASH_TREE),
                     ("DFlash (transformers)", Kind.HF_DFLASH))


def kind_of(row: dict) -> Kind:
    """A report row's :class:`Kind`: its ``"kind"`` field; for a row of a report written before
    rows had one, the kind its name was given by :func:`standard_methods` (``CUSTOM`` if none)."""
    if "kind" in row:
        return Kind(row["kind"])
    name = row.get("name") or ""
    return next((kind for prefix, kind in _KIND_OF_OLD_NAME if name.startswith(prefix)), Kind.CUSTOM)


def rows_of(report: dict, *kinds: Kind, **fields) -> list[dict]:
    """The rows of ``report`` of any of ``kinds`` (any kind when none is given) whose ``fields``
    have the given values: ``rows_of(report, Kind.DFLASH, block_size=16)``."""
    return [r for r in report["methods"]
            if (not kinds or kind_of(r) in kinds) and all(r.get(k) == v for k, v in fields.items())]


def row_of(report: dict, kind: Kind, **fields) -> dict:
    """The first row of ``kind`` with ``fields`` (see :func:`rows_of`); a LookupError naming it if none."""
    found = rows_of(report, kind, **fields)
    if not found:
        wanted = ", ".join([Kind(kind).value, *(f"{k}={v}" for k, v in fields.items())])
        raise LookupError(f"this report has no row of {wanted}")
    return found[0]


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

    def __post_init__(self):
        self.kind = Kind(self.kind)


@dataclass
class MethodStats:
    method: Method
    times: list[float] = field(default_factory=list)         # per repeat: seconds over all prompts
    tokens: list[int] = field(default_factory=list)          # per repeat: new tokens over all prompts
    acceptance_lengths: list[int] = field(default_factory=list)
    phase_runs: list[dict] = field(default_factory=list)     # per repeat: seconds per phase over all prompts
    step_runs: list[int] = field(default_factory=list)       # per repeat: verification steps over all prompts
    identical: bool | None = None
    error: str | None = None


def environment(device: str) -> dict:
    import transformers
    env = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "python": platform.python_version(),
           "machine": platform.machine(), "processor": platform.processor()}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def interleaved(runs: dict[Hashable, Callable[[], object]], repeats: int = 3, warmup: int = 1,
                device: str | torch.device = "cpu") -> dict[Hashable, list[tuple[float, object]]]:
    """The one interleaved timer: call every run ``warmup`` times (untimed), then ``repeats`` rounds
    that visit them in turn, each round starting one run further along, so that drift in machine
    load hits all of them alike. Returns ``{name: [(seconds, result), ...]}``, one entry per round.
    On CUDA the device is synchronised around every timed call."""
    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda device=None: None)
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    timed = {name: [] for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            sync(device)
            t0 = time.perf_counter()
            result = runs[name]()
            sync(device)
            timed[name].append((time.perf_counter() - t0, result))
    return timed


def measure(methods: list[Method], prompts: list[torch.Tensor], max_new_tokens: int, repeats: int = 3,
            reference: dict | None = None, device: str = "cpu", greedy: bool = True) -> dict[str, MethodStats]:
    """Run every method on every prompt, interleaved, ``repeats`` times after one warm-up pass.

    ``reference`` maps prompt index -> the target's greedy tokens (by default the outputs of the
    autoregressive row, else of ``model.generate``) for the identity check.
    """
    stats = {m.name: MethodStats(m) for m in methods}
    outputs: dict[str, dict[int, list[int]]] = {m.name: {} for m in methods}
    for m in methods:                                             # warm-up, and the outputs to check
        for i, ids in enumerate(prompts):
            try:
                outputs[m.name][i] = m.run(ids, max_new_tokens)[0]
            except Exception as e:                                # a failing method is reported, not dropped
                stats[m.name].error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                break
    if reference is None:
        base = next((m.name for kind in (Kind.AUTOREGRESSIVE, Kind.HF_GENERATE) for m in methods
                     if m.kind is kind and stats[m.name].error is None), None)
        reference = outputs[base] if base else {}
    live = [m for m in methods if stats[m.name].error is None]
    totals = {m.name: [[0.0, 0] for _ in range(repeats)] for m in live}      # per repeat: seconds, tokens
    phases = {m.name: [{} for _ in range(repeats)] for m in live}
    steps = {m.name: [0] * repeats for m in live}
    for ids in prompts:                                  # each prompt: the methods interleaved, ``repeats`` rounds
        calls = interleaved({m.name: (lambda m=m: m.run(ids, max_new_tokens)) for m in live}, repeats, 0, device)
        for name, rounds in calls.items():
            for repeat, (seconds, (tokens, result)) in enumerate(rounds):
                totals[name][repeat][0] += seconds
                totals[name][repeat][1] += len(tokens)
                if result is not None:
                    if repeat == 0:
                        stats[name].acceptance_lengths += result.acceptance_lengths
                    steps[name][repeat] += len(result.acceptance_lengths)
                    for phase, t in result.phase_times.items():
                        phases[name][repeat][phase] = phases[name][repeat].get(phase, 0.0) + t
    for name in totals:
        stats[name].times = [t for t, _ in totals[name]]
        stats[name].tokens = [n for _, n in totals[name]]
        stats[name].phase_runs, stats[name].step_runs = phases[name], steps[name]
    for m in live:
        if greedy and reference:
            stats[m.name].identical = all(outputs[m.name][i] == reference[i] for i in reference)
    return stats


def run_benchmark(methods: list[Method], prompts: list[torch.Tensor], max_new_tokens: int, repeats: int = 3,
                  reference: dict | None = None, device: str = "cpu", greedy: bool = True) -> dict:
    """:func:`measure` a list of methods and :func:`summarise` it: the report without a cost model."""
    stats = measure(methods, prompts, max_new_tokens, repeats, reference, device, greedy)
    return summarise(stats, environment(device), max_new_tokens, len(prompts), repeats)


def summarise(stats: dict[str, MethodStats], env: dict, max_new_tokens: int, num_prompts: int, repeats: int) -> dict:
    """The report's rows: medians, tau and its histogram, phases, and the two speedups, each the
    ratio of tokens/s to that of the autoregressive row or the ``model.generate`` row (None
    without that row)."""
    rows = []
    for s in stats.values():
        m = s.method
        tps = [n / t for n, t in zip(s.tokens, s.times) if t > 0]
        hist = [0] * (max(s.acceptance_lengths) if s.acceptance_lengths else 0)
        for a in s.acceptance_lengths:
            hist[a - 1] += 1
        rows.append({
            "name": m.name, "kind": m.kind.value, "block_size": m.block_size, "tree_size": m.tree_size,
            "baseline": m.kind in BASELINE_KINDS, "default": m.default,
            "tokens_per_s": statistics.median(tps) if tps else None,
            "tokens_per_s_spread": [min(tps), max(tps)] if tps else None,
            "speedup": None, "speedup_vs_hf_generate": None,
            "tau": (sum(s.acceptance_lengths) / len(s.acceptance_lengths)) if s.acceptance_lengths else None,
            "tau_histogram": hist,
            # seconds per phase over all prompts: the median over repeats (one run's worth)
            "phase_times": {k: round(statistics.median(run.get(k, 0.0) for run in s.phase_runs), 5)
                            for k in (s.phase_runs[0] if s.phase_runs else {})},
            "steps_per_run": statistics.median(s.step_runs) if s.step_runs else None,
            "identical_to_target": s.identical, "error": s.error,
        })
    for column, kind in (("speedup", Kind.AUTOREGRESSIVE), ("speedup_vs_hf_generate", Kind.HF_GENERATE)):
        base = next((r["tokens_per_s"] for r in rows if r["kind"] == kind and r["tokens_per_s"]), None)
        for r in rows:
            if base and r["tokens_per_s"]:
                r[column] = r["tokens_per_s"] / base
    return {"env": {**env, "max_new_tokens": max_new_tokens, "prompts": num_prompts, "repeats": repeats},
            "methods": rows}


def _ratio(x: float | None, width: int) -> str:
    return f"{x:>{width - 1}.2f}x" if x is not None else f"{'-':>{width}}"


def format_table(report: dict) -> str:
    header = (f"{'method':<36} {'B':>3} {'tokens/s':>9} {'spread':>15} {'speedup':>8} {'vs generate':>11} "
              f"{'tau':>6} {'identical':>9}")
    lines = [header]
    for r in report["methods"]:
        if r["error"]:
            lines.append(f"{r['name']:<36} {'':>3} failed: {r['error']}")
            continue
        spread = "{:.1f}-{:.1f}".format(*r["tokens_per_s_spread"])
        tau = f"{r['tau']:.2f}" if r["tau"] is not None else "-"
        name = r["name"] + (" *" if r.get("default") else "")
        lines.append(f"{name:<36} {r['block_size'] or '':>3} {r['tokens_per_s']:>9.1f} {spread:>15} "
                     f"{_ratio(r['speedup'], 8)} {_ratio(r.get('speedup_vs_hf_generate'), 11)} {tau:>6} "
                     f"{str(r['identical_to_target']):>9}")
    env = report["env"]
    lines.append(f"({env['prompts']} prompts x {env['max_new_tokens']} new tokens, median of {env['repeats']} "
                 f"interleaved repeats; speedup: against the autoregressive loop, vs generate: against "
                 f"model.generate; {env['device']}, {env['threads']} threads, torch {env['torch']}, "
                 f"transformers {env['transformers']})"
                 + ("; * the default (cost-aware block size)" if any(r.get("default") for r in report["methods"]) else ""))
    return "\n".join(lines)


def all_dflash_failed(report: dict) -> str | None:
    """The first error when the report has DFlash rows and every one of them failed, else None
    (the CLI then exits non-zero: a run that measured no DFlash at all is not a result)."""
    rows = rows_of(report, *DFLASH_KINDS)
    if rows and all(r["error"] for r in rows):
        return f"every DFlash method failed ({rows[0]['name']}: {rows[0]['error']})"
    return None


# ----------------------------------------------------------------------------- standard methods
def standard_methods(target, tokenizer, drafter=None, block_sizes=(16,), sampling: SamplingParams = SamplingParams(),
                     hf_dflash: bool = True, eagle=None, draft_model=None, draft_block_size: int = 5,
                     prompt_lookup: int | None = 10, adaptive: tuple[int, ...] | None = None,
                     tree_sizes: tuple[int, ...] = (), policy: bool = True) -> list[Method]:
    """Baselines (the project's loop, ``model.generate``), the peers (classic speculative decoding with
    a small draft model, here and in transformers; prompt lookup; the EAGLE-style drafter), then
    DFlash here: the default cost-aware block size (the headline row), each fixed block size, draft
    trees of ``tree_sizes`` nodes, and transformers' DFlash path with the same weights."""
    from .baselines import DraftModelProposer, EagleProposer
    from .policy import AdaptiveDFlashProposer
    from .target import stop_token_ids

    stops = stop_token_ids(target, tokenizer)

    def hf(**kwargs):                                   # transformers' generate, with or without a helper
        return lambda ids, n: _hf_generate(target, tokenizer, ids, n, stops, sampling, **kwargs)

    methods = [
        Method("autoregressive (ours)", _spec_run(target, NoDraftProposer, sampling, stops),
               Kind.AUTOREGRESSIVE, block_size=1),
        Method("model.generate", hf(), Kind.HF_GENERATE, block_size=1),
    ]
    if draft_model is not None:
        methods.append(Method(f"draft model (ours) k={draft_block_size - 1}",
                              _spec_run(target, lambda: DraftModelProposer(draft_model, target, draft_block_size),
                                        sampling, stops), Kind.DRAFT_MODEL, block_size=draft_block_size))
        methods.append(Method("draft model (transformers)", hf(assistant_model=draft_model), Kind.HF_DRAFT_MODEL))
    if prompt_lookup:
        methods.append(Method(f"prompt lookup (transformers) k={prompt_lookup}",
                              hf(prompt_lookup_num_tokens=prompt_lookup), Kind.PROMPT_LOOKUP))
        methods.append(Method(f"prompt lookup (ours) k={prompt_lookup}",
                              _spec_run(target, lambda: NgramProposer(prompt_lookup), sampling, stops),
                              Kind.NGRAM))
    if eagle is not None:
        methods.append(Method(f"EAGLE-style (ours) B={eagle.config.block_size}",
                              _spec_run(target, lambda: EagleProposer(eagle, target), sampling, stops),
                              Kind.EAGLE, block_size=eagle.config.block_size))
    if drafter is not None:
        if policy:
            from .policy import default_policy
            methods.append(Method("DFlash (ours) cost-aware", _spec_run(target, lambda: default_policy(drafter, target),
                                                                      sampling, stops), Kind.DFLASH_POLICY, default=True))
        for b in block_sizes:
            methods.append(Method(f"DFlash (ours) B={b}",
                                  _spec_run(target, lambda b=b: DFlashProposer(drafter, target, b), sampling, stops),
                                  Kind.DFLASH, block_size=b))
        if adaptive:
            sizes = "/".join(map(str, sorted(adaptive)))
            methods.append(Method(f"DFlash (ours) adaptive B in {sizes}",
                                  _spec_run(target, lambda: AdaptiveDFlashProposer(drafter, target, adaptive),
                                            sampling, stops), Kind.DFLASH_ADAPTIVE))
        for n in tree_sizes:
            from .tree import DFlashTreeProposer
            methods.append(Method(f"DFlash tree N={n}", _spec_run(target, lambda n=n: DFlashTreeProposer(drafter, target, n),
                                                                  sampling, stops), Kind.DFLASH_TREE, tree_size=n))
        if hf_dflash:
            from .checkpoints import to_transformers
            converted = to_transformers(drafter, dtype=next(target.parameters()).dtype).to(target.device)
            methods.append(Method(f"DFlash (transformers) B={drafter.config.block_size}",
                                  hf(assistant_model=converted, speculation_type="dflash"),
                                  Kind.HF_DFLASH, block_size=drafter.config.block_size))
    return methods


def _spec_run(target, make_proposer, sampling, stops):
    """A method's run: the decode loop with a fresh proposer (block size 1: the autoregressive baseline)."""
    def run(ids, n):
        result = generate(target, make_proposer(), ids, n, sampling, stops)
        return result.tokens, result
    return run


@torch.inference_mode()
def _hf_generate(target, tokenizer, ids, n, stops, sampling: SamplingParams = SamplingParams(), **kwargs):
    if sampling.greedy:
        kwargs["do_sample"] = False
    else:                       # the same warpers as ours; 0 and 1.0 switch top-k / top-p off explicitly
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p or 1.0,
                      top_k=sampling.top_k or 0)
    # transformers' assisted generation calls the assistant's generate with a generation config and
    # keyword arguments together, and warns about its own call; nothing here can change that
    internal = logging.getLogger("transformers.generation.utils")
    level = internal.level
    internal.setLevel(logging.ERROR)
    try:
        out = target.generate(ids.to(target.device), max_new_tokens=n, eos_token_id=stops,
                              pad_token_id=tokenizer.pad_token_id, **kwargs)
    finally:
        internal.setLevel(level)
    return out[0, ids.shape[1]:].tolist(), None


# ----------------------------------------------------------------------------- prompts
def load_prompts(path: str, limit: int | None = None) -> list[str]:
    """Prompts from a JSONL file with a ``prompt`` field, or ``turns`` (the first turn is used)."""
    lines = validate.text_file_lines(path, "prompts file")       # a BOM is accepted; a FIFO is named
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}:{number}: not a JSON line") from None
        text = row.get("prompt") if isinstance(row, dict) else None
        turns = row.get("turns") if isinstance(row, dict) else None
        if text is None and turns is not None:
            if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
                raise ValueError(f"{path}:{number}: 'turns' must be a list of strings, got {json.dumps(turns)[:40]}")
            text = turns[0]
        if not isinstance(text, str) or not text:
            raise ValueError(f"{path}:{number}: no 'prompt' or 'turns' field")
        validate.check_prompt(text, f"{path}:{number}: the prompt")
        prompts.append(text)
        if limit and len(prompts) == limit:
            break
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


def builtin_prompts(domain: str, n: int) -> list[str]:
    """Held-out in-domain prompts: the ``held_out`` split of :func:`dflash_lite.corpus.prompts`
    (generated math problems from unseen seeds, stdlib function headers from held-out files)."""
    return corpus.prompts("held_out", domain, n)


# name -> (hub id, config, split, field): the public sets the DFlash paper reports on
DATASETS = {
    "gsm8k": ("openai/gsm8k", "main", "test", "question"),
    "humaneval": ("openai/openai_humaneval", None, "test", "prompt"),
    "mbpp": ("google-research-datasets/mbpp", "full", "test", "text"),
    "math500": ("HuggingFaceH4/MATH-500", None, "test", "problem"),
    "mt-bench": ("HuggingFaceH4/mt_bench_prompts", None, "train", "prompt"),
}


def dataset_prompts(name: str, limit: int, table: dict | None = None) -> list[str]:
    """The first ``limit`` prompts of a public benchmark (or of a set in ``table``, same shape as
    ``DATASETS``), fetched with ``datasets`` (needs the network or a warm ``datasets`` cache).
    Any failure is one ValueError line that points to ``--prompts``."""
    table = DATASETS if table is None else table
    if name not in table:
        raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(table)}")
    hub_id, config, split, column = table[name]
    try:
        from datasets import load_dataset
        rows = load_dataset(hub_id, config, split=f"{split}[:{limit}]")
    except ImportError:
        raise ValueError("--dataset needs the 'datasets' package; or pass --prompts FILE (JSONL)") from None
    except Exception as e:                          # offline, hub down, renamed set: all end here
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"could not fetch {hub_id} ({reason[:120]}); offline, pass --prompts FILE "
                         f"(JSONL with a 'prompt' or 'turns' field)") from None
    texts = [r[column][0] if isinstance(r[column], list) else r[column] for r in rows]
    return [t for t in texts if isinstance(t, str) and t]


# ----------------------------------------------------------------------------- the cost model
@torch.inference_mode()
def measure_costs(target, drafter, prompt_ids: torch.Tensor, block_sizes=(16,), repeats: int = 10,
                  tree_sizes=()) -> dict:
    """Median seconds of the three forwards a DFlash step is made of, at the prompt's context length:
    ``t_target[b]``, one target forward over b new tokens (b = 1 is one autoregressive step; N+1 for a
    tree of N drafts), and ``t_draft[b]``, one drafter forward over a block of b (one new context
    position, as in a step; a tree is drafted with the drafter's own block size)."""
    from .policy import measure_step_costs

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


def cost_model(report: dict, costs: dict) -> list[dict]:
    """Predicted against measured speedup (docs/method.md#the-cost-model) for every fixed-block and
    draft-tree DFlash row of a report whose forwards were measured, with the measured per-step
    phases; ``overhead_per_step_s`` is what the loop adds beyond the two forwards."""
    rows = []
    for r in rows_of(report, Kind.DFLASH, Kind.DFLASH_TREE):
        kind = kind_of(r)
        if kind is Kind.DFLASH_TREE:               # a tree: verify N+1 tokens, draft one full block
            b, draft_b = r["tree_size"] + 1, costs.get("tree_block_size")
        else:
            b = draft_b = r["block_size"]
        if r["tau"] is None or str(draft_b) not in costs["t_draft"] or str(b) not in costs["t_target"]:
            continue
        t1, tb, td = costs["t_target"]["1"], costs["t_target"][str(b)], costs["t_draft"][str(draft_b)]
        steps = r.get("steps_per_run") or sum(r["tau_histogram"])
        phases = {k: v / steps for k, v in r["phase_times"].items() if k != "prefill"} if steps else {}
        step_s = sum(phases.values())
        rows.append({
            "name": r["name"], "kind": kind.value, "block_size": b, "tree_size": r.get("tree_size"), "tau": r["tau"],
            "t_target_1": t1, "t_target_b": tb, "t_draft_b": td,
            "predicted_speedup": predicted_speedup(r["tau"], t1, tb, td),
            "measured_speedup": r["speedup"],
            "measured_speedup_vs_hf_generate": r.get("speedup_vs_hf_generate"),
            "measured_per_step_s": phases, "step_s": step_s,
            "overhead_per_step_s": step_s - (tb + td) if steps else None,
        })
    return rows


def format_cost_model(rows: list[dict]) -> str:
    lines = [f"{'method':<20} {'tau':>5} {'t_tgt(1)':>9} {'t_tgt(B)':>9} {'t_draft':>8} {'predicted':>9} "
             f"{'measured':>8} {'step':>8} {'overhead':>9}"]
    for r in rows:
        ms = lambda x: f"{1000 * x:.2f}ms"
        lines.append(f"{r['name']:<20} {r['tau']:>5.2f} {ms(r['t_target_1']):>9} {ms(r['t_target_b']):>9} "
                     f"{ms(r['t_draft_b']):>8} {r['predicted_speedup']:>8.2f}x {_ratio(r['measured_speedup'], 8)} "
                     f"{ms(r['step_s']):>8} {ms(r['overhead_per_step_s'] or 0):>9}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- bench = resolve -> run -> report
@dataclass
class Setup:
    """What :func:`resolve` loaded: the methods to run on the tokenized prompts, what the cost
    model needs, and the choices the report records (``settings``, added to its ``"env"``)."""
    methods: list[Method]
    prompts: list[torch.Tensor]                   # token ids (1, T) on the device
    max_new_tokens: int
    device: str
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0                                 # seeds the sampled runs
    target: Any = None                            # the loaded target model
    drafter: Any = None                           # the DFlash drafter (None: no DFlash rows, no cost model)
    block_sizes: tuple[int, ...] = (16,)
    tree_sizes: tuple[int, ...] = ()              # the draft-tree rows' sizes
    settings: dict = field(default_factory=dict)


@dataclass
class Measured:
    """What :func:`run` timed: per-method statistics and the cost model's forwards (None without a drafter)."""
    stats: dict[str, MethodStats]
    env: dict
    repeats: int
    costs: dict | None = None


def _prompt_texts(prompts: str | None, dataset: str | None, domain: str, num_prompts: int) -> tuple[list[str], str]:
    """The prompts, from one of three sources: a JSONL file, a public data set, or the built-in
    held-out prompts of ``domain``; and how the report names that source."""
    if prompts and dataset:
        raise ValueError("pass --prompts or --dataset, not both")
    if dataset:
        return dataset_prompts(dataset, num_prompts), f"dataset {dataset}"
    if prompts:
        return load_prompts(prompts, num_prompts), prompts
    return builtin_prompts(domain, num_prompts), f"built-in held-out {domain}"


def _shown(path: str | None) -> str | None:
    """A path inside this checkout as a relative one, so a report never records where it was run."""
    if path is None:
        return None
    try:
        return str(Path(path).resolve().relative_to(Path(__file__).resolve().parents[1]))
    except (ValueError, OSError):
        return str(path)


def resolve(target: str = "tiny", drafter: str | None = None, prompts: str | None = None, domain: str = "mixed",
            num_prompts: int = 8, max_new_tokens: int = 64, block_sizes: tuple[int, ...] = (16,),
            device: str = "cpu", random_drafter_layers: int | None = None, seed: int = 0,
            prompt_template: str = "{prompt}", hf_dflash: bool = True, eagle: str | None = None,
            draft_model: str | None = None, baselines: bool = True, temperature: float = 0.0,
            dataset: str | None = None, adaptive: bool = False, dtype: str = "float32", chat_template: bool = True,
            tree_sizes: tuple[int, ...] = (16, 32, 64)) -> Setup:
    """Load the target, the drafters and the prompts, and build the :func:`standard_methods`.

    The DFlash drafter is ``drafter`` (a local directory or a hub id of a published drafter, public
    layout), else the target's shipped one, else, with ``random_drafter_layers``, an untrained one
    of that depth (it measures the loop's overhead, not acceptance). The prompts come from
    ``prompts`` (JSONL), ``dataset`` (a name in :data:`DATASETS`) or the built-in held-out ``domain``.
    ``dtype`` (``float32``, ``bfloat16``, ``float16``) applies to the target and every drafter alike.
    With ``chat_template`` each prompt becomes a user turn of the tokenizer's chat template when it
    has one (how chat models are served and their drafters trained; the shipped target has none).
    ``baselines`` adds the EAGLE-style drafter and the small draft model (``eagle``,
    ``draft_model``, else the target's shipped ones).

    Arguments are checked before anything is loaded, and a bad drafter name fails before the
    target loads; a prompt that does not fit the target's context is refused before any method runs."""
    from .checkpoints import load_drafter
    from .target import load_pretrained, parse_dtype

    num_prompts = validate.check_int("num_prompts", num_prompts)
    max_new_tokens = validate.check_int("max_new_tokens", max_new_tokens)
    block_sizes = validate.check_block_sizes(block_sizes)
    temperature = validate.check_temperature(temperature)
    seed = validate.check_seed(seed)
    device = validate.check_device(device)
    torch_dtype = parse_dtype(dtype)
    if random_drafter_layers is not None:
        validate.check_int("random_drafter_layers", random_drafter_layers)
    prompt_template = prompt_template.replace("\\n", "\n")    # a literal \n typed on a command line
    if "{prompt}" not in prompt_template:
        raise ValueError("--prompt-template must contain {prompt}")
    texts, prompts_source = _prompt_texts(prompts, dataset, domain, num_prompts)
    texts = [prompt_template.replace("{prompt}", t) for t in texts]
    if drafter is None and not random_drafter_layers:
        from .target import default_drafter_path
        drafter = default_drafter_path(target)
        drafter = str(drafter) if drafter else None
    draft = load_drafter(drafter, dtype=torch_dtype) if drafter is not None else None   # a bad name fails first
    if draft is not None:
        validate.check_block_sizes(block_sizes, high=draft.config.max_block_size)
    from .target import target_context
    context = target_context(target)                  # from config.json: no size may outgrow the context
    validate.check_block_sizes(block_sizes, high=context)
    if tree_sizes:
        validate.check_block_sizes(tree_sizes, "tree_sizes", high=context)
    model, tokenizer = load_pretrained(target, device=device, dtype=torch_dtype)
    if draft is not None:
        draft = draft.to(device)
    if chat_template:
        from .train import apply_chat_template
        texts = apply_chat_template(tokenizer, texts)
    ids = [tokenizer(t, return_tensors="pt", add_special_tokens=False).input_ids.to(device) for t in texts]
    context = getattr(model.config, "max_position_embeddings", None)
    for i, x in enumerate(ids):                  # model.generate would run past the context; no method may
        if context is not None and x.shape[1] + max_new_tokens > context:
            raise ValueError(f"prompt {i + 1} ({x.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) does not "
                             f"fit the target's context of {context} tokens; shorten it or lower --max-new-tokens")
    if random_drafter_layers and draft is None:
        from .drafter import DFlashDrafter, DrafterConfig
        torch.manual_seed(seed)
        config = DrafterConfig.from_target(model.config, tokenizer.mask_token_id, num_layers=random_drafter_layers,
                                           block_size=max(block_sizes))
        draft = DFlashDrafter(config).to(device=device, dtype=torch_dtype).eval()
    eagle_drafter = small_lm = None
    if baselines:
        from .target import SHIPPED_BASELINES
        shipped = SHIPPED_BASELINES.get(target, {})
        eagle = eagle or (str(shipped["eagle"]) if "eagle" in shipped and shipped["eagle"].is_dir() else None)
        draft_model = draft_model or (str(shipped["draft_model"]) if "draft_model" in shipped
                                      and shipped["draft_model"].is_dir() else None)
        eagle_drafter = load_drafter(eagle, dtype=torch_dtype).to(device) if eagle else None
        small_lm = load_pretrained(draft_model, device=device, dtype=torch_dtype)[0] if draft_model else None
    sampling = SamplingParams(temperature=temperature)
    trees = tuple(tree_sizes)
    methods = standard_methods(model, tokenizer, draft, block_sizes, sampling, hf_dflash=hf_dflash, eagle=eagle_drafter,
                               draft_model=small_lm, tree_sizes=trees,
                               adaptive=tuple(sorted({4, 8, *block_sizes})) if adaptive else None)
    settings = {"target": target, "eagle": _shown(eagle), "draft_model": _shown(draft_model),
                "drafter": _shown(drafter) or (f"random, {random_drafter_layers} layers" if random_drafter_layers else None),
                "prompts_source": prompts_source, "temperature": temperature,
                "dtype": str(torch_dtype).removeprefix("torch."),
                "chat_template": bool(chat_template and getattr(tokenizer, "chat_template", None)),
                "prompt_template": prompt_template}
    return Setup(methods, ids, max_new_tokens, device, sampling, seed, model, draft, block_sizes, trees, settings)


def run(setup: Setup, repeats: int = 3, cost_repeats: int = 10) -> Measured:
    """Time every method of ``setup`` (:func:`measure`: interleaved, after a warm-up, each greedy
    output checked against the target's) and, with a DFlash drafter, the forwards of the cost model
    at the first prompt (:func:`measure_costs`, each the median of ``cost_repeats``)."""
    repeats, cost_repeats = validate.check_int("repeats", repeats), validate.check_int("cost_repeats", cost_repeats)
    if not setup.sampling.greedy:
        torch.manual_seed(setup.seed)
    stats = measure(setup.methods, setup.prompts, setup.max_new_tokens, repeats, device=setup.device,
                    greedy=setup.sampling.greedy)
    costs = None
    if setup.drafter is not None:
        costs = measure_costs(setup.target, setup.drafter, setup.prompts[0], setup.block_sizes, cost_repeats,
                              setup.tree_sizes)
    return Measured(stats, environment(setup.device), repeats, costs)


def report(setup: Setup, measured: Measured, json_out: str | None = None, quiet: bool = False) -> dict:
    """The summary (the JSON at the top of this module): one row per method with its speedups
    (:func:`summarise`), the cost model's rows next to the measured costs, and ``setup``'s choices
    in ``"env"``. Printed unless ``quiet``; written whole to ``json_out`` when given."""
    if json_out is not None:
        validate.check_output_file(json_out, "json_out")
    summary = summarise(measured.stats, measured.env, setup.max_new_tokens, len(setup.prompts), measured.repeats)
    if measured.costs is not None:
        summary["cost_model"] = {"costs": measured.costs, "rows": cost_model(summary, measured.costs)}
    summary["env"].update(setup.settings)
    if not quiet:
        print(format_table(summary))
        if summary.get("cost_model"):
            print("\ncost model (t: median seconds of one forward at the first prompt's context):")
            print(format_cost_model(summary["cost_model"]["rows"]))
    if json_out:
        atomic_write_text(json_out, json.dumps(summary, indent=1))    # never a half-written report
    return summary


def bench(**options) -> dict:
    """:func:`resolve`, :func:`run`, :func:`report`: every option of the three by name (the
    signature below is theirs), all checked before anything is loaded. Returns the report."""
    run_options = {k: options.pop(k) for k in list(options) if k in _options(run)}
    report_options = {k: options.pop(k) for k in list(options) if k in _options(report)}
    for name, value in run_options.items():                   # repeats, cost_repeats
        validate.check_int(name, value)
    if report_options.get("json_out") is not None:
        validate.check_output_file(report_options["json_out"], "json_out")
    setup = resolve(**options)
    return report(setup, run(setup, **run_options), **report_options)


def _options(step: Callable) -> dict[str, inspect.Parameter]:
    """``step``'s keyword options: its parameters with a default."""
    return {name: p for name, p in inspect.signature(step).parameters.items() if p.default is not p.empty}


bench.__signature__ = inspect.Signature(   # what help(bench), notebooks and the CLI's defaults see
    [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for step in (resolve, run, report) for p in _options(step).values()],
    return_annotation=dict)
