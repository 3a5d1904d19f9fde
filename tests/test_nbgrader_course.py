"""The course layout (course/nbgrader_config.py, one assignment per chapter) runs under stock
nbgrader, offline: ``nbgrader generate_assignment`` writes the student edition of a chapter, and
``nbgrader autograde`` runs two submissions of it (one blank, one filled with the worked answers);
the grader (``python -m dflash_lite.course.grader``) then scores the autograded notebooks: 0 for the
blank one, full marks for the filled one. All of it in a temporary copy of course/."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
STEM = "02_speculative_decoding"


def nbgrader(args, cwd, env):
    run = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def test_every_chapter_is_an_assignment():
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        link = ROOT / "course" / "source" / f"ch{notebook.name[:2]}" / notebook.name
        assert link.resolve() == notebook.resolve(), f"{link} does not lead to {notebook.name}"


@pytest.mark.slow
def test_stock_nbgrader_generates_and_autogrades_a_chapter(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tests"))
    import test_student_edition as helpers

    course = tmp_path / "course"
    shutil.copytree(ROOT / "course", course, symlinks=False)  # the links become copies
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "DFLASH_LITE_FIGURES": str(tmp_path / "figures"),
        "DFLASH_LITE_RESULTS": str(tmp_path / "results"),
    }
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    nbgrader(["generate_assignment", "ch02"], course, env)
    released = nbformat.read(course / "release" / "ch02" / f"{STEM}.ipynb", as_version=4)
    assert not any("### BEGIN SOLUTION" in c.source for c in released.cells)

    source = nbformat.read(ROOT / "notebooks" / f"{STEM}.ipynb", as_version=4)
    answers = helpers.recorded_answers(ROOT / "notebooks" / "solutions" / f"{STEM}.py", monkeypatch)
    monkeypatch.undo()
    blank = nbformat.from_dict(released)
    for cell in blank.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in helpers.SMALL[STEM].items())
    for student, nb in (
        ("alice", blank),
        ("bob", helpers.filled(released, source, answers, helpers.SMALL[STEM])),
    ):
        (course / "submitted" / student / "ch02").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / "ch02" / f"{STEM}.ipynb")
    nbgrader(["autograde", "ch02", "--create"], course, env)

    scores = {}
    for student in ("alice", "bob"):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "dflash_lite.course.grader",
                str(ROOT / "notebooks" / f"{STEM}.ipynb"),
                str(course / "autograded" / student / "ch02" / f"{STEM}.ipynb"),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        cells = json.loads(run.stdout.strip().splitlines()[-1])
        scores[student] = (
            sum(c[0] for c in cells.values()),
            sum(c[1] for c in cells.values()),
            cells,
        )
    assert scores["alice"][0] == 0 and scores["alice"][1] > 0, scores["alice"]
    assert scores["bob"][0] == scores["bob"][1] == scores["alice"][1], scores["bob"]
