"""The one training loop, for drafters (paper section 4.2; docs/method.md#training) and the shipped
target: :class:`Trainer` knows nothing about either. AdamW on the one schedule :func:`cosine_lr`,
gradient clipping, optional autocast, callbacks, a time budget, checkpoints and resume, Ctrl-C."""
from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from .. import outputs
from ..files import atomic_path
from ..validate import check_float, check_int, check_seed


@dataclass
class TrainConfig:
    """AdamW and its schedule. The defaults are the drafter recipe (docs/method.md#training): 4%
    warm-up, cosine to zero, no weight decay, gradient norm clipped at 1; the shipped target's is
    :func:`dflash_lite.zoo.train_config`."""
    steps: int = 1000
    lr: float = 6e-4
    warmup_fraction: float = 0.04        # warm-up as a share of training (of the time budget)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    log_every: int = 10
    checkpoint_every: int = 0            # 0: only at the end
    seed: int = 0
    time_budget_s: float | None = None   # stop (with the schedule finished) after this much time
    warmup_steps: int | None = None      # warm-up in steps; replaces warmup_fraction when set
    min_lr_ratio: float = 0.0            # the cosine ends at min_lr_ratio * lr
    betas: tuple[float, float] = (0.9, 0.999)
    decay_matrices_only: bool = False    # weight decay on ndim >= 2 only (not norms, biases)
    autocast_dtype: torch.dtype | None = None   # loss_fn under autocast in it (fp32 master weights)

    def __post_init__(self):
        """One line for a field the schedule cannot run with, before any training."""
        for name in ("steps", "log_every"):
            check_int(name, getattr(self, name))
        check_int("checkpoint_every", self.checkpoint_every, 0)
        check_seed(self.seed)
        for name, low_open in (("lr", True), ("grad_clip", True), ("weight_decay", False)):
            check_float(name, getattr(self, name), low_open=low_open)
        check_float("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction!r}")
        if self.warmup_steps is not None:
            check_int("warmup_steps", self.warmup_steps, 0)
        if self.time_budget_s is not None:
            check_float("time_budget_s", self.time_budget_s, low_open=True)


def cosine_lr(progress: float, step: int, config: TrainConfig) -> float:
    """Linear warm-up to ``config.lr``, then cosine decay to ``config.min_lr_ratio * config.lr``.

    ``progress`` (0 -> 1 over the steps or the time budget) is never taken behind
    ``(step + 1) / steps``. ``warmup_fraction``: the first share of progress ramps up, the cosine
    runs over the rest. ``warmup_steps`` replaces it: the first steps (counted in steps even under
    a time budget, which cannot know where they end) replace the head of a cosine over all of it."""
    progress = max(progress, (step + 1) / config.steps)
    if config.warmup_steps is not None:
        if step < config.warmup_steps:
            return config.lr * (step + 1) / config.warmup_steps
        rest = progress
    elif progress < config.warmup_fraction:
        return config.lr * progress / config.warmup_fraction
    else:
        rest = (progress - config.warmup_fraction) / (1 - config.warmup_fraction)
    floor = config.min_lr_ratio
    return config.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, rest))))


CHECKPOINT = "trainer_state.safetensors"   # tensors; everything else as JSON in its header metadata


def read_checkpoint(path: str | Path) -> tuple[dict, dict]:
    """(metadata, tensors) of a trainer checkpoint. Only safetensors and JSON are read, so a
    checkpoint can hold data but never code; a damaged file is one ValueError line."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata()["trainer"])
        return meta, load_file(str(path))
    except Exception as e:                          # safetensors and json raise their own types
        raise ValueError(f"{path}: not a readable trainer checkpoint ({type(e).__name__}); "
                         f"start again with --overwrite") from None


def check_checkpoint_meta(meta: dict, tensors: dict, path: str | Path, steps: int) -> None:
    """The JSON part of a checkpoint has the types :meth:`Trainer.resume` reads, and its step lies
    within this run's schedule of ``steps``; one ValueError line otherwise."""
    expected = {"step": int, "history": list, "run_config": dict, "param_groups": list,
                "optimizer_scalars": dict}
    for key, kind in expected.items():
        value = meta.get(key) if isinstance(meta, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"{path}: damaged trainer checkpoint "
                             f"({key!r} should be a {kind.__name__}, "
                             f"got {json.dumps(value)[:40]}); start again with --overwrite")
    if not all(isinstance(g, dict) for g in meta["param_groups"]) or "rng.torch" not in tensors:
        raise ValueError(f"{path}: damaged trainer checkpoint (param_groups or rng state); start "
                         "again with --overwrite")
    if not 0 <= meta["step"] <= steps:
        raise ValueError(f"{path}: the checkpoint is at step {meta['step']}, "
                         f"outside this run's schedule of {steps} steps; "
                         f"resume with --steps >= {meta['step']}, or start again with --overwrite")


