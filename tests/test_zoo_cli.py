"""The zoo's command line (issue 24): --out is required and never the package, bad arguments are one
line before any work, and a trained target is written beside --out and renamed into place whole."""
import shutil
from pathlib import Path

import pytest

import dflash_lite
from dflash_lite import outputs, zoo
from test_bad_input_cli import snapshot, the_line

PACKAGE = Path(dflash_lite.__file__).parent


def run_zoo(capsys, *argv):
    try:
        code = zoo.main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("work started before the bad input was refused")
    monkeypatch.setattr(zoo, "train_tokenizer", refuse)
    monkeypatch.setattr("dflash_lite.measuring.model_card.load_pretrained", refuse)
    monkeypatch.setattr("dflash_lite.measuring.benchmark.resolve", refuse)


BAD = [
    (["train-target"], "--out"),
    (["train-target", "--out", "{tmp}/t", "--steps", "-3", "--device", "foo"], "--steps"),
    (["train-target", "--out", "{tmp}/t", "--device", "foo"], "--device"),
    (["train-target", "--out", "{tmp}/t", "--seed", "99999999999999999999999"], "--seed"),
    (["train-target", "--out", "{tmp}/t", "--time-budget-s", "0"], "--time-budget-s"),
    (["train-target", "--out", "{tmp}/t", "--preset", "huge"], "--preset"),
    (["train-target", "--out", str(PACKAGE / "models" / "tiny")], "inside the dflash_lite package"),
    (["train-target", "--out", str(PACKAGE / "models" / "tiny"), "--overwrite"], "inside the dflash_lite package"),
    (["train-target", "--out", "{tmp}/full"], "not empty"),
    (["train-target", "--out", "{tmp}/full", "--overwrite"], "not written by dflash-lite"),
    (["card", "/nope"], "/nope"),
    (["card", "{tmp}/full"], "training_log.json"),
    (["drafter-card", "X", "--num-prompts", "0"], "--num-prompts"),
    (["drafter-card", "X", "--repeats", "-1"], "--repeats"),
    (["drafter-card", "{tmp}/full"], "training_curve.json"),
]


@pytest.mark.parametrize("argv, named", BAD)
def test_a_bad_zoo_argument_is_one_line_before_any_work(capsys, tmp_path, no_training, argv, named):
    full = tmp_path / "full"
    full.mkdir()
    (full / "config.json").write_text("{}")
    before = snapshot(PACKAGE / "models")
    code, _, err = run_zoo(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and named in the_line(err)
    assert snapshot(PACKAGE / "models") == before and (full / "config.json").read_text() == "{}"


def test_train_target_writes_beside_out_and_replaces_only_when_done(capsys, tmp_path, monkeypatch):
    out = tmp_path / "target"
    out.mkdir()
    (out / outputs.MARKER).write_text("{}")
    (out / "old.txt").write_text("the previous target")
    steps = []

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):                    # the work has begun: the old target is still whole
        steps.append(sorted(p.name for p in out.iterdir()))
        raise Stop
    monkeypatch.setattr(zoo, "train_tokenizer", stop)
    with pytest.raises(Stop):
        zoo.main(["train-target", "--out", str(out), "--overwrite", "--preset", "smoke", "--steps", "1"])
    assert steps == [[outputs.MARKER, "old.txt"]] and (out / "old.txt").is_file()


@pytest.mark.slow
def test_train_target_smoke_run_lands_whole_in_out(capsys, tmp_path):
    out = tmp_path / "target"
    code, _, err = run_zoo(capsys, "train-target", "--out", out, "--preset", "smoke", "--steps", "1", "--no-bf16")
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    assert {outputs.MARKER, "config.json", "model.safetensors", "tokenizer.json", "training_log.json"} <= set(names)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]          # no staging or lock left
    shutil.rmtree(out)
