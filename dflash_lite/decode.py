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

import copy
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
from .shapes import EAGER, Shapes, pad
from .target import context_features
from .timing import PhaseTimer, no_phase
from .validate import check_int


class Step(NamedTuple):
    """What one step of :func:`steps` yields, for one request of the batch."""
    # committed by this step; a stop token, if hit, is the last one
    tokens: list[int]
    # tokens the step's target forward committed (n + 1); None: prefill's
    committed: int | None
    stopped: bool                     # a stop token ended the output
    row: int = 0                      # which prompt of the batch
    # accepted tokens given back by the naive rollback (``rollback="shortest"``)
    discarded: int = 0


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
    # accepted tokens the naive rollback gave back (0 for the per-row loop)
    discarded: int = 0
    started: float = field(default_factory=time.perf_counter, repr=False)

    def record(self, step: Step) -> None:
        self.tokens += step.tokens
        self.token_times += [time.perf_counter() - self.started] * len(step.tokens)
        if step.committed is not None:
            self.acceptance_lengths.append(step.committed)
        self.discarded += step.discarded
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
    vocab = model.get_input_embeddings().num_embeddings
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise ValueError(f"input_ids holds token id {bad}, outside the target's vocabulary "
                         f"of {vocab} (0..{vocab - 1})")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens "
                         f"({max_new_tokens}) exceeds the target's context of {limit} tokens")


def token_ids(prompt) -> torch.Tensor:
    """A prompt as a long tensor; one line for ids that are not integers (a float tensor would be
    truncated without a word)."""
    if isinstance(prompt, torch.Tensor):
        if prompt.is_floating_point() or prompt.is_complex() or prompt.dtype == torch.bool:
            raise ValueError(f"input_ids must hold integer token ids, got a {prompt.dtype} tensor")
        return prompt.long()
    if hasattr(prompt, "__array__") and not isinstance(prompt, (list, tuple)):
        return token_ids(torch.as_tensor(prompt))
    values = list(prompt) if isinstance(prompt, (list, tuple)) else None
    if values is None or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ValueError("input_ids must be a tensor or a list of integer token ids, "
                         f"got {type(prompt).__name__}")
    return torch.tensor(values, dtype=torch.long)


def as_batch(input_ids, max_new_tokens, stop_token_ids=()):
    """A request or a batch, as rows: the prompts (each (1, T_r)), each row's ``max_new_tokens``
    and stop tokens. ``input_ids``: one (1, T) tensor (a single request) or a list of them (or of
    1-D tensors or token lists); ``max_new_tokens`` and ``stop_token_ids`` are shared, or given
    per row as lists of the batch's length."""
    rows = [input_ids] if isinstance(input_ids, torch.Tensor) else list(input_ids)
    if not rows:
        raise ValueError("the batch is empty: give at least one prompt")
    prompts = [token_ids(p) for p in rows]
    prompts = [p.view(1, -1) if p.ndim == 1 else p for p in prompts]
    limits = list(max_new_tokens) if isinstance(max_new_tokens, (list, tuple)) \
        else [max_new_tokens] * len(prompts)
    stops = list(stop_token_ids)
    nested = [isinstance(s, (list, tuple, set, frozenset)) for s in stops]
    if any(nested) and not all(nested):
        raise ValueError("stop_token_ids mixes token ids and per-row lists: give one list of ids "
                         "for every row, or one list per row")
    per_row = bool(stops) and all(nested)
    for s in (stops if per_row else [stops]):
        for t in s:
            if isinstance(t, bool) or not isinstance(t, (int, torch.Tensor)) or (
                    isinstance(t, torch.Tensor) and (t.numel() != 1 or t.is_floating_point())):
                raise ValueError(f"stop_token_ids: {t!r} is not a token id (an integer)")
    stops = ([{int(t) for t in s} for s in stops] if per_row
             else [{int(t) for t in stops}] * len(prompts))
    if len(limits) != len(prompts) or len(stops) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts, but max_new_tokens or stop_token_ids for "
                         f"{len(limits)} / {len(stops)}")
    return prompts, limits, stops


