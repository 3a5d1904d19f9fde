"""Speculative decoding as phases, named as the paper and gpt-fast name them: ``prefill``, then
per step ``draft`` (a :class:`Proposer`), ``verify`` (one target forward), ``accept`` (the
lossless rule, then both caches keep the accepted tokens); ``generate`` runs it to the end.

:func:`steps` is the whole loop on one screen. :class:`DFlashProposer` is the paper's drafter;
the baselines (EAGLE-style drafter, a small draft model, and block size 1, which *is* plain
autoregressive decoding) are proposers too, in :mod:`dflash_lite.baselines`, so every method
runs the same loop. :class:`GenerationResult` is what every run returns, so tokens/s, time to
first token and tau are summarised the same way everywhere.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import torch

from .acceptance import (
    PositionNoise,
    SamplingParams,
    accept_speculative,
    choose_tokens,
    committed_tokens,
    target_probs,
)
from .cache import SlotCache
from .drafter import check_compatible
from .shapes import EAGER, Shapes
from .target import context_features
from .timing import PhaseTimer, no_phase
from .validate import check_int


class Step(NamedTuple):
    """What one step of :func:`steps` yields."""
    # committed by this step; a stop token, if hit, is the last one
    tokens: list[int]
    # tokens the step's target forward committed (n + 1); None: prefill's
    committed: int | None
    stopped: bool                     # a stop token ended the output


@dataclass
class GenerationResult:
    """What one generation produced and how long each part took (seconds), collected step by step
    (:meth:`record`) from :func:`steps`."""
    prompt_length: int
    # new tokens only; a stop token, if hit, is the last one
    tokens: list[int] = field(default_factory=list)
    # seconds since the start at which each new token was ready
    token_times: list[float] = field(default_factory=list)
    # tokens committed per target forward
    acceptance_lengths: list[int] = field(default_factory=list)
    phase_times: dict[str, float] = field(default_factory=dict)  # prefill, draft, verify, accept
    stop_reason: str = "max_new_tokens"     # or "stop_token"
    seed: int | None = None                 # a seeded sampled run's seed: it replays the output
    started: float = field(default_factory=time.perf_counter, repr=False)

    def record(self, step: Step) -> None:
        self.tokens += step.tokens
        self.token_times += [time.perf_counter() - self.started] * len(step.tokens)
        if step.committed is not None:
            self.acceptance_lengths.append(step.committed)
        if step.stopped:
            self.stop_reason = "stop_token"

    @property
    def time_to_first_token(self) -> float:
        """Prefill + choosing the first token."""
        return self.token_times[0] if self.token_times else 0.0

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
        raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens "
                         f"({max_new_tokens}) exceeds the target's context of {limit} tokens")


def new_cache(model, length: int | None = None) -> SlotCache:
    """The target's cache for one request (:class:`~dflash_lite.cache.SlotCache`, eager)."""
    return SlotCache.for_target(model, length)


@torch.inference_mode()
def prefill(target, input_ids: torch.Tensor, cache: SlotCache, layer_ids: list[int] | None = None):
    """The prompt through the target, filling ``cache`` from slot 0: the last position's logits
    (1, V), and the tapped features of every prompt position (1, T, K*H) when ``layer_ids`` asks."""
    cache.rewind(0)
    return verify(target, input_ids, cache, layer_ids, logits_to_keep=1)


def verify(target, block: torch.Tensor, cache: SlotCache, layer_ids: list[int] | None,
           logits_to_keep: int = 0, depths: torch.Tensor | None = None,
           ancestors: torch.Tensor | None = None):
    """One target forward over ``block`` (1, W) written at the cache's write position: logits
    (W, V) (the last ``logits_to_keep`` when given) and the tapped features (1, W, K*H) or None.
    A chain by default; a tree gives each row's ``depths`` (W,) and ``ancestors`` (W, W)."""
    window = getattr(target.config, "sliding_window", None) \
        if "sliding_attention" in (getattr(target.config, "layer_types", None) or ()) else None
    masks = cache.verify_mask(block.shape[1], ancestors, depths, window)
    out = target(block, attention_mask=masks if window is not None else masks["full_attention"],
                 position_ids=cache.positions(block.shape[1], depths),
                 past_key_values=cache, use_cache=True, logits_to_keep=logits_to_keep,
                 output_hidden_states=([i + 1 for i in layer_ids] if layer_ids is not None
                                       else False))
    features = context_features(out.hidden_states, layer_ids) if layer_ids is not None else None
    return out.logits[0], features


