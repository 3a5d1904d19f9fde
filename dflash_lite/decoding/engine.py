"""Text in, text out: :class:`Engine`, on top of the decode loop (``python -m dflash_lite demo``).

>>> engine = Engine.from_pretrained("tiny")                 # shipped target + its shipped drafter
>>> engine.generate("Question: ...\\nAnswer:", max_new_tokens=64)
>>> for piece in engine.generate(prompt, stream=True): print(piece, end="")
>>> engine.generate([prompt_a, prompt_b])                    # one batch: a list of completions

With a drafter, the cost-aware policy (:mod:`dflash_lite.decoding.policy`) chooses each step's
draft unless ``block_size`` fixes it."""
from __future__ import annotations

import threading

import torch

from ..prompts import encode, encode_all
from ..validate import check_device, check_int, check_prompt, check_seed
from .acceptance import PositionNoise, SamplingParams
from .baselines import NoDraftProposer
from .checkpoints import check_mask_token, load_pair
from .decode import DFlashProposer, GenerationResult, check_request, steps
from .drafter import check_compatible
from .session import DEFAULT_OPTIONS, DEFAULT_TREE_SIZES, PolicySession
from .shapes import BUCKETS, EAGER, FixedShapes, Shapes
from .target import parse_dtype, stop_token_ids
from .timing import PhaseTimer

FIXED_MIN_LENGTH = 256      # the smallest fixed-shape cache Engine(compile=True) allocates (tokens)


