"""Self-checks for notebook 01, the autoregressive bottleneck."""
from __future__ import annotations

from .. import corpus
from ..decoding.baselines import generate_autoregressive
from . import attempt, correct, forward_inputs, shipped_target

CACHE_EXERCISE_NEW_TOKENS = 16


@attempt("Exercise 1", "Give the number of positions the KV cache holds at the end.")
def check_cache_positions(answer) -> bool:
    """Exercise 1: positions in the target's KV cache after ``generate_autoregressive`` wrote 16
    tokens (no stop tokens) for held-out math problem 700."""
    name = "Exercise 1"
    model, tokenizer = shipped_target()
    prompt = corpus.math_problems(1, split="held_out", start=700)[0].prompt
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    expected = sum(x.shape[-1] for x in forward_inputs(
        model, lambda: generate_autoregressive(model, ids, CACHE_EXERCISE_NEW_TOKENS)))
    assert int(answer) == expected, (f"{answer} is not the number of positions fed through the "
                                     f"target. Hint: the prompt has {ids.shape[1]} tokens; is the "
                                     "last new token ever fed back?")
    return correct(name, f"{expected} positions: the {ids.shape[1]}-token prompt and all new "
                         "tokens but the last.")


def weight_bytes_per_step(model) -> int:
    """Bytes of weights one decode step reads: every weight once, but only one row of the embedding
    table (which the LM head reads in full when the two are tied)."""
    # tied weights counted once
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    row = embedding.shape[1] * embedding.element_size()
    tied = embedding.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    return total + row if tied else total - embedding.numel() * embedding.element_size() + row


@attempt("Exercise 2", "Give the bytes of weights one decode step reads.")
def check_weight_bytes(answer) -> bool:
    """Exercise 2: bytes of weights one decode step of the shipped target reads, within 1%."""
    name = "Exercise 2"
    model, _ = shipped_target()
    expected = weight_bytes_per_step(model)
    assert abs(float(answer) - expected) <= 0.01 * expected, (
        f"{answer:,} bytes is off by more than 1%. Hint: 4 bytes per float32 weight; the embedding "
        f"lookup reads one row, but is the LM head's weight the same tensor "
        f"(tie_word_embeddings={model.config.tie_word_embeddings})?")
    return correct(name, f"about {expected / 1e6:.1f} MB per token, whatever the context length.")


def kv_bytes_per_position(model, bytes_per_number: int = 4) -> int:
    """Bytes of keys and values one position adds to the target's cache, over all layers."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * bytes_per_number


@attempt("Exercise 3", "Give the context length (in tokens) where cache bytes = weight bytes.")
def check_kv_crossover(answer) -> bool:
    """Exercise 3: the context length at which the float32 KV cache holds as many bytes as the
    weights one decode step reads (exercise 2), within 2%."""
    name = "Exercise 3"
    model, _ = shipped_target()
    per_position = kv_bytes_per_position(model)
    expected = weight_bytes_per_step(model) / per_position
    assert abs(float(answer) - expected) <= 0.02 * expected, (
        f"{answer} tokens is off by more than 2%. Hint: per position the cache holds a key and a "
        f"value per layer, each num_key_value_heads * head_dim numbers (grouped-query attention: "
        f"fewer KV heads than query heads).")
    return correct(name, f"about {expected:.0f} tokens ({per_position:,} bytes per position); "
                         "beyond it, attention reads more bytes per step than the weights do.")


@attempt("Exercise 4", "Give a pair (tau without drafter cost, tau with the drafter).")
def check_break_even(answer, t: dict, block_size: int = 16) -> bool:
    """Exercise 4: ``(without_drafter, with_drafter)``, the tau that breaks even for a block of 16
    given forward times ``t`` (``t[n]`` seconds for n tokens), the drafter costing a quarter of
    ``t[16]``; within 2%, against the learner's own ``t`` so machine noise cannot fail it."""
    name = "Exercise 4"
    assert 1 in t and block_size in t, \
        f"t must hold t[1] and t[{block_size}]: time those sizes first"
    assert isinstance(answer, (tuple, list)) and len(answer) == 2, \
        "give two numbers: (without, with drafter)"
    ratio = t[block_size] / t[1]
    expected = (ratio, ratio * 1.25)
    for got, want, what in zip(answer, expected, ("without the drafter", "with the drafter")):
        assert abs(float(got) - want) <= 0.02 * want, (
            f"{what}: {got} is off. Hint: find the tau at which the speedup of the cost model "
            "is exactly 1.")
    return correct(name, f"tau must exceed {expected[0]:.2f} ({expected[1]:.2f} with the drafter) "
                         "to win at all.")
