"""Draft trees on the static-shape path (docs/method.md#the-decode-loop; DDTree, arXiv 2604.12989).

:mod:`dflash_lite.tree` verifies a tree on a growing cache: the nodes are appended after the
context, an ancestor mask lets each node see the context and its own ancestors, and the accepted
path's K/V are gathered into consecutive slots before the rest is cropped. On the static path
(:class:`dflash_lite.static.StaticDecoder` with ``tree_size``) the same tree is verified at a
fixed width, so that one recorded graph serves every step:

* **pad** (:func:`pad_tree`): the tree of up to N drafts after the root is padded to N + 1 rows;
  a padding row repeats the root at depth 0 and sees the context and itself only, and nothing
  reads it.
* **mask** (:func:`tree_mask`): one boolean (1, 1, W, L) mask from the write position on the
  device: every slot before it (the committed context), the tree's ancestor mask over the W slots
  from it, and nothing after them, so stale slots left by earlier steps stay hidden.
* **keep** (:func:`keep_path`): the accepted path's K/V move to consecutive slots in place (an
  index copy on each layer's buffers), and the next write starts after them; nothing is cropped.

Building the tree reads the drafter's top tokens back to the host, so a tree step has two host
syncs (that read, and reading the target's choices for :func:`dflash_lite.tree.accept_tree`), where
a chain step has one. The rule is the eager loop's: greedy, or lossless sampling at temperature > 0.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .tree import DraftTree, build_tree


class PaddedTree(NamedTuple):
    """A :class:`~dflash_lite.tree.DraftTree` laid out on ``width`` rows for a fixed-width verify."""
    tree: DraftTree
    node_tokens: list[int]        # the tree's tokens, root first, on the host
    tokens: torch.Tensor          # (1, W) node tokens, then the root again on padding rows
    depths: torch.Tensor          # (W,) position offsets: each node's depth, 0 on padding rows
    ancestors: torch.Tensor       # (W, W) boolean: a node's ancestors and itself; a padding row itself only


def draft_static_tree(last: torch.Tensor, draft_logits: torch.Tensor, tree_size: int, width: int) -> PaddedTree:
    """The ``tree_size`` most likely paths under the drafter's logits (k, V) after ``last`` (1,)
    (:func:`dflash_lite.tree.build_tree`, a host read of the top tokens), padded to ``width`` rows."""
    tree = build_tree(last[0], torch.log_softmax(draft_logits.float(), dim=-1), tree_size)
    return pad_tree(tree, width)


def pad_tree(tree: DraftTree, width: int) -> PaddedTree:
    """``tree`` on ``width`` rows: padding rows repeat the root at depth 0 and see only themselves
    (and the context, through :func:`tree_mask`), so no node ever attends to one."""
    device, n = tree.tokens.device, len(tree)
    if n > width:
        raise ValueError(f"a tree of {n} nodes does not fit a verify of width {width}")
    tokens = torch.cat([tree.tokens, tree.tokens[:1].expand(width - n)])[None]          # (1, W)
    depths = torch.tensor(tree.depths + [0] * (width - n), device=device)               # (W,)
    ancestors = torch.eye(width, dtype=torch.bool)
    ancestors[:n, :n] = tree.ancestor_mask()
    return PaddedTree(tree, tree.tokens.tolist(), tokens, depths, ancestors.to(device))


def tree_mask(ancestors: torch.Tensor, at: torch.Tensor, slots: int) -> torch.Tensor:
    """(1, 1, W, ``slots``) boolean for W tree rows written from slot ``at`` (a 0-d device tensor):
    slots before ``at`` are the committed context (all visible), slot ``at + j`` is visible to row i
    when node j is an ancestor of node i (or i itself), and later slots are hidden."""
    width = ancestors.shape[0]
    relative = torch.arange(slots, device=ancestors.device) - at                       # (L,) slot - at
    inside = (relative >= 0) & (relative < width)
    tree_part = ancestors[:, relative.clamp(0, width - 1)] & inside                    # (W, L)
    return (tree_part | (relative < 0))[None, None]


def keep_path(layers, position: int, rows: torch.Tensor) -> None:
    """Move the K/V of verify rows ``rows`` (P,) (the accepted path, root first, written from slot
    ``position``) to slots position..position+P-1 of every layer, in place."""
    source = position + rows
    target = position + torch.arange(rows.shape[0], device=rows.device)
    for layer in layers:
        layer.keys.index_copy_(2, target, layer.keys.index_select(2, source))
        layer.values.index_copy_(2, target, layer.values.index_select(2, source))
