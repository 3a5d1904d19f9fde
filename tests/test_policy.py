"""The cost-aware block size: lossless whatever it chooses, falls to plain decoding when drafts miss,
comes back when they would be accepted, and is the default of Engine.generate."""
import math
import random

import pytest
import torch

from dflash_lite import corpus, generate_autoregressive, stop_token_ids
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.decoding.ngram import NgramIndex
from dflash_lite.decoding.choice import LEAD
from dflash_lite.decoding.costs import BACKOFF, DRIFT_MARGIN, EXPLORE, DriftMonitor, StepCosts
from dflash_lite.decoding.policy import (
    AcceptanceEstimate,
    Choice,
    CostAwareProposer,
    PolicyOptions,
    chain_accepted,
    choose,
    counted,
    step_seconds,
)
from dflash_lite.decoding.session import DEFAULT_TREE_SIZES, PolicySession, default_policy

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


def test_a_calibration_taken_under_load_never_prices_a_forward_below_the_fastest_measured():
    """Timings taken while other work shares the cores can be convex in b (the wide forwards hit
    the contention hardest), and the least-squares line through them then crosses zero at a small
    block: a chain of two priced below one token, or below nothing, would be chosen for free. No
    forward over b tokens costs less than one token's, and none less than the fastest measured."""
    loaded = StepCosts({1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0, 16: 40.0, 32: 120.0},
                       {2: 1.0, 4: 1.0, 16: 40.0})
    for b in range(2, 33):
        assert loaded.target(b) >= loaded.target(1) == 10.0
        assert loaded.draft(b) >= 1.0
    assert loaded.target(32) > loaded.target(16) > loaded.target(2)   # the fit still rises in b
    shorter = StepCosts.by_context({100: ({1: 4.0, 16: 6.0}, {16: 2.0}),
                                    300: ({1: 12.0, 16: 30.0}, {16: 9.0})})
    assert shorter.target(1, 0) == 4.0 and shorter.target(16, 0) >= 4.0 and shorter.draft(16, 0) == 2.0


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
    assert choose(fresh, MEASURED_SHAPE, options)[0] == choose(fresh, MEASURED_SHAPE, options)[0]
    assert choose(fresh, MEASURED_SHAPE, options)[0].block_size > 8 and fresh.judged == 0
    missed = AcceptanceEstimate(depth=15)
    for _ in range(30):
        missed.decay(options.decay)
        missed.observe_chain(0, 1)
    assert choose(missed, MEASURED_SHAPE, options)[0] == Choice(1)
    free_tree = StepCosts({1: 1.0, 2: 1.4, 16: 1.4, 33: 1.4}, {2: 0.2, 16: 0.2})
    with_trees = PolicyOptions(max_block_size=16, tree_sizes=(32,))
    assert choose(AcceptanceEstimate(15, (32,)), free_tree, with_trees)[0] == Choice(16, 32)
    assert str(Choice(16, 32)) == "tree 32" and str(Choice(4)) == "4"


@pytest.mark.parametrize("max_block_size,tree_sizes,costs,ngram", [
    (2, (), CHEAP, 0), (6, (), MEASURED_SHAPE, 0), (16, (), CHEAP, 0), (16, (8, 32), CHEAP, 0), (8, (64,), MEASURED_SHAPE, 0),
    (16, (16,), CHEAP, 10), (16, (16,), MEASURED_SHAPE, 10)])
def test_policy_greedy_equals_target_greedy_on_50_prompts(tiny, random_drafter, cases, max_block_size, tree_sizes,
                                                           costs, ngram, shapes):
    """Every option, the hybrid policy's included (prompt lookup and hybrid trees, ``ngram``), keeps
    the target's greedy output; one session's estimates carry from prompt to prompt."""
    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)
    session = PolicySession(random_drafter, target, PolicyOptions(max_block_size, tree_sizes, ngram), costs)
    wrong, chosen, kinds = 0, set(), set()
    for ids, expected in cases:
        proposer = session.proposer(ids, shapes)
        result = generate(target, proposer, ids, MAX_NEW, stop_token_ids=stops)
        session.finished(proposer)
        wrong += result.tokens != expected
        chosen.update(c.block_size for c in proposer.chosen)
        kinds.update(c.kind for c in proposer.chosen)
    assert wrong == 0
    assert 1 in chosen and len(chosen) >= 2                  # it drafted, fell back to plain steps, or both
    assert bool(kinds & {"ngram", "hybrid"}) == bool(ngram)  # prompt lookup ran only where offered


def _start(proposer, target):
    proposer.start(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, 5 * target.config.hidden_size))


def _step(proposer, target, n):
    """One verified step of the proposer's own choice (chains and plain steps only) with n drafts accepted."""
    draft, = proposer.propose(torch.zeros(1, dtype=torch.long), [15])
    k = min(n, len(draft.tokens))
    proposer.accepted([torch.zeros(1, k + 1, dtype=torch.long)], [proposer.context[0]],
                      [torch.zeros(1, k + 1, 5 * target.config.hidden_size)])


def test_rows_that_leave_have_their_pending_drafts_judged_as_far_as_held(tiny, random_drafter):
    """A finished row's last drafts are judged when it leaves (no next token: only as far as its
    step held them); the rows that stay keep theirs for their next token."""
    target, _ = tiny
    proposer = CostAwareProposer(random_drafter, target, PolicyOptions(ngram_drafts=4),
                                 MEASURED_SHAPE)
    proposer.start(torch.zeros(3, 4, dtype=torch.long), torch.zeros(3, 4, 5 * target.config.hidden_size))
    lookup = proposer.estimate.ngram
    # per row: lookup's chain [5, 6, 7], its first draft held and accepted by the step
    proposer.pending = [[(lookup, [5], [5, 6, 7], 1)] for _ in range(3)]
    proposer.keep([0, 2])
    assert (lookup.accepted, lookup.judged) == (1, 1)        # row 1 alone, as far as held
    assert len(proposer.pending) == 2 and all(len(p) == 1 for p in proposer.pending)
    proposer.observe_pending([6, 9])                         # the next tokens judge draft 2
    assert (lookup.accepted, lookup.judged) == (1 + 2 + 1, 1 + 2 + 2)
    assert proposer.pending == [[], []]


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
    proposer.propose(last, [15])
    assert proposer.choice.tree_size is None
    free_tree = StepCosts({1: 1.0, 2: 1.4, 16: 1.4, 33: 1.4}, {2: 0.2, 16: 0.2})    # a wide verify costs nothing
    proposer = CostAwareProposer(random_drafter, target, PolicyOptions(tree_sizes=(32,)), free_tree)
    _start(proposer, target)
    proposer.propose(last, [15])
    assert proposer.choice.tree_size == 32 and [str(c) for c in proposer.chosen] == ["tree 32"]


