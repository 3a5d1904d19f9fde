"""The course site builds offline from the committed notebooks: every chapter and docs page is a
page with its figures, and nothing on it loads from the network (docs/site/conf.py)."""
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from dflash_lite.course import commands as course
from dflash_lite.course import site as course_site
from dflash_lite.measuring import plotting

DOCS_DEPS = ("sphinx", "myst_nb", "furo", "jupyter_server_mathjax")


def _missing_docs_deps() -> list[str]:
    import importlib.util

    return [name for name in DOCS_DEPS if importlib.util.find_spec(name) is None]


@pytest.mark.slow
@pytest.mark.skipif(bool(_missing_docs_deps()), reason="the docs dependencies are not installed "
                    "(pip install -r docs/requirements.txt)")
def test_site_builds_every_chapter_with_figures_and_local_maths(tmp_path):
    index = course_site.build_site(tmp_path / "site")                   # the student site
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
    missing_mathjax = mathjax_files_missing(index.parent / "_static" / "mathjax")
    assert not missing_mathjax, f"MathJax would ask for files the site lacks: {missing_mathjax[:5]}"
    assert (index.parent / "_static" / "course.css").is_file()
    for page in index.parent.rglob("*.html"):
        html = page.read_text()
        remote = re.findall(r'<(?:script|link|img)[^>]*(?:src|href)="(?:https?:)?//[^"]*"', html)
        assert not remote, f"{page.name} loads {remote[0]}"
        for ref in re.findall(r'<(?:script|link|img)\b[^>]*?\b(?:src|href)="([^"#?]+)', html):
            if not re.match(r"[a-z]+:", ref):                      # mailto:, data: ...
                assert (page.parent / ref).resolve().exists(), f"{page.name}: no {ref}"
        if "MathJax.js" in html:
            assert '"webFont": "STIX-Web"' in html and '"availableFonts": []' in html, page.name
        for tag in re.findall(r"<img [^>]*>", html):
            alt = re.search(r'alt="([^"]*)"', tag)
            assert alt and len(alt.group(1).split()) >= 3, f"{page.name}: no alt text: {tag}"
            hashed = re.fullmatch(r"[\w/.-]*[0-9a-f]{16,}[\w.]*", alt.group(1))
            assert not hashed, f"{page.name}: the alt text is a hash: {tag}"


def mathjax_files_missing(mathjax: Path) -> list[str]:
    """The files MathJax 2, as docs/site/conf.py configures it, would request from ``mathjax``
    and that are not there: every ``[MathJax]/...`` file named by MathJax.js and the combined
    config that the config does not preload, and the configured web font's data files."""
    conf = {}
    exec((course_site.SITE_SOURCE / "conf.py").read_text(), conf)
    config_name = conf["mathjax_path"].split("config=")[1]
    combined = (mathjax / "config" / f"{config_name}.js").read_text()
    start = combined.index("Preloading(")
    preloading = combined[start:combined.index(");", start)]
    preloaded = set(re.findall(r'"\[MathJax\]/([\w./-]+)"', preloading))
    loader = (mathjax / "MathJax.js").read_text()
    named = set(re.findall(r"\[MathJax\]/([\w./-]+\.js)", combined + loader))
    missing = [name for name in sorted(named - preloaded) if not (mathjax / name).is_file()]
    html_css = conf["mathjax2_config"]["HTML-CSS"]
    assert html_css["availableFonts"] == [] and html_css["preferredFont"] is None \
        and html_css["imageFont"] is None, "MathJax would look for its TeX fonts (not bundled)"
    fonts = mathjax / "jax" / "output" / "HTML-CSS" / "fonts" / html_css["webFont"]
    if not (fonts / "fontdata.js").is_file():
        return missing + [str(fonts / "fontdata.js")]
    fontdata = (fonts / "fontdata.js").read_text()
    data = {name.lstrip("/") for name in re.findall(r'"([\w/-]+\.js)"', fontdata)}
    missing += [f"{fonts.name}/{name}" for name in sorted(data) if not (fonts / name).is_file()]
    if not any((mathjax / "fonts" / "HTML-CSS" / html_css["webFont"] / "woff").glob("*.woff")):
        missing.append(f"fonts/HTML-CSS/{html_css['webFont']}/woff")
    return missing


@pytest.mark.skipif(bool(_missing_docs_deps()), reason="the docs dependencies are not installed "
                    "(pip install -r docs/requirements.txt)")
def test_mathjax_copy_has_every_file_the_config_asks_for(tmp_path):
    assert mathjax_files_missing(course_site.mathjax_dir()) == []
    broken = tmp_path / "mathjax"                   # the check can fail: a font file removed
    shutil.copytree(course_site.mathjax_dir(), broken)
    (broken / "jax" / "output" / "HTML-CSS" / "fonts" / "STIX-Web" / "fontdata.js").unlink()
    assert mathjax_files_missing(broken)


# The wide tables the column must hold without scrolling: notebook 06's benchmark table and
# notebook 02's chi-square verdicts (issue 31); other long lines may scroll.
WIDE_TABLES = {"06_benchmarks": r"^(method|autoregressive|model\.generate|draft model|prompt lookup"
                                 r"|EAGLE|DFlash) ",
               "02_speculative_decoding": r"chi-square p ="}


def longest_table_line() -> int:
    """The longest line of the WIDE_TABLES outputs in the committed notebooks, in characters."""
    longest = 0
    for notebook in course.chapters():
        pattern = WIDE_TABLES.get(notebook.stem)
        if pattern is None:
            continue
        for cell in nbformat.read(notebook, as_version=4).cells:
            for out in cell.get("outputs", []):
                if out.output_type == "stream":
                    lines = [line for line in out.text.splitlines() if re.search(pattern, line)]
                    longest = max([longest, *map(len, lines)])
    assert longest > 80, "the wide tables were not found in the outputs"
    return longest


def test_site_column_holds_the_widest_output_and_a_figure():
    """The column (docs/site/static/course.css) holds the widest table in furo's code font
    (0.8125 rem of a 16 px root, about 0.6 em per monospace character) and a figure at its size."""
    css = (course_site.SITE_SOURCE / "static" / "course.css").read_text()
    wide = re.search(r"@media \(min-width: 82em\) \{\s*"
                     r"\.content \{ width: ([\d.]+)em; padding: 0 ([\d.]+)em", css)
    assert wide, "course.css no longer sets the column's width and padding"
    inner_px = (float(wide.group(1)) - 2 * float(wide.group(2))) * 16
    assert inner_px >= longest_table_line() * 0.6 * 0.8125 * 16, (inner_px, longest_table_line())
    assert inner_px >= plotting.FIGURE_WIDTH * plotting.FIGURE_DPI
    assert "overflow-x: auto" in css                # narrower screens scroll the outputs


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
        course_site.stage_site(stage, instructor=instructor)
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
        course_site.check_site_dir(foreign)
    with pytest.raises(SystemExit):
        course.main(["site", str(foreign)])
    assert "Traceback" not in capsys.readouterr().err
    assert (foreign / "index.html").read_text() == "<p>someone's page</p>"
    with pytest.raises(ValueError, match="package"):
        course_site.check_site_dir(course.ROOT / "dflash_lite" / "site")
    course_site.check_site_dir(tmp_path / "new")                     # a new folder is fine
