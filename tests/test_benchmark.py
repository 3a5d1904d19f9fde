"""The benchmark: JSON shape, the identity check, failing methods reported, speedup arithmetic,
rows told apart by kind (never by name), and the CLI's defaults taken from the config dataclasses."""
import json
import os

import pytest

from dflash_lite.measuring.benchmark import BenchConfig, Method, run_benchmark, standard_methods
from dflash_lite.prompts import load_prompts
from dflash_lite.measuring.report import Kind, format_table, row_of, rows_of


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
        assert {"name", "kind", "block_size", "tree_size", "default", "tokens_per_s", "speedup",
                "speedup_vs_hf_generate", "tau", "tau_histogram", "identical_to_target", "error"} <= set(m)


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


def test_speedups_are_against_the_autoregressive_loop_and_model_generate(report):
    ours = row_of(report, Kind.AUTOREGRESSIVE)
    hf = row_of(report, Kind.HF_GENERATE)
    assert ours["block_size"] == 1 and ours["speedup"] == 1.0 and hf["speedup_vs_hf_generate"] == 1.0
    for m in report["methods"]:
        if m["tokens_per_s"]:
            assert m["speedup"] == pytest.approx(m["tokens_per_s"] / ours["tokens_per_s"])
            assert m["speedup_vs_hf_generate"] == pytest.approx(m["tokens_per_s"] / hf["tokens_per_s"])
    assert "vs generate" in format_table(report)


def test_without_an_autoregressive_row_there_is_no_speedup(tiny):
    """The speedup's denominator is the autoregressive row, never whichever row happens to be slowest."""
    target, tokenizer = tiny
    ids = [tokenizer("def f(x):\n", return_tensors="pt").input_ids]
    hf = next(m for m in standard_methods(target, tokenizer, prompt_lookup=None) if m.kind is Kind.HF_GENERATE)
    report = run_benchmark([hf, Method("echo", lambda ids, n: ([1] * n, None))], ids, 4, repeats=1)
    assert all(m["speedup"] is None for m in report["methods"])
    assert all(m["speedup_vs_hf_generate"] is not None for m in report["methods"])
    assert "-" in format_table(report).splitlines()[1]


def test_tau_histogram_counts_every_step(report):
    dflash = row_of(report, Kind.DFLASH, block_size=4)
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
    from dflash_lite.measuring.report import cost_model

    report = {"methods": [
        {"name": "autoregressive (ours)", "kind": "autoregressive", "block_size": 1, "tokens_per_s": 100.0,
         "speedup": 1.0, "tau": None, "tau_histogram": [], "phase_times": {}},
        {"name": "DFlash (ours) B=8", "kind": "dflash", "block_size": 8, "tokens_per_s": 250.0, "speedup": 2.5,
         "speedup_vs_hf_generate": 2.0, "tau": 3.0, "tau_histogram": [2, 0, 8],
         "phase_times": {"prefill": 1.0, "draft": 0.05, "verify": 0.12, "accept": 0.01}},
        {"name": "EAGLE-style (ours) B=16", "kind": "eagle", "block_size": 16, "tokens_per_s": 90.0, "speedup": 0.9,
         "tau": 5.0, "tau_histogram": [1], "phase_times": {}}]}
    costs = {"t_target": {"1": 0.010, "8": 0.012}, "t_draft": {"8": 0.004}}
    [row] = cost_model(report, costs)                        # only DFlash rows with measured costs
    assert row["predicted_speedup"] == pytest.approx(3.0 * 0.010 / 0.016)
    assert row["step_s"] == pytest.approx(0.018)              # (0.05 + 0.12 + 0.01) / 10 steps, prefill left out
    assert row["overhead_per_step_s"] == pytest.approx(0.018 - 0.016)
    assert (row["kind"], row["measured_speedup"], row["measured_speedup_vs_hf_generate"]) == ("dflash", 2.5, 2.0)
    # a tree of N drafts: one verify of N+1 tokens and one drafter forward over the drafter's own block
    report["methods"].append({"name": "DFlash tree N=32", "kind": "dflash_tree", "block_size": None, "tree_size": 32,
                              "tokens_per_s": 200.0, "speedup": 2.0, "tau": 4.0, "tau_histogram": [1],
                              "phase_times": {}})
    costs.update(t_target={"1": 0.010, "8": 0.012, "33": 0.02}, tree_block_size=8)
    tree_row = cost_model(report, costs)[1]
    assert tree_row["predicted_speedup"] == pytest.approx(4.0 * 0.010 / (0.02 + 0.004))
    assert (tree_row["kind"], tree_row["block_size"], tree_row["tree_size"]) == ("dflash_tree", 33, 32)


