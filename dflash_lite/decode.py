"""Decode loops as plain functions named by phase: ``prefill``, then one step at a time.

This file holds the autoregressive baseline (one target forward per token, with the KV cache).
Its result type, :class:`GenerationResult`, is the one every loop in the project returns, so
tokens/s, time to first token and tau are summarised the same way everywhere.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .acceptance import (SamplingParams, accept_greedy, accept_point_mass, accept_speculative, choose_tokens,
                         target_probs)
from .drafter import DrafterCache, check_compatible
from .target import context_features
from .validate import check_int


@dataclass
class GenerationResult:
    """What one generation produced and how long each part took (seconds)."""
    tokens: list[int]                      # new tokens only; a stop token, if hit, is the last one
    prompt_length: int
    time_to_first_token: float             # prefill + choosing the first token
    token_times: list[float]               # seconds since the start at which each new token was ready
    acceptance_lengths: list[int] = field(default_factory=list)  # tokens committed per target forward
    phase_times: dict[str, float] = field(default_factory=dict)  # e.g. prefill, draft, verify, bookkeeping
    stop_reason: str = "max_new_tokens"     # or "stop_token"

    @property
    def total_time(self) -> float:
        return self.token_times[-1] if self.token_times else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Decode throughput: new tokens over the whole wall time, prefill included."""
        return len(self.tokens) / self.total_time if self.total_time > 0 else float("nan")

    @property
    def per_token_latency(self) -> list[float]:
        """Seconds between consecutive tokens (the first entry is the time to first token)."""
        return [b - a for a, b in zip([0.0] + self.token_times[:-1], self.token_times)]

    @property
    def tau(self) -> float | None:
        """Mean tokens committed per target verification; None for a loop without verification."""
        if not self.acceptance_lengths:
            return None
        return sum(self.acceptance_lengths) / len(self.acceptance_lengths)


def check_request(model, input_ids: torch.Tensor, max_new_tokens: int) -> None:
    """One clear error for a request that cannot be served, before any work is done."""
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must have shape (1, T), got {tuple(input_ids.shape)}")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token")
    check_int("max_new_tokens", max_new_tokens)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) "
                         f"exceeds the target's context of {limit} tokens")


def new_cache(model):
    from transformers import DynamicCache
    return DynamicCache(config=model.config)


def crop_cache(cache, keep: int) -> None:
    """Keep the first ``keep`` positions of a transformers cache (its ``crop`` takes a negative count)."""
    remove = cache.get_seq_length() - keep
    if remove > 0:
        cache.crop(-remove)


@torch.inference_mode()
def prefill(model, input_ids: torch.Tensor, cache) -> torch.Tensor:
    """Run the prompt through the target, filling ``cache``; returns the last position's logits (1, V)."""
    return model(input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]


@torch.inference_mode()
def generate_autoregressive(model, input_ids: torch.Tensor, max_new_tokens: int,
                            sampling: SamplingParams = SamplingParams(),
                            stop_token_ids: list[int] | tuple[int, ...] = (),
                            generator: torch.Generator | None = None) -> GenerationResult:
    """The baseline: prefill, then one target forward per new token, with the KV cache."""
    check_request(model, input_ids, max_new_tokens)
    input_ids = input_ids.to(model.device)
    stops = set(stop_token_ids)
    processors = sampling.processors()
    cache = new_cache(model)
    tokens, token_times = [], []
    start = time.perf_counter()
    logits = prefill(model, input_ids, cache)                               # (1, V)
    stop_reason = "max_new_tokens"
    for _ in range(max_new_tokens):
        next_token = choose_tokens(logits, sampling, processors, generator)  # (1,)
        token = next_token.item()
        tokens.append(token)
        token_times.append(time.perf_counter() - start)
        if token in stops:
            stop_reason = "stop_token"
            break
        if len(tokens) == max_new_tokens:
            break
        logits = model(next_token.view(1, 1), past_key_values=cache, use_cache=True).logits[:, -1]
    return GenerationResult(tokens=tokens, prompt_length=input_ids.shape[1], time_to_first_token=token_times[0],
                            token_times=token_times, phase_times={"prefill": token_times[0]},
                            stop_reason=stop_reason)


