"""The static-shape decode path (dflash_lite.static) is lossless, like the loop it mirrors.

Greedy: plain decoding, DFlash chains, draft trees and the policy over them on static caches give
the target's own greedy tokens (3 prompts always, 50 prompts in the slow set). Sampling: the first
three sampled tokens follow the target's exact distribution (chi-square), with the shipped
drafter's one draft (or a tree of two) both accepted and rejected. The caches are sized once: no buffer is reallocated by a generation.
"""
import pytest
import torch

from dflash_lite import SamplingParams, corpus, generate_autoregressive, stop_token_ids
from dflash_lite.acceptance import target_probs
from dflash_lite.benchmark import bench
from dflash_lite.checkpoints import load_drafter
from dflash_lite.costs import StepCosts
from dflash_lite.engine import Engine
from dflash_lite.policy import Choice
from dflash_lite.report import OUR_DFLASH_KINDS, Kind, row_of
from dflash_lite.static import StaticDecoder
from dflash_lite.static_policy import StaticPolicy
from dflash_lite.target import default_drafter_path
from sampling_checks import assert_samples_follow

MAX_NEW = 48
RUNS = 800
POLICY_COSTS = StepCosts({1: 1.0, 2: 1.2, 16: 1.4, 17: 1.45}, {2: 0.45, 16: 0.5})   # drafting pays when it is right


@pytest.fixture(scope="module")
def shipped_drafter():
    return load_drafter(default_drafter_path("tiny")).eval()


@pytest.fixture(scope="module")
def quick_cases(tiny):
    """Two held-out math prompts and a code header, with the target's greedy continuation."""
    target, tokenizer = tiny
    prompts = corpus.prompts("held_out", "math", 2) + corpus.prompts("held_out", "code", 1)
    ids = [tokenizer(p, return_tensors="pt", add_special_tokens=False).input_ids for p in prompts]
    stops = stop_token_ids(target, tokenizer)
    return [(x, generate_autoregressive(target, x, MAX_NEW, stop_token_ids=stops).tokens) for x in ids]


def mismatches(decoder, cases, stops) -> int:
    wrong = 0
    for ids, expected in cases:
        result = decoder.generate(ids, MAX_NEW, stop_token_ids=stops)
        wrong += result.tokens != expected
        assert all(1 <= a <= decoder.block_size for a in result.acceptance_lengths)
    return wrong


@pytest.mark.parametrize("prefix_only", [True, False], ids=["prefix", "fixed-shapes"])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_static_greedy_equals_target_greedy_on_3_prompts(tiny, shipped_drafter, quick_cases, block_size, prefix_only):
    """Both ways of attending: to the filled slots only (eager CPU) and to the whole buffer under
    a mask from the cache positions (what a compiled decoder runs)."""
    target, tokenizer = tiny
    decoder = StaticDecoder(target, shipped_drafter if block_size > 1 else None, block_size if block_size > 1 else None,
                            prefix_only=prefix_only)
    assert decoder.prefix_only is prefix_only
    assert mismatches(decoder, quick_cases, stop_token_ids(target, tokenizer)) == 0


@pytest.mark.parametrize("prefix_only", [True, False], ids=["prefix", "fixed-shapes"])
def test_static_tree_greedy_equals_target_greedy_on_3_prompts(tiny, shipped_drafter, quick_cases, prefix_only,
                                                              monkeypatch):
    """A draft tree of 16 nodes verified at width 17; some accepted path must leave the first-ranked
    spine, so that moving its K/V into consecutive slots is exercised."""
    import dflash_lite.static as static

    target, tokenizer = tiny
    moved = []
    original = static.keep_path
    monkeypatch.setattr(static, "keep_path", lambda layers, position, rows: (moved.append(rows.tolist()),
                                                                              original(layers, position, rows)))
    decoder = StaticDecoder(target, shipped_drafter, tree_size=16, prefix_only=prefix_only)
    assert decoder.tree_width == 17 and decoder.context_width == 17
    assert mismatches(decoder, quick_cases, stop_token_ids(target, tokenizer)) == 0
    assert any(rows != list(range(len(rows))) for rows in moved)


