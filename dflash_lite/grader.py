"""Scores that the student's kernel cannot change.

Autograding runs a student's notebook, and the notebook runs the student's code: anything it
prints, or any number a check returns in that kernel, the student can forge (one line,
``dflash_lite.exercises.score = lambda r, p: float(p)``, used to give full marks). So the points
are computed here, in a fresh process:

1. **Collect.** Before each graded test cell of the (throwaway) copy that is executed, the grader
   inserts a collector cell (:func:`collector_cell`). It writes the values the test cell uses as
   data (numbers, strings, lists, tensors, the package's dataclasses, drafters as safetensors) and,
   for the functions and classes the notebook defines, only their names.
2. **Score.** :func:`score_notebook` reads the executed copy, rebuilds those values (from plain
   data only), re-creates the notebook's functions and classes from the submitted notebook's source
   (``def``, ``class`` and imports only: no cell is run), runs each test cell's source as the
   *instructor's* notebook has it, and counts its points itself: the points of a ``score(check,
   points)`` cell when the check returned True, those of an assert cell when nothing raised. A
   grade id listed in the hidden checks (``instructor/hidden_checks.py``, shipped to neither
   students nor their package) must pass those too.
3. **Tampering.** The package, torch, numpy and the builtins are fingerprinted before any
   submitted code runs; a submission that changes them scores 0 from that cell on.

Run by ``course autograde``; by hand: ``python -m dflash_lite.grader SOURCE.ipynb EXECUTED.ipynb``.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import sys
import traceback
from pathlib import Path

from .checkpoints import load_drafter
from .cli import Parser              # one-line usage errors, exit 2, as the other commands
from .target import load_pretrained

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ROOT / "instructor" / "hidden_checks.py"
MARK = "DFLASH-GRADER-ANSWERS "
COLLECTOR_KEY = "dflash_grader_collector"


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _tree(source: str):
    """The cell's syntax tree, IPython magics and shell lines blanked."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def free_names(source: str) -> list[str]:
    """Names a cell reads without binding them first (its inputs), builtins left out."""
    tree = _tree(source)
    if tree is None:
        return []
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
            bound |= (
                {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
                if not isinstance(node, ast.ClassDef)
                else set()
            )
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.Lambda,)):
            bound |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        elif isinstance(node, ast.comprehension):
            bound |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    seen = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id not in bound
            and not hasattr(builtins, node.id)
            and node.id not in seen
        ):
            seen.append(node.id)
    return seen


# ---------------------------------------------------------------------------------------------
# 1. Collect (runs in the student's kernel; imports nothing from this package, which the student
#    may have patched)

COLLECTOR = r'''
def __dflash_collect(grade_id, names, store):
    import dataclasses, inspect, json, os, types
    from pathlib import PurePath
    g = globals()
    store = os.path.abspath(store)
    out, todo, done = {}, list(names), set()

    def enc(v, depth=0):
        if depth > 12:
            raise ValueError("too deep")
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if v == v and abs(v) != float("inf") else {"__float__": repr(v)}
        if isinstance(v, (list, tuple, set, frozenset)):
            items = [enc(x, depth + 1) for x in v]
            return items if isinstance(v, list) else {"__" + type(v).__name__ + "__": items}
        if isinstance(v, dict):
            return {"__dict__": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        if isinstance(v, PurePath):
            return {"__path__": str(v)}
        t = type(v)
        mod = t.__module__ or ""
        if mod.startswith("numpy"):
            return enc(v.tolist(), depth + 1)
        if mod.startswith("torch") and t.__name__ in ("Tensor", "Parameter"):
            return {"__tensor__": v.detach().cpu().tolist(), "dtype": str(v.dtype)[6:],
                    "shape": list(v.shape)}
        if mod.startswith("torch") and t.__name__ == "device":
            return {"__device__": str(v)}
        if mod.startswith("torch") and t.__name__ == "dtype":
            return {"__dtype__": str(v)[6:]}
        if isinstance(v, (types.FunctionType, type)):
            if getattr(v, "__module__", None) == "__main__":
                codes = [v.__code__] if isinstance(v, types.FunctionType) else [
                    f.__code__ for f in vars(v).values() if isinstance(f, types.FunctionType)]
                while codes:                     # the globals it reads, nested functions included
                    code = codes.pop()
                    codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
                    todo.extend(n for n in code.co_names if n in g and n not in done)
                return {"__code__": v.__name__}
            return {"__ref__": [v.__module__, v.__qualname__]}
        if hasattr(v, "name_or_path") and hasattr(v, "config") and hasattr(v, "forward"):
            return {"__hf__": str(v.name_or_path)}
        if hasattr(v, "convert_ids_to_tokens") and hasattr(v, "name_or_path"):
            return {"__tokenizer__": str(v.name_or_path)}
        if t.__name__ == "DFlashDrafter":
            os.makedirs(store, exist_ok=True)
            path = os.path.join(store, f"drafter{len(os.listdir(store))}")
            from dflash_lite.checkpoints import save_drafter
            save_drafter(v, path)
            return {"__drafter__": path}
        if mod.split(".")[0] == "dflash_lite":
            state = ({f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
                     if dataclasses.is_dataclass(v) else vars(v))
            return {"__obj__": [mod, t.__qualname__], "state": enc(state, depth + 1)}
        raise TypeError(f"cannot collect a {t.__name__}")

    while todo:
        name = todo.pop(0)
        if name in done or name not in g:
            continue
        done.add(name)
        if isinstance(g[name], types.ModuleType):
            continue
        try:
            out[name] = enc(g[name])
        except Exception as e:
            out[name] = {"__unsupported__": f"{type(e).__name__}: {e}"[:200]}
    return json.dumps({"grade_id": grade_id, "values": out})
'''


