"""Is the default policy ever slower than batched plain decoding? Many interleaved rounds of just
the two, so the answer is not lost in the machine's noise.

``bench --batch-sizes`` times nine methods a round, so it affords few rounds, and its speedups move
by 10-20% between runs on this CPU. Here each round times batched plain decoding, plain decoding
again and the default policy, in turn (the order rotating), at each batch size. The default keeps
one ``PolicySession`` across the sizes and its step costs measured at each, as the sweep does.
Per batch size it prints the median of the rounds' paired ratios (plain's seconds over the
default's, in the same round) with their quartiles, the median over the last half of the rounds
(a kind of draft that keeps losing is tried less and less often: ``StepCosts.observe_yield``), and
the same for plain against itself: what a tie reads as; then the kinds of the default's steps
(over the warm-up and every round) and whether every row equals its prompt decoded alone. Last,
the default's rounds apart: those whose every step was plain (what the policy's own work costs)
and those that drafted (what its tries cost).

The rounds' quartiles are one session's: one calibration of the step costs and one path of tries
and rests, which later rounds inherit. ``--sessions K`` runs K defaults side by side, each in its
own session with its own calibration (interleaved with the rest), and prints each one's median and
their spread: how far two runs of the same commit can read apart.

Whether a loss is beyond the noise (``measuring.harness.paired_ratio``): per batch size, the
default's seconds (with ``--sessions``, each round's geometric mean over them) against plain
decoding's in the same rounds, the median ratio with a 95% interval and the one-sided Wilcoxon
p-value for the default being the slower (small: a loss beyond the noise); plain decoding again
gets the same test, as a check of it.

    python tools/package_prompts.py --out pkg.jsonl --num 8
    python tools/never_slower.py --prompts pkg.jsonl --max-new-tokens 48 --repeats 9
    python tools/never_slower.py --domain code --max-new-tokens 64 --repeats 9
    python tools/never_slower.py --domain math --batch-sizes 4 --repeats 15 --sessions 4
"""
from __future__ import annotations

import statistics
from collections import Counter

from dflash_lite.decoding.baselines import NoDraftProposer
from dflash_lite.decoding.decode import generate
from dflash_lite.decoding.session import DEFAULT_OPTIONS, PolicySession
from dflash_lite.decoding.timing import interleaved
from dflash_lite.measuring.batching import batch_methods, batches_of, policy_costs
from dflash_lite.measuring.benchmark import BenchConfig, resolve
from dflash_lite.measuring.harness import paired_ratio
from dflash_lite.validate import POS, Parser, block_sizes_arg


def quartiles(values: list[float]) -> str:
    low, mid, high = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return f"{mid:.3f}x [{low:.3f}, {high:.3f}]"


def prompt_options(description: str, batch_sizes: tuple[int, ...], repeats: int) -> Parser:
    """The options of a batch measurement here (this tool, ``host_share.py``): the prompts, their
    new tokens, the batch sizes and the rounds; :func:`load_setup` loads what they name."""
    parser = Parser(description=description)
    parser.add_argument("--prompts", help="JSONL prompts (default: the built-in held-out --domain)")
    parser.add_argument("--domain", choices=("math", "code", "mixed"), default="math")
    parser.add_argument("--num-prompts", type=POS, default=8)
    parser.add_argument("--max-new-tokens", type=POS, default=64)
    parser.add_argument("--batch-sizes", type=block_sizes_arg, default=batch_sizes)
    parser.add_argument("--repeats", type=POS, default=repeats)
    return parser


def load_setup(args):
    """The target, the shipped drafter, the tokenized prompts and the stop tokens, as bench."""
    return resolve(BenchConfig(prompts=args.prompts, domain=args.domain,
                               num_prompts=args.num_prompts, max_new_tokens=args.max_new_tokens,
                               batch_sizes=args.batch_sizes))


def main() -> None:
    parser = prompt_options(__doc__.split("\n\n")[0], (1, 2, 4, 8, 16, 32), 9)
    parser.add_argument("--sessions", type=POS, default=1,
                        help="defaults timed side by side, each in a session of its own")
    args = parser.parse_args()
    setup = load_setup(args)
    target, drafter, prompts, n = setup.target, setup.drafter, setup.prompts, args.max_new_tokens
    stops = setup.stops                                  # rows end at the target's EOS, as in bench
    alone = [generate(target, NoDraftProposer(), p, n, stop_token_ids=stops).tokens
             for p in prompts]
    sessions = [PolicySession(drafter, target, DEFAULT_OPTIONS) for _ in range(args.sessions)]
    names = ["default"] if args.sessions == 1 else [f"default {k + 1}" for k in range(
        args.sessions)]
    for size in args.batch_sizes:
        # each session's methods, on step costs it measures itself; plain decoding from the first
        methods = [batch_methods(target, drafter, size=size, session=session,
                                 costs=policy_costs(target, drafter, prompts[0], size))
                   for session in sessions]
        plain = next(m for m in methods[0] if m.name == "plain (batched)")
        defaults = {name: next(m for m in ms if m.default) for name, ms in zip(names, methods)}
        groups = batches_of(list(range(len(prompts))), size)
        chosen = {name: Counter() for name in names}

        def run(method, record=None):
            same, drafted = True, False
            for group in groups:
                batch = [prompts[i] for i in group]
                proposer = method.make(batch)
                results = generate(target, proposer, batch, n, stop_token_ids=stops)
                same &= all(r.tokens == alone[i] for r, i in zip(results, group))
                if method.finish is not None:
                    method.finish(proposer)
                if record is not None:
                    record.update(c.kind for c in proposer.chosen)
                    drafted |= any(c.kind != "plain" for c in proposer.chosen)
            return same, drafted
        timed = interleaved({"plain": lambda: run(plain), "again": lambda: run(plain),
                             **{name: lambda m=m, name=name: run(m, chosen[name])
                                for name, m in defaults.items()}}, args.repeats, 1)
        seconds = {k: [t for t, _ in v] for k, v in timed.items()}
        same = all(ok for v in timed.values() for _, (ok, _) in v)
        paired = {k: [p / t for p, t in zip(seconds["plain"], seconds[k])] for k in timed}
        print(f"batch {size:>2}: plain again {quartiles(paired['again'])}; "
              f"plain {statistics.median(seconds['plain']):.2f} s a round; identical {same}")
        for name in names:
            late = statistics.median(paired[name][len(paired[name]) // 2:])
            print(f"   {name}: {quartiles(paired[name])} (its last half of the rounds "
                  f"{late:.3f}x); its steps {dict(chosen[name])}", flush=True)
            for label, drafting in (("only plain steps", False), ("a draft step", True)):
                part = [r for r, (_, (_, d)) in zip(paired[name], timed[name]) if d == drafting]
                print(f"      rounds with {label}: {len(part)}"
                      + (f", {quartiles(part)}" if part else ""), flush=True)
        if len(names) > 1:
            medians = sorted(statistics.median(paired[name]) for name in names)
            print(f"   the {len(names)} sessions' medians: {statistics.median(medians):.3f}x, "
                  f"from {medians[0]:.3f}x to {medians[-1]:.3f}x", flush=True)
        pooled = [statistics.geometric_mean(round_) for round_ in zip(*(seconds[name]
                                                                        for name in names))]
        print(f"   beyond noise? the default {paired_ratio(seconds['plain'], pooled)}; "
              f"plain again {paired_ratio(seconds['plain'], seconds['again'])}", flush=True)


if __name__ == "__main__":
    main()
