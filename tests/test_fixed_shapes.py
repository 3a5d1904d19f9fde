"""The one decode loop on fixed shapes (dflash_lite.decoding.shapes) is the eager loop, step for step.

The identity grids and chi-square tests of the other files run over both modes (the ``shapes``
fixture). Here: what is only about fixed shapes. A scripted policy that switches between plain
decoding, chains, trees, prompt lookup and the hybrid tree commits the same steps on both; the
caches are allocated once; the compiled forwards (``torch.compile``, no CUDA graphs on a CPU) give
the target's tokens; ``Engine(compile=True)`` and ``bench --compile`` run on them; bad sizes fail
in one line; and on a GPU, the CUDA-graph path gives the target's tokens too.
"""
import threading

import pytest
import torch

from dflash_lite import corpus, generate_autoregressive, stop_token_ids
from dflash_lite.decoding.baselines import EagleProposer, NoDraftProposer
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.costs import StepCosts
from dflash_lite.decoding.decode import DFlashProposer, PerRow, generate
from dflash_lite.decoding.drafts import ChainDraft, chain_layouts
from dflash_lite.decoding.tree import DraftTree, build_tree
from dflash_lite.decoding.engine import FIXED_MIN_LENGTH, Engine
from dflash_lite.decoding.ngram import NgramProposer
from dflash_lite.decoding.policy import Choice, CostAwareProposer
from dflash_lite.decoding.session import DEFAULT_OPTIONS
from dflash_lite.decoding.shapes import EAGER, FixedShapes, pad
from dflash_lite.decoding.target import default_drafter_path
from dflash_lite.decoding.tree import DFlashTreeProposer, HybridTreeProposer

MAX_NEW = 48


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


def lengths_and_mismatches(target, make, cases, stops):
    lengths, wrong = [], 0
    for ids, expected in cases:
        result = generate(target, make(), ids, MAX_NEW, stop_token_ids=stops)
        wrong += result.tokens != expected
        lengths.append(result.acceptance_lengths)
    return lengths, wrong


@pytest.mark.parametrize("draft", ["plain", "chain", "tree", "ngram", "hybrid"])
def test_every_draft_commits_the_same_steps_on_both_modes_on_3_prompts(tiny, shipped_drafter, quick_cases,
                                                                     draft):
    """The same tokens as the target alone, and the same accepted length at every step, eager and
    on fixed shapes (padded widths, whole-buffer masks)."""
    target, tokenizer = tiny
    make = {"plain": lambda s: NoDraftProposer(s), "chain": lambda s: DFlashProposer(shipped_drafter, target, 8,
                                                                                      shapes=s),
            "tree": lambda s: DFlashTreeProposer(shipped_drafter, target, 12, shapes=s),
            "ngram": lambda s: PerRow(NgramProposer(6, shapes=s)),
            "hybrid": lambda s: HybridTreeProposer(shipped_drafter, target, 12, shapes=s)}[draft]
    stops, fixed = stop_token_ids(target, tokenizer), FixedShapes(256)
    eager = lengths_and_mismatches(target, lambda: make(EAGER), quick_cases, stops)
    assert eager[1] == 0 and lengths_and_mismatches(target, lambda: make(fixed), quick_cases, stops) == eager


def test_a_policy_switching_widths_commits_the_same_steps_on_both_modes(tiny, shipped_drafter, quick_cases,
                                                                       monkeypatch):
    """Scripted choices: 20 plain steps (more new context than one fixed-width drafter forward
    takes), then a tree, a chain, plain, prompt lookup, the hybrid tree, ... Every switch is
    lossless, and the drafter's context caught up in fixed-width chunks drafts what it drafts
    when written at once: the same accepted lengths on both modes."""
    import dflash_lite.decoding.policy as policy

    script = [Choice(1)] * 20 + [Choice(16, 16), Choice(16), Choice(1), Choice(6, None, 5), Choice(16, 16, 5),
                                 Choice(4)]
    taken = []

    def scripted(estimate, costs, options, continuations=(0,), context_length=None, depth=None, new_context=1,
                 ahead=None, drafter=True):
        c = script[len(taken) % len(script)]
        c = c if (not c.ngram or min(continuations) >= c.ngram) else Choice(1)
        c = c if depth is None or c.block_size - 1 <= depth else Choice(1)
        taken.append(c)
        return c, 1.0

    monkeypatch.setattr(policy, "choose", scripted)
    target, tokenizer = tiny
    costs = StepCosts({1: 1.0, 16: 1.4}, {16: 0.5})
    stops = stop_token_ids(target, tokenizer)
    runs = {}
    for name, shapes in (("eager", EAGER), ("fixed", FixedShapes(256))):
        taken.clear()
        runs[name] = lengths_and_mismatches(
            target, lambda: CostAwareProposer(shipped_drafter, target, DEFAULT_OPTIONS, costs, shapes=shapes),
            quick_cases, stops)
        assert {c.kind for c in taken} == {"plain", "chain", "tree", "ngram", "hybrid"}
    assert runs["eager"][1] == 0 and runs["fixed"] == runs["eager"]


