"""What the default policy chooses at one batch size, request by request.

One ``PolicySession`` is warmed up at the smaller batch sizes (1, 2, 4, ...), as ``bench
--batch-sizes`` keeps it across a sweep; then ``--requests`` requests of the whole prompt list run
at ``--batch-size``. Each prints its wall seconds, its steps, how many of them were prompt lookup,
and the policy's forecast: the sum of its steps' modelled seconds (``CostAwareProposer.forecast``),
which depends only on the choices and the step costs measured once, not on the machine's noise.

    python tools/package_prompts.py --out pkg.jsonl --num 8
    python tools/policy_probe.py --prompts pkg.jsonl --batch-size 8 --requests 8
"""
from __future__ import annotations

import time
from collections import Counter

from dflash_lite.decoding.decode import generate
from dflash_lite.decoding.session import DEFAULT_OPTIONS, PolicySession
from dflash_lite.measuring.batching import batch_methods, batches_of, policy_costs
from dflash_lite.measuring.benchmark import BenchConfig, resolve
from dflash_lite.validate import POS, Parser


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", help="JSONL prompts (default: held-out math)")
    parser.add_argument("--num-prompts", type=POS, default=8)
    parser.add_argument("--max-new-tokens", type=POS, default=48)
    parser.add_argument("--batch-size", type=POS, default=8)
    parser.add_argument("--requests", type=POS, default=8)
    args = parser.parse_args()
    setup = resolve(BenchConfig(prompts=args.prompts, num_prompts=args.num_prompts,
                                max_new_tokens=args.max_new_tokens))
    target, drafter, prompts = setup.target, setup.drafter, setup.prompts
    stops = setup.stops                                  # rows end at the target's EOS, as in bench
    session = PolicySession(drafter, target, DEFAULT_OPTIONS)
    warm_up = [b for b in (1, 2, 4, 8, 16) if b < args.batch_size]
    for size in warm_up + [args.batch_size]:
        costs = policy_costs(target, drafter, prompts[0], size)
        default = next(m for m in batch_methods(target, drafter, size=size, costs=costs,
                                                session=session) if m.default)
        for request in range(args.requests if size == args.batch_size else 2):
            chosen, forecast, started = Counter(), 0.0, time.perf_counter()
            for group in batches_of(prompts, size):
                proposer = default.make(group)
                generate(target, proposer, group, args.max_new_tokens, stop_token_ids=stops)
                default.finish(proposer)
                chosen.update(c.kind for c in proposer.chosen)
                forecast += sum(proposer.forecast)
            if size == args.batch_size:
                print(f"batch {size} request {request}: {time.perf_counter() - started:.3f} s, "
                      f"{sum(chosen.values())} steps ({chosen['ngram']} prompt lookup), "
                      f"forecast {forecast:.3f} s; {dict(chosen)}")


if __name__ == "__main__":
    main()
