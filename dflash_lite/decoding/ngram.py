"""Prompt lookup: drafts copied from the text so far, with no drafter at all. Code, quoted passages
and repetitive reasoning repeat their context, so what followed an earlier occurrence of the last
few tokens is a good guess for what follows now: :func:`ngram_continuation` finds it and
:class:`NgramProposer` drafts it, a point mass verified by the same lossless rules as DFlash's
argmax drafts (docs/method.md#verification-and-acceptance)."""
from __future__ import annotations

import torch

from ..validate import check_int
from .decode import ChainDraft
from .shapes import EAGER, Shapes


class NgramIndex:
    """A growing token history and, for each n <= ``max_ngram``, where its most recent run of each
    n tokens ended: a lookup is a few dict reads, and each new token costs ``max_ngram`` writes."""

    def __init__(self, max_ngram: int = 3):
        self.history: list[int] = []
        self.runs: list[dict[tuple, int]] = [{} for _ in range(max_ngram)]   # n - 1 -> run -> end

    def extend(self, tokens: list[int]) -> None:
        h, first = self.history, len(self.history)
        h.extend(tokens)
        for n, runs in enumerate(self.runs, 1):     # the runs that end in the new tokens, in order:
            start = max(first - n + 1, 0)           # the latest of equal runs stays
            runs.update(zip(zip(*(h[start + i:] for i in range(n))), range(start + n, len(h) + 1)))

    def continuation(self, last: int, k: int) -> list[int]:
        """:func:`ngram_continuation` of the history followed by ``last``."""
        h = self.history
        tail = h[max(0, len(h) - len(self.runs) + 1):] + [last]
        for n in range(len(tail), 0, -1):
            start = self.runs[n - 1].get(tuple(tail[-n:]))
            if start is not None:
                follow = h[start:] + [last]
                return (follow * (k // len(follow) + 1))[:k]    # k <= 0: empty
        return []


def read_in(indexes: list[NgramIndex], blocks: list[list[torch.Tensor]]) -> None:
    """Each index extended by its row's ``blocks`` ((1, n) token tensors on the device, in order),
    with one host read for all of them."""
    if any(blocks):
        tokens, at = torch.cat([b for row in blocks for b in row], dim=1)[0].tolist(), 0
        for index, row in zip(indexes, blocks):
            n = sum(b.shape[1] for b in row)
            index.extend(tokens[at: at + n])
            at += n


def ngram_continuation(history, max_ngram: int = 3, k: int = 10) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the last n tokens of
    ``history`` (a 1-D sequence of token ids), for the largest n <= ``max_ngram`` that occurs
    earlier at all; ``[]`` when not even the last token occurs earlier. A match with fewer than k
    tokens after it is read as repeating with the period it shows (its distance to the end), as a
    loop the model has fallen into would go on: ``a b c a b`` continues ``c a b c ...``."""
    history = [int(t) for t in history]
    if not history:
        return []
    index = NgramIndex(max_ngram)
    index.extend(history[:-1])
    return index.continuation(history[-1], k)


class NgramProposer:
    """Prompt lookup as a proposer of one request: each step, up to ``max_drafts`` tokens from
    :func:`ngram_continuation` of the prompt and every token committed so far; no model runs."""

    layer_ids = None

    def __init__(self, max_drafts: int = 10, max_ngram: int = 3, shapes: Shapes = EAGER):
        self.block_size = check_int("max_drafts", max_drafts) + 1
        self.max_ngram, self.shapes = check_int("max_ngram", max_ngram), shapes

    def start(self, prompt_ids: torch.Tensor, target_hidden) -> None:
        self.index = NgramIndex(self.max_ngram)
        self.blocks = [prompt_ids]      # what is committed before `last`, read in at the next match

    def continuation(self, last_token: int, k: int) -> list[int]:
        """Up to ``k`` drafts after ``last_token``: host token ids (:func:`ngram_continuation`)."""
        read_in([self.index], [self.blocks])    # every block since the last match
        self.blocks = []
        return self.index.continuation(last_token, k)

    def propose(self, last_token: torch.Tensor, k: int) -> ChainDraft:
        drafts = self.continuation(int(last_token), k)                  # (<= k,), a point mass
        return ChainDraft(torch.tensor(drafts, dtype=torch.long, device=last_token.device))

    def accepted(self, block: torch.Tensor, n: int, position: int, target_hidden) -> None:
        # `last` (at `position`, right after the history) and the n accepted drafts are committed
        # now, read in at the next match (the decode loop's block is already (1, n+1))
        self.blocks.append(block[:, : n + 1])