def _graph_inputs(shapes):
    return [t for cache in shapes.caches.values() for t in cache.buffers()]


def test_fixed_caches_are_allocated_once_and_kept(tiny, shipped_drafter, quick_cases):
    """The same addresses from request to request, each marked static: a CUDA graph writes into
    them in place (inductor skips the graph for an unmarked input that a forward mutates)."""
    target, tokenizer = tiny
    shapes = FixedShapes(256)
    generate(target, DFlashProposer(shipped_drafter, target, shapes=shapes), quick_cases[0][0], 8)
    buffers = [t.data_ptr() for t in _graph_inputs(shapes)]
    for ids, _ in quick_cases:
        generate(target, DFlashProposer(shipped_drafter, target, shapes=shapes), ids, MAX_NEW,
                 stop_token_ids=stop_token_ids(target, tokenizer))
    assert buffers == [t.data_ptr() for t in _graph_inputs(shapes)]
    assert all(getattr(t, "_dynamo_static_input_type", None) for t in _graph_inputs(shapes))
    assert all(layer.keys.shape[2] == shapes.slots for layer in shapes.caches["target"].layers)


def test_an_eager_cache_grows_and_rewinds_without_cropping():
    cache = SlotCache(1)
    k = torch.arange(300.0).view(1, 1, 300, 1)
    keys, _ = cache.append(0, k, k)
    assert cache.position == 300 and cache.length == 512 and keys.shape[2] == 300
    cache.rewind(100)                                   # the next write overwrites from slot 100
    keys, _ = cache.append(0, -k[:, :, :2], -k[:, :, :2])
    assert keys.shape[2] == 102 and keys[0, 0, 99:102, 0].tolist() == [99.0, -0.0, -1.0]


def test_a_batch_cache_writes_and_masks_each_row_at_its_own_position():
    """Rows at different write positions: each row's new slots land at its own position, and each
    row's mask shows its own committed slots and its new ones (causally), nothing else."""
    for fixed in (False, True):
        cache = SlotCache(1, 16, rows=2, fixed=fixed)
        cache.rewind([3, 5])
        mask = cache.verify_mask(2)["full_attention"]
        assert cache.positions(2).tolist() == [[3, 4], [5, 6]]
        new = torch.ones(2, 1, 2, 1)
        cache.append(0, new, new)
        keys = cache.layers[0].keys[:, 0, :, 0]
        assert keys[0, 3:5].tolist() == [1, 1] and keys[1, 5:7].tolist() == [1, 1] and keys.sum() == 4
        assert mask[0, 0, 1, :6].tolist() == [True] * 5 + [False]
        assert mask[1, 0, 0, :7].tolist() == [True] * 6 + [False]


def test_padding_rows_see_only_the_context_and_themselves():
    ids, depths, mask = pad(torch.tensor([[7, 8, 9]]), None, None, 4)
    assert ids.tolist() == [[7, 8, 9, 7]] and depths.tolist() == [0, 1, 2, 0]
    assert mask.int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]]
    with pytest.raises(ValueError, match="does not fit a verify of width 2"):
        pad(ids, None, None, 2)


def test_a_batch_of_chains_is_laid_out_in_tensors_as_padding_each_row_would():
    """chain_layouts, the loop's layout of a batch of chains, against pad row by row."""
    last = torch.tensor([5, 6, 7])
    drafts = [ChainDraft(torch.tensor([1, 2])), ChainDraft(torch.tensor([3])),
              ChainDraft(torch.tensor([], dtype=torch.long))]
    ids, depths, mask, widths = chain_layouts(last, drafts)
    rows = [pad(i[None], d, a, 3) for i, d, a in (x.layout(last[r: r + 1])
                                                  for r, x in enumerate(drafts))]
    assert widths == [3, 2, 1] and ids.tolist() == [[5, 1, 2], [6, 3, 6], [7, 7, 7]]
    assert torch.equal(ids, torch.cat([r[0] for r in rows]))
    assert torch.equal(depths, torch.stack([r[1] for r in rows]))
    assert torch.equal(mask, torch.stack([r[2] for r in rows]))
    same = chain_layouts(last, [ChainDraft(torch.tensor([1, 2]))] * 3)      # one width: a chain
    assert same[0].tolist() == [[5, 1, 2], [6, 1, 2], [7, 1, 2]] and same[1:3] == (None, None)


