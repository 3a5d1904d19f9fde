"""Self-checks for notebook 08, real models."""
from __future__ import annotations

import json
from pathlib import Path

from ..measuring.report import Kind, row_of
from . import attempt, correct


@attempt("Exercise 1", "Predict the speedup at B = 16 from the t(n)/t(1) curve.")
def check_predicted_from_curve(answer, ratio: dict, tau: float = 6.5, draft_cost: float = 0.1,
                               block_size: int = 16) -> bool:
    """Exercise 1: tau / (t(B)/t(1) + t_draft/t(1)) from this device's measured curve."""
    assert block_size in ratio, \
        f"the curve has no n = {block_size}: run with {block_size} in token_counts"
    expected = tau * 1.0 / (ratio[block_size] + draft_cost)
    assert abs(float(answer) - expected) < 1e-6 * expected, \
        "not the speedup the cost model predicts from this curve"
    return correct("Exercise 1", f"{expected:.2f}x on this device, against tau = {tau}: "
                                 "the gap is the verify's cost.")


@attempt("Exercise 2", "Export the drafter, run bench with drafter=<that directory>, give its tau.",
         given=3)
def check_exported_drafter(answer, directory, exported_report, report) -> bool:
    """Exercise 2: the shipped drafter exported to the public layout and benchmarked from there."""
    config = json.loads((Path(directory) / "config.json").read_text())
    assert "dflash_config" in config and "target_layer_ids" in config["dflash_config"], (
        "that directory is not in the public DFlash layout "
        "(use dflash_lite.decoding.checkpoints.export_dflash)")
    assert (Path(directory) / "model.safetensors").is_file(), "the export has no model.safetensors"
    source = exported_report.get("env", {}).get("drafter")
    here = Path(directory).resolve()
    # bench names the package's own relatively
    root = Path(__file__).resolve().parents[2]
    assert source is not None and here in (Path(source).resolve(), (root / source).resolve()), \
        "this report was not run on the exported directory: pass drafter=<that directory> to bench"
    row = row_of(exported_report, Kind.DFLASH, block_size=16)
    assert row["identical_to_target"], "the exported drafter's output differs from the target's"
    assert abs(float(answer) - row["tau"]) < 1e-9, \
        "give the tau of the 'DFlash (ours) B=16' row"
    shipped = row_of(report, Kind.DFLASH, block_size=16)["tau"]
    return correct("Exercise 2", f"tau {row['tau']:.2f} from the export, {shipped:.2f} from the "
                   "shipped directory (equal when the same prompts and length are used: same "
                   "weights, greedy).")
