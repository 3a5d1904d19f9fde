"""The command line, ``python -m dflash_lite demo``, ``bench`` and ``train``: each command is a
typed function of its config dataclass, whose fields are the flags' defaults (:class:`Options`):
:class:`DemoConfig`, :class:`~dflash_lite.measuring.benchmark.BenchConfig` and
:class:`~dflash_lite.training.train.DrafterTrainConfig` (README.md#two-commands)."""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError

from . import corpus, signals, validate
from .decoding.acceptance import SamplingParams
from .decoding.checkpoints import load_pair
from .decoding.drafter import Conditioning, Drafting
from .decoding.engine import Engine
from .decoding.target import DTYPES, LoadError, default_drafter_path, parse_dtype
from .decoding.timing import interleaved
from .measuring.benchmark import BenchConfig, bench
from .measuring.report import all_dflash_failed
from .prompts import DATASETS, TRAIN_DATASETS
from .training.train import DrafterTrainConfig, train_drafter
from .validate import Parser  # noqa: F401 (public: the one argparse every command uses)


def shown_path(path) -> str:
    """A local path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@dataclass
class DemoConfig:
    """The demo's choices. ``drafter``: the shipped one (default), a directory or a hub id;
    ``block_size`` fixes DFlash's block size (None: the cost-aware policy chooses each step);
    ``dtype``: target and drafter alike; timings: medians of ``repeats`` interleaved runs."""
    target: str = "tiny"
    prompt: str = corpus.math_problem(corpus.HELD_OUT_SEED + 7).prompt
    max_new_tokens: int = 96
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    device: str = "cpu"
    drafter: str | None = None
    block_size: int | None = None
    repeats: int = 3
    dtype: str = "float32"
    compile: bool = False          # both rows on the static-shape path (CUDA graphs on CUDA)

    def check(self) -> DemoConfig:
        validate.check_prompt(self.prompt)
        validate.check_int("max_new_tokens", self.max_new_tokens)
        validate.check_int("repeats", self.repeats, 1, validate.MAX_REPEATS)
        validate.check_seed(self.seed)
        if self.block_size is not None:
            validate.check_int("block_size", self.block_size)
        self.device = validate.check_device(self.device)
        SamplingParams(self.temperature, self.top_k, self.top_p)
        parse_dtype(self.dtype)
        return self


def demo(config: DemoConfig | None = None, **options) -> dict:
    """Complete the prompt with the target alone and with DFlash (when there is a drafter), timed
    by the one interleaved timer; print both, and return each one's text, tokens, tokens/s, time to
    first token and tau by name ("autoregressive", "DFlash")."""
    c = (config or DemoConfig(**options)).check()
    sampling = SamplingParams(c.temperature, c.top_k, c.top_p)
    torch_dtype = parse_dtype(c.dtype)
    model, tokenizer, draft = load_pair(c.target, c.drafter, c.device, torch_dtype)
    engines = {"autoregressive": Engine(model, tokenizer, compile=c.compile)}
    if draft is not None:
        engines["DFlash"] = Engine(model, tokenizer, draft, c.block_size, compile=c.compile)

    def run(engine):
        engine.generate(c.prompt, c.max_new_tokens, c.temperature, c.top_p, c.top_k, seed=c.seed)
        return engine.last_result

    timed = interleaved({name: (lambda e=e: run(e)) for name, e in engines.items()}, c.repeats,
                        warmup=1, device=c.device)
    drafter = shown_path(c.drafter or default_drafter_path(c.target)) if draft is not None else None
    print(f"target: {c.target} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
          f"parameters, {c.device}, {str(torch_dtype).removeprefix('torch.')}, "
          f"{torch.get_num_threads()} threads)" + (f"; drafter: {drafter}" if drafter else ""))
    summary = {}
    for name, calls in timed.items():
        runs = sorted((result for _, result in calls), key=lambda x: x.total_time)
        r = runs[len(runs) // 2]                                            # the median run
        text = tokenizer.decode(r.tokens, skip_special_tokens=True)
        print("-" * 30, name, "-" * (41 - len(name)))
        print(c.prompt + text)
        summary[name] = {"text": text, "tokens": r.tokens, "tokens_per_s": r.tokens_per_s,
                         "ttft_s": r.time_to_first_token, "tau": r.tau}
    print("-" * 72)
    base = summary["autoregressive"]["tokens_per_s"]
    for name, s in summary.items():
        extra = (f", speedup {s['tokens_per_s'] / base:.2f}x, tau {s['tau']:.2f}"
                 if s["tau"] is not None else "")
        print(f"{name:>14}: {len(s['tokens'])} tokens, {s['tokens_per_s']:.1f} tokens/s, "
              f"time to first token {s['ttft_s'] * 1000:.1f} ms{extra}")
    if "DFlash" in summary:
        same = summary["DFlash"]["tokens"] == summary["autoregressive"]["tokens"]
        print(f"{'':>14}  DFlash output identical to the target's: {same}" if sampling.greedy else
              f"{'':>14}  (sampling: outputs differ run to run, the distribution is the target's)")
    return summary


class Options:
    """Adds a command's flags to ``parser``, each defaulting to the same-named field of the config
    dataclass ``config`` (so the CLI and the Python API cannot differ; ``--help`` shows it). A flag
    that is not a field, or a switch whose default is what it sets, is an error here."""

    def __init__(self, parser: argparse.ArgumentParser, config: type):
        self.parser, self.config = parser, config
        self.defaults = {f.name: f.default for f in dataclasses.fields(config) if f.init}

    def add(self, flag: str, dest: str | None = None, help: str | None = None, **kwargs) -> None:
        dest = dest or flag.removeprefix("--").replace("-", "_")
        default = self.defaults.get(dest, dataclasses.MISSING)
        if default is dataclasses.MISSING:
            raise TypeError(f"{self.parser.prog} {flag}: {self.config.__name__} "
                            f"has no default for {dest!r}")
        if (kwargs.get("action"), default) in (("store_true", True), ("store_false", False)):
            raise TypeError(f"{self.parser.prog} {flag} sets {dest}={default}, already the default")
        # shown as a user would type it; not for "not given" (None) and switches
        if default is not None and not isinstance(default, bool) and "default" not in (help or ""):
            shown = ",".join(map(str, default)) if isinstance(default, (tuple, list)) \
                else str(default)
            shown = (shown or "''").replace("%", "%%")     # argparse %-formats help
            help = f"{help} (default: {shown})" if help else f"default: {shown}"
        self.parser.add_argument(flag, dest=dest, default=default, help=help, **kwargs)


# argparse types from the one validation layer (dflash_lite.validate), shared with the Python API
POS = validate.POS                                                # an integer >= 1
REPEATS = validate.arg_type(validate.check_int, high=validate.MAX_REPEATS)
COUNT = validate.arg_type(validate.check_int, low=0)              # an integer >= 0
SEED = validate.arg_type(validate.check_seed)
POS_FLOAT = validate.arg_type(validate.check_float, float, low_open=True)
TEMP = validate.arg_type(validate.check_float, float)
TOP_P = validate.arg_type(validate.check_float, float, high=1.0, low_open=True)
OUT_FILE = validate.arg_type(validate.check_output_file, str)
OUT_DIR = validate.arg_type(validate.check_output_dir, str)


def TREE_SIZES(text: str) -> tuple[int, ...]:                      # noqa: N802  (an argparse type)
    """Draft-tree sizes such as ``16,32,64``; an empty string for none."""
    return validate.block_sizes_arg(text) if text.strip() else ()


def build_parser() -> Parser:
    """The command line; ``parser.commands`` maps each command to its parser."""
    parser = Parser(prog="python -m dflash_lite",
                    description="DFlash block-diffusion speculative decoding on a laptop.")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        ("demo", DemoConfig, demo_options, "complete a prompt with the shipped target and time it"),
        ("bench", BenchConfig, bench_options,
         "every method side by side, interleaved, as ratios in one run"),
        ("train", DrafterTrainConfig, train_options,
         "regenerate data with the target and train a DFlash drafter"))
    parser.commands = {name: add(Options(sub.add_parser(name, help=text), config))
                       for name, config, add, text in commands}
    return parser


def demo_options(d: Options) -> argparse.ArgumentParser:
    d.add("--target", help="'tiny', a local HF directory or a hub id")
    d.add("--prompt")
    d.add("--max-new-tokens", type=POS)
    d.add("--temperature", type=TEMP)
    d.add("--top-k", type=POS)
    d.add("--top-p", type=TOP_P)
    d.add("--seed", type=SEED)
    d.add("--device", type=validate.device_arg)
    d.add("--drafter", help="drafter directory or hub id, public DFlash layout "
                            "(default: the shipped one, if any)")
    d.add("--block-size", type=POS, help="fix DFlash's block size (default: chosen each step "
                                         "from measured costs and acceptance)")
    d.add("--repeats", type=REPEATS)
    d.add("--dtype", choices=list(DTYPES), help="weights and activations (fp32 on CPU)")
    d.add("--compile", action="store_true",
          help="decode on the static-shape path (CUDA graphs on CUDA)")
    return d.parser


def bench_options(b: Options) -> argparse.ArgumentParser:
    b.add("--target")
    b.add("--drafter", help="drafter directory (own or public DFlash layout) or hub id")
    b.add("--dtype", choices=list(DTYPES),
          help="target and drafters (bfloat16 is how real models are served on a GPU)")
    b.add("--random-drafter-layers", type=POS,
          help="use an untrained drafter of this depth (measures loop overhead, not acceptance)")
    b.add("--prompts", help="JSONL file with a 'prompt' (or 'turns') field")
    b.add("--dataset", choices=list(DATASETS),
          help="a public set fetched with `datasets` (needs the network; offline use --prompts)")
    b.add("--temperature", type=TEMP, help="0: greedy, with the identity check")
    b.add("--seed", type=SEED, help="the seed of sampled rows (temperature > 0): the loop's rows "
          "are checked against the target's own sample with it")
    b.add("--adaptive", action="store_true",
          help="also run DFlash with the block size chosen per step from recent acceptance")
    b.add("--tree-sizes", type=TREE_SIZES, help="draft-tree rows, nodes per tree ('' for none)")
    b.add("--cost-repeats", type=REPEATS, help="repeats of each timed forward in the cost model")
    b.add("--domain", choices=["math", "code", "mixed"], help="built-in held-out prompts")
    b.add("--num-prompts", type=POS)
    b.add("--max-new-tokens", type=POS)
    b.add("--block-sizes", type=validate.block_sizes_arg, help="e.g. 4,8,16")
    b.add("--repeats", type=REPEATS)
    b.add("--device", type=validate.device_arg)
    b.add("--json", dest="json_out", type=OUT_FILE,
          help="write the report here (never inside the package)")
    b.add("--overwrite", action="store_true",
          help="let --json replace a file that is not a bench report")
    b.add("--prompt-template",
          help='wrap each prompt, e.g. "Question: {prompt}\\nAnswer:" for GSM8K questions')
    b.add("--no-chat-template", dest="chat_template", action="store_false",
          help="feed prompts as they are, even when the tokenizer has a chat template")
    b.add("--no-hf-dflash", dest="hf_dflash", action="store_false",
          help="skip transformers' DFlash path")
    b.add("--eagle", help="EAGLE-style drafter directory (default: the shipped one)")
    b.add("--draft-model", help="small draft LM directory (default: the shipped one)")
    b.add("--no-baselines", dest="baselines", action="store_false",
          help="skip the EAGLE-style and draft-model peers")
    b.add("--compile", action="store_true",
          help="add static-shape rows, plain and DFlash (CUDA graphs on CUDA)")
    b.add("--batch-sizes", type=validate.block_sizes_arg,
          help="the batch sweep instead, e.g. 1,2,4,8,16: every method at each batch size")
    return b.parser


def train_options(t: Options) -> argparse.ArgumentParser:
    t.add("--target")
    t.parser.add_argument("--out", type=OUT_DIR, required=True,
                          help="a new or empty directory, or a run of the same settings to resume")
    t.add("--overwrite", action="store_true", help="replace a non-empty --out as a whole")
    t.add("--block-size", type=validate.arg_type(validate.check_int, low=2, high=64))
    t.add("--layers", type=POS)
    t.add("--steps", type=POS)
    t.add("--batch-size", type=POS)
    t.add("--num-anchors", type=POS, help="blocks per sequence per step")
    t.add("--lr", type=POS_FLOAT)
    t.add("--num-math", type=COUNT, help="train-split math prompts to regenerate")
    t.add("--num-code", type=COUNT, help="train-split stdlib function headers to regenerate")
    t.add("--prompts", help="your own training prompts: JSONL with a 'prompt' (or 'turns') field "
                            "(replaces the built-in ones)")
    t.add("--dataset", choices=list(TRAIN_DATASETS), help="train-split prompts fetched with "
          "`datasets` (needs the network; offline use --prompts)")
    t.add("--num-prompts", type=POS, help="use the first N of --prompts / --dataset")
    t.add("--max-new-tokens", type=POS)
    t.add("--regenerate-batch-size", type=POS, help="prompts the target answers at once")
    t.add("--num-taps", type=POS)
    t.add("--seed", type=SEED)
    t.add("--device", type=validate.device_arg)
    t.add("--dtype", choices=list(DTYPES), help="the frozen target (regeneration and features); "
                                                "the drafter keeps fp32 master weights")
    t.add("--cache-dir", type=OUT_DIR)
    t.add("--time-budget-s", type=POS_FLOAT, help="finish the schedule within this training time")
    t.add("--eval-every", type=COUNT,
          help="measure tau on held-out prompts every N steps (default steps/10; 0: never)")
    t.add("--drafting", choices=[d.value for d in Drafting], help="block: DFlash; autoregressive: "
          "the EAGLE-style baseline with the same conditioning; draft-model: a small independent "
          "causal LM (classic speculative decoding)")
    t.add("--conditioning", choices=[c.value for c in Conditioning], help="how target features "
          "reach the drafter (notebook 04); 'none' uses token embeddings only")
    t.add("--fixed-anchors", action="store_true", help="anchors only on block boundaries of the "
          "response (ablation; DFlash samples them anywhere)")
    t.add("--no-chat-template", dest="chat_template", action="store_false",
          help="feed the prompts raw (by default they become user turns of the target's chat "
               "template, as bench encodes them)")
    t.add("--no-feature-cache", dest="cache_features", action="store_false",
          help="recompute the frozen target's features every step instead of once per sequence")
    return t.parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns 0, 1 when a bench measured no DFlash or a file could not be written,
    2 for bad input (one line), 130 on Ctrl-C and 143 on SIGTERM (training saves first)."""
    return run_main(build_parser, run_command, argv)


