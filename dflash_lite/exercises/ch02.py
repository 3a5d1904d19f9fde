"""Self-checks for notebook 02, speculative decoding."""
from __future__ import annotations

import statistics

import torch

from .. import corpus
from ..decoding.acceptance import SamplingParams, target_probs
from ..decoding.baselines import DraftModelProposer, generate_autoregressive
from ..decoding.decode import PerRow, generate
from ..decoding.target import stop_token_ids
from . import attempt, correct, not_attempted


def first_prompt_ids(tokenizer) -> torch.Tensor:
    """The first held-out prompt of notebook 02."""
    prompt = corpus.prompts("held_out", "math", 1)[0]
    return tokenizer(prompt, return_tensors="pt").input_ids


def check_speculative_greedy(speculative_greedy, target, draft, tokenizer, max_new_tokens: int,
                             draft_lengths=(2, 4)) -> bool:
    """Build it: ``speculative_greedy(target, draft, ids, k, max_new_tokens, stops)`` returns the
    target's own greedy tokens and, at every verify step, the package loop's accepted length, on
    prompts of both domains and for several k (at most 40 new tokens: enough for rejections)."""
    stops = stop_token_ids(target, tokenizer)
    max_new_tokens = min(max_new_tokens, 40)
    texts = corpus.prompts("held_out", "math", 2) + corpus.prompts("held_out", "code", 2)
    for i, text in enumerate(texts):
        ids = tokenizer(text, return_tensors="pt").input_ids.to(target.device)
        alone = generate_autoregressive(target, ids, max_new_tokens, stop_token_ids=stops).tokens
        for k in draft_lengths:
            package = generate(target, PerRow(DraftModelProposer(draft, target, k + 1)), ids,
                               max_new_tokens, stop_token_ids=stops)
            got = speculative_greedy(target, draft, ids, k, max_new_tokens, set(stops))
            assert isinstance(got, tuple) and len(got) == 2, "return a pair: (tokens, steps)"
            mine, steps = list(got[0]), list(got[1])
            assert mine == alone, (f"held-out prompt {i}, k={k}: the tokens differ from the "
                                   "target's own greedy tokens (what does the cache hold after a "
                                   "rejection?)")
            assert steps == package.acceptance_lengths, \
                f"held-out prompt {i}, k={k}: the tokens per step differ from the package's"
    return correct("Build it", "the target's own tokens on every prompt, with the package's steps.")


@attempt("Exercise 1", "Give {2: tau_k2, 8: tau_k8}.")
def check_tau_by_draft_length(answer, target, draft, tokenizer, max_new_tokens: int) -> bool:
    """Exercise 1: tau of the greedy draft-model loop on the first prompt, for k = 2 and k = 8."""
    assert isinstance(answer, dict) and set(answer) == {2, 8}, "give a dict with the keys 2 and 8"
    ids = first_prompt_ids(tokenizer).to(target.device)
    stops = stop_token_ids(target, tokenizer)
    for k in (2, 8):
        r = generate(target, PerRow(DraftModelProposer(draft, target, k + 1)), ids, max_new_tokens,
                     stop_token_ids=stops)
        expected = statistics.mean(r.acceptance_lengths)
        assert 1 <= float(answer[k]) <= k + 1, f"tau for k={k} must lie in 1..{k + 1}"
        assert abs(float(answer[k]) - expected) <= 1e-6 * expected, (
            f"tau for k={k} is not what this repository measures: count the tokens committed per "
            "verify step, the target's own token included, and average over the steps")
    return correct("Exercise 1",
                   "tau grows with k, but each extra draft is accepted only if all before it were.")


def check_article_output(article_output) -> bool:
    """Exercise 2: the exact output distribution of the article's p(x) >= q(x) rule, checked here
    for properties of the exact answer; the grader's hidden checks compare it with the answer."""
    half = torch.tensor([0.5, 0.5])
    if article_output is None or article_output(half, half.clone()) is None:
        return not_attempted("Exercise 2",
                             "Write article_output(p, q): two 1-D tensors in, one out.")
    for seed, size in ((0, 12), (1, 5), (2, 40), (3, 7)):
        g = torch.Generator().manual_seed(seed)
        for _ in range(5):
            p, q = (x / x.sum() for x in [torch.rand(size, generator=g, dtype=torch.float64) ** 3
                                          for _ in range(2)])
            got = torch.as_tensor(article_output(p.clone(), q.clone()), dtype=torch.float64)
            assert got.shape == p.shape, f"return a distribution over the same {p.numel()} tokens"
            assert abs(float(got.sum()) - 1) < 1e-9 and bool((got >= -1e-12).all()), \
                "return probabilities: non-negative, summing to 1"
            low = p < q
            assert bool((got[low] < p[low]).all()), ("a token with p(y) < q(y) must come out "
                                                     "with less than p(y): is the draft ever kept?")
            assert bool((got[~low] >= q[~low] - 1e-12).all()), \
                "a token with p(y) >= q(y) is always kept when drafted: it comes out at least q(y)"
        same = torch.as_tensor(article_output(p.clone(), p.clone()), dtype=torch.float64)
        torch.testing.assert_close(same, p, msg="when q = p every draft is kept: the output is p")
    return correct("Exercise 2", "For y with p(y) < q(y) the rule gives less than p(y): that "
                                 "mass goes to the tokens with p >= q.")


