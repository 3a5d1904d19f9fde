"""The command line: ``python -m dflash_lite demo``, ``bench`` and ``train``.

Parsing lives only here and under ``__main__``; every command is a typed function that
notebooks can call directly.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from . import corpus, validate
from .acceptance import SamplingParams
from .benchmark import interleaved
from .baselines import generate_autoregressive
from .target import DTYPES, LoadError, default_drafter_path, load_pretrained, parse_dtype, stop_token_ids

DEFAULT_PROMPT = corpus.math_problem(corpus.HELD_OUT_SEED + 7).prompt


def shown_path(path) -> str:
    """A local path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def demo(target: str = "tiny", prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 96,
         temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
         seed: int = 0, device: str = "cpu", drafter: str | None = None, block_size: int | None = None,
         repeats: int = 3, dtype: str = "float32") -> dict:
    """Complete ``prompt`` with the target, then with DFlash when a drafter is there (the shipped
    one by default, or a local directory, or a hub id), and print both with tokens/s, time to first
    token, speedup and tau. Timings are medians of ``repeats`` interleaved runs after a warm-up.
    ``dtype`` applies to the target and the drafter alike."""
    validate.check_prompt(prompt)
    validate.check_int("max_new_tokens", max_new_tokens)
    validate.check_int("repeats", repeats)
    validate.check_int("seed", seed, low=None)
    if block_size is not None:
        validate.check_int("block_size", block_size)
    device = validate.check_device(device)
    sampling = SamplingParams(temperature, top_k, top_p)
    torch_dtype = parse_dtype(dtype)
    drafter = drafter or default_drafter_path(target)
    draft = None
    if drafter is not None:
        from .checkpoints import load_drafter
        draft = load_drafter(drafter, dtype=torch_dtype)               # a bad name fails before any work
    model, tokenizer = load_pretrained(target, device=device, dtype=torch_dtype)
    input_ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    stops = stop_token_ids(model, tokenizer)
    runs = {"autoregressive": lambda g: generate_autoregressive(model, input_ids, max_new_tokens, sampling, stops, g)}
    if draft is not None:
        from .decode import DFlashProposer, generate
        from .policy import CostAwareProposer
        draft = draft.to(device)
        # default: the cost-aware policy picks each step's block size; --block-size fixes it
        make = (lambda: CostAwareProposer(draft, model)) if block_size is None else \
            (lambda: DFlashProposer(draft, model, block_size))
        runs["DFlash"] = lambda g: generate(model, make(), input_ids, max_new_tokens, sampling, stops, g)
    seeded = {name: (lambda run=run: run(torch.Generator().manual_seed(seed))) for name, run in runs.items()}
    timed = interleaved(seeded, repeats, warmup=1, device=device)          # the first round is the warm-up
    results = {name: [result for _, result in calls] for name, calls in timed.items()}
    print(f"target: {target} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"{device}, {str(torch_dtype).removeprefix('torch.')}, {torch.get_num_threads()} threads)" + (f"; drafter: {shown_path(drafter)}" if drafter else ""))
    summary = {}
    for name, rs in results.items():
        r = sorted(rs, key=lambda x: x.total_time)[len(rs) // 2]           # the median run
        text = tokenizer.decode(r.tokens, skip_special_tokens=True)
        print("-" * 30, name, "-" * (41 - len(name)))
        print(prompt + text)
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


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2): the message names the flag and its range."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


# argparse types from the one validation layer (dflash_lite.validate), shared with the Python API
POS = validate.arg_type(validate.check_int)                       # an integer >= 1
COUNT = validate.arg_type(validate.check_int, low=0)              # an integer >= 0
ANY_INT = validate.arg_type(validate.check_int, low=None)
POS_FLOAT = validate.arg_type(validate.check_float, float, low_open=True)
TEMP = validate.arg_type(validate.check_float, float)
TOP_P = validate.arg_type(validate.check_float, float, high=1.0, low_open=True)
OUT_FILE = validate.arg_type(validate.check_output_file, str)
OUT_DIR = validate.arg_type(validate.check_output_dir, str)


def TREE_SIZES(text: str) -> tuple[int, ...]:                      # noqa: N802  (an argparse type)
    """Draft-tree sizes such as ``32,64``; an empty string for none."""
    return validate.block_sizes_arg(text) if text.strip() else ()


