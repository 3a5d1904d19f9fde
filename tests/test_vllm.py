"""vLLM serves the exported drafter as this project's loop decodes it (tools/vllm_check.py, README
"Serve it with vLLM"): on built-in math and code prompts, at batch 1 and 4, vLLM's greedy tokens
with the exported drafter equal ours, and the tokens kept per verify step are within 2% of ours
(tau as each engine counts it, within 5%: vLLM always drafts 15 and counts what it accepts past a
stop or the budget).

It needs vLLM's CPU build in its own venv (``bash tools/vllm_venv.sh``, then
``DFLASH_VLLM_PYTHON=<that venv>/bin/python``); without it the check is skipped with one line.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "vllm_check.py"


def _check_module():
    spec = importlib.util.spec_from_file_location("vllm_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.vllm
def test_vllm_decodes_the_exported_drafter_as_ours(tmp_path):
    python = os.environ.get("DFLASH_VLLM_PYTHON")
    if not python:
        pytest.skip("no vLLM interpreter: set DFLASH_VLLM_PYTHON (bash tools/vllm_venv.sh)")
    check = _check_module()
    from dflash_lite import load_pretrained
    from dflash_lite.decoding.target import default_drafter_path

    _, tokenizer = load_pretrained("tiny")
    ids, domains = check.check_prompts(tokenizer, 3, 3)
    assert domains == ["math"] * 3 + ["code"] * 3
    with open(tmp_path / "vllm.log", "w") as log:
        got = check.compare(check.vllm_python(python), "tiny", default_drafter_path("tiny"),
                            "float32", ["dflash"], [1, 4], ids, 64, 0, 0, tmp_path, log,
                            progress=None)
    rows = got["rows"]
    assert [r["batch_size"] for r in rows] == [1, 4]
    for r in rows:
        assert r["identical"], (r["batch_size"], r["first_difference"])
        assert r["vllm_drafts"] > 0 and r["tau_ours"] > 1
        # tokens kept per verify step, counted alike on both sides (tools/vllm_check.py)
        assert abs(r["kept_gap"]) <= 0.02, (r["kept_per_step_ours"], r["kept_per_step_vllm"])
        assert abs(r["tau_gap"]) <= 0.05, (r["tau_ours"], r["tau_vllm"])


def test_the_check_names_a_missing_vllm_interpreter_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DFLASH_VLLM_PYTHON"}
    env["OMP_NUM_THREADS"] = "1"
    for given in ([], ["--vllm-python", str(tmp_path / "nowhere" / "python")]):
        out = subprocess.run([sys.executable, str(SCRIPT), *given], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=300)
        assert out.returncode == 2, out.stderr[-2000:]
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vllm_check: "), out.stderr[-2000:]
        assert ("DFLASH_VLLM_PYTHON" in lines[0]) if not given else ("nowhere" in lines[0])
