"""What submitted code may not do inside the grader's process (:mod:`dflash_lite.course.grader`).

:func:`guard` installs an audit hook (:pep:`578`) that refuses, while submitted code is on the
stack, whatever reaches the grader's frames or objects, starts a process or a thread, builds code
objects, or opens the instructor's files; :func:`cell_namespace` and :class:`Plain` are what a check
sees of the submission; :func:`_fingerprint` and :func:`_changed` tell what it patched. Python is
not a sandbox: this closes the ways in that the listed events cover, and the process around the
grader (:mod:`.sandbox`) closes the files (docs/teaching.md#what-autograde-runs)."""
from __future__ import annotations

import builtins
import sys
import types
from pathlib import Path

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
    "function.__new__", "marshal.loads", "socket.connect"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
# library code that may look at frames while a submission is on the stack (and hands none back)
FRAME_READERS = ("warnings", "typing", "collections", "enum", "logging", "dataclasses", "abc")


def _student_code(code) -> bool:
    return code.co_filename in STUDENT_FILES


def _guard(protected: list[str]):
    """The audit hook :func:`guard` installs: the objects reached are frames, garbage-collector
    lists, tracing and ctypes; ``exec``/``compile`` are refused when the submission calls them."""
    getframe, busy = sys._getframe, [False]

    def caller_and_student():
        first = frame = getframe(2)             # the hook's caller's caller: who raised the event
        while frame is not None and not _student_code(frame.f_code):
            frame = frame.f_back
        return first, frame is not None

    def hook(event, args):
        if busy[0]:
            return
        sensitive = (event in GUARDED or event in ("exec", "compile", "open")
                     or (event == "object.__getattr__" and args[1] in FRAME_ATTRIBUTES))
        if not sensitive:
            return
        busy[0] = True
        try:
            caller, student = caller_and_student()
        finally:
            busy[0] = False
        if not student:
            return
        module = (caller.f_globals.get("__name__") or "") if caller is not None else ""
        by_student = caller is not None and _student_code(caller.f_code)
        if event in ("exec", "compile"):
            refuse = by_student or module in ("timeit", "runpy", "code", "codeop", "pdb", "bdb")
        elif event == "open":
            path = str(args[0]) if isinstance(args[0], (str, bytes)) else ""
            refuse = any(path.startswith(p) for p in protected)
        elif event == "sys._getframe" and not by_student:
            refuse = module.split(".")[0] not in FRAME_READERS
        else:
            refuse = True
        if refuse:
            raise Refused(f"the grader does not let submitted code use {event}")

    return hook


_GUARDED: list = []


def guard(protected: list[str]) -> None:
    """Install the audit hook once in this process (it cannot be removed: grading processes are
    throwaway); ``protected``: paths no submitted code may open (added to on later calls)."""
    if not _GUARDED:
        _GUARDED.append([])
        sys.addaudithook(_guard(_GUARDED[0]))
    _GUARDED[0].extend(p for p in protected if p not in _GUARDED[0])


def _student_made(cls) -> bool:
    """A class the submission wrote (a method of its own anywhere in the class's MRO)."""
    return any(isinstance(f, types.FunctionType) and _student_code(f.__code__)
               for klass in cls.__mro__ for value in vars(klass).values()
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


def _is_submitted_function(value) -> bool:
    return isinstance(value, types.FunctionType) and _student_code(value.__code__)


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
