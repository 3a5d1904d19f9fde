"""Scores the student's kernel cannot change (dflash_lite/course/grader.py, course autograde).

* Fast: the grader scores collected answers in its own process: a right answer gets the cell's
  points, a forged one none; a submission whose definitions patch the package, torch or the
  builtins scores 0; the stubs of the student edition score 0 without stopping the others.
* Fast: autograde refuses a submission folder inside the repository, and root unless asked;
  its --out and --feedback are checked before any grading, and the feedback notebooks it
  writes carry their score.
* Slow: an edition of notebook 02 whose first cell patches ``dflash_lite.exercises.score`` and a
  check, with every answer left blank, gets full marks from its own kernel and 0 from the grader.
"""

import os
from pathlib import Path

import nbformat
import pytest

from dflash_lite.course import commands as course
from dflash_lite.course import grader

ROOT = Path(__file__).resolve().parent.parent
NB02 = ROOT / "notebooks" / "02_speculative_decoding.ipynb"

GOOD_LOOKUP = '''
def lookup_draft(tokens, k, ngram=2):
    tail = tokens[-ngram:]
    for start in range(len(tokens) - ngram - 1, -1, -1):
        if tokens[start:start + ngram] == tail:
            return tokens[start + ngram:start + ngram + k]
    return []
'''

PATCHING = {
    "score replaced": "import dflash_lite.exercises\n"
    "@(lambda f: (setattr(dflash_lite.exercises, 'score', lambda r, p: float(p)), f)[1])\n"
    "def lookup_draft(tokens, k, ngram=2):\n    return [0]\n",
    "check replaced": "class lookup_draft:\n    import dflash_lite.exercises.ch02 as m\n"
    "    m.check_lookup_draft = lambda *a, **k: True\n",
    "builtin replaced": "class lookup_draft:\n    import builtins\n"
    "    builtins.all = lambda *a: True\n",
}


def lookup_answers() -> dict:
    return {"ch02_exercise_4_check": {"lookup_draft": {"__code__": "lookup_draft"}}}


@pytest.fixture(scope="module")
def source():
    return nbformat.read(NB02, as_version=4)


def test_hidden_checks_get_the_submitted_solution_cell(source):
    """A hidden check finds the student's code of the solution cell its test cell checks (to run
    a cell that defines values on other inputs); one the submission lacks is None."""
    submitted = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("answer_4 = lookup_draft  # mine")
    cell.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "ch02_exercise_4"}
    submitted.cells = [cell, nbformat.v4.new_code_cell("x = 1")]
    assert grader.solution_sources(submitted) == {"ch02_exercise_4": cell.source}
    seen = []
    hidden = {"ch02_exercise_4_check": lambda ns: seen.append(ns.get(grader.SOLUTION_KEY))}
    grader.score_answers(
        source, lookup_answers(), GOOD_LOOKUP, hidden, grader.solution_sources(submitted)
    )
    grader.score_answers(source, lookup_answers(), GOOD_LOOKUP, hidden)
    assert seen == [cell.source, None]


def test_grader_scores_collected_answers(source):
    report = grader.score_answers(
        source, lookup_answers(), GOOD_LOOKUP, hidden=grader.load_hidden()
    )
    assert report["ch02_exercise_4_check"][:2] == [2.0, 2.0], report["ch02_exercise_4_check"]
    wrong = GOOD_LOOKUP.replace(
        "range(len(tokens) - ngram - 1, -1, -1)", "range(len(tokens) - ngram)"
    )
    report = grader.score_answers(source, lookup_answers(), wrong, hidden=grader.load_hidden())
    assert report["ch02_exercise_4_check"][0] == 0
    # cells the notebook never reached score 0, with a reason
    assert (
        report["ch02_exercise_2_check"][0] == 0
        and "not reached" in report["ch02_exercise_2_check"][2]
    )


SCORE_IN_A_CHILD = """
import json, sys
import nbformat
from dflash_lite.course import grader
source = nbformat.read(sys.argv[1], as_version=4)
answers = {"ch02_exercise_4_check": {"lookup_draft": {"__code__": "lookup_draft"}}}
report = grader.score_answers(source, answers, sys.stdin.read(), hidden={})
print(json.dumps(report["ch02_exercise_4_check"]))
"""


