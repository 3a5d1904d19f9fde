"""Sphinx configuration of the course site (built by ``python -m dflash_lite.course site OUT_DIR``).

The build stages the landing page, ``docs/*.md`` and the executed ``notebooks/NN_*.ipynb`` into a
temporary directory with the repository's layout, so the notebooks' links to ``../docs/glossary.md``
resolve. Nothing is executed and nothing is downloaded: maths is typeset by a MathJax copy that the
build puts under ``_static/mathjax`` (from the ``jupyter-server-mathjax`` package).
"""
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
html_static_path = ["_static"]
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"  # relative to _static
myst_update_mathjax = False               # its settings are MathJax 3's; the bundled copy is 2.7
mathjax2_config = {"tex2jax": {"processClass": "math|output_area|tex2jax_process",
                               "ignoreClass": "tex2jax_ignore|mathjax_ignore"}}
html_show_sourcelink = False
html_copy_source = False
