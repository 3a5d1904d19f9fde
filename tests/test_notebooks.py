"""The notebooks as a student gets them.

* Every notebook runs under papermill with at least one parameter overridden, and the run leaves
  the working tree as it found it (figures and results go to the tests' temporary directory).
* Each ``.ipynb`` and its jupytext script ``notebooks/NN_name.py`` hold the same cells.
* Committed outputs show every figure inline, and carry no progress bars, warnings or absolute paths.

Each notebook runs once in the suite: under papermill with small overridden parameters (marked
``slow``). That run checks what an nbval run at the defaults would (every cell executes without an
error against the current package) and, beyond it, that the parameters cell is honoured and the
working tree is left alone. Executing a notebook at its defaults is how its committed outputs are
made (README, "Editing a notebook"); ``python -m pytest --nbval-lax notebooks/`` does that check
on demand.
"""
import re
import shutil
import subprocess
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
OVERRIDES = {
    "00_tour": {"max_new_tokens": 12, "num_parity_prompts": 2},
    "01_autoregressive_bottleneck": {"token_counts": [1, 4, 8], "repeats": 3, "num_prompts": 1, "max_new_tokens": 8},
    "02_speculative_decoding": {"draft_tokens": 2, "max_new_tokens": 16, "num_prompts": 1, "num_samples": 600},
    "03_block_diffusion_drafter": {"block_size": 8, "num_prompts": 2, "max_new_tokens": 16, "timing_repeats": 3, "passes": [1, 2]},
    "04_conditioning": {"num_prompts": 1, "max_new_tokens": 24, "timing_repeats": 3, "accuracy_prompts": 2},
    "05_training": {"num_prompts": 24, "max_new_tokens": 24, "steps": 12, "probe_prompts": 1},
    "06_benchmarks": {"num_prompts": 1, "max_new_tokens": 16, "block_sizes": [4, 16], "repeats": 1},
    "07_checking_the_source_article": {"num_prompts": 1, "max_new_tokens": 24, "train_steps": 12},
    "08_real_models": {"num_prompts": 1, "max_new_tokens": 8, "token_counts": [1, 4], "repeats": 1},
    "09_draft_trees": {"num_prompts": 1, "max_new_tokens": 16, "tree_sizes": [4, 16], "demo_tree_size": 6,
                       "timing_repeats": 3},
    "10_gpu_benchmarks": {"token_counts": [1, 4, 16], "repeats": 2, "num_prompts": 1, "max_new_tokens": 16},
    "11_batching_and_serving": {"num_prompts": 2, "max_new_tokens": 12, "batch_sizes": [1, 2],
                                "cost_batch_sizes": [1, 2], "widths": [1, 4, 16], "block_sizes": [16],
                                "repeats": 1, "cost_repeats": 1},
}