# ----------------------------------------------------------------------------- rows are selected by kind
def _row(name, kind, block_size=None, speedup=1.0, error=None, **fields):
    return {"name": name, "kind": kind, "block_size": block_size, "tree_size": None, "default": False,
            "tokens_per_s": None if error else 100.0 * speedup, "tokens_per_s_spread": None if error else [1.0, 2.0],
            "speedup": None if error else speedup, "speedup_vs_hf_generate": None, "tau": None if error else 2.0,
            "tau_histogram": [] if error else [1, 1], "phase_times": {"draft": 0.01, "verify": 0.02},
            "steps_per_run": 2, "identical_to_target": True, "error": error, **fields}


MISLEADING = [                                # names that used to be parsed, on rows of other kinds
    _row("autoregressive (ours)", "autoregressive", 1),
    _row("DFlash (ours) B=4", "custom", 4, 3.0),                     # not DFlash, whatever its name says
    _row("DFlash (transformers) B=8", "draft_model", 8, 1.5),
    _row("mine, fixed", "dflash", 8, 2.0),                          # DFlash, whatever its name says
    _row("a tree", "dflash_tree", None, 2.5, tree_size=4),
]


def test_rows_of_and_row_of_select_by_kind_and_fields():
    report = {"methods": MISLEADING}
    assert [r["name"] for r in rows_of(report, Kind.DFLASH)] == ["mine, fixed"]
    assert row_of(report, Kind.DFLASH, block_size=8)["name"] == "mine, fixed"
    assert [r["name"] for r in rows_of(report, Kind.CUSTOM, Kind.DRAFT_MODEL)] == \
        ["DFlash (ours) B=4", "DFlash (transformers) B=8"]
    with pytest.raises(LookupError, match="dflash, block_size=4"):
        row_of(report, Kind.DFLASH, block_size=4)


