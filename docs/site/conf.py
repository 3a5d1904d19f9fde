"""Sphinx configuration of the course site (built by ``python -m dflash_lite.course site OUT_DIR``).

The build stages the landing page, ``docs/*.md`` and the executed ``notebooks/NN_*.ipynb`` into a
temporary directory with the repository's layout, so the notebooks' links to ``../docs/glossary.md``
resolve. Nothing is executed and nothing is downloaded: maths is typeset by a MathJax copy that the
build puts under ``_static/mathjax`` (from the ``jupyter-server-mathjax`` package).
"""
from pathlib import Path

from dflash_lite.course.site import SITE_SOURCE

project = "dflash-lite"
author = "dflash-lite contributors"
copyright = "the dflash-lite contributors"
extensions = ["myst_nb"]

root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
nb_execution_mode = "off"                 # the committed outputs are the site's outputs
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3                  # "glossary.md#tau" links resolve to the heading
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]

html_theme = "furo"
html_title = "dflash-lite: a course on DFlash speculative decoding"
# _static (the MathJax copy, staged by the build) and this folder's static/ (the course's CSS).
html_static_path = ["_static", str(SITE_SOURCE / "static")]
html_css_files = ["course.css"]           # a column wide enough for the notebooks' tables
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"  # relative to _static
myst_update_mathjax = False               # its settings are MathJax 3's; the bundled copy is 2.7
# The bundled copy ships the STIX-Web fonts only (no TeX fonts), as Jupyter configures it: without
# these settings MathJax asks for fonts/TeX/fontdata.js, gets a 404 and falls back to crude glyphs.
MATHJAX_FONT = "STIX-Web"
mathjax2_config = {
    "tex2jax": {"processClass": "math|output_area|tex2jax_process",
                "ignoreClass": "tex2jax_ignore|mathjax_ignore"},
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": MATHJAX_FONT,
                 "imageFont": None, "linebreaks": {"automatic": True}},
    "SVG": {"font": MATHJAX_FONT, "linebreaks": {"automatic": True}},
    "CommonHTML": {"linebreaks": {"automatic": True}},
    "menuSettings": {"renderer": "HTML-CSS"},
    "MathMenu": {"showFontMenu": False, "showRenderer": False},
}
html_show_sourcelink = False
html_copy_source = False


def image_alt_text(app, doctree, docname):
    """Give each notebook figure its alt text: the text form of the output that holds the image
    (``plotting.save_figure`` writes the figure's titles and axis labels there), else the first
    sentence of the markdown cell before it. myst-nb names the image by the hash of its bytes."""
    import base64
    import hashlib
    import json

    from docutils import nodes

    source = Path(app.srcdir) / f"{docname}.ipynb"
    if not source.is_file():
        return
    alt, last_markdown = {}, ""
    for cell in json.loads(source.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            text = " ".join("".join(cell["source"]).split())
            last_markdown = text.replace("*", "").replace("#", "").strip().split(". ")[0][:200]
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png is None:
                continue
            plain = "".join(out["data"].get("text/plain", ""))
            digest = hashlib.sha256(base64.b64decode("".join(png))).hexdigest()
            described = plain if plain and not plain.startswith("<Figure") else ""
            alt[digest] = described or (f"Figure: {last_markdown}" if last_markdown else "Figure")
    for image in doctree.findall(nodes.image):
        digest = Path(image["uri"]).stem
        if digest in alt and not image.get("alt"):
            image["alt"] = alt[digest]


def setup(app):
    app.connect("doctree-resolved", image_alt_text)