# ============================================================================= speculative decoding
# A proposer drafts tokens; the target verifies them in one forward. Each proposer has three calls:
#   start(prompt_ids, target_hidden)             after prefill
#   propose(last_token, k) -> (tokens, q|None)   k draft tokens (q: their distributions, if sampled)
#   accepted(block, n, position, target_hidden)  the verified block, of which last + n drafts stay
# Proposers: DFlashProposer (one block-diffusion forward per block, this project), EagleProposer
# (same conditioning, one drafter forward per draft token), DraftModelProposer (a small causal LM:
# classic speculative decoding) and NoDraftProposer (block size 1: plain autoregressive decoding).
# policy.CostAwareProposer chooses the block size each step (the default); a proposer with a
# ``tree_size`` drafts a tree instead of a chain, verified by tree.tree_step (DDTree, greedy only).


class DFlashProposer:
    """Drafts ``block_size - 1`` tokens with one forward of a :class:`~dflash_lite.drafter.DFlashDrafter`."""

    drafting = "block"                                  # the drafter kind this proposer runs

    def __init__(self, drafter, target, block_size: int | None = None, passes: int = 1):
        check_compatible(drafter.config, target.config)
        if drafter.config.drafting != self.drafting:
            raise ValueError(f"{type(self).__name__} needs a {self.drafting} drafter; this one drafts "
                             f"{drafter.config.drafting}")
        self.drafter, self.target = drafter, target
        self.block_size = drafter.config.block_size if block_size is None else block_size
        check_int("block_size", self.block_size, 1, drafter.config.max_block_size)
        check_int("passes", passes)
        self.layer_ids, self.passes = drafter.config.target_layer_ids, passes

    def start(self, prompt_ids, target_hidden) -> None:
        self.cache = DrafterCache(self.drafter.config.num_layers)
        self.new_context, self.new_context_start = target_hidden, 0     # (1, T, K*H) of positions 0..T-1

    def propose(self, last_token: torch.Tensor, k: int):
        block = torch.full((1, k + 1), self.drafter.config.mask_token_id, dtype=torch.long, device=last_token.device)
        block[0, 0] = last_token                                        # [last, MASK x k]
        logits = self.drafter.draft_logits(self.target, block, self.new_context, self.new_context_start, self.cache)
        position = self.new_context_start + self.new_context.shape[1]   # where `last` sits
        for _ in range(self.passes - 1):                                # DFlash uses 1 pass; more is an experiment:
            block[0, 1:] = logits[0].argmax(dim=-1)                     # re-feed the draft instead of the masks
            logits = self.drafter.draft_logits(self.target, block, self.new_context[:, :0], position, self.cache)
        return logits[0].argmax(dim=-1), None                           # (k,), a point-mass draft

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        # the features of last + n accepted drafts join the drafter's context on the next propose
        self.new_context, self.new_context_start = target_hidden[:, : n + 1], position


class AdaptiveDFlashProposer(DFlashProposer):
    """DFlash with the block size chosen per step from recent acceptance (the source article's
    section 5.3): the smallest of ``sizes`` that is at least ``headroom`` x the mean acceptance
    length of the last ``window`` steps. Low acceptance -> short, cheap blocks; high -> long ones.
    An option only: notebook 06 measures it against fixed sizes."""

    def __init__(self, drafter, target, sizes=(4, 8, 16), window: int = 4, headroom: float = 2.0):
        sizes = sorted(set(sizes))
        super().__init__(drafter, target, sizes[-1])
        if sizes[0] < 2 or window < 1 or headroom <= 0:
            raise ValueError("adaptive block sizes must be >= 2, with window >= 1 and headroom > 0")
        self.sizes, self.window, self.headroom = sizes, window, headroom

    def start(self, prompt_ids, target_hidden) -> None:
        super().start(prompt_ids, target_hidden)
        self.recent, self.block_size, self.chosen = [], self.sizes[-1], []

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        super().accepted(block, n, position, target_hidden)
        self.chosen.append(block.shape[1])
        self.recent = (self.recent + [n + 1])[-self.window:]
        want = self.headroom * sum(self.recent) / len(self.recent)
        self.block_size = next((b for b in self.sizes if b >= want), self.sizes[-1])