def verify_on(shapes: Shapes, target, ids: torch.Tensor, cache: SlotCache, layer_ids,
              depths: torch.Tensor | None = None, ancestors: torch.Tensor | None = None):
    """:func:`verify` of a chain (or, with ``depths`` and ``ancestors``, a tree) as ``shapes`` run
    it: as wide as it is, or padded to a bucket and compiled (one function per set of taps)."""
    return shapes.verify(lambda i, d, a: verify(target, i, cache, layer_ids, depths=d, ancestors=a),
                         ids, depths, ancestors, key=("verify", tuple(layer_ids or ())))


def seeded(sampling: SamplingParams, generator):
    """The generator a run samples with: ``generator``, or with none given and a
    ``sampling.seed``, that seed's :class:`~dflash_lite.acceptance.PositionNoise`."""
    if generator is None and sampling.seed is not None and not sampling.greedy:
        return PositionNoise(sampling.seed)
    return generator


def accept(draft_tokens, draft_q, target_logits, sampling: SamplingParams, processors,
           generator, positions: torch.Tensor | None = None) -> list[int]:
    """The tokens a step commits: the n drafts the lossless rule keeps and the target's own token
    after them (n + 1 tokens, read back in one go): greedy, point-mass sampling, or the general
    rule with the draft's distributions q (paper section 2;
    docs/method.md#verification-and-acceptance). ``positions`` (k+1,): the absolute positions
    of the tokens the rows choose, for seeded sampling
    (:class:`~dflash_lite.acceptance.PositionNoise`)."""
    if draft_q is None:             # a point mass: the target's own tokens while they agree
        return committed_tokens(draft_tokens, choose_tokens(target_logits, sampling, processors,
                                                            generator, positions))
    if isinstance(generator, PositionNoise):
        raise ValueError("the min(1, p/q) rule draws from a torch.Generator; seeded sampling "
                         "(PositionNoise) takes point-mass drafts (a draft model's coupled rule)")
    p = target_probs(target_logits, sampling, processors)                          # (k+1, V)
    n, next_token = accept_speculative(draft_tokens, draft_q, p, generator)
    return draft_tokens[:n].tolist() + [next_token]


# ============================================================================= drafts
class ChainDraft(NamedTuple):
    """k drafts in a row after the last committed token, and their distributions (k, V) when they
    were sampled (None: a point mass, as DFlash's argmax drafts or a prompt-lookup continuation).
    A draft knows how it is verified, accepted and kept; :class:`dflash_lite.tree.DraftTree` is
    the other shape, and :func:`steps` calls the same three methods on either."""
    tokens: torch.Tensor                    # (k,)
    q: torch.Tensor | None = None           # (k, V), or None for a point-mass draft

    def verify(self, target, last: torch.Tensor, cache: SlotCache, layer_ids,
               shapes: Shapes = EAGER):
        """ONE target forward scores [last, d1..dk] after the cache: logits row i is the target's
        choice after token i (k+1, V), and the tapped features (1, k+1, K*H) or None."""
        block = torch.cat([last, self.tokens])[None]                    # (1, k+1): [last, d1..dk]
        return verify_on(shapes, target, block, cache, layer_ids)

    def accept(self, target_logits, sampling: SamplingParams, processors, generator,
               position: int = 0):
        """The accepted path (block slots 0..n: last and the drafts d1..dn the rule keeps) and the
        tokens it commits, d1..dn and the target's own token after them (:func:`accept`);
        ``position``: where ``last`` sits (row i chooses the token at position + 1 + i)."""
        positions = None if not isinstance(generator, PositionNoise) else \
            torch.arange(len(self.tokens) + 1, device=target_logits.device) + position + 1
        tokens = accept(self.tokens, self.q, target_logits, sampling, processors, generator,
                        positions)
        return list(range(len(tokens))), tokens

    def keep(self, cache: SlotCache, position: int, path: list[int], target_hidden):
        """The target's cache keeps last + the accepted drafts (the next write starts after them);
        the path's features (1, n+1, K*H) or None."""
        cache.rewind(position + len(path))
        return None if target_hidden is None else target_hidden[:, : len(path)]