def collector_cell(grade_id: str, names: list[str], store: str = ".grader") -> dict:
    """The code cell inserted before the test cell ``grade_id``: it prints the values of
    ``names``."""
    import nbformat

    source = (
        COLLECTOR + f"\nprint({MARK!r} + __dflash_collect({grade_id!r}, {names!r}, {store!r}))"
        "\ndel __dflash_collect"
    )
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata[COLLECTOR_KEY] = grade_id
    return cell


def instrument(submitted, source) -> None:
    """Insert a collector cell before each graded test cell of ``submitted`` (in place); the
    names collected are those that the *source* notebook's test cell reads."""
    tests = {_nbgrader(c)["grade_id"]: c.source for c in source.cells if _nbgrader(c).get("grade")}
    cells = []
    for cell in submitted.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if _nbgrader(cell).get("grade") and grade_id in tests:
            cells.append(collector_cell(grade_id, free_names(tests[grade_id])))
        cells.append(cell)
    submitted.cells = cells


def _preprocessor_base():
    try:
        from nbconvert.preprocessors import Preprocessor
    except ImportError:  # nbgrader (and so nbconvert) not installed
        return object
    return Preprocessor


class InsertCollectors(_preprocessor_base()):
    """An nbconvert preprocessor for stock ``nbgrader autograde``: put it in
    ``Autograde.sanitize_preprocessors`` after ``OverwriteCells`` (course/nbgrader_config.py), so
    the autograded notebooks carry the values :func:`score_notebook` scores."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.enabled = True  # nbconvert registers classes disabled

    def preprocess(self, nb, resources):
        if not any(c.get("metadata", {}).get(COLLECTOR_KEY) for c in nb.cells):
            instrument(nb, nb)
        return nb, resources


def collected(executed) -> dict[str, dict]:
    """``{grade_id: {name: encoded value}}`` from the collector cells' outputs."""
    found = {}
    for cell in executed.cells:
        grade_id = cell.get("metadata", {}).get(COLLECTOR_KEY)
        if not grade_id:
            continue
        text = "".join(
            o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout"
        )
        for line in text.splitlines():
            if line.startswith(MARK):
                try:
                    data = json.loads(line[len(MARK) :])
                except ValueError:
                    continue
                if data.get("grade_id") == grade_id:
                    found[grade_id] = data.get("values", {})
    return found


# ---------------------------------------------------------------------------------------------
# 2. Score (a fresh process)


