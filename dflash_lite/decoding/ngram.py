"""Prompt lookup: drafts copied from the text so far, with no drafter at all. Code, quoted passages
and repetitive reasoning repeat their context, so what followed an earlier occurrence of the last
few tokens is a good guess for what follows now: :func:`ngram_continuation` finds it and
:class:`NgramProposer` drafts it, a point mass verified by the same lossless rules as DFlash's
argmax drafts (docs/method.md#verification-and-acceptance)."""
from __future__ import annotations

import numpy as np
import torch

from ..validate import check_int
from .decode import ChainDraft
from .shapes import EAGER, Shapes


def ngram_continuation(history, max_ngram: int = 3, k: int = 10) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the last n tokens of
    ``history`` (a 1-D sequence of token ids), for the largest n <= ``max_ngram`` that occurs
    earlier at all; ``[]`` when not even the last token occurs earlier. A match with fewer than k
    tokens after it is read as repeating with the period it shows (its distance to the end), as a
    loop the model has fallen into would go on: ``a b c a b`` continues ``c a b c ...``."""
    h = np.asarray(history, dtype=np.int64)                            # (L,)
    if k <= 0 or h.size < 2:
        return []
    # ends: earlier positions e where the last n tokens also end (e <= L-2, so a token follows).
    # Grow n one token at a time, keeping the ends whose match reaches one token further back.
    ends = np.flatnonzero(h[:-1] == h[-1])                             # n = 1
    longest = ends
    for n in range(2, max_ngram + 1):
        ends = ends[ends >= n - 1]
        ends = ends[h[ends - (n - 1)] == h[-n]]                       # the n-th last matches too
        if ends.size == 0:
            break
        longest = ends
    if longest.size == 0:
        return []
    start = int(longest[-1]) + 1                       # the most recent match's continuation
    return np.resize(h[start:], k).tolist()            # cut at k, or repeated to k by its period


class NgramProposer:
    """Prompt lookup as a proposer of one request: each step, up to ``max_drafts`` tokens from
    :func:`ngram_continuation` of the prompt and every token committed so far; no model runs."""

    layer_ids = None

    def __init__(self, max_drafts: int = 10, max_ngram: int = 3, shapes: Shapes = EAGER):
        self.block_size = check_int("max_drafts", max_drafts) + 1
        self.max_ngram, self.shapes = check_int("max_ngram", max_ngram), shapes

    def start(self, prompt_ids: torch.Tensor, target_hidden) -> None:
        self.history = prompt_ids[0].tolist()          # the committed tokens before `last`
        self.blocks = []            # the blocks committed since, (position, tokens), read in later

    def continuation(self, last_token: int, k: int) -> list[int]:
        """Up to ``k`` drafts after ``last_token``: host token ids (:func:`ngram_continuation`)."""
        if self.blocks:                 # every block since the last match, in one host read
            tokens = torch.cat([b for _, b in self.blocks], dim=1)[0].tolist()
            at = 0
            for position, block in self.blocks:
                self.history[position:] = tokens[at: at + block.shape[1]]
                at += block.shape[1]
            self.blocks = []
        return ngram_continuation(self.history + [last_token], self.max_ngram, k)

    def propose(self, last_token: torch.Tensor, k: int) -> ChainDraft:
        drafts = self.continuation(int(last_token), k)                  # (<= k,), a point mass
        return ChainDraft(torch.tensor(drafts, dtype=torch.long, device=last_token.device))

    def accepted(self, block: torch.Tensor, n: int, position: int, target_hidden) -> None:
        # `last` sat at `position`; it and the n accepted drafts are committed now, read in at the
        # next match (the block is (1, n+1) in the decode loop: no slice to take)
        self.blocks.append((position, block if block.shape[1] == n + 1 else block[:, : n + 1]))
