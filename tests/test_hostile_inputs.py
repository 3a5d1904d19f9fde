"""Well-formed but hostile inputs (issue 24): a planted remote-code module never runs, configs and
checkpoints are checked before anything is built, and every refusal is one line (README, "Safety")."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_lite.target import SHIPPED, LoadError, load_pretrained

ROOT = Path(__file__).resolve().parents[1]
EVIL_MODULE = '''
from pathlib import Path
Path(__file__).with_name("PWNED").write_text("the planted code ran")
from transformers import PretrainedConfig
class EvilConfig(PretrainedConfig):
    model_type = "evil"
'''


def plant_remote_code(folder: Path, model_type: str) -> Path:
    """``folder`` holds a config whose auto_map points at a module that writes PWNED when imported."""
    raw = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else {}
    raw.update(model_type=model_type, auto_map={"AutoConfig": "evil_config.EvilConfig",
                                                "AutoModelForCausalLM": "evil_config.EvilConfig"})
    (folder / "config.json").write_text(json.dumps(raw))
    (folder / "evil_config.py").write_text(EVIL_MODULE)
    return folder / "PWNED"


def run_module(*argv, stdin="y\ny\ny\n", timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", *argv], input=stdin, capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture
def tiny_copy(tmp_path):
    """A copy of the shipped target, to plant things in."""
    return Path(shutil.copytree(SHIPPED["tiny"], tmp_path / "tiny"))


@pytest.mark.parametrize("model_type", ["evil", "qwen3"])
def test_a_planted_auto_map_module_never_runs(tiny_copy, model_type, monkeypatch):
    import io
    pwned = plant_remote_code(tiny_copy, model_type)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 5))       # someone answers "y" to any prompt
    if model_type == "evil":
        with pytest.raises(LoadError, match="model_type 'evil' is not supported"):
            load_pretrained(tiny_copy)
    else:                                        # a supported type loads with the local class, not the planted one
        model, _ = load_pretrained(tiny_copy)
        assert type(model).__name__ == "Qwen3ForCausalLM"
    assert not pwned.exists()


@pytest.mark.slow
def test_a_planted_auto_map_module_never_runs_from_the_command_line(tiny_copy):
    pwned = plant_remote_code(tiny_copy, "evil")
    done = run_module("dflash_lite", "demo", "--target", tiny_copy)
    assert done.returncode == 2 and "not supported" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not pwned.exists()
    done = run_module("dflash_lite", "bench", "--target", tiny_copy, "--no-baselines", "--random-drafter-layers", "1")
    assert done.returncode == 2 and "not supported" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not pwned.exists()
