"""Many requests at once (docs/method.md#batches): every row of a batch is its prompt decoded
alone, token for token and step for step, for plain decoding, DFlash chains, trees, prompt lookup
and the hybrid tree, eager and on fixed shapes, at batch sizes 1 to 16 with prompts of different
lengths and rows that stop early; the naive rollback keeps only the batch's shortest path (and
says how much it threw away); the batch policy falls to plain decoding where nothing pays;
``Engine.generate`` takes a list; ``bench --batch-sizes`` reports a row per batch size.
"""
import json

import pytest
import torch

from dflash_lite import corpus, generate_autoregressive, stop_token_ids
from dflash_lite.decoding.acceptance import SamplingParams
from dflash_lite.decoding.baselines import NoDraftProposer
from dflash_lite.measuring import batching
from dflash_lite.measuring.batching import batches_of, crossover
from dflash_lite.measuring.benchmark import BenchConfig, bench
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.costs import StepCosts
from dflash_lite.decoding.decode import DFlashProposer, PerRow, as_batch, generate
from dflash_lite.decoding.engine import Engine
from dflash_lite.decoding.ngram import NgramProposer
from dflash_lite.decoding.policy import CostAwareProposer
from dflash_lite.decoding.session import DEFAULT_OPTIONS, PolicySession
from dflash_lite.decoding.shapes import FixedShapes
from dflash_lite.decoding.target import default_drafter_path
from dflash_lite.decoding.tree import DFlashTreeProposer, HybridTreeProposer

MAX_NEW = 32
SIZES = (1, 2, 4, 8, 16)


@pytest.fixture(scope="module")
def drafter():
    return load_drafter(default_drafter_path("tiny")).eval()


@pytest.fixture(scope="module")
def prompts(tiny):
    """Six held-out prompts of different lengths (math and code), each with the target's greedy
    output alone; some stop early at a stop token."""
    target, tokenizer = tiny
    texts = corpus.prompts("held_out", "math", 3) + corpus.prompts("held_out", "code", 3)
    ids = [tokenizer(t, return_tensors="pt", add_special_tokens=False).input_ids for t in texts]
    stops = stop_token_ids(target, tokenizer)
    alone = [generate_autoregressive(target, x, MAX_NEW, stop_token_ids=stops).tokens for x in ids]
    assert len({x.shape[1] for x in ids}) > 3
    return ids, alone, stops


