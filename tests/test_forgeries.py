"""A grader that student code cannot reach (issue 40): forged submissions score nothing, and a
class is graded whatever one notebook does to its kernel.

* The grader's own process (tests/forgeries.py, a tiny course of its own): the six ways in of the
  round-4 re-test and eighteen more each score 0, while an honest submission scores 4 of 4.
* The sandbox (dflash_lite/course/sandbox.py): a command sees the instructor's folder empty and the
  repository read-only, and the processes it leaves behind end with it.
* The kernel (dflash_lite/course/grading.py): a class whose notebooks end their kernel, loop, flood their
  output, plant a package in their working folder, rewrite the real one, read the references and
  leave a daemon running is graded in full; every honest notebook gets its score.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

import forgeries
from dflash_lite.course import grader, grading, sandbox

ROOT = Path(__file__).resolve().parent.parent
NAMESPACES = sandbox.available()
needs_namespaces = pytest.mark.skipif(NAMESPACES is not None, reason=f"{NAMESPACES}")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return forgeries.run(tmp_path_factory.mktemp("forgeries"))


def test_the_controls_score_what_they_earn(graded):
    assert forgeries.points(graded["honest"]) == 4
    assert forgeries.points(graded["honest but wrong"]) == 0
    assert forgeries.points(graded["right on the notebook's inputs only"]) == 0
    # an exercise left blank scores 0 and says so; a wrong one says its check did not pass
    assert graded["left blank"]["answer_check"] == [0.0, 1.0, "not attempted"]
    assert graded["honest but wrong"]["answer_check"] == [0.0, 1.0, "the check did not pass"]


@pytest.mark.parametrize("name", sorted(forgeries.FORGERIES))
def test_a_forgery_scores_nothing(graded, name):
    report = graded[name]
    assert "error" not in report, report
    assert forgeries.points(report) == 0, report


def test_a_refused_forgery_says_why(graded):
    messages = [cell[2] for cell in graded["walks the stack to the report (issue 40, case 1)"].values()]
    assert any("does not let submitted code use sys._getframe" in m for m in messages), messages


@needs_namespaces
def test_the_sandbox_hides_protects_and_cleans_up(tmp_path):
    hidden, writable = tmp_path / "instructor", tmp_path / "work"
    hidden.mkdir()
    writable.mkdir()
    (hidden / "references.py").write_text("secret")
    pid_file = writable / "daemon.pid"
    script = (f"cat {hidden}/references.py; ls {hidden}; touch {ROOT}/planted 2>/dev/null || "
              f"echo read-only; touch {writable}/ok; (setsid sh -c 'echo $$ > {pid_file}; "
              f"sleep 600' &); sleep 0.5; exit 3")
    run = subprocess.run([sys.executable, "-I", str(grading.SANDBOX), f"--hide={hidden}",
                          f"--read-only={ROOT}", f"--writable={writable}", "--", "sh", "-c",
                          script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stderr
    assert "secret" not in run.stdout and "read-only" in run.stdout, run.stdout
    assert (writable / "ok").exists() and not (ROOT / "planted").exists()
    assert pid_file.exists()
    # the daemon's process id was its own namespace's; none of its kind is left here
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout
    assert left.strip() == "", left



COUNTS_SIGINTS = """
import signal, sys, time
got = []
signal.signal(signal.SIGINT, lambda s, f: got.append(s))
print("ready", flush=True)
end = time.monotonic() + 2
while time.monotonic() < end:
    time.sleep(0.05)
