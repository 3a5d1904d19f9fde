"""Self-checks for notebook 04, conditioning."""
from __future__ import annotations

import torch

from .. import corpus
from ..decoding.cache import SlotCache
from ..decoding.checkpoints import load_drafter
from ..decoding.drafter import DrafterConfig
from ..decoding.target import context_features, default_drafter_path
from ..training.data import make_batch, regenerate
from ..training.train import drafter_loss, position_weights, tau_probe
from . import attempt, correct, shipped_target

DEEP_TAPS, SHALLOW_TAPS = [5, 6], [0, 1]


@attempt("Exercise 1", "Give a pair (list of hidden_states indices, fc input width).")
def check_tap_indices(answer) -> bool:
    """Exercise 1: for ``target_layer_ids=[5, 6]``, ``(indices, width)``: the entries of the
    ``output_hidden_states`` tuple that ``context_features`` reads, and ``fc``'s input width."""
    name = "Exercise 1"
    target, tokenizer = shipped_target()
    n = target.config.num_hidden_layers
    # entry i holds the number i
    labelled = tuple(torch.full((1, 1, 1), float(i)) for i in range(n + 1))
    indices = [int(v) for v in context_features(labelled, DEEP_TAPS)[0, 0].tolist()]
    width = DrafterConfig.from_target(target.config, tokenizer.mask_token_id,
                                      target_layer_ids=DEEP_TAPS, num_layers=1).num_context_features
    assert isinstance(answer, (tuple, list)) and len(answer) == 2, "give a pair: (indices, width)"
    got_indices, got_width = answer
    assert [int(i) for i in got_indices] == indices, (
        f"{list(got_indices)} are not the indices read. Hint: what is at index 0 of "
        "output_hidden_states?")
    assert int(got_width) == width, (f"{got_width} is not fc's input width. Hint: the taps are "
                                     "concatenated per position.")
    return correct(name, f"hidden_states{indices}, concatenated to {width} numbers per position.")


def cache_numbers_per_position(drafter, target, context: int = 10) -> int:
    """Numbers the drafter's cache holds per context position, all layers, keys and values:
    counted in the cache after drafting once with ``context`` positions."""
    cache = SlotCache(drafter.config.num_layers)
    features = torch.randn(1, context, drafter.config.num_context_features)
    block = torch.full((1, drafter.config.block_size), drafter.config.mask_token_id)
    drafter.draft_logits(target, block, features, 0, cache)
    assert cache.position == context
    stored = sum(layer.keys[:, :, :context].numel() + layer.values[:, :, :context].numel()
                 for layer in cache.layers)
    return stored // context


@attempt("Exercise 2",
         "Give a pair (numbers cached per position, raw tapped numbers per position).")
def check_cache_numbers(answer) -> bool:
    """Exercise 2: for the shipped drafter, ``(cached, raw)``: numbers per context position its
    ``SlotCache`` holds (all layers, keys and values), and the raw tapped features' width."""
    name = "Exercise 2"
    target, _ = shipped_target()
    drafter = load_drafter(default_drafter_path("tiny"))
    cached, raw = cache_numbers_per_position(drafter, target), drafter.config.num_context_features
    assert isinstance(answer, (tuple, list)) and len(answer) == 2, "give a pair: (cached, raw)"
    assert int(answer[0]) == cached, (f"{answer[0]} is not what the cache holds per position. "
                                      "Hint: per layer, one key and one value of "
                                      "num_key_value_heads * head_dim numbers.")
    assert int(answer[1]) == raw, \
        f"{answer[1]} is not the raw width. Hint: K taps of hidden_size each."
    return correct(name, f"{cached} cached against {raw} raw: the cache keeps what each layer's "
                         "attention reads, so no step recomputes fc, the norm or the K/V "
                         "projections of old positions.")


def held_out_accuracy(drafter, num_prompts: int = 4, max_new_tokens: int = 32) -> float:
    """Mean accuracy of ``drafter`` over the block positions, on the target's own answers to
    held-out prompts of both domains: a finer measure than tau, which short training leaves at 1."""
    target, tokenizer = shipped_target()
    prompts = (corpus.prompts("held_out", "math", num_prompts // 2)
               + corpus.prompts("held_out", "code", num_prompts - num_prompts // 2))
    data = regenerate(target, tokenizer, prompts, max_new_tokens)
    block_size = drafter.config.block_size
    batch = make_batch(data.sequences, data.prompt_lengths, block_size, 8, tokenizer,
                       torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, metrics = drafter_loss(drafter.eval(), target, batch, position_weights(block_size))
    return float(sum(metrics["accuracy_per_position"]) / len(metrics["accuracy_per_position"]))


@attempt("Exercise 3", 'Train both drafters, then answer "deep" or "shallow".', given=3)
def check_taps_experiment(answer, deep, shallow, tie: float = 0.05) -> bool:
    """Exercise 3: two drafters trained alike, one tapping layers [5, 6], one [0, 1], and
    ``answer``, which of them drafts worse ("deep" or "shallow"). Measured here: tau on held-out
    prompts, or, when the taus tie within ``tie``, the mean held-out accuracy over positions."""
    assert deep.config.target_layer_ids == DEEP_TAPS, \
        f"the deep drafter taps {deep.config.target_layer_ids}"
    assert shallow.config.target_layer_ids == SHALLOW_TAPS, \
        f"the shallow drafter taps {shallow.config.target_layer_ids}"
    assert (deep.config.num_layers == shallow.config.num_layers
            and deep.config.block_size == shallow.config.block_size), \
        "train both with the same shape (layers, block size), or the comparison says nothing"
    assert answer in ("deep", "shallow"), 'answer "deep" or "shallow"'
    target, tokenizer = shipped_target()
    probe = tau_probe(target, tokenizer, 2, 48)     # mean acceptance length, math and code prompts
    taus = {"deep": probe(deep)["all"], "shallow": probe(shallow)["all"]}
    summary = f"tau deep {taus['deep']:.2f}, shallow {taus['shallow']:.2f}"
    measure = taus
    if abs(taus["deep"] - taus["shallow"]) < tie:
        measure = {"deep": held_out_accuracy(deep), "shallow": held_out_accuracy(shallow)}
        summary += (f"; held-out accuracy deep {measure['deep']:.3f}, "
                    f"shallow {measure['shallow']:.3f}")
        assert abs(measure["deep"] - measure["shallow"]) >= 0.005, \
            f"measured here: {summary}. The two drafters cannot be told apart: train them longer"
    assert answer == min(measure, key=measure.get), \
        f"measured here: {summary}. Did you measure on held-out prompts, with the same budget?"
    return correct("Exercise 3", f"{summary}.")
