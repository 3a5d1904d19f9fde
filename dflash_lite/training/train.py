"""Training a DFlash drafter (paper section 4.2; docs/method.md#training): :func:`train_drafter`
regenerates data with the target (:mod:`~dflash_lite.training.data`), trains on the loss of
:mod:`~dflash_lite.training.loss` in the one :class:`~dflash_lite.training.trainer.Trainer`, probes
tau (:func:`tau_probe`) and saves the drafter; :func:`train_draft_model` trains a draft model."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from transformers import Qwen3Config, Qwen3ForCausalLM

from .. import corpus, outputs, validate
from ..decoding.baselines import EagleProposer
from ..decoding.checkpoints import save_drafter
from ..decoding.decode import DFlashProposer, generate
from ..decoding.drafter import Conditioning, DrafterConfig, Drafting
from ..decoding.target import (_resolve as resolve_target, load_pretrained, mask_token_id,
                               parse_dtype, read_config, stop_token_ids)
from ..decoding.variants import make_drafter
from ..files import atomic_write_text
from ..prompts import apply_chat_template, encode_all, training_prompts, user_prompts
from .data import IGNORE, RegeneratedData, epoch_batches, lm_batches, regenerate
from .loss import (FeatureCache, drafter_loss, labelled_logits,  # noqa: F401 (public)
                   loss_gamma, position_accuracy, position_weights)
from .trainer import (CHECKPOINT, TrainConfig, Trainer, prepare_out,  # noqa: F401 (public)
                      read_checkpoint, same_run)


def check_sizes(c: DrafterTrainConfig) -> None:
    """The run's sizes, from the target's ``config.json`` before anything loads (one ``ValueError``
    line): ``max_new_tokens`` inside the target's context, at most one anchor per response token,
    and the drafter's training state and one batch within the device's free memory."""
    raw = read_config(resolve_target(c.target))
    context = raw.get("max_position_embeddings")
    if isinstance(context, int) and c.max_new_tokens >= context:
        raise ValueError(f"max_new_tokens ({c.max_new_tokens}) does not fit the target's context "
                         f"of {context} tokens (a prompt needs room too); lower --max-new-tokens")
    if c.num_anchors > c.max_new_tokens:
        raise ValueError(f"num_anchors ({c.num_anchors}) is more than the {c.max_new_tokens} "
                         f"tokens of a response (max_new_tokens): anchors sit on response tokens; "
                         f"lower --num-anchors")
    shape = {k: raw.get(k) for k in validate.SHAPE_KEYS + ("head_dim",)}
    parameters = validate.check_model_shape({**shape, "num_layers": c.layers},
                                            embeddings=int(c.drafting is Drafting.DRAFT_MODEL))
    validate.check_memory(f"a drafter of {c.layers} layers", parameters * 16, c.device,
                          f"{parameters / 1e9:.2f}B parameters: fp32 weights, gradients and "
                          f"AdamW state")
    width = context if isinstance(context, int) else c.max_new_tokens * 2
    blocks = c.num_anchors * c.block_size
    per_block_token = ((width + blocks) + 3 * 8 + 3 * 4 * shape["vocab_size"]
                       + 4 * shape["hidden_size"] * (c.num_taps + 2))
    validate.check_memory(f"one batch ({c.batch_size} x {c.num_anchors} anchors x {c.block_size} "
                          f"tokens)", c.batch_size * blocks * per_block_token, c.device,
                          "block attention mask, ids, labels, logits and features")


# --------------------------------------------------------------------------- the run
def tau_probe(target, tokenizer, num_prompts: int = 4, max_new_tokens: int = 64,
              prompts: dict[str, list[str]] | None = None, chat_template: bool = False):
    """Returns ``measure(drafter, block_size=None) -> {"math": tau, "code": tau, "all": tau}`` on
    ``num_prompts`` prompts per domain of the ``probe`` split, or on ``prompts`` (domain -> texts)
    when given, through the tokenizer's chat template with ``chat_template``."""
    stops = stop_token_ids(target, tokenizer)       # past the answer's end the target writes noise
    prompts = prompts or {domain: corpus.prompts("probe", domain, num_prompts)
                          for domain in ("math", "code")}
    ids = {domain: [x.to(target.device) for x in encode_all(tokenizer, texts, chat_template)]
           for domain, texts in prompts.items()}

    def measure(drafter, block_size: int | None = None) -> dict:
        was_training = drafter.training
        drafter.eval()
        proposer = EagleProposer if drafter.autoregressive else DFlashProposer
        lengths = {domain: [a for x in xs for a in generate(
            target, proposer(drafter, target, block_size), x, max_new_tokens,
            stop_token_ids=stops).acceptance_lengths] for domain, xs in ids.items()}
        drafter.train(was_training)
        every = [a for v in lengths.values() for a in v]
        return {**{d: sum(v) / len(v) for d, v in lengths.items()}, "all": sum(every) / len(every)}

    return measure


