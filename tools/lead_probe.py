"""The default policy's choices under several values of ``choice.LEAD``, free of machine noise.

How far past the batch's least-advanced row a row's tokens still count (``choice.counted``) changes
which steps a batch takes. Wall times cannot tell values apart here (identical requests spread by
about 20% on this CPU), so this compares what the policy's own cost model says its choices cost:
the step costs are measured once per batch size and shared by every value, the policy's timing
corrections are off (every kind at its modelled cost), and decoding is greedy, so the only thing
that differs between two values is the steps they choose. For each value, one ``PolicySession``
runs the batch sizes in order (as ``bench --batch-sizes`` keeps it), ``--requests`` times each,
and prints per request the modelled speedup: batched plain decoding's modelled seconds (its
steps, a batch's longest row's to the target's EOS, at the first prompt's context) over the sum
of the policy's step forecasts. A huge value
(1e9) counts every row's tokens, the rule before ``counted``; 0 counts only what the
least-advanced row gains.

    python tools/package_prompts.py --out pkg.jsonl --num 8
    python tools/lead_probe.py --prompts pkg.jsonl --leads 1e9,8 --batch-sizes 1,2,4,8
"""
from __future__ import annotations

import argparse
import copy
from collections import Counter

import dflash_lite.decoding.choice as choice
from dflash_lite.decoding.baselines import NoDraftProposer
from dflash_lite.decoding.costs import StepCosts, step_costs
from dflash_lite.decoding.decode import generate
from dflash_lite.decoding.session import DEFAULT_OPTIONS, PolicySession
from dflash_lite.measuring.batching import batches_of
from dflash_lite.measuring.benchmark import BenchConfig, resolve
from dflash_lite.validate import POS, Parser, block_sizes_arg


def leads_arg(text: str) -> list[float]:
    """``"1e9,8"``: the LEAD values, each a number >= 0."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"comma-separated numbers >= 0, got {text!r}")
    return values


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", help="JSONL prompts (default: held-out math)")
    parser.add_argument("--num-prompts", type=POS, default=8)
    parser.add_argument("--max-new-tokens", type=POS, default=48)
    parser.add_argument("--batch-sizes", type=block_sizes_arg, default=(1, 2, 4, 8))
    parser.add_argument("--leads", type=leads_arg, default=[1e9, 8.0])
    parser.add_argument("--requests", type=POS, default=3)
    args = parser.parse_args()
    setup = resolve(BenchConfig(prompts=args.prompts, num_prompts=args.num_prompts,
                                max_new_tokens=args.max_new_tokens))
    target, drafter, prompts = setup.target, setup.drafter, setup.prompts
    n = args.max_new_tokens
    stops = setup.stops                                  # rows end at the target's EOS, as in bench
    lengths = [len(generate(target, NoDraftProposer(), p, n, stop_token_ids=stops).tokens)
               for p in prompts]                         # plain decoding's steps per prompt
    measured = {size: step_costs(target, drafter, prompts[0], drafter.config.block_size,
                                 DEFAULT_OPTIONS.tree_sizes, repeats=5, rows=size)
                for size in args.batch_sizes}
    StepCosts.observe = lambda self, *timed, **options: None     # every kind at its model
    for lead in args.leads:
        choice.LEAD = lead
        session = PolicySession(drafter, target, DEFAULT_OPTIONS, copy.deepcopy(measured.get(1)),
                                batch_costs={size: copy.deepcopy(costs)
                                             for size, costs in measured.items() if size > 1})
        for size in args.batch_sizes:
            plain = measured[size].target(1) * sum(max(lengths[i] for i in group) for group
                                                   in batches_of(list(range(len(prompts))), size))
            speedups, kinds = [], Counter()
            for _ in range(args.requests):
                forecast = 0.0
                for group in batches_of(prompts, size):
                    proposer = session.proposer(rows=len(group))
                    generate(target, proposer, group, n, stop_token_ids=stops)
                    session.finished(proposer)
                    forecast += sum(proposer.forecast)
                    kinds.update(c.kind for c in proposer.chosen)
                speedups.append(plain / forecast)
            print(f"LEAD {lead:g}, batch {size}: modelled speedup per request "
                  + ", ".join(f"{s:.3f}" for s in speedups) + f"; steps {dict(kinds)}", flush=True)


if __name__ == "__main__":
    main()