def test_consumers_select_rows_by_kind_not_by_name(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from dflash_lite.measuring import plotting
    from dflash_lite.measuring.report import all_dflash_failed, cost_model
    from dflash_lite.measuring.model_card import render_drafter_card

    report = {"env": {"prompts": 1, "max_new_tokens": 8, "repeats": 1, "device": "cpu", "threads": 1,
                      "torch": "-", "transformers": "-"}, "methods": [dict(r) for r in MISLEADING]}
    costs = {"t_target": {"1": 0.01, "4": 0.01, "5": 0.01, "8": 0.01}, "t_draft": {"4": 0.002, "8": 0.002},
             "tree_block_size": 4}
    assert [(r["name"], r["kind"]) for r in cost_model(report, costs)] == [("mine, fixed", "dflash"),
                                                                           ("a tree", "dflash_tree")]
    # every DFlash row failed: the rows named "DFlash ..." that are not DFlash do not hide it
    failed = {"methods": [dict(r) if r["kind"] not in ("dflash", "dflash_tree") else _row(r["name"], r["kind"], error="E")
                          for r in MISLEADING]}
    assert all_dflash_failed(failed) == "every DFlash method failed (mine, fixed: E)"
    assert all_dflash_failed(report) is None
    assert all_dflash_failed({"methods": [_row("DFlash (ours) B=4", "custom", error="E")]}) is None

    report["cost_model"] = {"costs": costs, "rows": cost_model(report, costs)}
    figures = {}
    monkeypatch.setattr(plotting, "save_figure", lambda fig, name, **kw: figures.setdefault(name, fig) and tmp_path)
    plotting.plot_benchmark(report, tmp_path, "t")
    [sweep] = figures["t_speedup_vs_block_size"].axes[0].lines
    assert list(sweep.get_xdata()) == [8]                            # the fixed-size DFlash rows only
    bars = figures["t_speedup_by_method"].axes[0].patches
    blue = [r["name"] for r, bar in zip(report["methods"], bars) if bar.get_facecolor()[2] > 0.6]
    assert blue == ["mine, fixed", "a tree"]
    cost_axis = figures["t_cost_model"].axes[0]
    assert [label.get_text() for label in cost_axis.get_xticklabels()] == ["B=8", "N=4"]
    for fig in figures.values():
        plt.close(fig)

    training = {k: 1 for k in ("steps", "batch_size", "num_anchors", "lr", "gamma", "sequences",
                               "regenerate_seconds", "train_seconds", "device", "threads")}
    card = render_drafter_card({"training": training, "final_metrics": None, "command_card": "c",
                                "benchmarks": {"set": report}})
    histograms = [line for line in card.splitlines() if "acceptance-length histogram" in line]
    assert [line.split(":")[0] for line in histograms] == ["- mine, fixed", "- a tree"]


def test_every_committed_report_row_has_a_kind():
    """Rows are read by kind alone: every committed report (results/, the shipped cards) carries it."""
    from pathlib import Path

    from dflash_lite.measuring.report import kind_of

    def rows(node):
        if isinstance(node, dict):
            if isinstance(node.get("methods"), list):
                yield from node["methods"]
            for value in node.values():
                yield from rows(value)
        elif isinstance(node, list):
            for value in node:
                yield from rows(value)

    root = Path(__file__).resolve().parent.parent
    files = sorted(root.glob("results/*.json")) + sorted(root.glob("dflash_lite/models/*/card.json"))
    found = [row for f in files for row in rows(json.loads(f.read_text()))]
    assert found and all(isinstance(kind_of(row), Kind) for row in found)


def test_standard_methods_carry_their_kinds(tiny, random_drafter):
    target, tokenizer = tiny
    methods = standard_methods(target, tokenizer, random_drafter, block_sizes=(4, 8), prompt_lookup=5, eagle=random_drafter,
                               draft_model=target, adaptive=(4, 8), tree_sizes=(8,))   # built, never run here
    assert [(m.kind, m.block_size, m.tree_size, m.default) for m in methods] == [
        (Kind.AUTOREGRESSIVE, 1, None, False), (Kind.HF_GENERATE, 1, None, False),
        (Kind.DRAFT_MODEL, 5, None, False), (Kind.HF_DRAFT_MODEL, None, None, False),
        (Kind.PROMPT_LOOKUP, None, None, False), (Kind.NGRAM, None, None, False), (Kind.EAGLE, 16, None, False),
        (Kind.DFLASH_POLICY, None, None, True), (Kind.DFLASH_POLICY, None, None, False), (Kind.DFLASH, 4, None, False),
        (Kind.DFLASH, 8, None, False), (Kind.DFLASH_ADAPTIVE, None, None, False), (Kind.DFLASH_TREE, None, 8, False),
        (Kind.DFLASH_HYBRID, None, 8, False), (Kind.HF_DFLASH, 16, None, False)]


def test_report_rows_carry_the_kind_of_their_method(report):
    kinds = {m["name"]: m["kind"] for m in report["methods"]}
    assert kinds["autoregressive (ours)"] == "autoregressive" and kinds["model.generate"] == "hf_generate"
    assert kinds["DFlash (ours) B=4"] == "dflash" and kinds["DFlash (ours) cost-aware"] == "dflash_policy"
    assert kinds["DFlash (transformers) B=16"] == "hf_dflash" and kinds["broken"] == "custom"
    assert [m["name"] for m in report["methods"] if m["default"]] == ["DFlash (ours) cost-aware"]
    assert json.loads(json.dumps(report))["methods"] == report["methods"]     # plain JSON values


def test_the_default_row_is_marked_and_trees_get_rows(tiny, random_drafter):
    from dflash_lite.decoding.acceptance import SamplingParams

    target, tokenizer = tiny
    ids = [tokenizer("def f(x):\n", return_tensors="pt").input_ids]
    methods = standard_methods(target, tokenizer, random_drafter, block_sizes=(4,), hf_dflash=False,
                               prompt_lookup=None, tree_sizes=(8,))
    report = run_benchmark(methods, ids, 8, repeats=1)
    [default] = [m for m in report["methods"] if m["default"]]
    assert default["kind"] == "dflash_policy" and default["identical_to_target"] is True
    tree = row_of(report, Kind.DFLASH_TREE, tree_size=8)
    assert tree["identical_to_target"] is True and tree["tau"] >= 1
    assert "* the default" in format_table(report)
    sampled = standard_methods(target, tokenizer, random_drafter, sampling=SamplingParams(temperature=1.0),
                               hf_dflash=False, prompt_lookup=None, tree_sizes=(8,))
    assert [m.tree_size for m in sampled if m.kind is Kind.DFLASH_TREE] == [8]   # sampled trees are lossless too


def test_measured_costs_and_plots(tiny, random_drafter, tmp_path):
    from dflash_lite.decoding.costs import measure_costs
    from dflash_lite.measuring.report import cost_model
    from dflash_lite.measuring.plotting import plot_benchmark

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
    from dflash_lite.prompts import dataset_prompts

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="offline, pass --prompts FILE") as e:
        dataset_prompts("gsm8k", 4)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="unknown dataset"):
        dataset_prompts("imagenet", 4)


