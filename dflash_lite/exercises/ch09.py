"""Self-checks for notebook 09, draft trees and the cost-aware policy."""
from __future__ import annotations

import torch

from ..decoding.policy import CostAwareProposer
from ..decoding.tree import add_branch, build_tree
from . import attempt, correct


@attempt("Exercise 1", "Give the number of keys, an int.")
def check_visible_keys(answer, tree, context_length: int) -> bool:
    """Exercise 1: keys the deepest node of ``tree`` may attend to in the tree verify."""
    deepest = max(range(len(tree)), key=lambda i: tree.depths[i])
    expected = context_length + int(tree.ancestor_mask()[deepest].sum())
    assert int(answer) == expected, \
        "not the number of keys the deepest node may attend to (context and tree)"
    return correct("Exercise 1", f"{context_length} context keys + "
                                 f"{expected - context_length} on its own path.")


@attempt("Exercise 2", "Give the ratio tau_tree / tau_chain, a float.")
def check_break_even_gain(answer, t_target: dict, t_draft: float, tree_size: int = 32,
                          block_size: int = 16) -> bool:
    """Exercise 2: tau_tree / tau_chain at which a tree of ``tree_size`` only matches the chain."""
    expected = (t_target[tree_size + 1] + t_draft) / (t_target[block_size] + t_draft)
    assert abs(float(answer) - expected) < 1e-6 * expected, \
        "not the ratio at which the tree's step and the chain's step commit tokens equally fast"
    return correct("Exercise 2", f"the tree must commit {expected:.2f}x the chain's tokens per "
                                 "step to break even.")


def tree_depth(draft_logits: torch.Tensor, root: torch.Tensor, temperature: float) -> int:
    """Greatest depth of the 32-node tree built from ``draft_logits / temperature``."""
    tree = build_tree(root, torch.log_softmax(draft_logits.float() / temperature, dim=-1), 32)
    return max(tree.depths)


@attempt("Exercise 3", "Give the greatest depth, an int.")
def check_sharper_tree(answer, draft_logits: torch.Tensor, root: torch.Tensor) -> bool:
    """Exercise 3: the depth of a 32-node tree from the drafter's logits at temperature 0.5."""
    expected = tree_depth(draft_logits, root, 0.5)
    assert int(answer) == expected, "not the greatest depth of the 32-node tree at temperature 0.5"
    others = {temp: tree_depth(draft_logits, root, temp) for temp in (1.0, 2.0)}
    return correct("Exercise 3", f"depth {expected} at temperature 0.5, "
                   + ", ".join(f"{d} at {temp:g}" for temp, d in others.items())
                   + ": a confident drafter spends its nodes in depth, an unsure one in width.")


@attempt("Exercise 4", "Run default_policy on a prompt of your own, then pass the policy.")
def check_falls_back(policy) -> bool:
    """Exercise 4: a default-policy run that chose plain decoding (block size 1) at least once."""
    assert isinstance(policy, CostAwareProposer), \
        "pass the policy object you ran: default_policy(drafter, target)"
    assert len(policy.chosen) > 1, "run generate(target, policy, ids, 48, ...) with it first"
    steps = [c.block_size for c in policy.chosen]           # one entry per step that could draft
    assert 1 in steps, ("no step was plain decoding on this prompt: try text the drafter was not "
                        "trained on (it knows generated math problems and Python functions)")
    return correct("Exercise 4", f"{steps.count(1)} of {len(steps)} steps were plain decoding.")


@attempt("Exercise 5", "Give the number of new nodes, an int.")
def check_branch_nodes(answer, tree, branch: list[int]) -> bool:
    """Exercise 5: the nodes ``add_branch(tree, branch)`` adds, its tokens the tree lacks."""
    expected = len(add_branch(tree, branch)) - len(tree)
    assert int(answer) == expected, "not the number of nodes add_branch adds for this branch"
    return correct("Exercise 5", f"{len(branch) - expected} of the branch's {len(branch)} tokens "
                   f"were shared, {expected} new nodes.")
