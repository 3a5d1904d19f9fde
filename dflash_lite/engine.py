"""Text in, text out: the engine-level call on top of the decode loops.

>>> engine = Engine.from_pretrained("tiny")                 # shipped target + its shipped drafter
>>> engine.generate("Question: ...\\nAnswer:", max_new_tokens=64)
>>> for piece in engine.generate(prompt, stream=True): print(piece, end="")

The prompt goes through the tokenizer's chat template when the target has one. ``drafter`` may be
a local directory or a hub id of a published drafter; ``dtype="bfloat16"`` runs both in bf16.
With a drafter, each step's block size is chosen by the cost-aware policy
(:mod:`dflash_lite.policy`: measured forward costs and the acceptance so far, down to plain
decoding) unless ``block_size`` fixes it; the engine keeps a
:class:`~dflash_lite.policy.PolicySession`: the forward costs, measured on its first call (and
again between calls when they drift), and the acceptance estimates, which each call hands on to
the next.
:func:`demo` is the engine plus the one interleaved timer (``python -m dflash_lite demo``).
"""
from __future__ import annotations

import threading

import torch

from .acceptance import PositionNoise, SamplingParams
from .baselines import NoDraftProposer
from .checkpoints import load_pair
from .costs import StepCosts
from .decode import DFlashProposer, GenerationResult, check_request, steps
from .drafter import check_compatible
from .policy import DEFAULT_OPTIONS, DEFAULT_TREE_SIZES, PolicySession
from .prompts import encode
from .shapes import BUCKETS, EAGER, FixedShapes, Shapes
from .target import parse_dtype, stop_token_ids
from .timing import PhaseTimer
from .validate import check_device, check_int, check_prompt, check_seed

FIXED_MIN_LENGTH = 256      # the smallest fixed-shape cache Engine(compile=True) allocates (tokens)


