"""Drafter checkpoints in three layouts, with strict checks (docs/method.md#checkpoints).

* **dflash-lite** (``save_drafter`` / ``load_drafter``): ``drafter.safetensors`` + ``drafter_config.json``.
* **public DFlash** (``export_dflash`` / ``import_dflash``): ``model.safetensors`` + ``config.json`` with
  ``block_size``, ``dflash_config.{target_layer_ids, mask_token_id}`` and ``num_target_layers``; weights
  ``fc``, ``hidden_norm``, ``norm``, ``layers.N...``; no embedding or LM head. This is what vLLM and
  SGLang serve (``--speculative-config '{"method": "dflash", "model": DIR, "num_speculative_tokens": 15}'``)
  and what published drafters ship as.
* **transformers** (``to_transformers``): the same weights inside ``MuseGlimmerAssistantModel``
  (projection under ``encoder.fc`` and ``encoder.output_norm_enc``), for ``generate(...,
  speculation_type="dflash")``.

A checkpoint with missing or extra tensors, or tensors of the wrong shape, is refused with one line.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .drafter import DFlashDrafter, DrafterConfig
from .files import atomic_path
from .target import LoadError, _check_safetensors

FORMAT = "dflash-lite-drafter"
OWN_WEIGHTS, OWN_CONFIG = "drafter.safetensors", "drafter_config.json"
HF_RENAMES = {"fc.weight": "encoder.fc.weight", "hidden_norm.weight": "encoder.output_norm_enc.weight"}


def _atomic_save(tensors: dict, config: dict, directory: Path, weights_name: str, config_name: str) -> Path:
    """Write to temporary names, then rename, so an interrupted save never looks complete."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory}: is an existing file; a drafter is saved into a directory")
    with atomic_path(directory / weights_name) as tmp_w, atomic_path(directory / config_name) as tmp_c:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp_w))
        tmp_c.write_text(json.dumps(config, indent=1))
    return directory


def _load_strict(config: DrafterConfig, tensors: dict, source: Path) -> DFlashDrafter:
    drafter = DFlashDrafter(config)
    expected = drafter.state_dict()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise LoadError(f"{source}: checkpoint does not match its config "
                        f"(missing {len(missing)} tensors {missing[:3]}, extra {len(extra)} {extra[:3]})")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise LoadError(f"{source}: tensor {name} has shape {tuple(tensor.shape)}, "
                            f"config says {tuple(expected[name].shape)}")
    drafter.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()})
    return drafter.eval()


def _read(directory: Path, weights_name: str, config_name: str) -> tuple[dict, dict]:
    directory = Path(directory)
    if not directory.is_dir():
        raise LoadError(f"{directory}: no such drafter directory")
    if not (directory / config_name).is_file():
        raise LoadError(f"{directory}: missing {config_name}")
    if not (directory / weights_name).is_file():
        raise LoadError(f"{directory}: missing {weights_name}")
    _check_safetensors(directory)
    try:
        config = json.loads((directory / config_name).read_text())
    except json.JSONDecodeError as e:
        raise LoadError(f"{directory / config_name}: not valid JSON ({e})") from None
    return config, load_file(str(directory / weights_name))


# ----------------------------------------------------------------------------- own format
def save_drafter(drafter: DFlashDrafter, directory: str | Path, dtype: torch.dtype = torch.float32,
                 extra: dict | None = None) -> Path:
    config = {"format": FORMAT, "config": drafter.config.to_dict(), **(extra or {})}
    tensors = {k: v.to(dtype) for k, v in drafter.state_dict().items()}
    return _atomic_save(tensors, config, Path(directory), OWN_WEIGHTS, OWN_CONFIG)


def load_drafter(directory: str | Path) -> DFlashDrafter:
    directory = Path(directory)
    if (directory / "config.json").is_file() and not (directory / OWN_CONFIG).is_file():
        return import_dflash(directory)
    raw, tensors = _read(directory, OWN_WEIGHTS, OWN_CONFIG)
    if raw.get("format") != FORMAT:
        raise LoadError(f"{directory / OWN_CONFIG}: not a {FORMAT} config")
    try:
        config = DrafterConfig(**raw["config"])
    except (TypeError, ValueError) as e:
        raise LoadError(f"{directory / OWN_CONFIG}: bad drafter config ({e})") from None
    return _load_strict(config, tensors, directory)


