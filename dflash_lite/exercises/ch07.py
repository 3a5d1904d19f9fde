"""Self-checks for notebook 07, checking the source article."""
from __future__ import annotations

import statistics

import torch

from ..decoding.acceptance import SamplingParams, target_probs
from ..decoding.decode import DFlashProposer, generate
from ..decoding.target import stop_token_ids
from ..prompts import builtin_prompts
from . import attempt, correct, not_attempted


@attempt("Exercise 1", "Give (tau, rate).")
def check_rate_and_tau(answer, target, drafter, tokenizer, max_new_tokens: int,
                       block_size: int = 16) -> bool:
    """Exercise 1: tau and the article's per-token acceptance rate, first held-out math prompt."""
    ids = tokenizer(builtin_prompts("math", 1)[0], return_tensors="pt").input_ids.to(target.device)
    lengths = generate(target, DFlashProposer(drafter, target, block_size), ids, max_new_tokens,
                       stop_token_ids=stop_token_ids(target, tokenizer)).acceptance_lengths
    tau = statistics.mean(lengths)
    rate = sum(a - 1 for a in lengths) / (len(lengths) * (block_size - 1))
    got_tau, got_rate = (float(v) for v in answer)
    assert abs(got_tau - tau) < 1e-6, \
        "tau is the mean number of tokens committed per verify step (bonus included)"
    assert abs(got_rate - rate) < 1e-6, \
        f"the rate is accepted drafts / drafted tokens, with {block_size - 1} drafts per step"
    return correct("Exercise 1", f"tau {tau:.2f}, rate {rate:.0%}: tau * t(1) / (t(B) + t_draft) "
                   "predicts the speedup; the rate counts drafts after the first miss, which never "
                   "had a chance.")


def check_mse_on_probs(mse_on_probs) -> bool:
    """Exercise 2: position-weighted MSE between softmax(logits) and one-hot labels."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g)
    labels = torch.randint(0, 11, (3, 5), generator=g)
    weights = torch.exp(-torch.arange(5.0) / 4)
    if mse_on_probs is None or mse_on_probs(logits, labels, weights) is None:
        return not_attempted("Exercise 2", "Write mse_on_probs(logits, labels, weights).")
    for scale in (1.0, 10.0):
        got = torch.as_tensor(mse_on_probs(logits * scale, labels, weights), dtype=torch.float64)
        assert got.shape == (), "return one number (a 0-d tensor)"
        assert 0 <= float(got) <= 2, \
            "a mean of squared differences between probabilities lies in [0, 2]"
    perfect = torch.nn.functional.one_hot(labels, 11).float() * 60
    assert abs(float(mse_on_probs(perfect, labels, weights))) < 1e-6, \
        "a certain, right prediction must cost 0"
    weights_first = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    a = float(mse_on_probs(logits, labels, weights_first))
    b = float(mse_on_probs(logits[:, :1], labels[:, :1], weights_first[:1]))
    assert abs(a - b) < 1e-6, "a position with weight 0 must not change the loss"
    doubled = float(mse_on_probs(logits, labels, 2 * weights))
    assert abs(doubled - float(mse_on_probs(logits, labels, weights))) < 1e-6, \
        "scaling all weights must not change the loss: divide by their sum"
    return correct("Exercise 2", "Each wrong token's error is tiny, so the loss barely moves when "
                                 "the right token gains.")


@attempt("Exercise 3", "Give a prompt string.")
def check_harmless_threshold(prompt, target, tokenizer) -> bool:
    """Exercise 3: a prompt after which 'accept if p(x) >= 0.5' (argmax draft) emits exactly p."""
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(target.device)
    assert ids.shape[1] > 0, "the prompt is empty"
    with torch.inference_mode():
        p = target_probs(target(ids).logits[0, -1:],
                         SamplingParams(temperature=1.0))[0].double().cpu()
    top = float(p.max())
    out = p if top < 0.5 else torch.nn.functional.one_hot(p.argmax(), len(p)).double()
    tv = 0.5 * float((out - p).abs().sum())
    assert tv < 1e-9, f"after this prompt the target's top token has p = {top:.3f} >= 0.5, so " \
                      f"the rule always keeps it and drops the other {1 - top:.3f} of the mass " \
                      f"(TV {tv:.3f})"
    return correct("Exercise 3", f"top p = {top:.3f} < 0.5: the rule never fires and resamples "
                   "from p. It is harmless only when no token reaches the threshold (or one has "
                   "all the mass).")