class Rebuilt:
    """Turns collected values back into objects; models are loaded from their files, safetensors
    only, and only classes of this package are re-created."""

    def __init__(self):
        self.models = {}

    def __call__(self, v, code: dict):
        if isinstance(v, list):
            return [self(x, code) for x in v]
        if not isinstance(v, dict):
            return v
        import torch

        if "__dict__" in v:
            return {self._key(k, code): self(x, code) for k, x in v["__dict__"]}
        for kind, make in (("__tuple__", tuple), ("__set__", set), ("__frozenset__", frozenset)):
            if kind in v:
                return make(self(x, code) for x in v[kind])
        if "__float__" in v:
            return float(v["__float__"])
        if "__path__" in v:
            return Path(v["__path__"])
        if "__tensor__" in v:
            dtype = getattr(torch, v["dtype"])
            return torch.tensor(v["__tensor__"], dtype=dtype).reshape(v["shape"])
        if "__device__" in v:
            return torch.device(v["__device__"])
        if "__dtype__" in v:
            return getattr(torch, v["__dtype__"])
        if "__code__" in v:
            if v["__code__"] not in code:
                raise LookupError(f"{v['__code__']} is not defined by the notebook's source")
            return code[v["__code__"]]
        if "__ref__" in v:
            module, qualname = v["__ref__"]
            if not module.split(".")[0] in ("dflash_lite", "torch", "numpy", "math", "statistics"):
                raise LookupError(f"{module}.{qualname} is not something the grader imports")
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            return obj
        if "__hf__" in v or "__tokenizer__" in v:
            name = v.get("__hf__") or v.get("__tokenizer__")
            if name not in self.models:
                self.models[name] = load_pretrained(name)
            return self.models[name][0 if "__hf__" in v else 1]
        if "__drafter__" in v:
            return load_drafter(v["__drafter__"]).eval()
        if "__obj__" in v:
            module, qualname = v["__obj__"]
            if module.split(".")[0] != "dflash_lite":
                raise LookupError(f"{module}.{qualname} is not a class of this package")
            cls = importlib.import_module(module)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            obj = cls.__new__(cls)
            obj.__dict__.update(self(v["state"], code))
            return obj
        if "__unsupported__" in v:
            raise TypeError(f"a value could not be collected ({v['__unsupported__']})")
        return v

    def _key(self, k, code):
        k = self(k, code)
        return tuple(k) if isinstance(k, list) else k


def definitions(notebook, solutions: bool = True) -> str:
    """The imports, functions and classes of a notebook's code cells (top level only), as
    source: what the grader needs of the notebook without running any of its cells. With
    ``solutions=False``, only the imports of the solution cells (the instructor's notebook: its
    solutions must never stand in for a student's)."""
    imports = (ast.Import, ast.ImportFrom)
    keep = imports + (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    parts = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or cell.get("metadata", {}).get(COLLECTOR_KEY):
            continue
        tree = _tree(cell.source)
        kinds = keep if solutions or not _nbgrader(cell).get("solution") else imports
        if tree is not None:
            parts += [ast.unparse(node) for node in tree.body if isinstance(node, kinds)]
    return "\n\n".join(parts)


SUBMITTED = "<submission>"          # the file name the submission's code is compiled under
STUDENT_FILES = frozenset({SUBMITTED, "<solution cell>"})   # and a solution cell re-run by a check


def _exec_each(source: str, namespace: dict) -> None:
    """Run each top-level statement of ``source`` on its own: one that fails (a stub that raises
    at definition time, an import that is missing) leaves the others defined."""
    tree = ast.parse(source) if source else ast.Module(body=[], type_ignores=[])
    for node in tree.body:
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), SUBMITTED, "exec"), namespace)
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# The guard: what submitted code may not do inside the grader's process

class Refused(RuntimeError):
    """Raised inside submitted code that tried something the grader does not allow."""