@dataclass
class DrafterTrainConfig:
    """Every choice of a training run (``python -m dflash_lite train`` builds one from its flags).

    ``drafting``: DFlash (``BLOCK``), the EAGLE-style baseline (``AUTOREGRESSIVE``) or a small
    causal LM (:func:`train_draft_model`). Training prompts are the corpus's (``num_math``,
    ``num_code``) or your own (``prompts``: a JSONL file; ``dataset``: a name in
    :data:`~dflash_lite.prompts.TRAIN_DATASETS`; the first ``num_prompts``), the last
    ``probe_prompts`` held out for the tau probe. ``dtype`` is the frozen target's; below fp32 the
    drafter (fp32 weights) runs under autocast in it. ``eval_every``: steps between tau probes
    (None: a tenth of the run; 0: never). ``cache_features``: see :class:`FeatureCache`.
    ``regenerate_batch_size``: prompts the target answers at once."""
    target: str = "tiny"
    out: str = "drafter"
    overwrite: bool = False
    drafting: Drafting = Drafting.BLOCK
    conditioning: Conditioning = Conditioning.KV_INJECTION
    layers: int = 2
    block_size: int = 16
    num_taps: int = 5
    fixed_anchors: bool = False
    steps: int = 1000
    batch_size: int = 8
    num_anchors: int = 16
    lr: float = 6e-4
    seed: int = 0
    num_math: int = 2000
    num_code: int = 400
    prompts: str | None = None
    dataset: str | None = None
    num_prompts: int | None = None
    probe_prompts: int = 4
    max_new_tokens: int = 160
    regenerate_batch_size: int = 16
    eval_every: int | None = None
    time_budget_s: float | None = None
    device: str = "cpu"
    dtype: str = "float32"
    cache_dir: str | None = ".cache/dflash_lite"
    chat_template: bool = True
    cache_features: bool = True
    command: str | None = None

    def check(self) -> DrafterTrainConfig:
        """Every option checked (one ValueError line naming it and its range) before anything is
        loaded; returns self."""
        for name in ("steps", "batch_size", "max_new_tokens", "layers", "num_anchors", "num_taps",
                     "probe_prompts", "regenerate_batch_size"):
            validate.check_int(name, getattr(self, name))
        for name in ("num_math", "num_code"):
            validate.check_int(name, getattr(self, name), 0)
        if self.num_math + self.num_code == 0:
            raise ValueError("num_math and num_code are both 0: there is nothing to train on")
        validate.check_seed(self.seed)
        validate.check_float("lr", self.lr, 0.0, low_open=True)
        self.device = validate.check_device(self.device)
        if self.time_budget_s is not None:
            validate.check_float("time_budget_s", self.time_budget_s, 0.0, low_open=True)
        if self.cache_dir is not None:             # the one output guard: not the package, ...
            outputs.guard_output_dir(self.cache_dir, "cache_dir")
        validate.check_int("block_size", self.block_size, 2, 64)
        for name, low in (("eval_every", 0), ("num_prompts", 1)):         # None: the default
            if getattr(self, name) is not None:
                validate.check_int(name, getattr(self, name), low)
        self.drafting = validate.check_choice("drafting", self.drafting, Drafting)
        self.conditioning = validate.check_choice("conditioning", self.conditioning, Conditioning)
        if self.drafting is Drafting.DRAFT_MODEL and (self.prompts or self.dataset):
            raise ValueError("--prompts/--dataset train DFlash drafters; the draft model uses the "
                             "built-in prompts")
        parse_dtype(self.dtype)
        return self

    def run_config(self) -> dict:
        """The settings a resumed run must share with the checkpoint it resumes."""
        keys = ("target", "drafting", "conditioning", "layers", "block_size", "num_taps",
                "fixed_anchors", "batch_size", "num_anchors", "lr", "seed", "num_math", "num_code",
                "max_new_tokens", "prompts", "dataset", "chat_template")
        return {**{k: getattr(self, k) for k in keys}, "target": str(self.target),
                "drafting": self.drafting.value, "conditioning": self.conditioning.value,
                "prompts": str(self.prompts) if self.prompts else None}


