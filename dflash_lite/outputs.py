"""Output directories that are safe to write and to replace: the one place ``train`` and the zoo
decide where a run may write (README, "Safety").

* **A marker.** Every output directory a run makes holds :data:`MARKER`. ``--overwrite`` replaces
  only a directory that has it, so it can never remove something this project did not write.
* **Refused places.** The package's own folders, system folders (``/usr``, ``/etc``, ``/opt``, ...),
  ``~/.cache``, and the home, root or working directory (or any folder holding one of them) are
  never written as a run's output; the refusal names why.
* **Replacing last.** With ``--overwrite`` a run writes into a staging directory beside ``--out``
  (:func:`begin`); only when it has finished is the old directory moved aside, the new one moved
  in, and the old one deleted (:func:`commit`). A failure before that leaves ``--out`` as it was,
  and an interrupted run leaves a staging directory that the same command resumes.
* **A lock.** :func:`lock` takes an exclusive ``flock`` on a file beside ``--out`` for the life of
  the process, so a second run into the same ``--out`` is refused while the first one runs. The
  operating system drops the lock when the process ends, however it ends.

Only the standard library is used here, so that the lock can be taken before anything heavy loads.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

from .validate import check_output_dir

try:
    import fcntl
except ImportError:                     # not on Windows: there the lock is not taken
    fcntl = None

from .validate import check_output_dir

MARKER = ".dflash-lite-output"
PACKAGE = Path(__file__).resolve().parent
SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/sys", "/proc", "/dev", "/System")
SHARED = ("/opt", "/var", "/srv", "/snap", "/tmp", "/Applications", "/Library")   # refused as a whole only
_HELD: dict[Path, int] = {}             # lock file -> open descriptor, for this process


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def refusal(out: str | os.PathLike) -> str | None:
    """Why ``out`` may not be a run's output directory, or None when it may."""
    path = _resolved(Path(out))
    if path == PACKAGE or PACKAGE in path.parents:
        return "is inside the dflash_lite package, whose files are shipped, not written by runs"
    home = _resolved(Path.home())
    here = _resolved(Path.cwd())
    named = {"the root directory": Path(path.anchor), "the home directory": home, "the working directory": here,
             "the dflash_lite package": PACKAGE, "~/.cache": home / ".cache",
             **{f"the system folder {s}": Path(s) for s in SYSTEM + SHARED}}
    for name, place in named.items():
        if path == place or path in place.parents:
            return f"is {name}" if path == place else f"holds {name}"
    for system in SYSTEM:
        if Path(system) in path.parents:
            return f"is inside the system folder {system}"
    return None


def is_marked(out: str | os.PathLike) -> bool:
    return (Path(out) / MARKER).is_file()


def holds_nothing(out: str | os.PathLike) -> bool:
    """``out`` is missing, or holds no file but the marker (empty folders left by a failed write do
    not count), so a run may write into it as into a new directory."""
    out = Path(out)
    if not out.is_dir():
        return True
    return all(p.is_dir() or p.name == MARKER for p in out.rglob("*"))


def check_out(out: str | os.PathLike, overwrite: bool) -> Path:
    """``out`` as a run's output: writable (:func:`dflash_lite.validate.check_output_dir`), not a
    refused place, and with ``overwrite`` a real directory this project wrote (it has the marker)."""
    out = check_output_dir(out, "out")
    why = refusal(out)
    if why:
        raise ValueError(f"out {str(out)!r} {why}; choose a directory of its own")
    if overwrite and not holds_nothing(out):
        if out.is_symlink():
            raise ValueError(f"out {str(out)!r} is a symbolic link; --overwrite replaces only a real directory")
        if not is_marked(out):
            raise ValueError(f"out {str(out)!r} was not written by dflash-lite (it has no {MARKER} file); "
                             f"--overwrite replaces only a run's own directory: remove it yourself or choose another")
    return out


def lock_path(out: str | os.PathLike) -> Path:
    out = _resolved(Path(out))
    return out.parent / f".{out.name}.lock"


def lock(out: str | os.PathLike) -> Path:
    """Hold ``out``'s lock until :func:`release` or the end of the process; one line naming the
    other run when it is held elsewhere. Taking it again in the same process is a no-op."""
    path = lock_path(out)
    if path in _HELD or fcntl is None:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ValueError(f"out {str(out)!r} is being written by another run (it holds {path.name}); "
                         f"wait for it to finish or choose another directory") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[path] = fd
    return path


def release(out: str | os.PathLike) -> None:
    path = lock_path(out)
    fd = _HELD.pop(path, None)
    if fd is not None:
        path.unlink(missing_ok=True)           # while still held, so no other run holds a deleted file
        os.close(fd)


def staging_path(out: str | os.PathLike) -> Path:
    out = _resolved(Path(out))
    return out.parent / f".{out.name}.new"


def mark(directory: Path, what: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if not is_marked(directory):
        (directory / MARKER).write_text(json.dumps({"written_by": "dflash-lite", "what": what}) + "\n")
    return directory


def begin(out: str | os.PathLike, replace: bool, what: str,
          resumable: Callable[[Path], bool] = lambda directory: False) -> Path:
    """The directory a run writes into: ``out`` itself (made and marked), or with ``replace`` the
    staging directory beside it, kept when ``resumable(staging)`` says it holds this run's
    checkpoint and otherwise started afresh."""
    if not replace:
        return mark(Path(out), what)
    stage = staging_path(out)
    if stage.exists() and not (is_marked(stage) and resumable(stage)):
        if not stage.is_dir() or stage.is_symlink() or not is_marked(stage):
            raise ValueError(f"{str(stage)!r} is in the way of --overwrite and was not written by dflash-lite; "
                             f"remove it yourself")
        shutil.rmtree(stage)                   # a staging directory of an earlier, different run
    return mark(stage, what)


def commit(work: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Put a finished run in place: when ``work`` is a staging directory, the old ``out`` is moved
    aside, ``work`` renamed to ``out``, and only then the old one deleted. Releases the lock."""
    work, out = Path(work), Path(out)
    if _resolved(work) != _resolved(out):
        old = out.parent / f".{out.name}.old"
        if old.exists() and not out.exists():
            os.replace(old, out)               # a run died between the two renames: the old one goes back
        elif old.exists():
            shutil.rmtree(old)                 # a run died before deleting the old one
        if out.exists():
            os.replace(out, old)
        os.replace(work, out)
        if old.exists():
            shutil.rmtree(old)
    release(out)
    return out
