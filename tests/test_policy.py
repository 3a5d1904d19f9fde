"""The cost-aware block size: lossless whatever it chooses, falls to plain decoding when drafts miss,
comes back when they would be accepted, and is the default of Engine.generate."""
import pytest
import torch

from dflash_lite import corpus, generate_autoregressive, stop_token_ids
from dflash_lite.decode import DFlashProposer, generate
from dflash_lite.costs import StepCosts
from dflash_lite.policy import (
    DEFAULT_TREE_SIZES,
    AcceptanceEstimate,
    Choice,
    CostAwareProposer,
    PolicyOptions,
    chain_accepted,
    choose,
    default_policy,
)

MAX_NEW = 16
# cheap drafting: blocks pay even at modest acceptance, so the policy keeps switching sizes
CHEAP = StepCosts({1: 1.0, 2: 1.1, 16: 1.4, 33: 1.6, 65: 2.2}, {2: 0.1, 16: 0.2})
# the shape measured on CPU for the shipped pair: a block must commit about 2 tokens to pay
MEASURED_SHAPE = StepCosts({1: 1.0, 2: 1.2, 16: 1.4, 33: 1.7, 65: 2.4}, {2: 0.45, 16: 0.5})


@pytest.fixture(scope="module")
def cases(greedy_cases):
    """50 prompts (math and code) with the target's own greedy continuation."""
    out = greedy_cases(MAX_NEW, math_start=1300, code_seed=7)
    return out


def test_costs_are_fitted_and_one_token_is_its_own_point():
    costs = StepCosts({1: 1.0, 2: 2.0, 4: 1.5, 8: 2.5, 16: 3.0}, {2: 0.5, 16: 0.4})
    assert costs.target(1) == 1.0
    assert costs.target(2) <= costs.target(3) <= costs.target(16) <= costs.target(33)   # noise cannot invert them
    assert costs.draft(1) == 0.0 and costs.draft(2) == costs.draft(16)                 # slope clamped at 0


def test_expected_tokens_from_pooled_then_per_position_acceptance():
    estimate = AcceptanceEstimate(depth=15, prior=0.5, prior_weight=1.0)
    assert estimate.acceptance() == 0.5
    assert estimate.expected_tokens()[0] == 1.0 and estimate.expected_tokens()[3] == pytest.approx(1.875)
    estimate.observe_chain(2, 3)                             # a block of 4 was drafted: 2 of 3 accepted
    a = (2 + 0.5) / (3 + 1)                                  # pooled, then per position: 1/1, 1/1, 0/1 with prior a
    a1, a2, a3 = (1 + a) / 2, (1 + a) / 2, a / 2
    assert estimate.acceptance() == pytest.approx(a)
    assert estimate.acceptance_by_position()[:3] == pytest.approx([a1, a2, a3])
    assert estimate.expected_tokens()[3] == pytest.approx(1 + a1 + a1 * a2 + a1 * a2 * a3)


def test_choose_is_a_pure_function_of_estimate_costs_and_options():
    """The optimistic prior drafts a long block; after a run of rejected first drafts the same
    function chooses plain decoding; a tree is chosen only where it is offered."""
    options = PolicyOptions(max_block_size=16)
    fresh = AcceptanceEstimate(depth=15)
    assert choose(fresh, MEASURED_SHAPE, options) == choose(fresh, MEASURED_SHAPE, options)
    assert choose(fresh, MEASURED_SHAPE, options).block_size > 8 and fresh.judged == 0
    missed = AcceptanceEstimate(depth=15)
    for _ in range(30):
        missed.decay(options.decay)
        missed.observe_chain(0, 1)
    assert choose(missed, MEASURED_SHAPE, options) == Choice(1)
    free_tree = StepCosts({1: 1.0, 2: 1.4, 16: 1.4, 33: 1.4}, {2: 0.2, 16: 0.2})
    with_trees = PolicyOptions(max_block_size=16, tree_sizes=(32,))
    assert choose(AcceptanceEstimate(15, (32,)), free_tree, with_trees) == Choice(16, 32)
    assert str(Choice(16, 32)) == "tree 32" and str(Choice(4)) == "4"


@pytest.mark.parametrize("max_block_size,tree_sizes,costs", [(2, (), CHEAP), (6, (), MEASURED_SHAPE), (16, (), CHEAP),
                                                             (16, (8, 32), CHEAP), (8, (64,), MEASURED_SHAPE)])
def test_policy_greedy_equals_target_greedy_on_50_prompts(tiny, random_drafter, cases, max_block_size, tree_sizes,
                                                           costs):
    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)
    wrong, chosen = 0, set()
    for ids, expected in cases:
        proposer = CostAwareProposer(random_drafter, target, PolicyOptions(max_block_size, tree_sizes), costs)
        result = generate(target, proposer, ids, MAX_NEW, stop_token_ids=stops)
        wrong += result.tokens != expected
        chosen.update(c.block_size for c in proposer.chosen)
    assert wrong == 0
    assert 1 in chosen and len(chosen) >= 2                  # it drafted, fell back to plain steps, or both


def _start(proposer, target):
    proposer.start(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, 5 * target.config.hidden_size))


def _step(proposer, target, n):
    """One verified step of the proposer's own choice (chains and plain steps only) with n drafts accepted."""
    draft = proposer.propose(torch.zeros(1, dtype=torch.long), 15)
    k = len(draft.tokens)
    proposer.accepted(torch.zeros(1, k + 1, dtype=torch.long), min(n, k), proposer.context_length,
                      torch.zeros(1, k + 1, 5 * target.config.hidden_size))


