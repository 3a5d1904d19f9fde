"""Student editions (nbgrader): every chapter's build-it cells and exercises become blanks, and the
autograder scores a filled edition in full and an unfilled one at zero.

* Structure (every chapter, no execution): each solution cell holds a solution region, is followed
  by a locked test cell worth points, and its student version holds only the stub.
* Execution (notebook 02, slow): the student edition runs up to its first blank and stops there
  with NotImplementedError; filled from the source's build-it regions and from the answers the
  worked solutions in ``notebooks/solutions/`` give to the same checks, it gets full marks; unfilled,
  it gets 0 on every autograded cell, and the autograder does not crash.
* A blank fails only its own cell and its check: run with every blank left (chapter 03 quickly,
  every chapter under ``slow``), the only cells that raise are solution cells and graded
  test cells; the demonstrations after a blank run on the package's version and say so.
"""
import importlib
import inspect
import re
import runpy
import textwrap
from pathlib import Path

import nbformat
import pytest

from dflash_lite.course import commands as course
from dflash_lite.course import grader
from test_notebooks import OVERRIDES

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SMALL = {"02_speculative_decoding": {"draft_tokens": 2, "num_prompts": 1, "num_samples": 600}}


def nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    course.student_edition(out)
    return out


def test_every_chapter_has_blanks_and_points():
    for nb_path in course.chapters():
        nb = nbformat.read(nb_path, as_version=4)
        solutions = [c for c in nb.cells if nbgrader(c).get("solution")]
        tests = [c for c in nb.cells if nbgrader(c).get("grade")]
        assert solutions and tests, f"{nb_path.name} has no nbgrader cells"
        ids = [nbgrader(c)["grade_id"] for c in solutions + tests]
        assert len(ids) == len(set(ids)), f"{nb_path.name}: duplicate grade_id"
        for c in solutions:
            assert c.source.count(BEGIN) == c.source.count(END) >= 1, nbgrader(c)["grade_id"]
        for c in tests:
            assert nbgrader(c)["points"] > 0 and nbgrader(c)["locked"] and BEGIN not in c.source
        # every solution cell is checked by the test cell after it
        for i, c in enumerate(nb.cells):
            if nbgrader(c).get("solution"):
                after = next(d for d in nb.cells[i + 1:] if d.cell_type == "code")
                assert nbgrader(after).get("grade"), f"{nbgrader(c)['grade_id']} has no test cell after it"


def test_student_edition_blanks_every_solution(edition):
    for nb_path in course.chapters():
        source = nbformat.read(nb_path, as_version=4)
        student = nbformat.read(edition / nb_path.name, as_version=4)
        assert len(student.cells) == len(source.cells)
        for s, c in zip(source.cells, student.cells):
            if nbgrader(s).get("solution"):
                assert BEGIN not in c.source
                assert "YOUR CODE HERE" in c.source or c.source == course.blank(s.source)
                solution = re.findall(rf"{BEGIN}\n(.*?){END}", s.source, flags=re.S)
                assert all(line.strip() not in c.source for body in solution if not course._is_stub(body)
                           for line in body.splitlines()
                           if len(line.strip()) > 20 and not line.strip().startswith("#")), \
                    nbgrader(s)["grade_id"]
            elif nbgrader(s).get("grade"):
                assert c.source == s.source
            if c.cell_type == "code":
                assert not c.outputs


def recorded_answers(solution_script: Path, monkeypatch) -> dict:
    """Run a worked-solution script, recording the first argument it passes to each check."""
    module = importlib.import_module(f"dflash_lite.exercises.ch{solution_script.name[:2]}")
    answers = {}
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        if name.startswith("check_"):
            def record(answer, *args, _fn=fn, _name=name, **kwargs):
                answers[_name] = answer
                return _fn(answer, *args, **kwargs)
            monkeypatch.setattr(module, name, record)
    runpy.run_path(str(solution_script), run_name="__main__")
    return answers


def as_code(name: str, answer) -> str:
    """Python that binds ``name`` to a recorded answer."""
    if inspect.isfunction(answer) or inspect.isclass(answer):
        code = textwrap.dedent(inspect.getsource(answer))
        return code if answer.__name__ == name else f"{code}\n{name} = {answer.__name__}"
    return f"{name} = {answer!r}"


def filled(student, source, answers: dict, parameters: dict):
    """The student edition with every blank filled: build-it cells from the source notebook,
    exercise cells from the worked solutions' answers; the parameters made small."""
    nb = nbformat.from_dict(student)
    cells, src = nb.cells, source.cells
    for i, cell in enumerate(cells):
        if "parameters" in cell.metadata.get("tags", []):
            cell.source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in parameters.items())
        if not nbgrader(cell).get("solution"):
            continue
        if "_build_" in nbgrader(cell)["grade_id"]:
            cell.source = src[i].source
            continue
        check = next(c for c in cells[i + 1:] if nbgrader(c).get("grade")).source
        call = re.search(r"(check_\w+)\((\w+)", check)
        name = call.group(2)
        imports = [line for line in cell.source.splitlines() if line.startswith(("from ", "import "))]
        cell.source = "\n".join(imports + [as_code(name, answers[call.group(1)])])
    return nb


