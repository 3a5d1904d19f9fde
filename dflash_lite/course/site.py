"""The course site (``python -m dflash_lite.course site OUT_DIR``): the executed notebooks,
the reference pages of ``SITE_DOCS`` rendered offline (Sphinx, myst-nb) from the committed
outputs, nothing run; student and instructor builds: docs/teaching.md#what-students-get."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..checkout import ROOT, chapters
from ..outputs import guard_output_dir
from .blanks import blank, student_markdown

SITE_SOURCE = ROOT / "docs" / "site"        # conf.py and the landing page
SITE_DOCS = ("method.md", "glossary.md", "batches.md")


def mathjax_dir() -> Path:
    """The MathJax 2 bundled by ``jupyter-server-mathjax``: the site typesets with it, not a CDN."""
    import jupyter_server_mathjax

    return Path(jupyter_server_mathjax.__file__).parent / "static"


def student_notebook(path: Path):
    """A chapter as the student site shows it: its outputs, but every solution cell blanked
    (:func:`blank`, its outputs dropped) and no pointer to the worked solutions."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = blank(cell.source)
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        elif cell.cell_type == "markdown":
            cell.source = student_markdown(cell.source)
    return nb


def stage_site(stage: Path, instructor: bool = False) -> Path:
    """Lay the site's sources out in ``stage`` as in the repository (relative links resolve):
    ``index.md``, ``docs/``, ``notebooks/`` (no solutions unless ``instructor``); return it."""
    import nbformat

    for name in ("conf.py", "index.md"):
        shutil.copy2(SITE_SOURCE / name, stage / name)
    (stage / "docs").mkdir()
    for name in SITE_DOCS:
        shutil.copy2(ROOT / "docs" / name, stage / "docs" / name)
    (stage / "notebooks").mkdir()
    for path in chapters():
        if instructor:
            shutil.copy2(path, stage / "notebooks" / path.name)
        else:
            nbformat.write(student_notebook(path), stage / "notebooks" / path.name)
    shutil.copytree(mathjax_dir(), stage / "_static" / "mathjax")
    return stage


SITE_MARK = ".dflash-site"


def check_site_dir(out_dir: Path) -> None:
    """Refuse a site folder that holds anything this command did not build (a foreign
    ``index.html`` above all), or that lies inside the package."""
    guard_output_dir(out_dir, "the site folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / SITE_MARK).is_file():
        raise ValueError(f"{out_dir} is not empty and was not built by course site: "
                         "give a new folder")


def build_site(out_dir: str | Path, jobs: int = 2, instructor: bool = False) -> Path:
    """Build the course site into ``out_dir`` (with ``instructor``, the solutions too) and return
    its ``index.html``. Warnings are printed, not fatal: a stale link must not block a release."""
    from sphinx.cmd.build import build_main

    out_dir = Path(out_dir).resolve()
    check_site_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SITE_MARK).write_text("instructor\n" if instructor else "student\n")
    with tempfile.TemporaryDirectory(prefix="dflash-site-") as tmp:
        stage = stage_site(Path(tmp), instructor)
        status = build_main(["-b", "html", "-q", "-j", str(jobs), "-d", str(stage / "_doctrees"),
                             str(stage), str(out_dir)])
    if status != 0:
        raise RuntimeError(f"sphinx-build failed with status {status}")
    return out_dir / "index.html"
