"""A static-shape verify of B tokens, eager against compiled (CUDA graphs), on the shipped target.

The verify forward is what a DFlash step spends most of its time in (notebook 01, the cost model
of notebook 06). With a static KV cache its shapes never change from step to step, which is the
case CUDA graphs (``torch.compile(mode="reduce-overhead")``) are made for. This script times one
such forward both ways (median of interleaved repeats after warm-up), checks the logits agree, and
writes the numbers as JSON. Run by ``tools/gpu_bench.sh``; ``--device cpu --modes eager`` is a
quick smoke run on a machine without a GPU.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dflash_lite import corpus, load_pretrained
from dflash_lite.files import atomic_write_text


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--modes", default="eager,reduce-overhead",
                        help="eager and/or torch.compile modes")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)

    from transformers import StaticCache

    model, tokenizer = load_pretrained("tiny", device=args.device, dtype=args.dtype)
    prompt = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 7).prompt, return_tensors="pt",
                       add_special_tokens=False).input_ids.to(args.device)
    length, b = prompt.shape[1], args.block_size
    cache = StaticCache(config=model.config, max_cache_len=length + b)
    block = prompt[:, -1:].expand(1, b).contiguous()

    # the same cache state before every timed verify: static shapes
    def prefill():
        with torch.inference_mode():
            cache.reset()
            model(prompt, past_key_values=cache)

    def verify(forward):
        with torch.inference_mode():
            return forward(input_ids=block, past_key_values=cache, output_hidden_states=True).logits

    forwards = {}
    for mode in args.modes.split(","):
        forwards[mode] = model.forward if mode == "eager" else torch.compile(model.forward,
                                                                             mode=mode)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    prefill()
    reference, agree, compile_s = verify(model.forward), {}, {}
    for mode, forward in forwards.items():
        t0 = time.perf_counter()
        # warm-up (and, compiled, the compilation)
        for _ in range(3):
            prefill()
            out = verify(forward)
        sync()
        compile_s[mode] = time.perf_counter() - t0
        agree[mode] = float((out.float() - reference.float()).abs().max())
    times = {mode: [] for mode in forwards}
    for _ in range(args.repeats):
        for mode, forward in forwards.items():
            prefill()
            sync()
            t0 = time.perf_counter()
            verify(forward)
            sync()
            times[mode].append(time.perf_counter() - t0)
    report = {"device": (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                         else args.device),
              "dtype": args.dtype, "block_size": b, "context_length": length,
              "repeats": args.repeats,
              "median_ms": {m: 1000 * statistics.median(t) for m, t in times.items()},
              "warmup_s": compile_s, "max_abs_logit_diff_vs_eager": agree}
    for mode, ms in report["median_ms"].items():
        print(f"verify of {b} tokens, {mode:>16}: {ms:.3f} ms (warm-up {compile_s[mode]:.1f} s, "
              f"max |logit diff| vs eager {agree[mode]:.2e})")
    if args.json_out:
        atomic_write_text(args.json_out, json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
