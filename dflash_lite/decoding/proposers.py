"""What the decode loop asks of a drafter (docs/method.md#batches): :class:`Proposer`, on batches
only (one request is a batch of one); :class:`PerRow`, which runs a proposer of one request
(:class:`RequestProposer`) on a batch; :class:`DFlashProposer`, the paper's drafter."""
from __future__ import annotations

import copy
from typing import Protocol

import torch

from ..validate import check_int
from .drafter import check_compatible
from .drafts import ChainDraft, Draft
from .shapes import EAGER, Shapes


class Proposer(Protocol):
    """What :func:`dflash_lite.decoding.decode.steps` asks of a drafter, for a batch of R rows.
    ``layer_ids``: the target layers whose features it reads (None: none), read at the prefill and
    at every verify (a proposer that will draft no more may set it to None mid-request);
    ``block_size``: the most tokens per target forward it wants next (1: no draft)."""
    layer_ids: list[int] | None
    block_size: int

    def start(self, ids: torch.Tensor, features: torch.Tensor | None, lengths: list[int]) -> None:
        """After prefill: the prompts (R, T), padded on the right to the longest of ``lengths``,
        and their features (R, T, K*H) when the proposer reads them."""

    def propose(self, last: torch.Tensor, depths: list[int]) -> list[Draft]:
        """Per row, a draft of up to ``depths[r]`` tokens after ``last[r]`` (``last`` (R,)): a
        :class:`~dflash_lite.decoding.drafts.ChainDraft` or a tree."""

    def accepted(self, blocks: list[torch.Tensor], positions: list[int],
                 features: list[torch.Tensor | None]) -> None:
        """Per row, the committed block (1, n_r+1) (last and the accepted drafts; (1, 0) for a
        finished row kept as padding) sat at ``positions[r]``, with its features (1, n_r+1, K*H)."""

    def keep(self, rows: list[int]) -> None:
        """Only the rows ``rows`` stay, in that order (finished requests leave the batch)."""


class RequestProposer(Protocol):
    """A proposer of one request (run on a batch by :class:`PerRow`): the same three calls for
    one row, with ``last_token`` (1,), ``k`` drafts and ``n`` accepted drafts."""
    layer_ids: list[int] | None
    block_size: int

    def start(self, prompt_ids: torch.Tensor, target_hidden: torch.Tensor | None) -> None:
        """After prefill: the prompt (1, T) and its features (1, T, K*H)."""

    def propose(self, last_token: torch.Tensor, k: int) -> Draft:
        """A draft of depth k after ``last_token`` (1,)."""

    def accepted(self, block: torch.Tensor, n: int, position: int,
                 target_hidden: torch.Tensor | None) -> None:
        """The committed ``block`` (1, n+1) sat at ``position``; ``target_hidden``: its features
        (1, n+1, K*H) when the proposer reads them."""


class PerRow:
    """A :class:`RequestProposer` on a batch: one shallow copy per row, each drafting its own
    request. ``proposers``: the copies, in batch order (the first is the one given)."""

    def __init__(self, proposer: RequestProposer):
        if isinstance(proposer, PerRow) or hasattr(proposer, "keep"):
            raise ValueError(f"{type(proposer).__name__} drafts whole batches already; "
                             "PerRow wraps a proposer of one request")
        self.proposers, self.layer_ids = [proposer], proposer.layer_ids
        self.shapes = getattr(proposer, "shapes", EAGER)

    @property
    def block_size(self) -> int:
        return max(p.block_size for p in self.proposers)

    def start(self, ids, features, lengths) -> None:
        if len(lengths) > 1 and self.shapes.fixed and hasattr(self.proposers[0], "drafter"):
            # the copies would share the fixed shapes' one drafter cache
            raise ValueError(f"{type(self.proposers[0]).__name__} drafts one request at a time "
                             "on fixed shapes; run a batch eager")
        self.proposers = self.proposers[:1]
        for r, length in enumerate(lengths):
            if r:           # copied after the first start: what it measured once is shared
                self.proposers.append(copy.copy(self.proposers[0]))
            self.proposers[r].start(ids[r: r + 1, :length],
                                    None if features is None else features[r: r + 1, :length])

    def propose(self, last, depths) -> list:
        depths = [min(d, p.block_size - 1) for p, d in zip(self.proposers, depths)]
        return [p.propose(last[r: r + 1], d) if d > 0 else ChainDraft(last[:0])
                for r, (p, d) in enumerate(zip(self.proposers, depths))]

    def accepted(self, blocks, positions, features) -> None:
        for p, block, position, hidden in zip(self.proposers, blocks, positions, features):
            if block.shape[1]:                      # a finished row kept as padding: nothing
                p.accepted(block, block.shape[1] - 1, position, hidden)

    def keep(self, rows: list[int]) -> None:
        self.proposers = [self.proposers[i] for i in rows]


