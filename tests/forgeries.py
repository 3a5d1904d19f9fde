"""Forged submissions against the grader's own process (``python -m dflash_lite.course.grader``), run by
tests/test_forgeries.py and printable as a before/after table (``python tests/forgeries.py``).

A tiny course of its own keeps this fast and independent of the chapters: a source notebook with
three graded cells (``double_check`` 2 points, ``answer_check`` 1, ``all_check`` 1), hidden checks
that compare ``double`` with an instructor's reference on other inputs, and that reference in a
file beside them. Every forgery submits a *wrong* ``double`` and a wrong ``answer`` plus an attack
on the grader; an honest submission scores 4 of 4, an honest wrong one 0. The driver imports the
grader once and forks one child per submission, each running the grader's ``main`` (its report
goes to a file; the child ends with ``os._exit``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat

WRONG = "def double(x):\n    return list(x)\n"
HONEST = "def double(x):\n    return [2 * v for v in x]\n"
# right on the notebook's own inputs only: the visible checks pass, the hidden ones do not
KNOWN = "{(1, 2, 3): [2, 4, 6], (1, 3, 5): [2, 6, 10]}.get(tuple(x), list(x))"
HARD_CODED = f"def double(x):\n    return {KNOWN}\n"

# name -> (submission code, the answer it gives, what it tries)
FORGERIES = {
    "walks the stack to the report (issue 40, case 1)": ('''
import sys
def fill():
    f = sys._getframe()
    while f is not None:
        for name, v in list(f.f_locals.items()):
            if name == "report" and isinstance(v, dict):
                for g in v:
                    v[g] = [v[g][1], v[g][1], ""]
            if name == "hidden" and isinstance(v, dict):
                v.clear()
        f = f.f_back
class Attack:
    fill()
def double(x):
    fill()
    return KNOWN
'''.replace("KNOWN", KNOWN), 41),
    "reads the references from sys.modules (issue 40, case 5)": ('''
import sys
def double(x):
    return sys.modules["hidden_checks"].references.double(x)
''', 41),
    "reads the instructor's references file (issue 40, case 6)": ('''
import sys
def double(x):
    for folder in sys.path + [__import__("os").environ.get("FORGE_HIDDEN_DIR", "")]:
        try:
            source = open(folder + "/references.py").read()
        except OSError:
            continue
        space = {}
        exec(source, space)
        return space["double"](x)
    return list(x)
''', 41),
    "prints a forged report at exit (issue 40, case 2)": (WRONG + '''
import atexit, json
class Attack:
    atexit.register(print, json.dumps({"double_check": [2.0, 2.0, ""], "answer_check":
                                       [1.0, 1.0, ""], "all_check": [1.0, 1.0, ""]}))
''', 41),
    "finds the hidden checks through the garbage collector": (HARD_CODED + '''
import gc
class Attack:
    for o in gc.get_objects():
        if isinstance(o, dict) and "double_check" in o and callable(o["double_check"]):
            o.clear()
''', 41),
    "walks a traceback's frames": ('''
def fill():
    try:
        raise ValueError
    except ValueError as e:
        f = e.__traceback__.tb_frame
    while f is not None:
        if isinstance(f.f_locals.get("hidden"), dict):
            f.f_locals["hidden"].clear()
        f = f.f_back
def double(x):
    fill()
    return KNOWN
'''.replace("KNOWN", KNOWN), 41),
    "returns an object equal to anything": ('''
class Yes(list):
    def __eq__(self, other):
        return True
    def __iter__(self):
        return iter([2, 4, 6])
def double(x):
    return Yes()
''', 41),
    "hides the builtin all": (WRONG + '''
def all(*args, **kwargs):
    return True
''', 41),
    "patches the score helper": (WRONG + '''
import dflash_lite.exercises as exercises
class Attack:
    exercises.score = lambda result, points: float(points)
''', 41),
    "patches the tamper check, then a builtin": (WRONG + '''
import builtins
import dflash_lite.course.grader as grader
class Attack:
    grader._changed = lambda before: []
    import dflash_lite.course.guard as guard
    guard._changed = lambda before: []
    builtins.all = lambda *args: True
''', 41),
    "clears the hidden checks from a thread of its own": (HARD_CODED + '''
import threading
CODE = """
import sys, time
for _ in range(200):
    for f in list(sys._current_frames().values()):
        while f is not None:
            h = f.f_locals.get("hidden")
            if isinstance(h, dict):
                h.clear()
            f = f.f_back
    time.sleep(0.01)
