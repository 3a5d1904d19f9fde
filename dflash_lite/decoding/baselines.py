"""The methods DFlash is measured against, each a proposer for the same decode loop
(docs/method.md#the-decode-loop): :class:`NoDraftProposer` (block size 1: plain autoregressive
decoding, :func:`generate_autoregressive`), :class:`EagleProposer` (the paper's "DFlash-AR",
section 5), :class:`DraftModelProposer` (a small causal LM), :class:`AdaptiveDFlashProposer` (the
source article's adaptive block size, its section 5.3) and :func:`hf_generate` (transformers')."""
from __future__ import annotations

import logging

import torch

from ..validate import check_int
from .acceptance import PositionNoise, SamplingParams, choose_tokens, target_probs
from .cache import SlotCache
from .decode import ChainDraft, DFlashProposer, GenerationResult, generate
from .proposers import check_drafter
from .shapes import EAGER, Shapes


class NoDraftProposer:
    """Block size 1: nothing is drafted; each step is one target forward that commits one token."""
    layer_ids = None
    block_size = 1

    def __init__(self, shapes: Shapes = EAGER):
        self.shapes = shapes

    def start(self, *args) -> None:
        """Nothing to read, at the start or after a step (``accepted``), nor rows to keep."""

    accepted = keep = start

    def propose(self, last, depths):
        raise AssertionError("block size 1 drafts nothing")


def generate_autoregressive(model, input_ids: torch.Tensor, max_new_tokens: int,
                            sampling: SamplingParams = SamplingParams(), stop_token_ids=(),
                            generator: torch.Generator | None = None) -> GenerationResult:
    """The baseline: the decode loop at block size 1 (prefill, then a target forward per token)."""
    return generate(model, NoDraftProposer(), input_ids, max_new_tokens, sampling, stop_token_ids,
                    generator)


class EagleProposer:
    """The EAGLE-style baseline, a proposer of one request (run a batch as ``PerRow(...)``):
    DFlash's context and KV injection, but one forward of an autoregressive drafter
    (:class:`~dflash_lite.decoding.variants.AutoregressiveDrafter`) per draft."""

    autoregressive = True

    def __init__(self, drafter, target, block_size: int | None = None, shapes: Shapes = EAGER):
        self.block_size = check_drafter(self, drafter, target, block_size)
        self.drafter, self.target, self.shapes = drafter, target, shapes
        self.layer_ids = drafter.config.target_layer_ids

    def start(self, prompt_ids, target_hidden) -> None:
        self.cache = self.shapes.drafter_cache(self.drafter, prompt_ids.device)
        self.new_context = target_hidden                # features not yet cached
        self.new_context_start = 0

    def propose(self, last_token: torch.Tensor, k: int):
        token, position = last_token.view(1, 1), self.new_context_start + self.new_context.shape[1]
        context, context_start, drafts = self.new_context, self.new_context_start, []
        self.cache.rewind(context_start)               # the accepted context ends here
        for i in range(k):
            logits = self.drafter.next_token_logits(self.target, token, context, context_start,
                                                    position + i, self.cache)
            token = logits.argmax(dim=-1).view(1, 1)                               # (1, 1)
            drafts.append(token[0])
            context = context[:, :0]                    # cached now
            context_start = position
        self.cache.rewind(position)           # keep the accepted context 0..position-1, no drafts
        return ChainDraft(torch.cat(drafts))

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        # the features of last + n accepted drafts join the context on the next propose
        self.new_context = target_hidden[:, : n + 1]
        self.new_context_start = position