def test_a_padded_prefill_gives_each_rows_own_last_logits_and_features(tiny, drafter, prompts,
                                                                        monkeypatch, request):
    """The prefill of prompts of different lengths, padded on the right: each row's logits at its
    last position, and the tapped features of every real position, equal the prompt's own forward:
    with the head applied to the final norm's output at each row's last position, for prompts of
    one length, and for a target without a ``norm`` to hook (the head at every row's last
    position). Each prefill is one forward of the target."""
    from dflash_lite.decoding.cache import SlotCache
    from dflash_lite.decoding.decode import prefill, stack_padded
    from dflash_lite.decoding.target import context_features

    target, _ = tiny
    layers, shortest = drafter.config.target_layer_ids, min(x.shape[1] for x in prompts[0])
    even = [x[:, :shortest] for x in prompts[0]]
    calls = []
    counting = target.register_forward_pre_hook(lambda module, args: calls.append(1))
    request.addfinalizer(counting.remove)
    for ids, hooked in ((prompts[0], True), (even, True), (prompts[0], False)):
        if not hooked:
            monkeypatch.setattr(target, "get_decoder", lambda: None)
        lengths, before = [x.shape[1] for x in ids], len(calls)
        batch = stack_padded([x[..., None] for x in ids])[..., 0]
        cache = SlotCache.for_target(target, max(lengths) + 1, len(ids))
        logits, features = prefill(target, batch, cache, layers, lengths)
        assert logits.shape == (len(ids), target.config.vocab_size) and len(calls) == before + 1
        for r, x in enumerate(ids):
            with torch.inference_mode():
                alone = target(x, output_hidden_states=True)
            torch.testing.assert_close(logits[r], alone.logits[0, -1], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(features[r, : lengths[r]],
                                       context_features(alone.hidden_states, layers)[0],
                                       rtol=1e-4, atol=1e-4)


def test_one_prompts_prefill_leaves_the_mask_to_sdpas_causal_flag(tiny, prompts, request):
    """A prefill of one prompt hands the target no mask (SDPA's causal flag covers it, cheaper
    than a T x T mask); a ragged batch hands it one that hides each row's padding."""
    from dflash_lite.decoding.cache import SlotCache
    from dflash_lite.decoding.decode import prefill, stack_padded

    target, _ = tiny
    masks = []
    spy = target.register_forward_pre_hook(
        lambda module, args, kwargs: masks.append(kwargs.get("attention_mask")), with_kwargs=True)
    request.addfinalizer(spy.remove)
    one = prompts[0][0]
    prefill(target, one, SlotCache.for_target(target, one.shape[1] + 1), None, [one.shape[1]])
    ragged = prompts[0][:2]
    lengths = [x.shape[1] for x in ragged]
    assert lengths[0] != lengths[1]
    prefill(target, stack_padded([x[..., None] for x in ragged])[..., 0],
            SlotCache.for_target(target, max(lengths) + 1, 2), None, lengths)
    assert masks[0] is None and masks[1] is not None
    short, long = sorted(range(2), key=lengths.__getitem__)
    padding = slice(lengths[short], max(lengths))      # the shorter row's padded key slots
    assert not masks[1][short, 0, :, padding].any() and masks[1][long, 0, -1, padding].all()


LIMITS = (MAX_NEW, 20, MAX_NEW, 9, MAX_NEW, 26)     # rows that finish early, each at its own step


MAKE = {"plain": lambda t, d, s: NoDraftProposer(s),
        "chain": lambda t, d, s: DFlashProposer(d, t, 8, shapes=s),
        "tree": lambda t, d, s: DFlashTreeProposer(d, t, 12, shapes=s),
        "ngram": lambda t, d, s: PerRow(NgramProposer(6, shapes=s)),
        "hybrid": lambda t, d, s: HybridTreeProposer(d, t, 12, shapes=s)}


@pytest.mark.parametrize("draft", list(MAKE))
def test_every_row_of_a_batch_is_its_prompt_decoded_alone(tiny, drafter, prompts, shapes, draft):
    """At batch sizes 1-16 (the prompts cycled to fill a batch, each with its own
    max_new_tokens, so rows finish at different steps): each row's tokens are the target's greedy
    output alone, and its accepted length at every step is the one it has when decoded alone with
    the same method (for trees: tau within 5%, as rounding may pick other nodes)."""
    target, _ = tiny
    ids, alone, stops = prompts
    make = lambda: MAKE[draft](target, drafter, shapes)
    steps_alone = [generate(target, make(), x, n, stop_token_ids=stops).acceptance_lengths
                   for x, n in zip(ids, LIMITS)]
    for size in SIZES:
        for group in batches_of(list(range(len(ids))), size):
            results = generate(target, make(), [ids[i] for i in group],
                               [LIMITS[i] for i in group], stop_token_ids=stops)
            assert [r.tokens for r in results] == [alone[i][: LIMITS[i]] for i in group], group
            steps = [r.acceptance_lengths for r in results]
            if draft in ("tree", "hybrid"):     # a near-tie among a tree's nodes may flip in a
                # batched forward's rounding: the same tokens, a tree of other nodes
                assert sum(map(sum, steps)) / sum(map(len, steps)) == pytest.approx(
                    sum(sum(steps_alone[i]) for i in group)
                    / sum(len(steps_alone[i]) for i in group), rel=0.05)
            else:
                assert steps == [steps_alone[i] for i in group]


def test_rows_with_their_own_limits_and_stops_leave_the_batch(tiny, drafter, prompts, shapes):
    """Per-row max_new_tokens (one row stops after its first token) and per-row stop tokens: each
    row ends where it ends alone, and the rows still running are undisturbed."""
    target, _ = tiny
    ids, alone, stops = prompts
    limits = [1, MAX_NEW, 9, MAX_NEW, 4, 20]
    own_stops = [stops, stops, stops, [alone[3][5]], stops, stops]   # row 3 stops at its 6th token
    results = generate(target, DFlashProposer(drafter, target, 8, shapes=shapes), ids, limits,
                       stop_token_ids=own_stops)
    for i, r in enumerate(results):
        expected = generate_autoregressive(target, ids[i], limits[i],
                                           stop_token_ids=own_stops[i]).tokens
        assert r.tokens == expected, i
    assert len(results[0].tokens) == 1 and results[3].tokens == alone[3][:6]
    assert results[3].stop_reason == "stop_token"


def test_the_naive_rollback_keeps_only_the_shortest_path(tiny, drafter, prompts):
    """Every row of every step commits the batch's shortest accepted path: still the target's
    tokens, but tau falls and the accepted tokens thrown away are counted."""
    target, _ = tiny
    ids, alone, stops = prompts
    row = generate(target, DFlashProposer(drafter, target, 16), ids[:4], MAX_NEW,
                   stop_token_ids=stops)
    naive = generate(target, DFlashProposer(drafter, target, 16), ids[:4], MAX_NEW,
                     stop_token_ids=stops, rollback="shortest")
    assert [r.tokens for r in naive] == alone[:4]
    tau = lambda results: (sum(sum(r.acceptance_lengths) for r in results)
                           / sum(len(r.acceptance_lengths) for r in results))
    assert tau(naive) < tau(row) and sum(r.discarded for r in naive) > 0
    assert all(r.discarded == 0 for r in row)
    # while all four rows run, they commit the same number of tokens at every step
    common = min(len(r.acceptance_lengths) for r in naive)
    for step in range(common):
        assert len({r.acceptance_lengths[step] for r in naive}) == 1
    with pytest.raises(ValueError, match="rollback must be one of"):
        generate(target, NoDraftProposer(), ids[:2], 4, rollback="longest")


def test_seeded_sampling_of_a_batch_is_each_prompts_own_sample(tiny, drafter, prompts):
    """At temperature 1 with one seed, every row of a DFlash batch is the target's seeded sample of
    its prompt decoded alone by plain decoding."""
    target, _ = tiny
    ids, _, stops = prompts
    sampling = SamplingParams(temperature=1.0, seed=7)
    alone = [generate(target, NoDraftProposer(), x, MAX_NEW, sampling, stops).tokens for x in ids]
    results = generate(target, DFlashTreeProposer(drafter, target, 12), ids, MAX_NEW, sampling,
                       stops)
    assert [r.tokens for r in results] == alone
    assert all(r.seed == 7 for r in results)


def _costs(compute_bound: bool) -> StepCosts:
    widths = (1, 2, 3, 4, 6, 8, 12, 16, 17, 32)
    target = {w: (1.0 * w if compute_bound else 1.0) for w in widths}
    return StepCosts(target, {w: 0.5 for w in widths if w > 1})


def test_the_batch_policy_decodes_plainly_where_no_draft_pays(tiny, drafter, prompts):
    """Step costs that grow with the width as fast as the tokens a draft could bring (the
    compute-bound regime) make every step plain decoding; flat costs make it draft. Either way
    every row is the target's output alone."""
    target, _ = tiny
    ids, alone, stops = prompts
    for bound, drafts in ((True, False), (False, True)):
        policy = CostAwareProposer(drafter, target, DEFAULT_OPTIONS, _costs(bound))
        results = generate(target, policy, ids[:4], MAX_NEW, stop_token_ids=stops)
        assert [r.tokens for r in results] == alone[:4]
        kinds = {c.kind for c in policy.chosen}
        assert (kinds == {"plain"}) != drafts, kinds


def test_the_sweeps_default_is_one_session_across_batch_sizes(tiny, drafter, prompts):
    """As ``Engine`` keeps it: what the default learned at one batch size (its acceptance
    estimate) is where the next batch size starts, each size on its own measured costs."""
    target, _ = tiny
    ids, alone, stops = prompts
    session, made = PolicySession(drafter, target, DEFAULT_OPTIONS), []
    for size, bound in ((2, False), (4, True)):
        methods = batching.batch_methods(target, drafter, (8,), 12, size=size,
                                         costs=_costs(bound), session=session)
        default = next(m for m in methods if m.default)
        proposer = default.make(ids[:size])
        assert [r.tokens for r in generate(target, proposer, ids[:size], MAX_NEW,
                                           stop_token_ids=stops)] == alone[:size]
        default.finish(proposer)
        made.append(proposer)
    assert made[1].estimate is made[0].estimate            # learned at 2, carried on to 4
    assert made[0].estimate.judged > 0
    assert made[1].costs is session.batch_costs[4] is not session.batch_costs[2]


def test_the_drafters_catch_up_is_not_timed_as_a_step(tiny, drafter, prompts):
    """The drafter's first forward takes in the whole prompt: timing it as a chain or tree step
    would price every later one at the prompt's cost. With costs where drafting pays, every step
    drafts, and every step but the first (and the last, which no step follows) is timed."""
    target, _ = tiny
    ids, alone, stops = prompts
    costs = _costs(False)
    costs.measured = True
    policy = CostAwareProposer(drafter, target, DEFAULT_OPTIONS, costs)
    timed = []
    costs.observe = lambda kind, seconds, predicted, decay=0.95: timed.append(kind)
    result = generate(target, policy, ids[0], MAX_NEW, stop_token_ids=stops)   # one row: whole
    assert result.tokens == alone[0]
    drafting = [c for c in policy.chosen if c.uses_drafter]
    assert len(drafting) == len(policy.chosen) > 2 and len(timed) == len(drafting) - 2


def test_a_batch_times_plain_decoding_once_before_trusting_a_borrowed_ratio(tiny, drafter, prompts):
    """A kind never timed borrows the other kinds' measured / predicted ratio; where a draft's host
    work per step is larger, that rates plain decoding too dear to be tried. So once a step of
    another kind has been timed, a whole batch takes one plain step, and from then on plain
    decoding is rated at its own ratio."""
    target, _ = tiny
    ids, alone, stops = prompts
    costs = _costs(False)                             # flat: drafting pays
    costs.measured = True
    policy = CostAwareProposer(drafter, target, DEFAULT_OPTIONS, costs)
    results = generate(target, policy, ids[:4], MAX_NEW, stop_token_ids=stops)
    assert [r.tokens for r in results] == alone[:4]
    kinds = [c.kind for c in policy.chosen]
    assert "plain" in costs.timed and "plain" not in kinds[:1] and kinds.index("plain") <= 2, kinds
    one = CostAwareProposer(drafter, target, DEFAULT_OPTIONS, _costs(False))
    one.costs.measured = True
    assert generate(target, one, ids[0], MAX_NEW, stop_token_ids=stops).tokens == alone[0]
    assert "plain" not in {c.kind for c in one.chosen}          # one row: the rule alone


def test_as_batch_refuses_what_it_cannot_serve():
    with pytest.raises(ValueError, match="the batch is empty"):
        as_batch([], 4)
    with pytest.raises(ValueError, match="2 prompts, but max_new_tokens"):
        as_batch([[1, 2], [3]], [4, 5, 6])
    prompts, limits, stops = as_batch([[1, 2], torch.tensor([3])], 4, [9, 10])
    assert [p.shape for p in prompts] == [(1, 2), (1, 1)] and limits == [4, 4]
    assert stops == [{9, 10}, {9, 10}]


def test_engine_generates_a_list_and_streams_rows(tiny):
    target, tokenizer = tiny
    engine = Engine(target, tokenizer)
    texts = ["def add(a, b):", "Question: what is 2 + 3?\nAnswer:", "class Stack:"]
    alone = [engine.generate(t, max_new_tokens=12) for t in texts]
    assert engine.generate(texts, max_new_tokens=12) == alone
    assert len(engine.last_result) == 3
    joined = [""] * 3
    for row, piece in engine.generate(texts, max_new_tokens=12, stream=True):
        joined[row] += piece
    assert joined == alone
    with pytest.raises(ValueError, match="the batch is empty"):
        engine.generate([], max_new_tokens=4)


def test_engine_batch_policy_keeps_the_text(tiny):
    """The default engine (shipped drafter, the batch policy on costs measured at this batch size)
    gives every prompt its own greedy text."""
    engine = Engine.from_pretrained("tiny")
    texts = ["def mean(values):", "Question: Ann has 4 pens and buys 3 more. How many?\nAnswer:"]
    plain = Engine(engine.target, engine.tokenizer)
    assert engine.generate(texts, max_new_tokens=24) == [plain.generate(t, max_new_tokens=24)
                                                          for t in texts]
    assert 2 in engine.session.batch_costs and engine.session.estimate is not None


def test_bench_batch_sizes_reports_a_row_per_batch_size(tmp_path):
    out = tmp_path / "batch.json"
    report = bench(batch_sizes=(1, 2), num_prompts=2, max_new_tokens=8, repeats=1, cost_repeats=1,
                   block_sizes=(4,), tree_sizes=(8,), domain="math", quiet=True,
                   json_out=str(out))
    rows = json.loads(out.read_text())["methods"]
    assert rows == report["methods"]
    assert {r["batch_size"] for r in rows} == {1, 2}
    kinds = {r["kind"] for r in rows}
    assert {"autoregressive", "dflash", "dflash_tree", "ngram", "dflash_policy"} <= kinds
    assert all(r["identical_to_target"] for r in rows)
    assert all(r["speedup"] == 1.0 for r in rows if r["kind"] == "autoregressive")
    naive = [r for r in rows if r["rollback"] == "shortest"]
    assert [r["batch_size"] for r in naive] == [1, 2] and naive[0]["discarded_tokens"] == 0
    assert all(r["predicted_speedup"] for r in rows if r["kind"] == "dflash")
    assert all(r["predicted_speedup"] > 0 for r in rows if r["kind"] == "dflash_tree")
    # with the prefill and the loop's own work per step, read off plain decoding: exact for it
    assert all(r["predicted_with_host"] > 0 for r in rows
               if r["kind"] in ("dflash", "dflash_tree", "dflash_policy"))
    assert all(r["predicted_with_host"] == pytest.approx(1.0) for r in rows
               if r["kind"] == "autoregressive")
    # plain decoding timed again, beside the default, is a tie's reading, not a row of its own
    plain = [r for r in rows if r["kind"] == "autoregressive"]
    assert [r["batch_size"] for r in plain] == [1, 2] and all(r["again"] > 0 for r in plain)
    table = batching.format_batch_table(rows)
    assert f"1 {plain[0]['again']:.2f}x, 2 {plain[1]['again']:.2f}x" in table


def test_only_a_whole_batch_times_the_cost_model(tiny, drafter, prompts):
    """The costs are those of the batch the policy started with: a step run after rows left is
    cheaper than they say, and timing it would make the kinds that run late (prompt lookup, as
    rows finish) look cheap. A step is timed whole, from its start to the next one's, and every
    step adds to the forecast."""
    target, _ = tiny
    ids, alone, stops = prompts
    costs = _costs(True)                              # plain steps: a token per row each
    costs.measured = True
    policy = CostAwareProposer(drafter, target, DEFAULT_OPTIONS, costs)
    timed = []
    costs.observe = lambda kind, seconds, predicted, decay=0.95: timed.append(kind)
    limits = [MAX_NEW, 6, MAX_NEW, 6]                 # two rows leave after a few steps
    results = generate(target, policy, ids[:4], limits, stop_token_ids=stops)
    assert [r.tokens for r in results] == [a[:n] for a, n in zip(alone[:4], limits)]
    assert 0 < len(timed) < len(policy.chosen) <= len(policy.forecast)


def test_the_defaults_forecast_is_put_on_the_forwards_the_sweep_measured():
    """The default's prediction rests on the same measured forwards as every fixed row's: its
    forecast, made on the policy's own calibration, is scaled by what the sweep measured of the
    same forwards over what that calibration says of them."""
    from dflash_lite.measuring.batching import _model_scale, _with_host
    measured = {"context_length": 10, "t_target": {"1": 2.0, "17": 4.0}, "t_draft": {"16": 2.0},
                "prefill_s": 1.0}
    low = StepCosts({1: 1.0, 2: 1.5, 17: 2.0}, {2: 1.0, 16: 1.0})      # half of what was measured
    assert _model_scale(low, measured) == pytest.approx(2.0)
    assert _model_scale(None, measured) == 1.0 and _model_scale(low, None) == 1.0
    plain = {"seconds": 21.0, "steps": 10}               # h = (21 - 1) / 10 - 2 = 0 per step
    default = {"kind": "dflash_policy", "tau": 4.0, "steps": 2, "forecast_s": 6.0}
    assert _with_host(default, plain, measured) == pytest.approx(21.0 / 7.0)
    default["model_scale"] = _model_scale(low, measured)
    assert _with_host(default, plain, measured) == pytest.approx(21.0 / 13.0)


def test_crossover_is_the_first_batch_below_the_line():
    rows = [{"batch_size": b, "kind": "dflash", "rollback": "row", "speedup": s}
            for b, s in ((1, 2.0), (2, 1.5), (4, 1.1), (8, 0.9))]
    rows += [{"batch_size": b, "kind": "autoregressive", "rollback": "row", "speedup": 1.0}
             for b in (1, 2, 4, 8)]
    assert crossover(rows) == 4 and crossover(rows, line=0.5) is None


@pytest.mark.parametrize("sizes", [(0,), (65,)])
def test_bench_refuses_a_bad_batch_size(sizes):
    with pytest.raises(ValueError, match="batch_sizes"):
        BenchConfig(batch_sizes=sizes).check()


def test_a_batch_cache_keeps_each_rows_path_and_drops_finished_rows():
    from dflash_lite.decoding.cache import SlotCache
    cache = SlotCache(1, 16, rows=3)
    keys = torch.arange(3 * 6, dtype=torch.float).view(3, 1, 6, 1)
    cache.rewind([2, 4, 3])
    cache.layers[0].update(keys, keys)                       # slots 2..7, 4..9, 3..8
    cache.keep_paths([2, 4, 3], [[0, 2, 5], [0, 1, 2], [0]])
    assert cache.layers[0].starts == [5, 7, 4]
    assert cache.layers[0].keys[0, 0, 2:5, 0].tolist() == [0.0, 2.0, 5.0]    # row 0's tree path
    assert cache.layers[0].keys[1, 0, 4:7, 0].tolist() == [6.0, 7.0, 8.0]    # row 1's chain
    cache.keep([2, 0])
    assert cache.rows == 2 and cache.layers[0].starts == [4, 5]
    assert cache.layers[0].keys[1, 0, 2:5, 0].tolist() == [0.0, 2.0, 5.0]


@pytest.mark.slow
def test_a_compiled_batch_gives_every_prompts_own_output(tiny, drafter, prompts):
    """torch.compile (inductor, no CUDA graphs on a CPU) of a batch of 3: DFlash and plain."""
    target, _ = tiny
    ids, alone, stops = prompts
    shapes = FixedShapes(256, compile=True, buckets=(1, 8))
    for make in (lambda: NoDraftProposer(shapes), lambda: DFlashProposer(drafter, target, 8,
                                                                         shapes=shapes)):
        results = generate(target, make(), ids[:3], MAX_NEW, stop_token_ids=stops)
        assert [r.tokens for r in results] == alone[:3]
