"""What a step drafts and how the target's verdict on it is read: a :class:`ChainDraft` (k tokens
in a row) or a :class:`dflash_lite.decoding.tree.DraftTree` (the other shape of :class:`Draft`), and
:func:`accept`, the lossless rule for a chain (paper section 2;
docs/method.md#verification-and-acceptance)."""
from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

from .acceptance import (PositionNoise, SamplingParams, accept_speculative, choose_tokens,
                         committed_tokens, target_probs)


def accept(draft_tokens, draft_q, target_logits, sampling: SamplingParams, processors,
           generator, positions: torch.Tensor | None = None) -> list[int]:
    """The tokens a step commits, the n drafts the lossless rule keeps and the target's own token
    after them: the point-mass rule, or with ``draft_q`` the general one. ``positions`` (k+1,):
    the absolute positions of the tokens the rows choose, for seeded sampling."""
    if draft_q is None:             # a point mass: the target's own tokens while they agree
        return committed_tokens(draft_tokens, choose_tokens(target_logits, sampling, processors,
                                                            generator, positions))
    if isinstance(generator, PositionNoise):
        raise ValueError("the min(1, p/q) rule draws from a torch.Generator; seeded sampling "
                         "(PositionNoise) takes point-mass drafts (a draft model's coupled rule)")
    p = target_probs(target_logits, sampling, processors)                          # (k+1, V)
    n, next_token = accept_speculative(draft_tokens, draft_q, p, generator)
    return draft_tokens[:n].tolist() + [next_token]


def chain_layouts(last: torch.Tensor, drafts: list[ChainDraft]):
    """Every row's :meth:`ChainDraft.layout` at once, as :func:`~dflash_lite.decoding.shapes.pad`
    lays them out on the widest (no per-row work): ids (R, W), depths (R, W), mask (R, W, W) and
    each row's width. Chains of one width need no depths or mask (None, None: a chain)."""
    widths = [len(d.tokens) + 1 for d in drafts]
    if max(widths) == 1:                # a plain step: each row's last token alone
        return last[:, None], None, None, widths
    tokens = torch.nn.utils.rnn.pad_sequence([d.tokens for d in drafts], batch_first=True)
    ids = torch.cat([last[:, None], tokens.to(last.dtype)], dim=1)                  # (R, W)
    if min(widths) == max(widths):
        return ids, None, None, widths
    width, device = ids.shape[1], ids.device
    at = torch.arange(width, device=device)
    inside = at < torch.tensor(widths, device=device)[:, None]                      # (R, W)
    ids = torch.where(inside, ids, last[:, None])
    mask = torch.eye(width, dtype=torch.bool, device=device) \
        | (torch.ones(width, width, dtype=torch.bool, device=device).tril() & inside[:, :, None])
    return ids, at * inside, mask, widths


class ChainDraft(NamedTuple):
    """k drafts in a row after the last committed token, and their distributions when sampled.
    One shape of :class:`Draft`; :class:`dflash_lite.decoding.tree.DraftTree` is the other."""
    tokens: torch.Tensor                    # (k,)
    q: torch.Tensor | None = None           # (k, V), or None for a point-mass draft

    def layout(self, last: torch.Tensor):
        """What ONE target forward scores: [last, d1..dk] (k+1,), at consecutive positions under a
        causal mask (depths, ancestors None); row i of its logits chooses the token after i."""
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

    layouts = staticmethod(chain_layouts)       # every row's :meth:`layout` at once

    def accept_read(self, read: list[int]):
        """:meth:`accept` of a point-mass chain at temperature 0, from the batch's one host read
        (:meth:`dflash_lite.decoding.decode.Verified.greedy_reads`): ``read[0]`` drafts agreed."""
        return list(range(read[0] + 1)), read[1: read[0] + 2]


class Draft(Protocol):
    """What :func:`dflash_lite.decoding.decode.steps` asks of a draft: :class:`ChainDraft` or
    :class:`dflash_lite.decoding.tree.DraftTree`. The loop keeps the accepted path in the target's
    cache itself (:meth:`~dflash_lite.decoding.cache.SlotCache.keep_paths`). A point-mass draft may
    add ``accept_read(read)``, the greedy verdict from the batch's one host read (else, greedy too,
    :meth:`accept` reads its own row)."""

    def layout(self, last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None,
                                                  torch.Tensor | None]: ...

    # optional: every row's layout at once, (ids, depths, ancestors, widths), as ``pad`` would
    # give each row's ``layout``; a batch of drafts without it is laid out row by row

    def accept(self, target_logits, sampling: SamplingParams, processors, generator,
               position: int) -> tuple[list[int], list[int]]: ...
