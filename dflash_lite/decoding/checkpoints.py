"""Drafter checkpoints in three layouts, with strict checks (docs/method.md#checkpoints): the
project's own (:func:`save_drafter`, :func:`load_drafter`), the public DFlash layout that vLLM and
SGLang serve (:func:`export_dflash`, :func:`import_dflash`), and transformers' DFlash drafter
(:func:`to_transformers`, :func:`from_transformers`)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..files import atomic_path
from ..validate import check_memory, check_model_shape
from .drafter import DFlashDrafter, DrafterConfig, check_compatible
from .target import (LoadError, _check_safetensors, default_drafter_path, load_pretrained,
                     parse_dtype, resolve_checkpoint)
from .variants import make_drafter

FORMAT = "dflash-lite-drafter"
OWN_WEIGHTS, OWN_CONFIG = "drafter.safetensors", "drafter_config.json"
HF_RENAMES = {"fc.weight": "encoder.fc.weight",
              "hidden_norm.weight": "encoder.output_norm_enc.weight"}


def _atomic_save(drafter: DFlashDrafter, dtype: torch.dtype, config: dict, directory: str | Path,
                 weights_name: str, config_name: str) -> Path:
    """Write to temporary names, then rename, so an interrupted save never looks complete."""
    directory = Path(directory)
    tensors = {k: v.to(dtype).detach().contiguous().cpu() for k, v in drafter.state_dict().items()}
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory}: is an existing file; a drafter is saved into a directory")
    with (atomic_path(directory / weights_name) as tmp_w,
          atomic_path(directory / config_name) as tmp_c):
        save_file(tensors, str(tmp_w))
        tmp_c.write_text(json.dumps(config, indent=1))
    return directory


def _load_strict(config: DrafterConfig, tensors: dict, source: Path) -> DFlashDrafter:
    try:                         # sizes and parameter count, before anything is allocated
        parameters = check_model_shape(config.to_dict(), embeddings=0)
    except ValueError as e:
        raise LoadError(f"{source}: bad drafter config ({e})") from None
    try:                                          # built in fp32, then given its tensors
        check_memory(f"{source}: the drafter", parameters * 4, "cpu",
                     f"{parameters / 1e9:.2f}B parameters")
    except ValueError as e:
        raise LoadError(str(e)) from None
    drafter = make_drafter(config)
    expected = drafter.state_dict()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise LoadError(f"{source}: checkpoint does not match its config (missing {len(missing)} "
                        f"tensors {missing[:3]}, extra {len(extra)} {extra[:3]})")
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
    for name in (config_name, weights_name):
        if not (directory / name).is_file():
            raise LoadError(f"{directory}: missing {name}")
    _check_safetensors(directory)
    try:
        config = json.loads((directory / config_name).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise LoadError(f"{directory / config_name}: not valid JSON ({type(e).__name__})") from None
    if not isinstance(config, dict):
        raise LoadError(f"{directory / config_name}: must be a JSON object, "
                        f"got {type(config).__name__}")
    return config, load_file(str(directory / weights_name))


# ----------------------------------------------------------------------------- own format
def save_drafter(drafter: DFlashDrafter, directory: str | Path, dtype: torch.dtype = torch.float32,
                 extra: dict | None = None) -> Path:
    config = {"format": FORMAT, "config": drafter.config.to_dict(), **(extra or {})}
    return _atomic_save(drafter, dtype, config, directory, OWN_WEIGHTS, OWN_CONFIG)


def load_pair(target: str = "tiny", drafter: str | None = None, device: str = "cpu",
              dtype: str | torch.dtype | None = None, shipped: bool = True):
    """``(model, tokenizer, drafter or None)`` on ``device`` in ``dtype`` (None: float32, the
    drafter's saved weights upcast). ``drafter``: a local directory or a hub id; None: a shipped
    target's shipped drafter, if ``shipped``. A bad drafter name fails before the target loads."""
    if drafter is None and shipped:
        drafter = default_drafter_path(target)
    draft = load_drafter(drafter, dtype=dtype) if drafter is not None else None
    model, tokenizer = load_pretrained(target, device=device, dtype=dtype)
    if draft is not None:                  # as the Engine does: at load, not at the first draft
        check_pair(draft, model, tokenizer, drafter)
    return model, tokenizer, (draft.to(device) if draft is not None else None)


def check_mask_token(mask_token_id: int, tokenizer) -> None:
    """A drafter's mask token must be one the target never ends a turn with: the tokenizer's own
    mask token when it has one (checked by ``check_compatible``), else any id but its EOS, PAD or
    BOS token (:func:`dflash_lite.decoding.target.mask_token_id` picks one at training)."""
    ends = {tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id} - {None}
    if tokenizer.mask_token_id is None and mask_token_id in ends:
        raise ValueError(f"drafter mask token {mask_token_id} is the target's "
                         f"{tokenizer.convert_ids_to_tokens(mask_token_id)!r}, which it emits")


def check_pair(drafter: DFlashDrafter, target, tokenizer, where="drafter",
               mask: bool = True) -> None:
    """One :class:`LoadError` line when ``drafter`` cannot run against ``target``: another width or
    vocabulary, tapped layers the target does not have, or (with ``mask``) another mask token."""
    try:
        check_compatible(drafter.config, target.config, tokenizer.mask_token_id if mask else None)
        if mask and not drafter.autoregressive:
            check_mask_token(drafter.config.mask_token_id, tokenizer)
    except ValueError as e:
        raise LoadError(f"{where}: does not belong to this target ({e})") from None


def load_drafter(name_or_path: str | Path, dtype: str | torch.dtype | None = None) -> DFlashDrafter:
    """A drafter from a local directory (own or public layout) or a hub id (public layout), in
    ``dtype`` (``"float32"`` by default, ``"bfloat16"``, ``"float16"``)."""
    directory = resolve_checkpoint(name_or_path, ["*.json", "*.safetensors"], what="drafter")
    dtype = parse_dtype(dtype)
    if (directory / "config.json").is_file() and not (directory / OWN_CONFIG).is_file():
        return import_dflash(directory).to(dtype)
    raw, tensors = _read(directory, OWN_WEIGHTS, OWN_CONFIG)
    if raw.get("format") != FORMAT:
        raise LoadError(f"{directory / OWN_CONFIG}: not a {FORMAT} config")
    if not isinstance(raw.get("config"), dict):
        raise LoadError(f"{directory / OWN_CONFIG}: its 'config' must be a JSON object of the "
                        f"drafter's shape, got {type(raw.get('config')).__name__}")
    try:
        config = DrafterConfig(**raw["config"])
    except (TypeError, ValueError) as e:
        raise LoadError(f"{directory / OWN_CONFIG}: bad drafter config ({e})") from None
    return _load_strict(config, tensors, directory).to(dtype)


# ----------------------------------------------------------------------------- public DFlash layout
# Keys of a public config that change what the drafter computes, with the value that means "off".
# This drafter computes none of them, so any other value is refused rather than silently ignored.
NEUTRAL = {"partial_rotary_factor": (1, 1.0), "input_embedding_scale": (1, 1.0),
           "output_multiplier": (1, 1.0), "final_logit_softcapping": (0, 0.0),
           "is_causal": (False,), "projector_type": (), "conv_kernel_size": (), "selector_rank": ()}


def _public(drafter: DFlashDrafter, what: str) -> DrafterConfig:
    """The config of a block-diffusion, KV-injection drafter: the only kind that ``what``."""
    c = drafter.config
    if c.drafting != "block":
        raise ValueError(f"only block (DFlash) drafters {what}")
    if c.conditioning != "kv_injection":
        raise ValueError(f"only KV-injection drafters {what}; this one uses {c.conditioning}")
    return c


def export_dflash(drafter: DFlashDrafter, directory: str | Path,
                  dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write the public DFlash layout: every key an imported drafter was read with, those this
    code owns rewritten from its config."""
    c = _public(drafter, "have a public DFlash layout")
    carried = dict(c.public_config)
    sliding = [i for i, t in enumerate(c.layer_types) if t == "sliding_attention"]
    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "attention_dropout": 0.0,
        "initializer_range": 0.02, "use_cache": True, "tie_word_embeddings": False,
        "max_window_layers": sliding[0] if sliding else c.num_layers,
        **carried,
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim,
        "vocab_size": c.vocab_size, "rms_norm_eps": c.rms_norm_eps, "hidden_act": c.hidden_act,
        "attention_bias": c.attention_bias, "max_position_embeddings": c.max_position_embeddings,
        "layer_types": list(c.layer_types),
        # with no sliding layer the window is unused: an imported value is written back as it was
        "sliding_window": c.sliding_window if sliding else carried.get("sliding_window"),
        "use_sliding_window": bool(sliding) or bool(carried.get("use_sliding_window", False)),
        "block_size": c.block_size, "num_target_layers": c.num_target_layers,
        "dflash_config": {**carried.get("dflash_config", {}),
                          "target_layer_ids": list(c.target_layer_ids),
                          "mask_token_id": c.mask_token_id},
    }
    if "rope_parameters" in carried:                          # transformers 5 style, as it was read
        config["rope_parameters"] = c.rope_parameters
        if "rope_theta" in carried:
            config["rope_theta"] = c.rope_theta
    else:                                     # rope_theta + rope_scaling (what vLLM/SGLang read)
        config["rope_theta"] = c.rope_theta
        config["rope_scaling"] = c.rope_scaling
    dtype_key = "torch_dtype" if "torch_dtype" in carried and "dtype" not in carried else "dtype"
    config[dtype_key] = str(dtype).removeprefix("torch.")
    return _atomic_save(drafter, dtype, config, directory, "model.safetensors", "config.json")


def _rope_from_config(raw: dict) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) from ``rope_theta`` + ``rope_scaling`` (transformers 4) or
    ``rope_parameters`` (transformers 5); ``rope_scaling`` wins, as in transformers."""
    parameters = dict(raw.get("rope_parameters") or {})
    inner = parameters.pop("rope_theta", None)
    theta = raw.get("rope_theta") or inner or 10000.0                    # Qwen3Config's default
    scaling = raw.get("rope_scaling") or parameters or None
    if scaling is not None and set(scaling) <= {"rope_type", "type"} and \
            scaling.get("rope_type", scaling.get("type")) in ("default", None):
        scaling = None                                        # plain RoPE spelled out
    return float(theta), scaling


def _attention_from_config(raw: dict, num_layers: int) -> tuple[list[str], int | None]:
    """(layer_types, sliding_window) as ``Qwen3Config`` reads them: the window counts only with
    ``use_sliding_window``; without ``layer_types``, layers from ``max_window_layers`` on slide."""
    window = raw.get("sliding_window") if raw.get("use_sliding_window", False) else None
    layer_types = raw.get("layer_types") or [
        "sliding_attention" if window is not None and i >= raw.get("max_window_layers", 28)
        else "full_attention" for i in range(num_layers)]
    if "sliding_attention" in layer_types and window is None:
        raise ValueError("layer_types has sliding_attention layers but no window applies "
                         "(use_sliding_window is false or sliding_window is null)")
    return list(layer_types), window


def import_dflash(directory: str | Path) -> DFlashDrafter:
    """Load a drafter in the public DFlash layout (e.g. a published drafter for Qwen3-4B)."""
    directory = Path(directory)
    raw, tensors = _read(directory, "model.safetensors", "config.json")
    try:
        dflash = raw["dflash_config"]
        for key in ("dflash_config", "rope_parameters", "rope_scaling"):
            if raw.get(key) is not None and not isinstance(raw[key], dict):
                raise TypeError(f"{key} must be a JSON object, got {type(raw[key]).__name__}")
        for where in (raw, dflash, raw.get("rope_parameters") or {}, raw.get("rope_scaling") or {}):
            for key, off in NEUTRAL.items():
                if where.get(key) is not None and where[key] not in off:     # None is always "off"
                    raise ValueError(f"{key}={where[key]!r} is not supported by this drafter")
        rope_theta, rope_scaling = _rope_from_config(raw)
        layer_types, sliding_window = _attention_from_config(raw, raw["num_hidden_layers"])
        config = DrafterConfig(
            hidden_size=raw["hidden_size"], intermediate_size=raw["intermediate_size"],
            num_attention_heads=raw["num_attention_heads"],
            num_key_value_heads=raw["num_key_value_heads"],
            head_dim=raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"],
            vocab_size=raw["vocab_size"], mask_token_id=dflash["mask_token_id"],
            num_target_layers=raw["num_target_layers"], target_layer_ids=dflash["target_layer_ids"],
            num_layers=raw["num_hidden_layers"], block_size=raw["block_size"],
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6), rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=raw.get("max_position_embeddings", 40960),
            max_block_size=max(64, raw["block_size"]), hidden_act=raw.get("hidden_act", "silu"),
            attention_bias=raw.get("attention_bias", False), layer_types=layer_types,
            sliding_window=sliding_window, public_config=raw)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise LoadError(f"{directory / 'config.json'}: not a DFlash drafter config this code "
                        f"can honour ({type(e).__name__}: {e})") from None
    tensors = {k.removeprefix("model."): v for k, v in tensors.items()}
    return _load_strict(config, tensors, directory)


# ----------------------------------------------------------------------------- transformers
def to_transformers(drafter: DFlashDrafter, dtype: torch.dtype = torch.float32):
    """The drafter as transformers' ``MuseGlimmerAssistantModel``: same weights, rope and layers."""
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    c = _public(drafter, "map onto transformers' DFlash drafter")
    config = MuseGlimmerAssistantConfig(
        hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
        rms_norm_eps=c.rms_norm_eps, max_position_embeddings=c.max_position_embeddings,
        rope_parameters=c.rope_parameters, layer_types=list(c.layer_types),
        # unused without sliding layers
        sliding_window=c.sliding_window or MuseGlimmerAssistantConfig.sliding_window,
        block_size=c.block_size, mask_token_id=c.mask_token_id, pad_token_id=None,
        target_layer_ids=list(c.target_layer_ids), bos_token_id=None, eos_token_id=None)
    model = MuseGlimmerAssistantModel(config)
    state = {HF_RENAMES.get(k, k): v for k, v in drafter.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        raise LoadError("weights do not map onto MuseGlimmerAssistantModel (missing "
                        f"{missing[:3]}, extra {unexpected[:3]})")
    return model.to(dtype).eval()


def from_transformers(model, target_config) -> DFlashDrafter:
    """The inverse of :func:`to_transformers`; the target's config supplies vocabulary and depth."""
    c = model.config
    rope_theta, rope_scaling = _rope_from_config({"rope_parameters": c.rope_parameters})
    layer_types = list(c.layer_types or ["full_attention"] * c.num_hidden_layers)
    config = DrafterConfig(
        hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim, vocab_size=target_config.vocab_size, mask_token_id=c.mask_token_id,
        num_target_layers=target_config.num_hidden_layers, num_layers=c.num_hidden_layers,
        target_layer_ids=list(c.target_layer_ids), block_size=c.block_size,
        rms_norm_eps=c.rms_norm_eps, rope_theta=rope_theta, rope_scaling=rope_scaling,
        max_position_embeddings=c.max_position_embeddings, layer_types=layer_types,
        sliding_window=c.sliding_window if "sliding_attention" in layer_types else None)
    inverse = {v: k for k, v in HF_RENAMES.items()}
    state = {inverse.get(k, k): v.float() for k, v in model.state_dict().items()}
    return _load_strict(config, state, Path("<transformers model>"))
