"""Draft trees (DDTree, arXiv 2604.12989): the N most likely paths of one drafter forward,
verified in one target forward under a tree attention mask and accepted by the point-mass rule
(docs/method.md#verification-and-acceptance); :class:`HybridTreeProposer` adds prompt lookup's
continuation as one more branch."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import torch

from .acceptance import PositionNoise, SamplingParams, choose_tokens
from .cache import SlotCache
from .decode import verify_drafts
from .ngram import NgramProposer
from .proposers import DFlashProposer, PerRow
from .shapes import EAGER, Shapes


@dataclass
class DraftTree:
    """Node 0 is the root (the last committed token); nodes 1..N are drafts, parents first."""
    tokens: torch.Tensor          # (N+1,) token ids
    parents: list[int]            # parent index per node; -1 for the root
    depths: list[int]             # 0 for the root
    chain: list[int] = field(default_factory=list)  # the top token per depth: a chain's drafts
    _host: list[int] | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.parents)

    def ancestor_mask(self) -> torch.Tensor:
        """(N+1, N+1) boolean: row i is True at i and at every ancestor of i (its :meth:`paths`);
        on the host, as :meth:`layouts` lays out this tree alone."""
        return DraftTree.layouts(torch.zeros(1, dtype=torch.long), [self])[2][0]

    def paths(self) -> list[list[int]]:
        """Per node: its path from the root, the node included."""
        paths: list[list[int]] = []
        for i, parent in enumerate(self.parents):   # parents come first
            paths.append((paths[parent] if parent >= 0 else []) + [i])
        return paths

    def path_length(self, tokens: list[int]) -> int:
        """How many of ``tokens``, read as a path from the root, the tree holds."""
        kids = self.children()
        node = 0
        held = 0
        while held < len(tokens) and (node := kids[node].get(tokens[held])) is not None:
            held += 1
        return held

    def children(self) -> list[dict[int, int]]:
        """Per node: {token: child index}. Siblings never share a token."""
        kids: list[dict[int, int]] = [{} for _ in self.parents]
        for i, token in enumerate(self.tokens.tolist()[1:], 1):
            kids[self.parents[i]][token] = i
        return kids

    # the draft interface the decode loop calls (decoding.decode.Draft), as ChainDraft has it
    def layout(self, last: torch.Tensor):
        """Tokens (the root holds ``last``), depths, ancestor mask, for :func:`verify_tree`."""
        return (self.tokens, torch.tensor(self.depths, device=self.tokens.device),
                self.ancestor_mask().to(self.tokens.device))

    def accept(self, target_logits, sampling: SamplingParams, processors, generator,
               position: int = 0):
        """The accepted path (node indices, root first) and the tokens it commits: its drafts
        and the target's token after it (:func:`accept_tree`); the root sits at ``position``."""
        positions = None if not isinstance(generator, PositionNoise) else \
            torch.tensor(self.depths, device=target_logits.device) + position + 1
        choice = choose_tokens(target_logits, sampling, processors, generator, positions)
        return self.accept_read([0, *choice.tolist()])      # read[0], a chain's count, goes unread

    def accept_read(self, read: list[int]):
        """:meth:`accept` from the target's token after each node, ``read[1:]``: at temperature 0
        the batch's one host read (:meth:`dflash_lite.decoding.decode.Verified.greedy_reads`)."""
        choice, kids = read[1:], self.children()
        path = [0]
        while (child := kids[path[-1]].get(choice[path[-1]])) is not None:
            path.append(child)
        tokens = self.token_list
        return path, [tokens[i] for i in path[1:]] + [choice[path[-1]]]

    @property
    def token_list(self) -> list[int]:
        """The node tokens on the host (read once per tree)."""
        if self._host is None:
            self._host = self.tokens.tolist()
        return self._host

    @staticmethod
    def layouts(last: torch.Tensor, trees: list[DraftTree]):
        """Every row's :meth:`layout` at once, as :func:`~dflash_lite.decoding.shapes.pad` lays
        them out on the widest: ids (R, W), depths (R, W), mask (R, W, W), each row's width. Built
        from the trees' host lists with one copy to the device each."""
        widths = [len(t) for t in trees]
        width, device = max(widths), last.device
        ids = [t.token_list + t.token_list[:1] * (width - len(t)) for t in trees]
        depths = [t.depths + [0] * (width - len(t)) for t in trees]
        seen = [(r * width + i) * width + j for r, t in enumerate(trees)   # (R, W, W) flattened
                for i, path in enumerate(t.paths() + [[p] for p in range(len(t), width)])
                for j in path]                                     # padding slots see themselves
        mask = torch.zeros(len(trees), width, width, dtype=torch.bool)
        mask.view(-1)[torch.tensor(seen)] = True
        return (torch.tensor(ids, dtype=last.dtype, device=device),
                torch.tensor(depths, device=device), mask.to(device), widths)


def build_tree(root_token: torch.Tensor, draft_logprobs: torch.Tensor, budget: int) -> DraftTree:
    """The ``budget`` most likely paths under per-position log-probabilities ``draft_logprobs``
    (D, V), best-first by their sum (the log of the product of probabilities)."""
    top_logp, top_ids = draft_logprobs.float().topk(min(budget, draft_logprobs.shape[1]), dim=-1)
    return _best_first(int(root_token), top_logp.tolist(), top_ids.tolist(), budget,
                       draft_logprobs.device)