def test_the_policy_context_survives_plain_steps(tiny):
    """Plain steps leave their features pending; the next drafter forward must see all of them:
    the policy's draft equals a fixed-size proposer's draft at the same point."""
    from dflash_lite.decoding.checkpoints import load_drafter
    from dflash_lite.decoding.target import default_drafter_path

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
        from dflash_lite.decoding.decode import new_cache, verify
        _, hidden = verify(target, prefix[:, :-1], new_cache(target), drafter.config.target_layer_ids)
        reference = DFlashProposer(drafter, target)
        reference.start(prefix[:, :-1], hidden)
        expected = reference.propose(prefix[:, -1], [8])[0].tokens
        plain.costs = StepCosts({1: 1.0, 16: 1.0}, {16: 0.0})          # now a chain is free: it drafts
        assert sum(h.shape[1] for h in plain.waiting[0]) == prefix.shape[1] - 1 - plain.cache.position  # none lost or doubled
        assert torch.equal(plain.propose(prefix[:, -1], [8])[0].tokens, expected)


def test_engine_generate_uses_the_policy_by_default(tiny, random_drafter):
    from dflash_lite.decoding.engine import Engine

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


def test_the_targets_next_token_judges_the_draft_the_step_did_not_hold():
    """Past what the step verified, the target's own next token says whether the chain's next
    draft would have been accepted; a held draft on which the path ended was rejected whatever
    token followed."""
    chain = [5, 6, 7, 8]
    assert chain_accepted([5, 6], chain, 2, next_token=7) == (3, 3)       # the third would have been right
    assert chain_accepted([5, 6], chain, 2, next_token=9) == (2, 3)       # ... or wrong
    assert chain_accepted([], chain, 0, next_token=5) == (1, 1)           # a plain step judges the first draft
    assert chain_accepted([], chain, 0, next_token=4) == (0, 1)
    assert chain_accepted([5, 6], chain, 4, next_token=7) == (2, 3)       # held and not accepted: rejected
    assert chain_accepted([5, 9], chain, 4, next_token=7) == (1, 2)       # left the chain: nothing more to judge
    assert chain_accepted([5, 6, 7, 8], chain, 2, next_token=1) == (4, 4)  # the chain has no fifth draft


def test_a_step_decays_only_the_estimates_it_observed():
    options = PolicyOptions(max_block_size=16, ngram_drafts=10)
    estimate = AcceptanceEstimate.for_options(options)
    estimate.observe_chain(3, 4)
    estimate.ngram.observe_chain(3, 4)
    estimate.decay(0.5, 0.9)
    assert estimate.judged == pytest.approx(2.0) and estimate.ngram.judged == pytest.approx(3.6)
    estimate.decay(0.5)
    assert estimate.judged == pytest.approx(1.0) and estimate.ngram.judged == pytest.approx(1.8)


