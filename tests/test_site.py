"""The course site builds offline from the committed notebooks: every chapter and docs page is a
page with its figures, and nothing on it loads from the network (docs/site/conf.py)."""
import re
from pathlib import Path

import pytest

from dflash_lite import course

DOCS_DEPS = ("sphinx", "myst_nb", "furo", "jupyter_server_mathjax")


def _missing_docs_deps() -> list[str]:
    import importlib.util

    return [name for name in DOCS_DEPS if importlib.util.find_spec(name) is None]


@pytest.mark.slow
@pytest.mark.skipif(bool(_missing_docs_deps()), reason="the docs dependencies are not installed "
                    "(pip install -r docs/requirements.txt)")
def test_site_builds_every_chapter_with_figures_and_local_maths(tmp_path):
    index = course.build_site(tmp_path / "site")                   # the student site
    assert index.is_file()
    landing = index.read_text()
    pages = "\n".join(re.sub(r"<[^>]+>", "", p.read_text()) for p in (index.parent / "notebooks").glob("*.html"))
    assert "crop(n - k)" not in pages and "speculative_greedy" in pages, "the student site shows a solution"
    for notebook in course.chapters():
        page = index.parent / "notebooks" / (notebook.stem + ".html")
        assert page.is_file(), page
        assert f'notebooks/{notebook.stem}.html' in landing        # linked from the landing page
        images = re.findall(r'<img [^>]*src="([^"]+)"', page.read_text())
        if '"image/png"' in notebook.read_text():
            assert images, f"{page.name} shows none of its figures"
        for src in images:
            assert (page.parent / src).resolve().is_file(), src
    for name in ("method", "glossary"):
        assert (index.parent / "docs" / f"{name}.html").is_file()
    assert (index.parent / "_static" / "mathjax" / "MathJax.js").is_file()
    for page in index.parent.rglob("*.html"):
        remote = re.findall(r'<(?:script|link|img)[^>]*(?:src|href)="(?:https?:)?//[^"]*"', page.read_text())
        assert not remote, f"{page.name} loads {remote[0]}"


def test_site_refuses_a_file_as_output_dir(tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("")
    with pytest.raises(SystemExit):
        course.main(["site", str(target)])
    err = capsys.readouterr().err
    assert "not a directory" in err or "docs dependencies" in err
    assert "Traceback" not in err


SOLUTION_LINES = ("cache.crop(n - k)", "mask[rows, :a] = True", "return x * cos + torch.cat([-x2, x1], dim=-1) * sin")


def test_student_site_stages_no_solution_and_instructor_site_does(tmp_path):
    """Staged sources (no Sphinx run): the student site's chapters have their solution cells
    blanked, the instructor's keep them."""
    if _missing_docs_deps():
        pytest.skip("the docs dependencies are not installed")
    staged = {}
    for instructor in (False, True):
        stage = tmp_path / ("instructor" if instructor else "student")
        stage.mkdir()
        course.stage_site(stage, instructor=instructor)
        staged[instructor] = "\n".join(p.read_text() for p in (stage / "notebooks").glob("*.ipynb"))
    for line in SOLUTION_LINES:
        assert line not in staged[False], f"the student site shows {line!r}"
        assert line in staged[True], f"the instructor site lacks {line!r}"
    assert "BEGIN SOLUTION" not in staged[False] and "notebooks/solutions/" not in staged[False]


def test_site_never_builds_over_a_foreign_folder(tmp_path, capsys):
    foreign = tmp_path / "web"
    foreign.mkdir()
    (foreign / "index.html").write_text("<p>someone's page</p>")
    with pytest.raises(ValueError, match="not built by course site"):
        course.check_site_dir(foreign)
    with pytest.raises(SystemExit):
        course.main(["site", str(foreign)])
    assert "Traceback" not in capsys.readouterr().err
    assert (foreign / "index.html").read_text() == "<p>someone's page</p>"
    with pytest.raises(ValueError, match="package"):
        course.check_site_dir(course.ROOT / "dflash_lite" / "site")
    course.check_site_dir(tmp_path / "new")                     # a new folder is fine
