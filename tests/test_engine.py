"""The Engine's own checks: every argument checked at the call (one ValueError line), the block
size against the drafter, the shipped drafter loaded by ``from_pretrained``, and streamed text
decoded piece by piece (:class:`IncrementalText`) that joins to the whole output's text."""
import random

import pytest
from transformers import AutoTokenizer

from dflash_lite.decoding.engine import Engine, IncrementalText
from dflash_lite.decoding.target import fetched_dir


@pytest.fixture(scope="module")
def engine(tiny, random_drafter):
    target, tokenizer = tiny
    return Engine(target, tokenizer, random_drafter)


@pytest.mark.parametrize("kwargs,name", [
    ({"max_new_tokens": 2.5}, "max_new_tokens"),
    ({"max_new_tokens": "8"}, "max_new_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": float("nan"), "stream": True}, "temperature"),
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_k": 0}, "top_k"),
    ({"seed": 1.5}, "seed"),
])
def test_engine_generate_checks_its_arguments_at_the_call(engine, kwargs, name):
    with pytest.raises(ValueError, match=name) as info:
        engine.generate("def f():", **{"max_new_tokens": 8, **kwargs})     # raised by the call, even when streaming
    assert "\n" not in str(info.value) and "must be" in str(info.value)


@pytest.mark.parametrize("block_size", [2.0, "16", 0])
def test_engine_block_size_is_checked(tiny, random_drafter, block_size):
    target, tokenizer = tiny
    with pytest.raises(ValueError, match="block_size") as info:
        Engine(target, tokenizer, random_drafter, block_size=block_size)
    assert "\n" not in str(info.value)


def test_engine_block_size_without_a_drafter_says_so(tiny):
    target, tokenizer = tiny
    with pytest.raises(ValueError, match="needs a drafter"):
        Engine(target, tokenizer, None, block_size=16)


def test_engine_from_pretrained_loads_the_shipped_drafter():
    engine = Engine.from_pretrained("tiny", block_size=16)
    assert engine.drafter is not None and engine.block_size == 16


TEXT = ("def área(r):\n    return 3.14159 * r ** 2  # π r²\n\nQuestion: 小明有 12 个苹果 🍎, "
        "gives  5 away.\tHow many?\nAnswer: 12 - 5 = 7. Ça va! 🙂👍🏽 naïve café\n")


def shipped_tokenizers():
    yield "tiny", lambda tiny: tiny[1]
    smol = fetched_dir("smollm2-135m")
    if (smol / "tokenizer.json").is_file():
        yield "smollm2-135m", lambda tiny: AutoTokenizer.from_pretrained(smol)


@pytest.mark.parametrize("name,load", list(shipped_tokenizers()), ids=lambda x: x if isinstance(x, str) else "")
def test_incremental_text_joins_to_the_whole_decode_in_any_pieces(tiny, name, load):
    tokenizer = load(tiny)
    ids = tokenizer(TEXT, add_special_tokens=False).input_ids
    special = [i for i in (tokenizer.eos_token_id,) if i is not None]
    ids = ids[:20] + special + ids[20:]            # a skipped special token inside the output
    whole = tokenizer.decode(ids, skip_special_tokens=True)
    assert "\ufffd" not in whole
    for seed in range(20):
        r, text, at, shown = random.Random(seed), IncrementalText(tokenizer), 0, ""
        while at < len(ids):
            n = r.randint(1, 5)
            shown += text.add(ids[at: at + n])
            at += n
            assert whole.startswith(shown) and "\ufffd" not in shown and text.shown == len(shown)
        assert shown == whole, (seed, shown, whole)


def test_streaming_decodes_each_token_a_few_times_not_the_whole_output_each_step(tiny):
    """The old loop decoded the whole output at every step: tokens decoded grew as the square of
    the output's length. Plain decoding (one token a step) over 150 tokens makes the difference."""
    target, tokenizer = tiny
    engine = Engine(target, tokenizer)
    decoded, decode = [], tokenizer.decode
    tokenizer.decode = lambda ids, **kw: decoded.append(len(ids)) or decode(ids, **kw)
    try:
        pieces = list(engine.generate("def parse(text):", 150, stream=True))
    finally:
        del tokenizer.decode
    tokens = engine.last_result.tokens
    assert len(tokens) > 100 and "".join(pieces) == decode(tokens, skip_special_tokens=True)
    assert sum(decoded) <= 5 * len(tokens), (sum(decoded), len(tokens))
