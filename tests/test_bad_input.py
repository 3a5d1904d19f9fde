"""Bad input gets one clear error, raised before any output is produced."""
import copy

import pytest
import torch

from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
from dflash_lite.decoding.engine import Engine
from dflash_lite.decoding.target import mask_token_id


def one_line(excinfo) -> str:
    assert "\n" not in str(excinfo.value)
    return str(excinfo.value)


@pytest.fixture(scope="module")
def engine(tiny, random_drafter):
    target, tokenizer = tiny
    return Engine(target, tokenizer, random_drafter)


@pytest.mark.parametrize("prompt,max_new,match", [
    ("", 8, "empty"),
    ("def f():", 0, "max_new_tokens"),
    ("def f():", -3, "max_new_tokens"),
    ("def f():", 5000, "context"),
    ("x " * 1020, 10, "context"),
])
def test_engine_rejects_bad_requests_before_streaming(engine, prompt, max_new, match):
    with pytest.raises(ValueError, match=match) as info:
        engine.generate(prompt, max_new, stream=True)          # raised by the call, not the first next()
    one_line(info)


@pytest.mark.parametrize("block_size", [0, -1, 65, 1000])
def test_block_size_out_of_range(tiny, random_drafter, block_size):
    target, _ = tiny
    with pytest.raises(ValueError, match="block_size") as info:
        DFlashProposer(random_drafter, target, block_size)
    one_line(info)


@pytest.mark.parametrize("field,value,match", [
    ("hidden_size", 128, "hidden size"),
    ("vocab_size", 5000, "vocabulary"),
    ("target_layer_ids", [1, 3, 9], "layers"),
])
def test_drafter_target_mismatch(tiny, random_drafter, field, value, match):
    target, _ = tiny
    config = copy.deepcopy(random_drafter.config)
    setattr(config, field, value)
    with pytest.raises(ValueError, match=match) as info:
        DFlashProposer(DFlashDrafter(config), target)
    one_line(info)


def test_a_tokenizer_without_mask_token_decodes_with_the_drafters_recorded_id(tiny, random_drafter):
    target, tokenizer = tiny
    plain = copy.deepcopy(tokenizer)
    plain.mask_token = None
    assert plain.mask_token_id is None
    prompt = "Q: 12 + 30 = ?"
    expected = Engine(target, tokenizer, random_drafter).generate(prompt, max_new_tokens=12)
    assert Engine(target, plain, random_drafter).generate(prompt, max_new_tokens=12) == expected


def test_the_mask_rule_takes_a_reserved_special_token_never_a_role_of_the_template(tiny):
    _, tokenizer = tiny
    plain = copy.deepcopy(tokenizer)
    plain.mask_token = None
    chosen = mask_token_id(plain)
    assert chosen is not None
    assert chosen not in {plain.eos_token_id, plain.bos_token_id, plain.pad_token_id}
    assert plain.convert_ids_to_tokens(chosen) not in (plain.chat_template or "")
    assert mask_token_id(tokenizer) == tokenizer.mask_token_id


def test_mask_token_must_be_the_tokenizers(tiny, random_drafter):
    target, tokenizer = tiny
    config = copy.deepcopy(random_drafter.config)
    config.mask_token_id = tokenizer.eos_token_id
    with pytest.raises(ValueError, match="mask token"):
        Engine(target, tokenizer, DFlashDrafter(config))


def test_invalid_drafter_config():
    base = dict(hidden_size=8, intermediate_size=16, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                vocab_size=10, num_target_layers=8, target_layer_ids=[1, 2])
    with pytest.raises(ValueError, match="mask_token_id"):
        DrafterConfig(mask_token_id=10, **base)
    with pytest.raises(ValueError, match="block_size"):
        DrafterConfig(mask_token_id=3, block_size=0, **base)
    with pytest.raises(ValueError, match="empty"):
        DrafterConfig(mask_token_id=3, **{**base, "target_layer_ids": []})


