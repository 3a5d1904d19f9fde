"""Bad input to the command line and the Python API: one line, the right exit code,
no traceback, no work done, and no file changed that should not change (README, "Safety")."""
import json
import os
import re
import shutil
import signal
from pathlib import Path

import pytest
import torch

import dflash_lite
from dflash_lite.training import train as train_module
from dflash_lite.cli import main
from dflash_lite.outputs import MARKER
from dflash_lite.decoding.target import SHIPPED_DRAFTERS

PACKAGE = Path(dflash_lite.__file__).parent
FAST_TRAIN = ["--steps", "2", "--num-math", "4", "--num-code", "0", "--max-new-tokens", "16", "--batch-size", "2",
              "--layers", "1", "--block-size", "4", "--num-anchors", "2", "--eval-every", "0"]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:              # argparse exits itself
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


PROGRESS_BAR = re.compile(r"\d+/\d+ \[|it/s\]|s/it\]")


def the_line(err: str) -> str:
    """The one line of a message: no traceback, nothing else on stderr but progress bars."""
    assert "Traceback" not in err
    lines = [line for line in re.split(r"[\r\n]", err) if line.strip() and not PROGRESS_BAR.search(line)]
    assert len(lines) == 1, err
    return lines[0]


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


@pytest.fixture
def no_work(monkeypatch):
    """Fails the test if a model is loaded: the error must come before any work."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")
    for module in ("decoding.target", "decoding.checkpoints", "measuring.benchmark",
                   "training.train"):                    # every module that loads a target
        monkeypatch.setattr(f"dflash_lite.{module}.load_pretrained", refuse)


@pytest.fixture
def fast_training(monkeypatch, tiny):
    """Training without the slow parts that these tests are not about: a few fixed regenerated
    sequences and a constant tau probe; loading, the trainer, checkpoints and files are real."""
    _, tokenizer = tiny
    text = "Question: Ann has 3 pens and buys 4 more. How many pens does Ann have?\nAnswer: 3 + 4 = 7. The answer is 7."
    ids = tokenizer(text, add_special_tokens=False).input_ids
    data = train_module.RegeneratedData([ids] * 4, [16] * 4)
    monkeypatch.setattr(train_module, "regenerate", lambda *args, **kwargs: data)
    monkeypatch.setattr(train_module, "tau_probe",
                        lambda *args, **kwargs: lambda drafter, block_size=None: {"math": 1.0, "code": 1.0, "all": 1.0})


# ----------------------------------------------------------------------------- usage errors: exit 2, before any work
NO_CUDA_DEVICE = "cuda" if not torch.cuda.is_available() else "cuda:99"
USAGE_ERRORS = [
    (["bench", "--block-sizes", "0,16"], "--block-sizes"),
    (["bench", "--block-sizes", "-4"], "--block-sizes"),
    (["bench", "--block-sizes", "abc"], "--block-sizes"),
    (["bench", "--num-prompts", "0"], "--num-prompts"),
    (["bench", "--repeats", "0"], "--repeats"),
    (["bench", "--batch-sizes", "2,2"], "--batch-sizes"),
    (["bench", "--block-sizes", "4,16,4"], "--block-sizes"),
    (["bench", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["bench", "--temperature", "nan"], "--temperature"),
    (["bench", "--json", "{tmp}/a_file/out.json"], "--json"),
    (["bench", "--json", "{tmp}"], "--json"),
    (["demo", "--repeats", "0"], "--repeats"),
    (["demo", "--device", NO_CUDA_DEVICE], "--device"),
    (["demo", "--device", "banana"], "--device"),
    (["demo", "--max-new-tokens", "2.5"], "--max-new-tokens"),
    (["demo", "--top-p", "1.5"], "--top-p"),
    (["train", "--out", "{tmp}/a_file"], "--out"),
    (["train", "--out", ""], "--out"),
    (["train", "--out", "{tmp}/new", "--num-math", "0", "--num-code", "0"], "num_math"),
    (["train", "--out", "{tmp}/new", "--steps", "0"], "--steps"),
    (["train", "--out", "{tmp}/new", "--layers", "0"], "--layers"),
    (["train", "--out", "{tmp}/new", "--batch-size", "0"], "--batch-size"),
    (["train", "--out", "{tmp}/new", "--block-size", "1"], "--block-size"),
    (["train", "--out", "{tmp}/new", "--lr", "-1"], "--lr"),
    (["train", "--out", "{tmp}/new", "--cache-dir", "{tmp}/a_file"], "--cache-dir"),
]


@pytest.mark.parametrize("argv,names", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_error_is_one_line_exit_2_before_any_work(capsys, tmp_path, no_work, argv, names):
    (tmp_path / "a_file").write_text("mine")
    before = snapshot(tmp_path)
    code, out, err = run_cli(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    line = the_line(err)
    assert code == 2 and names in line and "error" in line and out == ""
    assert re.search(r"must be|cannot|not available|is a directory|existing file|nothing to train", line), line
    assert snapshot(tmp_path) == before


def test_output_paths_that_can_be_written_are_accepted(tmp_path):
    from dflash_lite.validate import check_output_dir, check_output_file
    (tmp_path / "old.json").write_text("{}")
    assert check_output_file(tmp_path / "old.json") == tmp_path / "old.json"        # replacing a report is fine
    assert check_output_file(tmp_path / "new" / "deeper" / "r.json").name == "r.json"
    assert check_output_dir(tmp_path) == tmp_path and check_output_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]              # checking creates nothing


def test_a_non_utf8_prompts_file_is_named(capsys, tmp_path, no_work):
    bad = tmp_path / "prompts.jsonl"
    bad.write_bytes(b'{"prompt": "caf\xe9"}\n')
    code, _, err = run_cli(capsys, "bench", "--prompts", bad)
    assert code == 2 and str(bad) in the_line(err) and "UTF-8" in the_line(err)


# ----------------------------------------------------------------------------- checkpoints never run code
def test_a_planted_old_checkpoint_is_never_loaded_by_train(capsys, planted, no_work):
    run, marker = planted
    before = snapshot(run)
    code, _, err = run_cli(capsys, "train", "--out", run, *FAST_TRAIN)
    line = the_line(err)
    assert code == 2 and "never loaded" in line and "--overwrite" in line
    assert not marker.exists() and snapshot(run) == before


def test_the_package_has_no_unsafe_load():
    sources = {p: p.read_text() for p in PACKAGE.rglob("*.py")}
    assert len(sources) > 10
    for path, text in sources.items():
        for unsafe in ("pickle", "weights_only", "torch.load"):
            assert unsafe not in text, f"{path.name} mentions {unsafe}"
        assert not re.search(r"trust_remote_code\s*=\s*(?!False\b)", text), f"{path.name} may trust remote code"
        calls = len(re.findall(r"\bAuto\w+\.from_pretrained\(", text))
        assert text.count("trust_remote_code=False") >= calls, f"{path.name}: an Auto* call without trust_remote_code=False"


# ----------------------------------------------------------------------------- train --out: only what it wrote
def test_train_refuses_a_drafter_directory_it_did_not_write(capsys, tmp_path, no_work):
    copy = tmp_path / "tiny-dflash"
    shutil.copytree(SHIPPED_DRAFTERS["tiny"], copy)
    before = snapshot(copy)
    code, _, err = run_cli(capsys, "train", "--out", copy, *FAST_TRAIN)
    assert code == 2 and "not empty" in the_line(err) and "--overwrite" in the_line(err)
    assert snapshot(copy) == before


@pytest.mark.slow
def test_train_overwrite_replaces_the_directory_then_resumes_only_the_same_run(capsys, tmp_path, fast_training):
    out = tmp_path / "tiny-dflash"
    shutil.copytree(SHIPPED_DRAFTERS["tiny"], out)
    (out / MARKER).write_text("{}")                     # as if this project had written it
    assert (out / "MODEL_CARD.md").is_file()
    code, _, err = run_cli(capsys, "train", "--out", out, "--overwrite", "--cache-dir", tmp_path / "cache", *FAST_TRAIN)
    assert code == 0 and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "checkpoint", "drafter.safetensors", "drafter_config.json",
                                                     "training_curve.json"]         # no stale card survives
    assert json.loads((out / "training_curve.json").read_text())["training"]["steps"] == 2
    trained = snapshot(out)

    for flag, value, name in (("--layers", "2", "layers"), ("--block-size", "8", "block_size")):
        argv = list(FAST_TRAIN)
        argv[argv.index(flag) + 1] = value
        code, _, err = run_cli(capsys, "train", "--out", out, "--cache-dir", tmp_path / "cache", *argv)
        line = the_line(err)
        assert code == 2 and f"{name}=" in line and "--overwrite" in line
        assert snapshot(out) == trained

    # the same settings with more steps: resumes at step 2 and trains on
    argv = list(FAST_TRAIN)
    argv[argv.index("--steps") + 1] = "3"
    code, _, err = run_cli(capsys, "train", "--out", out, "--cache-dir", tmp_path / "cache", *argv)
    assert code == 0 and "Traceback" not in err
    curve = json.loads((out / "training_curve.json").read_text())
    assert curve["training"]["steps"] == 3 and [h["step"] for h in curve["curve"]] == [2, 3]


@pytest.mark.slow
def test_ctrl_c_during_training_saves_says_how_to_resume_and_exits_130(capsys, tmp_path, fast_training, monkeypatch):
    calls = []
    real_loss = train_module.drafter_loss

    def interrupted_loss(*args):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)              # a real Ctrl-C, in the middle of step 2
        return real_loss(*args)

    monkeypatch.setattr(train_module, "drafter_loss", interrupted_loss)
    handler = signal.getsignal(signal.SIGINT)
    out = tmp_path / "run"
    argv = list(FAST_TRAIN)
    argv[argv.index("--steps") + 1] = "50"
    code, _, err = run_cli(capsys, "train", "--out", out, "--cache-dir", tmp_path / "cache", *argv)
    assert code == 130 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: stopped at step 2; checkpoint saved") and "run the same command again" in last
    meta, _ = train_module.read_checkpoint(out / "checkpoint" / train_module.CHECKPOINT)
    assert meta["step"] == 2
    assert not (out / "drafter.safetensors").exists()                 # no drafter that looks finished
    assert signal.getsignal(signal.SIGINT) is handler                 # the trainer's handler is gone again


@pytest.mark.slow
def test_ctrl_c_during_regeneration_leaves_no_cache_and_exits_130(capsys, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(train_module, "regenerate", interrupted)
    code, _, err = run_cli(capsys, "train", "--out", tmp_path / "run", "--cache-dir", tmp_path / "cache", *FAST_TRAIN)
    line = the_line(err)
    assert code == 130 and line.startswith("interrupted: nothing new was saved")
    assert not (tmp_path / "run").exists() and not list(tmp_path.glob("cache/*"))


@pytest.mark.slow
def test_a_corrupt_regeneration_cache_is_named_and_rebuilt(tiny, tmp_path, capsys):
    target, tokenizer = tiny
    prompts = ["Question: 2 + 2?\nAnswer:", "def add(a, b):"]
    first = train_module.regenerate(target, tokenizer, prompts, 4, cache_dir=tmp_path)
    [cache] = list(tmp_path.glob("regenerated-*.json"))
    cache.write_text(cache.read_text()[:20])                          # truncated
    capsys.readouterr()
    again = train_module.regenerate(target, tokenizer, prompts, 4, cache_dir=tmp_path)
    out = capsys.readouterr().out
    assert str(cache) in out and "rebuilding" in out
    assert again.sequences == first.sequences and json.loads(cache.read_text())["complete"]
    assert list(tmp_path.iterdir()) == [cache]                         # no temporary file left behind


# ----------------------------------------------------------------------------- bench: honest edges
def test_a_prompt_longer_than_the_context_is_refused_up_front(capsys, tmp_path):
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"prompt": "x " * 6000}) + "\n")
    code, out, err = run_cli(capsys, "bench", "--prompts", prompts, "--json", tmp_path / "out.json")
    line = the_line(err)
    assert code == 2 and "prompt 1" in line and "context" in line and out == ""
    assert not (tmp_path / "out.json").exists()


def test_bench_exits_nonzero_when_every_dflash_method_failed_and_keeps_unrelated_files(capsys, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("drafter exploded")
    monkeypatch.setattr("dflash_lite.measuring.methods.DFlashProposer", broken)
    monkeypatch.setattr("dflash_lite.decoding.session.CostAwareProposer", broken)      # the default row
    monkeypatch.setattr("dflash_lite.measuring.methods.DFlashTreeProposer", broken)  # the tree rows
    monkeypatch.setattr("dflash_lite.measuring.methods.HybridTreeProposer", broken)  # the hybrid tree rows
    (tmp_path / "keep.tmp").write_text("the user's own file")
    code, out, err = run_cli(capsys, "bench", "--num-prompts", "1", "--max-new-tokens", "4", "--repeats", "1",
                             "--cost-repeats", "1", "--block-sizes", "4", "--no-baselines", "--no-hf-dflash",
                             "--json", tmp_path / "keep.json")
    line = the_line(err)
    assert code == 1 and "every DFlash method failed" in line and "drafter exploded" in line
    assert "failed: RuntimeError" in out
    assert (tmp_path / "keep.tmp").read_text() == "the user's own file"
    assert json.loads((tmp_path / "keep.json").read_text())["methods"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json", "keep.tmp"]


# ----------------------------------------------------------------------------- the Python API: the same checks
def test_export_onto_an_existing_file_is_one_line(tmp_path, random_drafter):
    from dflash_lite.decoding.checkpoints import export_dflash
    target = tmp_path / "taken"
    target.write_text("mine")
    with pytest.raises(ValueError, match="existing file") as info:
        export_dflash(random_drafter, target)
    assert "\n" not in str(info.value) and target.read_text() == "mine"


def test_bench_api_uses_the_same_checks(no_work):
    from dflash_lite.measuring.benchmark import bench
    with pytest.raises(ValueError, match="block_sizes must be an integer >= 1, got 0"):
        bench(block_sizes=(0, 16))
    with pytest.raises(ValueError, match=r"repeats must be an integer in 1\.\.1000"):
        bench(repeats=0)
