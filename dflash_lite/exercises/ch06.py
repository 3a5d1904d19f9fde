"""Self-checks for notebook 06, benchmarks: each reads a report, the dict ``bench`` returns."""
from __future__ import annotations

import json
from pathlib import Path

from ..measuring.report import Kind, row_of, rows_of
from ..prompts import load_prompts
from . import attempt, correct


def _costs(report: dict) -> tuple[dict, dict]:
    assert report.get("cost_model") and report["cost_model"].get("costs"), \
        "this report has no cost model"
    costs = report["cost_model"]["costs"]
    return costs["t_target"], costs["t_draft"]


@attempt("Exercise 1", "Compute the predicted speedup for B = 16 from the report.")
def check_predicted_speedup(answer, report: dict, block_size: int = 16) -> bool:
    """Exercise 1: tau * t_target(1) / (t_target(B) + t_draft(B)) for the fixed-B row."""
    t, d = _costs(report)
    row = row_of(report, Kind.DFLASH, block_size=block_size)
    expected = row["tau"] * t["1"] / (t[str(block_size)] + d[str(block_size)])
    assert abs(float(answer) - expected) < 1e-6 * max(1.0, expected), (
        "use the B=16 row's tau, t_target['1'], t_target['16'] and t_draft['16'] "
        "(all in seconds; the units cancel)")
    return correct("Exercise 1",
                   f"predicted {expected:.2f}x against {row['speedup']:.2f}x measured.")


@attempt("Exercise 2", "Give {B: break-even tau} for the run's block sizes.")
def check_break_even(answer, report: dict) -> bool:
    """Exercise 2: the tau at which a block of B only matches plain decoding, per B of the run."""
    t, d = _costs(report)
    sizes = [b for b in sorted(int(b) for b in d if str(b) in t)
             if rows_of(report, Kind.DFLASH, block_size=b)]
    assert set(map(int, answer)) == set(sizes), \
        f"give one entry per block size of the run: {sizes}"
    even = {b: (t[str(b)] + d[str(b)]) / t["1"] for b in sizes}
    for b in sizes:
        got = float(answer[b] if b in answer else answer[str(b)])
        assert abs(got - even[b]) < 1e-6 * even[b], \
            f"B={b}: not the tau at which this block only matches plain decoding"
    above = [b for b in sizes if row_of(report, Kind.DFLASH, block_size=b)["tau"] > even[b]]
    return correct("Exercise 2", f"blocks whose tau beat break-even here: {above or 'none'}.")


@attempt("Exercise 3", "Run bench on code prompts, then name its fastest method.", given=2)
def check_fastest_method(answer, report) -> bool:
    """Exercise 3: the fastest method of a report (by the speedup column)."""
    assert "code" in str(report.get("env", {}).get("prompts_source", "")), \
        "this report is not on code prompts: run bench with domain=\"code\""
    rows = [r for r in report["methods"] if r["error"] is None and r["speedup"] is not None]
    best = max(rows, key=lambda r: r["speedup"])
    assert answer == best["name"], ("not the fastest row of this report "
                                    "(compare the speedup column; names as printed)")
    return correct("Exercise 3", f"{best['name']} at {best['speedup']:.2f}x.")


@attempt("Exercise 4", "Write the JSONL file, run bench on it, give the default row's speedup.",
         given=3)
def check_own_prompts(answer, path, report) -> bool:
    """Exercise 4: a benchmark on your own JSONL file of at least three prompts."""
    prompts = load_prompts(str(path))
    assert len(prompts) >= 3, "write at least three prompts"
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    assert all(isinstance(x, dict) for x in lines), "one JSON object per line"
    assert report["env"].get("prompts") == len(prompts), \
        "this report was not run on all the file's prompts (pass num_prompts=len(prompts))"
    default = next(r for r in report["methods"] if r.get("default"))
    assert abs(float(answer) - default["speedup"]) < 1e-9, \
        "give the speedup of the row marked as the default"
    return correct("Exercise 4", f"{default['speedup']:.2f}x on your {len(prompts)} prompts.")
