"""From logits to tokens: the target's sampling distribution (transformers' own logits processors),
the seeded sampler and the acceptance rules (docs/method.md#verification-and-acceptance,
#seeded-sampling)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

from ..validate import check_float, check_int, check_seed, check_temperature


@dataclass(frozen=True)
class SamplingParams:
    """How the target picks a token (temperature 0: greedy). ``seed``: noise per position
    (:class:`PositionNoise`), so the output is the same whatever is drafted; None: a generator's."""
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self):                  # one-line ValueErrors, the same as the CLI's
        check_temperature(self.temperature)
        if self.top_k is not None:
            check_int("top_k", self.top_k)
        if self.top_p is not None:
            check_float("top_p", self.top_p, 0.0, 1.0, low_open=True)
        if self.seed is not None:
            check_seed(self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def processors(self):
        """transformers' logits processors for this setting (empty when greedy)."""
        from transformers import (LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper,
                                  TopPLogitsWarper)

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
    return torch.softmax(processors(None, logits.float()), dim=-1)  # warpers ignore input_ids


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


_GOLDEN = 0x9E3779B97F4A7C15
_POSITION = _signed(0xD1B54A32D192ED03)
_MIX1, _MIX2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shift(z: torch.Tensor, bits: int) -> torch.Tensor:
    """A logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


class PositionNoise:
    """Gumbel noise that is a function of (``seed``, absolute position, token id) only
    (docs/method.md#seeded-sampling): splitmix64's finaliser of ``seed * g + position * c + token``
    in int64 arithmetic, computed where the scores are. ``seed`` None: a random one."""

    def __init__(self, seed: int | None = None):
        # a drawn seed leaves torch's global generator (and so the caller's randomness) alone
        self.seed = secrets.randbits(62) if seed is None else int(seed)
        self._key = _signed((self.seed + 1) * _GOLDEN % (1 << 64))   # seed * g + g, in int64

    def uniform(self, positions: torch.Tensor, vocab: int) -> torch.Tensor:
        """(N, V) uniforms in (0, 1) for the tokens at ``positions`` (N,)."""
        key = (positions.long() * _POSITION + self._key)[:, None]
        z = key + torch.arange(vocab, device=positions.device)[None]
        z = (z ^ _shift(z, 30)) * _MIX1
        z = (z ^ _shift(z, 27)) * _MIX2
        z = z ^ _shift(z, 31)
        return (_shift(z, 11).double() + 0.5) / float(1 << 53)

    def sample(self, scores: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token per row of processed ``scores`` (N, V) (log-probabilities up to a constant;
        -inf where a warper removed a token): the argmax of scores + Gumbel noise (Gumbel-max)."""
        gumbel = -torch.log(-torch.log(self.uniform(positions, scores.shape[-1])))
        return (scores.double() + gumbel).argmax(dim=-1)


def choose_tokens(logits: torch.Tensor, params: SamplingParams, processors=None,
                  generator: torch.Generator | PositionNoise | None = None,
                  positions: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of ``logits`` (N, V) -> (N,): argmax when greedy, else a sample: from
    ``generator``'s stream (``torch.multinomial``), or with a :class:`PositionNoise` the seeded
    sample of the token at each row's absolute position (``positions`` (N,))."""
    if params.greedy:
        return logits.argmax(dim=-1)
    if isinstance(generator, PositionNoise):
        if positions is None:
            raise ValueError("seeded sampling needs the positions of the tokens it samples")
        processors = params.processors() if processors is None else processors
        return generator.sample(processors(None, logits.float()), positions.to(logits.device))
    probs = target_probs(logits, params, processors)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


# ----------------------------------------------------------------------------- acceptance rules
# Every rule takes the k draft tokens and the target's logits or p at the k+1 block positions
# (i: the token after block token i) and returns (n drafts accepted, the target's token after them).

def committed_tokens(draft_tokens: torch.Tensor, choices: torch.Tensor) -> list[int]:
    """The tokens a point-mass draft commits when the target's token after block position i is
    ``choices[i]`` (k+1,): ``choices[0..n]``, n the drafts equal to them, read back in one go."""
    agree = (draft_tokens == choices[:-1]).int().cumprod(dim=0)            # 1 until the first miss
    read = torch.cat([agree.sum()[None], choices]).tolist()
    return read[1: read[0] + 2]


def accept_greedy(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> tuple[int, int]:
    """Temperature 0: the longest prefix of drafts equal to the target's argmax, then its token."""
    tokens = committed_tokens(draft_tokens, target_logits.argmax(dim=-1))
    return len(tokens) - 1, tokens[-1]


def accept_point_mass(draft_tokens: torch.Tensor, target_p: torch.Tensor,
                      generator: torch.Generator | None = None) -> tuple[int, int]:
    """Sampling with a deterministic draft (q one-hot), lossless: sample the target at every
    position of ``target_p`` (k+1, V) and accept while the sample equals the draft."""
    samples = torch.multinomial(target_p, 1, generator=generator).squeeze(-1)   # (k+1,)
    tokens = committed_tokens(draft_tokens, samples)
    return len(tokens) - 1, tokens[-1]


def accept_speculative(draft_tokens: torch.Tensor, draft_q: torch.Tensor, target_p: torch.Tensor,
                       generator: torch.Generator | None = None) -> tuple[int, int]:
    """The general lossless rule for drafts sampled from distributions q (Leviathan et al. 2023)."""
    k = draft_tokens.shape[0]
    u = torch.rand(k, generator=generator, device=target_p.device)
    for i in range(k):
        x = draft_tokens[i]
        p, q = target_p[i, x], draft_q[i, x]
        if u[i] * q <= p:               # q <= p: always accepted; q > p: with probability p / q
            continue
        residual = (target_p[i] - draft_q[i]).clamp(min=0)    # rejected: p's excess over q
        return i, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
    # all k accepted: one bonus token from p at the position after the block
    return k, int(torch.multinomial(target_p[k], 1, generator=generator))


# ----------------------------------------------------------------------------- NOT lossless
# The source article's two rules, kept so the notebooks can measure the bias they add (total
# variation from the target's distribution); never use them to generate.

def accept_article_ratio(draft_tokens: torch.Tensor, draft_q: torch.Tensor, target_p: torch.Tensor,
                         generator: torch.Generator | None = None) -> tuple[int, int]:
    """NOT LOSSLESS. Source article: accept if p(x) >= q(x), else resample from p."""
    for i in range(draft_tokens.shape[0]):
        x = draft_tokens[i]
        if target_p[i, x] >= draft_q[i, x]:
            continue
        return i, int(torch.multinomial(target_p[i], 1, generator=generator))
    return draft_tokens.shape[0], int(torch.multinomial(target_p[-1], 1, generator=generator))


def accept_article_threshold(draft_tokens: torch.Tensor, target_p: torch.Tensor,
                             threshold: float = 0.5,
                             generator: torch.Generator | None = None) -> tuple[int, int]:
    """NOT LOSSLESS. Source article: accept if p(x) >= 0.5, else resample from p."""
    for i in range(draft_tokens.shape[0]):
        if target_p[i, draft_tokens[i]] >= threshold:
            continue
        return i, int(torch.multinomial(target_p[i], 1, generator=generator))
    return draft_tokens.shape[0], int(torch.multinomial(target_p[-1], 1, generator=generator))