def new_cache(model, length: int | None = None) -> SlotCache:
    """The target's cache for one request (:class:`~dflash_lite.cache.SlotCache`, eager)."""
    return SlotCache.for_target(model, length)


@torch.inference_mode()
def prefill(target, input_ids: torch.Tensor, cache: SlotCache, layer_ids: list[int] | None = None,
            lengths: list[int] | None = None):
    """The prompt through the target, filling ``cache`` from slot 0: the last position's logits
    (1, V), and the tapped features of every prompt position (1, T, K*H) when ``layer_ids`` asks.
    A batch: ``input_ids`` (R, T) padded on the right to the longest of ``lengths``; (R, V) at
    each row's own last position, (R, T, K*H), and each row's write position at its length."""
    cache.rewind(0)
    if lengths is None:
        return verify(target, input_ids, cache, layer_ids, logits_to_keep=1)
    last = torch.tensor(lengths, device=input_ids.device) - 1
    logits, features = verify_batch(target, input_ids, cache, layer_ids, logits_to_keep=last,
                                    lengths=last + 1)
    cache.rewind(list(lengths))
    return logits[torch.arange(len(lengths)), torch.arange(len(lengths))], features


def verify(target, block: torch.Tensor, cache: SlotCache, layer_ids: list[int] | None,
           logits_to_keep: int = 0, depths: torch.Tensor | None = None,
           ancestors: torch.Tensor | None = None):
    """One target forward over ``block`` (1, W) written at the cache's write position: logits
    (W, V) (the last ``logits_to_keep`` when given) and the tapped features (1, W, K*H) or None.
    A chain by default; a tree gives each row's ``depths`` (W,) and ``ancestors`` (W, W)."""
    logits, features = verify_batch(target, block, cache, layer_ids, logits_to_keep, depths,
                                    ancestors)
    return logits[0], features


def verify_batch(target, block: torch.Tensor, cache: SlotCache, layer_ids: list[int] | None,
                 logits_to_keep=0, depths: torch.Tensor | None = None,
                 ancestors: torch.Tensor | None = None, lengths: torch.Tensor | None = None):
    """:func:`verify` of a batch: ``block`` (R, W), each row at its own write position, with
    ``depths`` and ``ancestors`` shared or per row ((R, W), (R, W, W)); logits (R, W, V) and
    features (R, W, K*H). ``lengths``: a padded prompt batch (:meth:`SlotCache.verify_mask`)."""
    window = getattr(target.config, "sliding_window", None) \
        if "sliding_attention" in (getattr(target.config, "layer_types", None) or ()) else None
    masks = cache.verify_mask(block.shape[1], ancestors, depths, window, lengths)
    out = target(block, attention_mask=masks if window is not None else masks["full_attention"],
                 position_ids=cache.positions(block.shape[1], depths),
                 past_key_values=cache, use_cache=True, logits_to_keep=logits_to_keep,
                 output_hidden_states=([i + 1 for i in layer_ids] if layer_ids is not None
                                       else False))
    features = context_features(out.hidden_states, layer_ids) if layer_ids is not None else None
    return out.logits, features


def verify_on(shapes: Shapes, target, ids: torch.Tensor, cache: SlotCache, layer_ids,
              depths: torch.Tensor | None = None, ancestors: torch.Tensor | None = None):
    """:func:`verify` of a chain (or, with ``depths`` and ``ancestors``, a tree) as ``shapes`` run
    it: as wide as it is, or padded to a bucket and compiled (one function per set of taps and
    batch size). ``ids`` (R, W): logits (R, W, V) for a batch, (W, V) for one row."""
    logits, features = shapes.verify(
        lambda i, d, a: verify_batch(target, i, cache, layer_ids, depths=d, ancestors=a),
        ids, depths, ancestors, key=("verify", tuple(layer_ids or ())))
    return (logits[0] if ids.shape[0] == 1 else logits), features


