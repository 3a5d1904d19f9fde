"""The benchmark: JSON shape, the identity check, failing methods reported, speedup arithmetic."""
import json

import pytest
import torch

from dflash_lite.benchmark import Method, format_table, load_prompts, run_benchmark, standard_methods


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
