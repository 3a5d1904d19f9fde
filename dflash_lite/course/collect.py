"""What :mod:`~dflash_lite.course.grader` scores, out of the student's kernel: a collector cell
(:func:`collector_cell`) before each graded test cell prints the values that cell reads, marked
with :data:`MARK`, and :func:`collected` reads them back (docs/teaching.md#grading-workflow).
The collector runs in the student's kernel, so it imports nothing from this package, which the
student may have patched, but ``checkpoints.save_drafter`` when an answer is a drafter (the one
format a drafter is written in); that import sits in the collector's source, not in this module."""
from __future__ import annotations

import ast
import builtins
import json

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
    for node in ast.walk(tree):        # a comprehension's target is a Name in Store context too
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            bound |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    read = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return [n for n in dict.fromkeys(read) if n not in bound and not hasattr(builtins, n)]


COLLECTOR = r'''
def __dflash_collect(grade_id, names, store):
    import dataclasses, json, os, types
    from pathlib import PurePath
    g = globals()
    store = os.path.abspath(store)
    out, todo, done = {}, list(names), set()

    def enc(v, depth=0):
        if depth > 12:
            raise ValueError("too deep")
        if v is None or isinstance(v, (bool, int, str)):
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
            from dflash_lite.decoding.checkpoints import save_drafter
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
    """The code cell put before the test cell ``grade_id``: it prints the values of ``names``."""
    import nbformat

    cell = nbformat.v4.new_code_cell(
        COLLECTOR + f"\nprint({MARK!r} + __dflash_collect({grade_id!r}, {names!r}, {store!r}))"
        "\ndel __dflash_collect")
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


try:
    from nbconvert.preprocessors import Preprocessor
except ImportError:  # nbgrader (and so nbconvert) not installed
    Preprocessor = object


class InsertCollectors(Preprocessor):
    """An nbconvert preprocessor for stock ``nbgrader autograde``: put it in
    ``Autograde.sanitize_preprocessors`` after ``OverwriteCells`` (course/nbgrader_config.py), so
    the autograded notebooks carry the values :func:`~dflash_lite.course.grader.main` scores."""

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
        text = "".join(o.get("text", "") for o in cell.get("outputs", [])
                       if o.get("name") == "stdout")
        for line in text.splitlines():
            if line.startswith(MARK):
                try:
                    data = json.loads(line[len(MARK):])
                except ValueError:
                    continue
                if data.get("grade_id") == grade_id:
                    found[grade_id] = data.get("values", {})
    return found
