"""Worked solutions to the exercises of notebook 11, run with
``python notebooks/solutions/11_batching_and_serving.py``."""
from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.costs import measure_step_costs
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.exercises import ch11
from dflash_lite.decoding.target import SHIPPED_DRAFTERS

target, tokenizer = load_pretrained("tiny")
drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).eval()
stops = stop_token_ids(target, tokenizer)
B = drafter.config.block_size
prompt_ids = [tokenizer(p, return_tensors="pt", add_special_tokens=False).input_ids
              for p in corpus.prompts("held_out", "math", 4)]

# 1. row r at write position a_r: each of its W queries sees the a_r committed slots, and query i
#    its own new slots 0..i, so the row has W * a_r + W (W + 1) / 2 visible pairs
at = [prompt_ids[0].shape[1], prompt_ids[1].shape[1] - 7, prompt_ids[2].shape[1] - 3]
pairs = sum(B * a + B * (B + 1) // 2 for a in at)
assert ch11.check_visible_pairs(pairs, at, B)

# 2. every row commits the minimum of the rows' lengths: E[min of b draws] = sum_k P(X >= k) ** b
lengths = [n for x in prompt_ids
           for n in generate(target, DFlashProposer(drafter, target, B), x, 40,
                             stop_token_ids=stops).acceptance_lengths]
expected = sum((sum(n >= k for n in lengths) / len(lengths)) ** 4
               for k in range(1, max(lengths) + 1))
assert ch11.check_naive_tau(expected, lengths, 4)

# 3. tau * t(b, 1) / (t(b, w) + t_draft(b, w)) = 1 at b = 16, for the smaller block (the
# notebook's min(block_sizes), 8; section 2 printed it for the larger)
w = 8
heat = {16: measure_step_costs(target, drafter, prompt_ids[0], [1, w], [w], repeats=3, rows=16)}
t, d = heat[16]["t_target"], heat[16]["t_draft"]
assert ch11.check_break_even_tau((t[w] + d[w]) / t[1], heat, 16, w)
print("all notebook 11 solutions check out")
