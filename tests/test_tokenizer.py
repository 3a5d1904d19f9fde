"""The shipped tokenizer: byte-level round trips and the reserved tokens the drafter needs."""
import pytest

from dflash_lite import corpus

TEXTS = [
    corpus.math_problem(corpus.HELD_OUT_SEED + 3).text,
    "def f(x: int) -> int:\n    \"\"\"Double.\"\"\"\n    return 2 * x\n",
    "  tabs\tand  spaces\n\n\n and unicode: π ≈ 3.14159, 你好",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_is_exact(tiny, text):
    _, tokenizer = tiny
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == text


def test_mask_and_eos_are_single_reserved_tokens(tiny):
    model, tokenizer = tiny
    assert tokenizer.mask_token == corpus.MASK
    assert tokenizer.eos_token == corpus.EOS
    for token in (corpus.MASK, corpus.EOS):
        ids = tokenizer(f"a{token}b", add_special_tokens=False).input_ids
        assert tokenizer.convert_tokens_to_ids(token) in ids
        assert len(tokenizer(token, add_special_tokens=False).input_ids) == 1
    assert tokenizer.mask_token_id != tokenizer.eos_token_id
    assert tokenizer.mask_token_id < model.config.vocab_size
    assert model.config.eos_token_id == tokenizer.eos_token_id


def test_no_prefix_or_suffix_tokens_are_added(tiny):
    _, tokenizer = tiny
    assert tokenizer("x").input_ids == tokenizer("x", add_special_tokens=False).input_ids