def test_streaming_yields_pieces_that_join_to_the_full_text(engine):
    prompt = "Question: Mia has 12 apples and buys 5 more. How many apples does Mia have?\nAnswer:"
    pieces = list(engine.generate(prompt, 40, stream=True))
    assert len(pieces) >= 2
    assert "".join(pieces) == engine.generate(prompt, 40)
    result = engine.last_result
    assert engine.tokenizer.decode(result.tokens, skip_special_tokens=True) == "".join(pieces)


def test_chat_template_is_applied_when_the_tokenizer_has_one(tiny, random_drafter):
    target, tokenizer = tiny
    templated = copy.deepcopy(tokenizer)
    templated.chat_template = "{% for m in messages %}Question: {{ m['content'] }}\nAnswer:{% endfor %}"
    engine = Engine(target, templated, random_drafter)
    ids = engine.encode("How many?")
    assert tokenizer.decode(ids[0]) == "Question: How many?\nAnswer:"


def test_sampling_with_a_seed_is_reproducible(tiny, random_drafter):
    """Same seed, same drafting, same text: a fixed block size. (The default policy chooses each
    step from measured times and from estimates it keeps across calls, so the same seed may draft,
    and so draw, differently; each call is still a sample of the target's distribution.)"""
    target, tokenizer = tiny
    a, b = (Engine(target, tokenizer, random_drafter, block_size=8).generate("def ", 20, temperature=1.0, top_p=0.9,
                                                                             seed=3) for _ in range(2))
    assert a == b


@pytest.mark.parametrize("ids,named", [
    (torch.tensor([[5, 6, 5000]]), "token id 5000"),
    (torch.tensor([[-1, 6]]), "token id -1"),
    (torch.tensor([[5.7, 6.2]]), "integer token ids"),
    ([[5, 6], [7.5, 8]], "integer token ids"),
    (torch.tensor([[True, False]]), "integer token ids"),
])
def test_prompt_ids_that_are_not_token_ids_are_one_line_before_any_work(tiny, random_drafter, ids, named,
                                                                        monkeypatch):
    target, _ = tiny
    monkeypatch.setattr("dflash_lite.decoding.decode.prefill", lambda *a, **k: pytest.fail("work was done"))
    with pytest.raises(ValueError, match=named) as info:
        generate(target, DFlashProposer(random_drafter, target), ids, 4)
    one_line(info)


@pytest.mark.parametrize("stops,named", [([[1], 2], "mixes"), (["2"], "not a token id"),
                                         ([2.5], "not a token id")])
def test_stop_lists_that_are_neither_shared_nor_per_row_are_one_line(tiny, random_drafter, stops, named):
    target, _ = tiny
    with pytest.raises(ValueError, match=named) as info:
        generate(target, DFlashProposer(random_drafter, target), [[5, 6], [7, 8]], 4, stop_token_ids=stops)
    one_line(info)


def test_a_proposer_of_one_request_is_wrapped_where_it_is_built(tiny, random_drafter):
    """The loop drafts batches only: a one-request proposer given bare is one line naming the
    wrapper, before any forward; wrapped, it decodes; a batch proposer cannot be wrapped again."""
    from dflash_lite.decoding.decode import PerRow
    from dflash_lite.decoding.ngram import NgramProposer

    target, tokenizer = tiny
    ids = tokenizer("a = 1\nb = 1\nc =", return_tensors="pt").input_ids
    with pytest.raises(ValueError, match=r"PerRow\(NgramProposer") as info:
        generate(target, NgramProposer(4), ids, 4)
    one_line(info)
    assert len(generate(target, PerRow(NgramProposer(4)), [ids, ids[:, :3]], 4)) == 2
    with pytest.raises(ValueError, match="drafts whole batches already") as info:
        PerRow(DFlashProposer(random_drafter, target))
    one_line(info)