def verify_rows(shapes: Shapes, target, drafts, last: torch.Tensor, cache: SlotCache, layer_ids):
    """ONE target forward over every row's draft (each :meth:`ChainDraft.layout`), padded to the
    widest (:func:`dflash_lite.shapes.pad`): logits (R, W, V), features (R, W, K*H) or None, and
    each row's own width (its first positions of both)."""
    layouts = [d.layout(last[r: r + 1]) for r, d in enumerate(drafts)]
    widths = [len(ids) for ids, _, _ in layouts]
    if len(layouts) == 1:
        logits, features = verify_on(shapes, target, layouts[0][0][None], cache, layer_ids,
                                     *layouts[0][1:])
        return logits[None], features, widths
    padded = [pad(ids[None], depths, ancestors, max(widths)) for ids, depths, ancestors in layouts]
    ids, depths, ancestors = (torch.cat(part) if i == 0 else torch.stack(part)
                              for i, part in enumerate(zip(*padded)))
    return (*verify_on(shapes, target, ids, cache, layer_ids, depths, ancestors), widths)


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
    A draft knows how it is laid out for the verify and how it is accepted;
    :class:`dflash_lite.tree.DraftTree` is the other shape, and :func:`steps` calls the same two
    methods on either."""
    tokens: torch.Tensor                    # (k,)
    q: torch.Tensor | None = None           # (k, V), or None for a point-mass draft

    def layout(self, last: torch.Tensor):
        """What ONE target forward scores: [last, d1..dk] (k+1,), at consecutive positions (depths
        None) under a causal mask (ancestors None); row i of its logits is the target's choice
        after token i."""
        return torch.cat([last, self.tokens]), None, None

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


class Draft(Protocol):
    """What :func:`steps` asks of a draft: :class:`ChainDraft` or
    :class:`dflash_lite.tree.DraftTree`. The loop keeps the accepted path in the target's cache
    itself (:meth:`~dflash_lite.cache.SlotCache.keep_paths`)."""

    def layout(self, last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None,
                                                  torch.Tensor | None]: ...

    def accept(self, target_logits, sampling: SamplingParams, processors, generator,
               position: int) -> tuple[list[int], list[int]]: ...


# ============================================================================= proposers
class Proposer(Protocol):
    """What the decode loop asks of a drafter, for one request. ``layer_ids``: the target layers
    whose features it reads (None: none); ``block_size``: tokens per target forward it wants next
    (1: no draft). A proposer that drafts a whole batch at once adds ``start_rows``,
    ``propose_rows``, ``accepted_rows`` and ``keep_rows`` (:class:`DFlashProposer`); any other is
    run on a batch one copy per row (:class:`RowProposers`)."""
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


def stack_rows(parts: list[torch.Tensor]) -> torch.Tensor:
    """(1, n_r, D) per row -> (R, max n_r, D), zero-padded on the right."""
    return torch.nn.utils.rnn.pad_sequence([p[0] for p in parts], batch_first=True)


class RowProposers:
    """Any :class:`Proposer` on a batch: one shallow copy per row, each drafting its own request
    (prompt lookup, the baselines, a proposer of your own); the target still verifies every row
    in one forward. A proposer with its own ``*_rows`` methods drafts the batch itself instead
    (:func:`rows_of`)."""

    def __init__(self, proposer, rows: int):
        if rows > 1 and isinstance(proposer, DFlashProposer) and proposer.shapes.fixed:
            raise ValueError(f"{type(proposer).__name__} drafts one request at a time on fixed "
                             "shapes; run a batch eager")
        self.proposers, self.layer_ids = [proposer], proposer.layer_ids

    @property
    def block_size(self) -> int:
        return max(p.block_size for p in self.proposers)

    def start_rows(self, prompt_ids, target_hidden, lengths) -> None:
        lengths = lengths or [prompt_ids.shape[1]]
        for r, length in enumerate(lengths):
            if r:           # copied after the first start: what it measured once is shared
                self.proposers.append(copy.copy(self.proposers[0]))
            self.proposers[r].start(prompt_ids[r: r + 1, :length], None if target_hidden is None
                                    else target_hidden[r: r + 1, :length])

    def propose_rows(self, last_token, k) -> list:
        depths = [k] * len(self.proposers) if isinstance(k, int) else k
        return [p.propose(last_token[r: r + 1], min(d, p.block_size - 1))
                if min(d, p.block_size - 1) > 0 else ChainDraft(last_token[:0])
                for r, (p, d) in enumerate(zip(self.proposers, depths))]

    def accepted_rows(self, blocks, positions, target_hidden) -> None:
        for p, block, position, hidden in zip(self.proposers, blocks, positions, target_hidden):
            if block.shape[1]:                      # a finished row kept as padding: nothing
                p.accepted(block, block.shape[1] - 1, position, hidden)

    def keep_rows(self, index: list[int]) -> None:
        self.proposers = [self.proposers[i] for i in index]


def rows_of(proposer, rows: int):
    """The batch interface of ``proposer``: its own ``*_rows`` methods, where the class that
    defines each of ``start``, ``propose`` and ``accepted`` defines its ``_rows`` form too (a
    subclass that overrides ``propose`` alone does not draft batches), else
    :class:`RowProposers`."""
    def native(name: str) -> bool:
        owner = next(c for c in type(proposer).__mro__ if name in vars(c))
        return f"{name}_rows" in vars(owner)
    if all(native(name) for name in ("start", "propose", "accepted")):
        return proposer
    return RowProposers(proposer, rows)


class DFlashProposer:
    """The paper's drafter as a :class:`Proposer`: ``block_size - 1`` drafts from one forward of a
    :class:`~dflash_lite.drafter.DFlashDrafter` over ``[last, MASK x (block_size - 1)]``. On a
    batch, one drafter forward drafts every row, each after its own committed features only."""

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
        self.start_rows(prompt_ids, target_hidden, None)

    def start_rows(self, prompt_ids, target_hidden, lengths) -> None:
        """``prompt_ids`` (R, T) padded on the right to the longest of ``lengths`` (None: one
        prompt, all of it) and their features (R, T, K*H)."""
        if lengths is not None and self.passes > 1:
            raise ValueError("more than one drafter pass drafts one request at a time")
        self.cache = self.shapes.drafter_cache(self.drafter, prompt_ids.device, prompt_ids.shape[0])
        # (R, C, K*H) of positions start..start+C-1; per row, its first `lengths` are real
        self.new_context, self.new_context_lengths = target_hidden, lengths
        self.new_context_start = 0 if lengths is None else [0] * len(lengths)

    def block_logits(self, last_token: torch.Tensor, k) -> tuple[torch.Tensor, torch.Tensor]:
        """One drafter forward over ``[last, MASK x k]`` per row (``last_token`` (R,)) with the new
        context: the block (R, k+1) and the drafter's logits at its k masked slots (R, k, V).
        ``k``: one depth, or one per row (each row drafts as a block of its own k + 1 would; the
        widest sets the shapes). With fixed shapes the block is always the proposer's full
        block, and its first k drafts are read."""
        last_token = last_token.reshape(-1)                 # (R,); a 0-d token is one row
        depths = [k] * last_token.shape[0] if isinstance(k, int) else list(k)
        k = max(depths)
        width = self.block_size if self.shapes.fixed else k + 1
        block = torch.full((last_token.shape[0], width), self.drafter.config.mask_token_id,
                           dtype=torch.long, device=last_token.device)
        block[:, 0] = last_token                                        # [last, MASK x k]
        lengths = None if all(d + 1 == width for d in depths) else [d + 1 for d in depths]
        logits = self.shapes.draft(self.drafter, self.target, self.cache, block, self.new_context,
                                   self.new_context_start, self.new_context_lengths, lengths)
        return block[:, : k + 1], logits[:, :k]

    def propose(self, last_token: torch.Tensor, k: int):
        return self.propose_rows(last_token, [k])[0]

    def propose_rows(self, last_token: torch.Tensor, k) -> list[ChainDraft]:
        """Per row a chain of its depth ``k[r]`` (a list, or one int for every row)."""
        last_token = last_token.reshape(-1)
        depths = [k] * last_token.shape[0] if isinstance(k, int) else list(k)
        block, logits = self.block_logits(last_token, depths)
        # DFlash uses 1 pass; more is an experiment (one request only):
        for _ in range(self.passes - 1):
            position = self.new_context_start + self.new_context.shape[1]   # where `last` sits
            # re-feed the draft instead of the masks
            block[0, 1:] = logits[0].argmax(dim=-1)
            logits = self.drafter.draft_logits(self.target, block, self.new_context[:, :0],
                                               position, self.cache)
        # (k_r,) each, point masses
        return [ChainDraft(row[:d]) for row, d in zip(logits.argmax(dim=-1), depths)]

    def accepted(self, block, n: int, position: int, target_hidden) -> None:
        # the features of last + n accepted drafts join the drafter's context on the next propose
        self.new_context, self.new_context_start = target_hidden[:, : n + 1], position

    def accepted_rows(self, blocks, positions, target_hidden) -> None:
        """Per row: the committed block (1, n_r+1) at ``positions[r]`` and its features."""
        if self.new_context_lengths is None:        # one request
            return DFlashProposer.accepted(self, blocks[0], blocks[0].shape[1] - 1, positions[0],
                                           target_hidden[0])
        self.new_context = stack_rows(target_hidden)
        self.new_context_start = list(positions)
        self.new_context_lengths = [h.shape[1] for h in target_hidden]

    def keep_rows(self, index: list[int]) -> None:
        """Only the rows ``index`` stay (finished requests leave the batch)."""
        self.cache.keep_rows(index)
        self.new_context = self.new_context[index]
        self.new_context_start = [self.new_context_start[i] for i in index]
        self.new_context_lengths = [self.new_context_lengths[i] for i in index]


# ============================================================================= the loop
ROLLBACKS = ("row", "shortest")


@torch.inference_mode()
def steps(target, proposer: Proposer, input_ids, max_new_tokens,
          sampling: SamplingParams = SamplingParams(), stop_token_ids=(),
          generator: torch.Generator | PositionNoise | None = None, phase=no_phase,
          rollback: str = "row"):
    """Speculative decoding (paper section 3; docs/method.md#the-decode-loop) of one request or a
    batch (:func:`as_batch`), one :class:`Step` per request per target forward, each yielded as it
    is committed. Every row keeps its own write position, accepted length, drafter context, stop
    tokens and ``max_new_tokens``; a finished row leaves the batch (on fixed shapes it stays as a
    padding row that commits nothing). ``rollback="shortest"`` is the naive batch rule, a
    teaching baseline: every row keeps only the batch's shortest accepted path
    (docs/method.md#batches). ``phase(name)`` is an optional observer wrapped around each phase
    (:class:`dflash_lite.timing.PhaseTimer`). The proposer's ``shapes`` (:mod:`dflash_lite.shapes`;
    default eager) say how wide each forward runs, and compile them. At temperature > 0 a
    :class:`~dflash_lite.acceptance.PositionNoise` as ``generator`` makes the output the target's
    own seeded sample, whatever was drafted (docs/method.md#seeded-sampling)."""
    if rollback not in ROLLBACKS:
        raise ValueError(f"rollback must be one of {', '.join(ROLLBACKS)}, got {rollback!r}")
    shapes = getattr(proposer, "shapes", EAGER)
    generator, processors = seeded(sampling, generator), sampling.processors()
    prompts, limits, stops = as_batch(input_ids, max_new_tokens, stop_token_ids)
    lengths, rows = [p.shape[1] for p in prompts], rows_of(proposer, len(prompts))
    batch = lengths if len(prompts) > 1 else None
    cache = shapes.target_cache(target, max(map(sum, zip(lengths, limits))), len(prompts))
    # the prompts through the target; every prompt position's features to the drafter
    with phase("prefill"):
        ids = stack_rows([p[..., None] for p in prompts])[..., 0].to(target.device)   # (R, T)
        logits, hidden = prefill(target, ids, cache, rows.layer_ids, batch)
        last = choose_tokens(logits, sampling, processors, generator, torch.tensor(lengths))
        rows.start_rows(ids, hidden, batch)
    # per batch row: its prompt (None: finished, kept as padding), where `last` sits, and what
    # the last step committed
    live, position, emitted = list(range(len(prompts))), list(lengths), [0] * len(prompts)
    new, paths, discarded = [[t] for t in last.tolist()], [None] * len(prompts), [0] * len(prompts)
    while True:
        finished = []
        for r, row in enumerate(live):
            if row is None:
                continue
            piece, stopped = cut_at_stop(new[r], stops[row])   # a stop token ends the output there
            piece = piece[: limits[row] - emitted[row]]
            emitted[row] += len(piece)
            yield Step(piece, paths[r] and len(paths[r]), stopped, row, discarded[r])
            if stopped or emitted[row] >= limits[row]:
                finished.append(r)
        if finished and not shapes.fixed:               # the finished rows leave the batch
            index = [r for r in range(len(live)) if r not in finished]
            if index and len(index) < len(live):
                cache.keep_rows(index)
                rows.keep_rows(index)
            live, position, last = [live[r] for r in index], [position[r] for r in index], \
                last[index]
        for r in finished if shapes.fixed else ():
            live[r] = None
        if all(row is None for row in live):
            return
        # per row: depth k after `last`, never past its own max_new_tokens (0: plain decoding)
        k = [min(rows.block_size, limits[i] - emitted[i]) - 1 if i is not None else 0
             for i in live]
        with phase("draft"):        # a chain or a tree per row
            drafts = rows.propose_rows(last, k) if max(k) else [ChainDraft(last[:0])] * len(live)
        with phase("verify"):       # ONE target forward scores every row's `last` and drafts
            logits, hidden, widths = verify_rows(shapes, target, drafts, last, cache,
                                                 rows.layer_ids)
        with phase("accept"):       # per row, the path the target agrees with, then its own token
            paths, new = map(list, zip(*(
                draft.accept(logits[r, : widths[r]], sampling, processors, generator, position[r])
                if live[r] is not None else ([], []) for r, draft in enumerate(drafts))))
            discarded = [0] * len(live)
            if rollback == "shortest":          # the naive rule: every row to the shortest path
                shortest = min(len(p) for p in paths if p)
                discarded = [max(len(p) - shortest, 0) for p in paths]
                paths, new = [p[:shortest] for p in paths], [t[:shortest] for t in new]
            cache.keep_paths(position, paths)                   # both caches keep the paths
            kept = [None if hidden is None else hidden[r: r + 1, : len(p)]
                    if p == list(range(len(p))) else hidden[r: r + 1, p]
                    for r, p in enumerate(paths)]
            blocks = [torch.tensor([[int(last[r])] + t[: len(p) - 1]] if p else [[]],
                                   dtype=torch.long, device=last.device)        # (1, n+1)
                      for r, (p, t) in enumerate(zip(paths, new))]
            rows.accepted_rows(blocks, position, kept)
        position = [a + len(p) for a, p in zip(position, paths)]
        last = torch.tensor([t[-1] if t else int(last[r]) for r, t in enumerate(new)],
                            device=last.device)


def cut_at_stop(tokens: list[int], stops: set[int]) -> tuple[list[int], bool]:
    """``tokens`` up to and including the first stop token, and whether there was one."""
    hit = stops & set(tokens)
    return (tokens[: min(tokens.index(s) for s in hit) + 1], True) if hit else (tokens, False)


def generate(target, proposer: Proposer, input_ids, max_new_tokens,
             sampling: SamplingParams = SamplingParams(), stop_token_ids=(),
             generator: torch.Generator | PositionNoise | None = None, rollback: str = "row"):
    """Speculative decoding to the end, checked and timed: every :class:`Step` collected, in a
    :class:`GenerationResult` (a list of them, one per prompt, for a batch: :func:`as_batch`)."""
    prompts, limits, stops = as_batch(input_ids, max_new_tokens, stop_token_ids)
    for prompt, limit in zip(prompts, limits):
        check_request(target, prompt, limit)
    generator = seeded(sampling, generator)
    timer = PhaseTimer(target.device)
    results = [GenerationResult(p.shape[1], phase_times=timer.seconds,
                                seed=generator.seed if isinstance(generator, PositionNoise)
                                else None) for p in prompts]
    batch = [p.to(target.device) for p in prompts]
    for step in steps(target, proposer, batch[0] if isinstance(input_ids, torch.Tensor) else batch,
                      limits, sampling, stops, generator, timer, rollback):
        results[step.row].record(step)
    return results[0] if isinstance(input_ids, torch.Tensor) else results