class Draft(Protocol):
    """What :func:`steps` asks of a draft: :class:`ChainDraft` or
    :class:`dflash_lite.tree.DraftTree`."""

    def verify(self, target, last: torch.Tensor, cache: SlotCache, layer_ids, shapes: Shapes): ...

    def accept(self, target_logits, sampling: SamplingParams, processors, generator,
               position: int) -> tuple[list[int], list[int]]: ...

    def keep(self, cache: SlotCache, position: int, path: list[int], target_hidden): ...


# ============================================================================= proposers
class Proposer(Protocol):
    """What the decode loop asks of a drafter. ``layer_ids``: the target layers whose features it
    reads (None: none); ``block_size``: tokens per target forward it wants next (1: no draft)."""
    layer_ids: list[int] | None
    block_size: int

    def start(self, prompt_ids: torch.Tensor, target_hidden: torch.Tensor | None) -> None:
        """After prefill: the prompt and its features (1, T, K*H)."""

    def propose(self, last_token: torch.Tensor, k: int) -> Draft:
        """A draft of depth k after ``last_token`` (1,): a :class:`ChainDraft` of k tokens, or a
        tree."""

    def accepted(self, block: torch.Tensor, n: int, position: int,
                 target_hidden: torch.Tensor | None) -> None:
        """The committed ``block`` (1, n+1) (last and the accepted drafts) sat at ``position``;
        ``target_hidden``: its features (1, n+1, K*H) when the proposer reads them."""