def run_main(build, run, argv: list[str] | None) -> int:
    """A command line's main (this one's and the zoo's): ``run(command, args, command_line)``
    through :func:`expected_errors`; one line on an interrupt (:func:`interrupted_line`)."""
    with signals.handled():
        parser = build()
        args = vars(parser.parse_args(argv))
        command = args.pop("command")
        command_line = f"{parser.prog} " + " ".join(
            map(shlex.quote, sys.argv[1:] if argv is None else argv))
        try:
            return expected_errors(lambda: run(command, args, command_line))
        except KeyboardInterrupt as e:
            signals.stopping()                      # a second Ctrl-C may not interrupt the message
            print(f"interrupted: {interrupted_line(command, e, command_line)}", file=sys.stderr)
            return signals.exit_code(e)


def expected_errors(run) -> int:
    """The one place that turns an expected failure into one line on stderr and an exit code: bad
    input (``ValueError`` from the validation layer, :class:`LoadError`) 2, a file that could not be
    written or read (``OSError``, a full disk) 1. Anything else is a bug and keeps its traceback."""
    try:
        return run()
    except (LoadError, ValueError, OSError, SafetensorError) as e:
        print(f"error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        return 2 if isinstance(e, (LoadError, ValueError)) else 1


def run_command(command: str, args: dict, command_line: str) -> int:
    if command == "demo":
        demo(DemoConfig(**args))
    elif command == "train":
        print(train_drafter(DrafterTrainConfig(**args, command=command_line)))
    elif command == "bench":
        if failed := all_dflash_failed(bench(BenchConfig(**args))):
            print(f"error: {failed}", file=sys.stderr)
            return 1
    return 0


def interrupted_line(command: str, e: KeyboardInterrupt, command_line: str) -> str:
    """What an interrupted command says: for ``train``, whether it saved and how to resume."""
    if command != "train":
        return "nothing was written"
    if getattr(e, "saved", False):
        return f"{e}; to resume, run the same command again: {command_line}"
    return (f"{str(e) or 'nothing new was saved'}; run the same command again to resume from "
            f"the last checkpoint, if there is one "
            f"(the regeneration cache is written only when complete)")
