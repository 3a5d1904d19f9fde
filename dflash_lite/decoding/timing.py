"""Timing, in one place (docs/method.md#measuring): the interleaved timer every comparison uses,
and the per-phase observer of the decode loop. On CUDA the device is synchronised at every edge,
so a timed span holds the kernels it launched."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Hashable

import torch


def sync(device: str | torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(runs: dict[Hashable, Callable[[], object]], repeats: int = 3, warmup: int = 1,
                device: str | torch.device = "cpu") -> dict[Hashable, list[tuple[float, object]]]:
    """The one interleaved timer: call every run ``warmup`` times (untimed), then ``repeats`` rounds
    that visit them in turn, each round starting one run further along, so that drift in machine
    load hits all of them alike. ``{name: [(seconds, result), ...]}``, one entry per round."""
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    timed = {name: [] for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            sync(device)
            t0 = time.perf_counter()
            result = runs[name]()
            sync(device)
            timed[name].append((time.perf_counter() - t0, result))
    return timed


class PhaseTimer:
    """An observer for :func:`dflash_lite.decoding.decode.steps`: wall seconds per phase (prefill,
    draft, verify, accept), summed over the steps."""

    def __init__(self, device: str | torch.device):
        self.device = device
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        sync(self.device)
        t0 = time.perf_counter()
        yield
        sync(self.device)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
