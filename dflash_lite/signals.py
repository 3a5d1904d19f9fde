"""How the command line stops: Ctrl-C and SIGTERM end a run with one line and a known exit code
(README, "Safety"). Only the standard library is used: this module is imported before torch.

* ``timeout``, Docker and Slurm stop a job with SIGTERM. Under :func:`handled` it raises
  :class:`Terminated`, a ``KeyboardInterrupt``, so every place that handles Ctrl-C (the trainer
  saves a checkpoint first) handles it too; the exit code is 143 (128 + 15) instead of 130.
* While ``python -m dflash_lite`` spends seconds importing torch, :func:`quiet_until_main` makes
  Ctrl-C print one line and exit 130 at once, not a traceback; ``main`` puts the handling back.
* Once a command is stopping, further signals are ignored (:func:`stopping`), so two Ctrl-C in a
  row still give one line and exit 130, never a traceback from inside the first one's handler."""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

SIGINT_EXIT, SIGTERM_EXIT = 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be."""
    signum = signal.SIGTERM


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_terminated(signum, frame):
    raise Terminated("terminated (SIGTERM)")


def exit_code(interrupt: BaseException) -> int:
    """143 when the interrupt came from SIGTERM, else 130."""
    return SIGTERM_EXIT if getattr(interrupt, "signum", None) == signal.SIGTERM else SIGINT_EXIT


def _quiet_stop(signum, frame):
    os.write(2, b"interrupted: nothing was written\n")
    os._exit(SIGTERM_EXIT if signum == signal.SIGTERM else SIGINT_EXIT)


def quiet_until_main() -> None:
    """Until a command's main runs: Ctrl-C (SIGTERM) prints one line and exits 130 (143)."""
    if _main_thread():
        signal.signal(signal.SIGINT, _quiet_stop)
        signal.signal(signal.SIGTERM, _quiet_stop)


@contextmanager
def handled() -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` and SIGTERM raises :class:`Terminated` inside the block;
    the handlers found on entry are back on exit."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    # the imports are over: after main, stop quietly
    if previous[signal.SIGINT] is _quiet_stop:
        previous = {s: signal.SIG_IGN for s in previous}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def stopping() -> None:
    """A command is stopping: ignore further Ctrl-C and SIGTERM while it says so and exits."""
    if _main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
