"""The one validation layer, shared by the CLI's argparse types (:func:`arg_type`) and the Python
API: each check returns the value or raises ``ValueError`` with one line that names the argument and
its accepted range, before any work is done (README.md#safety, "Bad input")."""
from __future__ import annotations

import argparse
import codecs
import enum
import math
import numbers
import os
import stat
from pathlib import Path

import torch

MAX_BATCH = 64                  # requests in one batch (bench --batch-sizes)
MAX_REPEATS = 1000              # timed rounds of one measurement: each keeps its results in memory
SEED_RANGE = (-(2 ** 63), 2 ** 64 - 1)  # what torch.manual_seed accepts
TEMPERATURE_FLOOR = 1e-3  # below it the logits / T overflow towards inf and the softmax is nan
MAX_LINE_BYTES = 4 << 20        # a line of a prompts file: far more than any context holds
MAX_PARAMETERS = 16_000_000_000  # twice the largest target the paper drafts for (8B)
SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads",
              "num_key_value_heads", "vocab_size")
NAME_MAX, PATH_MAX = 255, 4096  # the usual limits of Linux and macOS file systems


def _fail(name: str | None, expected: str, value) -> ValueError:
    return ValueError(f"{_named(name)}must be {expected}, got {value!r}")


def _named(name: str | None) -> str:
    return f"{name} " if name else ""


def check_int(name: str | None, value, low: int = 1, high: int | None = None) -> int:
    """An integer (not a bool or float) in ``[low, high]``."""
    expected = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low \
            or (high is not None and value > high):
        raise _fail(name, expected, value)
    return int(value)


def check_float(name: str | None, value, low: float = 0.0, high: float | None = None,
                low_open: bool = False) -> float:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    expected = "a finite number " + (f"{'>' if low_open else '>='} {low}" if high is None
                                     else f"in {'(' if low_open else '['}{low}, {high}]")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(name, expected, value)
    value = float(value)
    if not math.isfinite(value) or value < low or (low_open and value == low) \
            or (high is not None and value > high):
        raise _fail(name, expected, value)
    return value


def check_seed(value, name: str | None = "seed") -> int:
    """An integer torch can seed with."""
    return check_int(name, value, *SEED_RANGE)


def check_temperature(value, name: str | None = "temperature") -> float:
    """0 means greedy; otherwise the softmax temperature, at least :data:`TEMPERATURE_FLOOR`."""
    value = check_float(name, value, 0.0)
    if 0.0 < value < TEMPERATURE_FLOOR:
        raise ValueError(f"{_named(name)}must be 0 (greedy) or >= {TEMPERATURE_FLOOR}, "
                         f"got {value!r}; use 0 for greedy decoding")
    return value


def check_block_sizes(value, name: str | None = "block_sizes",
                      high: int | None = None) -> tuple[int, ...]:
    """A non-empty sequence of block sizes, each >= 1 (and <= ``high`` when given)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise _fail(name, "a list of integers >= 1 (e.g. 4,8,16)", value)
    sizes = tuple(value)
    if not sizes:
        raise _fail(name, "a non-empty list of integers >= 1 (e.g. 4,8,16)", value)
    for size in sizes:
        check_int(name, size, 1, high)
    if repeated := sorted({s for s in sizes if sizes.count(s) > 1}):
        raise ValueError(f"{name or 'the sizes'} must be distinct "
                         f"({', '.join(map(str, repeated))} repeated)")
    return sizes


def check_choice(name: str, value, kind: type[enum.Enum], allowed=None):
    """``value`` (a member of the enum ``kind`` or its string) as a member; one line naming ``name``
    and the ``allowed`` members' values (all of them by default) otherwise."""
    allowed = list(kind) if allowed is None else list(allowed)
    try:
        member = kind(value)
    except ValueError:
        member = None
    if member not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(m.value for m in allowed)}, "
                         f"got {value!r}")
    return member


