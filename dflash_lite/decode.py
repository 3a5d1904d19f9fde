"""Decode loops as plain functions named by phase: ``prefill``, then one step at a time.

This file holds the autoregressive baseline (one target forward per token, with the KV cache).
Its result type, :class:`GenerationResult`, is the one every loop in the project returns, so
tokens/s, time to first token and tau are summarised the same way everywhere.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .acceptance import SamplingParams, choose_tokens


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
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) "
                         f"exceeds the target's context of {limit} tokens")


def new_cache(model):
    from transformers import DynamicCache
    return DynamicCache(config=model.config)


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