class ScriptedPolicy(StaticPolicy):
    """Plain decoding for 20 steps (more new context than one fixed-width drafter forward takes),
    then the tree, the chain, plain, the tree again, ..., cycling through the menu."""
    SCRIPT = [0] * 20 + [2, 1, 0, 0, 2, 0, 1]

    def choose(self, context_length, depth):
        return Choice(1) if depth == 0 else self.menu[self.SCRIPT[len(self.chosen) % len(self.SCRIPT)]]


def test_static_policy_switching_widths_equals_target_greedy_on_3_prompts(tiny, shipped_drafter, quick_cases):
    """Scripted switches between plain decoding, the chain and the tree: every switch is lossless, and
    the drafter's context caught up in fixed-width chunks after plain steps drafts exactly what it
    drafts when written at once (the same acceptance lengths with fixed shapes as with the prefix)."""
    target, tokenizer = tiny
    lengths = {}
    for prefix_only in (True, False):
        policy = ScriptedPolicy(StepCosts({1: 1.0, 16: 1.4}, {16: 0.5}))
        decoder = StaticDecoder(target, shipped_drafter, tree_size=16, prefix_only=prefix_only, policy=policy)
        assert mismatches(decoder, quick_cases, stop_token_ids(target, tokenizer)) == 0
        assert {c.kind for c in policy.chosen} == {"plain", "chain", "tree"}
        lengths[prefix_only] = [decoder.generate(ids, MAX_NEW).acceptance_lengths for ids, _ in quick_cases]
    assert lengths[True] == lengths[False]


@pytest.mark.parametrize("prefix_only", [True, False], ids=["prefix", "fixed-shapes"])
def test_static_policy_greedy_equals_target_greedy_on_3_prompts(tiny, shipped_drafter, quick_cases, prefix_only):
    target, tokenizer = tiny
    policy = StaticPolicy(POLICY_COSTS)
    decoder = StaticDecoder(target, shipped_drafter, tree_size=16, prefix_only=prefix_only, policy=policy)
    assert mismatches(decoder, quick_cases, stop_token_ids(target, tokenizer)) == 0
    assert any(c.uses_drafter for c in policy.chosen)


def test_bench_compile_adds_static_rows_with_the_targets_output(tmp_path):
    report = bench(num_prompts=2, max_new_tokens=8, repeats=1, cost_repeats=1, block_sizes=(4,), tree_sizes=(8,),
                   baselines=False, hf_dflash=False, compile=True, quiet=True, json_out=str(tmp_path / "r.json"))
    plain, dflash = row_of(report, Kind.STATIC_AUTOREGRESSIVE), row_of(report, Kind.STATIC_DFLASH, block_size=4)
    tree = row_of(report, Kind.STATIC_DFLASH_TREE, tree_size=8)
    assert Kind.STATIC_DFLASH in OUR_DFLASH_KINDS and Kind.STATIC_DFLASH_TREE in OUR_DFLASH_KINDS
    assert plain["block_size"] == 1 and tree["name"] == "DFlash tree N=8 (static)"
    assert plain["identical_to_target"] is True and dflash["identical_to_target"] is True
    assert tree["identical_to_target"] is True and tree["tau"] > 1
    assert plain["speedup_vs_static"] == 1.0 and dflash["tau"] > 1
    assert dflash["speedup_vs_static"] == pytest.approx(dflash["tokens_per_s"] / plain["tokens_per_s"])
    policy = row_of(report, Kind.STATIC_DFLASH_POLICY)                 # plain, the chain of 16 or the tree of 8
    assert policy["identical_to_target"] is True and policy["speedup_vs_static"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["shipped", "random"])
def test_static_chain_greedy_equals_target_greedy_on_50_prompts(tiny, shipped_drafter, random_drafter,
                                                                greedy_cases, drafter):
    """The random drafter is rarely right, so most steps rewind the caches over rejected slots."""
    target, tokenizer = tiny
    cases = greedy_cases(MAX_NEW, math_start=900, code_seed=3)
    decoder = StaticDecoder(target, shipped_drafter if drafter == "shipped" else random_drafter,
                            prefix_only=drafter == "shipped")           # both ways of attending, one each
    assert len(cases) == 50 and mismatches(decoder, cases, stop_token_ids(target, tokenizer)) == 0