def check_device(value, name: str | None = "device") -> str:
    """A device torch knows (cpu, cuda, cuda:N, mps) that this machine has."""
    expected = "cpu, cuda, cuda:N or mps, available on this machine"
    try:
        device = torch.device(value) if isinstance(value, (str, torch.device)) else None
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise _fail(name, expected, value)
    missing = f"{name or 'device'} {value!r} is not available"
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{missing}: this torch build or machine has no CUDA device (use cpu)")
    if device.type == "cuda" and device.index is not None \
            and device.index >= torch.cuda.device_count():
        raise ValueError(f"{missing}: {torch.cuda.device_count()} CUDA device(s) here")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{missing} on this machine (use cpu)")
    return str(value)


def check_prompt(value, name: str = "prompt") -> str:
    """A non-empty string that is valid Unicode text (no lone surrogates, which is how Python
    carries invalid UTF-8 bytes from a command line), so a tokenizer can encode it."""
    if not isinstance(value, str):
        raise _fail(name, "a string", value)
    if not value:
        raise ValueError(f"{name} is empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name} is not valid text: character {e.start} is {value[e.start]!r} "
                         f"(invalid UTF-8 or a lone surrogate)") from None
    return value


def text_file_stream(value, name: str = "file", max_line: int = MAX_LINE_BYTES):
    """``(number, line)`` of a UTF-8 text file (a leading byte-order mark dropped), read as they
    are iterated, so a caller that needs the first N lines never reads the rest of a huge file.
    One line naming the cause when it is missing, a directory or not a regular file (a FIFO, a
    device), at the call, or when a line is not UTF-8 or longer than ``max_line`` bytes."""
    path = Path(value)
    if not path.exists():
        raise ValueError(f"{value}: no such {name}")
    if path.is_dir():
        raise ValueError(f"{value}: is a directory, not a {name}")
    if not stat.S_ISREG(path.stat().st_mode):
        raise ValueError(f"{value}: is not a regular file (a FIFO, socket or device); "
                         f"give a {name}")
    check_path_length(path, name)

    def lines():
        with open(path, "rb") as fh:
            offset = 0
            for number, raw in enumerate(iter(lambda: fh.readline(max_line + 1), b""), 1):
                if len(raw) > max_line:
                    raise ValueError(f"{value}:{number}: a line longer than {max_line >> 20} MiB; "
                                     f"one prompt per line")
                if number == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[3:]
                    offset = 3
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ValueError(f"{value}: not UTF-8 text (byte {offset + e.start}: "
                                     f"{e.reason})") from None
                offset += len(raw)
                yield number, text.rstrip("\r\n")
    return lines()


