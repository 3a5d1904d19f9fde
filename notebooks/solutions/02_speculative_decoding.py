"""Worked solutions to the exercises of notebook 02, run with
``python notebooks/solutions/02_speculative_decoding.py``."""
import statistics

import torch

from dflash_lite import SamplingParams, load_pretrained, stop_token_ids
from dflash_lite.decoding.acceptance import target_probs
from dflash_lite.decoding.baselines import DraftModelProposer
from dflash_lite.decoding.decode import PerRow, generate
from dflash_lite.exercises import ch02
from dflash_lite.decoding.target import SHIPPED_BASELINES

target, tokenizer = load_pretrained("tiny")
draft, _ = load_pretrained(str(SHIPPED_BASELINES["tiny"]["draft_model"]))
max_new_tokens = 64

# 1. tau for k = 2 and k = 8 (the package's loop is the notebook's loop; their steps agree)
ids = ch02.first_prompt_ids(tokenizer)
stops = stop_token_ids(target, tokenizer)
taus = {k: statistics.mean(generate(target, PerRow(DraftModelProposer(draft, target, k + 1)), ids,
                                   max_new_tokens, stop_token_ids=stops).acceptance_lengths)
        for k in (2, 8)}
print("tau by k:", taus)
assert ch02.check_tau_by_draft_length(taus, target, draft, tokenizer, max_new_tokens)


# 2. the article's rule: accepted mass q(y) where p(y) >= q(y); everything else resamples from p
def article_output(p, q):
    keep = p >= q
    rejected = q[~keep].sum()
    return torch.where(keep, q, torch.zeros_like(q)) + rejected * p


assert ch02.check_article_output(article_output)

# 3. the same with temperature 0.7 and top-p 0.9 applied to both distributions
params = SamplingParams(temperature=0.7, top_p=0.9)
x = tokenizer("Question:", return_tensors="pt").input_ids
with torch.inference_mode():
    p = target_probs(target(x).logits[0, -1:], params)[0].double()
    q = target_probs(draft(x).logits[0, -1:], params)[0].double()
tv = 0.5 * float((article_output(p, q) - p).abs().sum())
assert ch02.check_tv_with_processors(tv, target, draft, tokenizer)


# 4. prompt lookup: scan backwards for the last n-gram's previous occurrence
def lookup_draft(tokens, k, ngram=2):
    tail = tokens[-ngram:]
    for start in range(len(tokens) - ngram - 1, -1, -1):
        if tokens[start:start + ngram] == tail:
            return tokens[start + ngram:start + ngram + k]
    return []


assert ch02.check_lookup_draft(lookup_draft)
print("all notebook 02 solutions check out")
