"""Scores that the student's kernel cannot change.

Whatever the student's kernel prints or returns, the student's code can forge
(``dflash_lite.exercises.score = lambda r, p: float(p)`` once gave full marks). So this fresh
process rebuilds the values :mod:`~dflash_lite.course.collect` recorded (plain data only),
re-creates the submission's ``def``, ``class`` and imports from its source (no cell is run), runs
the *instructor's* test cells and hidden checks on them and counts the points itself: a
``score(check, points)`` cell's when the check returned True, an assert cell's when nothing raised;
:mod:`~dflash_lite.course.guard` keeps submitted code off the grader. The steps are in
docs/teaching.md#grading-workflow; by hand: ``python -m dflash_lite.course.grader SOURCE EXECUTED``.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
import traceback
from functools import reduce
from pathlib import Path

from ..checkout import ROOT
from ..decoding.checkpoints import load_drafter
from ..decoding.target import load_pretrained
from ..validate import Parser  # one-line usage errors, exit 2, as the other commands
from .collect import (COLLECTOR, COLLECTOR_KEY, MARK, InsertCollectors,  # noqa: F401 (public)
                      _nbgrader, _tree, collected, collector_cell, free_names, instrument)
from .guard import SUBMITTED, _changed, _fingerprint, _is_submitted_function, cell_namespace, guard

HIDDEN = ROOT / "instructor" / "hidden_checks.py"
INSTRUCTOR = [str(HIDDEN.parent), str(ROOT / "notebooks")]  # no submitted code opens these


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
            items = ((self(k, code), self(x, code)) for k, x in v["__dict__"])
            return {tuple(k) if isinstance(k, list) else k: x for k, x in items}
        for kind, make in (("__tuple__", tuple), ("__set__", set), ("__frozenset__", frozenset)):
            if kind in v:
                return make(self(x, code) for x in v[kind])
        for kind, make in (("__float__", float), ("__path__", Path), ("__device__", torch.device),
                           ("__dtype__", lambda name: getattr(torch, name))):
            if kind in v:
                return make(v[kind])
        if "__tensor__" in v:
            dtype = getattr(torch, v["dtype"])
            return torch.tensor(v["__tensor__"], dtype=dtype).reshape(v["shape"])
        if "__code__" in v:
            if v["__code__"] not in code:
                raise LookupError(f"{v['__code__']} is not defined by the notebook's source")
            return code[v["__code__"]]
        if "__ref__" in v:
            module, qualname = v["__ref__"]
            if module.split(".")[0] not in ("dflash_lite", "torch", "numpy", "math", "statistics"):
                raise LookupError(f"{module}.{qualname} is not something the grader imports")
            return _attribute(module, qualname)
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
            cls = _attribute(module, qualname)
            obj = cls.__new__(cls)
            obj.__dict__.update(self(v["state"], code))
            return obj
        if "__unsupported__" in v:
            raise TypeError(f"a value could not be collected ({v['__unsupported__']})")
        return v


def _attribute(module: str, qualname: str):
    return reduce(getattr, qualname.split("."), importlib.import_module(module))


def definitions(notebook, solutions: bool = True) -> str:
    """The top-level imports, functions and classes of a notebook's code cells, as source (what
    the grader needs of it, no cell run). With ``solutions=False``, only the imports of solution
    cells (for the instructor's notebook: its solutions must never stand in for a student's)."""
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


def _exec_each(source: str, namespace: dict) -> None:
    """Run each top-level statement of ``source`` on its own: one that fails (a stub that raises
    at definition time, an import that is missing) leaves the others defined."""
    for node in ast.parse(source).body:
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), SUBMITTED, "exec"), namespace)
        except Exception:
            pass


def load_hidden(path: Path | None = HIDDEN) -> dict:
    """``{grade_id: check(namespace)}`` of the instructor's hidden checks; ``path=None`` for none.
    A missing file is an error: grading without them would skip every hidden check silently."""
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
    scored = (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
              and getattr(last.value.func, "id", None) == "score" and last.value.args)
    if scored:
        tree.body[-1] = ast.Assign(targets=[ast.Name("__dflash_result__", ast.Store())],
                                   value=last.value.args[0])
        ast.fix_missing_locations(tree)
    return compile(tree, "<test cell>", "exec"), bool(scored)


SOLUTION_KEY = "__dflash_solution__"


def solution_sources(notebook) -> dict[str, str]:
    """``{grade_id: source}`` of a notebook's solution cells (the student's code as submitted)."""
    return {_nbgrader(c)["grade_id"]: c.source for c in notebook.cells if c.cell_type == "code"
            and _nbgrader(c).get("solution") and _nbgrader(c).get("grade_id")}


def score_answers(source, answers: dict[str, dict], submission_defs: str,
                  hidden: dict | None = None, solutions: dict[str, str] | None = None
                  ) -> dict[str, list]:
    """``{grade_id: [score, max_score, message]}`` of the ``source`` notebook's graded cells, from
    collected ``answers`` (``{grade_id: {name: encoded value}}``) and the submission's definitions
    (source text). ``solutions`` (:func:`solution_sources`): a hidden check finds the one its test
    cell checks (``X_check`` checks ``X``) under ``SOLUTION_KEY``, to rerun the student's code of a
    cell that defines values, not functions, on other inputs."""
    import matplotlib

    matplotlib.use("Agg")
    hidden = load_hidden() if hidden is None else hidden
    changed, fingerprint = _changed, _fingerprint        # bound before any submitted code runs
    base: dict = {"__name__": "__grader__"}
    _exec_each(definitions(source, solutions=False), base)  # the instructor's imports, helpers
    for value in list(base.values()):                    # given helpers are the instructor's code
        if _is_submitted_function(value):
            value.__code__ = value.__code__.replace(co_filename="<instructor>")
    guard(INSTRUCTOR)
    before = fingerprint()
    _exec_each(submission_defs, dict(base))  # the student's functions and classes, once to check
    rebuild = Rebuilt()
    report = {}
    tampered = changed(before)
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
            result = ns.get("__dflash_result__")
            passed = not scored or result is True
            # a check returns None for an exercise left blank (exercises.not_attempted)
            message = "" if passed else "not attempted" if result is None \
                else "the check did not pass"
            if passed and grade_id in hidden:
                ns[SOLUTION_KEY] = (solutions or {}).get(grade_id.removesuffix("_check"))
                hidden[grade_id](ns)
        except Exception as e:  # noqa: BLE001 (any failure is 0 points)
            passed = False
            message = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        tampered = changed(before)
        if tampered:
            passed = False
            message = f"the submission changed {tampered[0]}"
        report[grade_id] = [points if passed else 0.0, points, message]
    return report


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
    """A JSON string literal, by hand: the report uses no module a submission could have patched."""
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
    parser = Parser(prog="python -m dflash_lite.course.grader",
                    description=__doc__.split("\n\n")[0])
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
    guard([*INSTRUCTOR, *(p for p in (report_path, os.path.abspath(args.source),
                       args.hidden and os.path.dirname(os.path.abspath(args.hidden))) if p)])
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