# ----------------------------------------------------------------------------- model shapes
def check_model_shape(config: dict, num_layers_key: str = "num_layers", embeddings: int = 2) -> int:
    """A model config (a target's ``config.json`` or a drafter's) that is safe to build: positive
    integer sizes, ``layer_types`` (when given) with one entry per layer, and an estimated parameter
    count under :data:`MAX_PARAMETERS`, so a typo cannot ask for terabytes. Returns the estimate."""
    if not isinstance(config, dict):
        raise ValueError(f"the config must be a JSON object, got {type(config).__name__}")
    sizes = {key: check_int(key, config.get(key)) for key in (*SHAPE_KEYS, num_layers_key)}
    heads, kv_heads = sizes["num_attention_heads"], sizes["num_key_value_heads"]
    head_dim = check_int("head_dim", config.get("head_dim") or sizes["hidden_size"] // heads)
    layers, hidden = sizes[num_layers_key], sizes["hidden_size"]
    if (layer_types := config.get("layer_types")) is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers:
            got = len(layer_types) if isinstance(layer_types, list) else repr(layer_types)
            raise ValueError("layer_types must list one entry per layer "
                             f"({num_layers_key}={layers}), got {got}")
    per_layer = (hidden * head_dim * (2 * heads + 2 * kv_heads)
                 + 3 * hidden * sizes["intermediate_size"])
    parameters = layers * per_layer + embeddings * sizes["vocab_size"] * hidden
    if parameters > MAX_PARAMETERS:
        raise ValueError(f"this config describes about {parameters / 1e9:.0f}B parameters, "
                         f"over the {MAX_PARAMETERS / 1e9:.0f}B this package builds "
                         f"({num_layers_key}={layers}, hidden_size={hidden}, "
                         f"intermediate_size={sizes['intermediate_size']})")
    return parameters


def available_memory(device: str | torch.device = "cpu") -> int | None:
    """Bytes that can still be allocated on ``device`` (CPU: the kernel's ``MemAvailable``; CUDA:
    the free device memory), or None when this machine does not say."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.mem_get_info(device.index or 0)[0]
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _size(nbytes: float) -> str:
    return f"{nbytes / 2 ** 30:.1f} GiB" if nbytes >= 2 ** 30 else f"{nbytes / 2 ** 20:.0f} MiB"


def check_memory(what: str, nbytes: float, device: str | torch.device = "cpu",
                 how: str = "") -> float:
    """Refuse, with one line, to allocate ``nbytes`` for ``what`` when ``device`` has less free
    memory than that, before anything is allocated (``how``: what the estimate counts)."""
    free = available_memory(device)
    if free is not None and nbytes > free:
        counted = f" ({how})" if how else ""
        raise ValueError(f"{what} needs about {_size(nbytes)}{counted}, more than the "
                         f"{_size(free)} free on {device}; choose a smaller setting")
    return nbytes


# ----------------------------------------------------------------------------- output paths
def check_path_length(path: Path, name: str | None) -> Path:
    """A path the file system can name: no part longer than :data:`NAME_MAX` bytes and the whole
    under :data:`PATH_MAX`, so a typo is a usage error, not ``OSError: File name too long``."""
    encoded = os.fsencode(str(path))
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > NAME_MAX or len(encoded) > PATH_MAX:
        shown = str(path) if len(str(path)) <= 60 else f"{str(path)[:40]}...{str(path)[-12:]}"
        raise ValueError(f"{_named(name)}{shown!r} is too long a path ({len(encoded)} bytes, a "
                         f"name of {longest}); names may have at most {NAME_MAX} bytes, "
                         f"paths {PATH_MAX}")
    return path


def _check_creatable(path: Path, name: str | None, shown: Path) -> None:
    """``path`` can be created or replaced: its nearest existing ancestor is a writable
    directory. The message names ``shown``."""
    base = next((f for f in (path.parent, *path.parent.parents) if f.exists()), Path("."))
    if not base.is_dir():
        raise ValueError(f"{_named(name)}{str(shown)!r} cannot be written: {str(base)!r} is a "
                         "file, not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        where = "" if base == shown else f" in {str(base)!r}"
        raise ValueError(f"{_named(name)}{str(shown)!r} cannot be written: no write "
                         f"permission{where}")


def check_output_file(value, name: str | None = "output file") -> Path:
    """A file path that can be written: not a directory, in a folder that can be made or written."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise _fail(name, "a non-empty file path", value)
    path = check_path_length(Path(value), name)
    if path.is_dir():
        raise ValueError(f"{_named(name)}{str(path)!r} is a directory; give a file path")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        raise ValueError(f"{_named(name)}{str(path)!r} is not a regular file (a device, FIFO or "
                         f"socket); give a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{_named(name)}{str(path)!r} cannot be written: no write permission")
    _check_creatable(path, name, path)
    return path


def check_output_dir(value, name: str | None = "output directory") -> Path:
    """A directory path that can be written (it is not an existing file)."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise _fail(name, "a non-empty directory path", value)
    path = check_path_length(Path(value), name)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{_named(name)}{str(path)!r} is an existing file, not a directory")
    _check_creatable(path / "x", name, path)
    return path


# ----------------------------------------------------------------------------- argparse
class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2): the message names the flag and its range."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def arg_type(check, convert=int, **limits):
    """An argparse ``type=``: ``convert`` the text, then ``check(name=None, value=..., **limits)``;
    argparse prefixes the flag, so the message reads ``argument --repeats: must be ...``."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = text                  # the check names the expected type and shows the text
        try:
            return check(name=None, value=value, **limits)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = getattr(check, "__name__", "value")
    return parse


POS = arg_type(check_int)           # an integer >= 1: the argparse type every command uses
block_sizes_arg = arg_type(check_block_sizes, lambda text: tuple(map(int, text.split(","))))
device_arg = arg_type(check_device, str)
