"""Speculative decoding as phases (docs/method.md#the-decode-loop): :func:`steps`, the whole loop
on one screen over a :class:`Batch` of one :class:`Request` per prompt, and :func:`generate`, which
runs it to the end into a :class:`GenerationResult`. DFlash and every baseline
(:mod:`dflash_lite.decoding.baselines`) are a :class:`~dflash_lite.decoding.proposers.Proposer`."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ..validate import check_int
from .acceptance import PositionNoise, SamplingParams, choose_tokens
from .cache import SlotCache
from .drafts import ChainDraft, Draft, accept  # noqa: F401  (accept: the chain's rule, public)
from .proposers import DFlashProposer, PerRow, Proposer, stack_padded  # noqa: F401  (public)
from .shapes import EAGER, Shapes, pad
from .target import context_features
from .timing import PhaseTimer


class Step(NamedTuple):
    """What one step of :func:`steps` yields, for one request of the batch."""
    tokens: list[int]             # committed by this step; a stop token, if hit, is the last one
    committed: int | None         # tokens its target forward committed (n + 1); None: prefill's
    stopped: bool                 # a stop token ended the output
    row: int = 0                  # which prompt of the batch
    discarded: int = 0            # accepted tokens given back by rollback="shortest"


@dataclass
class GenerationResult:
    """What one generation produced and how long each part took (seconds), from :func:`steps`."""
    prompt_length: int
    tokens: list[int] = field(default_factory=list)        # new; a stop token, if hit, is last
    token_times: list[float] = field(default_factory=list)  # seconds from start to each token
    acceptance_lengths: list[int] = field(default_factory=list)  # committed per target forward
    phase_times: dict[str, float] = field(default_factory=dict)  # prefill, draft, verify, accept
    stop_reason: str = "max_new_tokens"                     # or "stop_token"
    seed: int | None = None                 # a seeded sampled run's seed: it replays the output
    discarded: int = 0                      # accepted tokens rollback="shortest" gave back
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
        lengths = self.acceptance_lengths
        return sum(lengths) / len(lengths) if lengths else None


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
        raise ValueError(f"input_ids holds token id {low if low < 0 else high}, outside the "
                         f"target's vocabulary of {vocab} (0..{vocab - 1})")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens "
                         f"({max_new_tokens}) exceeds the target's context of {limit} tokens")


def token_ids(prompt) -> torch.Tensor:
    """A prompt as a long tensor; one line for non-integer ids (a cast would truncate floats)."""
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
    prompts = [p.view(1, -1) if p.ndim == 1 else p for p in map(token_ids, rows)]
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
    """The target's eager :class:`~dflash_lite.decoding.cache.SlotCache` for one request."""
    return SlotCache.for_target(model, length)


@torch.inference_mode()
def prefill(target, ids: torch.Tensor, cache: SlotCache, layer_ids: list[int] | None = None,
            lengths: list[int] | None = None):
    """The prompts through the target, filling ``cache`` from slot 0: ``ids`` (R, T) padded on
    the right to the longest of ``lengths`` (None: every row all T). The logits at each row's own
    last position (R, V), the tapped features of every position (R, T, K*H) when ``layer_ids``
    asks, and each row's write position at its length."""
    cache.rewind(0)
    rows, width = ids.shape
    lengths = [width] * rows if lengths is None else lengths
    last = torch.tensor(lengths, device=ids.device) - 1
    # the head over each row's own last position only: the target's own head at the last position,
    # and for rows that end earlier, applied to the final norm's output (a hook) of the same forward
    ragged = min(lengths) < width
    decoder = target.get_decoder() if ragged and hasattr(target, "get_decoder") else None
    norm = getattr(decoder, "norm", None)
    normed = []
    hook = None if norm is None else norm.register_forward_hook(
        lambda module, args, out: normed.append(out))
    try:            # without a norm to hook: every row at each last position, (R, R, V)
        logits, features = verify(target, ids, cache, layer_ids,
                                  logits_to_keep=last if ragged and hook is None else 1,
                                  lengths=last + 1 if ragged else None)
    finally:
        if hook is not None:
            hook.remove()
    cache.rewind(list(lengths))
    index = torch.arange(rows, device=ids.device)
    if hook is not None:
        return target.get_output_embeddings()(normed[-1][index, last]).to(logits.dtype), features
    return (logits[index, index] if ragged else logits[:, -1]), features


