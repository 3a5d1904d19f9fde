"""Training data for a drafter (docs/method.md#training): the target's own answers to the training
prompts (:func:`regenerate`) and batches of blocks at random anchors (:func:`make_batch`) under the
block attention mask (:func:`block_attention_mask`)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from tqdm import tqdm

from ..decoding.target import stop_token_ids
from ..files import atomic_write_text

IGNORE = -100                        # the label of a position that predicts nothing


@dataclass
class RegeneratedData:
    sequences: list[list[int]]       # prompt + the target's response
    prompt_lengths: list[int]

    def __len__(self):
        return len(self.sequences)


@torch.inference_mode()
def regenerate(target, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 16,
               cache_dir: str | Path | None = None) -> RegeneratedData:
    """The target's own greedy answers to ``prompts``, cached under ``cache_dir`` (an interrupted
    run resumes from the ``.partial.json`` kept every minute)."""
    key = hashlib.sha256(json.dumps([prompts, max_new_tokens, target.config.to_json_string(),
                                     sum(float(p.float().sum()) for p in target.parameters())])
                         .encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"regenerated-{key}.json" if cache_dir else None
    if path is not None and path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if raw.get("complete") and raw.get("key") == key:
                return RegeneratedData(raw["sequences"], raw["prompt_lengths"])
            raise ValueError("incomplete")
        except (ValueError, AttributeError, KeyError):     # truncated, edited, or not ours
            print(f"[regenerate] {path}: corrupt cache file, rebuilding it", flush=True)
    stops = stop_token_ids(target, tokenizer)
    pad = tokenizer.pad_token_id
    partial = path.with_name(path.name.replace(".json", ".partial.json")) if path else None
    sequences, prompt_lengths = _partial(partial, key)
    done_at_start = len(sequences)
    started = said = time.time()
    for start in tqdm(range(len(sequences), len(prompts), batch_size), desc="regenerate",
                      mininterval=5, disable=None):
        if partial is not None and start > done_at_start and time.time() - said > 60:
            atomic_write_text(partial, json.dumps({"key": key, "sequences": sequences,
                                                   "prompt_lengths": prompt_lengths}))
            rate = (start - done_at_start) / (time.time() - started)
            print(f"[regenerate] {start}/{len(prompts)} prompts, {rate * 60:.0f} a minute, "
                  f"ETA {(len(prompts) - start) / rate / 60:.1f} min", flush=True)
            said = time.time()
        batch = [tokenizer(p, add_special_tokens=False).input_ids
                 for p in prompts[start:start + batch_size]]
        width = max(map(len, batch))                                        # left padded
        ids = torch.tensor([[pad] * (width - len(b)) + b for b in batch], device=target.device)
        mask = torch.tensor([[0] * (width - len(b)) + [1] * len(b) for b in batch],
                            device=target.device)
        out = target.generate(ids, attention_mask=mask, do_sample=False,
                              max_new_tokens=max_new_tokens, eos_token_id=stops, pad_token_id=pad)
        for b, row in zip(batch, out[:, width:].tolist()):
            end = next((j + 1 for j, t in enumerate(row) if t in stops), len(row))  # stop included
            sequences.append(b + row[:end])
            prompt_lengths.append(len(b))
    if path is not None:
        atomic_write_text(path, json.dumps({"key": key, "complete": True, "sequences": sequences,
                                            "prompt_lengths": prompt_lengths}))
        partial.unlink(missing_ok=True)
    return RegeneratedData(sequences, prompt_lengths)


def _partial(path: Path | None, key: str) -> tuple[list[list[int]], list[int]]:
    """The answers an interrupted regeneration of the same prompts and target had written (its
    ``.partial.json``, kept every minute), or none."""
    if path is not None and path.is_file():
        with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
            raw = json.loads(path.read_text(encoding="utf-8"))
            if raw.get("key") == key and len(raw["sequences"]) == len(raw["prompt_lengths"]):
                print(f"[regenerate] resuming after {len(raw['sequences'])} prompts", flush=True)
                return list(raw["sequences"]), list(raw["prompt_lengths"])
    return [], []


def sample_anchors(prompt_length: int, length: int, num_anchors: int, generator: torch.Generator,
                   block_size: int | None = None) -> torch.Tensor:
    """Anchor positions in the response: ``prompt_length <= a <= length - 2`` (at least one label).
    Sampled without replacement; fewer when the response is short. Sorted, (A,). With
    ``block_size`` only on fixed block boundaries, ``prompt_length + k * block_size``."""
    low, high = prompt_length, length - 2
    if high < low:
        return torch.empty(0, dtype=torch.long)
    choices = torch.arange(low, high + 1, block_size or 1)
    pick = torch.randperm(len(choices), generator=generator)[:num_anchors]
    return choices[pick].sort().values


def block_attention_mask(anchors: torch.Tensor, context_length: int, block_size: int,
                         causal: bool = False) -> torch.Tensor:
    """Boolean (A*B, T + A*B), True where a query may attend: block j's queries see context
    positions < anchors[j] (the features at the anchor and after already know the labels) and block
    j, bidirectionally or (autoregressive baseline) causally; never another block."""
    index = torch.arange(anchors.shape[0] * block_size)
    block = index // block_size                           # (A*B,): a query's block, or a key's
    context = torch.arange(context_length)[None, :] < anchors[block][:, None]          # (A*B, T)
    own_block = block[:, None] == block[None, :]                                       # (A*B, A*B)
    if causal:
        own_block &= index[None, :] <= index[:, None]
    return torch.cat([context, own_block], dim=1)


@dataclass
class Batch:
    block_ids: torch.Tensor          # (N, A*B) anchor token then MASKs per block (real when causal)
    labels: torch.Tensor             # (N, A*B) the token each position predicts, IGNORE elsewhere
    block_positions: torch.Tensor    # (N, A*B) absolute positions
    sequence_ids: torch.Tensor       # (N, T) the full sequences, for the target's features
    attn_mask: torch.Tensor          # (N, 1, A*B, T + A*B)
    rows: list[int] | None = None    # which sequences of the data, when known (a feature cache)


def make_batch(sequences: list[list[int]], prompt_lengths: list[int], block_size: int,
               num_anchors: int, tokenizer, generator: torch.Generator, causal: bool = False,
               fixed_anchors: bool = False) -> Batch | None:
    """Right-padded sequences with ``num_anchors`` blocks each (padding blocks see nothing and have
    no labels). ``tokenizer``: anything with the ``mask_token_id`` and ``pad_token_id`` to use.
    Block drafting: ``[x_a, MASK, ...]``, position j labelled x_{a+j}. Autoregressive drafting
    (``causal``): ``[x_a, x_{a+1}, ...]`` under teacher forcing, position j labelled x_{a+j+1}."""
    mask_token_id = tokenizer.mask_token_id
    n = len(sequences)
    width = max(map(len, sequences))
    q = num_anchors * block_size
    block_ids = torch.full((n, q), mask_token_id)
    labels = torch.full((n, q), IGNORE)
    positions = torch.zeros((n, q), dtype=torch.long)
    seq_ids = torch.full((n, width), tokenizer.pad_token_id)
    mask = torch.zeros((n, 1, q, width + q), dtype=torch.bool)
    any_anchor = False
    for i, (seq, plen) in enumerate(zip(sequences, prompt_lengths)):
        seq_t = torch.tensor(seq)
        seq_ids[i, : len(seq)] = seq_t
        anchors = sample_anchors(plen, len(seq), num_anchors, generator,
                                 block_size if fixed_anchors else None)
        a = len(anchors)
        if a == 0:
            continue
        any_anchor = True
        pos = anchors[:, None] + torch.arange(block_size)[None, :]                      # (a, B)
        inside = pos < len(seq)
        at = seq_t[pos.clamp(max=len(seq) - 1)]
        if causal:
            ids = torch.where(inside, at, torch.tensor(mask_token_id))
            lab = torch.where(pos + 1 < len(seq), seq_t[(pos + 1).clamp(max=len(seq) - 1)],
                              torch.tensor(IGNORE))
        else:
            ids = torch.full((a, block_size), mask_token_id)
            ids[:, 0] = seq_t[anchors]
            lab = torch.where(inside, at, torch.tensor(IGNORE))
            lab[:, 0] = IGNORE                                              # the anchor is given
        block_ids[i, : a * block_size] = ids.flatten()
        labels[i, : a * block_size] = lab.flatten()
        positions[i, : a * block_size] = pos.flatten()
        mask[i, 0, : a * block_size, : width + a * block_size] = block_attention_mask(
            anchors, width, block_size, causal)
        # unused query rows attend to themselves only, so softmax never sees an empty row
        unused = torch.arange(a * block_size, q)
        mask[i, 0, unused, width + unused] = True
    return Batch(block_ids, labels, positions, seq_ids, mask) if any_anchor else None


def epoch_batches(data: RegeneratedData, batch_size: int, block_size: int, num_anchors: int,
                  tokenizer, generator: torch.Generator, causal: bool = False,
                  fixed_anchors: bool = False) -> Iterator[Batch]:
    """One pass over the data in a random order, with freshly sampled anchors."""
    order = torch.randperm(len(data), generator=generator).tolist()
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = make_batch([data.sequences[i] for i in idx], [data.prompt_lengths[i] for i in idx],
                           block_size, num_anchors, tokenizer, generator, causal, fixed_anchors)
        if batch is not None:
            batch.rows = idx
            yield batch


def lm_batches(data: RegeneratedData, batch_size: int, pad_token_id: int,
               generator: torch.Generator):
    """Right-padded (ids, labels) for next-token training on the responses; prompts are context."""
    order = torch.randperm(len(data), generator=generator).tolist()
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(data.sequences[i]) for i in idx)
        ids = torch.full((len(idx), width), pad_token_id)
        labels = torch.full((len(idx), width), IGNORE)
        for row, i in enumerate(idx):
            seq, plen = data.sequences[i], data.prompt_lengths[i]
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, plen: len(seq)] = torch.tensor(seq[plen:])      # predict the response only
        yield ids, labels