class EagleProposer(DFlashProposer):
    """The EAGLE-style baseline (the paper's "DFlash-AR"): the same feature taps and KV injection,
    but one drafter forward per draft token, each token predicting the next, with a causal cache."""

    drafting = "autoregressive"

    def propose(self, last_token: torch.Tensor, k: int):
        cache, token = self.cache, last_token.view(1, 1)
        position = self.new_context_start + self.new_context.shape[1]             # where `last` sits
        context, context_start = self.new_context, self.new_context_start
        cache.keep_drafts = True
        drafts = []
        for i in range(k):
            logits = self.drafter.next_token_logits(self.target, token, context, context_start, position + i, cache)
            token = logits.argmax(dim=-1).view(1, 1)                               # (1, 1)
            drafts.append(token[0])
            context, context_start = context[:, :0], position                      # the context is cached now
        cache.clear_drafts()
        cache.keep_drafts = False
        return torch.cat(drafts), None


class DraftModelProposer:
    """Classic speculative decoding: a small causal LM drafts one token per forward, with its own cache.

    ``sample=False`` drafts the argmax (a point-mass q); ``sample=True`` samples from the draft
    model's processed distribution and returns it, for the general acceptance rule.
    """
    layer_ids = None

    def __init__(self, draft_model, target, block_size: int = 5, sampling: SamplingParams = SamplingParams(),
                 sample: bool = False, generator: torch.Generator | None = None):
        if draft_model.config.vocab_size != target.config.vocab_size:
            raise ValueError(f"draft model vocabulary {draft_model.config.vocab_size} != "
                             f"target vocabulary {target.config.vocab_size}")
        check_int("block_size", block_size)
        self.model, self.block_size, self.sampling = draft_model, block_size, sampling
        self.sample, self.generator = sample and not sampling.greedy, generator
        self.processors = sampling.processors()

    def start(self, prompt_ids, target_hidden) -> None:
        self.cache = new_cache(self.model)
        self.unseen = prompt_ids                                        # tokens not yet in the draft cache

    def propose(self, last_token: torch.Tensor, k: int):
        ids = torch.cat([self.unseen, last_token.view(1, 1)], dim=1)
        tokens, probs = [], []
        for _ in range(k):
            logits = self.model(ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1).logits[:, -1]
            if self.sample:
                p = target_probs(logits, self.sampling, self.processors)   # (1, V)
                token = torch.multinomial(p, 1, generator=self.generator)[0]
                probs.append(p[0])
            else:
                token = logits.argmax(dim=-1)
            tokens.append(token)
            ids = token.view(1, 1)
        return torch.cat(tokens), (torch.stack(probs) if self.sample else None)

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        crop_cache(self.cache, position + n + 1)                        # drop rejected drafts
        have = self.cache.get_seq_length()                              # the last draft was never fed
        self.unseen = block[:, have - position: n + 1]


class NoDraftProposer:
    """Block size 1: nothing is drafted; the speculative loop is plain autoregressive decoding."""
    layer_ids = None
    block_size = 1

    def start(self, prompt_ids, target_hidden): pass
    def propose(self, last_token, k): raise AssertionError("block size 1 drafts nothing")
    def accepted(self, block, n, position, target_hidden): pass


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def verify(target, block: torch.Tensor, cache, layer_ids: list[int] | None, logits_to_keep: int = 0):
    """One target forward over ``block`` (1, k+1): logits (k+1, V) (the last ``logits_to_keep`` when
    given), and the tapped features of every position (1, k+1, K*H), or None."""
    out = target(block, past_key_values=cache, use_cache=True, logits_to_keep=logits_to_keep,
                 output_hidden_states=[i + 1 for i in layer_ids] if layer_ids is not None else False)
    return out.logits[0], (context_features(out.hidden_states, layer_ids) if layer_ids is not None else None)


def accept(draft_tokens, draft_q, target_logits, sampling, processors, generator) -> tuple[int, int]:
    """Greedy, point-mass sampling, or the general rule with the draft's q (all lossless)."""
    if sampling.greedy:
        return accept_greedy(draft_tokens, target_logits)
    p = target_probs(target_logits, sampling, processors)               # (k+1, V)
    if draft_q is None:
        return accept_point_mass(draft_tokens, p, generator)
    return accept_speculative(draft_tokens, draft_q, p, generator)