def test_a_batch_where_nothing_wins_chooses_once_a_quiet_spell_and_keeps_its_records_as_before(
        tiny, random_drafter, monkeypatch):
    """At a batch whose drafter is off and whose prompt lookup cannot win, the policy takes
    quiet_steps plain steps after each choice without choosing again; every step still moves its
    records (the estimates' decay, the yields' fading, the batch's steps). Same tokens, same
    records, a quarter of the choices; a negative spell is refused."""
    from dflash_lite.decoding import policy as module

    target, tokenizer = tiny
    prompts = [tokenizer(t, return_tensors="pt").input_ids for t in
               ("def f(x):\n    return x", "Tom has 3 apples.", "def g(a, b):")]
    made = {}
    for quiet in (0, 3):
        options = PolicyOptions(max_block_size=16, ngram_drafts=10, prior=0.01,
                                prior_weight=1000.0, quiet_steps=quiet)
        estimate = AcceptanceEstimate.for_options(options)
        estimate.observe_chain(1, 8)
        estimate.ngram.observe_chain(0, 5)
        costs = StepCosts({1: 1.0, 2: 1.2, 16: 1.4, 17: 1.5}, {2: 0.45, 16: 0.5}, measured=True,
                          rows=3)
        costs.drafter_idle = True                     # the last request here never drafted
        calls = []
        monkeypatch.setattr(module, "choose", lambda *a, **k: calls.append(1) or choose(*a, **k))
        proposer = CostAwareProposer(random_drafter, target, options, costs, estimate)
        results = generate(target, proposer, prompts, 24)
        made[quiet] = ([r.tokens for r in results], len(calls), estimate, costs, proposer.chosen)
    (tokens, calls, estimate, costs, chosen), (tokens3, calls3, estimate3, costs3, chosen3) = \
        made[0], made[3]
    assert tokens3 == tokens and {c.kind for c in chosen + chosen3} == {"plain"}
    assert len(chosen3) == len(chosen) and costs3.steps == costs.steps == 23   # 24 tokens
    assert calls == len(chosen) + 1 and calls3 == -(-len(chosen) // 4) + 1    # + __init__'s
    assert estimate3.judged == pytest.approx(estimate.judged, rel=1e-9) and estimate.judged < 8
    assert estimate3.ngram.judged == pytest.approx(estimate.ngram.judged, rel=1e-9)
    with pytest.raises(ValueError, match="quiet_steps >= 0"):
        PolicyOptions(quiet_steps=-1)


def test_plain_steps_teach_prompt_lookup_through_the_targets_next_token(tiny, random_drafter):
    """A policy that never drafts (an estimate too pessimistic to try anything) still learns how
    often prompt lookup's first token is the target's: the next step's token judges it."""
    target, tokenizer = tiny
    options = PolicyOptions(max_block_size=16, ngram_drafts=10, prior=0.01, prior_weight=1000.0)
    ids = tokenizer("def f(x):\n    return x\n\ndef g(x):\n    return x\n\ndef h(x):", return_tensors="pt").input_ids
    proposer = CostAwareProposer(random_drafter, target, options, MEASURED_SHAPE)
    result = generate(target, proposer, ids, 24)
    assert {c.kind for c in proposer.chosen} == {"plain"} and len(result.tokens) == 24
    lookup = proposer.estimate.ngram
    assert lookup.judged_at[0] > 0 and lookup.judged_at[1] == 0          # first drafts judged, and nothing deeper
    assert lookup.judged == pytest.approx(lookup.judged_at[0])


def test_a_batch_matches_prompt_lookup_only_where_it_can_win(tiny, random_drafter, monkeypatch):
    """At batch > 1 a match per row per step is host work: a policy whose lookup estimate loses
    even with every row's longest continuation never matches; one whose estimate can win does.
    Both keep every row's own greedy output."""
    target, tokenizer = tiny
    texts = ["def f(x):\n    return x\n\ndef g(x):\n    return x\n\ndef h(x):", "def add(a, b):"]
    ids = [tokenizer(t, return_tensors="pt").input_ids for t in texts]
    alone = [generate(target, CostAwareProposer(random_drafter, target, PolicyOptions(
        max_block_size=16, ngram_drafts=10), MEASURED_SHAPE), x, 16).tokens for x in ids]
    matched = []
    original = NgramIndex.continuation
    monkeypatch.setattr(NgramIndex, "continuation",
                        lambda self, *a: matched.append(1) or original(self, *a))
    for prior, matches in ((0.01, False), (0.99, True)):
        matched.clear()
        options = PolicyOptions(max_block_size=16, ngram_drafts=10, prior=prior,
                                prior_weight=1000.0)
        proposer = CostAwareProposer(random_drafter, target, options, MEASURED_SHAPE)
        results = generate(target, proposer, ids, 16)
        assert [r.tokens for r in results] == alone
        assert bool(matched) == matches, (prior, len(matched))


def test_a_batch_verifies_prompt_lookup_only_after_a_step_that_judged_it(tiny, random_drafter):
    """At batch > 1 a continuation prompt lookup finds first is judged, not verified: that step
    runs something else, and each row's next token tells the estimate whether its first draft was
    right (a docstring's closing quotes matched to its opening ones would cost a verify as wide as
    the drafts, for every row, and commit one token a row). Lookup's drafts run from the step
    after; one row verifies them at once. Every row keeps its own greedy output."""
    target, tokenizer = tiny
    text = "def f(x):\n    return x\n\ndef g(x):\n    return x\n\ndef h(x):"
    ids = tokenizer(text, return_tensors="pt").input_ids
    alone = generate_autoregressive(target, ids, 16).tokens
    options = PolicyOptions(max_block_size=16, ngram_drafts=10, prior=0.99, prior_weight=1000.0)
    one = CostAwareProposer(random_drafter, target, options, MEASURED_SHAPE)
    assert generate(target, one, ids, 16).tokens == alone
    assert one.chosen[0].kind == "ngram"
    batch = CostAwareProposer(random_drafter, target, options, MEASURED_SHAPE)
    assert [r.tokens for r in generate(target, batch, [ids, ids], 16)] == [alone, alone]
    kinds = [c.kind for c in batch.chosen]
    assert kinds[0] != "ngram" and kinds[1] == "ngram", kinds


def test_default_policy_offers_trees_at_every_temperature(tiny, random_drafter):
    from dflash_lite.decoding.engine import Engine

    target, tokenizer = tiny
    assert DEFAULT_TREE_SIZES and default_policy(random_drafter, target).tree_sizes == DEFAULT_TREE_SIZES
    engine = Engine(target, tokenizer, random_drafter)
    assert engine.proposer().tree_sizes == DEFAULT_TREE_SIZES              # one policy for every temperature
    engine.generate("def f(x):", max_new_tokens=12, temperature=0.8, seed=0)
    assert len(engine.last_result.tokens) == 12 and engine.last_result.acceptance_lengths


def _learned(estimate: AcceptanceEstimate, accepted: int, judged: int, times: int = 30) -> AcceptanceEstimate:
    for _ in range(times):
        estimate.decay(0.9)
        estimate.observe_chain(accepted, judged)
    return estimate


def test_choose_takes_prompt_lookup_when_it_is_right_and_cheap():
    """Prompt lookup costs a verify and no drafter forward: when its tokens are accepted and the
    drafter's are not, its chain wins; with no continuation found it is not an option at all."""
    options = PolicyOptions(max_block_size=16, ngram_drafts=10)
    estimate = AcceptanceEstimate.for_options(options)
    _learned(estimate, 0, 1)                                             # the drafter's first draft always misses
    _learned(estimate.ngram, 10, 10)                                     # prompt lookup's ten are accepted
    choice = choose(estimate, MEASURED_SHAPE, options, continuations=[10])[0]
    assert choice.kind == "ngram" and choice == Choice(11, None, 10) and str(choice) == "ngram 10"
    assert choose(estimate, MEASURED_SHAPE, options, continuations=[4])[0] == Choice(5, None, 4)   # only what it found
    assert choose(estimate, MEASURED_SHAPE, options, continuations=[0])[0].kind == "plain"
    assert choose(estimate, MEASURED_SHAPE, options, continuations=[10], depth=3)[0] == Choice(4, None, 3)   # room left


def test_choose_decodes_plainly_when_every_option_misses():
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,), ngram_drafts=10)
    estimate = AcceptanceEstimate.for_options(options)
    for _ in range(30):                                  # decay() decays every estimate, prompt lookup's too
        estimate.decay(0.9)
        estimate.observe_chain(0, 1)
        estimate.ngram.observe_chain(0, 1)
        estimate.observe_tree(16, 1)
        estimate.observe_tree(16, 1, hybrid=True)
    assert choose(estimate, MEASURED_SHAPE, options, continuations=[10])[0] == Choice(1)
    assert Choice(1).kind == "plain" and Choice(4).kind == "chain"


