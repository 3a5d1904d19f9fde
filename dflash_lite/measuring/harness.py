"""The benchmark's harness (docs/method.md#measuring): :func:`measure` times every method on every
prompt, interleaved, :func:`run_benchmark` summarises it as a report, and :func:`paired_ratio` says
whether one run is slower than another beyond the machine's noise."""
from __future__ import annotations

import math
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers

from ..decoding.timing import interleaved
from .report import TRANSFORMERS_KINDS, Kind, Method, summarise


@dataclass
class MethodStats:
    method: Method
    # per repeat, over all prompts: seconds, new tokens, seconds per phase, verification steps
    times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    acceptance_lengths: list[int] = field(default_factory=list)
    phase_runs: list[dict] = field(default_factory=list)
    step_runs: list[int] = field(default_factory=list)
    identical: bool | None = None
    error: str | None = None


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` says of it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor() or platform.machine())


def environment(device: str) -> dict:
    env = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "python": platform.python_version(),
           "machine": platform.machine(), "processor": platform.processor(), "cpu": cpu_name()}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def measure(methods: list[Method], prompts: list[torch.Tensor], max_new_tokens: int,
            repeats: int = 3, device: str = "cpu", greedy: bool = True,
            seeded: bool = False) -> dict[str, MethodStats]:
    """Run every method on every prompt, interleaved, ``repeats`` times after one warm-up pass.

    Greedy, every row's outputs are checked against the target's greedy tokens: the outputs of the
    autoregressive row, else of ``model.generate``. Sampled and ``seeded``, our loop's rows are
    checked against the autoregressive row's seeded sample; transformers' rows (their own random
    stream) and unseeded runs are not."""
    stats = {m.name: MethodStats(m) for m in methods}
    outputs: dict[str, dict[int, list[int]]] = {m.name: {} for m in methods}
    # warm-up, and the outputs to check
    for m in methods:
        for i, ids in enumerate(prompts):
            try:
                outputs[m.name][i] = m.run(ids, max_new_tokens)[0]
            except Exception as e:                  # a failing method is reported, not dropped
                stats[m.name].error = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
                break
    base = next((m.name for kind in (Kind.AUTOREGRESSIVE, Kind.HF_GENERATE) for m in methods
                 if m.kind is kind and stats[m.name].error is None), None)
    reference = outputs[base] if base else {}
    live = [m for m in methods if stats[m.name].error is None]
    for m in live:
        s = stats[m.name]
        s.times = [0.0] * repeats
        s.tokens = [0] * repeats
        s.step_runs = [0] * repeats
        s.phase_runs = [{} for _ in range(repeats)]
    for ids in prompts:
        calls = interleaved({m.name: (lambda m=m: m.run(ids, max_new_tokens)) for m in live},
                            repeats, 0, device)
        for name, rounds in calls.items():
            s = stats[name]
            for repeat, (seconds, (tokens, result)) in enumerate(rounds):
                s.times[repeat] += seconds
                s.tokens[repeat] += len(tokens)
                if result is not None:
                    if repeat == 0:
                        s.acceptance_lengths += result.acceptance_lengths
                    s.step_runs[repeat] += len(result.acceptance_lengths)
                    phases = s.phase_runs[repeat]
                    for phase, t in result.phase_times.items():
                        phases[phase] = phases.get(phase, 0.0) + t
    for m in live:
        if reference and (greedy or seeded and m.kind not in TRANSFORMERS_KINDS):
            stats[m.name].identical = all(outputs[m.name][i] == reference[i] for i in reference)
    return stats


def run_benchmark(methods: list[Method], prompts: list[torch.Tensor], max_new_tokens: int,
                  repeats: int = 3, device: str = "cpu", greedy: bool = True,
                  seeded: bool = False) -> dict:
    """:func:`measure` the methods and :func:`summarise` it: the report without a cost model."""
    stats = measure(methods, prompts, max_new_tokens, repeats, device, greedy, seeded)
    return summarise(stats, environment(device), max_new_tokens, len(prompts), repeats)


@dataclass(frozen=True)
class PairedRatio:
    """A reference's seconds over another run's, timed in the same rounds (> 1: the other is
    faster): the median of the rounds' ratios, a ``confidence`` interval of that median (a
    bootstrap over the rounds) and the one-sided p-value of Wilcoxon's signed-rank test against
    "the other run is no slower" (a small one: it is slower beyond the noise)."""
    median: float
    low: float
    high: float
    p_slower: float
    confidence: float

    def slower(self, alpha: float = 0.05) -> bool:
        """Whether the other run is slower beyond the noise of these rounds, at level ``alpha``."""
        return self.p_slower < alpha

    def __str__(self) -> str:
        return (f"{self.median:.3f}x ({self.confidence:.0%} interval {self.low:.3f}-"
                f"{self.high:.3f}), one-sided p = {self.p_slower:.3f} for slower")


def paired_ratio(reference, other, confidence: float = 0.95, seed: int = 0) -> PairedRatio:
    """:class:`PairedRatio` of ``reference`` over ``other``: their seconds in the same rounds, one
    of each per round, every one positive (``seed``: the bootstrap's resampling). Rounds are
    taken as independent; a session that learns as it goes makes later rounds lean on earlier
    ones, so the interval is that of these rounds, not of another session's."""
    ref, run = np.asarray(reference, dtype=float), np.asarray(other, dtype=float)
    if ref.ndim != 1 or ref.shape != run.shape or ref.size < 2 \
            or not (np.isfinite(ref).all() and np.isfinite(run).all()) \
            or (ref <= 0).any() or (run <= 0).any():
        raise ValueError(f"a paired ratio needs two equal-length lists of at least 2 positive "
                         f"seconds, got {ref.size} and {run.size}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    from scipy import stats                   # a second's import, for the tools that ask
    logs = np.log(ref / run)
    if not logs.any():                        # every round tied: nothing to test
        return PairedRatio(1.0, 1.0, 1.0, 1.0, confidence)
    interval = stats.bootstrap((logs,), np.median, confidence_level=confidence,
                               method="percentile", rng=np.random.default_rng(seed))
    p = float(stats.wilcoxon(logs, alternative="less").pvalue)
    low, high = interval.confidence_interval
    return PairedRatio(math.exp(float(np.median(logs))), math.exp(low), math.exp(high), p,
                       confidence)