def verify(target, block: torch.Tensor, cache: SlotCache, layer_ids: list[int] | None,
           logits_to_keep=0, depths: torch.Tensor | None = None,
           ancestors: torch.Tensor | None = None, lengths: torch.Tensor | None = None):
    """One target forward over ``block`` (R, W), each row written at its own write position: logits
    (R, W, V) (the last ``logits_to_keep`` when given) and the tapped features (R, W, K*H) or None.
    A chain by default; a tree gives ``depths`` ((W,) or (R, W)) and ``ancestors`` ((W, W) or
    (R, W, W)). ``lengths``: a padded prompt batch (:meth:`SlotCache.verify_mask`)."""
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


class Verified(NamedTuple):
    """What one verify of every row's draft gives (:func:`verify_drafts`)."""
    ids: torch.Tensor                   # (R, W): the tokens it scored, each row's layout, padded
    logits: torch.Tensor                # (R, W, V): the target's
    features: torch.Tensor | None       # (R, W, K*H): the tapped features, or None
    widths: list[int]                   # each row's own width (its first positions of each)

    def greedy_reads(self) -> list[list[int]]:
        """Greedy, per row: how many drafts of its layout, read as a chain, equal the target's
        argmax before them, then the argmax at each of its W positions; ONE host read for all."""
        choices = self.logits.argmax(dim=-1)                                       # (R, W)
        read = torch.cat([self.ids.to(choices.dtype), choices]).tolist()   # (2R, W): the one read
        # per row: the first slot n whose next id is not the target's choice there (else all agree)
        return [[next((n for n in range(w - 1) if ids[n + 1] != chosen[n]), w - 1), *chosen]
                for ids, chosen, w in zip(read, read[len(choices):], self.widths)]


def verify_drafts(shapes: Shapes, target, drafts: list[Draft], last: torch.Tensor,
                  cache: SlotCache, layer_ids) -> Verified:
    """ONE target forward over every row's draft (its layout after ``last[r]``), padded to the
    widest and run as ``shapes`` run it; drafts of one kind with ``layouts`` laid out at once."""
    kind = type(drafts[0])
    if hasattr(kind, "layouts") and all(type(d) is kind for d in drafts):
        ids, depths, ancestors, widths = kind.layouts(last, drafts)
    else:
        layouts = [d.layout(last[r: r + 1]) for r, d in enumerate(drafts)]
        widths = [len(ids) for ids, _, _ in layouts]
        padded = [pad(i[None], d, a, max(widths)) for i, d, a in layouts]
        ids, depths, ancestors = (torch.cat(part) if n == 0 else torch.stack(part)
                                  for n, part in enumerate(zip(*padded)))
    logits, features = shapes.verify(
        lambda i, d, a: verify(target, i, cache, layer_ids, depths=d, ancestors=a),
        ids, depths, ancestors, key=("verify", tuple(layer_ids or ())))
    return Verified(ids, logits, features, widths)


def seeded(sampling: SamplingParams, generator):
    """The generator a run samples with: ``generator``, or with none given and a
    ``sampling.seed``, that seed's :class:`~dflash_lite.decoding.acceptance.PositionNoise`."""
    if generator is None and sampling.seed is not None and not sampling.greedy:
        return PositionNoise(sampling.seed)
    return generator