def main(argv: list[str] | None = None) -> int:
    """Parse, run one command, and return the exit code: 0, 1 when a bench measured no DFlash,
    2 for bad input (one line, before any work), 130 on Ctrl-C (training saves first)."""
    parser = Parser(prog="python -m dflash_lite",
                    description="DFlash block-diffusion speculative decoding on a laptop.")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="complete a prompt with the shipped target and time it")
    d.add_argument("--target", default="tiny", help="'tiny', a local HF directory or a hub id")
    d.add_argument("--prompt", default=DEFAULT_PROMPT)
    d.add_argument("--max-new-tokens", type=POS, default=96)
    d.add_argument("--temperature", type=TEMP, default=0.0)
    d.add_argument("--top-k", type=POS, default=None)
    d.add_argument("--top-p", type=TOP_P, default=None)
    d.add_argument("--seed", type=ANY_INT, default=0)
    d.add_argument("--device", type=validate.device_arg, default="cpu")
    d.add_argument("--drafter", default=None,
                   help="drafter directory or hub id, public DFlash layout (default: the shipped one, if any)")
    d.add_argument("--block-size", type=POS, default=None,
                   help="fix DFlash's block size (default: chosen each step from measured costs and acceptance)")
    d.add_argument("--repeats", type=POS, default=3)
    d.add_argument("--dtype", default="float32", choices=list(DTYPES), help="weights and activations (fp32 on CPU)")
    b = sub.add_parser("bench", help="every method side by side, interleaved, as ratios in one run")
    b.add_argument("--target", default="tiny")
    b.add_argument("--drafter", default=None, help="drafter directory (own or public DFlash layout) or hub id")
    b.add_argument("--dtype", default="float32", choices=list(DTYPES),
                   help="target and drafters (bfloat16 is how real models are served on a GPU)")
    b.add_argument("--random-drafter-layers", type=POS, default=None,
                   help="use an untrained drafter of this depth (measures loop overhead, not acceptance)")
    b.add_argument("--prompts", default=None, help="JSONL file with a 'prompt' (or 'turns') field")
    b.add_argument("--dataset", default=None, choices=["gsm8k", "humaneval", "mbpp", "math500", "mt-bench"],
                   help="a public set fetched with `datasets` (needs the network; offline use --prompts)")
    b.add_argument("--temperature", type=TEMP, default=0.0, help="0: greedy, with the identity check")
    b.add_argument("--adaptive", action="store_true",
                   help="also run DFlash with the block size chosen per step from recent acceptance")
    b.add_argument("--tree-sizes", type=TREE_SIZES, default=(32, 64),
                   help="draft-tree rows, nodes per tree (greedy only; '' for none)")
    b.add_argument("--cost-repeats", type=POS, default=10, help="repeats of each timed forward in the cost model")
    b.add_argument("--domain", default="mixed", choices=["math", "code", "mixed"], help="built-in held-out prompts")
    b.add_argument("--num-prompts", type=POS, default=8)
    b.add_argument("--max-new-tokens", type=POS, default=64)
    b.add_argument("--block-sizes", type=validate.block_sizes_arg, default=(16,), help="e.g. 4,8,16")
    b.add_argument("--repeats", type=POS, default=3)
    b.add_argument("--device", type=validate.device_arg, default="cpu")
    b.add_argument("--json", dest="json_out", type=OUT_FILE, default=None)
    b.add_argument("--prompt-template", default="{prompt}",
                   help='wrap each prompt, e.g. "Question: {prompt}\\nAnswer:" for GSM8K questions')
    b.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                   help="feed prompts as they are, even when the tokenizer has a chat template")
    b.add_argument("--no-hf-dflash", dest="hf_dflash", action="store_false",
                   help="skip transformers' DFlash path")
    b.add_argument("--eagle", default=None, help="EAGLE-style drafter directory (default: the shipped one)")
    b.add_argument("--draft-model", default=None, help="small draft LM directory (default: the shipped one)")
    b.add_argument("--no-baselines", dest="baselines", action="store_false",
                   help="skip the EAGLE-style and draft-model peers")
    t = sub.add_parser("train", help="regenerate data with the target and train a DFlash drafter")
    t.add_argument("--target", default="tiny")
    t.add_argument("--out", type=OUT_DIR, required=True,
                   help="a new or empty directory, or a run of the same settings to resume")
    t.add_argument("--overwrite", action="store_true", help="replace a non-empty --out as a whole")
    t.add_argument("--block-size", type=validate.arg_type(validate.check_int, low=2, high=64), default=16)
    t.add_argument("--layers", type=POS, default=2)
    t.add_argument("--steps", type=POS, default=1000)
    t.add_argument("--batch-size", type=POS, default=8)
    t.add_argument("--num-anchors", type=POS, default=16, help="blocks per sequence per step")
    t.add_argument("--lr", type=POS_FLOAT, default=6e-4)
    t.add_argument("--num-math", type=COUNT, default=2000, help="train-split math prompts to regenerate")
    t.add_argument("--num-code", type=COUNT, default=400, help="train-split stdlib function headers to regenerate")
    t.add_argument("--prompts", default=None,
                   help="your own training prompts: JSONL with a 'prompt' (or 'turns') field (replaces the built-in ones)")
    t.add_argument("--dataset", default=None, choices=["gsm8k", "mbpp", "codealpaca", "ultrachat"],
                   help="train-split prompts fetched with `datasets` (needs the network; offline use --prompts)")
    t.add_argument("--num-prompts", type=POS, default=None, help="use the first N of --prompts / --dataset")
    t.add_argument("--max-new-tokens", type=POS, default=160)
    t.add_argument("--num-taps", type=POS, default=5)
    t.add_argument("--seed", type=ANY_INT, default=0)
    t.add_argument("--device", type=validate.device_arg, default="cpu")
    t.add_argument("--dtype", default="float32", choices=list(DTYPES),
                   help="the frozen target (regeneration and features); the drafter keeps fp32 master weights")
    t.add_argument("--cache-dir", type=OUT_DIR, default=".cache/dflash_lite")
    t.add_argument("--time-budget-s", type=POS_FLOAT, default=None, help="finish the schedule within this training time")
    t.add_argument("--eval-every", type=COUNT, default=None,
                   help="measure tau on held-out prompts every N steps (default steps/10; 0: never)")
    t.add_argument("--drafting", default="block", choices=["block", "autoregressive", "draft-model"],
                   help="block: DFlash; autoregressive: the EAGLE-style baseline with the same conditioning; "
                        "draft-model: a small independent causal LM (classic speculative decoding)")
    t.add_argument("--conditioning", default="kv_injection", choices=["kv_injection", "input_fusion", "none"],
                   help="how target features reach the drafter (notebook 04); 'none' uses token embeddings only")
    t.add_argument("--fixed-anchors", action="store_true",
                   help="anchors only on block boundaries of the response (ablation; DFlash samples them anywhere)")
    args = vars(parser.parse_args(argv))
    command = args.pop("command")
    command_line = "python -m dflash_lite " + " ".join(map(shlex.quote, sys.argv[1:] if argv is None else argv))
    try:
        if command == "demo":
            demo(**args)
        elif command == "train":
            from .train import train_draft_model, train_drafter
            if args["drafting"] == "draft-model":
                if args["prompts"] or args["dataset"]:
                    raise ValueError("--prompts/--dataset train DFlash drafters; the draft model uses the built-in prompts")
                for unused in ("drafting", "block_size", "num_anchors", "num_taps", "eval_every", "conditioning",
                               "fixed_anchors", "prompts", "dataset", "num_prompts"):
                    args.pop(unused)
                print(train_draft_model(**args, command=command_line))
            else:
                print(train_drafter(**args, command=command_line))
        elif command == "bench":
            from .benchmark import all_dflash_failed, bench
            failed = all_dflash_failed(bench(**args))
            if failed:
                print(f"error: {failed}", file=sys.stderr)
                return 1
    except (LoadError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        if command != "train":
            said = "nothing was written"
        elif getattr(e, "saved", False):
            said = f"{e}; to resume, run the same command again: {command_line}"
        else:
            said = (f"{str(e) or 'nothing new was saved'}; run the same command again to resume from the last "
                    f"checkpoint, if there is one (the regeneration cache is written only when complete)")
        print(f"interrupted: {said}", file=sys.stderr)
        return 130
    return 0