def test_choose_takes_the_hybrid_tree_when_both_drafts_are_right_and_the_verify_is_cheap():
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,), ngram_drafts=10)
    estimate = AcceptanceEstimate.for_options(options)
    _learned(estimate.ngram, 3, 4)                                       # prompt lookup: right at first
    flat = StepCosts({1: 1.0, 2: 1.4, 16: 1.4, 64: 1.4}, {2: 0.01, 16: 0.01})       # a wide verify costs nothing
    choice = choose(estimate, flat, options, continuations=[10])[0]
    assert choice == Choice(16, 16, 10) and choice.kind == "hybrid" and choice.verify_width == 27
    assert choose(estimate, flat, options, continuations=[0])[0].kind == "tree"


def test_one_rule_for_a_batch_counts_the_rows_behind_and_offers_the_hybrid_to_one_row_only():
    """The rule is the same for one row and for many (issue 39): a batch that nothing joins is as
    long as its last row, so a step's tokens count on each row only up to LEAD past where its
    least-advanced row ends (``counted``); level rows count every row's tokens, a row with a
    shorter continuation counts only what it has, and the hybrid tree (one branch per row) is
    offered to a single row only."""
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,), ngram_drafts=10)
    estimate = AcceptanceEstimate.for_options(options)
    _learned(estimate.ngram, 3, 4)
    flat = StepCosts({1: 1.0, 2: 1.4, 16: 1.4, 64: 1.4}, {2: 0.01, 16: 0.01})
    one, expected_one = choose(estimate, flat, options, continuations=[10])
    two, expected_two = choose(estimate, flat, options, continuations=[10, 10])
    assert one.kind == "hybrid" and two.kind != "hybrid"
    per_row = estimate.ngram.expected_tokens()
    short_costs = StepCosts({1: 1.0, 5: 1.0}, {2: 100.0, 16: 100.0})
    short_options = PolicyOptions(max_block_size=5, ngram_drafts=4)
    _, level = choose(estimate, short_costs, short_options, continuations=[4, 2])
    assert level == pytest.approx(per_row[4] + per_row[2])    # level rows: every row's tokens
    _, far = choose(estimate, short_costs, short_options, continuations=[4, 2],
                    ahead=[LEAD + 5, 0])
    assert far == pytest.approx(2 * per_row[2])               # the first row is far ahead
    assert expected_two > expected_one > 0


def test_prompt_lookup_that_only_rows_far_ahead_would_take_does_not_pay_in_a_batch():
    """Package functions at batch 8 (issue 39): prompt lookup found long continuations on rows
    already far ahead, none on the rows behind. Counting every row's tokens, lookup wins; counting
    what moves the batch's end, it commits one token on the rows that set the batch's length, at
    more than a plain step's cost, and plain decoding wins. With the drafts on the rows behind, or
    on rows level with them, lookup wins again."""
    options = PolicyOptions(max_block_size=16, ngram_drafts=10)
    estimate = AcceptanceEstimate.for_options(options)
    _learned(estimate, 0, 1)                              # the drafter's first draft always misses
    _learned(estimate.ngram, 10, 10)                      # prompt lookup's ten are accepted
    costs = StepCosts({1: 1.0, 2: 1.05, 11: 1.5, 16: 1.75}, {2: 0.45, 16: 0.5})
    found = [10, 10, 10, 10, 0, 0, 0, 0]
    far = [LEAD + 1] * 4 + [0] * 4
    assert choose(estimate, costs, options, found)[0].kind == "ngram"              # level rows
    assert choose(estimate, costs, options, found, ahead=far)[0].kind == "plain"
    assert choose(estimate, costs, options, found, ahead=far[::-1])[0].kind == "ngram"
    finished = [0] * 4 + [math.inf] * 4                   # the others cannot hold it up
    assert choose(estimate, costs, options, found, ahead=finished)[0].kind == "ngram"


def test_counted_tokens_stop_at_lead_past_the_last_row():
    """A chain's e tokens on every row count e a row wherever the rows are; a row's tokens count
    up to LEAD past where the least-advanced row ends, and never less than what that row gains."""
    assert counted([0, 0, 0], [3, 1, 5], lead=16) == 9
    assert counted([0, 0, 0], [3, 1, 5], lead=0) == 3    # lead 0: rows x the last row's gain
    assert counted([0, 4, 30], [4, 4, 4], lead=8) == 12   # a chain: e a row
    assert counted([0, 4, 9], [1, 6, 1], lead=8) == 1 + 5 + 1   # the second row: up to 1 + 8
    assert counted([0, 4, 9], [1, 6, 1], lead=2) == 1 + 1 + 1   # past 1 + 2: what the last gains
    assert counted([2, math.inf, 0], [1, 7, 2], lead=0) == 6    # inf: gains what the last gains
    assert counted([math.inf, math.inf], [2, 3]) == 4
    assert counted([0, 4, 9], [6, 1, 1], lead=0) == 15    # the first row passed the second: 5
    # choose prices level prompt-lookup drafts (every row as far) as rows x each, without counted
    rng = random.Random(0)
    for _ in range(200):
        ahead = [rng.choice([math.inf, rng.randint(0, 40)]) for _ in range(rng.randint(1, 33))]
        n, lead = rng.uniform(1, 11), rng.choice([0, 1, 8, 100])
        assert counted(ahead, [n] * len(ahead), lead) == pytest.approx(n * len(ahead))