class Engine:
    def __init__(self, target, tokenizer, drafter=None, block_size: int | None = None,
                 dtype: str | torch.dtype | None = None, chat_template: bool = True,
                 compile: bool = False):
        """``dtype``: cast the target and the drafter to it, as ``"bfloat16"`` (None: the drafter
        takes the target's). ``chat_template``: a prompt becomes a user turn of the tokenizer's
        chat template when it has one (:func:`dflash_lite.prompts.encode`). ``compile``: the same
        loop on fixed shapes with compiled forwards (:meth:`shapes_for`; CUDA graphs on CUDA);
        one call at a time."""
        self.target, self.tokenizer = target, tokenizer
        self.drafter, self.chat_template = drafter, chat_template
        if dtype is not None:
            target.to(parse_dtype(dtype))
        if drafter is not None:
            check_compatible(drafter.config, target.config, tokenizer.mask_token_id)
            if not drafter.autoregressive:
                check_mask_token(drafter.config.mask_token_id, tokenizer)
            drafter.to(device=target.device, dtype=target.dtype)
        largest = drafter.config.max_block_size if drafter is not None else None
        if block_size is not None:
            block_size = check_int("block_size", block_size, 1, largest)
        if drafter is None and block_size is not None and block_size > 1:
            raise ValueError(f"block_size {block_size} needs a drafter, and none was given "
                             "(pass drafter=DIR)")
        self.block_size = block_size if drafter is not None else 1     # None: the policy chooses
        self.stops = stop_token_ids(target, tokenizer)
        self.session = (PolicySession(drafter, target, DEFAULT_OPTIONS) if drafter is not None
                        else None)
        self.last_result: GenerationResult | None = None
        self.compile = compile
        self.shapes: Shapes = EAGER     # fixed shapes own their caches and compiled forwards
        self._busy = threading.Lock()

    def shapes_for(self, length: int) -> Shapes:
        """Eager shapes, or with ``compile`` fixed shapes whose caches hold ``length`` tokens
        (prompt + new) rounded up to a power of two from :data:`FIXED_MIN_LENGTH`, at most the
        target's context; kept, and rebuilt larger (compiled again) only when a call needs more:
        every slot costs memory and, compiled, attention over it."""
        if not self.compile:
            return EAGER
        if not isinstance(self.shapes, FixedShapes) or self.shapes.length < length:
            context = self.target.config.max_position_embeddings
            size = min(max(FIXED_MIN_LENGTH, 1 << (length - 1).bit_length()), context)
            buckets = {*BUCKETS, *(n + 1 for n in DEFAULT_TREE_SIZES)}
            self.shapes = FixedShapes(size, compile=True, buckets=buckets)
        return self.shapes

    @classmethod
    def from_pretrained(cls, target: str = "tiny", drafter: str | None = None, device: str = "cpu",
                        dtype: str | torch.dtype | None = None, **kwargs):
        """The target and a drafter: a local directory or a hub id (default: a shipped target's)."""
        model, tokenizer, draft = load_pair(target, drafter, check_device(device), dtype)
        return cls(model, tokenizer, draft, **kwargs)

    def encode(self, prompt: str) -> torch.Tensor:
        return encode(self.tokenizer, check_prompt(prompt), self.chat_template)

    def proposer(self, input_ids: torch.Tensor | list[torch.Tensor] | None = None,
                 shapes: Shapes = EAGER):
        """The proposer of a request, or of a batch (a list of ``input_ids``). Block size 1 or no
        drafter: plain decoding; a fixed block size: DFlash; by default the cost-aware policy of
        the engine's :class:`.session.PolicySession`, kept from call to call."""
        if self.drafter is None or self.block_size == 1:
            return NoDraftProposer(shapes)
        if self.block_size is not None:
            return DFlashProposer(self.drafter, self.target, self.block_size, shapes=shapes)
        batch = input_ids if isinstance(input_ids, list) else [input_ids]
        prompts = [x.to(self.target.device) for x in batch] if batch[0] is not None else None
        return self.session.proposer(prompts, shapes, rows=len(batch))

    def generate(self, prompt: str | list[str], max_new_tokens: int = 128,
                 temperature: float = 0.0, top_p: float | None = None, top_k: int | None = None,
                 stream: bool = False, seed: int | None = None):
        """The completion of ``prompt`` as a string, or with ``stream=True`` an iterator of text
        pieces that yields as blocks are accepted. ``self.last_result`` holds the timings and tau.
        ``seed`` fixes a sampled call (:class:`~dflash_lite.decoding.acceptance.PositionNoise`)
        whatever the policy drafts; without one a seed is drawn: ``self.last_result.seed``.
        A list of prompts is one batch (docs/method.md#batches): a list of completions, each the
        one its prompt gets alone when greedy, or with ``stream=True`` ``(row, piece)`` pairs;
        ``self.last_result`` is then a list, one result per prompt."""
        sampling = SamplingParams(temperature, top_k, top_p)
        check_int("max_new_tokens", max_new_tokens)
        if seed is not None:
            check_seed(seed)
        batch = isinstance(prompt, (list, tuple))
        if batch and not prompt:
            raise ValueError("the batch is empty: give at least one prompt")
        texts = [check_prompt(p) for p in (prompt if batch else [prompt])]
        input_ids = encode_all(self.tokenizer, texts, self.chat_template)   # one template render
        for ids in input_ids:                   # fail before anything is yielded
            check_request(self.target, ids, max_new_tokens)
        noise = None if sampling.greedy else PositionNoise(seed)    # a greedy call draws nothing
        pieces = self._stream(input_ids, max_new_tokens, sampling, noise, batch, stream)
        if stream:
            return pieces if batch else (piece for _, piece in pieces)
        texts = [""] * len(input_ids)
        for row, piece in pieces:
            texts[row] += piece
        return texts if batch else texts[0]

    def _stream(self, input_ids, max_new_tokens, sampling, generator, batch, stream):
        """``(row, piece)`` as steps commit tokens (with ``stream``; else each row's whole text
        at the end): the last pieces are what the whole output decodes to past what was shown."""
        if self.compile and not self._busy.acquire(blocking=False):
            raise RuntimeError("this Engine(compile=True) is serving another call (its fixed-shape "
                               "caches hold one request); use one Engine per thread")
        try:
            timer = PhaseTimer(self.target.device)
            seed = None if generator is None else generator.seed
            results = [GenerationResult(ids.shape[1], phase_times=timer.seconds, seed=seed)
                       for ids in input_ids]
            self.last_result = results if batch else results[0]
            shapes = self.shapes_for(max(ids.shape[1] for ids in input_ids) + max_new_tokens)
            proposer = self.proposer(input_ids, shapes)
            loop = steps(self.target, proposer, [ids.to(self.target.device) for ids in input_ids],
                         max_new_tokens, sampling, self.stops, generator, timer)
            texts = [IncrementalText(self.tokenizer) for _ in input_ids]
            for step in loop:
                results[step.row].record(step)
                if stream and (piece := texts[step.row].add(step.tokens)):
                    yield step.row, piece
            if self.session is not None and self.block_size is None:
                # the next call starts from here (one request: with its text, for the drift check)
                self.session.finished(proposer, None if len(input_ids) > 1 else torch.cat(
                    [input_ids[0], torch.tensor([results[0].tokens])], dim=1))
            for row, result in enumerate(results):
                text = self.tokenizer.decode(result.tokens, skip_special_tokens=True)
                if len(text) > texts[row].shown:
                    yield row, text[texts[row].shown:]
        finally:
            if self.compile:
                self._busy.release()


class IncrementalText:
    """One output's text as its tokens arrive, decoding at each :meth:`add` only the tokens since
    the last piece, with the piece before them as context (a tokenizer may decode a token alone
    without its leading space), not the whole output again: linear in the output's length."""

    def __init__(self, tokenizer):
        self.tokenizer, self.tokens = tokenizer, []
        self.context = self.read = self.shown = 0     # token offsets; characters shown

    def add(self, tokens: list[int]) -> str:
        """The text ``tokens`` add; "" while it ends in half of a multi-byte character."""
        self.tokens += tokens
        window = self.tokens[self.context:]
        before, text = (self.tokenizer.decode(ids, skip_special_tokens=True)
                        for ids in (window[: self.read - self.context], window))
        if len(text) <= len(before) or text.endswith("\ufffd"):
            return ""
        self.context, self.read = self.read, len(self.tokens)
        self.shown += len(text) - len(before)
        return text[len(before):]
