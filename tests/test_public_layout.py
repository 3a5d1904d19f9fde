"""The public DFlash layout in full: rope scaling, sliding-window layers, every config key, hub ids.

Parity is checked against transformers' own DFlash drafter (``MuseGlimmerAssistantModel``) with
the same random weights: the draft logits must be identical with rope scaling on and with
sliding-window layers on, and must differ when either is switched off (so the test can fail).
"""
import json

import pytest
import torch
from drafting_checks import assert_training_forward_equals_inference
from safetensors.torch import save_file

from dflash_lite import LoadError
from dflash_lite.decoding.checkpoints import (
    export_dflash,
    import_dflash,
    load_drafter,
    to_transformers,
)
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig

HIDDEN, CONTEXT, BLOCK, VOCAB = 64, 20, 8, 50
LINEAR_2 = {"rope_type": "linear", "factor": 2.0}
SLIDING = {"layer_types": ["full_attention", "sliding_attention", "sliding_attention"], "sliding_window": 5}


def small_drafter(**fields) -> DFlashDrafter:
    """A 3-layer drafter with weights large enough that positions and windows change the output."""
    torch.manual_seed(0)
    config = DrafterConfig(hidden_size=HIDDEN, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, vocab_size=VOCAB, mask_token_id=3, num_target_layers=6,
                           target_layer_ids=[1, 2, 3], num_layers=3, block_size=BLOCK, rope_theta=10000.0, **fields)
    drafter = DFlashDrafter(config).eval()
    with torch.no_grad():
        for p in drafter.parameters():
            p.normal_(0, 0.3) if p.ndim > 1 else p.uniform_(0.5, 1.5)
    return drafter


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(1, BLOCK, HIDDEN, generator=g), torch.randn(1, CONTEXT, 3 * HIDDEN, generator=g),
            torch.randn(VOCAB, HIDDEN, generator=g))


def our_logits(drafter, inputs):
    embeds, features, head = inputs
    with torch.no_grad():
        hidden = drafter(embeds, features, torch.arange(CONTEXT, CONTEXT + BLOCK)[None], torch.arange(CONTEXT)[None])
    return hidden[:, 1:] @ head.T                                            # (1, B-1, V)


def transformers_logits(drafter, inputs):
    from transformers.cache_utils import DFlashCache

    embeds, features, head = inputs
    model = to_transformers(drafter)
    cache = DFlashCache(config=model.config)          # as generate() does: the context joins the keys
    cache.set_previous_accepted_tokens(CONTEXT)
    with torch.no_grad():
        hidden = model(noise_embeds=embeds, context_hidden_states=features,
                       position_ids=torch.arange(CONTEXT + BLOCK)[None], past_key_values=cache).last_hidden_state
    return hidden[:, 1:] @ head.T


@pytest.mark.parametrize("fields", [{"rope_scaling": LINEAR_2}, SLIDING, {"rope_scaling": LINEAR_2, **SLIDING}],
                         ids=["rope-linear-2", "sliding-window", "both"])
def test_draft_logits_equal_transformers_drafter(fields, inputs):
    drafter = small_drafter(**fields)
    ours = our_logits(drafter, inputs)
    torch.testing.assert_close(ours, transformers_logits(drafter, inputs), atol=1e-5, rtol=1e-5)
    plain = small_drafter()                            # same weights, plain RoPE, full attention
    assert (ours - our_logits(plain, inputs)).abs().max() > 0.1


def test_sliding_window_with_a_growing_cache_equals_recomputing(inputs):
    drafter = small_drafter(rope_scaling=LINEAR_2, **SLIDING)
    embeds, features, head = inputs
    cache = SlotCache(drafter.config.num_layers)
    with torch.no_grad():
        drafter(embeds[:, :2], features[:, :12], torch.arange(12, 14)[None], torch.arange(12)[None], cache)
        hidden = drafter(embeds, features[:, 12:], torch.arange(CONTEXT, CONTEXT + BLOCK)[None],
                         torch.arange(12, CONTEXT)[None], cache)
    torch.testing.assert_close(hidden[:, 1:] @ head.T, our_logits(drafter, inputs), atol=1e-5, rtol=1e-5)


def test_drafter_takes_the_targets_rope_scaling():
    from transformers import Qwen3Config

    target = Qwen3Config(hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, vocab_size=VOCAB,
                         rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})
    config = DrafterConfig.from_target(target, mask_token_id=3, num_layers=2, block_size=8)
    assert config.rope_theta == 5e5 and config.rope_scaling == LINEAR_2


# ----------------------------------------------------------------------------- config round trip
def public_config(**changes) -> dict:
    """A config as the reference code writes it for a Qwen3 target (small shapes)."""
    config = {
        "architectures": ["DFlashDraftModel"], "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"}, "block_size": BLOCK, "bos_token_id": 1,
        "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 2, 3]}, "dtype": "bfloat16",
        "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": HIDDEN, "initializer_range": 0.02,
        "intermediate_size": 96, "layer_types": ["full_attention"] * 3, "max_position_embeddings": 4096,
        "max_window_layers": 3, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 3,
        "num_key_value_heads": 2, "num_target_layers": 6, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
        "transformers_version": "4.57.1", "use_cache": True, "use_sliding_window": False, "vocab_size": VOCAB,
    }
    config.update(changes)
    return config


def write_public(directory, config, dtype=torch.bfloat16):
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(dtype) for k, v in small_drafter().state_dict().items()}
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    return directory


