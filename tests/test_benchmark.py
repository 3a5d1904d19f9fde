"""The benchmark: JSON shape, the identity check, failing methods reported, speedup arithmetic."""
import json

import pytest

from dflash_lite.benchmark import (
    Method,
    format_table,
    load_prompts,
    run_benchmark,
    standard_methods,
)


@pytest.fixture(scope="module")
def report(tiny, random_drafter):
    target, tokenizer = tiny
    ids = [tokenizer(p, return_tensors="pt").input_ids for p in ["def f(x):\n", "Question: Ava has 3 pens.\nAnswer:"]]
    methods = standard_methods(target, tokenizer, random_drafter, block_sizes=(4,), prompt_lookup=5)

    def broken(ids, n):
        raise RuntimeError("this method cannot run here")

    def wrong(ids, n):                                        # a method whose output differs from the target's
        return [0] * n, None

    methods += [Method("broken", broken), Method("wrong tokens", wrong)]
    return run_benchmark(methods, ids, 8, repeats=2)


def test_report_has_the_documented_shape(report):
    json.dumps(report)                                        # serialisable
    assert {"device", "torch", "transformers", "threads"} <= set(report["env"])
    for m in report["methods"]:
        assert {"name", "block_size", "tokens_per_s", "speedup", "tau", "tau_histogram", "identical_to_target",
                "error"} <= set(m)


def test_every_greedy_method_is_checked_against_the_target(report):
    by_name = {m["name"]: m for m in report["methods"]}
    assert by_name["DFlash (ours) B=4"]["identical_to_target"] is True
    assert by_name["DFlash (transformers) B=16"]["identical_to_target"] is True    # the drafter's own block size
    assert by_name["wrong tokens"]["identical_to_target"] is False


def test_a_failing_method_is_reported_not_dropped(report):
    broken = next(m for m in report["methods"] if m["name"] == "broken")
    assert broken["error"] == "RuntimeError: this method cannot run here"
    assert broken["tokens_per_s"] is None and broken["speedup"] is None
    assert "failed: RuntimeError" in format_table(report)


def test_speedup_is_relative_to_the_fastest_baseline(report):
    rows = [m for m in report["methods"] if m["tokens_per_s"]]
    best = max(m["tokens_per_s"] for m in rows if m["baseline"])
    for m in rows:
        assert m["speedup"] == pytest.approx(m["tokens_per_s"] / best)
    assert max(m["speedup"] for m in rows if m["baseline"]) == pytest.approx(1.0)


def test_tau_histogram_counts_every_step(report):
    dflash = next(m for m in report["methods"] if m["name"] == "DFlash (ours) B=4")
    hist = dflash["tau_histogram"]
    assert 1 <= len(hist) <= 4
    assert dflash["tau"] == pytest.approx(sum((i + 1) * c for i, c in enumerate(hist)) / sum(hist))


def test_prompt_files_with_prompt_or_turns(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"turns": ["b", "c"]}\n')
    assert load_prompts(str(path)) == ["a", "b"]
    path.write_text('{"question": "a"}\n')
    with pytest.raises(ValueError, match="no 'prompt'"):
        load_prompts(str(path))
    with pytest.raises(ValueError, match="no such prompts file"):
        load_prompts(str(tmp_path / "missing.jsonl"))


def test_cost_model_arithmetic():
    """predicted = tau * t(1) / (t(B) + t_draft(B)); overhead = measured step - the two forwards."""
    from dflash_lite.benchmark import cost_model

    report = {"methods": [
        {"name": "autoregressive (ours)", "block_size": 1, "tokens_per_s": 100.0, "speedup": 1.0, "tau": None,
         "tau_histogram": [], "phase_times": {}},
        {"name": "DFlash (ours) B=8", "block_size": 8, "tokens_per_s": 250.0, "speedup": 2.5, "tau": 3.0,
         "tau_histogram": [2, 0, 8], "phase_times": {"prefill": 1.0, "draft": 0.05, "verify": 0.12,
                                                     "bookkeeping": 0.01}},
        {"name": "EAGLE-style (ours) B=16", "block_size": 16, "tokens_per_s": 90.0, "speedup": 0.9, "tau": 5.0,
         "tau_histogram": [1], "phase_times": {}}]}
    costs = {"t_target": {"1": 0.010, "8": 0.012}, "t_draft": {"8": 0.004}}
    [row] = cost_model(report, costs)                        # only DFlash rows with measured costs
    assert row["predicted_speedup"] == pytest.approx(3.0 * 0.010 / 0.016)
    assert row["step_s"] == pytest.approx(0.018)              # (0.05 + 0.12 + 0.01) / 10 steps, prefill left out
    assert row["overhead_per_step_s"] == pytest.approx(0.018 - 0.016)
    assert row["measured_speedup_vs_ours_ar"] == pytest.approx(2.5)
    # a tree of N drafts: one verify of N+1 tokens and one drafter forward over the drafter's own block
    report["methods"].append({"name": "DFlash tree N=32", "block_size": None, "tree_size": 32, "tokens_per_s": 200.0,
                              "speedup": 2.0, "tau": 4.0, "tau_histogram": [1], "phase_times": {}})
    costs.update(t_target={"1": 0.010, "8": 0.012, "33": 0.02}, tree_block_size=8)
    tree_row = cost_model(report, costs)[1]
    assert tree_row["predicted_speedup"] == pytest.approx(4.0 * 0.010 / (0.02 + 0.004))