@torch.inference_mode()
def speculative_steps(target, proposer, input_ids: torch.Tensor, max_new_tokens: int,
                      sampling: SamplingParams = SamplingParams(), stop_token_ids=(),
                      generator: torch.Generator | None = None, block_size: int | None = None):
    """The speculative loop as a generator: yields the tokens committed by each step, returns a
    :class:`GenerationResult`. ``block_size``: tokens per target forward (k drafts + 1)."""
    check_request(target, input_ids, max_new_tokens)
    fixed = block_size                                  # None: ask the proposer every step (it may adapt)
    check_int("block_size", proposer.block_size if fixed is None else fixed)
    if getattr(proposer, "uses_trees", False) and not sampling.greedy:
        raise ValueError("draft trees are greedy only (temperature 0): no lossless tree rule for sampling here")
    device = target.device
    input_ids = input_ids.to(device)
    stops, processors = set(stop_token_ids), sampling.processors()
    timer = dict.fromkeys(("prefill", "draft", "verify", "bookkeeping"), 0.0)
    tokens, token_times, acceptance_lengths = [], [], []
    cache = new_cache(target)
    start = time.perf_counter()

    # prefill: the prompt through the target; every prompt position's features to the drafter
    logits, hidden = verify(target, input_ids, cache, proposer.layer_ids, logits_to_keep=1)
    last = choose_tokens(logits, sampling, processors, generator)          # (1,)
    proposer.start(input_ids, hidden)
    tokens.append(int(last))
    token_times.append(time.perf_counter() - start)
    timer["prefill"] = token_times[0]
    yield tokens[:]
    stop_reason = "stop_token" if tokens[-1] in stops else "max_new_tokens"
    position = input_ids.shape[1]                                          # where `last` sits
    tree_step = None
    if hasattr(proposer, "tree_size"):                                     # a proposer that may draft trees
        from .tree import tree_step

    while stop_reason != "stop_token" and len(tokens) < max_new_tokens:
        block_size = proposer.block_size if fixed is None else fixed
        k = min(block_size - 1, max_new_tokens - len(tokens) - 1)           # never verify past the limit
        t0 = time.perf_counter()
        if k > 0 and tree_step is not None and proposer.tree_size:        # a draft tree (DDTree): tree.py
            block, n, next_token, hidden, draft_s = tree_step(target, proposer, last, k, cache, position)
            t1 = t0 + draft_s
        else:
            draft_tokens, draft_q = proposer.propose(last, k) if k > 0 else (last[:0], None)   # (k,)
            _sync(device)
            t1 = time.perf_counter()
            block = torch.cat([last, draft_tokens]).view(1, k + 1)             # (1, k+1)
            logits, hidden = verify(target, block, cache, proposer.layer_ids)  # (k+1, V)
            n, next_token = accept(draft_tokens, draft_q, logits, sampling, processors, generator)
        _sync(device)
        t2 = time.perf_counter()
        crop_cache(cache, position + n + 1)           # keep last + n accepted drafts; next_token is new
        proposer.accepted(block, n, position, hidden)
        position += n + 1
        last = torch.tensor([next_token], device=device)
        before = len(tokens)
        for token in block[0, 1: n + 1].tolist() + [next_token]:
            tokens.append(token)
            if token in stops:                        # a stop token inside the block ends the output there
                stop_reason = "stop_token"
                break
        acceptance_lengths.append(n + 1)
        now = time.perf_counter()
        token_times.extend([now - start] * (len(tokens) - before))
        timer["draft"] += t1 - t0
        timer["verify"] += t2 - t1
        timer["bookkeeping"] += now - t2
        yield tokens[before:]

    return GenerationResult(tokens=tokens, prompt_length=input_ids.shape[1], time_to_first_token=token_times[0],
                            token_times=token_times, acceptance_lengths=acceptance_lengths,
                            phase_times=timer, stop_reason=stop_reason)


def generate_speculative(target, proposer, input_ids: torch.Tensor, max_new_tokens: int,
                         sampling: SamplingParams = SamplingParams(), stop_token_ids=(),
                         generator: torch.Generator | None = None, block_size: int | None = None) -> GenerationResult:
    """Run :func:`speculative_steps` to the end and return its result."""
    steps = speculative_steps(target, proposer, input_ids, max_new_tokens, sampling, stop_token_ids,
                              generator, block_size)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