ROUND_TRIPS = {
    "reference": {},
    "rope-scaling": {"rope_scaling": {"type": "linear", "factor": 2.0}},
    "sliding": {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1,
                "layer_types": ["full_attention", "sliding_attention", "sliding_attention"]},
    "transformers-5": {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000},
                       "rope_scaling": None},
    "torch_dtype": {"torch_dtype": "bfloat16"},
}


@pytest.mark.parametrize("changes", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_every_public_config_key_survives_import_then_export(changes, tmp_path):
    original = public_config(**changes)
    if "torch_dtype" in changes:
        original.pop("dtype")
    if "rope_parameters" in changes:
        original.pop("rope_scaling"), original.pop("rope_theta")
    drafter = import_dflash(write_public(tmp_path / "in", original))
    export_dflash(drafter, tmp_path / "out", dtype=torch.bfloat16)
    exported = json.loads((tmp_path / "out" / "config.json").read_text())
    assert exported == original
    again = import_dflash(tmp_path / "out")                   # and what was written reads back the same
    assert again.config == drafter.config


def test_imported_rope_scaling_and_window_reach_the_drafter(tmp_path):
    sliding = ROUND_TRIPS["sliding"]
    drafter = import_dflash(write_public(tmp_path, public_config(rope_scaling=LINEAR_2, **sliding)))
    assert drafter.config.rope_parameters == {**LINEAR_2, "rope_theta": 1000000.0}
    assert drafter.config.layer_types == sliding["layer_types"] and drafter.config.sliding_window == 5
    assert drafter.rotary_emb.rope_type == "linear"
    # Qwen3Config's rule without layer_types: layers from max_window_layers on slide
    derived = public_config(**{**sliding, "layer_types": None})
    assert import_dflash(write_public(tmp_path / "derived", derived)).config.layer_types == sliding["layer_types"]


def test_exported_drafter_from_scratch_writes_the_full_key_set(tmp_path):
    export_dflash(small_drafter(rope_scaling=LINEAR_2), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    expected = set(public_config()) - {"auto_map", "bos_token_id", "eos_token_id", "transformers_version"}
    assert expected <= set(config) and "torch_dtype" not in config
    assert config["rope_scaling"] == LINEAR_2 and config["dtype"] == "bfloat16"


UNSUPPORTED = {
    "partial-rotary": ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    "softcap": ({"dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 2, 3],
                                   "final_logit_softcapping": 30.0}}, "final_logit_softcapping"),
    "rope-type": ({"rope_scaling": {"rope_type": "mystery", "factor": 2.0}}, "mystery"),
    "window-off": ({"layer_types": ["sliding_attention"] * 3, "sliding_window": 5}, "sliding_attention"),
    "layer-kind": ({"layer_types": ["chunked_attention"] * 3}, "chunked_attention"),
    "layer-count": ({"layer_types": ["full_attention"] * 2}, "layer_types"),
}


@pytest.mark.parametrize("changes, word", UNSUPPORTED.values(), ids=UNSUPPORTED.keys())
def test_config_that_cannot_be_honoured_fails_in_one_line(changes, word, tmp_path):
    with pytest.raises(LoadError, match=word) as info:
        import_dflash(write_public(tmp_path, public_config(**changes)))
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- hub ids
@pytest.fixture
def offline_hub(monkeypatch, tmp_path):
    """An empty Hugging Face cache under tmp_path, with the hub switched off."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def cache_snapshot(cache, repo_id: str):
    """A snapshot laid out as huggingface_hub lays it out: refs/main names the commit folder."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return repo / "snapshots" / commit


def test_drafter_hub_id_loads_from_the_local_cache_offline(offline_hub):
    write_public(cache_snapshot(offline_hub, "someone/Tiny-DFlash-b8"), public_config(rope_scaling=LINEAR_2))
    drafter = load_drafter("someone/Tiny-DFlash-b8", dtype="bfloat16")
    assert drafter.config.rope_scaling == LINEAR_2 and drafter.config.block_size == BLOCK
    assert next(drafter.parameters()).dtype == torch.bfloat16


def test_drafter_hub_id_without_cache_or_network_fails_in_one_line_without_a_download(offline_hub, monkeypatch):
    import huggingface_hub

    calls = []
    real = huggingface_hub.snapshot_download
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: calls.append(k) or real(*a, **k))
    with pytest.raises(LoadError, match="HF_HUB_OFFLINE") as info:
        load_drafter("someone/Not-Cached-DFlash")
    assert "\n" not in str(info.value) and info.value.__cause__ is None
    assert [k.get("local_files_only") for k in calls] == [True]           # the cache was asked, the hub never


def test_cli_drafter_hub_id_offline_is_one_line_on_stderr(offline_hub, capsys):
    from dflash_lite.cli import main

    assert main(["bench", "--drafter", "someone/Not-Cached-DFlash", "--num-prompts", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: someone/Not-Cached-DFlash") and "\n" not in err


def test_training_forward_with_sliding_window_and_rope_scaling_equals_the_inference_draft(tiny):
    """The block-masked training forward and the cached inference draft agree for a drafter with
    sliding-window layers and linear rope scaling (the window mask joins the block mask)."""
    from dflash_lite import corpus
    from dflash_lite.training.data import make_batch

    target, tokenizer = tiny
    torch.manual_seed(0)
    config = DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=2, block_size=4,
                                       rope_scaling=LINEAR_2, layer_types=["sliding_attention", "full_attention"],
                                       sliding_window=6)
    drafter = DFlashDrafter(config).eval()
    seq = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 3).text, add_special_tokens=False).input_ids
    batch = make_batch([seq], [10], 4, 3, tokenizer, torch.Generator().manual_seed(3))
    assert_training_forward_equals_inference(drafter, target, batch)
