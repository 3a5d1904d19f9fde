"""Worked solutions to the exercises of notebook 10, run with
``python notebooks/solutions/10_gpu_benchmarks.py``."""
import json
import re

from dflash_lite.exercises import ch10
from dflash_lite.measuring.plotting import repo_dir

run = repo_dir() / "results/gpu/h200-2026-11-30"
log = (run / "cost_probe_qwen3_8b_shape.log").read_text()
probe = json.loads(log[: log.rindex("}") + 1])
compile_log = (run / "verify_compile_bf16.log").read_text()
verify_ms = {mode: float(ms) for _, mode, ms
             in re.findall(r"verify of (\d+) tokens,\s+(\S+): ([\d.]+) ms", compile_log)}
row = next(r for r in json.loads((run / "bench_math_fp32.json").read_text())["cost_model"]["rows"]
           if r["name"] == "DFlash (ours) B=16")

# 1. every bf16 weight read once: parameters x 2 bytes / (4.8e12 bytes/s), in ms
assert ch10.check_bandwidth_floor(1e3 * probe["params_target_B"] * 1e9 * 2 / 4.8e12, probe)

# 2. 5 = tau * t(1) / (t(16) + t_draft(16))
t = probe["t_target_ms"]
assert ch10.check_tau_for_speedup(5.0 * (t["16"] + probe["t_draft_ms"]["16"]) / t["1"], probe, 5.0)

# 3. forwards faster by r, overhead o per step unchanged, for DFlash and plain decoding alike
r, o = verify_ms["eager"] / verify_ms["reduce-overhead"], row["overhead_per_step_s"]
step = (row["t_target_b"] + row["t_draft_b"]) / r + o
speedup = row["tau"] * (row["t_target_1"] / r + o) / step
assert ch10.check_graphs_speedup(speedup, row, verify_ms)
print("all notebook 10 solutions check out")
