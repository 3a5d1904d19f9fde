"""Draft trees (DDTree): best-first construction, one tree-masked verify equal to sequential target
forwards, greedy output identical to the target's, and the shipped drafter gaining from trees."""
import itertools

import pytest
import torch

from dflash_lite import corpus, generate_autoregressive, stop_token_ids
from dflash_lite.decoding.acceptance import SamplingParams
from dflash_lite.decoding.decode import DFlashProposer, generate, new_cache, prefill
from dflash_lite.decoding.tree import (
    DFlashTreeProposer,
    DraftTree,
    accept_tree,
    build_tree,
    verify_tree,
)

MAX_NEW = 16


@pytest.fixture(scope="module")
def cases(greedy_cases):
    """50 prompts (math and code) with the target's own greedy continuation."""
    out = greedy_cases(MAX_NEW, math_start=700, code_seed=5)
    return out


@pytest.fixture(scope="module")
def shipped_drafter():
    from dflash_lite.decoding.checkpoints import load_drafter
    from dflash_lite.decoding.target import default_drafter_path
    return load_drafter(default_drafter_path("tiny"))


def test_tree_holds_the_most_likely_paths():
    """Brute force over every path: the tree's nodes are exactly the top-N by product of probabilities."""
    logp = torch.log_softmax(torch.randn(4, 5, generator=torch.Generator().manual_seed(0)) * 2, dim=-1)
    tree = build_tree(torch.tensor(7), logp, 12)
    paths = []
    for i in range(1, len(tree)):
        path, node = [], i
        while node > 0:
            path.append(int(tree.tokens[node]))
            node = tree.parents[node]
        paths.append(tuple(reversed(path)))
        assert tree.depths[i] == len(paths[-1]) and tree.parents[i] < i
    scores = {p: sum(float(logp[d, t]) for d, t in enumerate(p))
              for depth in range(1, 5) for p in itertools.product(range(5), repeat=depth)}
    best = sorted(scores, key=scores.get, reverse=True)[:12]
    assert len(set(paths)) == 12 and set(paths) == set(best)
    assert int(tree.tokens[0]) == 7 and tree.parents[0] == -1
    for path in best:                                 # path_length: how much of a path the tree holds
        assert tree.path_length(list(path)) == len(path)
    chain = logp.argmax(-1).tolist()
    assert tree.chain == chain                        # the top token at each depth
    held = max(d for d in range(5) if tuple(chain[:d]) in set(paths) | {()})
    assert tree.path_length(chain) == held


def test_tree_verify_equals_one_target_forward_per_path(tiny):
    """Every node's logits from the one tree-masked forward equal the target run on context + its path."""
    target, tokenizer = tiny
    ids = tokenizer("def parse(line):\n", return_tensors="pt").input_ids
    cache = new_cache(target)
    with torch.inference_mode():
        last = prefill(target, ids, cache)[0].argmax(dim=-1)
        logp = torch.log_softmax(torch.randn(5, target.config.vocab_size, generator=torch.Generator().manual_seed(1)), -1)
        tree = build_tree(last[0], logp, 20)
        logits, hidden = verify_tree(target, tree, cache, [1, 3])
        assert hidden.shape == (1, len(tree), 2 * target.config.hidden_size)
        for i in range(len(tree)):
            path, node = [], i
            while node >= 0:
                path.insert(0, int(tree.tokens[node]))
                node = tree.parents[node]
            full = target(torch.cat([ids, torch.tensor([path])], dim=1)).logits[0, -1]
            torch.testing.assert_close(logits[i], full, atol=1e-4, rtol=1e-4)


def test_keep_path_leaves_the_cache_of_the_path_only(tiny):
    """After gathering a path that skips nodes, the cache equals one built from context + path."""
    target, tokenizer = tiny
    ids = tokenizer("x = 1\n", return_tensors="pt").input_ids
    cache, reference = new_cache(target), new_cache(target)
    with torch.inference_mode():
        prefill(target, ids, cache)
        logp = torch.log_softmax(torch.randn(3, target.config.vocab_size, generator=torch.Generator().manual_seed(2)), -1)
        tree = build_tree(torch.tensor(5), logp, 10)
        verify_tree(target, tree, cache, [1])
        node = max(range(len(tree)), key=lambda i: (tree.depths[i], i))     # a deep node that is not first
        path = []
        while node >= 0:
            path.insert(0, node)
            node = tree.parents[node]
        assert path != list(range(len(path)))                               # the gather is not a no-op
        cache.keep_path(ids.shape[1], path)
        target(torch.cat([ids, tree.tokens[path].view(1, -1)], dim=1), past_key_values=reference, use_cache=True)
    kept = ids.shape[1] + len(path)
    assert cache.position == reference.position == kept
    for mine, theirs in zip(cache.layers, reference.layers):
        torch.testing.assert_close(mine.keys[:, :, :kept], theirs.keys[:, :, :kept], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mine.values[:, :, :kept], theirs.values[:, :, :kept], atol=1e-5, rtol=1e-5)


