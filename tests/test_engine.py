"""The Engine's own checks: every argument checked at the call (one ValueError line), the block
size against the drafter, and the shipped drafter loaded by ``from_pretrained``."""
import pytest

from dflash_lite.decoding.engine import Engine


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
