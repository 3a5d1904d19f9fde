"""load_pretrained: shipped, local and hub names, and one clear line for every way it can fail."""
import json
import shutil

import pytest

from dflash_lite import LoadError, load_pretrained
from dflash_lite.decoding.target import SHIPPED


def one_line_error(name) -> str:
    with pytest.raises(LoadError) as info:
        load_pretrained(name)
    message = str(info.value)
    assert "\n" not in message and message
    assert info.value.__cause__ is None  # no chained traceback under the message
    assert info.value.__context__ is None or info.value.__suppress_context__
    return message


def test_shipped_target_is_a_qwen3_causal_lm_loaded_in_fp32(tiny):
    model, tokenizer = tiny
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert next(model.parameters()).dtype.is_floating_point and str(next(model.parameters()).dtype) == "torch.float32"
    assert model.config.num_hidden_layers >= 6 and sum(p.numel() for p in model.parameters()) <= 20e6
    assert len(tokenizer) == model.config.vocab_size


def test_shipped_files_are_small():
    total = sum(f.stat().st_size for f in SHIPPED["tiny"].iterdir())
    assert total <= 40e6


def test_missing_directory(tmp_path):
    assert "no such model directory" in one_line_error(str(tmp_path / "nope"))


def test_directory_without_config(tmp_path):
    assert "config.json" in one_line_error(tmp_path)


def test_hub_id_without_network_or_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE" in one_line_error("Qwen/Qwen3-0.6B")


def test_hub_id_with_unreachable_hub(monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}")
    assert "could not be downloaded" in one_line_error("Qwen/Qwen3-0.6B")


@pytest.fixture
def shipped_copy(tmp_path):
    path = tmp_path / "copy"
    shutil.copytree(SHIPPED["tiny"], path)
    return path


def test_corrupt_safetensors_header(shipped_copy):
    weights = shipped_copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:40] = b"#" * 32  # the JSON header is no longer JSON
    weights.write_bytes(bytes(data))
    assert "corrupt" in one_line_error(shipped_copy)


def test_truncated_safetensors(shipped_copy):
    weights = shipped_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    message = one_line_error(shipped_copy)
    assert "truncated" in message


def test_directory_without_weights(shipped_copy):
    (shipped_copy / "model.safetensors").unlink()
    assert "safetensors" in one_line_error(shipped_copy)


def test_unsupported_architecture(shipped_copy):
    config = json.loads((shipped_copy / "config.json").read_text())
    config["model_type"] = "gpt2"
    (shipped_copy / "config.json").write_text(json.dumps(config))
    assert "not supported" in one_line_error(shipped_copy)


def test_config_vocabulary_over_weights_of_another_size(shipped_copy):
    config = json.loads((shipped_copy / "config.json").read_text())
    rows = config["vocab_size"]
    config["vocab_size"] = rows - 96
    (shipped_copy / "config.json").write_text(json.dumps(config))
    message = one_line_error(shipped_copy)
    assert f"vocab_size {rows - 96}" in message and f"{rows} rows" in message