class TauCurve:
    """A trainer callback: tau on the probe prompts every ``every`` steps, printed and kept in
    ``points``; the probe's own seconds are taken out of the training clock (``seconds``)."""

    def __init__(self, measure: Callable, drafter, every: int):
        self.measure, self.drafter, self.every = measure, drafter, every
        self.points: list[dict] = []
        self.seconds = 0.0

    def add(self, step: int, elapsed_s: float) -> dict:
        tau = self.measure(self.drafter)
        self.points.append({"step": step, "elapsed_s": round(elapsed_s, 1), "tau": tau["all"],
                            **{f"tau_{d}": v for d, v in tau.items() if d != "all"}})
        return tau

    def __call__(self, trainer, step: int, metrics: dict) -> None:
        if step % self.every:
            return
        started = time.time()
        tau = self.add(step, metrics["elapsed_s"] - self.seconds)
        self.seconds += time.time() - started
        per_domain = " ".join(f"{d} {v:.2f}" for d, v in tau.items() if d != "all")
        print(f"[train] step {step}: tau {per_domain} after "
              f"{self.points[-1]['elapsed_s'] / 60:.1f} min of training", flush=True)

    def final(self, step: int, train_s: float) -> dict:
        """The last point, on the final weights (replacing one measured at the same step)."""
        if self.points and self.points[-1]["step"] == step:
            self.points.pop()
        return self.add(step, train_s)

    def minutes_to(self, domain: str, tau: float = 5) -> float | None:
        first = next((p for p in self.points if p[f"tau_{domain}"] >= tau), None)
        return round(first["elapsed_s"] / 60, 1) if first else None


class Progress:
    """A trainer callback for a run logged to a file: every ``every`` steps, one line with the loss,
    this process's speed and the ETA of the planned steps (a resumed run counts from its resume)."""

    def __init__(self, steps: int, every: int):
        self.steps, self.every = steps, every
        self.first = None

    def __call__(self, trainer, step: int, metrics: dict) -> None:
        if self.first is None:                  # the clock starts after this process's first step
            self.first = (step, time.time())
        if (step % self.every and step != self.steps) or step == self.first[0]:
            return
        rate = (step - self.first[0]) / (time.time() - self.first[1])
        left = (self.steps - step) / rate
        print(f"[train] step {step}/{self.steps}: loss {metrics['loss']:.3f}, "
              f"{rate * 60:.1f} steps a minute, ETA {left / 60:.1f} min", flush=True)


def training_texts(c: DrafterTrainConfig, tokenizer,
                   own: list[str] | None) -> tuple[list[str], dict | None]:
    """The prompts to regenerate, and the probe's (None: the corpus's ``probe`` split): your own,
    the last ``probe_prompts`` held out, else the built-in train split; through the chat template
    with ``c.chat_template`` (the probe's prompts are rendered by the probe itself)."""
    if own is None:
        texts, probe = training_prompts(c.num_math, c.num_code, c.seed), None
    elif len(own) <= c.probe_prompts:
        raise ValueError(f"{len(own)} prompts: need more than the {c.probe_prompts} held out for "
                         "the tau probe")
    else:
        texts, probe = own[:-c.probe_prompts], {"held_out": own[-c.probe_prompts:]}
    return (apply_chat_template(tokenizer, texts) if c.chat_template else texts), probe