# events that reach the grader's frames, objects or memory, start a process or a thread, or make
# code the checks below would not recognise as the submission's
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
    """An audit hook (:pep:`578`) that refuses, while submitted code is on the stack, whatever
    reaches the grader's frames or objects (frames, garbage-collector lists, tracing, ctypes),
    starts a process or a thread, builds code objects, or opens the instructor's files;
    ``exec``/``compile`` are refused only when the submission calls them itself. Python is not a
    sandbox: this closes the ways in that the listed events cover, and the process around it
    (:mod:`dflash_lite.sandbox`) closes the files."""
    getframe, busy = sys._getframe, [False]

    def caller_and_student():
        frame = getframe(2)                     # the hook's caller's caller: who raised the event
        first, student = frame, False
        while frame is not None:
            if _student_code(frame.f_code):
                student = True
                break
            frame = frame.f_back
        return first, student

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
    throwaway); ``protected`` adds paths no submitted code may open."""
    if not _GUARDED:
        paths = [str(HIDDEN.parent), str(ROOT / "notebooks")]
        _GUARDED.append(paths)
        sys.addaudithook(_guard(paths))
    _GUARDED[0].extend(p for p in protected if p not in _GUARDED[0])


def _student_made(cls) -> bool:
    """A class the submission wrote (a method of its own anywhere in the class's MRO)."""
    import types

    for klass in cls.__mro__:
        for value in vars(klass).values():
            for f in (value, getattr(value, "__func__", None), getattr(value, "fget", None)):
                if isinstance(f, types.FunctionType) and _student_code(f.__code__):
                    return True
    return False


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
    import types

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


WATCHED = (
    "builtins",
    "math",
    "statistics",
    "json",
    "json.encoder",
    "os",
    "pathlib",
    "ast",
    "torch",
    "torch.testing",
    "torch.nn.functional",
    "numpy",
    "numpy.testing",
)


def _watched():
    """The namespaces a submission could patch to change a check: this package's modules, the
    instructor's hidden checks, the builtins, and the parts of torch and numpy checks compare with.
    """
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
    """The watched namespaces whose attributes changed since ``before`` (new ones are allowed:
    lazy imports add them)."""
    now = dict(_watched())
    changed = []
    for name, marks in before.items():
        space = vars(now[name]) if name in now else {}
        if any(k not in space or id(space[k]) != v for k, v in marks.items()):
            changed.append(name)
    return changed


def load_hidden(path: Path | None = HIDDEN) -> dict:
    """``{grade_id: check(namespace)}`` of the instructor's hidden checks; ``path=None`` for none.
    A missing file is an error (grading without them would skip every hidden check silently):
    they live in the repository's ``instructor/`` folder, which an installed wheel does not have."""
    if path is None:
        return {}
    if not Path(path).is_file():
        raise FileNotFoundError(f"the hidden checks are missing: no {path} (they are in the "
                                "repository's instructor/ folder; grade from a checkout)")
    spec = importlib.util.spec_from_file_location("hidden_checks", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["hidden_checks"] = module
    try:
        spec.loader.exec_module(module)
    finally:    # held by the returned checks only: no submitted code finds it by name
        sys.modules.pop("hidden_checks", None)
    return dict(module.CHECKS)


def _test_program(source: str):
    """The test cell's code, with its last ``score(check, points)`` turned into
    ``__dflash_result__ = check``; returns (code, True if it was a score cell)."""
    tree = _tree(source)
    last = tree.body[-1] if tree and tree.body else None
    scored = (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and getattr(last.value.func, "id", None) == "score"
        and last.value.args
    )
    if scored:
        tree.body[-1] = ast.Assign(
            targets=[ast.Name("__dflash_result__", ast.Store())], value=last.value.args[0]
        )
        ast.fix_missing_locations(tree)
    return compile(tree, "<test cell>", "exec"), bool(scored)


SOLUTION_KEY = "__dflash_solution__"


def solution_sources(notebook) -> dict[str, str]:
    """``{grade_id: source}`` of a notebook's solution cells (the student's code as submitted)."""
    return {
        _nbgrader(c)["grade_id"]: c.source
        for c in notebook.cells
        if c.cell_type == "code" and _nbgrader(c).get("solution") and _nbgrader(c).get("grade_id")
    }


def score_answers(
    source,
    answers: dict[str, dict],
    submission_defs: str,
    hidden: dict | None = None,
    solutions: dict[str, str] | None = None,
) -> dict[str, list]:
    """Points of every graded cell of the ``source`` notebook, from collected ``answers``
    (``{grade_id: {name: encoded value}}``) and the submission's definitions (source text).
    ``solutions``: the submission's solution cells (:func:`solution_sources`); a hidden check
    finds the one its test cell checks (grade id ``X_check`` checks ``X``) under
    ``SOLUTION_KEY``, to run the student's code of a cell that defines values, not functions,
    on other inputs. Returns ``{grade_id: [score, max_score, message]}``."""
    import matplotlib

    matplotlib.use("Agg")
    hidden = load_hidden() if hidden is None else hidden
    changed, fingerprint = _changed, _fingerprint        # bound before any submitted code runs
    base: dict = {"__name__": "__grader__"}
    _exec_each(definitions(source, solutions=False), base)  # the instructor's imports, helpers
    for name, value in list(base.items()):               # given helpers are the instructor's code
        if _is_submitted_function(value):
            value.__code__ = value.__code__.replace(co_filename="<instructor>")
    guard([])
    before = fingerprint()
    _exec_each(submission_defs, dict(base))  # the student's functions and classes, once to check
    rebuild = Rebuilt()
    report, tampered = {}, changed(before)
    for cell in source.cells:
        meta = _nbgrader(cell)
        if not meta.get("grade"):
            continue
        grade_id, points = meta["grade_id"], float(meta.get("points", 0))
        if tampered:
            report[grade_id] = [0.0, points, f"the submission changed {tampered[0]}"]
            continue
        if grade_id not in answers:
            report[grade_id] = [0.0, points, "not reached: the notebook stopped before this cell"]
            continue
        # the student's functions are defined in the namespace they read their globals from,
        # where the values collected for this cell go too; the test cell runs in its own
        namespace = dict(base)
        _exec_each(submission_defs, namespace)
        code = dict(namespace)
        try:
            for name, value in answers[grade_id].items():
                namespace[name] = rebuild(value, code)
            ns = cell_namespace(base, namespace)
            program, scored = _test_program(cell.source)
            exec(program, ns)
            passed = ns.get("__dflash_result__") is True if scored else True
            message = "" if passed else "the check did not pass"
            if passed and grade_id in hidden:
                ns[SOLUTION_KEY] = (solutions or {}).get(grade_id.removesuffix("_check"))
                hidden[grade_id](ns)
        except Exception as e:  # noqa: BLE001 (any failure is 0 points)
            passed, message = False, (f"{type(e).__name__}: {e}".splitlines() or [""])[0][:300]
        tampered = changed(before)
        if tampered:
            passed, message = False, f"the submission changed {tampered[0]}"
        report[grade_id] = [points if passed else 0.0, points, message]
    return report


def score_notebook(
    source_path: str | Path, executed_path: str | Path, hidden_path: str | Path | None = HIDDEN
) -> dict[str, list]:
    """Points of an executed, instrumented submission against its source notebook."""
    import nbformat

    source = nbformat.read(source_path, as_version=4)
    executed = nbformat.read(executed_path, as_version=4)
    hidden = load_hidden(Path(hidden_path) if hidden_path else None)
    return score_answers(
        source, collected(executed), definitions(executed), hidden, solution_sources(executed)
    )


def _read_notebooks(paths) -> list:
    """The notebooks at ``paths``, or one ValueError line naming the one that is not a notebook."""
    import nbformat

    read = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"{path} is not a file")
        try:
            read.append(nbformat.read(path, as_version=4))
        except Exception as e:  # noqa: BLE001  (nbformat raises several kinds for a non-notebook)
            raise ValueError(f"{path} is not a Jupyter notebook ({type(e).__name__})") from None
    return read


def _json_text(text: str) -> str:
    """A JSON string literal, by hand: the report is written without any module a submission
    could have patched."""
    out = []
    for ch in text:
        code = ord(ch)
        out.append(ch if 32 <= code < 127 and ch not in '"\\' else f"\\u{code:04x}"
                   if code < 0x10000 else "".join(f"\\u{u:04x}" for u in (
                       0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF))))
    return '"' + "".join(out) + '"'


