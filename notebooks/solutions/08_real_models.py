"""Worked solutions to the exercises of notebook 08, run with
``python notebooks/solutions/08_real_models.py``."""
import tempfile

from dflash_lite.measuring.benchmark import bench
from dflash_lite.decoding.costs import measure_costs
from dflash_lite.measuring.report import Kind, row_of
from dflash_lite.decoding.checkpoints import export_dflash, load_drafter
from dflash_lite.exercises import ch08
from dflash_lite.decoding.target import default_drafter_path, load_pretrained

settings = dict(domain="math", num_prompts=1, max_new_tokens=24, block_sizes=(16,), repeats=1,
                baselines=False, hf_dflash=False, tree_sizes=(), quiet=True, cost_repeats=2)

# 1. the curve of this machine, measured as the notebook does
target, tokenizer = load_pretrained("tiny")
drafter = load_drafter(default_drafter_path("tiny"))
ids = tokenizer("Question: Ann has 3 apples.", return_tensors="pt").input_ids
t = measure_costs(target, drafter, ids, block_sizes=(16,), repeats=3)["t_target"]
ratio = {n: t[str(n)] / t["1"] for n in (1, 16)}
assert ch08.check_predicted_from_curve(6.5 / (ratio[16] + 0.1), ratio)

# 2. the shipped drafter through the public layout
report = bench(**settings)
with tempfile.TemporaryDirectory() as folder:
    exported = export_dflash(drafter, f"{folder}/tiny-dflash-public")
    exported_report = bench(drafter=str(exported), **settings)
    tau = row_of(exported_report, Kind.DFLASH, block_size=16)["tau"]
    assert ch08.check_exported_drafter(tau, exported, exported_report, report)
print("all notebook 08 solutions check out")
