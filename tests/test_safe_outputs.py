"""Safe outputs (issue 24; README, "Safety"): --out is checked and locked before any work, only a
directory this project wrote is replaced, the old run is deleted only after the new one finished,
and a full disk is one line that leaves nothing blocking the rerun. Destructive cases run on copies
in tmp_path, with shutil.rmtree watched."""
import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import SafetensorError

import dflash_lite
from dflash_lite import outputs
from dflash_lite.training import train as train_module
from dflash_lite.training import trainer as trainer_module
from dflash_lite.decoding.target import SHIPPED_DRAFTERS
from test_bad_input_cli import FAST_TRAIN, fast_training, no_work, run_cli, snapshot, the_line  # noqa: F401

PACKAGE = Path(dflash_lite.__file__).parent


@pytest.fixture
def no_rmtree(monkeypatch):
    """Fails the test if anything is deleted."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"rmtree{args} was called")
    monkeypatch.setattr(shutil, "rmtree", refuse)


def marked_run(folder: Path) -> Path:
    """A finished-looking run that this project wrote: the shipped drafter with the marker."""
    shutil.copytree(SHIPPED_DRAFTERS["tiny"], folder)
    (folder / outputs.MARKER).write_text("{}")
    return folder


REFUSED = [("/usr", "system folder /usr"), ("/etc", "system folder /etc"), ("/opt", "system folder /opt"),
           ("/usr/lib/x", "inside the system folder /usr"), ("~/.cache", "~/.cache"), ("~", "home directory"),
           ("/", "root directory"), (".", "working directory"), ("..", "holds the working directory"),
           (str(PACKAGE), "package"), (str(PACKAGE / "models"), "inside the dflash_lite package"),
           (str(PACKAGE / "models" / "tiny"), "inside the dflash_lite package")]


@pytest.mark.parametrize("overwrite", [True, False])
@pytest.mark.parametrize("out, why", REFUSED)
def test_a_refused_place_is_named_and_nothing_is_touched(capsys, no_work, no_rmtree, out, why, overwrite):
    out = os.path.expanduser(out)
    code, _, err = run_cli(capsys, "train", "--out", out, *(["--overwrite"] if overwrite else []), *FAST_TRAIN)
    line = the_line(err)
    if code == 2 and "cannot be written" in line:         # no write permission here: refused all the same
        return
    assert code == 2 and why in line and repr(out) in line, line


def test_overwrite_refuses_a_directory_without_the_marker(capsys, tmp_path, no_work, no_rmtree):
    out = tmp_path / "mine"
    shutil.copytree(SHIPPED_DRAFTERS["tiny"], out)
    before = snapshot(out)
    code, _, err = run_cli(capsys, "train", "--out", out, "--overwrite", *FAST_TRAIN)
    line = the_line(err)
    assert code == 2 and outputs.MARKER in line and "not written by dflash-lite" in line
    assert snapshot(out) == before


def test_overwrite_refuses_a_symlink(capsys, tmp_path, no_work, no_rmtree):
    real = marked_run(tmp_path / "real")
    link = tmp_path / "link"
    link.symlink_to(real)
    before = snapshot(real)
    code, _, err = run_cli(capsys, "train", "--out", link, "--overwrite", *FAST_TRAIN)
    assert code == 2 and "symbolic link" in the_line(err)
    assert snapshot(real) == before and link.is_symlink()


@pytest.mark.parametrize("bad", [["--target", "/typo"], ["--prompts", "{tmp}/missing.jsonl"],
                                 ["--dtype", "float16", "--device", "cuda:99"]])
def test_overwrite_with_a_bad_argument_keeps_the_old_run(capsys, tmp_path, no_rmtree, bad):
    out = marked_run(tmp_path / "run")
    before = snapshot(out)
    bad = [b.replace("{tmp}", str(tmp_path)) for b in bad]
    code, _, err = run_cli(capsys, "train", "--out", out, "--overwrite", *FAST_TRAIN, *bad)
    assert code == 2 and the_line(err)
    assert snapshot(out) == before


def test_overwrite_keeps_the_old_run_when_training_fails(capsys, tmp_path, fast_training, monkeypatch):
    out = marked_run(tmp_path / "run")
    before = snapshot(out)

    def broken(*args):
        raise ValueError("the loss broke")
    monkeypatch.setattr(train_module, "drafter_loss", broken)
    code, _, err = run_cli(capsys, "train", "--out", out, "--overwrite", "--cache-dir", tmp_path / "c", *FAST_TRAIN)
    assert code == 2 and "the loss broke" in the_line(err)
    assert snapshot(out) == before


def test_overwrite_swaps_after_success_and_resumes_an_interrupted_replacement(capsys, tmp_path, fast_training,
                                                                               monkeypatch):
    import signal
    out = marked_run(tmp_path / "run")
    before = snapshot(out)
    calls = []
    real_loss = train_module.drafter_loss

    def interrupted_loss(*args):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real_loss(*args)
    monkeypatch.setattr(train_module, "drafter_loss", interrupted_loss)
    argv = ["train", "--out", out, "--overwrite", "--cache-dir", tmp_path / "c", *FAST_TRAIN]
    code, _, err = run_cli(capsys, *argv)
    assert code == 130 and "checkpoint saved" in err and "run the same command again" in err
    assert snapshot(out) == before                                   # the old run is still whole
    monkeypatch.setattr(train_module, "drafter_loss", real_loss)
    code, _, err = run_cli(capsys, *argv)                            # the same command resumes the new run
    assert code == 0 and "Traceback" not in err
    curve = json.loads((out / "training_curve.json").read_text())
    assert [h["step"] for h in curve["curve"]][-1] == 2 and not (out / "MODEL_CARD.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]      # no staging, old copy or lock left


def test_a_second_run_into_the_same_out_is_refused_while_the_first_holds_it(capsys, tmp_path, no_work):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\ntime.sleep(60)", str(outputs.lock_path(out))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = run_cli(capsys, "train", "--out", out, *FAST_TRAIN)
        line = the_line(err)
        assert code == 2 and "being written by another run" in line
    finally:
        holder.kill()
        holder.wait()
    assert not out.exists()


@pytest.mark.parametrize("failure", ["safetensors", "oserror"])
def test_a_full_disk_is_one_line_and_the_rerun_is_not_blocked(capsys, tmp_path, fast_training, monkeypatch, failure):
    out = tmp_path / "run"
    real_save = trainer_module.save_file

    def full(*args, **kwargs):
        if failure == "safetensors":
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                  'message: "No space left on device" })')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(args[1]))
    monkeypatch.setattr(trainer_module, "save_file", full)
    argv = ["train", "--out", out, "--cache-dir", tmp_path / "c", *FAST_TRAIN]
    code, _, err = run_cli(capsys, *argv)
    assert code == 1 and "No space left on device" in the_line(err)
    assert outputs.holds_nothing(out) and not (out / "checkpoint").exists()
    monkeypatch.setattr(trainer_module, "save_file", real_save)
    code, _, err = run_cli(capsys, *argv)
    assert code == 0 and (out / "drafter.safetensors").is_file()


def test_a_full_disk_for_json_is_one_line(capsys, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "r.json"))
    monkeypatch.setattr("dflash_lite.measuring.benchmark.resolve", full)
    code, _, err = run_cli(capsys, "bench", "--json", tmp_path / "r.json")
    assert code == 1 and "No space left on device" in the_line(err)


def test_an_unexpected_error_keeps_its_traceback(monkeypatch):
    def bug(*args, **kwargs):
        raise KeyError("a bug")
    monkeypatch.setattr("dflash_lite.measuring.benchmark.resolve", bug)
    with pytest.raises(KeyError):
        dflash_lite.cli.main(["bench"])


def test_every_run_directory_holds_the_marker(capsys, tmp_path, fast_training):
    out = tmp_path / "run"
    code, _, _ = run_cli(capsys, "train", "--out", out, "--cache-dir", tmp_path / "c", *FAST_TRAIN)
    assert code == 0 and outputs.is_marked(out)