def stack_padded(parts: list[torch.Tensor]) -> torch.Tensor:
    """(1, n_r, D) per row -> (R, max n_r, D), zero-padded on the right."""
    return torch.nn.utils.rnn.pad_sequence([p[0] for p in parts], batch_first=True)


def check_drafter(proposer, drafter, target, block_size: int | None) -> int:
    """One line for a drafter ``proposer`` cannot run on ``target`` (a block drafter where an
    autoregressive one is needed, or back); the block size it drafts (None: the drafter's)."""
    check_compatible(drafter.config, target.config)
    if drafter.autoregressive != proposer.autoregressive:
        kind = {True: "an autoregressive", False: "a block"}
        raise ValueError(f"{type(proposer).__name__} needs {kind[proposer.autoregressive]} "
                         f"drafter; this one is {kind[drafter.autoregressive]} drafter")
    block_size = drafter.config.block_size if block_size is None else block_size
    check_int("block_size", block_size, 1, drafter.config.max_block_size)
    return block_size


class DFlashProposer:
    """The paper's drafter as a :class:`Proposer`: up to ``block_size - 1`` drafts per row from
    ONE forward of a :class:`~dflash_lite.decoding.drafter.DFlashDrafter` over ``[last, MASK x k]``
    for every row, each row after its own committed features only. ``passes`` > 1 re-feeds the
    drafts (an experiment of one request)."""
    autoregressive = False          # the kind of drafter it runs (see baselines.EagleProposer)

    def __init__(self, drafter, target, block_size: int | None = None, passes: int = 1,
                 shapes: Shapes = EAGER):
        self.block_size = check_drafter(self, drafter, target, block_size)
        self.drafter, self.target = drafter, target
        self.layer_ids, self.passes = drafter.config.target_layer_ids, check_int("passes", passes)
        self.shapes = shapes                # what the loop runs this proposer's steps on

    def start(self, ids, features, lengths=None) -> None:
        """As :meth:`Proposer.start` (``lengths`` None: every row all T)."""
        lengths = [ids.shape[1]] * ids.shape[0] if lengths is None else list(lengths)
        if len(lengths) > 1 and self.passes > 1:
            raise ValueError("more than one drafter pass drafts one request at a time")
        self.cache = self.shapes.drafter_cache(self.drafter, ids.device, len(lengths))
        # (R, C, K*H): per row, features of positions start..start+C-1, its first `lengths` real
        self.new_context = features
        self.new_context_start = [0] * len(lengths)
        self.new_context_lengths = lengths

    def block_logits(self, last: torch.Tensor, depths: list[int]):
        """One drafter forward over ``[last, MASK x k]`` per row (``last`` (R,); k the widest
        depth) with the new context: the block (R, k+1) and the logits at its k masked slots
        (R, k, V), each row drafted as a block of its own ``depths[r] + 1`` would be. With fixed
        shapes the block is the proposer's full block, its first k drafts read."""
        k = max(depths)
        width = self.block_size if self.shapes.fixed else k + 1
        block = torch.full((last.shape[0], width), self.drafter.config.mask_token_id,
                           dtype=torch.long, device=last.device)
        block[:, 0] = last                                              # [last, MASK x k]
        lengths = None if all(d + 1 == width for d in depths) else [d + 1 for d in depths]
        logits = self.shapes.draft(self.drafter, self.target, self.cache, block, self.new_context,
                                   self.new_context_start, self.new_context_lengths, lengths)
        return block[:, : k + 1], logits[:, :k]

    def propose(self, last: torch.Tensor, depths: list[int]) -> list[ChainDraft]:
        """Per row a chain of its depth (point masses: the argmax at every masked slot)."""
        block, logits = self.block_logits(last, depths)
        for _ in range(self.passes - 1):
            position = self.new_context_start[0] + self.new_context.shape[1]   # where `last` sits
            block[0, 1:] = logits[0].argmax(dim=-1)       # re-feed the draft instead of the masks
            logits = self.drafter.draft_logits(self.target, block, self.new_context[:, :0],
                                               position, self.cache)
        return [ChainDraft(row[:d]) for row, d in zip(logits.argmax(dim=-1), depths)]

    def accepted(self, blocks, positions, features) -> None:
        """Each row's committed features join its drafter context on the next propose."""
        self.new_context = stack_padded(features)
        self.new_context_start = list(positions)
        self.new_context_lengths = [h.shape[1] for h in features]

    def keep(self, rows: list[int]) -> None:
        self.cache.keep(rows)
        if self.new_context is not None:            # None: a policy's request that never drafts
            self.new_context = self.new_context[rows]
        self.new_context_start = [self.new_context_start[i] for i in rows]
        self.new_context_lengths = [self.new_context_lengths[i] for i in rows]