def test_accept_tree_follows_the_target_argmax():
    """root -> 5 (node 1) -> 8 (node 4); root -> 6 (node 2) -> 7 (node 3). The target says 6, 7, 9."""
    tree = DraftTree(torch.tensor([0, 5, 6, 7, 8]), parents=[-1, 0, 0, 2, 1], depths=[0, 1, 1, 2, 2])
    logits = torch.zeros(5, 10)
    logits[0, 6] = logits[2, 7] = logits[3, 9] = logits[1, 8] = logits[4, 1] = 1.0
    assert accept_tree(tree, logits) == ([0, 2, 3], 9)
    logits[0, 6], logits[0, 4] = 0.0, 2.0                                   # the target wants 4: no draft fits
    assert accept_tree(tree, logits) == ([0], 4)


@pytest.mark.parametrize("tree_size", [1, 12, 64])
def test_tree_greedy_equals_target_greedy_on_50_prompts(tiny, random_drafter, cases, tree_size, shapes):
    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)
    wrong = 0
    for ids, expected in cases:
        result = generate(target, DFlashTreeProposer(random_drafter, target, tree_size, block_size=8, shapes=shapes),
                          ids, MAX_NEW, stop_token_ids=stops)
        wrong += result.tokens != expected
        assert all(1 <= a <= 8 for a in result.acceptance_lengths)
    assert wrong == 0


def test_tree_with_the_shipped_drafter_is_lossless_and_beats_the_chain(tiny, shipped_drafter, monkeypatch):
    """On held-out math prompts the tree's tau is at least the chain's (same drafter forward, more
    paths), the output is the target's, and accepted paths leave the first-ranked spine."""
    import dflash_lite.decoding.tree as tree_module

    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)
    paths = []
    original = tree_module.DraftTree.accept_read          # greedy: every row's verdict, one read

    def recording(tree, read):
        path, tokens = original(tree, read)
        paths.append(path)
        return path, tokens

    monkeypatch.setattr(tree_module.DraftTree, "accept_read", recording)
    lengths = {"chain": [], 32: [], 64: []}
    for problem in corpus.math_problems(4, split="held_out", start=2100):
        ids = tokenizer(problem.prompt, return_tensors="pt").input_ids
        expected = generate_autoregressive(target, ids, 64, stop_token_ids=stops).tokens
        for name in lengths:
            proposer = DFlashProposer(shipped_drafter, target) if name == "chain" else \
                DFlashTreeProposer(shipped_drafter, target, name)
            result = generate(target, proposer, ids, 64, stop_token_ids=stops)
            assert result.tokens == expected
            lengths[name] += result.acceptance_lengths
    tau = {name: sum(v) / len(v) for name, v in lengths.items()}
    assert tau[32] >= tau["chain"] and tau[64] >= tau["chain"], tau
    assert any(p != list(range(len(p))) for p in paths)                   # some path went through a sibling


def test_sampled_tree_is_reproducible_and_bad_sizes_fail_in_one_line(tiny, random_drafter):
    """A sampled tree run is a function of the generator's seed (its distribution is tested in
    tests/test_sampling_lossless.py); a tree of no nodes is refused before any work."""
    target, tokenizer = tiny
    ids = tokenizer("x", return_tensors="pt").input_ids
    runs = [generate(target, DFlashTreeProposer(random_drafter, target, 8), ids, 12, SamplingParams(temperature=1.0),
                     generator=torch.Generator().manual_seed(seed)).tokens for seed in (0, 0, 1)]
    assert len(runs[0]) == 12 and runs[0] == runs[1] and runs[2] != runs[0]   # the seed decides the run
    with pytest.raises(ValueError, match="tree_size"):
        DFlashTreeProposer(random_drafter, target, 0)


@pytest.mark.parametrize("max_new", [1, 2, 7])
def test_tree_stops_at_exactly_max_new_tokens(tiny, shipped_drafter, max_new):
    target, tokenizer = tiny
    ids = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 3).prompt, return_tensors="pt").input_ids
    expected = generate_autoregressive(target, ids, max_new).tokens
    result = generate(target, DFlashTreeProposer(shipped_drafter, target, 32), ids, max_new)
    assert result.tokens == expected and len(result.tokens) == max_new