def test_a_sampled_benchmark_checks_identity_only_when_seeded(tiny, random_drafter):
    """Unseeded, nothing can be compared; seeded, every row of this project's loop must give the
    autoregressive row's seeded sample, and transformers' rows (their own stream) are not checked."""
    from dflash_lite.decoding.acceptance import SamplingParams

    target, tokenizer = tiny
    ids = [tokenizer("def f(x):\n", return_tensors="pt").input_ids]
    for seed in (None, 3):
        sampling = SamplingParams(temperature=1.0, seed=seed)
        methods = standard_methods(target, tokenizer, random_drafter, block_sizes=(4,), sampling=sampling,
                                   hf_dflash=False, prompt_lookup=None)
        report = run_benchmark(methods, ids, 8, repeats=1, greedy=False, seeded=seed is not None)
        expected = {m["name"]: None if seed is None or m["kind"] == "hf_generate" else True
                    for m in report["methods"]}
        assert {m["name"]: m["identical_to_target"] for m in report["methods"]} == expected
        assert all(m["error"] is None for m in report["methods"])


def test_interleaved_warms_up_untimed_then_rotates_the_order(monkeypatch):
    from dflash_lite.decoding import timing

    clock = [0.0]                                     # a clock that only the runs move: a runs 1 s, b 2 s, c 3 s
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    calls = []

    def run(name):
        calls.append(name)
        clock[0] += "abc".index(name) + 1
        return name.upper()

    timed = timing.interleaved({name: (lambda name=name: run(name)) for name in "abc"}, repeats=3, warmup=1)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")   # warm-up, then rotated rounds
    assert timed == {name: [("abc".index(name) + 1.0, name.upper())] * 3 for name in "abc"}   # each run's own time


# ----------------------------------------------------------------------------- bench = resolve -> run -> report
def test_bench_options_are_one_checked_config():
    config = BenchConfig(num_prompts=2, block_sizes=[8, 4], prompt_template="Q: {prompt}\\nA:")
    assert config.check() is config and config.block_sizes == (8, 4) and config.prompt_template == "Q: {prompt}\nA:"
    with pytest.raises(TypeError):
        BenchConfig(no_such_option=1)
    for bad, message in (({"repeats": 0}, "repeats"), ({"prompts": "a.jsonl", "dataset": "gsm8k"}, "not both"),
                         ({"prompt_template": "no slot"}, "must contain")):
        with pytest.raises(ValueError, match=message):
            BenchConfig(**bad).check()


def test_resolve_run_report_in_steps(tmp_path, capsys):
    from dflash_lite.measuring.benchmark import report, resolve, run

    setup = resolve(BenchConfig(domain="math", num_prompts=1, max_new_tokens=6, block_sizes=(4,), tree_sizes=(),
                                hf_dflash=False, baselines=False, repeats=1, cost_repeats=1,
                                json_out=str(tmp_path / "r.json")))
    assert [m.kind for m in setup.methods][:2] == [Kind.AUTOREGRESSIVE, Kind.HF_GENERATE]
    assert setup.settings["prompts_source"] == "built-in held-out math"
    out = report(setup, run(setup))
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(out))
    assert row_of(out, Kind.AUTOREGRESSIVE)["speedup"] == 1.0 and row_of(out, Kind.DFLASH, block_size=4)["tau"]
    assert [r["kind"] for r in out["cost_model"]["rows"]] == ["dflash"]
    assert "vs generate" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the CLI's defaults are the configs'
def test_every_cli_default_is_the_config_dataclass_default():
    from dflash_lite import zoo
    from dflash_lite.cli import DemoConfig, build_parser
    from dflash_lite.measuring.model_card import DrafterCardConfig
    from dflash_lite.training.train import DrafterTrainConfig

    commands = build_parser().commands
    zoo_commands = zoo.build_parser()
    cases = ((commands["demo"], [], set(), DemoConfig()), (commands["bench"], [], set(), BenchConfig()),
             (commands["train"], ["--out", "x"], {"out"}, DrafterTrainConfig(out="x")),
             (zoo_commands, ["train-target", "--out", "x"], {"out"}, zoo.TargetTrainConfig(out="x")),
             (zoo_commands, ["drafter-card", "x"], {"path"}, DrafterCardConfig(path="x")))
    for parser, argv, given, fresh in cases:
        parsed = vars(parser.parse_args(argv))
        parsed.pop("command", None)
        type(fresh)(**parsed)                       # the parsed options build the config
        assert len(parsed) > 2
        for name in parsed.keys() - given:          # every option not given has the field's default
            value = parsed[name]                    # (argparse puts a string default through the type)
            value = os.fspath(value) if isinstance(value, os.PathLike) else value
            assert value == getattr(fresh, name), (type(fresh).__name__, name)