class DFlashProposer:
    """The paper's drafter as a :class:`Proposer`: ``block_size - 1`` drafts from one forward of a
    :class:`~dflash_lite.drafter.DFlashDrafter` over ``[last, MASK x (block_size - 1)]``."""

    # the kind of drafter this proposer runs (see baselines.EagleProposer)
    autoregressive = False

    def __init__(self, drafter, target, block_size: int | None = None, passes: int = 1,
                 shapes: Shapes = EAGER):
        check_compatible(drafter.config, target.config)
        if drafter.autoregressive != self.autoregressive:
            kind = {True: "an autoregressive", False: "a block"}
            raise ValueError(f"{type(self).__name__} needs {kind[self.autoregressive]} drafter; "
                             f"this one is {kind[drafter.autoregressive]} drafter")
        self.drafter, self.target = drafter, target
        self.block_size = drafter.config.block_size if block_size is None else block_size
        check_int("block_size", self.block_size, 1, drafter.config.max_block_size)
        check_int("passes", passes)
        self.layer_ids, self.passes = drafter.config.target_layer_ids, passes
        self.shapes = shapes                # what the loop runs this proposer's steps on

    def start(self, prompt_ids, target_hidden) -> None:
        self.cache = self.shapes.drafter_cache(self.drafter, prompt_ids.device)
        # (1, T, K*H) of positions 0..T-1
        self.new_context, self.new_context_start = target_hidden, 0

    def block_logits(self, last_token: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One drafter forward over ``[last, MASK x k]`` with the new context: the block (1, k+1)
        and the drafter's logits at its k masked slots (1, k, V). With fixed shapes the block is
        always the proposer's full block, and its first k drafts are read."""
        width = self.block_size if self.shapes.fixed else k + 1
        block = torch.full((1, width), self.drafter.config.mask_token_id, dtype=torch.long,
                           device=last_token.device)
        block[0, 0] = last_token                                        # [last, MASK x k]
        logits = self.shapes.draft(self.drafter, self.target, self.cache, block, self.new_context,
                                   self.new_context_start)
        return block[:, : k + 1], logits[:, :k]

    def propose(self, last_token: torch.Tensor, k: int):
        block, logits = self.block_logits(last_token, k)
        position = self.new_context_start + self.new_context.shape[1]   # where `last` sits
        # DFlash uses 1 pass; more is an experiment:
        for _ in range(self.passes - 1):
            # re-feed the draft instead of the masks
            block[0, 1:] = logits[0].argmax(dim=-1)
            logits = self.drafter.draft_logits(self.target, block, self.new_context[:, :0],
                                               position, self.cache)
        return ChainDraft(logits[0].argmax(dim=-1))                     # (k,), a point-mass draft

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        # the features of last + n accepted drafts join the drafter's context on the next propose
        self.new_context, self.new_context_start = target_hidden[:, : n + 1], position


# ============================================================================= the loop
@torch.inference_mode()
def steps(target, proposer: Proposer, input_ids: torch.Tensor, max_new_tokens: int,
          sampling: SamplingParams = SamplingParams(), stop_token_ids=(),
          generator: torch.Generator | PositionNoise | None = None, phase=no_phase):
    """Speculative decoding (paper section 3; docs/method.md#the-decode-loop), one :class:`Step` per
    target forward, each yielded as it is committed. ``phase(name)`` is an optional observer
    wrapped around each phase (:class:`dflash_lite.timing.PhaseTimer`). The proposer's ``shapes``
    (:mod:`dflash_lite.shapes`; default eager) say how wide each forward runs, and compile them.
    At temperature > 0 a :class:`~dflash_lite.acceptance.PositionNoise` as ``generator`` makes
    the output the target's own seeded sample, whatever was drafted
    (docs/method.md#seeded-sampling)."""
    shapes = getattr(proposer, "shapes", EAGER)
    generator = seeded(sampling, generator)
    stops, processors = set(stop_token_ids), sampling.processors()
    cache = shapes.target_cache(target, input_ids.shape[1] + max_new_tokens)
    # the prompt through the target; every prompt position's features to the drafter
    with phase("prefill"):
        logits, hidden = prefill(target, input_ids, cache, proposer.layer_ids)
        # (1,) the first new token
        last = choose_tokens(logits, sampling, processors, generator,
                             torch.tensor([input_ids.shape[1]]))
        proposer.start(input_ids, hidden)
    position = input_ids.shape[1]   # the target's cache holds 0..position-1
    emitted = 1
    stopped = int(last) in stops
    yield Step([int(last)], None, stopped)
    while not stopped and emitted < max_new_tokens:
        k = min(proposer.block_size, max_new_tokens - emitted) - 1      # never past the limit
        with phase("draft"):        # depth k after `last`: a chain or a tree (0: plain decoding)
            draft = proposer.propose(last, k) if k else ChainDraft(last[:0])
        with phase("verify"):       # ONE target forward scores `last` and every draft
            logits, hidden = draft.verify(target, last, cache, proposer.layer_ids, shapes)
        with phase("accept"):       # the path the target agrees with, then its own token:
            path, tokens = draft.accept(logits, sampling, processors, generator, position)
            hidden = draft.keep(cache, position, path, hidden)   # both caches keep the path
            block = torch.tensor([[int(last)] + tokens[:-1]], device=last.device)   # (1, n+1)
            proposer.accepted(block, len(path) - 1, position, hidden)
        new, stopped = cut_at_stop(tokens, stops)   # a stop token ends the output there
        position += len(path)
        emitted += len(new)
        last = block.new_tensor([tokens[-1]])
        yield Step(new, len(path), stopped)


def cut_at_stop(tokens: list[int], stops: set[int]) -> tuple[list[int], bool]:
    """``tokens`` up to and including the first stop token, and whether there was one."""
    hit = stops & set(tokens)
    return (tokens[: min(tokens.index(s) for s in hit) + 1], True) if hit else (tokens, False)


def generate(target, proposer: Proposer, input_ids: torch.Tensor, max_new_tokens: int,
             sampling: SamplingParams = SamplingParams(), stop_token_ids=(),
             generator: torch.Generator | PositionNoise | None = None) -> GenerationResult:
    """Speculative decoding to the end, checked and timed: every :class:`Step` collected."""
    check_request(target, input_ids, max_new_tokens)
    generator = seeded(sampling, generator)
    timer = PhaseTimer(target.device)
    result = GenerationResult(input_ids.shape[1], phase_times=timer.seconds,
                              seed=generator.seed if isinstance(generator, PositionNoise) else None)
    for step in steps(target, proposer, input_ids.to(target.device), max_new_tokens, sampling,
                      stop_token_ids, generator, timer):
        result.record(step)
    return result
