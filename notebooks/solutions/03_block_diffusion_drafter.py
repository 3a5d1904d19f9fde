"""Worked solutions to the exercises of notebook 03 (the block-diffusion drafter).

Run from the repository root: ``python notebooks/solutions/03_block_diffusion_drafter.py``.
Each answer is computed, then handed to its check, which must return True.
"""
import torch

from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import ChainDraft, DFlashProposer, generate
from dflash_lite.exercises import ch03
from dflash_lite.decoding.target import SHIPPED_DRAFTERS, context_features
from dflash_lite.training.data import block_attention_mask

torch.manual_seed(0)
# smaller than the notebook, to run in seconds
block_size, max_new_tokens = 16, 24
target, tokenizer = load_pretrained("tiny")
drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).eval()
stops = stop_token_ids(target, tokenizer)
c = drafter.config
ids = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 123).prompt,
                return_tensors="pt").input_ids
math_ids = [tokenizer(p.prompt, return_tensors="pt").input_ids
            for p in corpus.math_problems(1, split="held_out", start=4000)]

with torch.inference_mode():
    out = target(ids, output_hidden_states=True)
features = context_features(out.hidden_states, c.target_layer_ids)
last = out.logits[0, -1].argmax()
block = torch.full((1, block_size), c.mask_token_id)
block[0, 0] = last

# 1. A query of block j sees context positions < a_j and the B slots of its own block: 9 + 4.
mask = block_attention_mask(torch.tensor([3, 6, 9]), 12, 4)
answer_1 = int(mask[-1].sum())
assert answer_1 == 9 + 4
assert ch03.check_visible_keys(answer_1)

# 2. Top-1 probability per masked slot; the least sure one, counted from 1.
def least_sure_position(ids):
    with torch.inference_mode():
        out = target(ids, output_hidden_states=True)
        block = torch.full((1, block_size), c.mask_token_id)
        block[0, 0] = out.logits[0, -1].argmax()
        feats = context_features(out.hidden_states, c.target_layer_ids)
        probs = drafter.draft_logits(target, block, feats, 0)[0].softmax(-1)
    return int(probs.max(-1).values.argmin()) + 1


logits = drafter.draft_logits(target, block, features, 0)[0]             # (B-1, V)
probs = logits.softmax(-1)
answer_2 = least_sure_position(ids)
top = probs[answer_2 - 1].topk(3)
print("least sure position", answer_2, [(tokenizer.decode([int(t)]), round(float(p), 3))
                                        for p, t in zip(top.values, top.indices)])
assert ch03.check_least_sure_position(least_sure_position, drafter, target, tokenizer, block_size)

# 3. Re-feed the first-pass draft in place of the masks, same positions, and run again.
second = block.clone()
second[0, 1:] = logits.argmax(-1)
answer_3 = drafter.draft_logits(target, second, features, 0)[0].argmax(-1)
assert ch03.check_second_pass(answer_3, drafter, target, ids, block_size)

# 4. The B=16 drafter at B=8: pool every step's acceptance length, one mean.
mixed_ids = math_ids + [tokenizer(p, return_tensors="pt").input_ids
                        for p in corpus.function_headers(corpus.stdlib_files("held_out"), 1,
                                                         seed=31)]
lengths = [a for x in mixed_ids for a in generate(
    target, DFlashProposer(drafter, target, 8), x, max_new_tokens,
    stop_token_ids=stops).acceptance_lengths]
answer_4 = sum(lengths) / len(lengths)
assert ch03.check_tau_at_block_size(answer_4, drafter, target, mixed_ids, 8, max_new_tokens, stops)


# 5. Two-step, MDLM-style: keep the confident half of the first pass, re-mask the rest, predict
#    again.
class ConfidenceUnmasking(DFlashProposer):
    def propose(self, last, depths):                 # one request: last (1,), depths [k]
        k, start = depths[0], self.new_context_start[0]
        block = torch.full((1, k + 1), self.drafter.config.mask_token_id, device=last.device)
        block[0, 0] = last[0]
        logits = self.drafter.draft_logits(self.target, block, self.new_context, start, self.cache)
        where_last = start + self.new_context.shape[1]
        confidence, draft = logits[0].softmax(-1).max(-1)
        keep = confidence.topk((k + 1) // 2).indices
        block[0, 1 + keep] = draft[keep]
        again = self.drafter.draft_logits(self.target, block, self.new_context[:, :0], where_last,
                                          self.cache)[0]
        tokens = again.argmax(-1)
        tokens[keep] = draft[keep]
        return [ChainDraft(tokens)]


answer_5 = ConfidenceUnmasking
assert ch03.check_unmasking_proposer(answer_5, drafter, target, math_ids, block_size,
                                     max_new_tokens, stops)
print("all notebook 03 solutions check")