print(len(got), flush=True)
"""


def test_an_interrupt_reaches_the_command_once(tmp_path):
    """A kernel manager interrupts with killpg on the launcher's group. Each process that
    forwards must not also be in that group, or a kernel that catches KeyboardInterrupt gets a
    second one inside its handler (a timing-dependent grade: issue 40's CI failure)."""
    import signal
    launcher = subprocess.Popen([sys.executable, "-I", str(grading.SANDBOX),
                                 f"--writable={tmp_path}", "--", sys.executable, "-c",
                                 COUNTS_SIGINTS], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    assert launcher.stdout.readline().strip() == "ready"
    os.killpg(launcher.pid, signal.SIGINT)
    assert launcher.stdout.read().strip() == "1"
    assert launcher.wait(timeout=30) == 0

def test_the_command_ends_with_the_process_that_started_the_launcher(tmp_path):
    """A grader stopped by Ctrl-C or killed leaves no kernel behind: the launcher kills its command
    once its own parent is gone."""
    token = f"dflash-orphan-{os.getpid()}"
    starter = (f"import subprocess, sys, time\n"
               f"subprocess.Popen([sys.executable, '-I', {str(grading.SANDBOX)!r}, "
               f"'--writable={tmp_path}', '--', 'sleep', '600'], start_new_session=True, "
               f"env={{'TOKEN': {token!r}}})\n"
               f"print('started', flush=True)\ntime.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    assert parent.stdout.readline().strip() == "started"

    def sleeping():
        """Processes of this test's launcher (its environment names the token) still alive."""
        alive = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and token.encode() in (proc / "environ").read_bytes():
                    alive.append(proc.name)
            except OSError:
                pass
        return alive
    deadline = time.monotonic() + 10
    while not sleeping() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sleeping(), "the sandboxed command did not start"
    time.sleep(1)
    assert sleeping(), "the sandboxed command ended while its grader was still there"
    parent.kill()
    parent.wait(timeout=30)
    deadline = time.monotonic() + 10
    while sleeping() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sleeping(), "the sandboxed command outlived the process that started it"


CLASS = {
    "honest": ["import atexit\natexit.register(print, 'bye')", forgeries.HONEST, "answer = 42"],
    "ends its kernel": [forgeries.HONEST, "import os\nos._exit(0)", "answer = 42"],
    "loops": [forgeries.HONEST, "while True:\n    pass", "answer = 42"],
    "ignores interrupts": [forgeries.HONEST, "import time\nwhile True:\n    try:\n"
                           "        time.sleep(10)\n    except KeyboardInterrupt:\n        pass",
                           "answer = 42"],
    "floods its output": [forgeries.HONEST, "import sys\nfor _ in range(300):\n"
                          "    sys.stdout.write('x' * 1_000_000)", "answer = 42"],
    "plants and rewrites packages": [
        "import os, pathlib\nos.makedirs('dflash_lite/course', exist_ok=True)\n"
        "pathlib.Path('dflash_lite/__init__.py').write_text('')\n"
        "pathlib.Path('dflash_lite/course/__init__.py').write_text('')\n"
        "pathlib.Path('dflash_lite/course/grader.py').write_text('raise SystemExit')\n"
        "import dflash_lite.course.grader as g\nreal = pathlib.Path(g.__file__)\n"
        "try:\n    os.chmod(real.parent, 0o755)\n    real.write_text('raise SystemExit')\n"
        "except OSError as e:\n    print('refused:', e)",
        forgeries.WRONG,
        "import os, subprocess\nsubprocess.Popen(['setsid', 'sh', '-c', 'sleep 600'])\n"
        "try:\n    answer = len(open(os.environ['FORGE_REFERENCES']).read())\n"
        "except OSError:\n    answer = 41"],
}


def submission(cells: list[str], source) -> nbformat.NotebookNode:
    """The tiny course's notebook with the student's cells: the first replaces the solution cell
    of ``double``, the last is the ``answer`` cell, and the middle ones go after the answer's
    check (so that ``all_check``, the last 1 point, comes after them)."""
    nb = nbformat.from_dict(json.loads(json.dumps(source)))
    first, *middle, last = cells
    out = []
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id == "double":
            cell.source = first
            out.append(cell)
        elif grade_id == "answer_check":
            out.append(cell)
            out += [nbformat.v4.new_code_cell(m) for m in middle]
        elif grade_id == "answer":
            cell.source = last
            out.append(cell)
        else:
            out.append(cell)
    nb.cells = out
    return nb


@needs_namespaces
def test_a_class_is_graded_whatever_one_notebook_does(tmp_path, monkeypatch):
    source_path, hidden = forgeries.course(tmp_path / "course")
    source = nbformat.read(source_path, as_version=4)
    limits = grading.Limits(cell_timeout_s=5, notebook_timeout_s=25, grader_timeout_s=120)
    env = {"MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
           "FORGE_REFERENCES": str(hidden.parent / "references.py")}
    package = (ROOT / "dflash_lite" / "course" / "grader.py").read_bytes()
    scores, stopped = {}, {}
    for i, (name, cells) in enumerate(CLASS.items()):
        path = tmp_path / "submitted" / f"{i}.ipynb"
        path.parent.mkdir(exist_ok=True)
        nbformat.write(submission(cells, source), path)
        result = grading.run_submission(source_path, path, tmp_path / f"work{i}", hidden, limits,
                                        env)
        scores[name] = sum(c[0] for c in result["cells"].values())
        stopped[name] = result["stopped"]
    assert scores == {"honest": 4, "ends its kernel": 3, "loops": 4, "ignores interrupts": 3,
                      "floods its output": 4, "plants and rewrites packages": 0}, (scores, stopped)
    assert "kernel died" in stopped["ends its kernel"]
    assert (ROOT / "dflash_lite" / "course" / "grader.py").read_bytes() == package
    assert not list((ROOT / "dflash_lite").glob("*.pyc"))
    left = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout
    assert left.strip() == "", left
    assert not os.listdir(tmp_path / "work0" / "run")    # the kernel's folder is removed
    # the executed copy kept as feedback holds the student's cells and outputs, not the collectors
    feedback = (tmp_path / "work0" / "graded" / "source.ipynb").read_text()
    assert "double(x)" in feedback and grader.MARK not in feedback
