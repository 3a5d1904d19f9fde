"""Prompts and how they become token ids: JSONL files, public data sets, the built-in splits of
:mod:`dflash_lite.corpus`, and the one :func:`encode` that the engine, the demo, the benchmark and
training all use, through the chat template with thinking off (docs/method.md#data)."""
from __future__ import annotations

import json
import os

import torch

from . import corpus, validate

# a render's limits: seconds (+ per prompt), output beyond the prompt, memory beyond the parent's
TEMPLATE_SECONDS, TEMPLATE_BYTES, TEMPLATE_MEMORY = 5.0, 1 << 20, 1 << 30
TEMPLATE_SECONDS_PER_PROMPT = 0.05
# name -> (hub id, config, split, field): the public sets the DFlash paper reports on
DATASETS = {
    "gsm8k": ("openai/gsm8k", "main", "test", "question"),
    "humaneval": ("openai/openai_humaneval", None, "test", "prompt"),
    "mbpp": ("google-research-datasets/mbpp", "full", "test", "text"),
    "math500": ("HuggingFaceH4/MATH-500", None, "test", "problem"),
    "mt-bench": ("HuggingFaceH4/mt_bench_prompts", None, "train", "prompt"),
}
# the same, for prompt sets to train on: train splits only (DATASETS' are never trained on)
TRAIN_DATASETS = {
    "gsm8k": ("openai/gsm8k", "main", "train", "question"),
    "mbpp": ("google-research-datasets/mbpp", "full", "train", "text"),
    "codealpaca": ("sahil2801/CodeAlpaca-20k", None, "train", "instruction"),
    "ultrachat": ("HuggingFaceH4/ultrachat_200k", None, "train_sft", "prompt"),
}


def apply_chat_template(tokenizer, prompts: list[str]) -> list[str]:
    """Each prompt as a user turn of the tokenizer's chat template (thinking off), unchanged without
    one; rendered under :func:`check_chat_template`'s limits (one ``ValueError`` line)."""
    prompts = list(prompts)
    if not getattr(tokenizer, "chat_template", None):
        return prompts
    texts = _render_limited(tokenizer, prompts)
    if isinstance(texts, str):
        raise ValueError(f"the tokenizer's chat template {texts}")
    return texts


def check_chat_template(tokenizer, where: str = "the tokenizer") -> None:
    """Render the tokenizer's chat template once (a short user turn) under the limits every render
    has, so a template that raises, includes a file, loops or allocates without bound is one
    ``ValueError`` line at load, not a hang on the first prompt: a child process with a time, a
    memory and an output limit (the output limit alone where there is no ``os.fork``)."""
    if not getattr(tokenizer, "chat_template", None):
        return
    problem = _render_limited(tokenizer, ["Hello"])
    if isinstance(problem, str):
        raise ValueError(f"{where}: the chat template {problem}; fix it, or remove it from the "
                         f"tokenizer's files")


def _render_all(tokenizer, prompts: list[str]) -> list[str] | str:
    """The rendered prompts, or what went wrong as a phrase."""
    texts = []
    for prompt in prompts:
        try:
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                 tokenize=False, add_generation_prompt=True,
                                                 enable_thinking=False)
        except MemoryError:
            return "ran out of memory"
        except Exception as e:              # jinja2's errors, and what the template's calls raise
            reason = " ".join(str(e).split())[:160]
            return f"failed ({type(e).__name__}{': ' if reason else ''}{reason})"
        if not isinstance(text, str) or len(text) > TEMPLATE_BYTES + 2 * len(prompt):
            return f"wrote more than {TEMPLATE_BYTES >> 20} MiB beyond the prompt itself"
        texts.append(text)
    return texts


def _render_limited(tokenizer, prompts: list[str]) -> list[str] | str:
    if not hasattr(os, "fork"):
        return _render_all(tokenizer, prompts)
    import resource
    import select
    import signal
    import time

    seconds = TEMPLATE_SECONDS + TEMPLATE_SECONDS_PER_PROMPT * len(prompts)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                # the child: limits, then the render, then JSON
        try:
            os.close(read)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)      # the alarm ends it, whatever runs
            signal.setitimer(signal.ITIMER_REAL, seconds + 1)
            try:
                with open("/proc/self/statm") as fh:
                    used = int(fh.read().split()[0]) * resource.getpagesize()
                limit = (used + TEMPLATE_MEMORY, resource.RLIM_INFINITY)
                resource.setrlimit(resource.RLIMIT_AS, limit)
            except (OSError, ValueError):
                pass                            # no /proc or no limit here: the time limit holds
            result = json.dumps(_render_all(tokenizer, prompts)).encode("utf-8")
            with os.fdopen(write, "wb") as out:
                out.write(result)
            os._exit(0)
        finally:
            os._exit(1)                         # whatever the render raised
    os.close(write)
    deadline = time.monotonic() + seconds
    chunks = []
    try:
        while True:
            left = deadline - time.monotonic()
            ready = select.select([read], [], [], left)[0] if left > 0 else []
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                many = "one short prompt" if prompts == ["Hello"] else f"{len(prompts)} prompt(s)"
                return f"took more than {seconds:.0f} s to render {many}"
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
    os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        return "could not be rendered (it ran out of memory or time)"


def encode(tokenizer, text: str, chat_template: bool = True) -> torch.Tensor:
    """``text`` as token ids (1, T), through the chat template (thinking off) when ``chat_template``
    and the tokenizer has one; no special tokens are added (a template writes its own)."""
    return encode_all(tokenizer, [text], chat_template)[0]


def encode_all(tokenizer, texts: list[str], chat_template: bool = True) -> list[torch.Tensor]:
    """:func:`encode` of each text, the templates rendered in one go (one limited render)."""
    if chat_template:
        texts = apply_chat_template(tokenizer, texts)
    return [tokenizer(t, return_tensors="pt", add_special_tokens=False).input_ids for t in texts]


def load_prompts(path: str, limit: int | None = None) -> list[str]:
    """Prompts from a JSONL file with a ``prompt`` field, or ``turns`` (the first turn is used): the
    first ``limit`` of them, read as a stream (the rest of the file is never read)."""
    prompts = []
    for number, line in validate.text_file_stream(path, "prompts file"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}:{number}: not a JSON line") from None
        except RecursionError:
            raise ValueError(f"{path}:{number}: JSON nested too deeply") from None
        row = row if isinstance(row, dict) else {}
        text, turns = row.get("prompt"), row.get("turns")
        if text is None and turns is not None:
            if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
                raise ValueError(f"{path}:{number}: 'turns' must be a list of strings, got "
                                 f"{json.dumps(turns)[:40]}")
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
    """Held-out in-domain prompts: the ``held_out`` split of :func:`dflash_lite.corpus.prompts`."""
    return corpus.prompts("held_out", domain, n)


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
        raise ValueError("--dataset needs the 'datasets' package; "
                         "or pass --prompts FILE (JSONL)") from None
    except Exception as e:                          # offline, hub down, renamed set: all end here
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"could not fetch {hub_id} ({reason[:120]}); offline, pass --prompts FILE "
                         f"(JSONL with a 'prompt' or 'turns' field)") from None
    texts = [r[column][0] if isinstance(r[column], list) else r[column] for r in rows]
    return [t for t in texts if isinstance(t, str) and t]


def user_prompts(prompts: str | None = None, dataset: str | None = None,
                 limit: int | None = None) -> list[str]:
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
    return corpus.prompts("train", "math", num_math) + corpus.prompts("train", "code", num_code,
                                                                      seed=seed)