@pytest.mark.slow
def test_autograde_full_marks_when_filled_and_zero_when_blank(edition, tmp_path, monkeypatch,
                                                           capfd):
    stem = "02_speculative_decoding"
    source = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    student = nbformat.read(edition / f"{stem}.ipynb", as_version=4)
    answers = recorded_answers(ROOT / "notebooks" / "solutions" / f"{stem}.py", monkeypatch)
    monkeypatch.undo()                                      # the checks unpatched again
    monkeypatch.setenv("DFLASH_LITE_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("DFLASH_LITE_RESULTS", str(tmp_path / "results"))

    done, blank = tmp_path / "done", tmp_path / "blank"
    done.mkdir(); blank.mkdir()
    nbformat.write(filled(student, source, answers, SMALL[stem]), done / f"{stem}.ipynb")
    unfilled = nbformat.from_dict(student)
    for cell in unfilled.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in SMALL[stem].items())
    nbformat.write(unfilled, blank / f"{stem}.ipynb")

    full = course.autograde(done, course_root=tmp_path / "course_done", allow_root=True,
                            feedback=tmp_path / "feedback")[stem]
    assert full["max_score"] > 0 and full["score"] == full["max_score"], full["cells"]
    # the sandboxed kernel talks over sockets in its working folder, not TCP ports in plain text
    assert "TCP" not in capfd.readouterr().err
    # the feedback is the run the student can read: every check's output, no grader's cell
    back = nbformat.read(tmp_path / "feedback" / f"{stem}.ipynb", as_version=4)
    assert back.metadata[course.FEEDBACK_KEY]["score"] == full["score"]
    assert not any(grader.COLLECTOR_KEY in c.metadata for c in back.cells)
    assert any("correct" in o.get("text", "") for c in back.cells if nbgrader(c).get("grade")
               for o in c.get("outputs", []))

    zero = course.autograde(blank, course_root=tmp_path / "course_blank", allow_root=True)[stem]
    assert zero["max_score"] == full["max_score"]
    assert all(score == 0 for score, _ in zero["cells"].values()), zero["cells"]

    # the unfilled edition ran up to its first blank, and the first error is that blank's own
    # (raised where the blank runs: in its own cell, or in the test cell that calls the function)
    graded = nbformat.read(tmp_path / "course_blank" / "graded" / f"{stem}.ipynb", as_version=4)
    code = [c for c in graded.cells if c.cell_type == "code"]
    first = next(i for i, c in enumerate(code) if any(o.output_type == "error" for o in c.outputs))
    first_blank = next(i for i, c in enumerate(code) if nbgrader(c).get("solution"))
    assert first >= first_blank
    assert [o.ename for o in code[first].outputs if o.output_type == "error"] == ["NotImplementedError"]


def run_blank(edition: Path, stem: str, monkeypatch) -> tuple[list, str]:
    """Execute a chapter's student notebook as released, every blank left, at the small
    parameters of ``tests/test_notebooks.py``, with the package bundled beside it. Returns the
    cells that raised, as (code cell number, grade id or None, nbgrader metadata, error name),
    and everything the cells printed."""
    from nbclient import NotebookClient

    nb = nbformat.read(edition / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in OVERRIDES[stem].items())
    monkeypatch.setenv("PYTHONPATH", str(edition))           # the kernel imports the bundled copy
    monkeypatch.setenv("MPLBACKEND", "Agg")
    NotebookClient(nb, timeout=1200, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(edition)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    raised = [(i, nbgrader(c).get("grade_id"), nbgrader(c), o.ename)
              for i, c in enumerate(code) for o in c.outputs if o.output_type == "error"]
    printed = "".join(o.get("text", "") for c in code for o in c.outputs)
    return raised, printed


def assert_only_blanks_raise(raised: list, stem: str) -> None:
    demonstrations = [(i, ename) for i, _, meta, ename in raised
                      if not (meta.get("solution") or meta.get("grade"))]
    assert not demonstrations, (f"{stem}: code cells that are neither a blank nor its check "
                                f"raised with every blank left: {demonstrations}")


def test_a_blank_fails_only_its_own_cells(tmp_path, monkeypatch):
    """Chapter 03: five build-it blanks in a row, then a demonstration built on two of them."""
    out = tmp_path / "release"
    course.student_edition(out, ["03"])
    raised, printed = run_blank(out, "03_block_diffusion_drafter", monkeypatch)
    assert_only_blanks_raise(raised, "03")
    failed = {grade_id for _, grade_id, _, _ in raised}
    assert {f"ch03_build_{name}_check" for name in
            ("context", "rope", "kv_injection", "drafter_forward", "block_mask")} <= failed
    assert "my_draft_logits is not done yet: this cell uses the package's" in printed


def _builds(notebook: Path) -> bool:
    """The chapter has build-it cells (grade ids ``chNN_build_*``): later demonstrations may use
    what they build. Other chapters' blanks are exercise answers, each read by its check only."""
    return re.search(r'"grade_id": "ch\d+_build_', notebook.read_text()) is not None


@pytest.mark.slow
@pytest.mark.parametrize("notebook", [p for p in course.chapters() if _builds(p)
                                      and not p.stem.startswith("03")], ids=lambda p: p.stem)
def test_every_chapter_runs_past_its_blanks(edition, notebook, monkeypatch):
    """Every chapter with build-it cells but 03 (the quick test above runs it)."""
    raised, _ = run_blank(edition, notebook.stem, monkeypatch)
    assert_only_blanks_raise(raised, notebook.stem)