def test_a_batch_of_trees_is_laid_out_in_tensors_as_padding_each_row_would():
    """DraftTree.layouts, the loop's layout of a batch of trees, against pad row by row, on
    trees of several shapes (a chain, a bushy one, the root alone)."""
    g = torch.Generator().manual_seed(3)
    last = torch.tensor([5, 6, 7, 8])
    trees = [build_tree(last[r], torch.log_softmax(3 * torch.randn(d, 30, generator=g), -1), n)
             for r, (d, n) in enumerate([(4, 9), (1, 1), (3, 6), (0, 4)])]
    ids, depths, mask, widths = DraftTree.layouts(last, trees)
    width = max(widths)
    rows = [pad(i[None], d, a, width) for i, d, a in (t.layout(last[r: r + 1])
                                                      for r, t in enumerate(trees))]
    assert widths == [10, 2, 7, 1] and ids[:, 0].tolist() == last.tolist()
    assert torch.equal(ids, torch.cat([r[0] for r in rows]))
    assert torch.equal(depths, torch.stack([r[1] for r in rows]))
    assert torch.equal(mask, torch.stack([r[2] for r in rows]))
    assert any(d > 1 for d in trees[0].depths) and len(set(trees[0].depths)) < len(trees[0])


def test_fixed_shapes_refuse_what_they_cannot_serve(tiny, quick_cases, random_llama):
    target, _ = tiny
    with pytest.raises(ValueError, match="exceeds these fixed shapes' length of 32"):
        generate(target, NoDraftProposer(FixedShapes(32)), quick_cases[0][0], 64)
    from dflash_lite.decoding.drafter import DrafterConfig, Drafting
    from dflash_lite.decoding.variants import make_drafter

    config = DrafterConfig.from_target(target.config, 1, num_layers=1, block_size=4)
    config.drafting = Drafting.AUTOREGRESSIVE
    with pytest.raises(ValueError, match="no fixed-shape forward; run it eager"):
        generate(target, PerRow(EagleProposer(make_drafter(config), target, shapes=FixedShapes(256))), quick_cases[0][0],
                 8)


@pytest.mark.slow
def test_compiled_forwards_give_the_targets_tokens_on_a_cpu(tiny, shipped_drafter, quick_cases):
    """torch.compile (inductor, no CUDA graphs on a CPU) of the verify and drafter forwards, on 3
    prompts: plain decoding and DFlash B=4, each width compiled once and replayed."""
    target, tokenizer = tiny
    shapes = FixedShapes(256, compile=True, buckets=(1, 4))
    stops = stop_token_ids(target, tokenizer)
    for make in (lambda: NoDraftProposer(shapes), lambda: DFlashProposer(shipped_drafter, target, 4, shapes=shapes)):
        _, wrong = lengths_and_mismatches(target, make, quick_cases, stops)
        assert wrong == 0
    assert set(shapes.forwards) == {("verify", ()), ("verify", tuple(shipped_drafter.config.target_layer_ids)),
                                    "draft"}


@pytest.mark.gpu
def test_cuda_graphs_give_the_targets_tokens():
    """On CUDA: the fixed-shape loop with its forwards recorded as CUDA graphs, plain, a chain,
    a tree and the default policy, against the target's own greedy output."""
    from torch._dynamo.utils import counters
    from dflash_lite import load_pretrained

    counters.clear()                                          # counted from here on
    target, tokenizer = load_pretrained("tiny", device="cuda")
    drafter = load_drafter(default_drafter_path("tiny")).to("cuda").eval()
    stops, shapes = stop_token_ids(target, tokenizer), FixedShapes(256, compile=True, buckets=(1, 2, 4, 8, 16, 17, 32))
    for prompt in corpus.prompts("held_out", "math", 2) + corpus.prompts("held_out", "code", 1):
        ids = tokenizer(prompt, return_tensors="pt").input_ids.to("cuda")
        expected = generate_autoregressive(target, ids, MAX_NEW, stop_token_ids=stops).tokens
        for proposer in (NoDraftProposer(shapes), DFlashProposer(drafter, target, shapes=shapes),
                         DFlashTreeProposer(drafter, target, 16, shapes=shapes),
                         CostAwareProposer(drafter, target, DEFAULT_OPTIONS, shapes=shapes)):
            assert generate(target, proposer, ids, MAX_NEW, stop_token_ids=stops).tokens == expected
    assert counters["inductor"]["cudagraph_skips"] == 0      # every forward was recorded as a graph


