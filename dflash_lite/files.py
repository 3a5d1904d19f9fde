"""Writing files whole or not at all: the one atomic-write helper every writer in the package uses
(README.md#safety, "Every file")."""
from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

_UMASK = os.umask(0o022)
os.umask(_UMASK)                 # read the process umask once, so new files get the usual mode


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces it when the block ends without an error; else
    it is removed, with any parent folders this call made (no empty folder after a full disk). A
    replaced file keeps its mode; ``ValueError`` when ``path`` is a device, FIFO or socket."""
    path = Path(path)
    mode = 0o666 & ~_UMASK                  # a new file's usual mode
    if os.path.lexists(path):
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{str(path)!r} is not a regular file (a device, FIFO or socket); "
                             f"it is never replaced")
        mode = stat.S_IMODE(info.st_mode)
    made = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    done = False
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            yield Path(tmp)
            os.chmod(tmp, mode)                   # mkstemp makes it private: the file's mode
            os.replace(tmp, path)
            done = True
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    finally:
        for folder in made if not done else ():  # deepest first; only folders this call made
            try:
                folder.rmdir()
            except OSError:
                break


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