@pytest.mark.parametrize("name", sorted(PATCHING))
def test_patching_from_a_submission_scores_zero(name, tmp_path):
    """Run in a child process: the patches must not reach this test session."""
    import json
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", SCORE_IN_A_CHILD, str(NB02)],
        input=PATCHING[name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    score, points, message = json.loads(run.stdout.strip().splitlines()[-1])
    assert points == 2 and score == 0, message
    assert "changed" in message, message


def test_kernel_values_are_the_only_input(source):
    """A forged collector line printed by a student's own cell is ignored: only the grader's
    collector cells are read."""
    nb = nbformat.v4.new_notebook()
    fake = nbformat.v4.new_code_cell("print('forged')")
    fake.outputs = [
        nbformat.v4.new_output(
            "stream",
            name="stdout",
            text=grader.MARK + '{"grade_id": '
            '"ch02_exercise_1_check", "values": {"answer_1": 1}}\n',
        )
    ]
    nb.cells = [fake]
    assert grader.collected(nb) == {}


def test_autograde_refuses_a_folder_inside_the_repository(capsys):
    with pytest.raises(SystemExit):
        course.main(["autograde", str(ROOT / "notebooks"), "--allow-root"])
    err = capsys.readouterr().err
    assert "inside the repository" in err and "Traceback" not in err


@pytest.mark.parametrize("where", ["package", "foreign"])
def test_autograde_out_is_guarded_before_any_grading(tmp_path, capsys, monkeypatch, where):
    """``--out`` into the package, or onto a file that is not a score report, is one line (exit
    2) before a single notebook is graded; the foreign file is left as it was."""
    import dflash_lite

    graded = []
    monkeypatch.setattr(course, "autograde", lambda *a, **k: graded.append(a) or {})
    (tmp_path / "sub").mkdir()
    foreign = tmp_path / "notes.json"
    foreign.write_text('{"mine": 1}')
    out = Path(dflash_lite.__file__).parent / "scores.json" if where == "package" else foreign
    with pytest.raises(SystemExit) as exit_:
        course.main(["autograde", str(tmp_path / "sub"), "--allow-root", "--out", str(out)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--out" in err and "Traceback" not in err and not graded
    assert foreign.read_text() == '{"mine": 1}'
    assert not (Path(dflash_lite.__file__).parent / "scores.json").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="runs as root only")
def test_autograde_refuses_root_unless_asked(tmp_path, capsys):
    (tmp_path / "02_speculative_decoding.ipynb").write_text(NB02.read_text())
    with pytest.raises(SystemExit):
        course.main(["autograde", str(tmp_path)])
    assert "refusing to grade as root" in capsys.readouterr().err


def forging_edition(edition: Path, out: Path) -> Path:
    """The student edition of 02, blank, with a first cell that forges every score it can."""
    stem = "02_speculative_decoding"
    nb = nbformat.read(edition / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source += "\ndraft_tokens = 2\nnum_prompts = 1\nnum_samples = 600"
    forge = nbformat.v4.new_code_cell(
        "import dflash_lite.exercises, dflash_lite.exercises.ch02 as _c\n"
        "dflash_lite.exercises.score = lambda r, p: float(p)\n"
        "for _n in dir(_c):\n"
        "    if _n.startswith('check_'):\n"
        "        setattr(_c, _n, lambda *a, **k: True)\n"
    )
    nb.cells.insert(1, forge)
    # the build-it cell must not stop the run: give it a body that returns nothing useful
    for cell in nb.cells:
        if (
            cell.metadata.get("nbgrader", {}).get("solution")
            and "def speculative_greedy" in cell.source
        ):
            cell.source = cell.source.replace("raise NotImplementedError()", "return [], []")
    out.mkdir()
    nbformat.write(nb, out / f"{stem}.ipynb")
    return out


@pytest.mark.slow
def test_forged_scores_get_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_LITE_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("DFLASH_LITE_RESULTS", str(tmp_path / "results"))
    edition = tmp_path / "edition"
    course.student_edition(edition, ["02"])
    submitted = forging_edition(edition, tmp_path / "submitted")
    report = course.autograde(submitted, course_root=tmp_path / "course", allow_root=True)
    nb = report["02_speculative_decoding"]
    assert nb["kernel_score"] > 0, "the forgery did not even fool the student's own kernel"
    assert nb["score"] == 0, nb


def test_collector_encodes_values_and_the_globals_functions_read(tmp_path):
    """The collector (run here as the kernel would run it) writes values as data and, for a
    function or class of the notebook, its name plus the globals it reads, nested code included."""
    import json

    import torch

    namespace = {"__name__": "__main__"}
    exec(
        "import torch\nscale = 3\noffset = {'a': (1, 2.5)}\n"
        "def helper(x):\n    return x + 1\n"
        "def answer(x):\n    return [helper(v) * scale for v in x]\n"
        "class Shape:\n    def area(self):\n        return (lambda: offset)()\n"
        "t = torch.arange(4).reshape(2, 2)\n",
        namespace,
    )
    exec(grader.COLLECTOR, namespace)
    line = namespace["__dflash_collect"]("g", ["answer", "Shape", "t"], str(tmp_path))
    values = json.loads(line)["values"]
    assert values["answer"] == {"__code__": "answer"} and values["Shape"] == {"__code__": "Shape"}
    assert values["scale"] == 3 and values["helper"] == {"__code__": "helper"}
    rebuilt = grader.Rebuilt()
    assert rebuilt(values["offset"], {}) == {"a": (1, 2.5)}
    assert torch.equal(rebuilt(values["t"], {}), torch.arange(4).reshape(2, 2))


def test_a_chapter_asked_for_and_not_returned_scores_0_and_says_so(tmp_path, capsys):
    """A requested chapter missing from a submission is in the report at 0, with the reason; a
    notebook under another name is named as ignored, not dropped in silence."""
    submitted = tmp_path / "alice"
    submitted.mkdir()
    (submitted / "00_tour (1).ipynb").write_text("{}")
    nb = course.autograde(submitted, ["00"], allow_root=True)["00_tour"]
    assert nb["score"] == 0 and nb["max_score"] > 0, nb
    assert nb["stopped"] == "missing: no 00_tour.ipynb in the submission"
    assert set(nb["messages"]) == set(nb["cells"]) and all(
        m.startswith("missing") for m in nb["messages"].values())
    assert "ignoring '00_tour (1).ipynb'" in capsys.readouterr().err
    assert nb["submission"] == str(submitted.resolve())


def test_autograde_out_keeps_another_students_scores(tmp_path, capsys):
    """--out names the file of another submission's scores: refused unless --overwrite."""
    import json

    bob, alice = tmp_path / "bob", tmp_path / "alice"
    bob.mkdir()
    alice.mkdir()
    out = tmp_path / "alice.json"
    report = {"00_tour": {"score": 3.0, "max_score": 6.0, "submission": str(alice.resolve())}}
    out.write_text(json.dumps(report))
    with pytest.raises(SystemExit):
        course.main(["autograde", str(bob), "--notebooks", "00", "--out", str(out),
                     "--allow-root"])
    assert "holds the scores of" in capsys.readouterr().err
    assert json.loads(out.read_text()) == report


@pytest.mark.parametrize("where", ["submission", "foreign"])
def test_autograde_feedback_is_guarded_before_any_grading(tmp_path, capsys, monkeypatch, where):
    """``--feedback`` inside the submission, or onto a chapter notebook the grader did not write,
    is one line (exit 2) before a notebook is graded, and the notebook there is left as it was."""
    from dflash_lite.course import grading

    graded = []
    monkeypatch.setattr(grading, "run_submission", lambda *a: graded.append(a))
    submitted = tmp_path / "alice"
    submitted.mkdir()
    (submitted / NB02.name).write_text(NB02.read_text())
    feedback = submitted / "feedback" if where == "submission" else tmp_path / "feedback"
    feedback.mkdir()
    if where == "foreign":
        (feedback / NB02.name).write_text('{"cells": [], "metadata": {}}')
    with pytest.raises(SystemExit) as exit_:
        course.main(["autograde", str(submitted), "--feedback", str(feedback), "--allow-root"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "feedback folder" in err and "Traceback" not in err
    assert ("inside the submission" in err) == (where == "submission") and not graded
    assert [p.name for p in feedback.iterdir()] == ([] if where == "submission" else [NB02.name])
    if where == "foreign":
        assert (feedback / NB02.name).read_text() == '{"cells": [], "metadata": {}}'


def test_autograde_writes_each_graded_notebook_as_feedback(tmp_path, monkeypatch):
    """Each graded notebook goes to the feedback folder with its score in its metadata, and a
    second run replaces the feedback it wrote; a submission that is no notebook leaves none."""
    from dflash_lite.course import grading

    def run(source, path, work, hidden, limits, env):      # what grading keeps, without a kernel
        if path.read_text() == "not json":
            return {"cells": {"a": [0.0, 2.0, "not a notebook"]}, "stopped": "not a notebook",
                    "kernel_score": 0.0, "graded": None}
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
        return {"cells": {"a": [1.5, 2.0, ""]}, "stopped": "", "kernel_score": 2.0, "graded": nb}

    monkeypatch.setattr(grading, "run_submission", run)
    submitted, feedback = tmp_path / "alice", tmp_path / "feedback"
    submitted.mkdir()
    (submitted / NB02.name).write_text(NB02.read_text())
    for _ in range(2):
        course.autograde(submitted, allow_root=True, feedback=feedback)
        written = nbformat.read(feedback / NB02.name, as_version=4)
        assert written.metadata[course.FEEDBACK_KEY] == {"score": 1.5, "max_score": 2.0}
        assert written.cells[0].source == "print(1)"
    (feedback / NB02.name).unlink()
    (submitted / NB02.name).write_text("not json")
    course.autograde(submitted, allow_root=True, feedback=feedback)
    assert not (feedback / NB02.name).exists()