def test_train_and_draft_model_share_one_config():
    from dflash_lite.decoding.drafter import Conditioning, Drafting
    from dflash_lite.training.train import DrafterTrainConfig

    c = DrafterTrainConfig(drafting="draft-model", conditioning="none").check()
    assert c.drafting is Drafting.DRAFT_MODEL and c.conditioning is Conditioning.NONE
    with pytest.raises(ValueError, match="drafting must be one of block, autoregressive, draft-model"):
        DrafterTrainConfig(drafting="diffusion").check()
    with pytest.raises(ValueError, match="draft model uses the built-in prompts"):
        DrafterTrainConfig(drafting="draft-model", prompts="p.jsonl").check()


def test_cli_help_shows_the_config_defaults():
    from dflash_lite.cli import build_parser

    text = " ".join(build_parser().commands["bench"].format_help().split())
    assert "--num-prompts NUM_PROMPTS default: 8" in text and "(default: 16,32,64)" in text
    assert "e.g. 4,8,16 (default: 16)" in text


def test_an_option_the_config_lacks_is_refused_when_the_parser_is_built():
    from dataclasses import dataclass

    from dflash_lite.cli import Options, Parser

    @dataclass
    class Config:
        size: int = 3
        flag: bool = True
        where: str | None = None

    ok = Options(Parser(prog="x"), Config)
    ok.add("--size", type=int)
    ok.add("--no-flag", dest="flag", action="store_false")
    assert vars(ok.parser.parse_args([])) == {"size": 3, "flag": True}
    for flags, kwargs in ((("--colour",), {}),                          # not a field of the config
                          (("--flag",), {"action": "store_true"})):    # a switch that changes nothing
        with pytest.raises(TypeError):
            Options(Parser(prog="x"), Config).add(*flags, **kwargs)


def test_figures_name_the_cpu_model_as_the_chapters_clock_does(report):
    from dflash_lite.course.commands import hardware
    from dflash_lite.measuring.plotting import hardware_label

    if report["env"].get("gpu") is None:          # a report measured here names this CPU
        assert hardware_label(report["env"]) == hardware()
    # an older report, without the model name, still gets a label
    assert hardware_label({"machine": "x86_64", "threads": 2}) == "CPU x86_64, 2 threads"
    assert hardware_label({"cpu": "Some CPU", "machine": "x86_64", "threads": 4}) == \
        "CPU Some CPU, 4 threads"


def test_paired_ratio_tells_a_slower_run_from_the_noise_of_the_rounds():
    import numpy as np
    from dflash_lite.measuring.harness import paired_ratio
    noise = np.random.default_rng(0)
    plain = 1.0 + 0.05 * noise.standard_normal(21)           # a noisy machine: 5% from round to round
    again = plain * (1 + 0.02 * noise.standard_normal(21))  # the same work timed again
    slower = plain * 1.04 * (1 + 0.02 * noise.standard_normal(21))
    tie, loss = paired_ratio(plain, again), paired_ratio(plain, slower)
    assert not tie.slower() and tie.low < 1 < tie.high
    assert loss.slower() and loss.high < 1 and loss.low < loss.median < loss.high
    assert abs(loss.median - 1 / 1.04) < 0.01
    assert paired_ratio(slower, plain).p_slower > 0.5       # the other way round: it is the faster
    assert str(loss).startswith(f"{loss.median:.3f}x (95% interval")
    for reference, other in (([1.0, 2.0], [1.0]), ([1.0], [1.0]), ([1.0, -1.0], [1.0, 1.0]),
                             ([1.0, float("nan")], [1.0, 1.0])):
        with pytest.raises(ValueError, match="a paired ratio needs two equal-length lists"):
            paired_ratio(reference, other)
    with pytest.raises(ValueError, match="confidence must be in"):
        paired_ratio(plain, again, confidence=1)
    assert paired_ratio([1.0, 2.0], [1.0, 2.0]).p_slower == 1.0          # every round a tie
