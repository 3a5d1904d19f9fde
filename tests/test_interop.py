"""Drafter checkpoints: own format, public DFlash layout, and transformers' implementation.

transformers' ``MuseGlimmerAssistantModel`` is an independent implementation of the same drafter:
with the same weights its draft logits must be ``allclose`` to ours, and ``generate(...,
assistant_model=..., speculation_type="dflash")`` must give exactly our loop's tokens.
"""
import copy
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from dflash_lite import LoadError, corpus, stop_token_ids
from dflash_lite.decoding.checkpoints import (
    export_dflash,
    from_transformers,
    import_dflash,
    load_drafter,
    save_drafter,
    to_transformers,
)
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.target import context_features


@pytest.fixture(scope="module")
def block_inputs(tiny, random_drafter):
    target, tokenizer = tiny
    ids = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 5).prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
    features = context_features(out.hidden_states, random_drafter.config.target_layer_ids)
    block = torch.full((1, 16), tokenizer.mask_token_id)
    block[0, 0] = out.logits[0, -1].argmax()
    return block, features


def draft_logits(drafter, target, block_inputs):
    block, features = block_inputs
    return drafter.draft_logits(target, block, features, 0)


def test_own_format_round_trip_gives_identical_logits(tiny, random_drafter, block_inputs, tmp_path):
    target, _ = tiny
    save_drafter(random_drafter, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drafter.safetensors", "drafter_config.json"]
    loaded = load_drafter(tmp_path)
    assert loaded.config == random_drafter.config
    assert torch.equal(draft_logits(loaded, target, block_inputs), draft_logits(random_drafter, target, block_inputs))


def test_public_dflash_layout_round_trip(tiny, random_drafter, block_inputs, tmp_path):
    target, _ = tiny
    export_dflash(random_drafter, tmp_path, dtype=torch.float32)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["block_size"] == 16 and config["num_target_layers"] == target.config.num_hidden_layers
    assert config["dflash_config"] == {"target_layer_ids": random_drafter.config.target_layer_ids,
                                       "mask_token_id": random_drafter.config.mask_token_id}
    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.0.self_attn.q_proj.weight",
            "layers.1.mlp.down_proj.weight", "layers.0.self_attn.k_norm.weight"} <= names
    assert not any("embed" in n or "lm_head" in n for n in names)
    loaded = import_dflash(tmp_path)
    assert torch.equal(draft_logits(loaded, target, block_inputs), draft_logits(random_drafter, target, block_inputs))
    assert isinstance(load_drafter(tmp_path), type(random_drafter))     # load_drafter recognises the layout


def test_bf16_export_is_the_default_and_close(tiny, random_drafter, block_inputs, tmp_path):
    target, _ = tiny
    export_dflash(random_drafter, tmp_path)
    assert all(t.dtype == torch.bfloat16 for t in load_file(str(tmp_path / "model.safetensors")).values())
    torch.testing.assert_close(draft_logits(import_dflash(tmp_path), target, block_inputs),
                               draft_logits(random_drafter, target, block_inputs), atol=0.05, rtol=0.05)


@pytest.mark.parametrize("width", [16, 7, 3])
def test_transformers_drafter_gives_the_same_draft_logits(tiny, random_drafter, block_inputs, width):
    """Our drafter forward (fused K/V projection, one-call RMSNorm, RoPE from a table, the head over a
    row count it runs fastest at) against transformers' straightforward one: fp32 tolerance, same drafts."""
    target, _ = tiny
    hf = to_transformers(random_drafter)
    block, features = block_inputs
    block = block[:, :width]
    with torch.no_grad():
        embeds = target.get_input_embeddings()(block)
        positions = torch.arange(features.shape[1] + block.shape[1])[None]
        hidden = hf(noise_embeds=embeds, context_hidden_states=features, position_ids=positions).last_hidden_state
        theirs = target.lm_head(hidden[:, 1:])
    ours = random_drafter.draft_logits(target, block, features, 0)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    back = from_transformers(hf, target.config)
    assert all(torch.equal(back.state_dict()[k], v) for k, v in random_drafter.state_dict().items())


def test_drafter_cache_equals_recomputing_the_context(tiny, random_drafter, block_inputs):
    target, _ = tiny
    block, features = block_inputs
    split = features.shape[1] // 2
    cache = SlotCache(random_drafter.config.num_layers)
    random_drafter.draft_logits(target, block[:, :2], features[:, :split], 0, cache)   # fills the first half
    assert cache.position == split
    cached = random_drafter.draft_logits(target, block, features[:, split:], split, cache)
    torch.testing.assert_close(cached, draft_logits(random_drafter, target, block_inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_size", [4, 16])
def test_transformers_dflash_generate_gives_our_tokens(tiny, random_drafter, block_size):
    target, tokenizer = tiny
    drafter = copy.deepcopy(random_drafter)
    drafter.config.block_size = block_size
    hf = to_transformers(drafter)
    stops = stop_token_ids(target, tokenizer)
    prompts = [p.prompt for p in corpus.math_problems(3, split="held_out", start=40)] + ["def walk(tree):\n"]
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        ours = generate(target, DFlashProposer(drafter, target), ids, 24, stop_token_ids=stops).tokens
        theirs = target.generate(ids, assistant_model=hf, speculation_type="dflash", do_sample=False,
                                 max_new_tokens=24, eos_token_id=stops, pad_token_id=tokenizer.pad_token_id)
        assert ours == theirs[0, ids.shape[1]:].tolist()


def test_checkpoint_with_missing_or_extra_tensors_is_refused(random_drafter, tmp_path):
    for change in ("missing", "extra", "shape"):
        path = tmp_path / change
        save_drafter(random_drafter, path)
        tensors = load_file(str(path / "drafter.safetensors"))
        if change == "missing":
            tensors.pop("layers.1.mlp.up_proj.weight")
        elif change == "extra":
            tensors["lm_head.weight"] = torch.zeros(3, 3)
        else:
            tensors["fc.weight"] = tensors["fc.weight"][:, :10].contiguous()
        save_file(tensors, str(path / "drafter.safetensors"))
        expected = {"missing": "missing 1 ", "extra": "extra 1 ", "shape": "has shape"}[change]
        with pytest.raises(LoadError, match=expected) as info:
            load_drafter(path)
        assert "\n" not in str(info.value)


def test_interrupted_save_is_never_mistaken_for_a_checkpoint(random_drafter, tmp_path, monkeypatch):
    import dflash_lite.decoding.checkpoints as ck

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ck, "save_file", crash)
    with pytest.raises(KeyboardInterrupt):
        save_drafter(random_drafter, tmp_path)
    with pytest.raises(LoadError):
        load_drafter(tmp_path)
