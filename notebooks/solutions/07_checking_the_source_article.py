"""Worked solutions to the exercises of notebook 07, run with
``python notebooks/solutions/07_checking_the_source_article.py``."""
import statistics

import torch

from dflash_lite import load_pretrained, stop_token_ids
from dflash_lite.prompts import builtin_prompts
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.exercises import ch07
from dflash_lite.decoding.target import SHIPPED_DRAFTERS

target, tokenizer = load_pretrained("tiny")
drafter = load_drafter(SHIPPED_DRAFTERS["tiny"])
max_new_tokens = 48

# 1. tau and the per-token rate from the same acceptance lengths
ids = tokenizer(builtin_prompts("math", 1)[0], return_tensors="pt").input_ids
lengths = generate(target, DFlashProposer(drafter, target, 16), ids, max_new_tokens,
                               stop_token_ids=stop_token_ids(target, tokenizer)).acceptance_lengths
tau = statistics.mean(lengths)
rate = sum(a - 1 for a in lengths) / (len(lengths) * 15)
assert ch07.check_rate_and_tau((tau, rate), target, drafter, tokenizer, max_new_tokens)


# 2. squared error of the probabilities, weighted by position like the CE loss
def mse_on_probs(logits, labels, weights):
    onehot = torch.nn.functional.one_hot(labels, logits.shape[-1]).float()
    per_position = ((logits.softmax(-1) - onehot) ** 2).mean(-1)
    return (per_position * weights / weights.sum()).sum(-1).mean()


assert ch07.check_mse_on_probs(mse_on_probs)

# 3. a context where the target spreads its mass: the name after "Question:" has many candidates
assert ch07.check_harmless_threshold("Question:", target, tokenizer)
print("all notebook 07 solutions check out")
