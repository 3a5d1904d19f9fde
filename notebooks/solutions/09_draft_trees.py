"""Worked solutions to the exercises of notebook 09, run with
``python notebooks/solutions/09_draft_trees.py``."""
import torch

from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import generate, new_cache, prefill
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.exercises import ch09
from dflash_lite.decoding.costs import StepCosts, measure_step_costs
from dflash_lite.decoding.session import default_policy
from dflash_lite.decoding.target import SHIPPED_DRAFTERS
from dflash_lite.decoding.tree import build_tree

target, tokenizer = load_pretrained("tiny")
drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).eval()
B = drafter.config.block_size
x = tokenizer(corpus.prompts("held_out", "code", 1)[0], return_tensors="pt",
              add_special_tokens=False).input_ids
P = x.shape[1]
with torch.inference_mode():
    logits0, features = prefill(target, x, new_cache(target), drafter.config.target_layer_ids)
    root = logits0.argmax(dim=-1)
    block = torch.full((1, B), drafter.config.mask_token_id)
    block[0, 0] = root
    draft_logits = drafter.draft_logits(target, block, features, 0,
                                        SlotCache(drafter.config.num_layers))[0]
tree = build_tree(root, torch.log_softmax(draft_logits, dim=-1), 12)

# 1. the deepest node sees the whole context and its own path: root, ancestors, itself
deepest = max(range(len(tree)), key=lambda i: tree.depths[i])
assert ch09.check_visible_keys(P + tree.depths[deepest] + 1, tree, P)

# 2. equal speed: tau_tree / (t(33) + t_draft) = tau_chain / (t(16) + t_draft)
costs = measure_step_costs(target, drafter, x, [1, B, 33], [B], repeats=3)
t, t_draft = costs["t_target"], costs["t_draft"][B]
assert ch09.check_break_even_gain((t[33] + t_draft) / (t[B] + t_draft), t, t_draft, tree_size=32,
                                  block_size=B)

# 3. a sharper distribution puts the nodes in depth
sharp = build_tree(root, torch.log_softmax(draft_logits / 0.5, dim=-1), 32)
assert ch09.check_sharper_tree(max(sharp.depths), draft_logits, root)

# 4. prose: the drafter knows generated math problems and Python, not stories
story = tokenizer("Once upon a time, in a quiet village by the sea,", return_tensors="pt",
                  add_special_tokens=False).input_ids
# Costs written by hand in milliseconds, shaped as this CPU measures them (a verify of b tokens
# costs little more than one, a drafter forward about a third of one): hand-written costs are
# taken as they are, so the policy's choices do not depend on this machine's load.
cpu_like = StepCosts({1: 4.0, 2: 4.2, 4: 4.3, 8: 4.5, 16: 5.4, 17: 5.5, 32: 6.8},
                     {2: 1.3, 4: 1.3, 8: 1.3, 16: 1.5})
policy = default_policy(drafter, target, cpu_like)
generate(target, policy, story, 48, stop_token_ids=stop_token_ids(target, tokenizer))
assert ch09.check_falls_back(policy)
# 5. the branch shares the part of it the tree holds; the rest is new
branch = tree.chain[:2] + [int(root)] * 3
assert ch09.check_branch_nodes(len(branch) - tree.path_length(branch), tree, branch)
print("all notebook 09 solutions check out")