class Engine:
    def __init__(self, target, tokenizer, drafter=None, block_size: int | None = None,
                 dtype: str | torch.dtype | None = None, chat_template: bool = True,
                 compile: bool = False):
        """``dtype``: cast the target and the drafter to it (None: keep the target's, and give the
        drafter the target's dtype too). ``chat_template``: a prompt becomes a user turn of the
        tokenizer's chat template when it has one (:func:`dflash_lite.prompts.encode`).
        ``compile``: the same loop on fixed shapes with compiled forwards
        (:class:`~dflash_lite.shapes.FixedShapes`; CUDA graphs on CUDA), on caches sized for the
        longest call so far (:meth:`shapes_for`); one call at a time."""
        self.target, self.tokenizer, self.drafter, self.chat_template = (target, tokenizer, drafter,
                                                                         chat_template)
        if dtype is not None:
            target.to(parse_dtype(dtype))
        if drafter is not None:
            if tokenizer.mask_token_id is None:
                raise ValueError("the tokenizer has no mask token; a DFlash drafter needs one")
            check_compatible(drafter.config, target.config, tokenizer.mask_token_id)
            drafter.to(device=target.device, dtype=target.dtype)
        largest = drafter.config.max_block_size if drafter is not None else None
        if block_size is not None:
            block_size = check_int("block_size", block_size, 1, largest)
        if drafter is None and block_size is not None and block_size > 1:
            raise ValueError(f"block_size {block_size} needs a drafter, and none was given "
                             "(pass drafter=DIR)")
        # None: the cost-aware policy chooses
        self.block_size = block_size if drafter is not None else 1
        self.stops = stop_token_ids(target, tokenizer)
        self.session = (PolicySession(drafter, target, DEFAULT_OPTIONS) if drafter is not None
                        else None)
        self.last_result: GenerationResult | None = None
        self.compile = compile
        # fixed shapes own their caches and compiled forwards (shapes_for)
        self.shapes: Shapes = EAGER
        self._busy = threading.Lock()

    def shapes_for(self, length: int) -> Shapes:
        """Eager shapes, or with ``compile`` the fixed shapes, their caches sized for ``length``
        tokens (prompt + new tokens) rounded up to a power of two from :data:`FIXED_MIN_LENGTH`
        and capped at the target's context. They are kept across calls and rebuilt larger (and
        compiled again) only when a call needs more: every slot costs memory and, in a compiled
        forward, attention over it. The verify widths are :data:`~dflash_lite.shapes.BUCKETS`
        and the default's draft trees."""
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
        """The target and a drafter (by default the shipped one of a shipped target, if any)."""
        model, tokenizer, draft = load_pair(target, drafter, check_device(device), dtype)
        return cls(model, tokenizer, draft, **kwargs)

    @property
    def costs(self) -> StepCosts | None:
        """The policy's step costs, measured on the first call and kept (None before it)."""
        return self.session.costs if self.session is not None else None

    def encode(self, prompt: str) -> torch.Tensor:
        return encode(self.tokenizer, check_prompt(prompt), self.chat_template)

    def proposer(self, input_ids: torch.Tensor | None = None, shapes: Shapes = EAGER):
        """Block size 1 or no drafter: plain decoding; a fixed block size: DFlash; by default the
        cost-aware policy, which picks each step's block size (or a draft tree) from measured costs
        and acceptance (:func:`dflash_lite.policy.default_policy`); its costs are measured at
        ``input_ids`` the first time and kept, and it starts from the estimates the last call
        left."""
        if self.drafter is None or self.block_size == 1:
            return NoDraftProposer(shapes)
        if self.block_size is not None:
            return DFlashProposer(self.drafter, self.target, self.block_size, shapes=shapes)
        ids = input_ids.to(self.target.device) if input_ids is not None else None
        return self.session.proposer(ids, shapes)

    def generate(self, prompt: str, max_new_tokens: int = 128, temperature: float = 0.0,
                 top_p: float | None = None, top_k: int | None = None, stream: bool = False,
                 seed: int | None = None):
        """The completion of ``prompt`` as a string, or with ``stream=True`` an iterator of text
        pieces that yields as blocks are accepted. ``self.last_result`` holds the timings and tau.
        ``seed`` fixes a sampled call: the noise of the token at each position is a function of
        the seed and the position only (:class:`~dflash_lite.acceptance.PositionNoise`), so the
        text is the target's own seeded sample whatever the policy drafts, on either mode.
        Without a seed one is drawn; ``self.last_result.seed`` gives it, to replay the call."""
        sampling = SamplingParams(temperature, top_k, top_p)
        check_int("max_new_tokens", max_new_tokens)
        if seed is not None:
            check_seed(seed)
        input_ids = self.encode(prompt)
        check_request(self.target, input_ids, max_new_tokens)   # fail before anything is yielded
        noise = None if sampling.greedy else PositionNoise(seed)    # a greedy call draws nothing
        pieces = self._stream(input_ids, max_new_tokens, sampling, noise)
        return pieces if stream else "".join(pieces)

    def _stream(self, input_ids, max_new_tokens, sampling, generator):
        if self.compile and not self._busy.acquire(blocking=False):
            raise RuntimeError("this Engine(compile=True) is serving another call (its fixed-shape "
                               "caches hold one request); use one Engine per thread")
        try:
            yield from self._decode(input_ids, max_new_tokens, sampling, generator)
        finally:
            if self.compile:
                self._busy.release()

    def _decode(self, input_ids, max_new_tokens, sampling, generator):
        timer = PhaseTimer(self.target.device)
        seed = None if generator is None else generator.seed
        self.last_result = result = GenerationResult(input_ids.shape[1], phase_times=timer.seconds,
                                                     seed=seed)
        shapes = self.shapes_for(input_ids.shape[1] + max_new_tokens)
        proposer = self.proposer(input_ids, shapes)
        loop = steps(self.target, proposer, input_ids.to(self.target.device), max_new_tokens,
                     sampling, self.stops, generator, timer)
        emitted = ""
        for step in loop:
            result.record(step)
            text = self.tokenizer.decode(result.tokens, skip_special_tokens=True)
            if text.endswith("\ufffd"):    # half of a multi-byte character: wait for the rest
                continue
            yield text[len(emitted):]
            emitted = text
        if self.session is not None and self.block_size is None:   # the next call starts from here
            self.session.finished(proposer,
                                  torch.cat([input_ids, torch.tensor([result.tokens])], dim=1))
        text = self.tokenizer.decode(result.tokens, skip_special_tokens=True)
        if len(text) > len(emitted):
            yield text[len(emitted):]
