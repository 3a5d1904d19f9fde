"""What submitted code may not do inside the grader's process (:mod:`dflash_lite.course.grader`).

:func:`guard` installs an audit hook (:pep:`578`) that refuses, while submitted code is on the
stack, whatever reaches the grader's frames or objects, starts a process or a thread, builds code
objects, or opens the instructor's files; :func:`cell_namespace` and :class:`Plain` are what a check
sees of the submission; :func:`_fingerprint` and :func:`_changed` tell what it patched. Python is
not a sandbox: this closes the ways in that the listed events cover, and the process around the
grader (:mod:`.sandbox`) closes the files (docs/teaching.md#what-autograde-runs)."""
from __future__ import annotations

import builtins
import os
import sys
import types
from pathlib import Path, PosixPath, PurePath, PurePosixPath
from stat import S_ISDIR

# the file names submitted code is compiled under: the submission's, a solution cell a check re-runs
SUBMITTED = "<submission>"
STUDENT_FILES = frozenset({SUBMITTED, "<solution cell>"})


class Refused(RuntimeError):
    """Raised inside submitted code that tried something the grader does not allow."""


GUARDED = frozenset({
    "sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace",
    "sys.setprofile", "sys._getframemodulename", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "_thread.start_new_thread", "os.fork", "os.forkpty", "os.system",
    "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.kill", "os.killpg",
    "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.addressof",
    "ctypes.string_at", "ctypes.wstring_at", "ctypes.call_function", "code.__new__",
    "function.__new__", "marshal.loads", "socket.connect", "os.chdir", "os.fchdir", "os.symlink",
    "os.link"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
# library code that may look at frames while a submission is on the stack (and hands none back)
FRAME_READERS = ("warnings", "typing", "collections", "enum", "logging", "dataclasses", "abc")


def _student_code(code) -> bool:
    return code.co_filename in STUDENT_FILES


def _is_submitted_function(value) -> bool:
    return isinstance(value, types.FunctionType) and _student_code(value.__code__)


def _normal(path: str, cwd: str) -> str:
    """``path`` made absolute from ``cwd``, its ``.``, ``..`` and doubled slashes resolved as text
    (str methods only: nothing a submission can rebind)."""
    parts: list[str] = []
    for part in (path if path.startswith("/") else cwd + "/" + path).split("/"):
        if part == "..":
            parts = parts[:-1]
        elif part and part != ".":
            parts.append(part)
    return "/" + "/".join(parts)


PROTECT = "dflash_lite.guard.protect"     # the event by which guard() adds protected paths


def _guard(getcwd=os.getcwd, stat=os.stat, is_dir=S_ISDIR,
           realpath=os.path.realpath, path_types=(PurePosixPath, PosixPath),
           path_str=PurePath.__str__, path_fspath=PurePath.__fspath__,
           encoding=sys.getfilesystemencoding(), getframe=sys._getframe, student=STUDENT_FILES,
           guarded=GUARDED, frame_attributes=FRAME_ATTRIBUTES, frame_readers=FRAME_READERS,
           refused=Refused, normal=_normal, protect=PROTECT, isinstance=isinstance, type=type,
           any=any):
    """The audit hook :func:`guard` installs: the objects reached are frames, garbage-collector
    lists, tracing and ctypes; ``exec``/``compile`` are refused when the submission calls them.
    Every name it uses is bound here, at install: a submission that rebinds one (and puts it back
    before the check ends) changes nothing. The protected paths live here only, added to by the
    :data:`PROTECT` event while no submitted code is on the stack."""
    busy, protected = [False], []

    def caller_and_student():
        first = frame = getframe(2)             # the hook's caller's caller: who raised the event
        while frame is not None and frame.f_code.co_filename not in student:
            frame = frame.f_back
        return first, frame is not None

    def opens_protected(target) -> bool:
        """A path, by any spelling (bytes, relative, through a link), of a protected file; a
        directory (a base for ``dir_fd``); or an object whose path it cannot read safely."""
        if isinstance(target, (str, bytes)):
            path = target.decode(encoding, "surrogateescape") if isinstance(target, bytes) \
                else target
        elif type(target) in path_types and type(target).__str__ is path_str \
                and type(target).__fspath__ is path_fspath:
            path = path_str(target)
        else:
            return not isinstance(target, int)          # an open file descriptor is no path
        path = normal(path, getcwd())
        try:
            directory = is_dir(stat(path).st_mode)
        except OSError:
            directory = False
        return directory or any(p.startswith(q) for p in (path, realpath(path)) for q in protected)

    def hook(event, args):
        if busy[0] or not (event in guarded or event in ("exec", "compile", "open", protect) or (
                event == "object.__getattr__" and args[1] in frame_attributes)):
            return
        busy[0] = True
        try:
            caller, on_stack = caller_and_student()
            if not on_stack:
                if event == protect:
                    protected.extend(p for p in args if p not in protected)
                return
            module = (caller.f_globals.get("__name__") or "") if caller is not None else ""
            by_student = caller is not None and caller.f_code.co_filename in student
            if event in ("exec", "compile"):
                refuse = by_student or module in ("timeit", "runpy", "code", "codeop", "pdb", "bdb")
            elif event == "open":
                refuse = opens_protected(args[0])
            elif event == "sys._getframe" and not by_student:
                refuse = module.split(".")[0] not in frame_readers
            else:
                refuse = True
        finally:
            busy[0] = False
        if refuse:
            raise refused(f"the grader does not let submitted code use {event}")

    return hook


_INSTALLED: list = []


def guard(protected: list[str]) -> None:
    """Install the audit hook once in this process (it cannot be removed: grading processes are
    throwaway); ``protected``: paths no submitted code may open (added to on later calls), as given
    and with their links resolved."""
    if not _INSTALLED:
        _INSTALLED.append(True)
        sys.addaudithook(_guard())
    for path in protected:
        sys.audit(PROTECT, _normal(path, os.getcwd()), os.path.realpath(path))


def _student_made(cls) -> bool:
    """A class the submission wrote (a method of its own anywhere in the class's MRO)."""
    return any(_is_submitted_function(f) for klass in cls.__mro__ for value in vars(klass).values()
               for f in (value, getattr(value, "__func__", None), getattr(value, "fget", None)))


def plain(value, depth: int = 0):
    """``value`` when it holds only plain data, tensors and library objects; a TypeError for an
    instance of a class the submission wrote (one whose ``__eq__`` says yes to anything, say)."""
    if depth > 20:
        raise TypeError("the result nests too deep")
    kind = type(value)
    if kind in (list, tuple, set, frozenset):
        return kind(plain(v, depth + 1) for v in value)
    if kind is dict:
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    if _student_made(kind):
        raise TypeError(f"a submitted function returned a {kind.__name__}, a class of the "
                        "submission: checks compare plain values")
    return value


class Plain:
    """A submitted function as a check calls it: the same call, its result :func:`plain`."""

    def __init__(self, function):
        self.__wrapped__ = function
        self.__name__ = function.__name__

    @property
    def __globals__(self) -> dict:
        return self.__wrapped__.__globals__

    def __call__(self, *args, **kwargs):
        return plain(self.__wrapped__(*args, **kwargs))


def cell_namespace(base: dict, namespace: dict) -> dict:
    """The namespace a test cell and its hidden check run in: the instructor's names as the
    instructor has them, the submission's other names, but none that hides a builtin (a
    submitted ``all`` or ``isinstance``), and each submitted function as :class:`Plain`."""
    ns = {}
    for name, value in namespace.items():
        if name in base:
            ns[name] = base[name]
        elif not hasattr(builtins, name):
            ns[name] = Plain(value) if _is_submitted_function(value) else value
    return ns


WATCHED = ("builtins", "math", "statistics", "json", "json.encoder", "os", "pathlib", "ast",
           "torch", "torch.testing", "torch.nn.functional", "numpy", "numpy.testing")


def _watched():
    """The namespaces a submission could patch to change a check: this package's modules, the
    hidden checks, the builtins, and the parts of torch and numpy that checks compare with."""
    import torch

    for name, module in list(sys.modules.items()):
        if module is not None and (name in WATCHED or name.split(".")[0] == "dflash_lite"):
            yield name, module
    yield "torch.Tensor", torch.Tensor
    yield "pathlib.Path", Path


def _fingerprint() -> dict:
    """id() of every attribute of the watched namespaces."""
    return {name: {k: id(v) for k, v in list(vars(space).items())} for name, space in _watched()}


def _changed(before: dict) -> list[str]:
    """The watched namespaces changed since ``before``; new attributes are fine (lazy imports)."""
    now = {name: vars(space) for name, space in _watched()}
    return [name for name, marks in before.items() if any(
        k not in now.get(name, {}) or id(now[name][k]) != v for k, v in marks.items())]
