"""Where a run may write and how it replaces a directory: the marker, the refused places, replacing
last and the lock (README.md#safety, "What --out will touch" to "The lock"). Standard library only,
so that the lock is taken before anything heavy loads."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Callable

try:
    import fcntl
except ImportError:                     # not on Windows: there the lock is not taken
    fcntl = None

from .validate import check_output_dir, check_output_file

MARKER = ".dflash-lite-output"
PACKAGE = Path(__file__).resolve().parent
SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/sys", "/proc",
          "/dev", "/System")
# refused as a whole only
SHARED = ("/opt", "/var", "/srv", "/snap", "/tmp", "/Applications", "/Library")
_HELD: dict[Path, int] = {}             # lock file -> open descriptor, for this process
_TEMPORARY = re.compile(r"\..+\.[A-Za-z0-9_]{8}\.tmp")      # dflash_lite.files.atomic_path's names
LOCK_TEXT = "dflash-lite lock, pid {pid}\n"
_OWN_LOCK = re.compile(rb"(dflash-lite lock, pid )?\d*\n?")   # or an older run's bare pid, or empty


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def refusal(out: str | os.PathLike) -> str | None:
    """Why ``out`` may not be a run's output directory, or None when it may."""
    path = _resolved(Path(out))
    if path == PACKAGE or PACKAGE in path.parents:
        return "is inside the dflash_lite package, whose files are shipped, not written by runs"
    home = _resolved(Path.home())
    named = {"the root directory": Path(path.anchor), "the home directory": home,
             "the working directory": _resolved(Path.cwd()), "the dflash_lite package": PACKAGE,
             "~/.cache": home / ".cache",
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
    return not out.is_dir() or all(p.is_dir() or p.name == MARKER or is_temporary(p)
                                   for p in out.rglob("*"))


def is_temporary(path: Path) -> bool:
    """``path`` is a temporary file that :func:`dflash_lite.files.atomic_path` names, left by a
    killed run (empty or partial, never renamed into place): it does not make a folder non-empty."""
    return bool(_TEMPORARY.fullmatch(path.name)) and path.is_file() and not path.is_symlink()


def check_out(out: str | os.PathLike, overwrite: bool) -> Path:
    """``out`` as a run's output: writable (:func:`dflash_lite.validate.check_output_dir`), not a
    refused place, and with ``overwrite`` a real directory this project wrote (with the marker)."""
    out = check_output_dir(out, "out")
    if why := refusal(out):
        raise ValueError(f"out {str(out)!r} {why}; choose a directory of its own")
    if overwrite and not holds_nothing(out):
        if out.is_symlink():
            raise ValueError(f"out {str(out)!r} is a symbolic link; --overwrite replaces only a "
                             "real directory")
        if not is_marked(out):
            raise ValueError(f"out {str(out)!r} was not written by dflash-lite (it has no {MARKER} "
                             "file); --overwrite replaces only a run's own directory: remove it "
                             "yourself or choose another")
    for beside in (_beside(out, "new"), _beside(out, "old")):  # both replaced or deleted by a run
        if os.path.lexists(beside) and not _own_dir(beside):
            raise ValueError(f"{str(beside)!r} is in the way of out {str(out)!r} and was not "
                             f"written by dflash-lite (no {MARKER} file); remove or rename it")
    return out


def _own_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and is_marked(path)


# ------------------------------------------------------------------- the one guard for every output
def guard_output_file(path: str | os.PathLike, name: str = "output file", overwrite: bool = False,
                      own: Callable[[Path], bool] | None = None) -> Path:
    """``path`` as a file a command may write, checked before any work (one ``ValueError`` line):
    nameable, in a writable folder, not a refused place (:func:`refusal`), directory, device or
    FIFO; unless ``overwrite``, not a symbolic link and, when it exists, ``own(path)``."""
    path = check_output_file(path, name)
    if why := refusal(path):
        raise ValueError(f"{name} {str(path)!r} {why}; write it somewhere of your own")
    if os.path.lexists(path):
        if path.is_symlink() and not overwrite:
            raise ValueError(f"{name} {str(path)!r} is a symbolic link; pass --overwrite to "
                             f"replace the link with the file, or choose another name")
        if not overwrite and own is not None and not _owned(own, path):
            raise ValueError(f"{name} {str(path)!r} exists and is not this project's output; pass "
                             f"--overwrite to replace it, or choose another name")
    return path


def guard_output_dir(path: str | os.PathLike, name: str = "output directory",
                     writes: tuple[str, ...] = (), overwrite: bool = False,
                     own: Callable[[Path], bool] | None = None, exclusive: bool = False) -> Path:
    """``path`` as a directory a command writes the files ``writes`` into, checked before any work
    (one ``ValueError`` line): writable, not a refused place (:func:`refusal`), and each of
    ``writes`` that exists checked by :func:`guard_output_file`. With ``exclusive`` (and ``own``),
    every file already there must be ``own`` (or the :data:`MARKER`) unless ``overwrite``."""
    directory = check_output_dir(path, name)
    if why := refusal(directory):
        raise ValueError(f"{name} {str(directory)!r} {why}; choose a directory of its own")
    for file in writes:
        guard_output_file(directory / file, name, overwrite, own)
    if exclusive and own is not None and not overwrite and directory.is_dir():
        foreign = next((p for p in sorted(directory.rglob("*")) if not p.is_dir()
                        and p.name != MARKER and not _owned(own, p)), None)
        if foreign is not None:
            shown = str(foreign.relative_to(directory))
            raise ValueError(f"{name} {str(directory)!r} holds {shown!r}, which it did not write; "
                             f"choose an empty or new directory")
    return directory


def _owned(own: Callable[[Path], bool], path: Path) -> bool:
    try:
        return bool(own(path))
    except (OSError, ValueError, RecursionError):
        return False


def is_json_with(keys: tuple[str, ...], limit: int = 64 << 20) -> Callable[[Path], bool]:
    """An ``own`` test for :func:`guard_output_file`: the file is a JSON object with all of ``keys``
    (and at most ``limit`` bytes), as this project's reports are."""
    def own(path: Path) -> bool:
        if not path.is_file() or path.stat().st_size > limit:
            return False
        data = json.loads(path.read_text(encoding="utf-8"))
        return isinstance(data, dict) and all(k in data for k in keys)
    return own


def _beside(out: str | os.PathLike, suffix: str) -> Path:
    """``.NAME.suffix`` beside ``out``: its lock, its staging (``new``) or ``old`` directory."""
    out = _resolved(Path(out))
    return out.parent / f".{out.name}.{suffix}"


def lock_path(out: str | os.PathLike) -> Path:
    return _beside(out, "lock")


def lock(out: str | os.PathLike) -> Path:
    """Hold ``out``'s lock until :func:`release` or the process ends (again in the same process: a
    no-op); one line naming the other run when held elsewhere. A lock file that is not this
    project's own (a symbolic link, never followed; a hard link; not a regular file; holding
    anything but a lock's pid) is refused, never written, truncated or deleted."""
    path = lock_path(out)
    if path in _HELD or fcntl is None:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    foreign = (f"{str(path)!r} is in the way of out {str(out)!r} and is not a dflash-lite lock; "
               f"remove or rename it yourself")
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.ENXIO, errno.EACCES,
                       errno.EPERM):
            raise ValueError(foreign) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > 64 \
                or not _OWN_LOCK.fullmatch(os.pread(fd, 65, 0)):
            raise ValueError(foreign)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ValueError(f"out {str(out)!r} is being written by another run (it holds "
                             f"{path.name}); wait for it to finish or choose another directory"
                             ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, LOCK_TEXT.format(pid=os.getpid()).encode(), 0)
    _HELD[path] = fd
    return path


