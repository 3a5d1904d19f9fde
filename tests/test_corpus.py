"""The named prompt splits: train, held_out and probe never share a prompt, and stay put."""
import pytest

from dflash_lite import corpus


@pytest.mark.parametrize("domain", ["math", "code"])
def test_prompt_splits_are_disjoint(domain):
    train, held_out, probe = (corpus.prompts(split, domain) for split in ("train", "held_out", "probe"))
    assert len(held_out) >= 50 and len(probe) >= 50
    assert len(set(held_out)) == len(held_out) and len(set(probe)) == len(probe)
    assert not set(train) & set(held_out)
    assert not set(train) & set(probe)
    assert not set(held_out) & set(probe)


def test_held_out_math_seeds_lie_beyond_every_training_seed():
    seeds = corpus.MATH_SEEDS
    assert seeds["train"].stop <= corpus.HELD_OUT_SEED <= seeds["held_out"].start
    assert seeds["held_out"].stop <= seeds["probe"].start


def test_held_out_math_is_the_set_the_benchmarks_have_always_used():
    """The drafter card's tau stays comparable: the same problems, in the same order."""
    expected = [corpus.math_problem(corpus.HELD_OUT_SEED + 2000 + i).prompt for i in range(20)]
    assert corpus.prompts("held_out", "math", 20) == expected


def test_mixed_is_math_then_code():
    assert corpus.prompts("held_out", "mixed", 5) == (corpus.prompts("held_out", "math", 3)
                                                       + corpus.prompts("held_out", "code", 2))


def test_asking_for_more_than_a_split_holds_or_an_unknown_split_fails():
    with pytest.raises(ValueError, match="probe split has"):
        corpus.prompts("probe", "code", 10_000)
    with pytest.raises(ValueError, match="split must be"):
        corpus.prompts("test", "math", 1)
    with pytest.raises(ValueError, match="domain must be"):
        corpus.prompts("held_out", "prose", 1)
