"""Train the drafter variants that notebooks 04 and 05 compare, at one equal budget, and measure
them.

Every variant has the same steps, batch, anchors per sequence, learning rate and seed as the
others; only the one thing under study changes. Each is then measured on held-out in-domain
prompts (math and code, never the benchmark judges): tau at its own block size, and for the
block-size pair at the other one too. The drafters stay in ``--work`` (not committed); the
numbers go to ``results/ablations.json``, which the notebooks read.

    python tools/train_ablations.py --workers 2            # both at once, one thread each (~35 min)
    python tools/train_ablations.py --collect              # merge into results/ablations.json
    python tools/train_ablations.py --evaluate             # measure tau again (trained variants
    kept)

A single variant: ``python tools/train_ablations.py --only input_fusion``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> the options that differ from the reference (DFlash as shipped: KV injection, 5 taps,
# B = 16, random anchors)
VARIANTS = {
    "reference": {},
    "input_fusion": {"conditioning": "input_fusion"},
    "no_target_features": {"conditioning": "none"},
    "taps_1": {"num_taps": 1},
    "taps_3": {"num_taps": 3},
    "fixed_anchors": {"fixed_anchors": True},
    "block_8": {"block_size": 8},
}
COMMON = dict(layers=2, batch_size=8, num_anchors=16, lr=1e-3, seed=0)
CROSS_BLOCK_SIZES = {"reference": [8], "block_8": [16]}     # also measured at these inference sizes


def train_one(name: str, steps: int, work: Path, eval_prompts: int) -> dict:
    import torch

    from dflash_lite.training.train import train_drafter

    options = {**COMMON, "block_size": 16, **VARIANTS[name]}
    out = work / name
    command = f"python tools/train_ablations.py --only {name} --steps {steps}"
    started = time.time()
    train_drafter(out=str(out), steps=steps, eval_every=max(1, steps // 4), command=command,
                  **options)
    curve = json.loads((out / "training_curve.json").read_text())
    last = curve["curve"][-1]
    result = {"name": name, "options": options, "steps": curve["training"]["steps"],
              "train_seconds": curve["training"]["train_seconds"],
              "threads": torch.get_num_threads(),
              "final_loss": last["loss"], "accuracy_per_position": last["accuracy_per_position"],
              "tau_curve": curve["tau_curve"], "loss_curve": [[h["step"],
                                                               h["loss"]] for h in curve["curve"]],
              "wall_seconds": round(time.time() - started, 1), "command": command}
    return evaluate(name, work, eval_prompts, result)


def evaluate(name: str, work: Path, eval_prompts: int, result: dict | None = None) -> dict:
    """tau of a trained variant on held-out prompts, at its own block size and the cross sizes."""
    from dflash_lite.decoding.checkpoints import load_drafter
    from dflash_lite.files import atomic_write_text
    from dflash_lite.decoding.target import load_pretrained
    from dflash_lite.training.train import tau_probe

    out = work / name
    if result is None:
        result = json.loads((out / "result.json").read_text())
        # probed during training by an older probe; not comparable
        result.pop("tau_curve", None)
    target, tokenizer = load_pretrained("tiny")
    drafter = load_drafter(out)
    measure = tau_probe(target, tokenizer, num_prompts=eval_prompts, max_new_tokens=64)
    tau = {str(drafter.config.block_size): measure(drafter)}
    for b in CROSS_BLOCK_SIZES.get(name, []):
        tau[str(b)] = measure(drafter, block_size=b)
    result.update(tau_by_inference_block_size=tau,
                  eval={"prompts_per_domain": eval_prompts, "max_new_tokens": 64,
                        "split": "held_out",
                        "stops_at_eos": True})
    atomic_write_text(out / "result.json", json.dumps(result, indent=1))
    print(f"[ablations] {name}: tau {tau}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--work", default=str(ROOT / ".cache" / "ablations"))
    parser.add_argument("--eval-prompts", type=int, default=8, help="held-out prompts per domain")
    parser.add_argument("--only", choices=sorted(VARIANTS), action="append")
    parser.add_argument("--workers", type=int, default=1, help="processes, one thread each")
    parser.add_argument("--collect", action="store_true")
    parser.add_argument("--evaluate", action="store_true",
                        help="measure tau again for trained variants")
    parser.add_argument("--out", default=str(ROOT / "results" / "ablations.json"))
    args = parser.parse_args()
    work = Path(args.work)
    if args.collect:
        missing = [n for n in VARIANTS if not (work / n / "result.json").is_file()]
        if missing:
            print(f"error: no result yet for {', '.join(missing)}; train them first",
                  file=sys.stderr)
            return 2
        from dflash_lite.files import atomic_write_text
        results = {n: json.loads((work / n / "result.json").read_text()) for n in VARIANTS}
        out = atomic_write_text(args.out, json.dumps({"common": COMMON, "variants": results},
                                                     indent=1))
        print(out)
        return 0
    names = args.only or list(VARIANTS)
    if args.evaluate:
        for name in names:
            evaluate(name, work, args.eval_prompts)
        return 0
    # split the variants round-robin over single-thread processes
    if args.workers > 1:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs = [subprocess.Popen([sys.executable, __file__, "--steps", str(args.steps), "--work",
                                   args.work,
                                   "--eval-prompts", str(args.eval_prompts)]
                                  + [a for n in names[i::args.workers] for a in ("--only", n)],
                                  env=env)
                 for i in range(args.workers)]
        return max(p.wait() for p in procs)
    for name in names:
        if not (work / name / "result.json").is_file():
            train_one(name, args.steps, work, args.eval_prompts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
