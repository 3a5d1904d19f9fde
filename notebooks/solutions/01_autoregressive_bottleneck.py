"""Worked solutions to notebook 01's exercises. Run from the repository root:

    python notebooks/solutions/01_autoregressive_bottleneck.py
"""
import statistics
import time

import torch

from dflash_lite import corpus, load_pretrained
from dflash_lite.decoding.decode import new_cache, prefill
from dflash_lite.exercises.ch01 import (check_break_even, check_cache_positions, check_kv_crossover,
                                        check_weight_bytes)

model, tokenizer = load_pretrained("tiny")
c = model.config

# 1. The prefill puts the prompt in the cache; each of the 15 forwards after it adds the token it is
#    fed. The 16th token is chosen from the last forward's logits and never fed back.
prompt = corpus.math_problems(1, split="held_out", start=700)[0].prompt
prompt_length = tokenizer(prompt, return_tensors="pt").input_ids.shape[1]
assert check_cache_positions(prompt_length + 16 - 1)

# 2. Every weight is read once per step, except the embedding table, of which the lookup reads one
#    row. Here the LM head *is* the embedding table (tied), so the whole table is read anyway.
n_params = sum(p.numel() for p in model.parameters())      # parameters() counts a tied tensor once
tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
weights = 4 * (n_params + c.hidden_size if tied
               else n_params - c.vocab_size * c.hidden_size + c.hidden_size)
print(f"tied: {tied}; {weights / 1e6:.1f} MB of weights per decode step")
assert check_weight_bytes(weights)

# 3. Per position and layer, one key and one value of num_key_value_heads * head_dim float32
#    numbers.
per_position = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 4
print(f"{per_position} bytes of cache per position")
assert check_kv_crossover(weights / per_position)

# 4. Break even: tau * t(1) = t(16) + t_draft, so tau = t(16) / t(1) (no drafter) or
#    1.25 * t(16) / t(1).
context = tokenizer("".join(corpus.function_headers(corpus.stdlib_files("held_out"), 40, seed=2)),
                    return_tensors="pt", truncation=True, max_length=128).input_ids
cache = new_cache(model)
prefill(model, context, cache)
t = {1: [], 16: []}
with torch.inference_mode():
    for _ in range(15):
        for n in t:
            t0 = time.perf_counter()
            model(context[:, :n], past_key_values=cache, use_cache=True)
            t[n].append(time.perf_counter() - t0)
            cache.rewind(context.shape[1])
t = {n: statistics.median(v) for n, v in t.items()}
ratio = t[16] / t[1]
print(f"t(16)/t(1) = {ratio:.2f}")
assert check_break_even((ratio, 1.25 * ratio), t)