# ============================================================================= the batch
@dataclass
class Request:
    """One prompt of the batch, from prefill to its last token: what :func:`steps` keeps per row."""
    index: int                      # which prompt of the batch
    limit: int                      # its max_new_tokens
    stops: set[int]
    position: int                   # where its last committed token sits
    new: list[int]                  # what the last step committed, not yet yielded
    path: list[int] | None = None   # the last step's accepted path (None: prefill's)
    discarded: int = 0              # accepted drafts the naive rollback gave back
    emitted: int = 0
    finished: bool = False          # stopped or at its limit (on fixed shapes, padding)

    def emit(self) -> Step:
        """What the last step committed, up to and including a stop token, within the limit."""
        hit = self.stops & set(self.new)                # the first stop token ends the output
        piece = self.new[: min(self.new.index(s) for s in hit) + 1] if hit else self.new
        piece = piece[: self.limit - self.emitted]
        self.emitted += len(piece)
        self.finished = bool(hit) or self.emitted >= self.limit
        return Step(piece, None if self.path is None else len(self.path), bool(hit), self.index,
                    self.discarded)


class Batch:
    """The rows of :func:`steps`, a :class:`Request` each, and their last tokens ``last`` (R,) on
    the device; finished rows leave in :meth:`leave` only (on fixed shapes, stay as padding)."""

    def __init__(self, requests: list[Request], last: torch.Tensor, fixed: bool):
        self.rows, self.last, self.fixed = requests, last, fixed

    def emit(self):
        yield from (request.emit() for request in self.rows if not request.finished)

    def leave(self, cache: SlotCache, proposer: Proposer) -> bool:
        """Finished rows leave; whether any row is left to decode."""
        live = [i for i, request in enumerate(self.rows) if not request.finished]
        if live and len(live) < len(self.rows) and not self.fixed:
            cache.keep(live)
            proposer.keep(live)
            self.rows = [self.rows[i] for i in live]
            self.last = self.last[live]
        return bool(live)

    def depths(self, block_size: int) -> list[int]:
        """Per row, the most drafts after ``last`` within its max_new_tokens (0: plain, padding)."""
        return [0 if r.finished else min(block_size, r.limit - r.emitted) - 1 for r in self.rows]

    def paths(self, drafts, verified: Verified, sampling, processors, generator, rollback: str):
        """Per row, the path the target agrees with and the tokens it commits (greedy, every
        point-mass draft's from one host read); padding rows commit nothing.
        ``rollback="shortest"``: every row keeps the batch's shortest path."""
        reads = verified.greedy_reads() if sampling.greedy else None
        verdicts = []
        for r, (request, draft) in enumerate(zip(self.rows, drafts)):
            if request.finished:
                verdicts.append(([], []))
            elif reads and hasattr(draft, "accept_read") and getattr(draft, "q", None) is None:
                verdicts.append(draft.accept_read(reads[r]))
            else:
                verdicts.append(draft.accept(verified.logits[r, : verified.widths[r]], sampling,
                                             processors, generator, request.position))
        paths, new = zip(*verdicts)
        shortest = min(len(p) for p in paths if p) if rollback == "shortest" else None
        for request, path in zip(self.rows, paths):
            request.discarded = max(len(path) - shortest, 0) if shortest else 0
        return [p[:shortest] for p in paths], [t[:shortest] for t in new]

    def commit(self, paths, new, features):
        """Each row moves past its accepted path, its committed tokens to yield next. Returns, per
        row, the committed block (1, n+1), where it sat and its features (``Proposer.accepted``)."""
        lasts, positions = self.last.tolist(), [r.position for r in self.rows]    # one read
        sizes, device = [len(path) for path in paths], self.last.device
        # every row's block (1, n_r + 1) as a view of one tensor; its path's features as a view
        # where the path is a chain (a slice costs less than gathering every row at once)
        blocks = list(torch.tensor([[t for last, path, tokens in zip(lasts, paths, new) if path
                                     for t in [last] + tokens[: len(path) - 1]]],
                                   dtype=torch.long, device=device).split(sizes, dim=1))
        kept = [None if features is None else features[r: r + 1, : len(path)]
                if path == list(range(len(path))) else features[r: r + 1, path]
                for r, path in enumerate(paths)]
        for request, path, tokens in zip(self.rows, paths, new):
            request.path = path
            request.new = tokens
            request.position += len(path)
        self.last = torch.tensor([t[-1] if t else last for t, last in zip(new, lasts)],
                                 device=self.last.device)
        return blocks, positions, kept


