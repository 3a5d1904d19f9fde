"""Well-formed but hostile inputs (issue 24): a planted remote-code module never runs, configs and
checkpoints are checked before anything is built, and every refusal is one line (README, "Safety")."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_lite.decoding.target import SHIPPED, LoadError, load_pretrained

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


# ----------------------------------------------------------------------------- one line for each hostile input
from test_bad_input_cli import FAST_TRAIN, no_work, run_cli, the_line  # noqa: E402, F401

from dflash_lite.training import trainer as trainer_module# noqa: E402
from dflash_lite.prompts import load_prompts  # noqa: E402
from dflash_lite.decoding.checkpoints import load_drafter  # noqa: E402
from dflash_lite.decoding.target import SHIPPED_DRAFTERS  # noqa: E402

PROMPT_FILES = [
    ('{"turns": 5}\n', "'turns' must be a list of strings"),
    ('{"turns": {"a": 1}}\n', "'turns' must be a list of strings"),
    ('{"turns": [3]}\n', "'turns' must be a list of strings"),
    ('{"prompt": "a\\ud800b"}\n', "lone surrogate"),
    ('{"nothing": 1}\n', "no 'prompt' or 'turns'"),
    ("not json\n", "not a JSON line"),
    (b'{"prompt": "caf\xe9"}\n', "not UTF-8"),
    ("DIRECTORY", "is a directory"),
    ("FIFO", "not a regular file"),
    ("MISSING", "no such prompts file"),
]


def prompts_file(tmp_path: Path, content) -> Path:
    path = tmp_path / "prompts.jsonl"
    if content == "DIRECTORY":
        path.mkdir()
    elif content == "FIFO":
        os.mkfifo(path)
    elif content == "MISSING":
        pass
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["bench", "train"])
@pytest.mark.parametrize("content, reason", PROMPT_FILES)
def test_a_hostile_prompts_file_is_one_line_naming_the_cause(capsys, tmp_path, no_work, command, content, reason):
    path = prompts_file(tmp_path, content)
    extra = ["--out", tmp_path / "run", *FAST_TRAIN] if command == "train" else []
    code, _, err = run_cli(capsys, command, "--prompts", path, *extra)
    line = the_line(err)
    assert code == 2 and reason in line and str(path) in line, line


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"prompt": "Hi"}\n{"turns": ["Bye", "x"]}\n')
    assert load_prompts(str(path)) == ["Hi", "Bye"]


DRAFTER_CONFIGS = [
    ({"intermediate_size": -5}, "intermediate_size"),
    ({"hidden_size": 1e5}, "hidden_size"),
    ({"num_layers": 1e6, "layer_types": None}, "bad drafter config"),
    ({"num_layers": 10 ** 6, "layer_types": None}, "parameters"),
    ({"num_layers": 3}, "layer_types"),
    ({"num_attention_heads": 0}, "num_attention_heads"),
]


@pytest.mark.parametrize("change, named", DRAFTER_CONFIGS)
def test_a_hostile_drafter_config_is_refused_before_building(tmp_path, monkeypatch, change, named):
    folder = Path(shutil.copytree(SHIPPED_DRAFTERS["tiny"], tmp_path / "drafter"))
    raw = json.loads((folder / "drafter_config.json").read_text())
    raw["config"].update(change)
    (folder / "drafter_config.json").write_text(json.dumps(raw))
    monkeypatch.setattr("dflash_lite.decoding.variants.make_drafter",
                        lambda config: pytest.fail("a drafter was built from a hostile config"))
    with pytest.raises(LoadError, match=named) as info:
        load_drafter(folder)
    assert "\n" not in str(info.value)


TARGET_CONFIGS = [
    ({"hidden_size": -1}, "hidden_size"),
    ({"num_hidden_layers": 10 ** 6, "layer_types": None}, "parameters"),
    ({"layer_types": ["full_attention"]}, "layer_types"),
    ({"vocab_size": "4096"}, "vocab_size"),
    ({"model_type": None}, "model_type None"),
]


@pytest.mark.parametrize("change, named", TARGET_CONFIGS)
def test_a_hostile_target_config_is_refused_before_transformers_sees_it(tiny_copy, monkeypatch, change, named):
    raw = json.loads((tiny_copy / "config.json").read_text())
    raw.update(change)
    (tiny_copy / "config.json").write_text(json.dumps(raw))
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained",
                        lambda *a, **k: pytest.fail("transformers was given a hostile config"))
    with pytest.raises(LoadError, match=named) as info:
        load_pretrained(tiny_copy)
    assert "\n" not in str(info.value)


def saved_checkpoint(folder: Path):
    import torch
    model = torch.nn.Linear(3, 2)
    batches = lambda: iter([torch.randn(4, 3) for _ in range(10)])
    loss = lambda m, x: (m(x).pow(2).mean(), {"loss": 0.0})
    trainer_module.Trainer(model, loss, batches, trainer_module.TrainConfig(steps=2, log_every=1),
                           checkpoint_dir=folder).run()
    return folder / trainer_module.CHECKPOINT


CHECKPOINT_META = [
    ({"step": "x"}, "'step' should be a int"),
    ({"step": 1e9}, "'step' should be a int"),
    ({"step": 10 ** 9}, "outside this run's schedule"),
    ({"step": -1}, "outside this run's schedule"),
    ({"optimizer_scalars": None}, "'optimizer_scalars'"),
    ({"history": {"a": 1}}, "'history'"),
    ({"param_groups": [1]}, "param_groups"),
]


@pytest.mark.parametrize("change, named", CHECKPOINT_META)
def test_hostile_checkpoint_metadata_is_one_line(tmp_path, change, named):
    import torch
    from safetensors.torch import load_file, save_file
    path = saved_checkpoint(tmp_path)
    meta, tensors = trainer_module.read_checkpoint(path)
    meta.update(change)
    meta = {k: v for k, v in meta.items() if v is not None}
    save_file(load_file(str(path)), str(path), metadata={"trainer": json.dumps(meta)})
    with pytest.raises(ValueError, match=named) as info:
        trainer_module.Trainer(torch.nn.Linear(3, 2), None, None, trainer_module.TrainConfig(steps=5),
                               checkpoint_dir=tmp_path)
    assert "\n" not in str(info.value)


ARGUMENTS = [
    (["demo", "--temperature", "1e-300"], "greedy"),
    (["bench", "--temperature", "1e-300"], "greedy"),
    (["demo", "--prompt", "caf\udce9"], "not valid text"),
    (["demo", "--prompt", "a\ud800"], "lone surrogate"),
    (["demo", "--seed", "99999999999999999999999"], "--seed"),
    (["train", "--out", "{tmp}/r", "--seed", "-99999999999999999999999"], "--seed"),
    (["bench", "--tree-sizes", "100000"], "tree_sizes"),
    (["bench", "--random-drafter-layers", "1", "--block-sizes", "5000"], "block_sizes"),
]


@pytest.mark.parametrize("argv, named", ARGUMENTS)
def test_a_hostile_argument_is_one_line_before_loading(capsys, tmp_path, no_work, argv, named):
    code, _, err = run_cli(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and named in the_line(err)


def test_engine_refuses_a_tiny_temperature_and_an_unencodable_prompt(tiny):
    from dflash_lite.decoding.engine import Engine
    engine = Engine(*tiny)
    with pytest.raises(ValueError, match="greedy"):
        engine.generate("Hi", max_new_tokens=2, temperature=1e-300)
    with pytest.raises(ValueError, match="not valid text"):
        engine.generate("a\ud800", max_new_tokens=2)