"""
class Attack:
    threading.Thread(target=exec, args=(CODE,), daemon=True).start()
''', 41),
    "reads memory with ctypes": (WRONG + '''
import ctypes
class Attack:
    ctypes.string_at(id(object()), 8)
''', 41),
    "runs a process that reads the references": ('''
import os, subprocess, sys
def double(x):
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "import references, json; print(json.dumps(references.double("
                          + repr(list(x)) + ")))", os.environ.get("FORGE_HIDDEN_DIR", "")],
                         capture_output=True, text=True).stdout
    return __import__("json").loads(out)
''', 41),
    "traces the grader's frames": (HARD_CODED + '''
import sys
def tracer(frame, event, arg):
    if isinstance(frame.f_locals.get("hidden"), dict):
        frame.f_locals["hidden"].clear()
    return tracer
class Attack:
    sys.settrace(tracer)
''', 41),
    "writes the report file itself": (WRONG + '''
import sys
class Attack:
    path = sys.argv[sys.argv.index("--report") + 1] if "--report" in sys.argv else None
    if path:
        open(path, "w").write('{"double_check": [2.0, 2.0, ""], "answer_check": [1.0, 1.0, ""], '
                              '"all_check": [1.0, 1.0, ""]}')
        __import__("os").chmod(path, 0o444)
''', 41),
    "patches how the report is written": (WRONG + '''
import json
class Attack:
    json.dumps = lambda *a, **k: ('{"double_check": [2.0, 2.0, ""], "answer_check": '
                                  '[1.0, 1.0, ""], "all_check": [1.0, 1.0, ""]}')
''', 41),
    "compiles its code under another file name": (HARD_CODED + '''
class Attack:
    exec(compile("import sys\\nf = sys._getframe()\\nwhile f is not None:\\n"
                 "    h = f.f_locals.get('hidden')\\n    h.clear() if isinstance(h, dict) else None\\n"
                 "    f = f.f_back\\n", "trusted.py", "exec"))
''', 41),
    "rebuilds its function with another file name": ('''
import types
def _double(x):
    import sys
    f = sys._getframe()
    while f is not None:
        h = f.f_locals.get("hidden")
        if isinstance(h, dict):
            h.clear()
        f = f.f_back
    return [2 * v for v in x]
double = types.FunctionType(_double.__code__.replace(co_filename="trusted.py"), globals())
class Attack:
    globals()["double"] = types.FunctionType(_double.__code__.replace(co_filename="trusted.py"),
                                             globals())
''', 41),
}
# the references read by other ways than a plain absolute path; a submission that read them
# doubles right (it learned how), one that could not stays wrong
LEARNS = '''
import os
def double(x):
    source = _read(os.environ.get("FORGE_HIDDEN_DIR", ""))
    return [2 * v for v in x] if "2 * v" in source else list(x)
'''
FORGERIES.update({
    "opens the references by a bytes path": ('''
import os
def _read(folder):
    return open(os.fsencode(folder + "/references.py")).read()
''' + LEARNS, 41),
    "opens the references by a relative path": ('''
import os
def _read(folder):
    os.chdir(folder)
    return open("references.py").read()
''' + LEARNS, 41),
    "opens the references through a link of its own": ('''
import os
def _read(folder):
    link = os.path.join(os.path.dirname(folder), "link")
    if not os.path.lexists(link):
        os.symlink(folder, link)
    return open(link + "/references.py").read()
''' + LEARNS, 41),
    "opens the references from a folder it opened": ('''
import os
def _read(folder):
    parent = os.open(os.path.dirname(folder), os.O_RDONLY)
    fd = os.open(os.path.basename(folder) + "/references.py", os.O_RDONLY, dir_fd=parent)
    return os.read(fd, 1 << 16).decode()
''' + LEARNS, 41),
    "switches the guard off while it reads, then back on": ('''
import dflash_lite.course.guard as guard
def _read(folder):
    student_code = guard._student_code
    guard._student_code = lambda code: False
    try:
        return open(folder + "/references.py").read()
    finally:
        guard._student_code = student_code
''' + LEARNS, 41),
    "empties the guard's protected paths while it reads": ('''
import dflash_lite.course.guard as guard
def _read(folder):
    lists = [v for v in vars(guard).values() if type(v) is list]
    lists += [x for v in lists for x in v if type(x) is list]
    saved = [(x, list(x)) for x in lists]
    for x in lists:
        x.clear()
    try:
        return open(folder + "/references.py").read()
    finally:
        for x, items in saved:
            x.extend(items)
''' + LEARNS, 41),
})
CONTROLS = {"honest": (HONEST, 42), "honest but wrong": (WRONG, 41), "left blank": (HONEST, None),
            "right on the notebook's inputs only": (HARD_CODED, 41)}

REFERENCES = "def double(x):\n    return [2 * v for v in x]\n"
HIDDEN = '''
import importlib.util, random
from pathlib import Path
_spec = importlib.util.spec_from_file_location("forge_references",
                                               Path(__file__).with_name("references.py"))
references = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(references)


def check_double(ns):
    rng = random.Random(7)
    for _ in range(20):
        x = [rng.randint(-50, 50) for _ in range(rng.randint(0, 9))]
        assert list(ns["double"](list(x))) == references.double(x), "double differs"


CHECKS = {"double_check": check_double, "all_check": check_double}
'''


def _cell(source: str, **nbgrader):
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


def course(folder: Path) -> tuple[Path, Path]:
    """The tiny course in ``folder``: (source notebook, hidden checks file)."""
    folder.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("from dflash_lite.exercises import score"),
        _cell("def double(x):\n    ### BEGIN SOLUTION\n    return [2 * v for v in x]\n"
              "    ### END SOLUTION", solution=True, grade=False, grade_id="double"),
        _cell("assert double([1, 2, 3]) == [2, 4, 6]", grade=True, solution=False,
              grade_id="double_check", points=2, locked=True),
        _cell("### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION", solution=True, grade=False,
              grade_id="answer"),
        # as the chapters' checks do: None for an exercise left blank, else whether it is right
        _cell("score(None if answer is None else answer == 42, 1)", grade=True, solution=False,
              grade_id="answer_check", points=1, locked=True),
        _cell("assert all(v % 2 == 0 for v in double([1, 3, 5]))", grade=True, solution=False,
              grade_id="all_check", points=1, locked=True),
    ]
    source = folder / "source.ipynb"
    nbformat.write(nb, source)
    (folder / "instructor").mkdir(exist_ok=True)
    (folder / "instructor" / "references.py").write_text(REFERENCES)
    hidden = folder / "instructor" / "hidden_checks.py"
    hidden.write_text(HIDDEN)
    return source, hidden


def executed(code: str, answer: int) -> nbformat.NotebookNode:
    """What a kernel that ran the submission would hand the grader: its solution cells and the
    collectors' lines (the values: ``double`` by name, ``answer`` by value)."""
    from dflash_lite.course import grader

    nb = nbformat.v4.new_notebook()

    def collector(grade_id, values):
        cell = _cell("")
        cell.metadata[grader.COLLECTOR_KEY] = grade_id
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=grader.MARK + json.dumps(
            {"grade_id": grade_id, "values": values}) + "\n")]
        return cell

    function = {"double": {"__code__": "double"}}
    nb.cells = [_cell("from dflash_lite.exercises import score"),
                _cell(code, solution=True, grade=False, grade_id="double"),
                collector("double_check", function),
                _cell(f"answer = {answer}", solution=True, grade=False, grade_id="answer"),
                collector("answer_check", {"answer": answer}),
                collector("all_check", function)]
    return nb


