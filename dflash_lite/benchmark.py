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

    {"env": {...},
     "methods": [{"name", "kind", "block_size", "tree_size", "default", "tokens_per_s",
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

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers

from . import batching, outputs, validate
from .acceptance import SamplingParams
from .baselines import (AdaptiveDFlashProposer, DraftModelProposer, EagleProposer, NoDraftProposer,
                        hf_generate)
from .checkpoints import check_pair, load_drafter, load_pair, to_transformers
from .costs import measure_costs
from .decode import DFlashProposer, generate
from .drafter import DFlashDrafter, DrafterConfig
from .files import atomic_write_text
from .ngram import NgramProposer
from .report import (TRANSFORMERS_KINDS, Kind, Method, cost_model, format_cost_model, format_table,
                     summarise)
from .policy import DEFAULT_OPTIONS, NO_NGRAM_OPTIONS, PolicySession
from .shapes import EAGER, FixedShapes, Shapes
from .prompts import builtin_prompts, dataset_prompts, encode_all, load_prompts
from .target import (SHIPPED_BASELINES, default_drafter_path, load_pretrained, mask_token_id,
                     parse_dtype, stop_token_ids, target_context)
from .timing import interleaved
from .tree import DFlashTreeProposer, HybridTreeProposer


@dataclass
class MethodStats:
    method: Method
    times: list[float] = field(default_factory=list)         # per repeat: seconds over all prompts
    # per repeat: new tokens over all prompts
    tokens: list[int] = field(default_factory=list)
    acceptance_lengths: list[int] = field(default_factory=list)
    # per repeat: seconds per phase over all prompts
    phase_runs: list[dict] = field(default_factory=list)
    # per repeat: verification steps over all prompts
    step_runs: list[int] = field(default_factory=list)
    identical: bool | None = None
    error: str | None = None


def environment(device: str) -> dict:
    env = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "python": platform.python_version(),
           "machine": platform.machine(), "processor": platform.processor()}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def measure(methods: list[Method], prompts: list[torch.Tensor], max_new_tokens: int,
            repeats: int = 3, reference: dict | None = None, device: str = "cpu",
            greedy: bool = True, seeded: bool = False) -> dict[str, MethodStats]:
    """Run every method on every prompt, interleaved, ``repeats`` times after one warm-up pass.

    ``reference`` maps prompt index -> the target's greedy tokens (by default the outputs of the
    autoregressive row, else of ``model.generate``) for the identity check. Sampled and
    ``seeded`` (``SamplingParams.seed``): the rows of this project's loop are checked against the
    autoregressive row's seeded sample, transformers' rows not at all; unseeded: none is.
    """
    stats = {m.name: MethodStats(m) for m in methods}
    outputs: dict[str, dict[int, list[int]]] = {m.name: {} for m in methods}
    # warm-up, and the outputs to check
    for m in methods:
        for i, ids in enumerate(prompts):
            try:
                outputs[m.name][i] = m.run(ids, max_new_tokens)[0]
            except Exception as e:
                # a failing method is reported, not dropped
                stats[m.name].error = (f"{type(e).__name__}: "
                                       f"{str(e).splitlines()[0] if str(e) else ''}")
                break
    if reference is None:
        base = next((m.name for kind in (Kind.AUTOREGRESSIVE, Kind.HF_GENERATE) for m in methods
                     if m.kind is kind and stats[m.name].error is None), None)
        reference = outputs[base] if base else {}
    live = [m for m in methods if stats[m.name].error is None]
    # per repeat: seconds, tokens
    totals = {m.name: [[0.0, 0] for _ in range(repeats)] for m in live}
    phases = {m.name: [{} for _ in range(repeats)] for m in live}
    steps = {m.name: [0] * repeats for m in live}
    # each prompt: the methods interleaved, ``repeats`` rounds
    for ids in prompts:
        calls = interleaved({m.name: (lambda m=m: m.run(ids, max_new_tokens)) for m in live},
                            repeats, 0, device)
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
    for m in live:      # sampled: transformers' rows draw from their own stream, ours are seeded
        if reference and (greedy or seeded and m.kind not in TRANSFORMERS_KINDS):
            stats[m.name].identical = all(outputs[m.name][i] == reference[i] for i in reference)
    return stats


def run_benchmark(methods: list[Method], prompts: list[torch.Tensor], max_new_tokens: int,
                  repeats: int = 3, reference: dict | None = None, device: str = "cpu",
                  greedy: bool = True, seeded: bool = False) -> dict:
    """:func:`measure` a list of methods and :func:`summarise` it: the report without a cost
    model."""
    stats = measure(methods, prompts, max_new_tokens, repeats, reference, device, greedy, seeded)
    return summarise(stats, environment(device), max_new_tokens, len(prompts), repeats)


# ----------------------------------------------------------------------------- standard methods
@dataclass
class Rows:
    """Which rows :func:`standard_methods` builds, and how every run samples. ``prompt_lookup``:
    drafts per step of the prompt-lookup rows, ``adaptive``: the adaptive rule's sizes (None: no
    such rows); ``draft_block_size``: the small draft model's; ``policy``: the cost-aware rows."""
    block_sizes: tuple[int, ...] = (16,)
    tree_sizes: tuple[int, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    hf_dflash: bool = True
    draft_block_size: int = 5
    prompt_lookup: int | None = 10
    adaptive: tuple[int, ...] | None = None
    policy: bool = True


def standard_methods(target, tokenizer, drafter=None, eagle=None, draft_model=None,
                     rows: Rows | None = None, **options) -> list[Method]:
    """Baselines (the project's loop, ``model.generate``), the peers (classic speculative decoding
    with a small draft model, here and in transformers; prompt lookup, there and in our loop; the
    EAGLE-style drafter), then DFlash here: the default policy (the headline row) and, beside it,
    the policy without prompt lookup, each fixed block size, draft trees of ``tree_sizes`` nodes,
    the same trees with prompt lookup's branch, and transformers' DFlash path with the same
    weights. ``rows`` (or its fields as keywords): which rows, see :class:`Rows`."""
    r = rows or Rows(**options)
    sampling, block_sizes, prompt_lookup, draft_block_size = (r.sampling, r.block_sizes,
                                                              r.prompt_lookup, r.draft_block_size)
    stops = stop_token_ids(target, tokenizer)

    # transformers' generate, with or without a helper
    def hf(**kwargs):
        return lambda ids, n: hf_generate(target, tokenizer, ids, n, stops, sampling, **kwargs)

    methods = [
        Method("autoregressive (ours)", _spec_run(target, NoDraftProposer, sampling, stops),
               Kind.AUTOREGRESSIVE, block_size=1),
        Method("model.generate", hf(), Kind.HF_GENERATE, block_size=1),
    ]
    if draft_model is not None:
        methods.append(Method(f"draft model (ours) k={draft_block_size - 1}", _spec_run(
            target, lambda: DraftModelProposer(draft_model, target, draft_block_size), sampling,
            stops), Kind.DRAFT_MODEL, block_size=draft_block_size))
        methods.append(Method("draft model (transformers)", hf(assistant_model=draft_model),
                              Kind.HF_DRAFT_MODEL))
    if prompt_lookup:
        methods.append(Method(f"prompt lookup (transformers) k={prompt_lookup}",
                              hf(prompt_lookup_num_tokens=prompt_lookup), Kind.PROMPT_LOOKUP))
        methods.append(Method(f"prompt lookup (ours) k={prompt_lookup}", _spec_run(
            target, lambda: NgramProposer(prompt_lookup), sampling, stops), Kind.NGRAM))
    if eagle is not None:
        methods.append(Method(f"EAGLE-style (ours) B={eagle.config.block_size}", _spec_run(
            target, lambda: EagleProposer(eagle, target), sampling, stops), Kind.EAGLE,
            block_size=eagle.config.block_size))
    if drafter is not None:
        methods += _dflash_rows(target, drafter, block_sizes, r.tree_sizes, r.adaptive, r.policy,
                                (sampling, stops))
        if r.hf_dflash:
            converted = to_transformers(drafter, dtype=next(target.parameters()).dtype).to(
                target.device)
            methods.append(Method(f"DFlash (transformers) B={drafter.config.block_size}",
                                  hf(assistant_model=converted, speculation_type="dflash"),
                                  Kind.HF_DFLASH, block_size=drafter.config.block_size))
    return methods


def _dflash_rows(target, drafter, block_sizes, tree_sizes, adaptive, policy: bool, loop,
                 shapes: Shapes = EAGER) -> list[Method]:
    """Our DFlash rows: the two policies (the default first; on fixed shapes the default only),
    fixed block sizes, the adaptive rule, draft trees and hybrid trees; ``loop``: (sampling, stop
    tokens) of every run; ``shapes``: what every proposer runs on (:mod:`dflash_lite.shapes`)."""
    sampling, stops = loop
    rows = []
    policies = (("DFlash (ours) cost-aware", DEFAULT_OPTIONS, True),
                ("DFlash (ours) cost-aware, no n-gram", NO_NGRAM_OPTIONS, False))
    for name, options, default in policies[: (1 if shapes.fixed else 2) if policy else 0]:
        session = PolicySession(drafter, target, options, recalibrate=False)
        rows.append(Method(name, _policy_run(target, session, sampling, stops, shapes),
                           Kind.DFLASH_POLICY, default=default and not shapes.fixed,
                           session=session))
    for b in block_sizes:
        rows.append(Method(f"DFlash (ours) B={b}", _spec_run(target, lambda b=b: DFlashProposer(
            drafter, target, b, shapes=shapes), sampling, stops), Kind.DFLASH, block_size=b))
    if adaptive:
        sizes = "/".join(map(str, sorted(adaptive)))
        rows.append(Method(f"DFlash (ours) adaptive B in {sizes}", _spec_run(
            target, lambda: AdaptiveDFlashProposer(drafter, target, adaptive), sampling, stops),
            Kind.DFLASH_ADAPTIVE))
    for n in tree_sizes:
        rows.append(Method(f"DFlash tree N={n}", _spec_run(target, lambda n=n: DFlashTreeProposer(
            drafter, target, n, shapes=shapes), sampling, stops), Kind.DFLASH_TREE, tree_size=n))
    for n in tree_sizes:
        rows.append(Method(f"DFlash hybrid tree N={n} + n-gram", _spec_run(
            target, lambda n=n: HybridTreeProposer(drafter, target, n, shapes=shapes), sampling,
            stops), Kind.DFLASH_HYBRID, tree_size=n))
    return rows


def compiled_methods(target, drafter, block_sizes, tree_sizes, length: int,
                     sampling: SamplingParams, stops) -> list[Method]:
    """``bench --compile`` (docs/method.md#fixed-shapes-and-compilation): plain decoding, prompt
    lookup and, with a drafter, the default policy, each fixed block size, the draft trees and
    the hybrid trees, all on one :class:`~dflash_lite.shapes.FixedShapes` of ``length`` tokens
    with compiled forwards (CUDA graphs on CUDA), recorded in the untimed warm-up. Each row is
    marked ``compiled`` and named so."""
    buckets = {1, 2, 4, 8, 16, 32, 64, *block_sizes, *(n + 1 for n in tree_sizes)}
    shapes = FixedShapes(length, compile=True, buckets=buckets)
    rows = [Method("autoregressive (ours)",
                   _spec_run(target, lambda: NoDraftProposer(shapes), sampling, stops),
                   Kind.AUTOREGRESSIVE, block_size=1),
            Method("prompt lookup (ours) k=10",
                   _spec_run(target, lambda: NgramProposer(10, shapes=shapes), sampling, stops),
                   Kind.NGRAM)]
    if drafter is not None:
        rows += _dflash_rows(target, drafter, block_sizes, tree_sizes, None, True,
                             (sampling, stops), shapes)
    how = "CUDA graphs" if target.device.type == "cuda" else "compiled"
    for row in rows:
        row.name, row.compiled = f"{row.name} ({how})", True
    return rows


def _spec_run(target, make_proposer, sampling, stops):
    """A method's run: the decode loop with a fresh proposer (block size 1: the autoregressive
    baseline)."""
    def run(ids, n):
        result = generate(target, make_proposer(), ids, n, sampling, stops)
        return result.tokens, result
    return run


def _policy_run(target, session: PolicySession, sampling, stops, shapes: Shapes = EAGER):
    """A policy row's run, as one user's session: the step costs measured at its first run (at the
    first prompt, in the untimed warm-up) and the acceptance estimates each run leaves, both kept
    in ``session`` for the next run, as an ``Engine`` keeps them."""
    def run(ids, n):
        proposer = session.proposer(ids, shapes)
        result = generate(target, proposer, ids, n, sampling, stops)
        session.finished(proposer)
        return result.tokens, result
    return run


# ----------------------------------------------------------------- bench = resolve -> run -> report
# --json replaces only these freely
IS_BENCH_REPORT = outputs.is_json_with(("env", "methods"))


@dataclass
class BenchConfig:
    """Every choice of a benchmark run (``python -m dflash_lite bench`` builds one from its flags).

    The DFlash drafter is ``drafter`` (a local directory or a hub id of a published drafter, public
    layout), else the target's shipped one, else, with ``random_drafter_layers``, an untrained one
    of that depth (it measures the loop's overhead, not acceptance). The prompts come from
    ``prompts`` (JSONL), ``dataset`` (a name in ``prompts.DATASETS``) or the built-in held-out
    ``domain``. ``dtype`` applies to the target and every drafter alike. With ``chat_template``
    each prompt becomes a user turn of the tokenizer's chat template when it has one
    (:func:`dflash_lite.prompts.encode`). ``baselines`` adds the EAGLE-style drafter and the small
    draft model (``eagle``, ``draft_model``, else the target's shipped ones). ``repeats``: timed
    rounds per method; ``cost_repeats``: repeats of each timed forward of the cost model.
    ``json_out`` replaces an existing file only when it is a bench report, or with ``overwrite``."""
    target: str = "tiny"
    drafter: str | None = None
    prompts: str | None = None
    dataset: str | None = None
    domain: str = "mixed"
    num_prompts: int = 8
    max_new_tokens: int = 64
    block_sizes: tuple[int, ...] = (16,)
    tree_sizes: tuple[int, ...] = (16, 32, 64)
    adaptive: bool = False
    device: str = "cpu"
    dtype: str = "float32"
    random_drafter_layers: int | None = None
    seed: int = 0
    prompt_template: str = "{prompt}"
    chat_template: bool = True
    temperature: float = 0.0
    hf_dflash: bool = True
    baselines: bool = True
    eagle: str | None = None
    draft_model: str | None = None
    repeats: int = 3
    cost_repeats: int = 10
    json_out: str | None = None
    overwrite: bool = False        # json_out may replace a file that is not a bench report
    quiet: bool = False
    # also every row of the loop on fixed shapes, compiled (CUDA graphs on CUDA)
    compile: bool = False
    # the batch sweep instead (dflash_lite.batching): these batch sizes, its own methods
    batch_sizes: tuple[int, ...] = ()

    def check(self) -> BenchConfig:
        """Every option checked (one ValueError line), before anything is loaded; returns self."""
        for name in ("num_prompts", "max_new_tokens"):
            validate.check_int(name, getattr(self, name))
        for name in ("repeats", "cost_repeats"):        # each round keeps its results: bounded
            validate.check_int(name, getattr(self, name), 1, validate.MAX_REPEATS)
        self.block_sizes = validate.check_block_sizes(self.block_sizes)
        self.tree_sizes = tuple(self.tree_sizes)
        if self.batch_sizes:
            self.batch_sizes = validate.check_block_sizes(self.batch_sizes, "batch_sizes",
                                                          high=validate.MAX_BATCH)
        self.temperature = validate.check_temperature(self.temperature)
        self.seed = validate.check_seed(self.seed)
        self.device = validate.check_device(self.device)
        parse_dtype(self.dtype)
        if self.random_drafter_layers is not None:
            validate.check_int("random_drafter_layers", self.random_drafter_layers)
        # a literal \n typed on a command line
        self.prompt_template = self.prompt_template.replace("\\n", "\n")
        if "{prompt}" not in self.prompt_template:
            raise ValueError("--prompt-template must contain {prompt}")
        if self.prompts and self.dataset:
            raise ValueError("pass --prompts or --dataset, not both")
        if self.json_out is not None:       # the one output guard: not the package, no foreign file
            outputs.guard_output_file(self.json_out, "json_out", self.overwrite,
                                      own=IS_BENCH_REPORT)
        return self


@dataclass
class Setup:
    """What :func:`resolve` loaded: the methods to run on the tokenized prompts, what the cost
    model needs, and the choices the report records (``settings``, added to its ``"env"``)."""
    config: BenchConfig
    methods: list[Method]
    prompts: list[torch.Tensor]                   # token ids (1, T) on the device
    target: Any = None                            # the loaded target model
    # the DFlash drafter (None: no DFlash rows, no cost model)
    drafter: Any = None
    settings: dict = field(default_factory=dict)
    tokenizer: Any = None


@dataclass
class Measured:
    """What :func:`run` timed: per-method statistics and the cost model's forwards (None without a
    drafter)."""
    stats: dict[str, MethodStats]
    env: dict
    costs: dict | None = None


def _prompt_texts(config: BenchConfig) -> tuple[list[str], str]:
    """The prompts, from one of three sources: a JSONL file, a public data set, or the built-in
    held-out prompts of ``domain``; and how the report names that source."""
    if config.dataset:
        return dataset_prompts(config.dataset, config.num_prompts), f"dataset {config.dataset}"
    if config.prompts:
        return load_prompts(config.prompts, config.num_prompts), config.prompts
    return builtin_prompts(config.domain, config.num_prompts), f"built-in held-out {config.domain}"


def _shown(path: str | None) -> str | None:
    """A path inside this checkout as a relative one, so a report never records where it was run."""
    if path is None:
        return None
    try:
        return str(Path(path).resolve().relative_to(Path(__file__).resolve().parents[1]))
    except (ValueError, OSError):
        return str(path)


def _check_context(model, ids: list[torch.Tensor], max_new_tokens: int) -> None:
    context = getattr(model.config, "max_position_embeddings", None)
    # model.generate would run past the context; no method may
    for i, x in enumerate(ids):
        if context is not None and x.shape[1] + max_new_tokens > context:
            raise ValueError(f"prompt {i + 1} ({x.shape[1]} tokens) + max_new_tokens "
                             f"({max_new_tokens}) does not fit the target's context of {context} "
                             "tokens; shorten it or lower --max-new-tokens")


def _peers(config: BenchConfig, torch_dtype) -> tuple[Any, Any, str | None, str | None]:
    """The EAGLE-style drafter and the small draft model (given, else the target's shipped ones)."""
    shipped = SHIPPED_BASELINES.get(config.target, {})
    eagle = config.eagle or (str(shipped["eagle"]) if "eagle" in shipped
                             and shipped["eagle"].is_dir() else None)
    small = config.draft_model or (str(shipped["draft_model"]) if "draft_model" in shipped
                                   and shipped["draft_model"].is_dir() else None)
    eagle_drafter = load_drafter(eagle, dtype=torch_dtype).to(config.device) if eagle else None
    small_lm = load_pretrained(small, device=config.device, dtype=torch_dtype)[0] if small else None
    return eagle_drafter, small_lm, eagle, small


def _random_drafter(c: BenchConfig, model, tokenizer, torch_dtype) -> DFlashDrafter:
    """An untrained drafter of ``random_drafter_layers`` layers, its size checked (parameters and
    free memory) before it is built."""
    mask = mask_token_id(tokenizer)
    if mask is None:
        raise ValueError("--random-drafter-layers: the target's tokenizer has no mask token and "
                         "no reserved special token to use as one; a DFlash drafter needs one")
    layers = c.random_drafter_layers
    config = DrafterConfig.from_target(model.config, mask, num_layers=layers,
                                       block_size=max(c.block_sizes))
    parameters = validate.check_model_shape(config.to_dict(), embeddings=0)
    validate.check_memory(f"a random drafter of {layers} layers", parameters * 4, c.device,
                          f"{parameters / 1e9:.2f}B parameters")
    return DFlashDrafter(config).to(device=c.device, dtype=torch_dtype).eval()


def resolve(config: BenchConfig) -> Setup:
    """Load the target, the drafters and the prompts, and build the :func:`standard_methods`.
    A bad drafter name fails before the target loads; a prompt that does not fit the target's
    context is refused before any method runs."""
    c = config.check()
    torch_dtype = parse_dtype(c.dtype)
    texts, prompts_source = _prompt_texts(c)
    texts = [c.prompt_template.replace("{prompt}", t) for t in texts]
    # from config.json: no size may outgrow the context
    context = target_context(c.target)
    validate.check_block_sizes(c.block_sizes, high=context)
    if c.tree_sizes:
        validate.check_block_sizes(c.tree_sizes, "tree_sizes", high=context)
    model, tokenizer, draft = load_pair(c.target, c.drafter, c.device, torch_dtype,
                                        shipped=not c.random_drafter_layers)
    if draft is not None:
        validate.check_block_sizes(c.block_sizes, high=draft.config.max_block_size)
    ids = [x.to(c.device) for x in encode_all(tokenizer, texts, c.chat_template)]
    _check_context(model, ids, c.max_new_tokens)
    if c.random_drafter_layers and draft is None:
        torch.manual_seed(c.seed)
        draft = _random_drafter(c, model, tokenizer, torch_dtype)
    eagle, small_lm, eagle_path, small_path = (_peers(c, torch_dtype)
                                               if c.baselines and not c.batch_sizes
                                               else (None, None, None, None))
    if eagle is not None:                   # checked against the target as the DFlash drafter is
        check_pair(eagle, model, tokenizer, eagle_path, mask=False)
    methods = [] if c.batch_sizes else standard_methods(
        model, tokenizer, draft, eagle, small_lm, Rows(
            c.block_sizes, c.tree_sizes, SamplingParams(temperature=c.temperature, seed=c.seed),
            c.hf_dflash, adaptive=tuple(sorted({4, 8, *c.block_sizes})) if c.adaptive else None))
    # shapes sized for the longest prompt, built here: never inside a timed run
    if c.compile and not c.batch_sizes:
        methods += compiled_methods(model, draft, c.block_sizes, c.tree_sizes,
                                    max(x.shape[1] for x in ids) + c.max_new_tokens,
                                    SamplingParams(temperature=c.temperature, seed=c.seed),
                                    stop_token_ids(model, tokenizer))
    drafter_path = c.drafter or (None if c.random_drafter_layers
                                 else default_drafter_path(c.target))
    drafter_shown = _shown(str(drafter_path) if drafter_path else None)
    settings = {"target": c.target, "eagle": _shown(eagle_path), "draft_model": _shown(small_path),
                "drafter": drafter_shown or (f"random, {c.random_drafter_layers} layers"
                                             if c.random_drafter_layers else None),
                "prompts_source": prompts_source, "temperature": c.temperature,
                "seed": c.seed if c.temperature > 0 else None,
                "dtype": str(torch_dtype).removeprefix("torch."),
                "chat_template": bool(c.chat_template
                                      and getattr(tokenizer, "chat_template", None)),
                "prompt_template": c.prompt_template}
    return Setup(c, methods, ids, model, draft, settings, tokenizer)


def run(setup: Setup) -> Measured:
    """Time every method of ``setup`` (:func:`measure`: interleaved, after a warm-up, each output
    checked against the target's: greedy, or its sample seeded by ``seed`` at temperature > 0)
    and, with a DFlash drafter, the forwards of the cost model at the first prompt
    (:func:`dflash_lite.costs.measure_costs`, each the median of ``cost_repeats``)."""
    c = setup.config
    sampling = SamplingParams(temperature=c.temperature, seed=c.seed)
    if not sampling.greedy:
        torch.manual_seed(c.seed)
    if c.batch_sizes:
        return _sweep(setup, sampling)
    stats = measure(setup.methods, setup.prompts, c.max_new_tokens, c.repeats, device=c.device,
                    greedy=sampling.greedy, seeded=sampling.seed is not None)
    env = environment(c.device)
    sessions = [m.session for m in setup.methods if m.session is not None]
    if sessions:
        env["policy_session"] = {"calibration_seconds": sum(s.calibration_seconds
                                                            for s in sessions)}
    costs = None
    if setup.drafter is not None:
        costs = measure_costs(setup.target, setup.drafter, setup.prompts[0], c.block_sizes,
                              c.cost_repeats, c.tree_sizes)
    return Measured(stats, env, costs)


def _sweep(setup: Setup, sampling: SamplingParams) -> Measured:
    """The batch sweep (:func:`dflash_lite.batching.sweep`), eager, and with ``compile`` on
    compiled fixed shapes too, sized for the longest prompt."""
    c = setup.config
    stops = stop_token_ids(setup.target, setup.tokenizer)
    tree = c.tree_sizes[0] if c.tree_sizes else None
    progress = None if c.quiet else print
    shapes = [EAGER]
    if c.compile:
        length = max(x.shape[1] for x in setup.prompts) + c.max_new_tokens
        shapes.append(FixedShapes(length, compile=True, buckets={
            1, 2, 4, 8, 16, 32, 64, *c.block_sizes, *((tree + 1,) if tree else ())}))
    rows, costs = [], {}
    for s in shapes:
        result = batching.sweep(setup.target, setup.drafter, setup.prompts, c.max_new_tokens,
                                c.batch_sizes, c.block_sizes, tree, sampling, stops, c.repeats,
                                c.cost_repeats, c.device, s, progress)
        for row in result["rows"]:
            row["compiled"] = s.compiled
            if s.compiled:
                row["name"] += " (compiled)"
        rows += result["rows"]
        costs = costs or result["costs"]
    return Measured({}, environment(c.device), {"batch": {"rows": rows, "costs": costs}})


def _batch_report(setup: Setup, measured: Measured) -> dict:
    c, rows = setup.config, measured.costs["batch"]["rows"]
    eager = [r for r in rows if not r["compiled"]]
    summary = {"env": {**measured.env, **setup.settings}, "methods": rows,
               "batch_sizes": list(c.batch_sizes), "max_new_tokens": c.max_new_tokens,
               "num_prompts": len(setup.prompts), "repeats": c.repeats,
               "cost_model": {"costs_by_batch": measured.costs["batch"]["costs"]},
               "crossover": {"line": batching.PAYS,
                             "measured": batching.crossover(eager),
                             "predicted": batching.crossover(eager, key="predicted_speedup")}}
    if not c.quiet:
        print(batching.format_batch_table(rows))
        x = summary["crossover"]
        said = {key: f"at batch {x[key]}" if x[key] else "at no batch size of this sweep"
                for key in ("measured", "predicted")}
        print(f"\nthe best speculative row falls below {x['line']}x over batched plain decoding "
              f"{said['measured']} (measured); the cost model says {said['predicted']}")
    if c.json_out:
        atomic_write_text(c.json_out, json.dumps(summary, indent=1))
    return summary


def report(setup: Setup, measured: Measured) -> dict:
    """The summary (the JSON at the top of this module): one row per method with its speedups
    (:func:`summarise`), the cost model's rows next to the measured costs, and the setup's choices
    in ``"env"``. Printed unless ``quiet``; written whole to ``json_out`` when given."""
    c = setup.config
    if c.batch_sizes:
        return _batch_report(setup, measured)
    summary = summarise(measured.stats, measured.env, c.max_new_tokens, len(setup.prompts),
                        c.repeats)
    if measured.costs is not None:
        summary["cost_model"] = {"costs": measured.costs,
                                 "rows": cost_model(summary, measured.costs)}
    summary["env"].update(setup.settings)
    if not c.quiet:
        print(format_table(summary))
        if summary.get("cost_model"):
            print("\ncost model (t: median seconds of one forward at the first prompt's context):")
            print(format_cost_model(summary["cost_model"]["rows"]))
    if c.json_out:
        # never a half-written report
        atomic_write_text(c.json_out, json.dumps(summary, indent=1))
    return summary


def bench(config: BenchConfig | None = None, **options) -> dict:
    """:func:`resolve`, :func:`run`, :func:`report` for ``config`` (or a :class:`BenchConfig` of
    ``options``: ``bench(num_prompts=2, quiet=True)``), all checked before anything is loaded.
    Returns the report."""
    config = (config or BenchConfig(**options)).check()
    setup = resolve(config)
    return report(setup, run(setup))