@pytest.mark.parametrize("drafter", ["shipped", "random"])
def test_static_tree_greedy_equals_target_greedy_on_50_prompts(tiny, shipped_drafter, random_drafter,
                                                               greedy_cases, drafter):
    """Trees of 16 nodes (the shipped drafter, attending to the filled slots) and of 12 nodes at
    block size 8 (the random drafter, whose paths are short and often leave the spine; fixed shapes)."""
    target, tokenizer = tiny
    cases = greedy_cases(MAX_NEW, math_start=900, code_seed=3)
    decoder = StaticDecoder(target, shipped_drafter, tree_size=16, prefix_only=True) if drafter == "shipped" else \
        StaticDecoder(target, random_drafter, 8, tree_size=12, prefix_only=False)
    assert len(cases) == 50 and mismatches(decoder, cases, stop_token_ids(target, tokenizer)) == 0


@pytest.mark.parametrize("drafter", ["shipped", "random"])
def test_static_policy_greedy_equals_target_greedy_on_50_prompts(tiny, shipped_drafter, random_drafter,
                                                                 greedy_cases, drafter):
    """The policy over plain decoding, the chain of 16 and the tree of 16, carried from prompt to
    prompt. The random drafter loses: the policy falls back to plain decoding and tries drafting
    again now and then, so the drafter's context is caught up after runs of plain steps (fixed shapes)."""
    target, tokenizer = tiny
    cases = greedy_cases(MAX_NEW, math_start=900, code_seed=3)
    policy, chosen = StaticPolicy(POLICY_COSTS), []
    decoder = StaticDecoder(target, shipped_drafter if drafter == "shipped" else random_drafter, tree_size=16,
                            prefix_only=drafter == "shipped", policy=policy)
    stops, wrong = stop_token_ids(target, tokenizer), 0
    for ids, expected in cases:
        wrong += decoder.generate(ids, MAX_NEW, stop_token_ids=stops).tokens != expected
        chosen += policy.chosen
    assert len(cases) == 50 and wrong == 0
    assert {c.kind for c in chosen} >= ({"chain", "tree"} if drafter == "shipped" else {"plain", "tree"})


@pytest.mark.slow
def test_static_plain_decoding_equals_target_greedy_on_50_prompts(tiny, greedy_cases):
    target, tokenizer = tiny
    cases = greedy_cases(MAX_NEW, math_start=900, code_seed=3)
    assert mismatches(StaticDecoder(target, prefix_only=False), cases, stop_token_ids(target, tokenizer)) == 0


def test_engine_compile_gives_the_same_text(tiny, shipped_drafter):
    target, tokenizer = tiny
    prompt = corpus.prompts("held_out", "math", 1)[0]
    eager = Engine(target, tokenizer, shipped_drafter, block_size=16).generate(prompt, max_new_tokens=32)
    engine = Engine(target, tokenizer, shipped_drafter, block_size=16, compile=True)
    assert engine.generate(prompt, max_new_tokens=32) == eager and engine.last_result.tau > 1


def test_engine_compile_runs_the_static_policy_by_default(tiny, shipped_drafter):
    """Without a block size, Engine(compile=True) chooses each static step (plain, chain or tree)
    with one StaticPolicy whose estimates carry from call to call; the text is the target's."""
    target, tokenizer = tiny
    prompts = corpus.prompts("held_out", "math", 2)
    engine = Engine(target, tokenizer, shipped_drafter, compile=True)
    engine.session.costs = POLICY_COSTS                                # not measured here
    for prompt in prompts:
        eager = Engine(target, tokenizer, block_size=1).generate(prompt, max_new_tokens=24)
        assert engine.generate(prompt, max_new_tokens=24) == eager
    policy = engine.static.policy
    assert policy is not None and engine.static.tree_size and policy.costs is POLICY_COSTS
    assert policy.chosen and policy.estimate.judged > 0 and engine.last_result.tau > 1