def test_the_cost_model_follows_the_context_length():
    """Lines in b at each measured length, their coefficients lines in the length: predictions at a
    length never measured lie on them, and a noisy table cannot make a longer context cheaper."""
    costs = StepCosts.by_context({100: ({1: 1.0, 2: 1.2, 16: 2.6}, {2: 0.5, 16: 0.6}),
                                  300: ({1: 1.4, 2: 1.6, 16: 3.4}, {2: 0.7, 16: 0.9})}, calibration_seconds=2.5)
    assert costs.context_lengths == [100, 300] and costs.calibration_seconds == 2.5
    assert costs.target(16) == pytest.approx(2.6) and costs.target(16, 100) == pytest.approx(2.6)
    assert costs.target(1, 200) == pytest.approx(1.2) and costs.target(1, 500) == pytest.approx(1.8)
    assert costs.target(16, 200) == pytest.approx(3.0) and costs.target(9, 200) == pytest.approx(2.2)
    assert costs.draft(16, 200) == pytest.approx(0.75) and costs.draft(1, 200) == 0.0
    shrinking = StepCosts.by_context({100: ({1: 1.0, 16: 2.0}, {16: 0.5}), 300: ({1: 0.9, 16: 1.5}, {16: 0.4})})
    assert shrinking.target(16, 1000) >= shrinking.target(16, 100) and shrinking.target(1, 1000) >= 0.95


def test_a_drafter_step_is_priced_with_the_context_it_takes_in_but_not_with_a_whole_catch_up():
    """Each new context position past the first adds ``per_position`` to a drafter forward. A
    choice prices the positions a run of its steps would take in (at most the tokens a row is
    expected to commit): a wide catch-up after plain steps is not charged to the one step."""
    costs = StepCosts({1: 1.0, 2: 1.2, 16: 1.4}, {2: 0.2, 16: 0.3}, per_position=0.1)
    assert costs.draft(16, new=5) == pytest.approx(costs.draft(16) + 0.4) and costs.draft(1, new=9) == 0
    assert step_seconds(Choice(16), costs, None, 3) == pytest.approx(1.4 + 0.3 + 0.2)
    assert step_seconds(Choice(4, None, 3), costs, None, 9) == step_seconds(Choice(4, None, 3), costs)
    options = PolicyOptions(max_block_size=16)
    estimate = AcceptanceEstimate(depth=15)
    _learned(estimate, 2, 3)
    choice, expected = choose(estimate, costs, options)
    assert choice.uses_drafter and expected < 4
    # charged in full, 63 positions would cost 6.3 s and plain decoding would win
    caught_up = choose(estimate, costs, options, new_context=64)
    assert caught_up[0].uses_drafter and caught_up == choose(estimate, costs, options, new_context=10**6)
    dear = StepCosts({1: 1.0, 2: 1.2, 16: 1.4}, {2: 0.2, 16: 0.3}, per_position=9.0)
    assert choose(estimate, dear, options, new_context=1)[0] == choice
    assert choose(estimate, dear, options, new_context=64)[0] == Choice(1)


def test_drift_is_flagged_only_when_the_median_ratio_leaves_the_margin():
    """The first window sets the reference ratio (the loop's overhead is not in the model); noise
    inside the margin is ignored; a sustained slowdown beyond it is flagged."""
    monitor = DriftMonitor(window=8, margin=DRIFT_MARGIN)
    assert not any(monitor.observe(2.0, 1.0) for _ in range(8)) and monitor.reference == 2.0
    assert not any(monitor.observe(t, 1.0) for t in [2.4, 1.7, 2.5, 1.6] * 6)          # noisy, same median
    assert not any(monitor.observe(3.0, 1.0) for _ in range(3))                         # a few slow steps: no
    assert any(monitor.observe(3.0, 1.0) for _ in range(8))                             # sustained: drift


def test_a_drifted_session_measures_again_at_the_longer_context(tiny, random_drafter):
    target, tokenizer = tiny
    session = PolicySession(random_drafter, target, PolicyOptions(tree_sizes=(4,)), CHEAP)
    ids = tokenizer("def f(x):\n    return", return_tensors="pt").input_ids
    proposer = session.proposer(ids)
    generate(target, proposer, ids, 6)
    proposer.drifted = False
    session.finished(proposer, torch.cat([ids, ids, ids], dim=1))
    assert session.costs is CHEAP                                      # no drift: nothing measured
    proposer.drifted = True
    session.finished(proposer, torch.cat([ids, ids, ids], dim=1))
    assert session.costs.context_lengths == [ids.shape[1], 3 * ids.shape[1]] and session.calibration_seconds > 0
    assert session.costs.target(17, 3 * ids.shape[1]) > 0


def test_a_second_engine_request_starts_from_the_first_ones_estimates(tiny, random_drafter):
    from dflash_lite.decoding.engine import Engine

    target, tokenizer = tiny
    engine = Engine(target, tokenizer, random_drafter)
    engine.session.costs = CHEAP                                       # not measured here
    engine.generate("def f(x):", max_new_tokens=16)
    learned = engine.session.estimate
    assert learned is not None and learned.judged > 0                  # the first request's drafts were judged
    judged = learned.judged
    proposer = engine.proposer(engine.encode("def g(y):"))
    assert proposer.estimate is learned                                # not a fresh prior
    generate(target, proposer, engine.encode("def g(y):"), 1)          # start only: no step yet
    assert proposer.estimate.judged == pytest.approx(judged * proposer.options.request_decay)
    fresh = AcceptanceEstimate.for_options(proposer.options)
    assert fresh.judged == 0 and proposer.estimate.acceptance() != fresh.acceptance()


