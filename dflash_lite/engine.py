"""Text in, text out: the engine-level call on top of the decode loops.

>>> engine = Engine.from_pretrained("tiny")                 # shipped target + its shipped drafter
>>> engine.generate("Question: ...\\nAnswer:", max_new_tokens=64)
>>> for piece in engine.generate(prompt, stream=True): print(piece, end="")

The prompt goes through the tokenizer's chat template when the target has one. ``drafter`` may be
a local directory or a hub id of a published drafter; ``dtype="bfloat16"`` runs both in bf16.
With a drafter, each step's block size is chosen by the cost-aware policy (:mod:`dflash_lite.policy`:
measured forward costs and the acceptance so far, down to plain decoding) unless ``block_size``
fixes it; the forward costs are measured once per process, on the first call.
"""
from __future__ import annotations

import torch

from .acceptance import SamplingParams
from .decode import DFlashProposer, GenerationResult, check_request, speculative_steps
from .baselines import NoDraftProposer
from .policy import default_policy
from .static import StaticDecoder
from .target import default_drafter_path, load_pretrained, parse_dtype, stop_token_ids
from .validate import check_device, check_int, check_prompt, check_seed


class Engine:
    def __init__(self, target, tokenizer, drafter=None, block_size: int | None = None, device: str | None = None,
                 dtype: str | torch.dtype | None = None, compile: bool = False):
        """``dtype``: cast the target and the drafter to it (None: keep the target's, and give the
        drafter the target's dtype too). ``compile``: decode on the static-shape path
        (:mod:`dflash_lite.static`; CUDA graphs on CUDA), plain or DFlash chains of a fixed block size."""
        self.target, self.tokenizer, self.drafter = target, tokenizer, drafter
        if dtype is not None:
            target.to(parse_dtype(dtype))
        if drafter is not None:
            if tokenizer.mask_token_id is None:
                raise ValueError("the tokenizer has no mask token; a DFlash drafter needs one")
            from .drafter import check_compatible
            check_compatible(drafter.config, target.config, tokenizer.mask_token_id)
            drafter.to(device=target.device, dtype=target.dtype)
        largest = drafter.config.max_block_size if drafter is not None else None
        if block_size is not None:
            block_size = check_int("block_size", block_size, 1, largest)
        if drafter is None and block_size is not None and block_size > 1:
            raise ValueError(f"block_size {block_size} needs a drafter, and none was given (pass drafter=DIR)")
        self.block_size = block_size if drafter is not None else 1   # None: the cost-aware policy chooses
        self.stops = stop_token_ids(target, tokenizer)
        self.last_result: GenerationResult | None = None
        self.static = None
        if compile:                     # built once: it owns the static caches and the compiled forwards
            self.static = StaticDecoder(target, drafter if self.block_size != 1 else None, self.block_size)

    @classmethod
    def from_pretrained(cls, target: str = "tiny", drafter: str | None = None, device: str = "cpu",
                        dtype: str | torch.dtype | None = None, **kwargs):
        """The target and a drafter (by default the shipped one of a shipped target, if any)."""
        device = check_device(device)
        drafter = drafter or default_drafter_path(target)
        draft = None
        if drafter is not None:
            from .checkpoints import load_drafter
            draft = load_drafter(drafter, dtype=dtype).to(device)   # a bad name fails before the target loads
        model, tokenizer = load_pretrained(target, device=device, dtype=dtype)
        return cls(model, tokenizer, draft, **kwargs)

    def encode(self, prompt: str) -> torch.Tensor:
        if not prompt:
            raise ValueError("the prompt is empty")
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                     add_generation_prompt=True, return_tensors="pt", return_dict=True)
            return ids["input_ids"]
        return self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids

    def proposer(self):
        """Block size 1 or no drafter: plain decoding; a fixed block size: DFlash; by default the
        cost-aware policy, which picks each step's block size (or a draft tree) from measured costs
        and acceptance (:func:`dflash_lite.policy.default_policy`)."""
        if self.drafter is None or self.block_size == 1:
            return NoDraftProposer()
        if self.block_size is None:
            return default_policy(self.drafter, self.target)
        return DFlashProposer(self.drafter, self.target, self.block_size)

    def generate(self, prompt: str, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float | None = None,
                 top_k: int | None = None, stream: bool = False, seed: int | None = None):
        """The completion of ``prompt`` as a string, or with ``stream=True`` an iterator of text pieces
        that yields as blocks are accepted. ``self.last_result`` holds the timings and tau."""
        sampling = SamplingParams(temperature, top_k, top_p)
        check_int("max_new_tokens", max_new_tokens)
        if seed is not None:
            check_seed(seed)
        input_ids = self.encode(check_prompt(prompt))
        check_request(self.target, input_ids, max_new_tokens)   # fail before anything is yielded
        generator = torch.Generator(device=self.target.device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        if self.static is not None:
            steps = self.static.steps(input_ids, max_new_tokens, sampling, self.stops, generator)
        else:
            steps = speculative_steps(self.target, self.proposer(), input_ids, max_new_tokens, sampling,
                                      self.stops, generator)
        pieces = self._stream(steps)
        return pieces if stream else "".join(pieces)

    def _stream(self, steps):
        tokens, emitted = [], ""
        while True:
            try:
                tokens += next(steps)
            except StopIteration as done:
                self.last_result = done.value
                break
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            if text.endswith("\ufffd"):       # half of a multi-byte character: wait for the rest
                continue
            yield text[len(emitted):]
            emitted = text
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if len(text) > len(emitted):
            yield text[len(emitted):]
