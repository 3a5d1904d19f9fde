"""Self-checks for notebook 02, speculative decoding."""
from __future__ import annotations

import statistics

import torch

from .. import corpus
from ..acceptance import SamplingParams, target_probs
from ..baselines import DraftModelProposer
from ..decode import generate
from ..target import stop_token_ids
from . import correct, not_attempted


def first_prompt_ids(tokenizer) -> torch.Tensor:
    """The first held-out prompt of notebook 02."""
    prompt = corpus.prompts("held_out", "math", 1)[0]
    return tokenizer(prompt, return_tensors="pt").input_ids


def check_tau_by_draft_length(answer, target, draft, tokenizer, max_new_tokens: int) -> bool:
    """Exercise 1: tau of the greedy draft-model loop on the first prompt, for k = 2 and k = 8."""
    if answer is None:
        return not_attempted("Exercise 1", "Give {2: tau_k2, 8: tau_k8}.")
    assert isinstance(answer, dict) and set(answer) == {2, 8}, "give a dict with the keys 2 and 8"
    ids = first_prompt_ids(tokenizer).to(target.device)
    stops = stop_token_ids(target, tokenizer)
    for k in (2, 8):
        r = generate(target, DraftModelProposer(draft, target, k + 1), ids, max_new_tokens,
                                 stop_token_ids=stops)
        expected = statistics.mean(r.acceptance_lengths)
        assert abs(answer[k] - expected) <= 0.1 * expected, \
            f"tau for k={k} should be about {expected:.2f}: count the tokens committed per verify step, bonus included"
        assert 1 <= answer[k] <= k + 1, f"tau for k={k} must lie in 1..{k + 1}"
    return correct("Exercise 1", "tau grows with k, but each extra draft is accepted only if all before it were.")


def reference_article_output(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    keep = (p >= q).to(p.dtype)
    return q * keep + (q * (1 - keep)).sum() * p


def check_article_output(article_output) -> bool:
    """Exercise 2: the exact output distribution of the article's p(x) >= q(x) rule."""
    if article_output is None or article_output(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5])) is None:
        return not_attempted("Exercise 2", "Write article_output(p, q).")
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        p = torch.rand(12, generator=g, dtype=torch.float64) ** 3
        q = torch.rand(12, generator=g, dtype=torch.float64) ** 3
        p, q = p / p.sum(), q / q.sum()
        got = torch.as_tensor(article_output(p, q), dtype=torch.float64)
        assert got.shape == p.shape, f"return a distribution over the same {p.numel()} tokens"
        assert abs(float(got.sum()) - 1) < 1e-9, "the output probabilities must sum to 1"
        torch.testing.assert_close(got, reference_article_output(p, q), msg=lambda m: (
            "not the rule's output: P(out=y) = q(y) 1[p(y) >= q(y)] + P(reject) p(y)\n" + m))
    return correct("Exercise 2", "For y with p(y) < q(y), P(out=y) = P(reject) p(y) < p(y): that mass goes to the tokens with p >= q.")


def check_tv_with_processors(answer, target, draft, tokenizer) -> bool:
    """Exercise 3: TV distance of the p >= q rule at temperature 0.7, top-p 0.9, after 'Question:'."""
    if answer is None:
        return not_attempted("Exercise 3", "Give the TV distance as a float.")
    params = SamplingParams(temperature=0.7, top_p=0.9)
    x = tokenizer("Question:", return_tensors="pt").input_ids.to(target.device)
    with torch.inference_mode():
        p = target_probs(target(x).logits[0, -1:], params)[0].double().cpu()
        q = target_probs(draft(x).logits[0, -1:], params)[0].double().cpu()
    expected = 0.5 * float((reference_article_output(p, q) - p).abs().sum())
    assert abs(float(answer) - expected) < 1e-4, \
        "not the TV distance of the p >= q rule with both p and q processed by temperature 0.7 and top-p 0.9"
    return correct("Exercise 3", f"TV = {expected:.4f}. The lossless rule stays exact for any q: only p must be the target's.")


def reference_lookup(tokens: list[int], k: int, ngram: int = 2) -> list[int]:
    if len(tokens) <= ngram:
        return []
    tail = tokens[-ngram:]
    for start in range(len(tokens) - ngram - 1, -1, -1):
        if tokens[start:start + ngram] == tail:
            return tokens[start + ngram:start + ngram + k]
    return []


def check_lookup_draft(lookup_draft) -> bool:
    """Exercise 4: a prompt-lookup drafter."""
    if lookup_draft is None or lookup_draft([1, 2, 3, 1, 2], 2) is None:
        return not_attempted("Exercise 4", "Write lookup_draft(tokens, k, ngram=2).")
    cases = [([1, 2, 3, 1, 2], 2, 2), ([1, 2, 3, 4, 1, 2], 3, 2), ([5, 6, 7], 2, 2), ([1, 2, 9, 1, 2, 8, 1, 2], 1, 2),
             ([4, 4, 4, 4], 2, 1), ([1, 2, 3, 1, 2, 3], 5, 3), ([], 3, 2), ([7, 1, 2, 7], 4, 1)]
    for tokens, k, ngram in cases:
        expected = reference_lookup(tokens, k, ngram)
        got = list(lookup_draft(list(tokens), k, ngram=ngram))
        assert got == expected, f"lookup_draft({tokens}, {k}, ngram={ngram}) should be {expected}, got {got} " \
                                "(use the most recent earlier match, and at most k tokens)"
    return correct("Exercise 4", "Long matches come from text that repeats: identifiers in code, names and numbers in math.")
