"""Prompt lookup (n-gram drafting) and the hybrid draft tree: the matcher's rules, adding a branch
to a tree, and greedy output identical to the target's on 50 prompts for both proposers.
(Their sampling distributions are tested in tests/test_sampling_lossless.py.)"""
import numpy as np
import pytest
import torch

from dflash_lite import generate_autoregressive, stop_token_ids
from dflash_lite.decoding.decode import PerRow, generate
from dflash_lite.decoding.ngram import NgramProposer, ngram_continuation
from dflash_lite.decoding.tree import DFlashTreeProposer, DraftTree, HybridTreeProposer, add_branch, build_tree

MAX_NEW = 32


# ----------------------------------------------------------------------------- the matcher
def test_the_longest_ngram_wins_over_a_more_recent_shorter_one():
    # last 3 tokens (1, 2, 3): matched at the start (-> 4); "2 3" alone and "3" alone also occur later
    history = [1, 2, 3, 4, 9, 2, 3, 5, 3, 6, 1, 2, 3]
    assert ngram_continuation(history, max_ngram=3, k=1) == [4]
    assert ngram_continuation(history, max_ngram=2, k=1) == [5]          # "2 3": the most recent is before 5
    assert ngram_continuation(history, max_ngram=1, k=1) == [6]          # "3": the most recent is before 6


def test_the_most_recent_match_of_that_length_wins():
    history = [7, 8, 1, 7, 8, 2, 5, 7, 8]
    assert ngram_continuation(history, max_ngram=2, k=2) == [2, 5]
    assert ngram_continuation(history, max_ngram=3, k=2) == [2, 5]       # no 3-gram match: falls back to 2


def test_at_most_k_tokens_and_nothing_without_a_match():
    history = list(range(20)) + [3]
    assert ngram_continuation(history, 3, k=5) == [4, 5, 6, 7, 8]
    assert ngram_continuation(history, 3, k=0) == []
    assert ngram_continuation(list(range(20)), 3, k=5) == []             # the last token never occurred before
    assert ngram_continuation([4], 3, k=5) == []                         # too short to match anything


def test_a_match_running_into_the_end_repeats_with_its_period():
    assert ngram_continuation([1, 2, 3, 1, 2], 3, k=5) == [3, 1, 2, 3, 1]   # period 3
    assert ngram_continuation([5, 9, 9], 3, k=3) == [9, 9, 9]              # period 1
    assert ngram_continuation([1, 2, 3, 1, 2], 3, k=2) == [3, 1]           # enough tokens: just cut at k


def test_the_matcher_agrees_with_a_brute_force_search():
    rng = np.random.default_rng(0)
    for _ in range(300):
        history = rng.integers(0, 4, size=rng.integers(1, 30)).tolist()
        k, max_ngram = int(rng.integers(1, 6)), int(rng.integers(1, 4))
        expected = []
        for n in range(min(max_ngram, len(history) - 1), 0, -1):
            starts = [i for i in range(len(history) - n) if history[i: i + n] == history[-n:]]
            if starts:
                follow = history[starts[-1] + n:]
                expected = [follow[j % len(follow)] for j in range(k)]
                break
        assert ngram_continuation(history, max_ngram, k) == expected, (history, max_ngram, k)


def test_the_proposers_index_agrees_with_the_matcher_as_blocks_arrive():
    """The index read in at some steps only (as the policy matches) finds what the matcher finds
    over the whole history at every step."""
    rng = np.random.default_rng(1)
    for _ in range(60):
        max_ngram = int(rng.integers(1, 4))
        proposer = NgramProposer(max_drafts=5, max_ngram=max_ngram)
        history = rng.integers(0, 4, size=int(rng.integers(1, 12))).tolist()
        proposer.start(torch.tensor([history]), None)
        for _ in range(int(rng.integers(1, 10))):
            last = int(rng.integers(0, 4))
            if rng.random() < 0.6:
                k = int(rng.integers(0, 7))
                assert proposer.continuation(last, k) == ngram_continuation(
                    history + [last], max_ngram, k), (history, last, max_ngram, k)
            block = [last] + rng.integers(0, 4, size=int(rng.integers(0, 4))).tolist()
            proposer.accepted(torch.tensor([block]), len(block) - 1, len(history), None)
            history += block


def test_the_proposer_keeps_the_committed_history():
    proposer = NgramProposer(max_drafts=4, max_ngram=2)
    assert proposer.block_size == 5 and proposer.layer_ids is None
    proposer.start(torch.tensor([[1, 2, 3, 4, 1]]), None)
    drafts, q = proposer.propose(torch.tensor([2]), 4)                   # history 1 2 3 4 1 | 2
    assert drafts.tolist() == [3, 4, 1, 2] and q is None
    proposer.accepted(torch.tensor([[2, 3, 4, 1, 2]]), 1, 5, None)      # 2 and 3 kept; 4 1 2 rejected
    drafts, _ = proposer.propose(torch.tensor([7]), 4)                   # 1 2 3 4 1 2 3 | 7: never seen
    assert drafts.shape == (0,)
    with pytest.raises(ValueError, match="max_drafts"):
        NgramProposer(max_drafts=0)


# ----------------------------------------------------------------------------- add_branch
def small_tree() -> DraftTree:
    """root 0 -> 5 (1) -> 8 (3); root -> 6 (2)."""
    return DraftTree(torch.tensor([0, 5, 6, 8]), parents=[-1, 0, 0, 1], depths=[0, 1, 1, 2], chain=[5, 8])