def check_same_run(saved: dict, wanted: dict, where: str | Path) -> None:
    """Refuse, in one line naming the first difference, to resume a run with other settings."""
    wanted = json.loads(json.dumps(wanted))         # compare as stored: tuples are lists in JSON
    for key in sorted(set(saved) | set(wanted)):
        if saved.get(key) != wanted.get(key):
            raise ValueError(f"{where} holds a run with {key}={saved.get(key)!r}, but this run has "
                             f"{key}={wanted.get(key)!r}; resume with the same settings, "
                             f"or start again with --overwrite")


@dataclass
class Trainer:
    """``loss_fn(model, batch) -> (loss, metrics)`` over ``batches()``, which makes a fresh
    iterator: a finite one is one epoch (a new one is made when it ends), an infinite one (random
    windows) simply never ends. ``metrics`` may hold anything (the progress bar: :func:`postfix`).

    With a ``checkpoint_dir`` it saves model, optimizer, step, history and RNG state there
    (safetensors + JSON), resumes from it when ``run_config`` matches the saved one, and on
    Ctrl-C finishes the current step, saves, and raises :class:`TrainingInterrupted`."""
    model: torch.nn.Module
    loss_fn: Callable
    batches: Callable[[], Iterator]
    config: TrainConfig
    callbacks: list[Callable] = field(default_factory=list)  # on_batch_end(trainer, step, metrics)
    checkpoint_dir: Path | None = None
    step: int = 0
    history: list[dict] = field(default_factory=list)
    run_config: dict = field(default_factory=dict)               # what a resume must match

    def __post_init__(self):
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.config.decay_matrices_only:
            groups = [{"params": [p for p in params if p.ndim >= 2],
                       "weight_decay": self.config.weight_decay},
                      {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
            params = [g for g in groups if g["params"]]
        self.optimizer = torch.optim.AdamW(params, lr=self.config.lr, betas=self.config.betas,
                                           weight_decay=self.config.weight_decay)
        if self.checkpoint_dir is not None and (Path(self.checkpoint_dir) / CHECKPOINT).is_file():
            self.resume()

    def run(self):
        interrupted = []
        stops = (signal.SIGINT, signal.SIGTERM)     # SIGTERM (timeout, Docker, Slurm) is a Ctrl-C
        previous = {s: signal.getsignal(s) or signal.SIG_DFL for s in stops}

        # finish the step, then save; a second signal stops at once
        def on_interrupt(signum, frame):
            interrupted.append(signum)
            for s in stops:
                signal.signal(s, previous[s])

        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread:
            for s in stops:
                signal.signal(s, on_interrupt)
        try:
            self._loop(interrupted)
        finally:
            if main_thread:
                for s in stops:
                    signal.signal(s, previous[s])
        saved = bool(self.checkpoint_dir and self.step > 0)
        if saved:
            self.save()
        if interrupted:
            said = (f"checkpoint saved in {self.checkpoint_dir}" if saved else "nothing saved yet"
                    if self.checkpoint_dir else "this run keeps no checkpoint, nothing saved")
            raise TrainingInterrupted(f"stopped at step {self.step}; {said}", saved, interrupted[0])
        return self.history

    def _loop(self, interrupted: list):
        c = self.config
        bar = tqdm(total=c.steps, initial=self.step, desc="train", mininterval=5, disable=None)
        start = time.time()
        data = self.batches()
        fresh = True                              # no batch yet from this pass over the data
        autocast = (contextlib.nullcontext() if c.autocast_dtype in (None, torch.float32) else
                    torch.autocast(next(self.model.parameters()).device.type, c.autocast_dtype))
        while self.step < c.steps and not interrupted:
            # progress on steps, or on wall time when there is a budget (whichever is further)
            progress = self.step / c.steps
            if c.time_budget_s:
                progress = max(progress, (time.time() - start) / c.time_budget_s)
                if progress >= 1.0:
                    break
            try:
                batch = next(data)
            except StopIteration:                              # a new epoch: anchors are resampled
                if fresh:
                    raise ValueError("the training data gives no batch (no response is long enough "
                                     "for a block); regenerate with more prompts or "
                                     "--max-new-tokens") from None
                data = self.batches()
                fresh = True
                continue
            fresh = False
            for group in self.optimizer.param_groups:
                group["lr"] = cosine_lr(progress, self.step, c)
            with autocast:
                loss, metrics = self.loss_fn(self.model, batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                                        c.grad_clip))
            self.optimizer.step()
            self.step += 1
            metrics.update(step=self.step, lr=self.optimizer.param_groups[0]["lr"],
                           elapsed_s=time.time() - start)
            if self.step % c.log_every == 0 or self.step == c.steps or (
                    c.time_budget_s and metrics["elapsed_s"] >= c.time_budget_s):
                self.history.append(metrics)
                bar.set_postfix(postfix(metrics))
            for callback in self.callbacks:
                callback(self, self.step, metrics)
            bar.update(1)
            if self.checkpoint_dir and c.checkpoint_every and self.step % c.checkpoint_every == 0:
                self.save()
        bar.close()

    def save(self):
        """One safetensors file, written atomically: ``model.*``, ``optimizer.<param>.<key>`` and
        ``rng.torch`` tensors; step, history, run config and the optimizer's other state as JSON."""
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        optimizer = self.optimizer.state_dict()
        scalars = {}
        for index, values in optimizer["state"].items():
            for key, value in values.items():
                if torch.is_tensor(value):
                    tensors[f"optimizer.{index}.{key}"] = value
                else:
                    scalars.setdefault(str(index), {})[key] = value
        tensors["rng.torch"] = torch.get_rng_state()
        meta = {"step": self.step, "history": self.history, "run_config": self.run_config,
                "param_groups": optimizer["param_groups"], "optimizer_scalars": scalars}
        with atomic_path(Path(self.checkpoint_dir) / CHECKPOINT) as tmp:
            save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()},
                      str(tmp), metadata={"trainer": json.dumps(meta)})

    def resume(self):
        path = Path(self.checkpoint_dir) / CHECKPOINT
        meta, tensors = read_checkpoint(path)
        check_checkpoint_meta(meta, tensors, path, self.config.steps)
        check_same_run(meta.get("run_config", {}), self.run_config, path.parent)
        model = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
        try:
            self.model.load_state_dict(model)
        except RuntimeError:
            raise ValueError(f"{path}: its weights do not fit this model; start again with "
                             "--overwrite") from None
        state = {}
        for name, value in tensors.items():
            if name.startswith("optimizer."):
                _, index, key = name.split(".", 2)
                state.setdefault(int(index), {})[key] = value
        for index, values in meta["optimizer_scalars"].items():
            state.setdefault(int(index), {}).update(values)
        groups = [{**g, "betas": tuple(g["betas"])} if "betas" in g else g
                  for g in meta["param_groups"]]
        self.optimizer.load_state_dict({"state": state, "param_groups": groups})
        self.step = meta["step"]
        self.history = meta["history"]
        torch.set_rng_state(tensors["rng.torch"])