# ----------------------------------------------------------------------------- public DFlash layout
def export_dflash(drafter: DFlashDrafter, directory: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write the public DFlash layout (a Qwen3-style config plus ``dflash_config``)."""
    c = drafter.config
    if c.drafting != "block":
        raise ValueError("only block (DFlash) drafters have a public DFlash layout")
    if c.conditioning != "kv_injection":
        raise ValueError(f"only KV-injection drafters have this layout; this one uses {c.conditioning}")
    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim, "vocab_size": c.vocab_size,
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta, "hidden_act": c.hidden_act,
        "attention_bias": c.attention_bias, "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": False, "torch_dtype": str(dtype).removeprefix("torch."),
        "block_size": c.block_size, "num_target_layers": c.num_target_layers,
        "dflash_config": {"target_layer_ids": c.target_layer_ids, "mask_token_id": c.mask_token_id},
    }
    tensors = {k: v.to(dtype) for k, v in drafter.state_dict().items()}
    return _atomic_save(tensors, config, Path(directory), "model.safetensors", "config.json")


def import_dflash(directory: str | Path) -> DFlashDrafter:
    """Load a drafter in the public DFlash layout (e.g. a published drafter for Qwen3-4B)."""
    directory = Path(directory)
    raw, tensors = _read(directory, "model.safetensors", "config.json")
    try:
        dflash = raw["dflash_config"]
        rope = raw.get("rope_theta") or (raw.get("rope_parameters") or {}).get("rope_theta", 1_000_000.0)
        config = DrafterConfig(
            hidden_size=raw["hidden_size"], intermediate_size=raw["intermediate_size"],
            num_attention_heads=raw["num_attention_heads"], num_key_value_heads=raw["num_key_value_heads"],
            head_dim=raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"],
            vocab_size=raw["vocab_size"], mask_token_id=dflash["mask_token_id"],
            num_target_layers=raw["num_target_layers"], target_layer_ids=dflash["target_layer_ids"],
            num_layers=raw["num_hidden_layers"], block_size=raw["block_size"],
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6), rope_theta=rope,
            max_position_embeddings=raw.get("max_position_embeddings", 40960),
            max_block_size=max(64, raw["block_size"]), hidden_act=raw.get("hidden_act", "silu"),
            attention_bias=raw.get("attention_bias", False),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise LoadError(f"{directory / 'config.json'}: not a DFlash drafter config ({type(e).__name__}: {e})") from None
    tensors = {k.removeprefix("model."): v for k, v in tensors.items()}
    return _load_strict(config, tensors, directory)


# ----------------------------------------------------------------------------- transformers
def to_transformers(drafter: DFlashDrafter, dtype: torch.dtype = torch.float32):
    """The same weights as transformers' ``MuseGlimmerAssistantModel`` (full attention, as in the paper)."""
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    c = drafter.config
    if c.drafting != "block":
        raise ValueError("only block (DFlash) drafters map onto transformers' DFlash drafter")
    if c.conditioning != "kv_injection":
        raise ValueError(f"only KV-injection drafters have this layout; this one uses {c.conditioning}")
    config = MuseGlimmerAssistantConfig(
        hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps, max_position_embeddings=c.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
        layer_types=["full_attention"] * c.num_layers, block_size=c.block_size, mask_token_id=c.mask_token_id,
        target_layer_ids=list(c.target_layer_ids), bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    model = MuseGlimmerAssistantModel(config)
    state = {HF_RENAMES.get(k, k): v for k, v in drafter.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        raise LoadError(f"weights do not map onto MuseGlimmerAssistantModel (missing {missing[:3]}, extra {unexpected[:3]})")
    return model.to(dtype).eval()


def from_transformers(model, target_config) -> DFlashDrafter:
    """The inverse of :func:`to_transformers`; the target's config supplies vocabulary and depth."""
    c = model.config
    rope = (getattr(c, "rope_parameters", None) or {}).get("rope_theta", 500000.0)
    if any(t != "full_attention" for t in (c.layer_types or [])):
        raise LoadError("only full-attention MuseGlimmerAssistant drafters map onto the DFlash drafter")
    config = DrafterConfig(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                           num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                           head_dim=c.head_dim, vocab_size=target_config.vocab_size, mask_token_id=c.mask_token_id,
                           num_target_layers=target_config.num_hidden_layers, target_layer_ids=list(c.target_layer_ids),
                           num_layers=c.num_hidden_layers, block_size=c.block_size, rms_norm_eps=c.rms_norm_eps,
                           rope_theta=rope, max_position_embeddings=c.max_position_embeddings)
    inverse = {v: k for k, v in HF_RENAMES.items()}
    state = {inverse.get(k, k): v.float() for k, v in model.state_dict().items()}
    return _load_strict(config, state, Path("<transformers model>"))