def _best_first(root: int, top_logp: list[list[float]], top_ids: list[list[int]], budget: int,
                device) -> DraftTree:
    """:func:`build_tree` from each position's top log-probabilities and tokens, sorted (D x W)."""
    depth_limit, width = len(top_logp), len(top_logp[0]) if top_logp else 0
    tokens, parents, depths = [root], [-1], [0]
    # a candidate: (-score, depth (0-based position), rank at that position, parent node)
    heap = [(-top_logp[0][0], 0, 0, 0)] if depth_limit > 0 and budget > 0 else []
    while heap and len(tokens) <= budget:
        neg, d, r, parent = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(top_ids[d][r])
        parents.append(parent)
        depths.append(d + 1)
        if r + 1 < width:                             # next sibling: the next-ranked token here
            heapq.heappush(heap, (neg + top_logp[d][r] - top_logp[d][r + 1], d, r + 1, parent))
        if d + 1 < depth_limit:                       # first child: the top token one position on
            heapq.heappush(heap, (neg - top_logp[d + 1][0], d + 1, 0, node))
    return DraftTree(torch.tensor(tokens, device=device), parents, depths,
                     [row[0] for row in top_ids] if width else [], tokens)


def add_branch(tree: DraftTree, tokens: list[int]) -> DraftTree:
    """``tree`` with the path ``tokens`` from the root added: the part the tree holds is shared, the
    rest hangs below it as at most ``len(tokens)`` new nodes. ``chain`` stays the drafter's."""
    kids = tree.children()
    node = 0
    all_tokens = list(tree.token_list)
    parents = list(tree.parents)
    depths = list(tree.depths)
    for token in tokens:
        child = kids[node].get(token) if node < len(kids) else None      # new nodes have no kids
        if child is None:
            child = len(parents)
            all_tokens.append(token)
            parents.append(node)
            depths.append(depths[node] + 1)
        node = child
    return DraftTree(torch.tensor(all_tokens, dtype=tree.tokens.dtype, device=tree.tokens.device),
                     parents, depths, list(tree.chain), all_tokens)


def verify_tree(target, tree: DraftTree, cache: SlotCache, layer_ids, shapes: Shapes = EAGER):
    """One target forward over the whole tree, written at the cache's write position (the root's
    slot): logits (N+1, V) and tapped features (1, N+1, K*H)."""
    verified = verify_drafts(shapes, target, [tree], tree.tokens[:1], cache, layer_ids)
    return verified.logits[0], verified.features


def accept_tree(tree: DraftTree, target_logits: torch.Tensor,
                sampling: SamplingParams = SamplingParams(), processors=None, generator=None,
                positions: torch.Tensor | None = None) -> tuple[list[int], int]:
    """The longest root-to-node path whose every draft is the target's choice at its parent (the
    argmax, or a sample; seeded, keyed by ``positions`` (N+1,), the position of the token each
    node chooses). Returns the path's node indices (root first) and the target's token after it."""
    choice = choose_tokens(target_logits, sampling, processors, generator, positions)
    path, tokens = tree.accept_read([0, *choice.tolist()])   # read[0], a chain's count, goes unread
    return path, tokens[-1]


def draft_trees(proposer: DFlashProposer, last: torch.Tensor, depths: list[int],
                tree_size: int) -> list[DraftTree]:
    """Per row (``last`` (R,)), the ``tree_size`` most likely paths of depth up to ``depths[r]``,
    all from one forward of the DFlash ``proposer`` over ``[last, MASK x depth]``."""
    _, logits = proposer.block_logits(last, depths)                    # (R, depth, V)
    # every row's top tokens in one host read; the rows' trees are built from those
    top = torch.log_softmax(logits.float(), dim=-1).topk(min(tree_size, logits.shape[-1]), dim=-1)
    top_logp, top_ids, roots = top.values.tolist(), top.indices.tolist(), last.tolist()
    return [_best_first(roots[r], top_logp[r][:d], top_ids[r][:d], tree_size, last.device)
            for r, d in enumerate(depths)]


class DFlashTreeProposer(DFlashProposer):
    """A tree of up to ``tree_size`` drafts from one DFlash forward, of depth ``block_size - 1``."""

    def __init__(self, drafter, target, tree_size: int = 32, block_size: int | None = None,
                 shapes: Shapes = EAGER):
        super().__init__(drafter, target, block_size, shapes=shapes)
        if tree_size < 1:
            raise ValueError(f"tree_size must be >= 1, got {tree_size}")
        self.tree_size = tree_size

    def propose(self, last: torch.Tensor, depths: list[int]) -> list[DraftTree]:
        return draft_trees(self, last, depths, self.tree_size)


class HybridTreeProposer(DFlashTreeProposer):
    """The DFlash tree plus prompt lookup's draft of up to ``ngram_drafts`` tokens as a branch
    (:func:`add_branch`), never deeper than the tree."""

    def __init__(self, drafter, target, tree_size: int = 16, block_size: int | None = None,
                 ngram_drafts: int = 10, max_ngram: int = 3, shapes: Shapes = EAGER):
        super().__init__(drafter, target, tree_size, block_size, shapes)
        self.ngram = PerRow(NgramProposer(ngram_drafts, max_ngram))

    def start(self, ids, features, lengths=None) -> None:
        super().start(ids, features, lengths)
        self.ngram.start(ids, None, self.new_context_lengths)

    def propose(self, last: torch.Tensor, depths: list[int]) -> list[DraftTree]:
        branches = self.ngram.propose(last, depths)
        return [add_branch(tree, branch.tokens.tolist())
                for tree, branch in zip(super().propose(last, depths), branches)]

    def accepted(self, blocks, positions, features) -> None:
        super().accepted(blocks, positions, features)
        self.ngram.accepted(blocks, positions, features)

    def keep(self, rows: list[int]) -> None:
        super().keep(rows)
        self.ngram.keep(rows)
