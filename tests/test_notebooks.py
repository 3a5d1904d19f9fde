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
