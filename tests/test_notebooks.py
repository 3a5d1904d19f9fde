"""Every notebook runs under papermill with at least one parameter overridden.

(nbval executes them with their defaults as part of the same test command.)
"""
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
OVERRIDES = {
    "00_tour": {"max_new_tokens": 12, "num_parity_prompts": 2},
    "01_autoregressive_bottleneck": {"token_counts": [1, 4, 8], "repeats": 3, "num_prompts": 1, "max_new_tokens": 8},
    "02_speculative_decoding": {"draft_tokens": 2, "max_new_tokens": 16, "num_prompts": 1, "num_samples": 600},
    "03_block_diffusion_drafter": {"block_size": 8, "num_prompts": 2, "max_new_tokens": 16, "timing_repeats": 3, "passes": [1, 2]},
    "04_conditioning": {"num_prompts": 1, "max_new_tokens": 24, "timing_repeats": 3},
    "05_training": {"num_prompts": 24, "max_new_tokens": 24, "steps": 12, "probe_prompts": 1},
    "06_benchmarks": {"num_prompts": 1, "max_new_tokens": 16, "block_sizes": [4, 16], "repeats": 1},
    "07_checking_the_source_article": {"num_prompts": 1, "max_new_tokens": 24, "train_steps": 12},
    "08_real_models": {"num_prompts": 1, "max_new_tokens": 8, "token_counts": [1, 4], "repeats": 1},
}


def test_every_notebook_has_overrides_listed():
    assert NOTEBOOKS, "no notebooks found"
    assert {nb.stem for nb in NOTEBOOKS} == set(OVERRIDES)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_runs_with_overridden_parameters(notebook, tmp_path):
    import papermill as pm

    params = OVERRIDES[notebook.stem]
    out = tmp_path / notebook.name
    pm.execute_notebook(str(notebook), str(out), parameters=params, kernel_name="python3",
                        cwd=str(notebook.parent), progress_bar=False)
    import nbformat
    executed = nbformat.read(out, as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and all(f"{k} = {v!r}" in injected[0].source for k, v in params.items())


def test_real_models_notebook_takes_target_and_drafter_from_directories(tmp_path, monkeypatch):
    """nb08's hub parameters, pointed at local directories standing in for hub checkouts: a target
    directory and a drafter exported in the public DFlash layout (as published drafters ship)."""
    import json
    import shutil

    import nbformat
    import papermill as pm

    from dflash_lite.checkpoints import export_dflash, load_drafter
    from dflash_lite.target import SHIPPED, default_drafter_path

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
