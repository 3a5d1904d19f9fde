"""From logits to tokens: the target's sampling distribution and the acceptance rules.

Temperature, top-k and top-p are transformers' own logits processors (``TemperatureLogitsWarper``,
``TopKLogitsWarper``, ``TopPLogitsWarper``), so a distribution here is the one ``generate`` uses.
Greedy decoding (temperature 0) is the argmax of the raw logits.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How the target picks a token. ``temperature == 0`` means greedy."""
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def processors(self):
        """transformers' logits processors for this setting (empty when greedy)."""
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        procs = LogitsProcessorList()
        if self.greedy:
            return procs
        if self.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k is not None:
            procs.append(TopKLogitsWarper(self.top_k))
        if self.top_p is not None and self.top_p < 1.0:
            procs.append(TopPLogitsWarper(self.top_p))
        return procs


def target_probs(logits: torch.Tensor, params: SamplingParams, processors=None) -> torch.Tensor:
    """Probabilities the target samples from, per row. ``logits``: (N, V) -> (N, V)."""
    processors = params.processors() if processors is None else processors
    scores = processors(None, logits.float())  # the warpers here never look at input_ids
    return torch.softmax(scores, dim=-1)


def choose_tokens(logits: torch.Tensor, params: SamplingParams, processors=None,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``logits`` (N, V) -> (N,): argmax when greedy, else a sample."""
    if params.greedy:
        return logits.argmax(dim=-1)
    probs = target_probs(logits, params, processors)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
