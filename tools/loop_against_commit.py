"""This checkout's decode loop against the loop of an earlier commit, in one process.

The package as it was at ``--commit`` is extracted (``git archive``) into a temporary folder under
another name, ``dflash_lite_then``, so both versions load side by side; the target is loaded once
and shared, each version loads its own drafter from the same files. Every row runs on the same
prompts, after a warm-up, interleaved (the one timer), and every row's tokens are checked against
the first row's. Rows: plain decoding, DFlash B=16 and the default policy, then and now, and the
default policy now on fixed shapes (eager forwards); plain decoding now runs twice, so the two
read off what a tie reads as in this run. Prints tokens/s, tau and the ratios now / then: of the
medians, and paired by round (``measuring.harness.paired_ratio``: the median of the rounds' ratios,
its interval and the one-sided p that now is slower), which a machine's drift between rounds moves
less.
With ``--temperature T`` the rows of now sample seeded per position (prompt i: seed i; every row
must give plain decoding's tokens), those of then from one ``torch.Generator`` as that loop did
(their tokens differ from row to row: a sample, not checked).

    python tools/loop_against_commit.py --commit 96346d4 --domain math --repeats 5
    python tools/loop_against_commit.py --commit 96346d4 --domain math --temperature 1
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def load_then(commit: str, into: Path,
              names=("decode", "baselines", "policy", "checkpoints", "acceptance")):
    """The package at ``commit`` as the importable package ``dflash_lite_then``: its modules
    ``names``, by name."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "dflash_lite"],
                             capture_output=True)
    if archive.returncode != 0:
        reason = archive.stderr.decode(errors="replace").strip().splitlines() or ["git failed"]
        raise SystemExit(f"--commit {commit}: {reason[0]}")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    (into / "dflash_lite").rename(into / "dflash_lite_then")
    sys.path.insert(0, str(into))
    # the decoding modules moved into dflash_lite/decoding/ (a commit before that has them on top)
    layer = "decoding." if (into / "dflash_lite_then" / "decoding").is_dir() else ""
    return {name: importlib.import_module(f"dflash_lite_then.{layer}{name}")
            for name in names}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="96346d4")
    parser.add_argument("--domain", default="math", choices=["math", "code"])
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from dflash_lite.decoding.acceptance import PositionNoise, SamplingParams
    from dflash_lite.decoding.baselines import NoDraftProposer
    from dflash_lite.decoding.checkpoints import load_pair
    from dflash_lite.decoding.decode import DFlashProposer, generate
    from dflash_lite.decoding.session import DEFAULT_OPTIONS, PolicySession
    from dflash_lite.prompts import builtin_prompts, encode
    from dflash_lite.decoding.shapes import FixedShapes
    from dflash_lite.decoding.target import stop_token_ids
    from dflash_lite.decoding.timing import interleaved
    from dflash_lite.measuring.harness import paired_ratio

    with tempfile.TemporaryDirectory() as tmp:
        then = load_then(args.commit, Path(tmp))
        target, tokenizer, drafter = load_pair("tiny", None, "cpu", None)
        _, _, drafter_then = then["checkpoints"].load_pair("tiny", None, "cpu", None)
        stops = stop_token_ids(target, tokenizer)
        ids = [encode(tokenizer, t, True) for t in builtin_prompts(args.domain, args.num_prompts)]
        n = args.max_new_tokens
        fixed = FixedShapes(max(x.shape[1] for x in ids) + n)
        d, b, p = then["decode"], then["baselines"], then["policy"]
        sampled = args.temperature > 0
        stream = torch.Generator().manual_seed(0)
        then_sampling = then["acceptance"].SamplingParams
        sampling = {d.generate: then_sampling(args.temperature),
                    generate: SamplingParams(args.temperature)}

        def call(gen, proposer, i, x):
            noise = (PositionNoise(i) if gen is generate else stream) if sampled else None
            return gen(target, proposer, x, n, sampling[gen], stops, noise)

        def each(make, gen):
            return lambda: [call(gen, make(), i, x) for i, x in enumerate(ids)]

        def policy(session, gen, **kw):
            def run():
                out = []
                for i, x in enumerate(ids):
                    proposer = session.proposer(x, **kw)
                    out.append(call(gen, proposer, i, x))
                    session.finished(proposer)
                return out
            return run

        runs = {
            "plain, then": each(b.NoDraftProposer, d.generate),
            "plain, now": each(NoDraftProposer, generate),
            "plain, now, again": each(NoDraftProposer, generate),   # a tie, as this run reads it
            "DFlash B=16, then": each(lambda: d.DFlashProposer(drafter_then, target, 16),
                                      d.generate),
            "DFlash B=16, now": each(lambda: DFlashProposer(drafter, target, 16), generate),
            "default policy, then": policy(p.PolicySession(drafter_then, target, p.DEFAULT_OPTIONS,
                                                           recalibrate=False), d.generate),
            "default policy, now": policy(PolicySession(drafter, target, DEFAULT_OPTIONS,
                                                        recalibrate=False), generate),
            "default policy, now, fixed shapes": policy(PolicySession(
                drafter, target, DEFAULT_OPTIONS, recalibrate=False), generate, shapes=fixed),
        }
        timed = interleaved(runs, repeats=args.repeats, warmup=1)
    speed, reference = {}, {}
    for name, calls in timed.items():
        tokens = [r.tokens for r in calls[0][1]]
        group = "then" if sampled and name.endswith("then") else "now"
        reference.setdefault(group, tokens)
        if not (sampled and group == "then"):
            assert tokens == reference[group], f"{name} differs from plain decoding"
        speed[name] = statistics.median(sum(len(r.tokens) for r in res) / s for s, res in calls)
        lengths = [a for r in calls[0][1] for a in r.acceptance_lengths]
        print(f"{name:<36} {speed[name]:8.1f} tokens/s   tau {sum(lengths) / len(lengths):.2f}")
    seconds = {name: [s for s, _ in calls] for name, calls in timed.items()}
    for row in ("plain", "DFlash B=16", "default policy"):
        print(f"{row}: now / then = {speed[row + ', now'] / speed[row + ', then']:.3f}; paired "
              f"by round {paired_ratio(seconds[row + ', then'], seconds[row + ', now'])}")
    print(f"plain, now against itself (what a tie reads as in this run): "
          f"{speed['plain, now, again'] / speed['plain, now']:.3f}; paired by round "
          f"{paired_ratio(seconds['plain, now'], seconds['plain, now, again'])}")
    print(f"default policy, fixed shapes / eager: "
          f"{speed['default policy, now, fixed shapes'] / speed['default policy, now']:.3f}")
    print(f"speedup of the default policy over plain decoding: then "
          f"{speed['default policy, then'] / speed['plain, then']:.2f}x, now "
          f"{speed['default policy, now'] / speed['plain, now']:.2f}x")
    checked = "now: every output identical to plain decoding's seeded sample" if sampled \
        else "every output identical"
    print(f"({len(ids)} held-out {args.domain} prompts x {n} new tokens, temperature "
          f"{args.temperature:g}, median of {args.repeats} interleaved repeats, "
          f"{torch.get_num_threads()} threads; {checked})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