def drafter_trainer(c: DrafterTrainConfig, drafter, model, tokenizer, data: RegeneratedData,
                    work: Path, callbacks: list[Callable]) -> Trainer:
    """The one :class:`.trainer.Trainer`, fresh anchors each epoch, checkpointing into ``work``."""
    weights = position_weights(c.block_size)
    generator = torch.Generator().manual_seed(c.seed)
    causal = c.drafting is Drafting.AUTOREGRESSIVE
    features = (FeatureCache(model, drafter.config.target_layer_ids, data)
                if c.cache_features else None)
    tokens = SimpleNamespace(mask_token_id=drafter.config.mask_token_id,
                             pad_token_id=tokenizer.pad_token_id)
    return Trainer(drafter, lambda m, b: drafter_loss(m, model, b, weights, features),
                   lambda: epoch_batches(data, c.batch_size, c.block_size, c.num_anchors, tokens,
                                         generator, causal, c.fixed_anchors),
                   TrainConfig(steps=c.steps, lr=c.lr, seed=c.seed,
                               checkpoint_every=max(50, c.steps // 10),
                               time_budget_s=c.time_budget_s, autocast_dtype=parse_dtype(c.dtype)),
                   callbacks, checkpoint_dir=work / "checkpoint", run_config=c.run_config())


def run_record(c: DrafterTrainConfig, config: DrafterConfig, tokenizer, steps_done: int,
               seconds: dict) -> dict:
    """What ``training_curve.json`` and the drafter's config record of the run."""
    return {"command": c.command, "target": c.target, "drafting": c.drafting.value,
            "layers": c.layers, "conditioning": c.conditioning.value,
            "anchors": "fixed" if c.fixed_anchors else "random", "block_size": c.block_size,
            "target_layer_ids": config.target_layer_ids, "max_new_tokens": c.max_new_tokens,
            "num_math": c.num_math, "num_code": c.num_code, "steps": steps_done,
            "steps_planned": c.steps, "prompts": c.prompts, "dataset": c.dataset,
            "chat_template": c.chat_template and bool(getattr(tokenizer, "chat_template", None)),
            "dtype": str(parse_dtype(c.dtype)).removeprefix("torch."),
            "time_budget_s": c.time_budget_s, "batch_size": c.batch_size,
            "num_anchors": c.num_anchors, "lr": c.lr, **seconds, "seed": c.seed, "device": c.device,
            "threads": torch.get_num_threads(), "gamma": loss_gamma(c.block_size)}


def train_drafter(config: DrafterTrainConfig | None = None, callbacks: Sequence[Callable] = (),
                  **options) -> Path:
    """Train a drafter on target-regenerated data, save it with its curve, and return where.
    ``config`` (else a :class:`DrafterTrainConfig` of ``options``) and ``out``
    (:func:`prepare_out`) are checked before anything loads; into an ``out`` holding a checkpoint
    of the same settings the run resumes. ``callbacks``: the trainer's extra ones."""
    c = (config or DrafterTrainConfig(**options)).check()
    check_sizes(c)
    if c.drafting is Drafting.DRAFT_MODEL:
        return train_draft_model(c)
    # bad input first
    own = user_prompts(c.prompts, c.dataset, c.num_prompts) if (c.prompts or c.dataset) else None
    out = prepare_out(c.out, c.overwrite, c.run_config())
    torch.manual_seed(c.seed)
    model, tokenizer = load_pretrained(c.target, device=c.device, dtype=parse_dtype(c.dtype))
    model.requires_grad_(False)
    texts, probe = training_texts(c, tokenizer, own)
    t0 = time.time()
    data = regenerate(model, tokenizer, texts, c.max_new_tokens, c.regenerate_batch_size,
                      cache_dir=c.cache_dir)
    regen_s = time.time() - t0
    config = DrafterConfig.from_target(model.config, mask_token_id(tokenizer), num_layers=c.layers,
                                       block_size=c.block_size, num_taps=c.num_taps,
                                       drafting=c.drafting, conditioning=c.conditioning)
    drafter = make_drafter(config).to(c.device).train()
    templated = c.chat_template and bool(getattr(tokenizer, "chat_template", None))
    taus = TauCurve(tau_probe(model, tokenizer, prompts=probe, chat_template=templated), drafter,
                    c.eval_every or max(1, c.steps // 10))
    work = outputs.begin(out, c.overwrite and not outputs.holds_nothing(out),
                         "DFlash drafter training run", resumable=lambda stage: same_run(
                             stage / "checkpoint" / CHECKPOINT, c.run_config()))
    progress = Progress(c.steps, max(1, min(50, c.steps // 20)))
    trainer = drafter_trainer(c, drafter, model, tokenizer, data, work,
                              [progress, *([taus] if c.eval_every != 0 else []), *callbacks])
    t1 = time.time()
    history = trainer.run()
    train_s = time.time() - t1 - taus.seconds
    seconds = {"sequences": len(data), "regenerate_seconds": round(regen_s, 1),
               "train_seconds": round(train_s, 1), "tau_probe_seconds": round(taus.seconds, 1)}
    meta = {"training": run_record(c, config, tokenizer, trainer.step, seconds)}
    final = taus.final(trainer.step, train_s)
    meta["training"].update(final_tau_probe=final,
                            minutes_to_tau_5={d: taus.minutes_to(d) for d in final if d != "all"})
    # loaded back in fp32, exactly
    save_drafter(drafter.eval(), work, dtype=torch.bfloat16, extra=meta)
    atomic_write_text(work / "training_curve.json",
                      json.dumps({**meta, "curve": history, "tau_curve": taus.points}, indent=1))
    return outputs.commit(work, out)  # with --overwrite: the old run is deleted only now


# ----------------------------------------------------------------------------- classic draft model
def draft_model_config(target_config, num_layers: int = 2) -> Qwen3Config:
    """A small Qwen3 with the target's width and vocabulary and ``num_layers`` layers."""
    return Qwen3Config(**{**target_config.to_dict(), "num_hidden_layers": num_layers,
                          "layer_types": ["full_attention"] * num_layers,
                          "architectures": ["Qwen3ForCausalLM"]})


def lm_loss(model, batch) -> tuple[torch.Tensor, dict]:
    ids, labels = batch
    device = next(model.parameters()).device
    logits = model(ids.to(device)).logits[:, :-1]                         # (N, T-1, V)
    target = labels[:, 1:].to(device)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=IGNORE)
    with torch.no_grad():
        valid = target != IGNORE
        acc = ((logits.argmax(-1) == target) & valid).sum().item() / max(1, valid.sum().item())
    return loss, {"loss": loss.item(), "accuracy_per_position": [acc]}


def train_draft_model(c: DrafterTrainConfig) -> Path:
    """Classic speculative decoding's drafter: a small causal LM (``layers`` deep) on the same
    regenerated data, saved as a Hugging Face directory. Of ``c`` it uses the target, the
    built-in prompts and the schedule; with no checkpoint, ``out`` is new, empty or overwritten."""
    out = prepare_out(c.out, c.overwrite)
    torch.manual_seed(c.seed)
    # the small LM trains in fp32
    model, tokenizer = load_pretrained(c.target, device=c.device, dtype=c.dtype)
    t0 = time.time()
    data = regenerate(model, tokenizer, training_prompts(c.num_math, c.num_code, c.seed),
                      c.max_new_tokens, cache_dir=c.cache_dir)
    regen_s = time.time() - t0
    small = Qwen3ForCausalLM(draft_model_config(model.config, c.layers)).to(c.device).train()
    small.model.embed_tokens.weight.data.copy_(model.model.embed_tokens.weight.data)
    generator = torch.Generator().manual_seed(c.seed)
    trainer = Trainer(small, lm_loss,
                      lambda: lm_batches(data, c.batch_size, tokenizer.pad_token_id, generator),
                      TrainConfig(steps=c.steps, lr=c.lr, seed=c.seed,
                                  time_budget_s=c.time_budget_s))
    t1 = time.time()
    history = trainer.run()
    meta = {"command": c.command, "target": c.target, "layers": c.layers, "steps": trainer.step,
            "steps_planned": c.steps, "batch_size": c.batch_size, "lr": c.lr,
            "sequences": len(data), "regenerate_seconds": round(regen_s, 1),
            "train_seconds": round(time.time() - t1, 1), "device": c.device,
            "threads": torch.get_num_threads(), "time_budget_s": c.time_budget_s}
    work = outputs.begin(out, c.overwrite and not outputs.holds_nothing(out),
                         "draft model training run")
    small.eval().to(torch.bfloat16).save_pretrained(work)  # loaded back in fp32, exactly
    tokenizer.save_pretrained(work)
    atomic_write_text(work / "training_curve.json",
                      json.dumps({"training": meta, "curve": history}, indent=1))
    return outputs.commit(work, out)