def test_a_batch_kind_that_lost_rests_so_that_trying_again_costs_little():
    """In a batch, a kind whose steps committed fewer tokens than plain decoding would have in the
    same time rests for (slower - 1) / EXPLORE steps, then is a candidate again; choose skips it
    meanwhile. A kind that wins, and plain decoding, never rest."""
    costs = StepCosts({1: 1.0, 2: 1.2, 16: 1.4, 17: 1.4}, {2: 0.1, 16: 0.2})
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,))
    estimate = AcceptanceEstimate.for_options(options)
    rows = [0] * 8
    first, _ = choose(estimate, costs, options, rows)
    assert first.kind == "tree"                          # the optimistic prior: a tree pays
    costs.observe_yield("tree", 12.0, 40.0, rows=8, slower=3.0)   # 12 tokens where plain made 24
    waits = math.ceil((3.0 - 1) / EXPLORE)
    chosen = []
    for _ in range(waits + 1):
        chosen.append(choose(estimate, costs, options, rows)[0].kind)
        costs.observe_yield("plain", 8.0, 8.0, rows=8, slower=1.0)
    assert "tree" not in chosen[:waits] and not costs.rests("tree")
    assert not costs.rests("plain")
    costs.observe_yield("chain", 30.0, 30.0, rows=8, slower=2.0)  # 30 tokens where plain made 16
    assert not costs.rests("chain")


def test_a_batch_where_every_draft_rests_steps_plain_without_pricing_an_option():
    """Where every draft on offer rests (the usual state of a large batch whose drafts lost), the
    choice is plain decoding, made without pricing anything: the step's policy work is the same
    as plain decoding's, whatever the costs say. A kind that rests is no option at all."""
    class Unpriced(StepCosts):
        def target(self, b, context=None):
            raise AssertionError("an option was priced")

    costs = Unpriced({1: 1.0, 2: 1.2, 16: 1.4, 17: 1.4, 27: 1.6}, {2: 0.1, 16: 0.2})
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,), ngram_drafts=10)
    estimate = AcceptanceEstimate.for_options(options)
    for kind in ("chain", "tree", "ngram"):
        costs.observe_yield(kind, 0.0, 40.0, rows=8, slower=3.0)
    assert choose(estimate, costs, options, [10] * 8) == (Choice(1), 8.0)
    del costs.resting["ngram"]                           # lookup rests no more: priced, chosen
    with pytest.raises(AssertionError, match="priced"):
        choose(estimate, costs, options, [10] * 8)


def test_lookup_is_rated_only_where_its_best_case_beats_plain_and_the_choice_is_the_same(monkeypatch):
    """choose spares rating each length of prompt lookup's chain where even its best case (every
    row's longest continuation, the cheapest verify) loses to plain decoding. The bound must never
    change the choice: over random estimates, costs (flat, rising and falling verify lines),
    continuations and batches, choose with the bound equals choose rating every length, and the
    bound does spare the rating on some of them."""
    from dflash_lite.decoding import choice as rule
    rng = random.Random(0)
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,), ngram_drafts=10)
    bounded = rule._lookup_may_win
    spared = 0
    for _ in range(1500):
        estimate = AcceptanceEstimate.for_options(options)
        reach = rng.choice([0, 1, 10])                   # lookup: always wrong, at most one, any
        for _ in range(rng.randint(0, 30)):
            accepted = rng.randint(0, reach)
            estimate.ngram.observe_chain(accepted, min(10, accepted + 1))
            accepted = rng.randint(0, 15)
            estimate.observe_chain(accepted, min(15, accepted + 1))
        slope = rng.uniform(-0.2, 0.2)
        costs = StepCosts({b: max(0.1, 1.0 + slope * b + rng.uniform(-0.1, 0.1))
                           for b in (1, 2, 4, 8, 16, 17)}, {2: 0.2, 16: 0.3}, measured=True)
        costs.observe("ngram", rng.uniform(1.0, 3.0), 1.0)
        if rng.random() < 0.5:
            costs.observe_yield("ngram", rng.uniform(0, 20), 10, 8, 1.5)
        if rng.random() < 0.7:
            costs.resting = {"chain": 10**9, "tree": 10**9}
        rows = rng.choice([1, 2, 8])
        continuations = [rng.randint(0, 10) for _ in range(rows)]
        args = (estimate, costs, options, continuations, None, rng.randint(1, 15), 1,
                [float(rng.randint(0, 10)) for _ in range(rows)], rng.random() < 0.5)
        monkeypatch.setattr(rule, "_lookup_may_win", bounded)
        choice = choose(*args)
        spared += max(continuations) > 0 and not bounded(estimate, costs, min(max(continuations),
                                                                              args[5]), None)
        monkeypatch.setattr(rule, "_lookup_may_win", lambda *a: True)
        assert choose(*args) == choice
    assert spared > 50


def test_a_request_that_starts_while_every_drafter_kind_rests_taps_no_features(tiny, random_drafter):
    """Where chains and trees both lost at a batch size and rest, the next request there runs
    without the drafter: no features tapped, kept or drafted from, only plain and lookup steps, and
    every row its own greedy output. Once one of them rests no more and its first step would draft,
    the next request taps again; when that try loses too, it stops tapping for the rest."""
    target, tokenizer = tiny
    ids = [tokenizer(t, return_tensors="pt").input_ids for t in ("def f(x):", "import os\n")]
    alone = [generate_autoregressive(target, x, 12).tokens for x in ids]
    costs = StepCosts(dict(MEASURED_SHAPE.t_target), dict(MEASURED_SHAPE.t_draft), measured=True)
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,), ngram_drafts=10,
                            prior=0.99, prior_weight=1000.0)       # drafting looks like it pays
    for kind in ("chain", "tree"):
        rest_after_loss(costs, kind, 3.0)
    for kind, slower in (("chain", 3.0), ("tree", 6.0)):         # and rest again, long: the
        costs.observe_yield(kind, 0.0, 8.0, rows=2, slower=slower)  # tree longer than the chain
    assert costs.rests("chain") and costs.rests("tree")
    resting = CostAwareProposer(random_drafter, target, options, costs)
    assert resting.layer_ids is None
    results = generate(target, resting, ids, 12)
    assert [r.tokens for r in results] == alone
    assert resting.chosen and not any(c.uses_drafter for c in resting.chosen)
    assert all(not w for w in resting.waiting)                       # no features kept
    while costs.rests("chain"):
        costs.observe_yield("plain", 2.0, 2.0, rows=2, slower=1.0)
    trying = CostAwareProposer(random_drafter, target, options, costs)
    assert trying.layer_ids == random_drafter.config.target_layer_ids
    assert [r.tokens for r in generate(target, trying, ids, 12)] == alone
    kinds = [c.kind for c in trying.chosen]
    tried = kinds.index("chain")          # plain steps first where a stale plain timing is retaken
    assert set(kinds[:tried]) <= {"plain"} and costs.rests("chain")     # tried first; it lost
    assert trying.layer_ids is None and all(not w for w in trying.waiting)   # then no more taps
    assert not any(c.uses_drafter for c in trying.chosen[tried + 1:])


