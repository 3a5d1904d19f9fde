"""Worked solutions to the exercises of notebook 05 (training a drafter).

Run from the repository root: ``python notebooks/solutions/05_training.py``.
Each answer is computed, then handed to its check, which must return True.
"""
import math
from collections import Counter

import torch
import torch.nn.functional as F

from dflash_lite import load_pretrained
from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
from dflash_lite.exercises import ch05
from dflash_lite.measuring.plotting import cache_dir
from dflash_lite.training.data import epoch_batches, regenerate
from dflash_lite.prompts import training_prompts
from dflash_lite.training.train import drafter_loss
from dflash_lite.training.trainer import TrainConfig, Trainer

block_size = 8
target, tokenizer = load_pretrained("tiny")
for p in target.parameters():
    p.requires_grad_(False)
data = regenerate(target, tokenizer, training_prompts(16, 8, seed=0), 24, cache_dir=cache_dir())

# 1. Share of the weight on positions 1-4 at B = 16 (gamma = 7).
w = torch.exp(-(torch.arange(1, 16) - 1) / 7.0)
answer_1 = float(w[:4].sum() / w.sum())
assert ch05.check_loss_weights(answer_1)

# 2. exp(-7 / gamma) = 1/2  <=>  gamma = 7 / ln 2.
answer_2 = 7 / math.log(2)
assert ch05.check_half_weight_gamma(answer_2)

# 3. Entropy of the pooled response-token frequencies, in nats.
tokens = [t for s, p in zip(data.sequences, data.prompt_lengths) for t in s[p:]]
counts = torch.tensor(list(Counter(tokens).values()), dtype=torch.float64)
probs = counts / counts.sum()
answer_3 = float(-(probs * probs.log()).sum())
print(f"unigram baseline {answer_3:.2f} nats, uniform ln V = "
      f"{math.log(target.config.vocab_size):.2f}")
assert ch05.check_unigram_loss(answer_3, data)


# 4. Autoregressive drafting: slot j predicts token j+1 and gets weights[j]; the last slot gets
#    nothing.
def ar_loss(logits, labels, slots, weights):
    w = torch.cat([weights, torch.zeros(1)]).to(logits.device)[slots]       # (M,)
    ce = F.cross_entropy(logits.float(), labels, reduction="none")
    return (w * ce).sum() / w.sum()


answer_4 = ar_loss
assert ch05.check_ar_loss(answer_4, target, data, tokenizer)


# 5. A seeded training function: same weights and seed -> the same drafter.
def train(weights, seed, steps):
    torch.manual_seed(seed)
    config = DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=2,
                                       block_size=block_size)
    drafter = DFlashDrafter(config).train()
    generator = torch.Generator().manual_seed(seed)
    trainer = Trainer(drafter, lambda m, b: drafter_loss(m, target, b, weights),
                      lambda: epoch_batches(data, 4, block_size, 8, tokenizer, generator),
                      TrainConfig(steps=steps, lr=3e-3, log_every=1))
    return drafter, trainer.run()


answer_5 = train
assert ch05.check_weighted_training(answer_5, target, data, tokenizer, block_size)
print("all notebook 05 solutions check")
