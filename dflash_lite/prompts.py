"""Prompts, and how they become token ids: JSONL files, public data sets, the built-in splits of
:mod:`dflash_lite.corpus`, and the one :func:`encode` that the engine, the demo, the benchmark and
training all use (docs/method.md#measuring, #training).

**One chat setting.** With ``chat_template`` a prompt becomes a user turn of the tokenizer's chat
template when it has one (how chat models are served and their drafters trained), with thinking
off (``enable_thinking=False``: the mode the published Qwen3 DFlash drafters are released for;
templates without that switch ignore it). The shipped target has no template: its prompts are
tokenized as they are.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from . import corpus, validate


def apply_chat_template(tokenizer, prompts: list[str]) -> list[str]:
    """Each prompt as a user turn of the tokenizer's chat template, ready for the assistant's answer,
    thinking off; unchanged without a template."""
    if not getattr(tokenizer, "chat_template", None):
        return list(prompts)
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                          add_generation_prompt=True, enable_thinking=False) for p in prompts]


def encode(tokenizer, text: str, chat_template: bool = True) -> torch.Tensor:
    """``text`` as token ids (1, T): through the chat template (thinking off) when ``chat_template``
    and the tokenizer has one, else as it is; no special tokens are added either way (a template
    writes its own)."""
    if chat_template:
        text = apply_chat_template(tokenizer, [text])[0]
    return tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids


def load_prompts(path: str, limit: int | None = None) -> list[str]:
    """Prompts from a JSONL file with a ``prompt`` field, or ``turns`` (the first turn is used)."""
    lines = validate.text_file_lines(path, "prompts file")       # a BOM is accepted; a FIFO is named
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}:{number}: not a JSON line") from None
        text = row.get("prompt") if isinstance(row, dict) else None
        turns = row.get("turns") if isinstance(row, dict) else None
        if text is None and turns is not None:
            if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
                raise ValueError(f"{path}:{number}: 'turns' must be a list of strings, got {json.dumps(turns)[:40]}")
            text = turns[0]
        if not isinstance(text, str) or not text:
            raise ValueError(f"{path}:{number}: no 'prompt' or 'turns' field")
        validate.check_prompt(text, f"{path}:{number}: the prompt")
        prompts.append(text)
        if limit and len(prompts) == limit:
            break
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


def builtin_prompts(domain: str, n: int) -> list[str]:
    """Held-out in-domain prompts: the ``held_out`` split of :func:`dflash_lite.corpus.prompts`
    (generated math problems from unseen seeds, stdlib function headers from held-out files)."""
    return corpus.prompts("held_out", domain, n)


# name -> (hub id, config, split, field): the public sets the DFlash paper reports on
DATASETS = {
    "gsm8k": ("openai/gsm8k", "main", "test", "question"),
    "humaneval": ("openai/openai_humaneval", None, "test", "prompt"),
    "mbpp": ("google-research-datasets/mbpp", "full", "test", "text"),
    "math500": ("HuggingFaceH4/MATH-500", None, "test", "problem"),
    "mt-bench": ("HuggingFaceH4/mt_bench_prompts", None, "train", "prompt"),
}


def dataset_prompts(name: str, limit: int, table: dict | None = None) -> list[str]:
    """The first ``limit`` prompts of a public benchmark (or of a set in ``table``, same shape as
    ``DATASETS``), fetched with ``datasets`` (needs the network or a warm ``datasets`` cache).
    Any failure is one ValueError line that points to ``--prompts``."""
    table = DATASETS if table is None else table
    if name not in table:
        raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(table)}")
    hub_id, config, split, column = table[name]
    try:
        from datasets import load_dataset
        rows = load_dataset(hub_id, config, split=f"{split}[:{limit}]")
    except ImportError:
        raise ValueError("--dataset needs the 'datasets' package; or pass --prompts FILE (JSONL)") from None
    except Exception as e:                          # offline, hub down, renamed set: all end here
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"could not fetch {hub_id} ({reason[:120]}); offline, pass --prompts FILE "
                         f"(JSONL with a 'prompt' or 'turns' field)") from None
    texts = [r[column][0] if isinstance(r[column], list) else r[column] for r in rows]
    return [t for t in texts if isinstance(t, str) and t]


# name -> (hub id, config, split, field): prompt sets to train on, train splits only (the
# benchmark's sets in DATASETS are test splits, never trained on)
TRAIN_DATASETS = {
    "gsm8k": ("openai/gsm8k", "main", "train", "question"),
    "mbpp": ("google-research-datasets/mbpp", "full", "train", "text"),
    "codealpaca": ("sahil2801/CodeAlpaca-20k", None, "train", "instruction"),
    "ultrachat": ("HuggingFaceH4/ultrachat_200k", None, "train_sft", "prompt"),
}


def user_prompts(prompts: str | None = None, dataset: str | None = None, limit: int | None = None) -> list[str]:
    """Your own training prompts: a JSONL file with a ``prompt`` (or ``turns``) field, or a public
    set from :data:`TRAIN_DATASETS` fetched with ``datasets`` (as ``bench --dataset`` does)."""
    if prompts and dataset:
        raise ValueError("pass --prompts or --dataset, not both")
    if dataset:
        return dataset_prompts(dataset, limit or 1000, TRAIN_DATASETS)
    return load_prompts(prompts, limit)


def training_prompts(num_math: int, num_code: int, seed: int = 0) -> list[str]:
    """The ``train`` split only (:func:`dflash_lite.corpus.prompts`): generated math problems, then
    stdlib train-file function headers drawn with ``seed``."""
    return corpus.prompts("train", "math", num_math) + corpus.prompts("train", "code", num_code, seed=seed)