def test_a_batch_request_after_one_that_never_ran_the_drafter_taps_only_to_draft(tiny,
                                                                                random_drafter):
    """The drafter's features cost every step of a batch (the target taps them, and they wait for a
    drafter forward). Where a whole request at a batch size never ran the drafter (so it never
    lost, and the record of losses says nothing), the next request there taps them only if its
    first step would run the drafter; after a request that ran it, the next one taps. One row taps
    as before. Every row is its own greedy output."""
    target, tokenizer = tiny
    ids = [tokenizer(t, return_tensors="pt").input_ids for t in ("def f(x):", "import os\n")]
    alone = [generate_autoregressive(target, x, 8).tokens for x in ids]

    def fresh():
        return StepCosts(dict(MEASURED_SHAPE.t_target), dict(MEASURED_SHAPE.t_draft))
    for prior, drafts in ((0.01, False), (0.99, True)):
        options = PolicyOptions(max_block_size=16, prior=prior, prior_weight=1000.0)
        session = PolicySession(random_drafter, target, options, costs=fresh())
        session.batch_costs[2] = fresh()
        first = session.proposer(rows=2)
        assert first.layer_ids is not None                     # nothing known yet: it taps
        assert [r.tokens for r in generate(target, first, ids, 8)] == alone
        session.finished(first)
        assert first.fed == drafts and not session.batch_costs[2].lost(("chain", "tree"))
        assert (session.proposer(rows=2).layer_ids is not None) == drafts
        one = session.proposer(rows=1)
        assert generate(target, one, ids[0], 8).tokens == alone[0]
        session.finished(one)
        assert session.proposer(rows=1).layer_ids is not None   # one row: as before


def test_one_slow_timing_of_plain_decoding_does_not_price_it_out(tiny, random_drafter):
    """One slow timing of plain decoding (the machine busy for that one step) once priced it out
    for good: every draft looked cheap, paid by the yield record, and plain decoding was never
    chosen, so never timed again. Its timing is the machine's pace, which the drafts pay too:
    where they do not pay (a random drafter), the batch soon decodes plainly; every row its greedy
    output. A batch forces a plain step only to time plain decoding the first time."""
    target, tokenizer = tiny
    ids = [tokenizer(t, return_tensors="pt").input_ids for t in ("def f(x):", "import os\n")]
    n = 90
    alone = [generate_autoregressive(target, x, n).tokens for x in ids]
    costs = StepCosts(dict(MEASURED_SHAPE.t_target), dict(MEASURED_SHAPE.t_draft), measured=True,
                      rows=2)
    costs.observe("chain", 1.0, 1.0)                     # a draft timed as the model says
    costs.observe("plain", 1000.0, 1.0)                  # plain once, a thousand times that
    assert costs.correction("chain") == costs.correction("plain")   # the drafts pay that pace
    policy = CostAwareProposer(random_drafter, target, PolicyOptions(max_block_size=16), costs)
    assert [r.tokens for r in generate(target, policy, ids, n)] == alone
    kinds = [c.kind for c in policy.chosen]
    assert "plain" in kinds[:20] and kinds[len(kinds) // 2:].count("plain") > len(kinds) // 3
    fresh = StepCosts(dict(MEASURED_SHAPE.t_target), dict(MEASURED_SHAPE.t_draft), measured=True,
                      rows=2)
    fresh.observe("chain", 1.0, 1.0)
    forced = CostAwareProposer(random_drafter, target, PolicyOptions(max_block_size=16), fresh)
    generate(target, forced, ids, 8)
    assert [c.kind for c in forced.chosen].count("plain") >= 1 and "plain" in fresh.timed


def test_a_machine_that_slows_down_makes_every_kind_dearer_not_only_plain_decoding():
    """A batch times plain decoding on most steps and a draft on few. Where the machine slows down
    (another job, a throttled core), only the kinds it runs are timed slower: a draft timed before
    would look cheaper against plain decoding than it is, and take steps it loses. Plain decoding
    sets the pace, and every other kind's cost moves with it; a draft timed before plain's first
    timing is timed again against it. One row, timing plain decoding on few steps, keeps every
    kind's ratio its own."""
    one = StepCosts(dict(MEASURED_SHAPE.t_target), dict(MEASURED_SHAPE.t_draft), measured=True)
    for kind, ratio in (("ngram", 0.5), ("plain", 1.2), ("plain", 1.8)):
        one.observe(kind, ratio, 1.0)
    assert one.correction("ngram") == pytest.approx(0.5) and one.pace is None
    assert one.correction("tree") == pytest.approx((0.5 + 1.2 * 0.95 + 1.8) / (1 + 0.95 + 1))
    costs = StepCosts(dict(MEASURED_SHAPE.t_target), dict(MEASURED_SHAPE.t_draft), measured=True,
                      rows=8)
    costs.observe("ngram", 0.5, 1.0)                     # before any plain step: as measured
    assert costs.correction("ngram") == pytest.approx(0.5)
    costs.observe("plain", 1.2, 1.0)                     # plain's first timing: the pace
    assert costs.correction("ngram") == costs.correction("plain") == pytest.approx(1.2)
    costs.observe("ngram", 1.08, 1.0)                    # 0.9 of plain's ratio
    assert costs.correction("ngram") == costs.correction("tree") == pytest.approx(1.08)
    for _ in range(300):
        costs.observe("plain", 1.8, 1.0)                 # the machine half as slow again
    assert costs.correction("plain") == pytest.approx(1.8, rel=1e-3)
    assert costs.correction("ngram") == pytest.approx(0.9 * 1.8, rel=1e-3)
    costs.observe("ngram", 1.8, 1.0)                     # a draft step at the new pace
    assert 0.9 * 1.8 < costs.correction("ngram") < 1.8


def test_a_larger_batch_starts_where_the_drafter_stood_at_the_next_smaller_one(tiny, random_drafter):
    """A batch size's first request takes over the drafter's record at the largest smaller batch
    size that ran steps, for each kind whose last step there lost: where chains and trees lost at
    batch 2 (their run of losses, what is left of their rest, their yield), a first request at
    batch 4 taps no features. A kind that paid, and prompt lookup, start afresh; a batch size with
    steps of its own keeps its record."""
    target, _ = tiny
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,), ngram_drafts=10)

    def measured():
        return StepCosts(dict(MEASURED_SHAPE.t_target), dict(MEASURED_SHAPE.t_draft), measured=True)
    small, large, other = measured(), measured(), measured()
    for kind in ("chain", "tree"):
        small.observe_yield(kind, 2.0, 8.0, rows=2, slower=3.0)      # lost at batch 2: rests
    small.observe_yield("ngram", 1.0, 4.0, rows=2, slower=1.2)       # lost too
    other.observe_yield("plain", 8.0, 8.0, rows=8, slower=1.0)       # batch 8 has its own steps
    before = {kind: list(sums) for kind, sums in other.yields.items()}
    session = PolicySession(random_drafter, target, options)
    session.batch_costs.update({2: small, 4: large, 8: other})
    proposer = session.proposer(rows=4)
    assert proposer.costs is large and proposer.layer_ids is None and not proposer.drafting
    assert large.lost(("chain",)) and large.rests("chain") and large.rests("tree")
    assert large.yield_ratio("chain") == pytest.approx(small.yield_ratio("chain"))
    assert large.yield_ratio("chain") < 1.0
    assert large.yield_ratio("ngram") == 1.0 and not large.rests("ngram")   # not carried
    assert session.proposer(rows=8).drafting and other.yields == before
    assert CostAwareProposer(random_drafter, target, options, measured()).drafting  # no carry
    paid, fresh = measured(), measured()
    paid.observe_yield("tree", 30.0, 24.0, rows=2, slower=3.0)       # the tree paid at batch 2
    paid.observe_yield("chain", 2.0, 8.0, rows=2, slower=3.0)
    fresh.carry(paid, ("chain", "tree"), 2.0)
    assert fresh.rests("chain") and fresh.yield_ratio("tree") == 1.0 and not fresh.lost(("tree",))


