"""Run a command where a student's code cannot reach the grader: Linux namespaces, stdlib only.

``python -I sandbox.py [--hide DIR]... [--read-only DIR]... [--writable DIR]... [--memory-mb N]
-- COMMAND...`` runs COMMAND

* in its own **user and mount namespaces**: every ``--read-only`` folder is mounted read-only, and
  every ``--hide`` folder is covered by an empty, read-only tmpfs, so the command can neither read
  nor change them;
* in its own **PID namespace**, as its process 1: when it ends, or when this launcher is killed,
  the kernel kills every process it started, double-forked daemons included;
* under a limit on its address space (``--memory-mb``).

The launcher stays outside, forwards SIGINT, SIGTERM and SIGHUP to the command and exits with its
status, so a Jupyter kernel manager can interrupt and kill it as it would the kernel; if the
process that started it ends first (a grader stopped by Ctrl-C or killed), it kills the command.
Where the kernel refuses unprivileged namespaces, the command runs in a session of its own with
the limits only, and the launcher says so on stderr (:func:`available` tells beforehand). The
module imports nothing from this package: it runs as a file, before the package could be touched.
What grading mounts how: docs/teaching.md#what-autograde-runs."""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import signal
import sys
import time

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(libc, source, target: str, fstype, flags: int, data=None) -> None:
    source, fstype, data = (None if s is None else s.encode() for s in (source, fstype, data))
    _check(libc.mount(source, target.encode(), fstype, flags, data), f"mount {target}")


def _enter_namespaces(libc) -> None:
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _set_up_mounts(libc, hide: list[str], read_only: list[str], writable: list[str]) -> None:
    """In process 1 of the new namespaces: the mounts the module's docstring lists, kept private;
    ``read_only`` folders are bind mounts of themselves, ``writable`` ones inside stay writable."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    for folder in writable:
        if os.path.isdir(folder):
            _mount(libc, folder, folder, None, MS_BIND)
    for folder in read_only:
        if os.path.isdir(folder):
            _mount(libc, folder, folder, None, MS_BIND | MS_REC)
            _mount(libc, None, folder, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
    for folder in hide:
        if os.path.isdir(folder):
            _mount(libc, "tmpfs", folder, "tmpfs", MS_NOSUID, "size=4k,mode=0555")
            _mount(libc, None, folder, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def available() -> str | None:
    """None where user, mount and PID namespaces can be made here; else why not, in a few words."""
    pid = os.fork()
    if pid == 0:
        try:
            _enter_namespaces(ctypes.CDLL(None, use_errno=True))
            os._exit(0)
        except OSError:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else \
        "this kernel refuses unprivileged user namespaces"


def _wait_forwarding(child: int, parent: int | None = None) -> int:
    """Wait for ``child``, passing on the signals a kernel manager sends; its exit code. With
    ``parent``, kill ``child``'s group once this process is no longer ``parent``'s (reparented:
    the grader that started it is gone), so that no command outlives it. (No thread watches: a
    process that left its PID namespace cannot start one.)"""
    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signum)     # the child leads a process group: it and what it started
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            done, status = os.waitpid(child, 0 if parent is None else os.WNOHANG)
        except InterruptedError:
            continue
        if done:
            return os.waitstatus_to_exitcode(status)
        if os.getppid() != parent:
            forward(signal.SIGKILL, None)
            parent = None                # then wait for it to go
        else:
            time.sleep(0.2)


def run(command: list[str], hide: list[str] = (), read_only: list[str] = (),
        writable: list[str] = (), memory_mb: int | None = None) -> int:
    """Run ``command`` sandboxed (see the module's docstring) and return its exit code."""
    libc = ctypes.CDLL(None, use_errno=True)
    isolated = True
    with contextlib.suppress(OSError):
        os.setsid()                          # a session of its own, where it is not one already
    try:
        _enter_namespaces(libc)
    except OSError as e:
        print(f"sandbox: no namespaces ({e.strerror}); the command runs with limits only",
              file=sys.stderr, flush=True)
        isolated = False
    child = os.fork()
    if child == 0:
        try:
            # a process group of its own, so that a kernel manager's killpg reaches only this
            # launcher, and the command gets each signal once (not once per forwarder)
            os.setpgid(0, 0)
            if isolated:
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                _set_up_mounts(libc, hide, read_only, writable)
            if memory_mb:
                resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
            # process 1 ignores signals it has no handler for: the command runs as process 2
            if isolated:
                grandchild = os.fork()
                if grandchild:
                    _lead_group(grandchild)
                    os._exit(_wait_forwarding(grandchild))
                os.setpgid(0, 0)
                if "JPY_PARENT_PID" in os.environ:  # a kernel watches its parent: process 1 here
                    os.environ["JPY_PARENT_PID"] = str(os.getppid())
            os.execvp(command[0], command)
        except BaseException as e:  # noqa: BLE001  (a child that cannot start says why, once)
            print(f"sandbox: {e}", file=sys.stderr, flush=True)
            os._exit(126)
    _lead_group(child)
    return _wait_forwarding(child, os.getppid())


def _lead_group(child: int) -> None:
    """Make ``child`` lead its process group from the parent's side too, so that no signal
    forwarded right after the fork misses it (the child may have done it already, or exec'd)."""
    with contextlib.suppress(OSError):
        os.setpgid(child, child)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbox.py", description=__doc__.split("\n")[0])
    for flag in ("--hide", "--read-only", "--writable"):
        parser.add_argument(flag, action="append", default=[])
    parser.add_argument("--memory-mb", type=int)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    return run(command, args.hide, args.read_only, args.writable, args.memory_mb)


if __name__ == "__main__":
    sys.exit(main())