class DraftModelProposer:
    """A small causal LM with its own cache, one draft per forward: the argmax, or with ``sample``
    its processed q sampled (docs/method.md#seeded-sampling): with a PositionNoise ``generator`` the
    coupled point mass, with a ``torch.Generator`` returned with q for the min(1, p/q) rule."""
    layer_ids = None

    def __init__(self, draft_model, target, block_size: int = 5,
                 sampling: SamplingParams = SamplingParams(),
                 sample: bool = False, generator: torch.Generator | PositionNoise | None = None):
        if draft_model.config.vocab_size != target.config.vocab_size:
            raise ValueError(f"draft model vocabulary {draft_model.config.vocab_size} != "
                             f"target vocabulary {target.config.vocab_size}")
        check_int("block_size", block_size)
        self.model, self.block_size, self.sampling = draft_model, block_size, sampling
        self.sample, self.generator = sample and not sampling.greedy, generator
        self.processors = sampling.processors()

    def start(self, prompt_ids, target_hidden) -> None:
        self.cache = SlotCache.for_target(self.model)
        self.unseen = prompt_ids                    # tokens not yet in the draft cache

    def propose(self, last_token: torch.Tensor, k: int):
        ids = torch.cat([self.unseen, last_token.view(1, 1)], dim=1)
        tokens, probs = [], []
        coupled = self.sample and isinstance(self.generator, PositionNoise)
        after = self.cache.position + ids.shape[1]       # the position of the first draft
        for i in range(k):
            logits = self.model(ids, past_key_values=self.cache, use_cache=True,
                                logits_to_keep=1).logits[:, -1]
            if coupled:     # the target's noise at the draft's position
                token = choose_tokens(logits, self.sampling, self.processors, self.generator,
                                      torch.tensor([after + i]))
            elif self.sample:
                p = target_probs(logits, self.sampling, self.processors)   # (1, V)
                token = torch.multinomial(p, 1, generator=self.generator)[0]
                probs.append(p[0])
            else:
                token = logits.argmax(dim=-1)
            tokens.append(token)
            ids = token.view(1, 1)
        return ChainDraft(torch.cat(tokens), torch.stack(probs) if probs else None)

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        have = min(self.cache.position, position + n + 1)      # the last draft was never fed
        self.cache.rewind(have)                                 # rejected drafts are overwritten
        self.unseen = block[:, have - position: n + 1]


@torch.inference_mode()
def hf_generate(target, tokenizer, ids, n, stops, sampling: SamplingParams = SamplingParams(),
                **kwargs):
    """transformers' ``model.generate`` on ``ids`` (1, T) for ``n`` new tokens; ``kwargs``: its
    assisted-generation options. Returns (new tokens, None): it keeps no per-step record."""
    if sampling.greedy:
        kwargs["do_sample"] = False
    else:
        # the same warpers as ours; 0 and 1.0 switch top-k / top-p off explicitly
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p or 1.0,
                      top_k=sampling.top_k or 0)
    # transformers' assisted generation warns about its own call (config + kwargs): silenced
    internal = logging.getLogger("transformers.generation.utils")
    level = internal.level
    internal.setLevel(logging.ERROR)
    try:
        out = target.generate(ids.to(target.device), max_new_tokens=n, eos_token_id=stops,
                              pad_token_id=tokenizer.pad_token_id, **kwargs)
    finally:
        internal.setLevel(level)
    return out[0, ids.shape[1]:].tolist(), None


class AdaptiveDFlashProposer(DFlashProposer):
    """DFlash with each row's block the smallest of ``sizes`` at least ``headroom`` x its mean
    acceptance length over its last ``window`` steps. ``chosen``: the first row's block per step."""

    def __init__(self, drafter, target, sizes=(4, 8, 16), window: int = 4, headroom: float = 2.0):
        sizes = sorted(set(sizes))
        super().__init__(drafter, target, sizes[-1])
        if sizes[0] < 2 or window < 1 or headroom <= 0:
            raise ValueError("adaptive block sizes must be >= 2, with window >= 1 and headroom > 0")
        self.sizes, self.window, self.headroom = sizes, window, headroom

    def start(self, ids, features, lengths=None) -> None:
        super().start(ids, features, lengths)
        rows = len(self.new_context_lengths)
        self.recent = [[] for _ in range(rows)]
        self.blocks = [self.sizes[-1]] * rows
        self.chosen = []

    def propose(self, last: torch.Tensor, depths: list[int]):
        depths = [min(d, b - 1) for d, b in zip(depths, self.blocks)]
        self.chosen.append(depths[0] + 1)
        return super().propose(last, depths)

    def accepted(self, blocks, positions, features) -> None:
        super().accepted(blocks, positions, features)
        for r, block in enumerate(blocks):
            if block.shape[1]:                      # a finished row kept as padding: nothing
                self.recent[r] = (self.recent[r] + [block.shape[1]])[-self.window:]
                want = self.headroom * sum(self.recent[r]) / len(self.recent[r])
                self.blocks[r] = next((b for b in self.sizes if b >= want), self.sizes[-1])

    def keep(self, rows: list[int]) -> None:
        super().keep(rows)
        self.recent = [self.recent[i] for i in rows]
        self.blocks = [self.blocks[i] for i in rows]
