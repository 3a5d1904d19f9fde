"""The student bundle (``course student-edition DIR``) holds no answer: no solutions folder, no
instructor material, no complete notebook, no reference answer in the package, no solution line in
any file; and it is written only where it cannot destroy anything: never inside the repository
(over the instructor's notebooks), never into a folder holding anything it did not write."""

import re
from pathlib import Path

import nbformat
import pytest

from dflash_lite.course import commands as course

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
NAMES = (
    r"reference_article_output",
    r"reference_lookup",
    r"(?<!check_)unmasking_proposer",
    r"reference_mse_on_probs",
    r"notebooks/solutions",
)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "edition"
    course.student_edition(out)
    return out


def texts(folder: Path):
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in (
            ".py",
            ".ipynb",
            ".md",
            ".json",
            ".txt",
            ".toml",
            ".cfg",
        ):
            yield path, path.read_text(errors="replace")


def solution_lines() -> set[str]:
    """Every code line (over 24 characters) of every solution region and worked solution, and of
    the instructor's references."""
    lines = set()
    for nb_path in course.chapters():
        for cell in nbformat.read(nb_path, as_version=4).cells:
            for body in re.findall(rf"{BEGIN}\n(.*?){END}", cell.source, flags=re.S):
                lines |= {line.strip() for line in body.splitlines()}
    def bodies(paths) -> set[str]:
        found = set()
        for path in paths:
            for body in re.findall(r"^def .*?(?=^\S)", path.read_text(), flags=re.S | re.M):
                found |= {line.strip() for line in body.splitlines()[1:]}
        return found

    lines |= bodies((ROOT / "notebooks" / "solutions").glob("*.py"))
    # the hidden checks build their inputs as the bundle's own self-checks do: a line they share
    # with those is a check's, not an answer
    shipped_checks = "\n".join(p.read_text()
                               for p in (ROOT / "dflash_lite" / "exercises").glob("*.py"))
    lines |= {line for line in bodies((ROOT / "instructor").glob("*.py"))
              if line not in shipped_checks}
    # lines the chapters show anyway (outside their solution regions), or the package has,
    # are not answers
    public = "\n".join(
        re.sub(rf"{BEGIN}\n.*?{END}", "", cell.source, flags=re.S)
        for nb_path in course.chapters()
        for cell in nbformat.read(nb_path, as_version=4).cells
    )
    # the library itself is public; the exercises' self-checks are not, they ship with the bundle
    public += "\n".join(p.read_text() for p in (ROOT / "dflash_lite").rglob("*.py")
                        if "exercises" not in p.parts)
    return {
        line
        for line in lines
        if len(line) > 24
        and not line.startswith(("#", '"""', "from ", "import "))
        and "None" not in line
        and line not in public
    }


def test_bundle_layout(bundle):
    names = {p.name for p in bundle.rglob("*")}
    assert (
        "solutions" not in names and "instructor" not in names and "hidden_checks.py" not in names
    )
    assert (bundle / "dflash_lite" / "exercises" / "ch02.py").is_file() and (
        bundle / "STUDENTS.md"
    ).is_file()
    notebooks = sorted(p.name for p in bundle.glob("*.ipynb"))
    assert notebooks == [p.name for p in course.chapters()]
    assert not list(
        bundle.rglob("[0-9][0-9]_*.py")
    ), "a jupytext source (a complete notebook) in the bundle"
    for path in bundle.glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            assert BEGIN not in cell.source
            assert cell.cell_type != "code" or not cell.outputs, f"{path.name} keeps outputs"


def test_no_reference_or_solution_leaks_into_the_bundle(bundle):
    lines = solution_lines()
    assert len(lines) > 100
    for path, text in texts(bundle):
        for name in NAMES:
            assert not re.search(name, text), f"{path.relative_to(bundle)} mentions {name}"
        found = [line for line in lines if line in text]
        assert not found, f"{path.relative_to(bundle)} holds a solution line: {found[0]!r}"


def test_stubs_keep_their_hints_and_names(bundle):
    nb = nbformat.read(bundle / "05_training.ipynb", as_version=4)
    cell = next(
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ch05_build_loss"
    )
    for name in ("w", "ce", "my_loss", "my_accuracy"):
        assert re.search(rf"^{name} = None  # YOUR CODE HERE", cell.source, flags=re.M), name
    assert "# step 1:" in cell.source
    nb = nbformat.read(bundle / "03_block_diffusion_drafter.ipynb", as_version=4)
    cell = next(
        c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "ch03_build_context"
    )
    assert "my_features = None" in cell.source and "context = None" in cell.source
    exercise = next(
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ch03_exercise_1"
    )
    assert "answer_1 = None" in exercise.source and "raise" not in exercise.source


def test_student_edition_refuses_where_it_would_destroy(tmp_path, capsys):
    for place in (ROOT / "notebooks", ROOT / "dflash_lite" / "edition"):
        with pytest.raises(SystemExit):
            course.main(["student-edition", str(place), "--notebooks", "02"])
        err = capsys.readouterr().err
        assert "error:" in err and "Traceback" not in err, err
    assert not (ROOT / "dflash_lite" / "edition").exists()
    foreign = tmp_path / "work"
    foreign.mkdir()
    (foreign / "02_speculative_decoding.ipynb").write_text("a student's own notebook")
    with pytest.raises(SystemExit):
        course.main(["student-edition", str(foreign), "--notebooks", "02"])
    assert "not written by student-edition" in capsys.readouterr().err
    assert (foreign / "02_speculative_decoding.ipynb").read_text() == "a student's own notebook"


def test_student_edition_writes_again_into_its_own_folder(tmp_path):
    out = tmp_path / "edition"
    course.student_edition(out, ["01"])
    course.student_edition(out, ["01", "02"])  # its own folder: allowed
    assert (out / "02_speculative_decoding.ipynb").is_file()
    # a notebook a student has worked in is never written over
    work = out / "01_autoregressive_bottleneck.ipynb"
    work.write_text(work.read_text().replace("answer_1 = None", "answer_1 = 3", 1))
    with pytest.raises(ValueError, match="changed since student-edition wrote it"):
        course.student_edition(out, ["01"])
    assert "answer_1 = 3" in work.read_text()
    work.unlink()
    (out / "mine.txt").write_text("x")
    with pytest.raises(ValueError, match="did not write"):
        course.student_edition(out, ["01"])
