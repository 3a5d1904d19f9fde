"""Worked solutions to notebook 00's exercises. Run from the repository root:

    python notebooks/solutions/00_tour.py
"""
import random
import tempfile

import torch

from dflash_lite import (SamplingParams, corpus, generate_autoregressive, load_pretrained,
                         stop_token_ids)
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.exercises.ch00 import (check_distinct_samples, check_llama_parity,
                                        check_math_template, check_target_forwards)
from dflash_lite.decoding.target import default_drafter_path

model, tokenizer = load_pretrained("tiny")
stops = stop_token_ids(model, tokenizer)
problem = corpus.math_problem(corpus.HELD_OUT_SEED + 42)
prompt_ids = tokenizer(problem.prompt, return_tensors="pt").input_ids

# 1. The prefill chooses the first token, and every later token costs one forward: n tokens,
#    n forwards.
#    DFlash: the prefill, then one verification per step.
ar = generate_autoregressive(model, prompt_ids, 64, stop_token_ids=stops)
drafter = load_drafter(default_drafter_path("tiny"))
sd = generate(model, DFlashProposer(drafter, model), prompt_ids, 64, stop_token_ids=stops)
assert check_target_forwards((len(ar.tokens), 1 + len(sd.acceptance_lengths)))

# 2. One fresh generator per seed; count the distinct token lists.
params = SamplingParams(temperature=0.8, top_p=0.9)
samples = [tuple(generate_autoregressive(model, prompt_ids, 32, params, stop_token_ids=stops,
                                         generator=torch.Generator().manual_seed(seed)).tokens)
           for seed in range(10)]
print("distinct completions:", len(set(samples)))
assert check_distinct_samples(len(set(samples)))


# 3. A new template: draw everything from r, end with "The answer is N.".
def _bulk(r: random.Random) -> corpus.MathProblem:
    name, item = r.choice(corpus.NAMES), r.choice(corpus.ITEMS)
    container = r.choice(corpus.CONTAINERS)
    count, per, loose = r.randint(2, 12), r.randint(3, 24), r.randint(1, 9)
    packed = count * per
    total = packed + loose
    q = (f"{name} buys {count} {container} of {item} with {per} {item} in each, and "
         f"finds {loose} more. How many {item} does {name} have?")
    s = (f"The {container} hold {count} * {per} = {packed} {item}.\n"
         f"With the others {name} has {packed} + {loose} = {total} {item}.\n"
         f"The answer is {total}.")
    return corpus.MathProblem(q, s, total)


print(_bulk(random.Random(0)).text)
assert check_math_template(_bulk)

# 4. No Llama ships, so make one: a small random LlamaForCausalLM with the shipped tokenizer, saved
#    as a Hugging Face directory. load_pretrained takes the same path as for any local checkpoint.
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

torch.manual_seed(0)
config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=512,
                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
with tempfile.TemporaryDirectory() as path:
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    assert check_llama_parity(path)
