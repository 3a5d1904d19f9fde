"""The static-shape path (dflash_lite.static) against the eager loop (dflash_lite.decode), same run.

Four rows on the same held-out prompts, timed with the package's one interleaved timer
(``dflash_lite.timing.interleaved``): plain decoding and DFlash at block size B, each on the
eager loop and on the static path (compiled with CUDA graphs on CUDA unless ``--no-compile``).
Every row's tokens are checked against the eager plain decoding's, prompt by prompt. Prints a
table and the ratios static / eager; ``--json`` writes them.

    python tools/static_bench.py --device cpu --num-prompts 4 --max-new-tokens 64 --repeats 3
    python tools/static_bench.py --device cuda --dtype bfloat16 --json results/gpu/static_bf16.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.timing import interleaved
from dflash_lite.checkpoints import load_drafter
from dflash_lite.decode import DFlashProposer, generate
from dflash_lite.files import atomic_write_text
from dflash_lite.static import StaticDecoder
from dflash_lite.target import SHIPPED_DRAFTERS


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--domain", default="math", choices=["math", "code"])
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true", help="run the static path eagerly on CUDA too")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)

    target, tokenizer = load_pretrained("tiny", device=args.device, dtype=args.dtype)
    drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).to(device=target.device, dtype=target.dtype).eval()
    stops = stop_token_ids(target, tokenizer)
    prompts = [tokenizer(p, return_tensors="pt", add_special_tokens=False).input_ids.to(target.device)
               for p in corpus.prompts("held_out", args.domain, args.num_prompts)]
    longest = max(x.shape[1] for x in prompts) + args.max_new_tokens
    compile_forwards = False if args.no_compile else None        # None: compiled on CUDA, eager on CPU
    t0 = time.perf_counter()
    static_plain = StaticDecoder(target, None, max_length=longest, compile_forwards=compile_forwards)
    static_dflash = StaticDecoder(target, drafter, args.block_size, max_length=longest, compile_forwards=compile_forwards)
    for decoder in (static_plain, static_dflash):                 # compile and record once, untimed
        decoder.generate(prompts[0], args.max_new_tokens, stop_token_ids=stops)
    setup_s = time.perf_counter() - t0
    kind = "compiled" if static_dflash.compiled else "eager forwards"
    runs = {
        "plain, eager loop": lambda x: generate_autoregressive(target, x, args.max_new_tokens, stop_token_ids=stops),
        f"DFlash B={args.block_size}, eager loop":
            lambda x: generate(target, DFlashProposer(drafter, target, args.block_size), x, args.max_new_tokens,
                               stop_token_ids=stops),
        f"plain, static ({kind})": lambda x: static_plain.generate(x, args.max_new_tokens, stop_token_ids=stops),
        f"DFlash B={args.block_size}, static ({kind})":
            lambda x: static_dflash.generate(x, args.max_new_tokens, stop_token_ids=stops),
    }
    names = list(runs)
    timed = interleaved({name: (lambda f=f: [f(x) for x in prompts]) for name, f in runs.items()},
                        repeats=args.repeats, warmup=1, device=target.device)
    reference = [r.tokens for r in timed[names[0]][0][1]]
    rows = {}
    for name, calls in timed.items():
        results = calls[0][1]
        tokens = sum(len(r.tokens) for r in results)
        rows[name] = {"tokens_per_s": statistics.median(tokens / s for s, _ in calls),
                      "tau": statistics.mean(t for r in results for t in r.acceptance_lengths),
                      "identical": [r.tokens for r in results] == reference}
    ratios = {"plain: static / eager": rows[names[2]]["tokens_per_s"] / rows[names[0]]["tokens_per_s"],
              "DFlash: static / eager": rows[names[3]]["tokens_per_s"] / rows[names[1]]["tokens_per_s"],
              "speedup, eager loop": rows[names[1]]["tokens_per_s"] / rows[names[0]]["tokens_per_s"],
              "speedup, static path": rows[names[3]]["tokens_per_s"] / rows[names[2]]["tokens_per_s"]}
    print(f"{'method':<40} {'tokens/s':>9} {'tau':>6}  identical")
    for name, row in rows.items():
        print(f"{name:<40} {row['tokens_per_s']:>9.1f} {row['tau']:>6.2f}  {row['identical']}")
    for name, ratio in ratios.items():
        print(f"{name:<40} {ratio:>9.2f}x")
    print(f"({args.num_prompts} held-out {args.domain} prompts x {args.max_new_tokens} new tokens, median of "
          f"{args.repeats} interleaved repeats; {target.device}, {args.dtype}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; static setup and warm-up {setup_s:.1f} s)")
    report = {"env": {"device": str(target.device), "dtype": args.dtype, "torch": torch.__version__,
                      "python": platform.python_version(), "threads": torch.get_num_threads(),
                      "gpu": torch.cuda.get_device_name(0) if target.device.type == "cuda" else None,
                      "domain": args.domain, "prompts": args.num_prompts, "max_new_tokens": args.max_new_tokens,
                      "repeats": args.repeats, "block_size": args.block_size, "compiled": static_dflash.compiled,
                      "setup_s": setup_s},
              "rows": rows, "ratios": ratios}
    if args.json_out:
        atomic_write_text(args.json_out, json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
