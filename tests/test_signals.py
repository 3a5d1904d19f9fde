"""Ctrl-C and SIGTERM (issue 24; README, "Safety"): SIGTERM in train saves like Ctrl-C and exits 143
with the resume line; Ctrl-C during the imports, or twice in a row, is one line and exit 130."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_lite.training import train as train_module
from test_bad_input_cli import FAST_TRAIN, fast_training, run_cli  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


def signalled_training(monkeypatch, *signals_at_step_2):
    calls, real_loss = [], train_module.drafter_loss

    def loss(*args):
        calls.append(1)
        if len(calls) == 2:
            for signum in signals_at_step_2:
                os.kill(os.getpid(), signum)
        return real_loss(*args)
    monkeypatch.setattr(train_module, "drafter_loss", loss)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_training_saves_and_says_how_to_resume(capsys, tmp_path, fast_training, monkeypatch,
                                                               signum, code):
    signalled_training(monkeypatch, signum)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    argv = list(FAST_TRAIN)
    argv[argv.index("--steps") + 1] = "50"
    got, _, err = run_cli(capsys, "train", "--out", tmp_path / "run", "--cache-dir", tmp_path / "c", *argv)
    assert got == code and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: stopped at step 2; checkpoint saved") and "run the same command again" in last
    meta, _ = train_module.read_checkpoint(tmp_path / "run" / "checkpoint" / train_module.CHECKPOINT)
    assert meta["step"] == 2
    assert {s: signal.getsignal(s) for s in handlers} == handlers        # every handler is back


def test_two_ctrl_c_in_a_row_during_training_is_one_line_and_130(capsys, tmp_path, fast_training, monkeypatch):
    signalled_training(monkeypatch, signal.SIGINT, signal.SIGINT)
    argv = list(FAST_TRAIN)
    argv[argv.index("--steps") + 1] = "50"
    got, _, err = run_cli(capsys, "train", "--out", tmp_path / "run", "--cache-dir", tmp_path / "c", *argv)
    assert got == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("interrupted:")


def test_sigterm_outside_training_is_one_line_and_143(capsys, monkeypatch):
    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("SIGTERM did not stop the command")
    monkeypatch.setattr("dflash_lite.measuring.benchmark.resolve", terminated)
    got, _, err = run_cli(capsys, "bench")
    assert got == 143 and err.strip() == "interrupted: nothing was written"


@pytest.mark.slow
@pytest.mark.parametrize("signals_sent, delay", [((signal.SIGINT,), 0.3), ((signal.SIGINT,), 1.0),
                                                  ((signal.SIGINT, signal.SIGINT), 0.5),
                                                  ((signal.SIGTERM,), 0.5)])
def test_a_signal_while_importing_is_one_line(signals_sent, delay):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "dflash_lite", "demo", "--repeats", "0"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)                      # python is up and importing torch (seconds)
    for signum in signals_sent:
        process.send_signal(signum)
        time.sleep(0.05)
    _, err = process.communicate(timeout=120)
    expected = 143 if signals_sent[0] == signal.SIGTERM else 130
    assert process.returncode in (expected, 2), err           # 2: the imports had already finished
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
