"""The command line: ``python -m dflash_lite demo``, ``bench`` and ``train``.

Parsing lives only here and under ``__main__``; every command is a typed function that
notebooks can call directly, and its signature is where each default is written: no option
states one (:func:`defaults_from` fills them in and shows them in ``--help``).
"""
from __future__ import annotations

import argparse
import inspect
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError

from . import corpus, signals, validate
from .acceptance import SamplingParams
from .benchmark import BenchConfig, bench
from .checkpoints import load_pair
from .drafter import CONDITIONING
from .engine import Engine
from .prompts import DATASETS, TRAIN_DATASETS
from .report import all_dflash_failed
from .target import DTYPES, LoadError, default_drafter_path, parse_dtype
from .timing import interleaved
from .train import train_draft_model, train_drafter

DEFAULT_PROMPT = corpus.math_problem(corpus.HELD_OUT_SEED + 7).prompt


def shown_path(path) -> str:
    """A local path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@dataclass
class DemoConfig:
    """The demo's choices (``python -m dflash_lite demo`` builds one from its flags). ``drafter``:
    the shipped one by default, or a local directory, or a hub id; ``block_size`` fixes DFlash's
    block size (None: the cost-aware policy chooses each step); ``dtype`` applies to the target and
    the drafter alike; timings are medians of ``repeats`` interleaved runs after a warm-up."""
    target: str = "tiny"
    prompt: str = DEFAULT_PROMPT
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
        validate.check_int("repeats", self.repeats)
        validate.check_seed(self.seed)
        if self.block_size is not None:
            validate.check_int("block_size", self.block_size)
        self.device = validate.check_device(self.device)
        SamplingParams(self.temperature, self.top_k, self.top_p)
        parse_dtype(self.dtype)
        return self


def demo(config: DemoConfig | None = None, **options) -> dict:
    """Complete the prompt with the target, then with DFlash when a drafter is there, each an
    :class:`~dflash_lite.engine.Engine` timed by the one interleaved timer, and print both with
    tokens/s, time to first token, speedup and tau."""
    c = (config or DemoConfig(**options)).check()
    sampling = SamplingParams(c.temperature, c.top_k, c.top_p)
    torch_dtype = parse_dtype(c.dtype)
    model, tokenizer, draft = load_pair(c.target, c.drafter, c.device, torch_dtype)
    engines = {"autoregressive": Engine(model, tokenizer, compile=c.compile)}
    if draft is not None:       # default: the cost-aware policy picks each step's block size (or a tree)
        engines["DFlash"] = Engine(model, tokenizer, draft, c.block_size, compile=c.compile)

    def run(engine):
        engine.generate(c.prompt, c.max_new_tokens, c.temperature, c.top_p, c.top_k, seed=c.seed)
        return engine.last_result

    timed = interleaved({name: (lambda e=e: run(e)) for name, e in engines.items()}, c.repeats, warmup=1,
                        device=c.device)                                  # the first round is the warm-up
    results = {name: [result for _, result in calls] for name, calls in timed.items()}
    drafter = c.drafter or default_drafter_path(c.target)
    print(f"target: {c.target} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"{c.device}, {str(torch_dtype).removeprefix('torch.')}, {torch.get_num_threads()} threads)"
          + (f"; drafter: {shown_path(drafter)}" if draft is not None else ""))
    summary = {}
    for name, rs in results.items():
        r = sorted(rs, key=lambda x: x.total_time)[len(rs) // 2]           # the median run
        text = tokenizer.decode(r.tokens, skip_special_tokens=True)
        print("-" * 30, name, "-" * (41 - len(name)))
        print(c.prompt + text)
        summary[name] = {"text": text, "tokens": r.tokens, "tokens_per_s": r.tokens_per_s,
                         "ttft_s": r.time_to_first_token, "tau": r.tau}
    print("-" * 72)
    base = summary["autoregressive"]["tokens_per_s"]
    for name, s in summary.items():
        extra = f", speedup {s['tokens_per_s'] / base:.2f}x, tau {s['tau']:.2f}" if s["tau"] is not None else ""
        print(f"{name:>14}: {len(s['tokens'])} tokens, {s['tokens_per_s']:.1f} tokens/s, "
              f"time to first token {s['ttft_s'] * 1000:.1f} ms{extra}")
    if "DFlash" in summary:
        same = summary["DFlash"]["tokens"] == summary["autoregressive"]["tokens"]
        print(f"{'':>14}  DFlash output identical to the target's: {same}" if sampling.greedy else
              f"{'':>14}  (sampling: outputs differ run to run, the distribution is the target's)")
    return summary


def shown_default(value) -> str | None:
    """A default as a user would type it on the command line; None for "not given" and for switches."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) or "''"
    return str(value) or "''"


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2): the message names the flag and its range."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def defaults_from(parser: argparse.ArgumentParser, func, **extra) -> argparse.ArgumentParser:
    """Give each option of ``parser`` the default of ``func``'s parameter of the same name, and show
    it in the help: the signature is the one place a default is written, so the command line and
    the Python API cannot differ. ``extra`` gives the default of an option that ``func`` has no
    default for. Any other option without one is an error here, as is a switch whose default is
    what it sets."""
    params = inspect.signature(func).parameters
    defaults = {}
    for action in parser._actions:
        if not action.option_strings or action.default is argparse.SUPPRESS or action.required:
            continue                                      # positionals, --help, required options
        param = params.get(action.dest)
        has_default = param is not None and param.default is not param.empty
        if has_default == (action.dest in extra):
            raise TypeError(f"{parser.prog} {action.option_strings[0]}: {func.__name__}() "
                            + ("and extra both give a default" if has_default else "has no default")
                            + f" for {action.dest!r}")
        default = param.default if has_default else extra[action.dest]
        if action.nargs == 0 and default is action.const:    # store_true / store_false
            raise TypeError(f"{parser.prog} {action.option_strings[0]} sets {action.dest}={action.const}, "
                            f"already the default")
        defaults[action.dest] = default
        shown = shown_default(default)
        if shown is not None and "default" not in (action.help or ""):
            shown = shown.replace("%", "%%")               # argparse %-formats help
            action.help = f"{action.help} (default: {shown})" if action.help else f"default: {shown}"
    parser.set_defaults(**defaults)
    return parser