def test_a_branch_shares_the_prefix_the_tree_holds():
    tree = add_branch(small_tree(), [5, 8, 9, 4])
    assert tree.tokens.tolist() == [0, 5, 6, 8, 9, 4]
    assert tree.parents == [-1, 0, 0, 1, 3, 4] and tree.depths == [0, 1, 1, 2, 3, 4]
    assert tree.chain == [5, 8] and tree.path_length([5, 8, 9, 4]) == 4
    assert add_branch(small_tree(), [6]).tokens.tolist() == [0, 5, 6, 8]    # held already: nothing added
    assert len(add_branch(small_tree(), [])) == 4


def test_a_branch_off_the_root_is_new_and_masks_only_its_ancestors():
    tree = add_branch(small_tree(), [7, 5])
    assert tree.tokens.tolist() == [0, 5, 6, 8, 7, 5] and tree.parents == [-1, 0, 0, 1, 0, 4]
    assert tree.depths == [0, 1, 1, 2, 1, 2]
    mask = tree.ancestor_mask()
    assert mask[5].nonzero().flatten().tolist() == [0, 4, 5]               # root, 7, itself: not the other 5
    assert mask[3].nonzero().flatten().tolist() == [0, 1, 3]
    for kids in tree.children():                                          # siblings never share a token
        assert len(set(kids)) == len(kids)


def test_a_branch_on_a_built_tree_adds_at_most_its_length():
    logp = torch.log_softmax(torch.randn(6, 9, generator=torch.Generator().manual_seed(3)), dim=-1)
    tree = build_tree(torch.tensor(1), logp, 10)
    for branch in ([int(t) for t in tree.chain], [0, 1, 2, 3, 4, 5], [8] * 6):
        grown = add_branch(tree, branch)
        assert len(tree) <= len(grown) <= len(tree) + len(branch)
        assert grown.path_length(branch) == len(branch)
        assert all(grown.parents[i] < i and grown.depths[i] == grown.depths[grown.parents[i]] + 1
                   for i in range(1, len(grown)))
        assert grown.tokens[: len(tree)].tolist() == tree.tokens.tolist()    # the drafter's nodes unchanged


# ----------------------------------------------------------------------------- lossless, greedy
@pytest.fixture(scope="module")
def cases(greedy_cases):
    """50 prompts (math and code) with the target's own greedy continuation."""
    return greedy_cases(MAX_NEW, math_start=1300, code_seed=9)


@pytest.mark.slow
@pytest.mark.parametrize("max_drafts", [1, 4, 10])
def test_ngram_greedy_equals_target_greedy_on_50_prompts(tiny, cases, max_drafts, shapes):
    """Also: some steps draft nothing (no match), some fewer than asked, and some accept drafts."""
    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)
    wrong, lengths, short = 0, [], []

    class Recording(NgramProposer):
        def propose(self, last_token, k):
            draft = super().propose(last_token, k)            # a ChainDraft, q None
            short.append(len(draft.tokens) < k)
            return draft

    for ids, expected in cases:
        proposer = PerRow(Recording(max_drafts, shapes=shapes))
        result = generate(target, proposer, ids, MAX_NEW, stop_token_ids=stops)
        wrong += result.tokens != expected
        lengths += result.acceptance_lengths
    assert wrong == 0
    assert any(short) and not all(short)
    assert 1 in lengths and max(lengths) > 1 and max(lengths) <= max_drafts + 1


@pytest.mark.slow
def test_hybrid_tree_greedy_equals_target_greedy_on_50_prompts(tiny, random_drafter, cases, shapes):
    """An untrained drafter is rarely right, so the n-gram branch carries most accepted tokens:
    the hybrid's tau beats the plain tree's on the same prompts."""
    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)
    wrong, lengths = 0, {"tree": [], "hybrid": []}
    for ids, expected in cases:
        for name, proposer in (("tree", DFlashTreeProposer(random_drafter, target, 8, block_size=8, shapes=shapes)),
                               ("hybrid", HybridTreeProposer(random_drafter, target, 8, block_size=8, ngram_drafts=6,
                                                             shapes=shapes))):
            result = generate(target, proposer, ids, MAX_NEW, stop_token_ids=stops)
            wrong += result.tokens != expected
            assert all(1 <= a <= 8 for a in result.acceptance_lengths)
            lengths[name] += result.acceptance_lengths
    assert wrong == 0
    tau = {name: sum(v) / len(v) for name, v in lengths.items()}
    assert tau["hybrid"] > tau["tree"], tau


@pytest.mark.parametrize("max_new", [1, 2, 7])
def test_ngram_and_hybrid_stop_at_exactly_max_new_tokens(tiny, random_drafter, max_new):
    """A repetitive prompt, so the drafts are long and would run past the limit if not cut."""
    target, tokenizer = tiny
    ids = tokenizer("a = 1\nb = 1\nc = 1\nd = 1\ne = 1\nf =", return_tensors="pt").input_ids
    expected = generate_autoregressive(target, ids, max_new).tokens
    for proposer in (PerRow(NgramProposer(10)), HybridTreeProposer(random_drafter, target, 4)):
        result = generate(target, proposer, ids, max_new)
        assert result.tokens == expected and len(result.tokens) == max_new