def report_json(report: dict[str, list]) -> str:
    """``{grade_id: [score, max_score, message]}`` as JSON text (:func:`_json_text`)."""
    return "{" + ", ".join(f"{_json_text(g)}: [{float(a)!r}, {float(b)!r}, {_json_text(m)}]"
                           for g, (a, b, m) in report.items()) + "}"


def main(argv: list[str] | None = None) -> int:
    """Scores as one JSON object: on stdout, or with ``--report FILE`` into that file, after
    which the process ends at once (``os._exit``), so nothing a submission registered to run at
    exit can print or write after it. The writing is bound before any submitted code runs."""
    import os
    import shutil
    import tempfile

    write, open_, close, exit_, encode = os.write, os.open, os.close, os._exit, report_json
    parser = Parser(prog="python -m dflash_lite.grader", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="the instructor's notebook")
    parser.add_argument("executed", help="the executed, instrumented submission")
    parser.add_argument("--hidden", default=str(HIDDEN), help="the hidden checks (a .py file)")
    parser.add_argument("--report", help="write the scores here instead of stdout")
    args = parser.parse_args(argv)
    try:
        source, executed = _read_notebooks([args.source, args.executed])
        hidden = load_hidden(Path(args.hidden) if args.hidden else None)
    except (ValueError, FileNotFoundError) as e:
        parser.error(str(e))
    report_path = os.path.abspath(args.report) if args.report else None
    guard([p for p in (report_path, os.path.abspath(args.source),
                       args.hidden and os.path.dirname(os.path.abspath(args.hidden))) if p])
    scratch = tempfile.mkdtemp(prefix="dflash-grader-")         # figures the test cells save
    for var in ("DFLASH_LITE_FIGURES", "DFLASH_LITE_RESULTS", "DFLASH_LITE_CACHE"):
        os.environ.setdefault(var, os.path.join(scratch, var.rsplit("_", 1)[1].lower()))
    try:
        report = score_answers(source, collected(executed), definitions(executed), hidden,
                               solution_sources(executed))
    except Exception:  # noqa: BLE001
        print(traceback.format_exc(), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = (encode(report) + "\n").encode()
    if report_path is None:
        sys.stdout.flush()
        write(1, text)
        exit_(0)
    fd = open_(report_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    write(fd, text)
    close(fd)
    exit_(0)


if __name__ == "__main__":
    sys.exit(main())
