"""Greedy speculative decoding is lossless: token for token the target's greedy output."""
import pytest
import torch

from dflash_lite import corpus, generate_autoregressive, stop_token_ids
from dflash_lite.decoding.baselines import DraftModelProposer, NoDraftProposer
from dflash_lite.decoding.decode import DFlashProposer, PerRow, generate

MAX_NEW = 32


@pytest.fixture(scope="module")
def cases(greedy_cases):
    """50 prompts (math and code) with the target's own greedy continuation."""
    out = greedy_cases(MAX_NEW, math_start=900, code_seed=3)
    assert len(out) == 50
    return out


@pytest.mark.parametrize("block_size", [1, 2, 4, 8, 16])
def test_dflash_greedy_equals_target_greedy_on_50_prompts(tiny, random_drafter, cases, block_size, shapes):
    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)
    wrong = 0
    for ids, expected in cases:
        proposer = DFlashProposer(random_drafter, target, block_size, shapes=shapes) if block_size > 1 \
            else NoDraftProposer(shapes)
        result = generate(target, proposer, ids, MAX_NEW, stop_token_ids=stops)
        wrong += result.tokens != expected
        assert sum(result.acceptance_lengths) + 1 >= len(result.tokens)
        assert all(1 <= a <= block_size for a in result.acceptance_lengths)
    assert wrong == 0


def test_partial_acceptance_rolls_back_exactly(tiny, noisy_draft_model, cases):
    """A draft model that is often but not always right exercises every accepted-prefix length."""
    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)
    seen = set()
    for ids, expected in cases[:20] + cases[-10:]:
        result = generate(target, PerRow(DraftModelProposer(noisy_draft_model, target, 5)), ids, MAX_NEW,
                                      stop_token_ids=stops)
        assert result.tokens == expected
        seen.update(result.acceptance_lengths)
    assert {1, 5} <= seen and len(seen) >= 4          # rejections, full blocks and partial blocks all happened


def test_block_size_one_is_plain_autoregressive(tiny, cases):
    target, tokenizer = tiny
    ids, expected = cases[0]
    result = generate(target, NoDraftProposer(), ids, MAX_NEW, stop_token_ids=stop_token_ids(target, tokenizer))
    assert result.tokens == expected and set(result.acceptance_lengths) == {1}


def test_stop_token_inside_an_accepted_block_ends_the_output_there(tiny):
    """The draft model is the target itself, so whole blocks are accepted; a stop token in the
    middle of one must still end the output exactly at that token."""
    target, tokenizer = tiny
    ids = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 11).prompt, return_tensors="pt").input_ids
    free = generate_autoregressive(target, ids, 40).tokens
    # a token that first appears well inside the output, so a whole block is accepted before it
    stop = next(t for i, t in enumerate(free) if i >= 9 and t not in free[:i])
    expected = free[: free.index(stop) + 1]
    result = generate(target, PerRow(DraftModelProposer(target, target, 8)), ids, 40, stop_token_ids=[stop])
    assert result.tokens == expected and result.stop_reason == "stop_token"
    assert max(result.acceptance_lengths) == 8


@pytest.mark.parametrize("max_new", [1, 2, 5, 17])
def test_exact_max_new_tokens_even_when_blocks_are_fully_accepted(tiny, max_new):
    target, tokenizer = tiny
    ids = tokenizer("def f(x):\n", return_tensors="pt").input_ids
    expected = generate_autoregressive(target, ids, max_new).tokens
    result = generate(target, PerRow(DraftModelProposer(target, target, 8)), ids, max_new)
    assert result.tokens == expected and len(result.tokens) == max_new
    assert len(result.token_times) == max_new


def test_tau_counts_the_targets_own_token_not_the_prefill_one_and_phases_are_timed(tiny, random_drafter, cases):
    """Without a stop token, 16 new tokens = 1 from the prefill + tau per verification."""
    target, _ = tiny
    ids, _ = cases[1]
    result = generate(target, DFlashProposer(random_drafter, target, 8), ids, 16)
    assert len(result.tokens) == 16
    assert result.tau * len(result.acceptance_lengths) == pytest.approx(15)
    assert set(result.phase_times) == {"prefill", "draft", "verify", "accept"}
    assert all(t >= 0 for t in result.phase_times.values()) and result.phase_times["draft"] > 0


def test_dflash_on_a_llama_target_is_lossless(random_llama):
    from dflash_lite import load_pretrained
    from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig

    target, tokenizer = load_pretrained(random_llama)
    torch.manual_seed(0)
    drafter = DFlashDrafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1,
                                                      block_size=4)).eval()
    for seed in range(3):
        ids = torch.randint(10, len(tokenizer), (1, 5 + seed), generator=torch.Generator().manual_seed(seed))
        expected = generate_autoregressive(target, ids, 20).tokens
        assert generate(target, DFlashProposer(drafter, target), ids, 20).tokens == expected


def test_refinement_passes_stay_lossless(tiny, random_drafter, cases):
    target, tokenizer = tiny
    for ids, expected in cases[:3]:
        result = generate(target, DFlashProposer(random_drafter, target, 8, passes=3), ids, MAX_NEW,
                                      stop_token_ids=stop_token_ids(target, tokenizer))
        assert result.tokens == expected


def test_adaptive_block_size_is_lossless_and_adapts(tiny, random_drafter):
    """The adaptive proposer changes B between steps (a random drafter accepts little, so it falls
    to the smallest size) and the output still equals the target's greedy output."""
    from dflash_lite.decoding.baselines import AdaptiveDFlashProposer

    target, tokenizer = tiny
    ids = tokenizer("def parse(line):\n", return_tensors="pt").input_ids
    expected = generate_autoregressive(target, ids, 40).tokens
    proposer = AdaptiveDFlashProposer(random_drafter, target, sizes=(4, 8, 16), window=2)
    assert generate(target, proposer, ids, 40).tokens == expected
    assert proposer.chosen[0] == 16 and 4 in proposer.chosen
    with pytest.raises(ValueError, match="adaptive"):
        AdaptiveDFlashProposer(random_drafter, target, sizes=(1, 8))
