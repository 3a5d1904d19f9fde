"""How a command stops on Ctrl-C and SIGTERM: one line and exit code 130 or 143 (README.md#safety,
"Signals"). Standard library only: it is imported before torch."""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

SIGINT_EXIT, SIGTERM_EXIT = 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be: a ``KeyboardInterrupt``, so whatever handles Ctrl-C
    (the trainer saves a checkpoint first) handles it too."""
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
    if previous[signal.SIGINT] is _quiet_stop:  # the imports are over: after main, stop quietly
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
