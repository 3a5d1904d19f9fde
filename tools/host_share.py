"""How much of a decode step is host work: the share of the loop's time spent outside the target's
and the drafter's forwards, per method and batch size, optionally against an earlier commit.

Every forward of the models is timed by a hook on the model (the outermost call only), and the
loop's time is each batch's wall time after its prefill (``GenerationResult.phase_times``). What is
left is what the loop does around the forwards: choosing, laying out and padding the drafts,
building trees (the drafter's logits through the target's head, the top tokens), reading the
target's choices, accepting, moving cache entries. Per method and batch size it prints the steps
(the longest row's, summed over the batches and rounds), the milliseconds a step, the host
milliseconds a step and their share. With ``--commit`` the package as it was there
(``tools/loop_against_commit.py``'s ``load_then``) runs plain decoding, DFlash and the draft tree
too, interleaved with this checkout's in one process, and each row's speed now / then is the
median of the rounds' paired ratios. Rows stop at the target's EOS, as in bench; every output is
checked against plain decoding's; the first round is a warm-up.

    python tools/host_share.py --domain math --batch-sizes 1,4,8 --repeats 5
    python tools/host_share.py --domain math --batch-sizes 8 --repeats 7 --commit 2065e00
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from loop_against_commit import load_then
from never_slower import load_setup, prompt_options

from dflash_lite.decoding.baselines import NoDraftProposer
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.decoding.session import DEFAULT_OPTIONS, PolicySession
from dflash_lite.decoding.timing import interleaved
from dflash_lite.decoding.tree import DFlashTreeProposer
from dflash_lite.measuring.batching import batches_of, policy_costs


class ForwardClock:
    """Seconds spent inside the forwards of ``models`` (a forward called inside another counts
    once), and the first forward's own seconds since :meth:`reset` (a request's prefill)."""

    def __init__(self, models):
        self.depth, self.started, self.inside, self.first = 0, 0.0, 0.0, None
        for model in models:
            model.register_forward_pre_hook(self.enter)
            model.register_forward_hook(self.leave)

    def reset(self) -> None:
        self.inside, self.first = 0.0, None

    def enter(self, *_):
        if self.depth == 0:
            self.started = time.perf_counter()
        self.depth += 1

    def leave(self, *_):
        self.depth -= 1
        if self.depth == 0:
            took = time.perf_counter() - self.started
            self.inside += took
            self.first = took if self.first is None else self.first


def main() -> None:
    parser = prompt_options(__doc__.split("\n\n")[0], (1, 4, 8), 5)
    parser.add_argument("--commit", help="also run plain decoding, DFlash and the tree as the "
                                         "package was at this commit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        then = load_then(args.commit, Path(tmp), ("decode", "baselines", "tree", "checkpoints")) \
            if args.commit else None                    # a commit git does not know: one line
        setup = load_setup(args)
        target, drafter, prompts = setup.target, setup.drafter, setup.prompts
        n, block = args.max_new_tokens, drafter.config.block_size
        session = PolicySession(drafter, target, DEFAULT_OPTIONS)
        versions = {"": (generate, NoDraftProposer, DFlashProposer, DFlashTreeProposer, drafter)}
        if then is not None:
            _, _, old = then["checkpoints"].load_pair(setup.config.target, None, "cpu", None)
            versions[", then"] = (then["decode"].generate, then["baselines"].NoDraftProposer,
                                  then["decode"].DFlashProposer, then["tree"].DFlashTreeProposer,
                                  old)
        clock = ForwardClock([target] + [v[-1] for v in versions.values()])
        print(f"{'batch':>5}  {'method':<22}{'steps':>6}{'ms a step':>11}{'host ms':>9}"
              f"{'share':>7}" + ("  now / then" if args.commit else ""))
        for size in args.batch_sizes:
            groups = batches_of(list(range(len(prompts))), size)
            if size > 1:
                session.batch_costs[size] = policy_costs(target, drafter, prompts[0], size)
            runs, totals = {}, {}
            for tag, (gen, plain, chain, tree, model) in versions.items():
                runs.update({f"plain{tag}": (gen, lambda batch, p=plain: p()),
                             f"DFlash B={block}{tag}": (gen, lambda batch, c=chain, m=model:
                                                         c(m, target, block)),
                             f"tree N=16{tag}": (gen, lambda batch, t=tree, m=model:
                                                 t(m, target, 16))})
            runs["default policy"] = (generate, lambda batch: session.proposer(list(batch)))

            def run(name):
                gen, make = runs[name]
                out = []
                for group in groups:
                    batch = [prompts[i] for i in group]
                    proposer = make(batch)
                    clock.reset()
                    results = gen(target, proposer, batch, n, stop_token_ids=setup.stops)
                    if name == "default policy":
                        session.finished(proposer)
                    loop = max(r.total_time for r in results) - results[0].phase_times["prefill"]
                    total = totals.setdefault(name, [])
                    total.append((loop, clock.inside - clock.first,
                                  max(len(r.acceptance_lengths) for r in results)))
                    out += [r.tokens for r in results]
                return out
            timed = interleaved({name: (lambda name=name: run(name)) for name in runs},
                                args.repeats, 1)
            reference = timed["plain"][0][1]
            for name, calls in timed.items():
                if any(tokens != reference for _, tokens in calls):
                    raise SystemExit(f"{name} at batch {size}: an output differs from plain "
                                     "decoding's")
                counted = totals[name][len(groups):]                 # after the warm-up
                loop, forwards, steps = (sum(x) for x in zip(*counted))
                ratio = ""
                if name + ", then" in timed:          # then's seconds over now's, per round
                    paired = zip(calls, timed[name + ", then"])
                    ratio = f"  {statistics.median(t / s for (s, _), (t, _) in paired):.3f}"
                print(f"{size:>5}  {name:<22}{steps:>6}{loop / steps * 1e3:>11.2f}"
                      f"{(loop - forwards) / steps * 1e3:>9.2f}{(loop - forwards) / loop:>7.0%}"
                      + ratio, flush=True)


if __name__ == "__main__":
    main()