def rest_after_loss(costs: StepCosts, kind: str, slower: float) -> int:
    """How many batch steps ``kind`` rests once its losing steps (none committed) make it rest,
    plain steps meanwhile."""
    while not costs.rests(kind):
        costs.observe_yield(kind, 0.0, 8.0, rows=8, slower=slower)
    waited = 0
    while costs.rests(kind):
        costs.observe_yield("plain", 8.0, 8.0, rows=8, slower=1.0)
        waited += 1
    return waited


def test_each_loss_in_a_row_doubles_the_rest_and_a_win_ends_the_run():
    """Where a kind never pays, its tries cost a vanishing share of a batch's time: each loss in
    a row doubles its rest, up to 2 ** BACKOFF times the first; one step of it that pays makes the
    next loss rest the first length again."""
    costs = StepCosts({1: 1.0, 11: 1.5}, {2: 0.1})
    base = math.ceil((1.5 - 1) / EXPLORE)
    rests = [rest_after_loss(costs, "ngram", 1.5) for _ in range(BACKOFF + 2)]
    assert rests == [base * 2 ** min(i, BACKOFF) for i in range(BACKOFF + 2)]
    for _ in range(3):                                   # pays: more tokens than plain's 8 x 1.5
        costs.observe_yield("ngram", 40.0, 40.0, rows=8, slower=1.5)
    assert not costs.rests("ngram")
    assert rest_after_loss(costs, "ngram", 1.5) == base


def test_a_batch_tree_waits_while_the_chain_rests_unless_it_paid():
    """Where the chain lost in a batch and rests, the tree (the same drafter forward, a wider
    verify) is no option either, though it never ran: its try would be the dearer loss. A tree
    whose own last step paid keeps its own record; once the chain's rest ends, so does the
    tree's."""
    costs = StepCosts({1: 1.0, 2: 1.2, 16: 1.4, 17: 1.4}, {2: 0.1, 16: 0.2})
    options = PolicyOptions(max_block_size=16, tree_sizes=(16,))
    estimate = AcceptanceEstimate.for_options(options)
    rows = [0] * 8
    assert choose(estimate, costs, options, rows)[0].kind == "tree"    # the prior: a tree pays
    costs.observe_yield("chain", 4.0, 30.0, rows=8, slower=2.0)       # 4 tokens where plain made 16
    assert costs.rests("chain") and costs.rests("tree") and "tree" not in costs.yields
    chosen = []
    while costs.rests("chain"):
        chosen.append(choose(estimate, costs, options, rows)[0].kind)
        costs.observe_yield("plain", 8.0, 8.0, rows=8, slower=1.0)
    assert chosen and set(chosen) == {"plain"}
    assert not costs.rests("tree") and choose(estimate, costs, options, rows)[0].kind == "tree"
    costs.observe_yield("chain", 4.0, 30.0, rows=8, slower=2.0)       # the chain loses again
    costs.observe_yield("tree", 40.0, 40.0, rows=8, slower=3.0)       # 40 tokens where plain made 24
    assert costs.rests("chain") and not costs.rests("tree")
    assert choose(estimate, costs, options, rows)[0].kind == "tree"