DRIVER = r'''
import json, os, sys
from dflash_lite.course import grader
source, hidden, folder = sys.argv[1:4]
results = {}
for name, path in json.loads(sys.stdin.read()):
    report = os.path.join(folder, f"report-{len(results)}.json")
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            grader.main([source, path, "--hidden", hidden, "--report", report])
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    try:
        text = open(report).read()
        results[name] = json.loads(text)
    except (OSError, ValueError) as e:
        results[name] = {"error": f"exit {os.waitstatus_to_exitcode(status)}: {e}"}
print(json.dumps(results))
'''


def run(folder: Path, names: list[str] | None = None) -> dict[str, dict]:
    """Grade every control and forgery (or ``names``) with the grader's ``main``, each in a
    forked child; ``{name: report}``."""
    source, hidden = course(folder)
    todo = []
    for i, (name, (code, answer)) in enumerate({**CONTROLS, **FORGERIES}.items()):
        if names and name not in names:
            continue
        path = folder / f"executed-{i}.ipynb"
        nbformat.write(executed(textwrap.dedent(code), answer), path)
        todo.append((name, str(path)))
    env = {**os.environ, "FORGE_HIDDEN_DIR": str(hidden.parent), "OMP_NUM_THREADS": "1",
           "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(source), str(hidden), str(folder)],
                          input=json.dumps(todo), capture_output=True, text=True, cwd=folder,
                          env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def points(report: dict) -> float | str:
    if "error" in report:
        return report["error"]
    return sum(cell[0] for cell in report.values())


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, report in run(Path(tmp)).items():
            print(f"{points(report)!s:>6}  {name}")
