"""Self-checks for notebook 05, training a drafter."""
from __future__ import annotations

import math
from collections import Counter

import torch

from ..decoding.drafter import DrafterConfig
from ..decoding.variants import make_drafter
from ..training.data import make_batch
from ..training.train import drafter_loss, labelled_logits, position_weights
from . import attempt, correct


@attempt("Exercise 1", "Give the share as a float between 0 and 1.")
def check_loss_weights(answer) -> bool:
    """Exercise 1: the share of the total weight carried by positions 1-4 at B = 16."""
    w = position_weights(16)
    expected = float(w[:4].sum() / w.sum())
    answer = float(answer)
    assert 0 <= answer <= 1, "answer with a fraction between 0 and 1"
    assert abs(answer - float(w[:3].sum() / w.sum())) > 1e-3 or abs(answer - expected) < 1e-3, \
        "that is positions 1-3; the question asks for 1 to 4"
    assert abs(answer - expected) < 1e-3, (f"{answer:.3f} is not it: the weight of positions 1 "
                                           "to 4, as a share of the weight of all 15.")
    return correct("Exercise 1",
                   f"{expected:.3f}: 4 of the 15 positions carry {expected:.0%} of the weight.")


@attempt("Exercise 2", "Give gamma as a float.")
def check_half_weight_gamma(answer) -> bool:
    """Exercise 2: the gamma at which w_8 = w_1 / 2."""
    w = position_weights(16, gamma=float(answer))
    ratio = float(w[7] / w[0])
    assert abs(ratio - 0.5) < 1e-3, (
        f"with gamma = {float(answer):.3f}, w_8 / w_1 = {ratio:.3f}, not 0.5.")
    return correct("Exercise 2", f"gamma = 7 / ln 2 = {7 / math.log(2):.2f}; "
                                 "the paper's gamma = 7 decays faster.")


@attempt("Exercise 3", "Give the loss as a float, in nats.")
def check_unigram_loss(answer, data) -> bool:
    """Exercise 3: the entropy (nats) of the frequencies of all response tokens in ``data``."""

    def entropy(tokens: list) -> float:
        return -sum(n / len(tokens) * math.log(n / len(tokens)) for n in Counter(tokens).values())

    tokens = [t for s, p in zip(data.sequences, data.prompt_lengths) for t in s[p:]]
    expected = entropy(tokens)
    answer = float(answer)
    assert abs(answer - expected / math.log(2)) > 1e-3, \
        "that is in bits (log base 2); the loss is in nats"
    assert abs(answer - entropy([t for s in data.sequences for t in s])) > 1e-3, \
        "that counts the prompts too: the labels are response tokens only"
    assert abs(answer - expected) < 1e-3, (
        f"{answer:.3f} is not it: use the empirical frequency of each token over all response "
        "tokens (one pooled count, not a mean of per-sequence entropies).")
    return correct("Exercise 3", f"{expected:.2f} nats over {len(tokens)} response tokens "
                                 f"({len(set(tokens))} distinct): compare it with ln V and with "
                                 "the loss at the end of section 4.")


@attempt("Exercise 4", "Write ar_loss(logits, labels, slots, weights) returning a 0-d tensor.")
def check_ar_loss(answer, target, data, tokenizer) -> bool:
    """Exercise 4: ``answer(logits, labels, slots, weights)``: the package's autoregressive loss."""
    block_size = 8      # a small autoregressive drafter and one causal batch
    torch.manual_seed(0)
    config = DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1,
                                       block_size=block_size, drafting="autoregressive")
    drafter = make_drafter(config).to(target.device)
    batch = make_batch(data.sequences[:2], data.prompt_lengths[:2], block_size, 4, tokenizer,
                       torch.Generator().manual_seed(0), causal=True)
    weights = position_weights(block_size)
    with torch.no_grad():
        logits, labels, slots = labelled_logits(drafter, target, batch, block_size)
        expected, _ = drafter_loss(drafter, target, batch, weights)
        assert (slots == block_size - 1).any(), \
            "internal: the batch should hold a label at the last slot"
        try:
            got = answer(logits, labels, slots, weights)
        except IndexError as error:
            raise AssertionError(f"{error}: slot B-1 = {block_size - 1} has a label but no entry "
                                 "in weights; give it weight 0") from error
    got = torch.as_tensor(got, dtype=torch.float32).reshape(())
    assert torch.allclose(got, expected.float(), rtol=1e-4, atol=1e-5), (
        f"your loss {got.item():.4f}, the package's {expected.item():.4f}. Slot j (0..B-2) "
        "predicts the (j+1)-th token and gets weights[j]; slot B-1 gets 0; divide by the sum of "
        "the weights used.")
    return correct("Exercise 4", f"loss {got.item():.4f}, as the package's.")


@attempt("Exercise 5", "write train(weights, seed, steps) that seeds everything it draws from.")
def check_weighted_training(answer, target, data, tokenizer, block_size: int,
                            steps: int = 3) -> bool:
    """Exercise 5: ``answer(weights, seed, steps)`` is reproducible and uses its weights."""
    decay, uniform = position_weights(block_size), torch.ones(block_size - 1)
    runs = {"decay": answer(decay, 0, steps), "decay again": answer(decay, 0, steps),
            "uniform": answer(uniform, 0, steps)}
    states = {name: drafter.state_dict() for name, (drafter, _) in runs.items()}
    same = all(torch.equal(states["decay"][key], states["decay again"][key])
               for key in states["decay"])
    assert same, ("two runs with the same weights and seed gave different drafters: seed the "
                  "model's initialisation (torch.manual_seed) and the batch generator from `seed`")
    reseeded = answer(decay, 1, steps)[0].state_dict()
    assert any(not torch.equal(states["decay"][key], reseeded[key]) for key in states["decay"]), \
        "seeds 0 and 1 gave the same drafter: draw the initialisation and the batches from `seed`"
    assert any(not torch.equal(states["decay"][key], states["uniform"][key])
               for key in states["decay"]), \
        "decay and uniform weights gave the same drafter: are the weights passed to drafter_loss?"
    batch = make_batch(data.sequences[-4:], data.prompt_lengths[-4:], block_size, 8, tokenizer,
                       torch.Generator().manual_seed(1))
    shown = []
    for name in ("decay", "uniform"):
        with torch.no_grad():
            _, metrics = drafter_loss(runs[name][0], target, batch, decay)
        shown.append(f"{name}: "
                     + ", ".join(f"{a:.2f}" for a in metrics["accuracy_per_position"][:4]))
    return correct("Exercise 5", f"reproducible, and the weights reach the loss. Accuracy at "
                                 f"positions 1-4 after {steps} steps, {'; '.join(shown)}. Now "
                                 "train longer and over several seeds.")