# argparse types from the one validation layer (dflash_lite.validate), shared with the Python API
POS = validate.arg_type(validate.check_int)                       # an integer >= 1
COUNT = validate.arg_type(validate.check_int, low=0)              # an integer >= 0
ANY_INT = validate.arg_type(validate.check_int, low=None)
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
    """The command line. No option states a default: each comes from its command's signature
    (:func:`defaults_from`); ``parser.commands`` maps each command to its parser."""
    parser = Parser(prog="python -m dflash_lite",
                    description="DFlash block-diffusion speculative decoding on a laptop.")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="complete a prompt with the shipped target and time it")
    d.add_argument("--target", help="'tiny', a local HF directory or a hub id")
    d.add_argument("--prompt")
    d.add_argument("--max-new-tokens", type=POS)
    d.add_argument("--temperature", type=TEMP)
    d.add_argument("--top-k", type=POS)
    d.add_argument("--top-p", type=TOP_P)
    d.add_argument("--seed", type=SEED)
    d.add_argument("--device", type=validate.device_arg)
    d.add_argument("--drafter",
                   help="drafter directory or hub id, public DFlash layout (default: the shipped one, if any)")
    d.add_argument("--block-size", type=POS,
                   help="fix DFlash's block size (default: chosen each step from measured costs and acceptance)")
    d.add_argument("--repeats", type=POS)
    d.add_argument("--dtype", choices=list(DTYPES), help="weights and activations (fp32 on CPU)")
    d.add_argument("--compile", action="store_true", help="decode on the static-shape path (CUDA graphs on CUDA)")
    defaults_from(d, DemoConfig)
    b = sub.add_parser("bench", help="every method side by side, interleaved, as ratios in one run")
    b.add_argument("--target")
    b.add_argument("--drafter", help="drafter directory (own or public DFlash layout) or hub id")
    b.add_argument("--dtype", choices=list(DTYPES),
                   help="target and drafters (bfloat16 is how real models are served on a GPU)")
    b.add_argument("--random-drafter-layers", type=POS,
                   help="use an untrained drafter of this depth (measures loop overhead, not acceptance)")
    b.add_argument("--prompts", help="JSONL file with a 'prompt' (or 'turns') field")
    b.add_argument("--dataset", choices=list(DATASETS),
                   help="a public set fetched with `datasets` (needs the network; offline use --prompts)")
    b.add_argument("--temperature", type=TEMP, help="0: greedy, with the identity check")
    b.add_argument("--adaptive", action="store_true",
                   help="also run DFlash with the block size chosen per step from recent acceptance")
    b.add_argument("--tree-sizes", type=TREE_SIZES, help="draft-tree rows, nodes per tree ('' for none)")
    b.add_argument("--cost-repeats", type=POS, help="repeats of each timed forward in the cost model")
    b.add_argument("--domain", choices=["math", "code", "mixed"], help="built-in held-out prompts")
    b.add_argument("--num-prompts", type=POS)
    b.add_argument("--max-new-tokens", type=POS)
    b.add_argument("--block-sizes", type=validate.block_sizes_arg, help="e.g. 4,8,16")
    b.add_argument("--repeats", type=POS)
    b.add_argument("--device", type=validate.device_arg)
    b.add_argument("--json", dest="json_out", type=OUT_FILE)
    b.add_argument("--prompt-template",
                   help='wrap each prompt, e.g. "Question: {prompt}\\nAnswer:" for GSM8K questions')
    b.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                   help="feed prompts as they are, even when the tokenizer has a chat template")
    b.add_argument("--no-hf-dflash", dest="hf_dflash", action="store_false",
                   help="skip transformers' DFlash path")
    b.add_argument("--eagle", help="EAGLE-style drafter directory (default: the shipped one)")
    b.add_argument("--draft-model", help="small draft LM directory (default: the shipped one)")
    b.add_argument("--no-baselines", dest="baselines", action="store_false",
                   help="skip the EAGLE-style and draft-model peers")
    b.add_argument("--compile", action="store_true", help="add static-shape rows, plain and DFlash (CUDA graphs on CUDA)")
    defaults_from(b, BenchConfig)
    t = sub.add_parser("train", help="regenerate data with the target and train a DFlash drafter")
    t.add_argument("--target")
    t.add_argument("--out", type=OUT_DIR, required=True,
                   help="a new or empty directory, or a run of the same settings to resume")
    t.add_argument("--overwrite", action="store_true", help="replace a non-empty --out as a whole")
    t.add_argument("--block-size", type=validate.arg_type(validate.check_int, low=2, high=64))
    t.add_argument("--layers", type=POS)
    t.add_argument("--steps", type=POS)
    t.add_argument("--batch-size", type=POS)
    t.add_argument("--num-anchors", type=POS, help="blocks per sequence per step")
    t.add_argument("--lr", type=POS_FLOAT)
    t.add_argument("--num-math", type=COUNT, help="train-split math prompts to regenerate")
    t.add_argument("--num-code", type=COUNT, help="train-split stdlib function headers to regenerate")
    t.add_argument("--prompts",
                   help="your own training prompts: JSONL with a 'prompt' (or 'turns') field (replaces the built-in ones)")
    t.add_argument("--dataset", choices=list(TRAIN_DATASETS),
                   help="train-split prompts fetched with `datasets` (needs the network; offline use --prompts)")
    t.add_argument("--num-prompts", type=POS, help="use the first N of --prompts / --dataset")
    t.add_argument("--max-new-tokens", type=POS)
    t.add_argument("--num-taps", type=POS)
    t.add_argument("--seed", type=SEED)
    t.add_argument("--device", type=validate.device_arg)
    t.add_argument("--dtype", choices=list(DTYPES),
                   help="the frozen target (regeneration and features); the drafter keeps fp32 master weights")
    t.add_argument("--cache-dir", type=OUT_DIR)
    t.add_argument("--time-budget-s", type=POS_FLOAT, help="finish the schedule within this training time")
    t.add_argument("--eval-every", type=COUNT,
                   help="measure tau on held-out prompts every N steps (default steps/10; 0: never)")
    t.add_argument("--drafting", choices=["block", "autoregressive", "draft-model"],
                   help="block: DFlash; autoregressive: the EAGLE-style baseline with the same conditioning; "
                        "draft-model: a small independent causal LM (classic speculative decoding)")
    t.add_argument("--conditioning", choices=list(CONDITIONING),
                   help="how target features reach the drafter (notebook 04); 'none' uses token embeddings only")
    t.add_argument("--fixed-anchors", action="store_true",
                   help="anchors only on block boundaries of the response (ablation; DFlash samples them anywhere)")
    defaults_from(t, train_drafter)        # --drafting draft-model runs train_draft_model, whose defaults are the same
    parser.commands = {"demo": d, "bench": b, "train": t}
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, run one command, and return the exit code: 0, 1 when a bench measured no DFlash or a
    file could not be written, 2 for bad input (one line, before any work), 130 on Ctrl-C and 143
    on SIGTERM (training saves first)."""
    with signals.handled():
        parser = build_parser()
        args = vars(parser.parse_args(argv))
        command = args.pop("command")
        command_line = "python -m dflash_lite " + " ".join(map(shlex.quote, sys.argv[1:] if argv is None else argv))
        try:
            return expected_errors(lambda: run_command(command, args, command_line))
        except KeyboardInterrupt as e:
            signals.stopping()                      # a second Ctrl-C may not interrupt the message
            print(f"interrupted: {interrupted_line(command, e, command_line)}", file=sys.stderr)
            return signals.exit_code(e)


def expected_errors(run) -> int:
    """The one place that turns an expected failure into one line on stderr and an exit code: bad
    input (``ValueError`` from the validation layer, :class:`LoadError`) 2, a file that could not
    be written or read (``OSError``, a full disk) 1. Anything else is a bug and keeps its traceback."""
    try:
        return run()
    except (LoadError, ValueError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except (OSError, SafetensorError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 1


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def run_command(command: str, args: dict, command_line: str) -> int:
    if command == "demo":
        demo(DemoConfig(**args))
    elif command == "train":
        if args["drafting"] == "draft-model":
            if args["prompts"] or args["dataset"]:
                raise ValueError("--prompts/--dataset train DFlash drafters; the draft model uses the built-in prompts")
            takes = inspect.signature(train_draft_model).parameters      # the DFlash-only options stay unused
            print(train_draft_model(**{k: v for k, v in args.items() if k in takes}, command=command_line))
        else:
            print(train_drafter(**args, command=command_line))
    elif command == "bench":
        failed = all_dflash_failed(bench(BenchConfig(**args)))
        if failed:
            print(f"error: {failed}", file=sys.stderr)
            return 1
    return 0


def interrupted_line(command: str, e: KeyboardInterrupt, command_line: str) -> str:
    """What an interrupted command says: for ``train``, whether it saved and how to resume."""
    if command != "train":
        return "nothing was written"
    if getattr(e, "saved", False):
        return f"{e}; to resume, run the same command again: {command_line}"
    return (f"{str(e) or 'nothing new was saved'}; run the same command again to resume from the last "
            f"checkpoint, if there is one (the regeneration cache is written only when complete)")
