"""Worked solutions to the exercises of notebook 06, run with
``python notebooks/solutions/06_benchmarks.py``.

Small runs (one or three prompts, short answers) so that it stays quick; the checks read whatever
report they are given, so the same code answers the exercises at the notebook's full size.
"""
import json
import tempfile
from pathlib import Path

from dflash_lite.measuring.benchmark import bench
from dflash_lite.measuring.report import Kind, row_of
from dflash_lite.exercises import ch06

small = dict(max_new_tokens=24, repeats=1, baselines=False, hf_dflash=False, tree_sizes=(),
             quiet=True, cost_repeats=3)
report = bench(domain="math", num_prompts=1, block_sizes=(8, 16), **small)

# 1. the cost model by hand, for B = 16
costs = report["cost_model"]["costs"]
t, d = costs["t_target"], costs["t_draft"]
tau16 = row_of(report, Kind.DFLASH, block_size=16)["tau"]
assert ch06.check_predicted_speedup(tau16 * t["1"] / (t["16"] + d["16"]), report)

# 2. break-even: tau * t(1) = t(B) + t_draft(B)
assert ch06.check_break_even({b: (t[str(b)] + d[str(b)]) / t["1"] for b in (8, 16)}, report)

# 3. the fastest row of a code run
code_report = bench(domain="code", num_prompts=1, block_sizes=(16,), **small)
rows = [r for r in code_report["methods"] if r["error"] is None]
assert ch06.check_fastest_method(max(rows, key=lambda r: r["speedup"])["name"], code_report)

# 4. three prompts of our own
with tempfile.TemporaryDirectory() as folder:
    own = Path(folder) / "own.jsonl"
    questions = ["Question: A box holds 6 eggs. How many eggs are in 7 boxes?\nAnswer:",
                 "Question: Tom has 40 stamps and gives away 15. How many stamps are left?"
                 "\nAnswer:",
                 "def count_words(text):\n"]
    own.write_text("".join(json.dumps({"prompt": q}) + "\n" for q in questions))
    own_report = bench(prompts=str(own), num_prompts=3, block_sizes=(16,), **small)
    default = next(r for r in own_report["methods"] if r.get("default"))
    assert ch06.check_own_prompts(default["speedup"], own, own_report)
print("all notebook 06 solutions check out")