@attempt("Exercise 3", "Give the TV distance as a float.")
def check_tv_with_processors(answer, target, draft, tokenizer) -> bool:
    """Exercise 3: TV distance of the p >= q rule at temperature 0.7, top-p 0.9, after 'Question:'.
    Checked here against bounds any such TV obeys; the grader's hidden checks compare the value."""
    params = SamplingParams(temperature=0.7, top_p=0.9)
    x = tokenizer("Question:", return_tensors="pt").input_ids.to(target.device)
    with torch.inference_mode():
        p = target_probs(target(x).logits[0, -1:], params)[0].double().cpu()
        q = target_probs(draft(x).logits[0, -1:], params)[0].double().cpu()
    value = float(answer)
    raw = 0.5 * float((p - q).abs().sum())
    assert 0 < value < 1, "a TV distance of a lossy rule lies strictly between 0 and 1"
    assert value <= raw + 1e-9, ("the rule's output is never further from p than q itself: "
                                 "both p and q must be processed the same way")
    return correct("Exercise 3", f"TV = {value:.4f}. The lossless rule stays exact for any q: "
                                 "only p must be the target's.")


def _lookup_cases() -> list[tuple[list[int], int, int]]:
    """Hand-made cases (no match, short lists, several matches, overlaps) and seeded random ones."""
    cases = [([1, 2, 3, 1, 2], 2, 2), ([1, 2, 3, 4, 1, 2], 3, 2), ([5, 6, 7], 2, 2),
             ([1, 2, 9, 1, 2, 8, 1, 2], 1, 2), ([4, 4, 4, 4], 2, 1), ([1, 2, 3, 1, 2, 3], 5, 3),
             ([], 3, 2), ([7, 1, 2, 7], 4, 1), ([3], 2, 1), ([1, 2, 5, 6, 1, 2, 7, 1, 2], 3, 2)]
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        n = int(torch.randint(3, 30, (1,), generator=g))
        cases.append((torch.randint(0, 4, (n,), generator=g).tolist(),
                      int(torch.randint(1, 6, (1,), generator=g)),
                      int(torch.randint(1, 4, (1,), generator=g))))
    return cases


def _lookup_verdict(tokens: list[int], k: int, ngram: int, got: list[int]) -> str | None:
    """Why ``got`` is not a prompt-lookup draft of ``tokens`` (None when it is one)."""
    if len(got) > k:
        return "more than k tokens"
    tail = tokens[-ngram:]
    matches = [s for s in range(len(tokens) - ngram) if tokens[s:s + ngram] == tail]
    if not matches:
        return None if got == [] else "a draft where the last ngram tokens never occurred before"
    if not got:
        return "no draft, but the last ngram tokens occurred before"
    if got != tokens[matches[-1] + ngram:][:k]:
        return "not the (up to k) tokens after the most recent earlier occurrence"
    return None


def check_lookup_draft(lookup_draft) -> bool:
    """Exercise 4: a prompt-lookup drafter, checked on hand-made and seeded random token lists."""
    if lookup_draft is None or lookup_draft([1, 2, 3, 1, 2], 2) is None:
        return not_attempted("Exercise 4",
                             "Write lookup_draft(tokens, k, ngram=2) returning a list of ints.")
    for tokens, k, ngram in _lookup_cases():
        got = list(lookup_draft(list(tokens), k, ngram=ngram))
        why = _lookup_verdict(list(tokens), k, ngram, got)
        assert why is None, f"lookup_draft({tokens}, {k}, ngram={ngram}) gave {got}: {why}"
    return correct("Exercise 4", "Long matches come from text that repeats: identifiers in code, "
                                 "names and numbers in math.")
