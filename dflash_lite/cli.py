"""The command line: ``python -m dflash_lite demo`` (and, as they land, train and bench).

Parsing lives only here and under ``__main__``; every command is a typed function that
notebooks can call directly.
"""
from __future__ import annotations

import argparse
import sys

import torch

from . import corpus
from .acceptance import SamplingParams
from .decode import generate_autoregressive
from .target import LoadError, default_drafter_path, load_pretrained, stop_token_ids

DEFAULT_PROMPT = corpus.math_problem(corpus.HELD_OUT_SEED + 7).prompt


def demo(target: str = "tiny", prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 96,
         temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
         seed: int = 0, device: str = "cpu", drafter: str | None = None, block_size: int | None = None,
         repeats: int = 3) -> dict:
    """Complete ``prompt`` with the target, then with DFlash when a drafter is there (the shipped
    one by default), and print both with tokens/s, time to first token, speedup and tau.
    Timings are medians of ``repeats`` interleaved runs after a warm-up."""
    model, tokenizer = load_pretrained(target, device=device)
    drafter = drafter or default_drafter_path(target)
    input_ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    sampling = SamplingParams(temperature, top_k, top_p)
    stops = stop_token_ids(model, tokenizer)
    runs = {"autoregressive": lambda g: generate_autoregressive(model, input_ids, max_new_tokens, sampling, stops, g)}
    if drafter is not None:
        from .checkpoints import load_drafter
        from .decode import DFlashProposer, generate_speculative
        from .policy import CostAwareProposer
        draft = load_drafter(drafter).to(device)
        # default: the cost-aware policy picks each step's block size; --block-size fixes it
        make = (lambda: CostAwareProposer(draft, model)) if block_size is None else \
            (lambda: DFlashProposer(draft, model, block_size))
        runs["DFlash"] = lambda g: generate_speculative(model, make(), input_ids, max_new_tokens, sampling, stops, g)
    results = {name: [] for name in runs}
    for repeat in range(repeats + 1):                       # the first round is the warm-up
        for name, run in runs.items():
            result = run(torch.Generator().manual_seed(seed))
            if repeat:
                results[name].append(result)
    print(f"target: {target} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"{device}, {torch.get_num_threads()} threads)" + (f"; drafter: {drafter}" if drafter else ""))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_lite",
                                     description="DFlash block-diffusion speculative decoding on a laptop.")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="complete a prompt with the shipped target and time it")
    d.add_argument("--target", default="tiny", help="'tiny', a local HF directory or a hub id")
    d.add_argument("--prompt", default=DEFAULT_PROMPT)
    d.add_argument("--max-new-tokens", type=int, default=96)
    d.add_argument("--temperature", type=float, default=0.0)
    d.add_argument("--top-k", type=int, default=None)
    d.add_argument("--top-p", type=float, default=None)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--device", default="cpu")
    d.add_argument("--drafter", default=None, help="drafter directory (default: the shipped one, if any)")
    d.add_argument("--block-size", type=int, default=None,
                   help="fix DFlash's block size (default: chosen each step from measured costs and acceptance)")
    d.add_argument("--repeats", type=int, default=3)
    b = sub.add_parser("bench", help="every method side by side, interleaved, as ratios in one run")
    b.add_argument("--target", default="tiny")
    b.add_argument("--drafter", default=None, help="drafter directory (own or public DFlash layout)")
    b.add_argument("--random-drafter-layers", type=int, default=None,
                   help="use an untrained drafter of this depth (measures loop overhead, not acceptance)")
    b.add_argument("--prompts", default=None, help="JSONL file with a 'prompt' (or 'turns') field")
    b.add_argument("--dataset", default=None, choices=["gsm8k", "humaneval", "mbpp", "math500", "mt-bench"],
                   help="a public set fetched with `datasets` (needs the network; offline use --prompts)")
    b.add_argument("--temperature", type=float, default=0.0, help="0: greedy, with the identity check")
    b.add_argument("--adaptive", action="store_true",
                   help="also run DFlash with the block size chosen per step from recent acceptance")
    b.add_argument("--tree-sizes", type=lambda s: tuple(int(x) for x in s.split(",") if x), default=(32, 64),
                   help="draft-tree rows, nodes per tree (greedy only; '' for none)")
    b.add_argument("--cost-repeats", type=int, default=10, help="repeats of each timed forward in the cost model")
    b.add_argument("--domain", default="mixed", choices=["math", "code", "mixed"], help="built-in held-out prompts")
    b.add_argument("--num-prompts", type=int, default=8)
    b.add_argument("--max-new-tokens", type=int, default=64)
    b.add_argument("--block-sizes", type=lambda s: tuple(int(x) for x in s.split(",")), default=(16,))
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--device", default="cpu")
    b.add_argument("--json", dest="json_out", default=None)
    b.add_argument("--prompt-template", default="{prompt}",
                   help='wrap each prompt, e.g. "Question: {prompt}\\nAnswer:" for GSM8K questions')
    b.add_argument("--no-hf-dflash", dest="hf_dflash", action="store_false",
                   help="skip transformers' DFlash path")
    b.add_argument("--eagle", default=None, help="EAGLE-style drafter directory (default: the shipped one)")
    b.add_argument("--draft-model", default=None, help="small draft LM directory (default: the shipped one)")
    b.add_argument("--no-baselines", dest="baselines", action="store_false",
                   help="skip the EAGLE-style and draft-model peers")
    t = sub.add_parser("train", help="regenerate data with the target and train a DFlash drafter")
    t.add_argument("--target", default="tiny")
    t.add_argument("--out", required=True)
    t.add_argument("--block-size", type=int, default=16)
    t.add_argument("--layers", type=int, default=2)
    t.add_argument("--steps", type=int, default=1000)
    t.add_argument("--batch-size", type=int, default=8)
    t.add_argument("--num-anchors", type=int, default=16, help="blocks per sequence per step")
    t.add_argument("--lr", type=float, default=6e-4)
    t.add_argument("--num-math", type=int, default=2000, help="train-split math prompts to regenerate")
    t.add_argument("--num-code", type=int, default=400, help="train-split stdlib function headers to regenerate")
    t.add_argument("--max-new-tokens", type=int, default=160)
    t.add_argument("--num-taps", type=int, default=5)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", default="cpu")
    t.add_argument("--cache-dir", default=".cache/dflash_lite")
    t.add_argument("--time-budget-s", type=float, default=None, help="finish the schedule within this training time")
    t.add_argument("--eval-every", type=int, default=None,
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
    try:
        if command == "demo":
            demo(**args)
        elif command == "train":
            from .train import train_draft_model, train_drafter
            command_line = "python -m dflash_lite " + " ".join(sys.argv[1:])
            if args["drafting"] == "draft-model":
                for unused in ("drafting", "block_size", "num_anchors", "num_taps", "eval_every", "conditioning",
                               "fixed_anchors"):
                    args.pop(unused)
                print(train_draft_model(**args, command=command_line))
            else:
                print(train_drafter(**args, command=command_line))
        elif command == "bench":
            from .benchmark import bench
            bench(**args)
    except (LoadError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