# ----------------------------------------------------------------------------- Engine and bench
@pytest.mark.slow
def test_engine_compile_gives_the_same_text_and_sizes_its_caches(tiny, shipped_drafter):
    """Engine(compile=True): the eager engine's text, on fixed shapes of the first call's length
    rounded up to a power of two (at least FIXED_MIN_LENGTH), kept while calls fit, rebuilt
    larger only for a longer one; the policy's session carries from call to call."""
    target, tokenizer = tiny
    prompt = corpus.prompts("held_out", "math", 1)[0]
    eager = Engine(target, tokenizer, shipped_drafter, block_size=4).generate(prompt, max_new_tokens=24)
    engine = Engine(target, tokenizer, shipped_drafter, block_size=4, compile=True)
    assert engine.generate(prompt, max_new_tokens=24) == eager and engine.last_result.tau > 1
    first = engine.shapes
    assert isinstance(first, FixedShapes) and first.compiled and first.length == FIXED_MIN_LENGTH
    engine.generate(prompt, max_new_tokens=8)
    assert engine.shapes is first                                      # it fits: the same caches
    engine.generate("def h(x):", max_new_tokens=FIXED_MIN_LENGTH)
    assert engine.shapes is not first and engine.shapes.length == 2 * FIXED_MIN_LENGTH


def test_a_compiled_engine_refuses_a_second_concurrent_call(tiny):
    """Its fixed-shape caches hold one request: a call while another streams is refused with one
    line, never served from the same caches (the eager engine has a cache per call)."""
    target, tokenizer = tiny
    engine = Engine(target, tokenizer, compile=True)
    engine.shapes = FixedShapes(FIXED_MIN_LENGTH)                      # eager forwards: no compile here
    engine.shapes_for = lambda length: engine.shapes
    stream = engine.generate("def f(x):", max_new_tokens=8, stream=True)
    next(stream)
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(
        RuntimeError, engine.generate, "def g(x):", max_new_tokens=4)))
    thread.start()
    thread.join()
    assert "serving another call" in str(errors[0].value)
    "".join(stream)
    assert engine.generate("def g(x):", max_new_tokens=4) == Engine(target, tokenizer).generate(
        "def g(x):", max_new_tokens=4)                                 # free again once the stream ends


@pytest.mark.slow
def test_bench_compile_adds_compiled_rows_with_the_targets_output(tmp_path):
    from dflash_lite.measuring.benchmark import bench
    from dflash_lite.measuring.report import Kind, row_of

    report = bench(num_prompts=2, max_new_tokens=8, repeats=1, cost_repeats=1, block_sizes=(4,), tree_sizes=(),
                   baselines=False, hf_dflash=False, compile=True, quiet=True, json_out=str(tmp_path / "r.json"))
    plain = row_of(report, Kind.AUTOREGRESSIVE, compiled=True)
    dflash = row_of(report, Kind.DFLASH, block_size=4, compiled=True)
    policy = row_of(report, Kind.DFLASH_POLICY, compiled=True)
    assert row_of(report, Kind.AUTOREGRESSIVE, compiled=False)["speedup"] == 1.0
    assert plain["name"] == "autoregressive (ours) (compiled)" and plain["speedup_vs_compiled"] == 1.0
    for row in (plain, dflash, policy, row_of(report, Kind.NGRAM, compiled=True)):
        assert row["identical_to_target"] is True
    assert dflash["speedup_vs_compiled"] == pytest.approx(dflash["tokens_per_s"] / plain["tokens_per_s"])
    assert not policy["default"] and dflash["tau"] > 1


@pytest.mark.parametrize("fixed", [False, True], ids=["eager", "fixed"])
def test_a_sliding_window_target_decodes_as_transformers_does(fixed):
    """Qwen3 with sliding-window layers (window 8, shorter than the output): the one cache's own
    sliding mask gives model.generate's greedy tokens, plain and with multi-token verifies."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=256, use_sliding_window=True, sliding_window=8,
                         layer_types=["full_attention", "sliding_attention"] * 2)
    model = Qwen3ForCausalLM(config).eval()
    ids = torch.randint(0, 300, (1, 20), generator=torch.Generator().manual_seed(1))
    expected = model.generate(ids, max_new_tokens=30, do_sample=False)[0, 20:].tolist()
    for proposer in (NoDraftProposer(FixedShapes(128) if fixed else EAGER),
                     PerRow(NgramProposer(4, shapes=FixedShapes(128) if fixed else EAGER))):
        assert generate(model, proposer, ids, 30).tokens == expected