def test_the_default_row_is_marked_and_trees_get_rows(tiny, random_drafter):
    from dflash_lite.acceptance import SamplingParams

    target, tokenizer = tiny
    ids = [tokenizer("def f(x):\n", return_tensors="pt").input_ids]
    methods = standard_methods(target, tokenizer, random_drafter, block_sizes=(4,), hf_dflash=False,
                               prompt_lookup=None, tree_sizes=(8,))
    report = run_benchmark(methods, ids, 8, repeats=1)
    rows = {m["name"]: m for m in report["methods"]}
    assert [name for name, m in rows.items() if m["default"]] == ["DFlash (ours) cost-aware"]
    tree = rows["DFlash tree N=8"]
    assert tree["tree_size"] == 8 and tree["identical_to_target"] is True and tree["tau"] >= 1
    assert rows["DFlash (ours) cost-aware"]["identical_to_target"] is True
    assert "* the default" in format_table(report)
    sampled = standard_methods(target, tokenizer, random_drafter, sampling=SamplingParams(temperature=1.0),
                               hf_dflash=False, prompt_lookup=None, tree_sizes=(8,))
    assert not any("tree" in m.name for m in sampled)           # trees are greedy only


def test_measured_costs_and_plots(tiny, random_drafter, tmp_path):
    from dflash_lite.benchmark import cost_model, measure_costs
    from dflash_lite.plotting import plot_benchmark

    target, tokenizer = tiny
    ids = tokenizer("Question: Ava has 3 pens and buys 4 more.\nAnswer:", return_tensors="pt").input_ids
    costs = measure_costs(target, random_drafter, ids, block_sizes=(4, 16), repeats=2)
    assert set(costs["t_target"]) == {"1", "4", "16"} and set(costs["t_draft"]) == {"4", "16"}
    assert all(t > 0 for t in [*costs["t_target"].values(), *costs["t_draft"].values()])
    methods = standard_methods(target, tokenizer, random_drafter, block_sizes=(4, 16), hf_dflash=False,
                               prompt_lookup=None)
    report = run_benchmark(methods, [ids], 8, repeats=1)
    report["cost_model"] = {"costs": costs, "rows": cost_model(report, costs)}
    assert [r["block_size"] for r in report["cost_model"]["rows"]] == [4, 16]
    json.dumps(report)
    paths = plot_benchmark(report, tmp_path, "t")
    assert sorted(p.name for p in paths) == ["t_cost_model.png", "t_speedup_by_method.png",
                                             "t_speedup_vs_block_size.png", "t_tau_histogram.png"]
    assert all(p.stat().st_size > 5000 for p in paths)


def test_dataset_offline_is_one_clear_error(monkeypatch):
    from dflash_lite.benchmark import dataset_prompts

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="offline, pass --prompts FILE") as e:
        dataset_prompts("gsm8k", 4)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="unknown dataset"):
        dataset_prompts("imagenet", 4)


def test_sampled_benchmark_skips_the_identity_check(tiny, random_drafter):
    from dflash_lite.acceptance import SamplingParams

    target, tokenizer = tiny
    ids = [tokenizer("def f(x):\n", return_tensors="pt").input_ids]
    sampling = SamplingParams(temperature=1.0)
    methods = standard_methods(target, tokenizer, random_drafter, block_sizes=(4,), sampling=sampling,
                               hf_dflash=False, prompt_lookup=None)
    report = run_benchmark(methods, ids, 8, repeats=1, greedy=False)
    assert all(m["identical_to_target"] is None and m["error"] is None for m in report["methods"])


def test_interleaved_warms_up_untimed_then_rotates_the_order():
    from dflash_lite.benchmark import interleaved

    calls = []
    runs = {name: (lambda name=name: calls.append(name) or name.upper()) for name in "abc"}
    timed = interleaved(runs, repeats=3, warmup=1)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")   # warm-up, then rotated rounds
    assert {name: [result for _, result in rounds] for name, rounds in timed.items()} == \
        {name: [name.upper()] * 3 for name in "abc"}
    assert all(seconds >= 0 for rounds in timed.values() for seconds, _ in rounds)