def git_status() -> str | None:
    """``git status --porcelain`` of the repository (tracked changes and untracked, non-ignored
    files), or None outside a git checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    run = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True)
    return run.stdout if run.returncode == 0 else None


def test_every_notebook_has_overrides_listed():
    assert NOTEBOOKS, "no notebooks found"
    assert {nb.stem for nb in NOTEBOOKS} == set(OVERRIDES)


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_runs_with_overridden_parameters(notebook, tmp_path):
    import papermill as pm

    before = git_status()
    params = OVERRIDES[notebook.stem]
    out = tmp_path / notebook.name
    pm.execute_notebook(str(notebook), str(out), parameters=params, kernel_name="python3",
                        cwd=str(notebook.parent), progress_bar=False)
    executed = nbformat.read(out, as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and all(f"{k} = {v!r}" in injected[0].source for k, v in params.items())
    assert git_status() == before, "running the notebook changed the working tree"


def cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", []))) for c in nb.cells]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_jupytext_pair_in_sync(notebook):
    script = notebook.with_suffix(".py")
    assert script.is_file(), f"{script.name} is missing: run `jupytext --sync {notebook.name}`"
    paired = jupytext.read(notebook)
    assert paired.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    assert cells(jupytext.read(script)) == cells(paired), \
        f"{notebook.name} and {script.name} differ: run `jupytext --sync notebooks/{script.name}`"


ABSOLUTE_PATH = re.compile(r"(/home/|/Users/|/root/|/tmp/|/private/var/|/work/|site-packages|[A-Z]:\\\\Users)")
PROGRESS = re.compile(r"\r|\d+%\|.*\|| it/s\]|s/it\]")


def outputs(nb):
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            yield i, out


def output_text(out) -> str:
    if out.output_type == "stream":
        return out.text
    if out.output_type == "error":
        return "\n".join(out.traceback)
    return "\n".join(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_are_clean(notebook):
    nb = nbformat.read(notebook, as_version=4)
    executed = [c for c in nb.cells if c.cell_type == "code"]
    assert executed and all(c.execution_count for c in executed if c.source.strip()), \
        f"{notebook.name} is not fully executed"
    for i, out in outputs(nb):
        text = output_text(out)
        assert out.output_type != "error", f"{notebook.name} cell {i} holds an error"
        assert not (out.output_type == "stream" and out.name == "stderr"), \
            f"{notebook.name} cell {i} writes to stderr: {text[:120]!r}"
        assert not PROGRESS.search(text), f"{notebook.name} cell {i} holds a progress bar: {text[:120]!r}"
        match = ABSOLUTE_PATH.search(text)
        assert not match, f"{notebook.name} cell {i} holds an absolute path: {text[max(0, match.start() - 60):][:160]!r}"
        assert " at 0x" not in text, f"{notebook.name} cell {i} prints an object's address: {text[:120]!r}"


CODE_COLUMNS = 100      # the package's limit; JupyterLab clips a longer line in a narrow window


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_lines_fit_the_cell(notebook):
    """Every line of every code cell is within CODE_COLUMNS columns, so a student reads it whole."""
    nb = nbformat.read(notebook, as_version=4)
    long = [(i, line) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for line in cell.source.splitlines() if len(line) > CODE_COLUMNS]
    assert not long, (f"{notebook.name}: {len(long)} code lines over {CODE_COLUMNS} columns, the "
                      f"first in cell {long[0][0]}: {long[0][1][:80]!r}...")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_headings_are_markdown(notebook):
    """A section heading written as a comment in a code cell (a missing ``# %% [markdown]`` in the
    jupytext script) shows as grey code, not as a heading, and drops out of the outline."""
    nb = nbformat.read(notebook, as_version=4)
    hidden = [(i, line) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
              for line in cell.source.splitlines()
              if re.match(r"#\s*#+ ", line) and "SOLUTION" not in line]
    assert not hidden, f"{notebook.name}: a heading inside code cell {hidden[0][0]}: {hidden[0][1]!r}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_saved_figure_is_shown(notebook):
    """Each cell that saves a figure shows at least one image inline."""
    nb = nbformat.read(notebook, as_version=4)
    saving = [c for c in nb.cells if c.cell_type == "code" and re.search(r"\b(save_figure|plot_benchmark\w*)\(", c.source)
              and "def " not in c.source.split("save_figure")[0][-200:]]
    for cell in saving:
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        assert images, f"{notebook.name}: a cell saves a figure but shows none:\n{cell.source[:200]}"


@pytest.mark.slow
def test_real_models_notebook_takes_target_and_drafter_from_directories(tmp_path, monkeypatch):
    """nb08's hub parameters, pointed at local directories standing in for hub checkouts: a target
    directory and a drafter exported in the public DFlash layout (as published drafters ship)."""
    import json
    import shutil

    import nbformat
    import papermill as pm

    from dflash_lite.decoding.checkpoints import export_dflash, load_drafter
    from dflash_lite.decoding.target import SHIPPED, default_drafter_path

    monkeypatch.setenv("DFLASH_LITE_FIGURES", str(tmp_path / "figures"))     # the kernel inherits these
    monkeypatch.setenv("DFLASH_LITE_RESULTS", str(tmp_path / "results"))
    target = tmp_path / "Qwen3-4B"
    shutil.copytree(SHIPPED["tiny"], target)
    drafter = export_dflash(load_drafter(default_drafter_path("tiny")), tmp_path / "Qwen3-4B-DFlash-b16")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"turns": ["Question: Ann has 3 apples and buys 4 more. How many now?\nAnswer:"]}))
    notebook = next(nb for nb in NOTEBOOKS if nb.stem == "08_real_models")
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(str(notebook), str(out), kernel_name="python3", cwd=str(notebook.parent), progress_bar=False,
                        parameters={"target": str(target), "drafter": str(drafter), "prompts_file": str(prompts),
                                    "num_prompts": 1, "max_new_tokens": 8, "token_counts": [1, 2], "repeats": 1})
    text = "".join(o.get("text", "") for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", []))
    assert "DFlash (ours) B=16" in text and "no row" in text
    assert "model.generate" in text and "EAGLE-style" not in text          # no shipped peers for this target
    assert (tmp_path / "figures" / "08_forward_cost_cpu.png").is_file()
    assert json.loads(next((tmp_path / "results").glob("08_Qwen3-4B_prompts_cpu_float32.json")).read_text())
