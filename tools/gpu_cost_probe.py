"""Step costs of this project's DFlash loop at the paper's scale, on whatever device is given.

Builds a randomly initialised target of a public model's shape (Qwen3-8B by default) and a 5-layer
DFlash drafter shaped from it (``DrafterConfig.from_target``), then times one target forward over b
tokens (t_target(b)) and one drafter forward over a block of 16 (t_draft(16)) at a fixed context
length:

* **eager**: the decode loop's own forwards, timed by
  ``dflash_lite.decoding.costs.measure_step_costs``;
* **compiled** (``--compiled-sizes``, on CUDA): the decode loop's forwards on fixed shapes
  (``dflash_lite.decoding.shapes.FixedShapes``) through ``torch.compile(mode="reduce-overhead")``.

Random weights make acceptance meaningless, but the costs are the real ones: with the paper's tau
they give the cost model's speedup at that scale (docs/method.md, notebook 10), and the bytes of
the weights over the memory bandwidth give the floor a forward cannot beat.

    python tools/gpu_cost_probe.py --device cuda --json results/gpu/cost_probe_qwen3_8b.json python
    tools/gpu_cost_probe.py --device cpu --shape smoke --compiled-sizes ''     # a quick check
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dflash_lite.decoding.costs import measure_step_costs
from dflash_lite.decoding.decode import prefill, verify
from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
from dflash_lite.files import atomic_write_text
from dflash_lite.decoding.shapes import FixedShapes
from dflash_lite.decoding.timing import interleaved

SHAPES = {   # hidden, intermediate, layers, heads, kv heads, head_dim, vocab
    "qwen3-8b": (4096, 12288, 36, 32, 8, 128, 151936),
    "qwen3-4b": (2560, 9728, 36, 32, 8, 128, 151936),
    "smoke": (128, 256, 4, 4, 2, 32, 1024),
}
# the paper's Table 1, Qwen3-8B on an H200, greedy, block 16: tau 6.49 on average ...
PAPER_TAU = 6.49
PAPER_SPEEDUP = 4.86    # ... at 4.86x over autoregressive decoding
TARGET_SIZES = [1, 2, 4, 8, 16, 17, 32, 33, 64]


def build(shape: str, device: str, dtype: torch.dtype):
    """A random target of ``shape`` and its 5-layer drafter, built on the device in ``dtype``."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    h, inter, layers, heads, kv, hd, vocab = SHAPES[shape]
    config = Qwen3Config(hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads,
                         num_key_value_heads=kv, head_dim=hd, vocab_size=vocab,
                         max_position_embeddings=40960,
                         tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            target = Qwen3ForCausalLM(config).eval()
            drafter_config = DrafterConfig.from_target(config, mask_token_id=vocab - 1,
                                                       num_layers=5, block_size=16)
            drafter = DFlashDrafter(drafter_config).eval()
    finally:
        torch.set_default_dtype(torch.float32)
    return target, drafter


@torch.inference_mode()
def compiled_costs(target, drafter, ids: torch.Tensor, sizes: list[int], repeats: int) -> dict:
    """Median seconds of the decode loop's compiled forwards on fixed shapes
    (``dflash_lite.decoding.shapes.FixedShapes``): the target over b tokens at the context's end
    (each call rewinds to the same slot), and the drafter over a block of 16 after 16 new context
    positions."""
    length, layer_ids = ids.shape[1], drafter.config.target_layer_ids
    shapes = FixedShapes(length + 16, compile=True, buckets=sizes, context_width=16)
    cache = shapes.target_cache(target, length)
    _, features = prefill(target, ids, cache, layer_ids)
    dcache = shapes.drafter_cache(drafter, ids.device)
    block = torch.full((1, 16), drafter.config.mask_token_id, device=ids.device)

    def target_step(b):
        cache.rewind(length)
        shapes.verify(lambda i, d, a: verify(target, i, cache, layer_ids, depths=d, ancestors=a),
                      ids[:, -1:].expand(1, b), key=("verify", tuple(layer_ids)))

    runs = {("target", b): (lambda b=b: target_step(b)) for b in sizes}
    runs[("draft", 16)] = lambda: shapes.draft(drafter, target, dcache, block, features[:, -16:],
                                               length - 16)
    t0 = time.perf_counter()
    # compile and record every width
    interleaved(runs, repeats=0, warmup=3, device=ids.device)
    warmup_s = time.perf_counter() - t0
    timed = interleaved(runs, repeats=repeats, warmup=0, device=ids.device)
    medians = {name: statistics.median(t for t, _ in calls) for name, calls in timed.items()}
    return {"t_target": {b: t for (kind, b), t in medians.items() if kind == "target"},
            "t_draft": {b: t for (kind, b), t in medians.items() if kind == "draft"},
            "warmup_s": warmup_s}


def summary(costs: dict) -> dict:
    """Milliseconds, ratios to t_target(1), and the cost model's speedup at the paper's tau:
    tau * t_target(1) / (t_target(16) + t_draft(16))."""
    t1 = costs["t_target"][1]
    out = {"t_target_ms": {b: 1e3 * t for b, t in costs["t_target"].items()},
           "t_draft_ms": {b: 1e3 * t for b, t in costs["t_draft"].items()},
           "ratios": {f"t_target({b})/t1": t / t1 for b, t in costs["t_target"].items()}}
    if 16 in costs["t_target"] and 16 in costs["t_draft"]:
        out["ratios"]["t_draft(16)/t1"] = costs["t_draft"][16] / t1
        out["predicted_speedup_B16_at_paper_tau"] = (
            PAPER_TAU * t1 / (costs["t_target"][16] + costs["t_draft"][16]))
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", default="qwen3-8b", choices=list(SHAPES))
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--compiled-sizes", default="1,2,4,8,16,17,32,64",
                        help="target widths to time compiled, comma-separated ('' for none); "
                             "CUDA only")
    parser.add_argument("--bandwidth-tb-s", type=float, default=4.8,
                        help="memory bandwidth for the floor (H200: 4.8)")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)


    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    t0 = time.perf_counter()
    target, drafter = build(args.shape, args.device, dtype)
    build_s = time.perf_counter() - t0
    ids = torch.randint(0, SHAPES[args.shape][-1] - 2, (1, args.context), device=args.device)
    weight_bytes = sum(p.numel() * p.element_size() for p in target.parameters())
    report = {"shape": args.shape, "device": args.device,
              "dtype": str(dtype).removeprefix("torch."),
              "context": args.context,
              "params_target_B": sum(p.numel() for p in target.parameters()) / 1e9,
              "params_drafter_B": sum(p.numel() for p in drafter.parameters()) / 1e9,
              "build_s": build_s,
              "bandwidth_TB_s": args.bandwidth_tb_s,
              "floor_t_target_1_ms": 1e3 * weight_bytes / (args.bandwidth_tb_s * 1e12),
              "paper": {"tau": PAPER_TAU, "speedup": PAPER_SPEEDUP}}
    if args.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name(0)
    with torch.inference_mode():
        report["eager"] = summary(measure_step_costs(target, drafter, ids, TARGET_SIZES, [16],
                                                     args.repeats))
    print(json.dumps({"eager": report["eager"]}, indent=1), flush=True)
    sizes = [int(b) for b in args.compiled_sizes.split(",") if b.strip()]
    if sizes and args.device.startswith("cuda"):
        sizes = sorted(set(sizes) | {1, 16})
        try:
            compiled = compiled_costs(target, drafter, ids, sizes, args.repeats)
            report["compiled"] = {**summary(compiled), "warmup_s": compiled["warmup_s"]}
        except Exception as e:                      # report and keep the eager numbers
            report["compiled"] = {"error": f"{type(e).__name__}: "
                                           f"{str(e).splitlines()[0] if str(e) else ''}"}
        print(json.dumps({"compiled": report["compiled"]}, indent=1), flush=True)
    if args.device.startswith("cuda"):
        report["max_memory_GB"] = torch.cuda.max_memory_allocated() / 1e9
    if args.json_out:
        atomic_write_text(args.json_out, json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
