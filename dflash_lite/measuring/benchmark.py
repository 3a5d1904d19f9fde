"""The benchmark, ``python -m dflash_lite bench`` (docs/method.md#measuring, #the-cost-model):
:func:`bench` is :func:`resolve` (target, drafters, prompts, the :class:`Method` list), :func:`run`
(every method timed, interleaved, and the cost model's forwards) and :func:`report` (the summary,
printed and optionally written as JSON), three steps a notebook can also take one by one. Rows are
told apart by ``"kind"`` (a :class:`Kind`), never by the display ``"name"`` (:func:`rows_of`)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import outputs, validate
from ..decoding.acceptance import SamplingParams
from ..decoding.checkpoints import check_pair, load_drafter, load_pair
from ..decoding.costs import measure_costs
from ..decoding.drafter import DFlashDrafter, DrafterConfig
from ..decoding.shapes import EAGER, FixedShapes
from ..decoding.target import (SHIPPED_BASELINES, default_drafter_path, load_pretrained,
                               mask_token_id, parse_dtype, stop_token_ids, target_context)
from ..files import atomic_write_text
from ..prompts import builtin_prompts, dataset_prompts, encode_all, load_prompts
from . import batching
from .harness import MethodStats, environment, measure, run_benchmark  # noqa: F401  (public)
from .methods import Rows, compiled_methods, standard_methods  # noqa: F401  (public)
from .report import Method, cost_model, format_cost_model, format_table, summarise

IS_BENCH_REPORT = outputs.is_json_with(("env", "methods"))   # what --json replaces freely


@dataclass
class BenchConfig:
    """Every choice of a benchmark run (``python -m dflash_lite bench`` builds one from its flags).

    The DFlash drafter is ``drafter`` (a local directory or a hub id, public layout), else the
    target's shipped one, else, with ``random_drafter_layers``, an untrained one of that depth (it
    measures the loop's overhead, not acceptance). Prompts: ``prompts`` (JSONL), ``dataset`` (a
    name in ``prompts.DATASETS``) or the built-in held-out ``domain``, encoded by
    :func:`dflash_lite.prompts.encode`. ``dtype``: the target's and every drafter's. ``baselines``
    adds the EAGLE-style drafter and the small draft model (``eagle``, ``draft_model``, else the
    target's shipped ones). ``repeats``: timed rounds per method; ``cost_repeats``: repeats of each
    timed forward of the cost model."""
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
    compile: bool = False          # also every row on fixed shapes, compiled (CUDA graphs on CUDA)
    batch_sizes: tuple[int, ...] = ()  # the batch sweep instead (measuring.batching), its methods

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
        self.prompt_template = self.prompt_template.replace("\\n", "\n")  # \n typed in a shell
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
    drafter: Any = None  # the DFlash drafter (None: no DFlash rows, no cost model)
    settings: dict = field(default_factory=dict)
    stops: list[int] = field(default_factory=list)   # the target's stop tokens: a row ends there


@dataclass
class Measured:
    """What :func:`run` timed: per-method stats and the cost model's forwards (None: no drafter)."""
    stats: dict[str, MethodStats]
    env: dict
    costs: dict | None = None


def _prompt_texts(config: BenchConfig) -> tuple[list[str], str]:
    """The prompt texts (a JSONL file, a public data set or the built-in held-out ``domain``) and
    how the report names their source."""
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
        return str(Path(path).resolve().relative_to(Path(__file__).resolve().parents[2]))
    except (ValueError, OSError):
        return str(path)


def _peers(config: BenchConfig, torch_dtype) -> tuple[Any, Any, str | None, str | None]:
    """The EAGLE-style drafter and the small draft model (given, else the target's shipped ones)."""
    shipped = {k: str(p) for k, p in SHIPPED_BASELINES.get(config.target, {}).items() if p.is_dir()}
    eagle = config.eagle or shipped.get("eagle")
    small = config.draft_model or shipped.get("draft_model")
    eagle_drafter = load_drafter(eagle, dtype=torch_dtype).to(config.device) if eagle else None
    small_lm = load_pretrained(small, device=config.device, dtype=torch_dtype)[0] if small else None
    return eagle_drafter, small_lm, eagle, small


def _random_drafter(c: BenchConfig, model, tokenizer, torch_dtype) -> DFlashDrafter:
    """An untrained drafter of ``random_drafter_layers`` layers; its size is checked first."""
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
    context = target_context(c.target)  # from config.json: no size may outgrow the context
    validate.check_block_sizes(c.block_sizes, high=context)
    if c.tree_sizes:
        validate.check_block_sizes(c.tree_sizes, "tree_sizes", high=context)
    model, tokenizer, draft = load_pair(c.target, c.drafter, c.device, torch_dtype,
                                        shipped=not c.random_drafter_layers)
    if draft is not None:
        validate.check_block_sizes(c.block_sizes, high=draft.config.max_block_size)
    ids = [x.to(c.device) for x in encode_all(tokenizer, texts, c.chat_template)]
    context = getattr(model.config, "max_position_embeddings", None)
    for i, x in enumerate(ids):     # model.generate would run past the context; no method may
        if context is not None and x.shape[1] + c.max_new_tokens > context:
            raise ValueError(f"prompt {i + 1} ({x.shape[1]} tokens) + max_new_tokens "
                             f"({c.max_new_tokens}) does not fit the target's context of "
                             f"{context} tokens; shorten it or lower --max-new-tokens")
    if c.random_drafter_layers and draft is None:
        torch.manual_seed(c.seed)
        draft = _random_drafter(c, model, tokenizer, torch_dtype)
    sampling = SamplingParams(temperature=c.temperature, seed=c.seed)
    peers = c.baselines and not c.batch_sizes
    eagle, small_lm, eagle_path, small_path = _peers(c, torch_dtype) if peers else (None,) * 4
    if eagle is not None:                   # checked against the target as the DFlash drafter is
        check_pair(eagle, model, tokenizer, eagle_path, mask=False)
    methods = [] if c.batch_sizes else standard_methods(
        model, tokenizer, draft, eagle, small_lm, Rows(c.block_sizes, c.tree_sizes, sampling,
            c.hf_dflash, adaptive=tuple(sorted({4, 8, *c.block_sizes})) if c.adaptive else None))
    # shapes sized for the longest prompt, built here: never inside a timed run
    if c.compile and not c.batch_sizes:
        methods += compiled_methods(model, draft, c.block_sizes, c.tree_sizes,
                                    max(x.shape[1] for x in ids) + c.max_new_tokens, sampling,
                                    stop_token_ids(model, tokenizer))
    shipped = None if c.random_drafter_layers else default_drafter_path(c.target)
    untrained = f"random, {c.random_drafter_layers} layers" if c.random_drafter_layers else None
    settings = {"target": c.target, "eagle": _shown(eagle_path), "draft_model": _shown(small_path),
                "drafter": _shown(c.drafter or shipped) or untrained,
                "prompts_source": prompts_source, "temperature": c.temperature,
                "seed": c.seed if c.temperature > 0 else None,
                "dtype": str(torch_dtype).removeprefix("torch."),
                "chat_template": bool(c.chat_template
                                      and getattr(tokenizer, "chat_template", None)),
                "prompt_template": c.prompt_template}
    return Setup(c, methods, ids, model, draft, settings, stop_token_ids(model, tokenizer))


def run(setup: Setup) -> Measured:
    """Time every method of ``setup`` (:func:`measure`, outputs checked against the target's greedy
    output or, at temperature > 0, its sample seeded by ``seed``) and, with a DFlash drafter, the
    cost model's forwards at the first prompt (:func:`dflash_lite.decoding.costs.measure_costs`)."""
    c = setup.config
    sampling = SamplingParams(temperature=c.temperature, seed=c.seed)
    if not sampling.greedy:
        torch.manual_seed(c.seed)
    if c.batch_sizes:
        return _sweep(setup, sampling)
    stats = measure(setup.methods, setup.prompts, c.max_new_tokens, c.repeats, device=c.device,
                    greedy=sampling.greedy, seeded=sampling.seed is not None)
    env = environment(c.device)
    if sessions := [m.session for m in setup.methods if m.session is not None]:
        env["policy_session"] = {"calibration_seconds": sum(s.calibration_seconds
                                                            for s in sessions)}
    costs = (measure_costs(setup.target, setup.drafter, setup.prompts[0], c.block_sizes,
                           c.cost_repeats, c.tree_sizes) if setup.drafter is not None else None)
    return Measured(stats, env, costs)


def _sweep(setup: Setup, sampling: SamplingParams) -> Measured:
    """The batch sweep (:func:`dflash_lite.measuring.batching.sweep`), eager, and with ``compile``
    on compiled fixed shapes too, sized for the longest prompt."""
    c = setup.config
    tree = c.tree_sizes[0] if c.tree_sizes else None
    shapes = [EAGER]
    if c.compile:
        length = max(x.shape[1] for x in setup.prompts) + c.max_new_tokens
        shapes.append(FixedShapes(length, compile=True, buckets={
            1, 2, 4, 8, 16, 32, 64, *c.block_sizes, *((tree + 1,) if tree else ())}))
    rows, costs = [], {}
    for s in shapes:
        result = batching.sweep(setup.target, setup.drafter, setup.prompts, c.max_new_tokens,
                                c.batch_sizes, c.block_sizes, tree, sampling, setup.stops,
                                c.repeats, c.cost_repeats, c.device, s,
                                None if c.quiet else print)
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
               "crossover": {"line": batching.PAYS, "measured": batching.crossover(eager),
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
    """The summary (docs/method.md#measuring has its JSON layout): one row per method with its
    speedups (:func:`summarise`), the cost model's rows next to the measured costs, and the setup's
    choices in ``"env"``. Printed unless ``quiet``; written whole to ``json_out`` when given."""
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
        atomic_write_text(c.json_out, json.dumps(summary, indent=1))  # never a half-written report
    return summary


def bench(config: BenchConfig | None = None, **options) -> dict:
    """:func:`resolve`, :func:`run` and :func:`report` of ``config`` (or a :class:`BenchConfig` of
    ``options``: ``bench(num_prompts=2, quiet=True)``), all checked first; returns the report."""
    setup = resolve(config or BenchConfig(**options))
    return report(setup, run(setup))