def check_proposer(proposer) -> None:
    """One line for a proposer of one request given where a batch proposer is needed."""
    if not all(callable(getattr(proposer, name, None))
               for name in ("start", "propose", "accepted", "keep")):
        raise ValueError(f"{type(proposer).__name__} is not a batch proposer (start, propose, "
                         "accepted and keep): a proposer of one request runs as "
                         f"PerRow({type(proposer).__name__}(...))")


# ============================================================================= the loop
@torch.inference_mode()
def steps(target, proposer: Proposer, input_ids, max_new_tokens,
          sampling: SamplingParams = SamplingParams(), stop_token_ids=(),
          generator: torch.Generator | PositionNoise | None = None, phase=contextlib.nullcontext,
          rollback: str = "row"):
    """Speculative decoding (paper section 3) of a batch of prompts (:func:`as_batch`), one
    :class:`Step` per request per target forward, yielded as committed. ``rollback="shortest"``:
    the naive batch rule, a teaching baseline. ``phase(name)``: an observer around each phase
    (:class:`~dflash_lite.decoding.timing.PhaseTimer`). The proposer's ``shapes`` (default eager)
    say how each forward runs. ``generator``: a ``torch.Generator``, or a
    :class:`~dflash_lite.decoding.acceptance.PositionNoise` (docs/method.md#seeded-sampling)."""
    if rollback not in ("row", "shortest"):
        raise ValueError(f"rollback must be one of row, shortest, got {rollback!r}")
    check_proposer(proposer)
    shapes = getattr(proposer, "shapes", EAGER)
    generator, processors = seeded(sampling, generator), sampling.processors()
    prompts, limits, stops = as_batch(input_ids, max_new_tokens, stop_token_ids)
    lengths = [p.shape[1] for p in prompts]
    cache = shapes.target_cache(target, max(map(sum, zip(lengths, limits))), len(prompts))
    with phase("prefill"):      # the prompts through the target; their features to the drafter
        ids = stack_padded([p[..., None] for p in prompts])[..., 0].to(target.device)   # (R, T)
        logits, hidden = prefill(target, ids, cache, proposer.layer_ids, lengths)
        last = choose_tokens(logits, sampling, processors, generator, torch.tensor(lengths))
        proposer.start(ids, hidden, lengths)
    batch = Batch([Request(r, *row, [t]) for r, (*row, t) in
                   enumerate(zip(limits, stops, lengths, last.tolist()))], last, shapes.fixed)
    while True:
        yield from batch.emit()                 # what the last step committed, per request
        if not batch.leave(cache, proposer):
            return
        depths = batch.depths(proposer.block_size)
        with phase("draft"):        # a chain or a tree per row
            drafts = proposer.propose(batch.last, depths) if max(depths) \
                else [ChainDraft(batch.last[:0])] * len(depths)
        with phase("verify"):       # ONE target forward scores every row's `last` and drafts
            verified = verify_drafts(shapes, target, drafts, batch.last, cache, proposer.layer_ids)
        with phase("accept"):       # per row, the path the target agrees with, then its own token
            paths, new = batch.paths(drafts, verified, sampling, processors, generator, rollback)
            cache.keep_paths([r.position for r in batch.rows], paths)   # both caches keep them
            proposer.accepted(*batch.commit(paths, new, verified.features))


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
    seed = generator.seed if isinstance(generator, PositionNoise) else None
    results = [GenerationResult(p.shape[1], phase_times=timer.seconds, seed=seed) for p in prompts]
    for step in steps(target, proposer, [p.to(target.device) for p in prompts], limits, sampling,
                      stops, generator, timer, rollback):
        results[step.row].record(step)
    return results[0] if isinstance(input_ids, torch.Tensor) else results
