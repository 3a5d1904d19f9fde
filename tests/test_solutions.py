"""The worked solutions in notebooks/solutions/ run, and every exercise check they call passes.

Each solution script asserts that its checks return True, so a check that stops accepting the
right answer (or a solution that stops being right) fails here.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.py"))


def test_every_notebook_with_exercises_has_solutions():
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py")
                 if "dflash_lite.exercises" in p.read_text()}
    assert notebooks <= {p.stem for p in SOLUTIONS}, f"missing solutions: {sorted(notebooks - {p.stem for p in SOLUTIONS})}"


@pytest.mark.parametrize("script", SOLUTIONS, ids=lambda p: p.stem)
def test_solution_lines_fit_100_columns(script):
    long = [n for n, line in enumerate(script.read_text().splitlines(), 1) if len(line) > 100]
    assert not long, f"{script.name}: lines over 100 columns: {long}"


@pytest.mark.slow
@pytest.mark.parametrize("script", SOLUTIONS, ids=lambda p: p.stem)
def test_solution_runs_and_checks_pass(script, tmp_path):
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    checked = run.stdout.count(": correct.")
    assert checked >= 1 and "not attempted" not in run.stdout, run.stdout[-2000:]