def postfix(metrics: dict) -> dict[str, str]:
    """The progress bar's summary of one step: the loss and the first position's accuracy, of
    those the metrics hold (a language model's loss has no per-position accuracy)."""
    shown = {}
    if isinstance(metrics.get("loss"), (int, float)):
        shown["loss"] = f"{metrics['loss']:.3f}"
    if accuracy := metrics.get("accuracy_per_position"):
        shown["acc1"] = f"{accuracy[0]:.2f}"
    return shown


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during :meth:`Trainer.run`: the message says at which step and whether a
    checkpoint was saved (``saved``), so the CLI can say how to resume."""

    def __init__(self, message: str, saved: bool, signum: int = signal.SIGINT):
        super().__init__(message)
        self.saved, self.signum = saved, signum  # SIGINT or SIGTERM: the CLI exits 130 or 143


def prepare_out(out, overwrite: bool = False, run_config: dict | None = None) -> Path:
    """``out`` checked and locked before any work, nothing in it touched: a new or empty directory;
    a resumable run (``checkpoint/``) with the same ``run_config``; or, with ``overwrite``, a
    directory this project wrote, which the finished run replaces (:mod:`dflash_lite.outputs`)."""
    out = outputs.check_out(out, overwrite)
    outputs.lock(out)
    if outputs.holds_nothing(out) or overwrite:
        return out
    checkpoint = out / "checkpoint" / CHECKPOINT
    if run_config is not None and checkpoint.is_file():
        check_same_run(read_checkpoint(checkpoint)[0].get("run_config", {}), run_config, out)
        return out
    old = (" (its checkpoint/trainer.pt is an old-format checkpoint, which is never loaded)"
           if (out / "checkpoint" / "trainer.pt").exists() else "")
    run = "" if run_config is None else " and not a resumable run of this config"
    raise ValueError(f"out {str(out)!r} is not empty{run}{old}; "
                     f"pass --overwrite to replace it as a whole, or choose another directory")


def same_run(checkpoint: Path, run_config: dict) -> bool:
    """``checkpoint`` is a readable trainer checkpoint of a run with ``run_config``."""
    with contextlib.suppress(ValueError):
        check_same_run(read_checkpoint(checkpoint)[0].get("run_config", {}), run_config, checkpoint)
        return True
    return False