def release(out: str | os.PathLike) -> None:
    path = lock_path(out)
    if (fd := _HELD.pop(path, None)) is not None:
        path.unlink(missing_ok=True)  # while still held, so no other run holds a deleted file
        os.close(fd)


def mark(directory: Path, what: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if not is_marked(directory):
        (directory / MARKER).write_text(json.dumps({"written_by": "dflash-lite",
                                                    "what": what}) + "\n")
    return directory


def begin(out: str | os.PathLike, replace: bool, what: str,
          resumable: Callable[[Path], bool] = lambda directory: False) -> Path:
    """The directory a run writes into: ``out`` (made and marked), or with ``replace`` the staging
    directory beside it, kept if ``resumable(staging)`` says it is this run's, else made afresh."""
    if not replace:
        return mark(Path(out), what)
    stage = _beside(out, "new")
    if stage.exists() and not (is_marked(stage) and resumable(stage)):
        if not _own_dir(stage):
            raise ValueError(f"{str(stage)!r} is in the way of --overwrite and was not written by "
                             "dflash-lite; remove it yourself")
        shutil.rmtree(stage)                   # a staging directory of an earlier, different run
    return mark(stage, what)


def commit(work: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Put a finished run in place: when ``work`` is a staging directory, the old ``out`` is moved
    aside, ``work`` renamed to ``out``, and only then the old one deleted. Releases the lock. An
    ``out`` that is a symbolic link stays one: the directory it points to is what is replaced."""
    work, out, given = Path(work), _resolved(Path(out)), Path(out)
    if _resolved(work) != out:
        old = _beside(out, "old")
        if os.path.lexists(old) and not _own_dir(old):
            raise ValueError(f"{str(old)!r} is in the way of out {str(out)!r} and was not "
                             f"written by dflash-lite; remove or rename it (the new run is in "
                             f"{str(work)!r})")
        if old.exists() and not out.exists():
            os.replace(old, out)  # a run died between the two renames: the old one goes back
        elif old.exists():
            shutil.rmtree(old)                 # a run died before deleting the old one (marked)
        if out.exists():
            os.replace(out, old)
        os.replace(work, out)
        if old.exists():
            shutil.rmtree(old)
    release(out)
    return given