def test_engine_sizes_its_static_caches_for_the_calls_it_serves(tiny):
    """Tight caches: the first call's length rounded up to a power of two (at least
    STATIC_MIN_LENGTH), kept while calls fit, rebuilt larger only for a longer one."""
    from dflash_lite.engine import STATIC_MIN_LENGTH

    target, tokenizer = tiny
    engine = Engine(target, tokenizer, compile=True)
    engine.generate("def f(x):", max_new_tokens=8)
    first = engine.static
    assert first.max_length == STATIC_MIN_LENGTH < target.config.max_position_embeddings
    engine.generate("def g(x):", max_new_tokens=16)
    assert engine.static is first                                      # it fits: the same caches
    longer = Engine(target, tokenizer).generate("def h(x):", max_new_tokens=STATIC_MIN_LENGTH)
    assert engine.generate("def h(x):", max_new_tokens=STATIC_MIN_LENGTH) == longer
    assert engine.static is not first and engine.static.max_length == 2 * STATIC_MIN_LENGTH


def test_static_caches_are_allocated_once(tiny, shipped_drafter, quick_cases):
    target, tokenizer = tiny
    decoder = StaticDecoder(target, shipped_drafter, max_length=256)
    decoder.generate(quick_cases[0][0], 8)
    buffers = [t.data_ptr() for t in decoder.draft_cache.keys + [layer.keys for layer in decoder.cache.layers]]
    for ids, _ in quick_cases:
        decoder.generate(ids, MAX_NEW, stop_token_ids=stop_token_ids(target, tokenizer))
    assert buffers == [t.data_ptr() for t in decoder.draft_cache.keys + [layer.keys for layer in decoder.cache.layers]]
    assert all(layer.keys.shape[2] == 256 + decoder.block_size for layer in decoder.cache.layers)


def test_static_path_refuses_what_it_cannot_serve(tiny, shipped_drafter, quick_cases):
    target, _ = tiny
    decoder = StaticDecoder(target, shipped_drafter, max_length=64)
    with pytest.raises(ValueError, match="max_length of 64"):
        decoder.generate(quick_cases[0][0], 64)
    with pytest.raises(ValueError, match="block_size"):
        StaticDecoder(target, shipped_drafter, block_size=1)
    with pytest.raises(ValueError, match="prefix_only"):
        StaticDecoder(target, shipped_drafter, compile_forwards=True, prefix_only=True)
    with pytest.raises(ValueError, match="tree_size needs a drafter"):
        StaticDecoder(target, tree_size=16)
    with pytest.raises(ValueError, match="tree_size"):
        StaticDecoder(target, shipped_drafter, tree_size=0)
    with pytest.raises(ValueError, match="a policy needs a drafter"):
        StaticDecoder(target, policy=StaticPolicy(POLICY_COSTS))


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["chain", "tree", "policy"])
def test_static_path_samples_from_the_target(tiny, shipped_drafter, draft):
    """Three tokens at temperature 1, top_k 3: the prefill's, then one step that drafts one token
    (block size 2; for the tree, the drafter's two likeliest first tokens as siblings; the policy
    chooses between them and plain decoding from what earlier runs accepted), which must be
    accepted and rejected often; the counts of all three-token outcomes must match the target's
    exact distribution."""
    target, tokenizer = tiny
    sampling = SamplingParams(temperature=1.0, top_k=3)
    ids = tokenizer("The answer is", return_tensors="pt").input_ids

    def p_next(prefix):
        with torch.no_grad():
            return target_probs(target(prefix).logits[0, -1:], sampling)[0]

    exact = {(): 1.0}
    for _ in range(3):                                        # P(t1 t2 t3) by the chain rule
        grown = {}
        for prefix, p in exact.items():
            probs = p_next(torch.cat([ids, torch.tensor([list(prefix)], dtype=torch.long)], 1))
            grown.update({prefix + (t,): p * float(probs[t]) for t in probs.nonzero().flatten().tolist()})
        exact = grown
    policy = StaticPolicy(StepCosts({1: 1.0, 2: 1.05, 3: 1.35}, {2: 0.1})) if draft == "policy" else None
    decoder = StaticDecoder(target, shipped_drafter, block_size=2, max_length=64,
                            tree_size=None if draft == "chain" else 2, policy=policy)
    g, results, kinds = torch.Generator().manual_seed(7), [], set()
    for _ in range(RUNS):
        results.append(decoder.generate(ids, 3, sampling, generator=g))
        kinds |= {c.kind for c in policy.chosen} if policy else set()
    assert_samples_follow(exact, results)
    assert kinds == ({"chain", "tree", "plain"} if policy else set())  # plain: a last token alone