def test_policy_falls_to_plain_decoding_and_comes_back(tiny, random_drafter):
    target, _ = tiny
    proposer = CostAwareProposer(random_drafter, target, costs=MEASURED_SHAPE)
    _start(proposer, target)
    for _ in range(200):                                     # every draft is rejected
        _step(proposer, target, 0)
    assert proposer.chosen[0].block_size > 8                 # the prior is optimistic: draft at first
    sizes = [c.block_size for c in proposer.chosen[-100:]]
    assert sizes.count(1) >= 90                              # mostly plain decoding, with rare probes
    assert any(b > 1 for b in sizes)                         # ... which do come: it can come back
    for _ in range(150):                                     # drafts are accepted again: long blocks
        _step(proposer, target, 15)
    assert proposer.chosen[-1].block_size >= 14 and [c.block_size for c in proposer.chosen[-20:]].count(1) == 0


def test_policy_takes_a_tree_only_when_it_pays(tiny, random_drafter):
    target, _ = tiny
    last = torch.zeros(1, dtype=torch.long)
    expensive_tree = StepCosts({1: 1.0, 2: 1.1, 16: 1.4, 33: 5.0}, {2: 0.1, 16: 0.2})
    proposer = CostAwareProposer(random_drafter, target, PolicyOptions(tree_sizes=(32,)), expensive_tree)
    _start(proposer, target)
    proposer.propose(last, 15)
    assert proposer.choice.tree_size is None
    free_tree = StepCosts({1: 1.0, 2: 1.4, 16: 1.4, 33: 1.4}, {2: 0.2, 16: 0.2})    # a wide verify costs nothing
    proposer = CostAwareProposer(random_drafter, target, PolicyOptions(tree_sizes=(32,)), free_tree)
    _start(proposer, target)
    proposer.propose(last, 15)
    assert proposer.choice.tree_size == 32 and [str(c) for c in proposer.chosen] == ["tree 32"]


def test_the_policy_context_survives_plain_steps(tiny):
    """Plain steps leave their features pending; the next drafter forward must see all of them:
    the policy's draft equals a fixed-size proposer's draft at the same point."""
    from dflash_lite.checkpoints import load_drafter
    from dflash_lite.target import default_drafter_path

    target, tokenizer = tiny
    drafter = load_drafter(default_drafter_path("tiny"))
    ids = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 5).prompt, return_tensors="pt").input_ids
    never = StepCosts({1: 1.0, 16: 100.0}, {16: 100.0})                  # drafting never pays
    plain = CostAwareProposer(drafter, target, costs=never)
    assert generate(target, plain, ids, 12).acceptance_lengths == [1] * 11
    # the same 12 tokens, then one draft from the pending context vs. from a proposer that drafted all along
    free = generate_autoregressive(target, ids, 13).tokens
    prefix = torch.cat([ids, torch.tensor([free[:12]])], dim=1)
    with torch.inference_mode():
        from dflash_lite.decode import new_cache, verify
        _, hidden = verify(target, prefix[:, :-1], new_cache(target), drafter.config.target_layer_ids)
        reference = DFlashProposer(drafter, target)
        reference.start(prefix[:, :-1], hidden)
        expected = reference.propose(prefix[:, -1], 8)[0]
        plain.costs = StepCosts({1: 1.0, 16: 1.0}, {16: 0.0})          # now a chain is free: it drafts
        assert sum(h.shape[1] for h in plain.waiting) == prefix.shape[1] - 1 - len(plain.cache)  # none lost or doubled
        assert torch.equal(plain.propose(prefix[:, -1], 8)[0], expected)


def test_engine_generate_uses_the_policy_by_default(tiny, random_drafter):
    from dflash_lite.engine import Engine

    target, tokenizer = tiny
    engine = Engine(target, tokenizer, random_drafter)
    assert isinstance(engine.proposer(), CostAwareProposer)
    assert type(Engine(target, tokenizer, random_drafter, block_size=8).proposer()) is DFlashProposer
    text = engine.generate("def f(x):", max_new_tokens=12)
    plain = Engine(target, tokenizer, random_drafter, block_size=1).generate("def f(x):", max_new_tokens=12)
    assert text == plain and engine.last_result.acceptance_lengths
    with pytest.raises(ValueError, match="block_size"):
        Engine(target, tokenizer, random_drafter, block_size=0)


def test_a_tree_step_tells_the_policy_what_the_chain_would_have_done():
    """A tree step updates the chain's acceptance too: the accepted path agrees with the chain of
    argmaxes for some drafts, then leaves it (the next chain draft was wrong) or ends."""
    chain = [5, 6, 7, 8]
    assert chain_accepted([5, 6, 9], chain, 4) == (2, 3)    # left the chain at the third draft: it was wrong
    assert chain_accepted([4, 6], chain, 4) == (0, 1)       # a sibling of the first draft was right
    assert chain_accepted([5, 6], chain, 4) == (2, 3)       # ended on it; the tree held the third: wrong
    assert chain_accepted([5, 6], chain, 2) == (2, 2)       # ended where the tree stopped: third unknown
    assert chain_accepted([], chain, 0) == (0, 0)
    assert chain_accepted([], chain, 1) == (0, 1)
    assert chain_accepted([5, 6, 7, 8], chain, 4) == (4, 4)


def test_default_policy_offers_trees_at_every_temperature(tiny, random_drafter):
    from dflash_lite.engine import Engine

    target, tokenizer = tiny
    assert DEFAULT_TREE_SIZES and default_policy(random_drafter, target).tree_sizes == DEFAULT_TREE_SIZES
    engine = Engine(target, tokenizer, random_drafter)
    assert engine.proposer().tree_sizes == DEFAULT_TREE_SIZES              # one policy for every temperature
    engine.generate("def f(x):", max_new_tokens=12, temperature=0.8, seed=0)
    assert len(engine.last_result.tokens) == 12 and engine.last_result.acceptance_lengths
