# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · On a GPU: why a verify is nearly free, where the time goes, and CUDA graphs
#
# Every chapter so far rests on one premise: on a GPU a forward over 16 tokens costs about as much
# as a forward over 1, so verifying a block of drafts is nearly free, and the speedup is close to
# tau. On this course's CPU that premise is false (notebooks 01 and 06 measure it). This chapter
# checks it on real hardware: an NVIDIA H200, running this project's own code.
#
# Without a GPU the notebook reads the committed run in `results/gpu/` (see its README for the
# commands, versions and commit); with one (`device = "cuda"`) it measures the same things again.
# Either way it measures this machine live, small, for comparison.
#
# **In this chapter you will**
#
# * compare t(b)/t(1), the cost of a forward over b tokens relative to one, on this CPU, on the
#   H200 with the tiny target, and on the H200 with a target of Qwen3-8B's shape: why a verify of
#   16 tokens costs about as much as a forward of 1 on a GPU, and not on this CPU;
# * compute the **memory-bandwidth floor** of a forward, and see that the tiny target on a GPU is
#   nowhere near it: its time is **launch overhead**;
# * count the operators one forward dispatches (most launch a kernel), and see what **CUDA graphs**
#   do about them;
# * read the tokens/s and speedups of the H200 run, and what the loop around the forwards costs;
# * put the paper-scale costs into the cost model and compare with the paper's Table 1.
#
# **Prerequisites:** chapters 01 (the cost of a forward) and 06 (the [cost model](../docs/glossary.md#cost-model));
# [CUDA graphs](../docs/glossary.md#cuda-graphs) are explained here.
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters.

# %%
import json
import re
import statistics

import matplotlib.pyplot as plt
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.decoding.timing import interleaved
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.baselines import NoDraftProposer
from dflash_lite.decoding.decode import DFlashProposer, generate, new_cache, verify
from dflash_lite.measuring.plotting import COLORBLIND, subplots, repo_dir, save_figure
from dflash_lite.decoding.costs import measure_step_costs
from dflash_lite.decoding.shapes import FixedShapes
from dflash_lite.decoding.target import SHIPPED_DRAFTERS

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end

# %% tags=["parameters"]
# Parameters
# "cuda" re-measures the GPU numbers on this machine's GPU
device = "cpu"
gpu_run = "results/gpu/h200-2026-11-30"         # the committed GPU run, relative to the repository
token_counts = [1, 2, 4, 8, 16, 32, 64]         # widths b of the forwards timed live
repeats = 5
num_prompts = 2                                 # held-out math prompts for the live tokens/s
max_new_tokens = 48

# %%
live_gpu = device == "cuda" and torch.cuda.is_available()
device = "cuda" if live_gpu else "cpu"
run_dir = repo_dir() / gpu_run
readme = (run_dir / "README.md").read_text()
print(f"committed GPU run: {gpu_run} ({readme.splitlines()[0].lstrip('# ')})")
print("GPU numbers below:", "re-measured on " + torch.cuda.get_device_name(0) if live_gpu
      else "read from that run")

target, tokenizer = load_pretrained("tiny", device=device)
drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).to(device).eval()
stops = stop_token_ids(target, tokenizer)
B = drafter.config.block_size
prompts = [tokenizer(p, return_tensors="pt", add_special_tokens=False).input_ids.to(device)
           for p in corpus.prompts("held_out", "math", num_prompts)]
print(f"tiny target: {sum(p.numel() for p in target.parameters()) / 1e6:.1f}M "
      f"parameters on {device}; "
      f"drafter block {B}")


# %% [markdown]
# ## Reading the committed run
#
# The run's files are plain logs and JSON. The cost probe's log is the probe's JSON followed by
# one status line; the compiled verify's log is one line per mode.

# %%
def read_json_log(path):
    """The JSON object at the top of a log, without its trailing status line."""
    text = path.read_text()
    return json.loads(text[: text.rindex("}") + 1])


def read_verify_log(path):
    """{mode: milliseconds} from tools/gpu_verify_compile.py's output lines."""
    pattern = r"verify of (\d+) tokens,\s+(\S+): ([\d.]+) ms"
    return {mode: float(ms) for _, mode, ms in re.findall(pattern, path.read_text())}


h200_8b = read_json_log(run_dir / "cost_probe_qwen3_8b_shape.log")
h200_verify = read_verify_log(run_dir / "verify_compile_bf16.log")
h200_bench = {domain: json.loads((run_dir / f"bench_{domain}_fp32.json").read_text())
              for domain in ("math", "mixed")}
h200_costs = {int(b): t for b, t in h200_bench["math"]["cost_model"]["costs"]["t_target"].items()}
print(f"H200, Qwen3-8B shape: t_target(b) for b in "
      f"{sorted(int(b) for b in h200_8b['t_target_ms'])}")
print(f"H200, tiny target: t_target(b) for b in {sorted(h200_costs)}; verify eager vs graphs: "
      f"{sorted(h200_verify)}")

# %% [markdown]
# ## 1. t(b) / t(1): is a wide verify nearly free?
#
# Time one target forward over b tokens at a prompt's context, for each b, here and now
# (`measure_step_costs`, defined in `dflash_lite/decoding/costs.py`, the same timer the cost-aware policy
# uses). On a GPU with the model re-measured live, the same call runs there.

# %%
costs = measure_step_costs(target, drafter, prompts[0], token_counts, [B], repeats)
here = {b: t / costs["t_target"][1] for b, t in costs["t_target"].items()}
curves = {f"this machine ({device}), tiny target": here,
          "H200, Qwen3-8B shape (bf16)": {int(b): t / h200_8b["t_target_ms"]["1"]
                                          for b, t in h200_8b["t_target_ms"].items()},
          "H200, tiny target (fp32)": {b: t / h200_costs[1] for b, t in h200_costs.items()}}
for name, curve in curves.items():
    print(f"{name:<38}" + "  ".join(f"t({b})/t(1)={r:.2f}" for b, r in sorted(curve.items())
                                    if b in (1, 16, 17, 64)))
    print(f"{'':<38}measured at b = {', '.join(map(str, sorted(curve)))}; "
          f"largest ratio {max(curve.values()):.2f}")

fig, ax = subplots(height=3.8)
for (name, curve), marker in zip(curves.items(), "osD"):
    widths = sorted(curve)
    # a curve measured at a few widths only is drawn as points: no line between distant widths
    ax.plot(widths, [curve[b] for b in widths], marker=marker, markersize=7,
            label=f"{name} ({len(widths)} widths)", ls="-" if len(widths) > 3 else "none")
ax.axhline(1, color="grey", lw=0.8, ls=":")
ax.set_xscale("log", base=2)
ax.set_xlabel("tokens in one target forward (b)")
ax.set_ylabel("t(b) / t(1)")
ax.set_title("The cost of a wider forward")
ax.legend(loc="upper left")
_ = save_figure(fig, "10_forward_cost_ratio")

# %% [markdown]
# On the H200 the Qwen3-8B-shaped curve, measured at widths up to 64 tokens, stays close to 1:
# checking 16 drafts costs about what generating one token costs. The tiny target was measured on
# the H200 only at the widths a DFlash step uses (the cell prints which), and there too a verify
# costs close to one token's forward; its points are drawn without a line, since nothing was
# measured between them. On this CPU the curve climbs: the arithmetic of b tokens is
# what takes the time. Why the difference? On a CPU the arithmetic of each extra token is slow
# next to everything else a forward does. On a GPU the arithmetic units are so many that a
# small-batch forward leaves them idle; what it waits for is paid once per forward, whether it
# serves 1 token or 64: every weight read once from memory (a forward bound by that read is
# "memory-bound"), and, in eager PyTorch, the host launching its kernels one by one. Section 2
# measures which of the two these forwards are made of.
#
# ## 2. The bandwidth floor, and what the tiny target spends instead
#
# The floor of one forward is the weights' bytes over the memory bandwidth (the H200 reads
# 4.8 TB/s). Compare it with what was measured.

# %%
H200_BANDWIDTH = 4.8e12                         # bytes per second, the H200's HBM3e


def floor_ms(num_params: float, bytes_per_param: int, bandwidth: float = H200_BANDWIDTH) -> float:
    """The least time one forward can take: every weight read once."""
    return 1e3 * num_params * bytes_per_param / bandwidth


tiny_params = sum(p.numel() for p in target.parameters())
floors = {"tiny target, fp32": (floor_ms(tiny_params, 4), 1e3 * h200_costs[1]),
          "Qwen3-8B shape, bf16": (floor_ms(h200_8b["params_target_B"] * 1e9, 2),
                                   h200_8b["t_target_ms"]["1"])}
for name, (floor, measured) in floors.items():
    print(f"{name:<22} floor {floor:8.3f} ms, measured t(1) on the H200 {measured:7.2f} ms: "
          f"{measured / floor:7.1f}x the floor")

# %% [markdown]
# Neither forward is at its floor (the last column above). The 8B-shaped one takes a multiple of
# it, so reading the weights is only part of its time; the tiny target's takes orders of magnitude
# more, and its weights fit in the GPU's caches. The rest of the time goes elsewhere, into
# **launch overhead** (the committed run's `results/gpu/h200-2026-12-04/README.md` reads its
# eager 8B-shaped forward the same way): eager PyTorch runs a forward as a sequence of
# small GPU programs (kernels), and for each one Python and the framework decide what to run,
# check shapes and types, and ask the driver to launch it. That costs microseconds per kernel on
# the host, whatever the kernel's size. Count the operators one verify of B tokens dispatches to
# the device (most launch a kernel; views and reshapes launch none, a few launch several):


# %%
class CountOps(TorchDispatchMode):
    """Counts the operators dispatched to the device; on a GPU most launch a kernel."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


with torch.inference_mode():
    cache = new_cache(target)
    verify(target, prompts[0], cache, drafter.config.target_layer_ids, logits_to_keep=1)
    with CountOps() as ops:
        verify(target, prompts[0][:, -1:].expand(1, B), cache, drafter.config.target_layer_ids)
per_op_us = 1e3 * h200_verify["eager"] / ops.count
print(f"one verify of {B} tokens dispatches {ops.count} operators (counted here, {target.dtype})")
print(f"H200, eager: {h200_verify['eager']:.2f} ms for the verify, about {per_op_us:.1f} "
      f"µs per operator")
print(f"H200, CUDA graphs: {h200_verify['reduce-overhead']:.2f} ms "
      f"({h200_verify['eager'] / h200_verify['reduce-overhead']:.1f}x faster)")

# %% [markdown]
# Spread over its operators, the eager verify takes some microseconds each: the price of deciding
# and launching a small GPU program, not of its arithmetic, which CUDA graphs (below) leave as it
# is and which the printed speedup of the graphed verify removes most of. (The count is this
# machine's, in its dtype and on this package's cache; the H200 ran bf16 on transformers' static
# cache, so the per-operator time is an estimate of its order of magnitude.)
#
# **CUDA graphs** remove that cost. A graph is a recording of a sequence of kernel launches, with
# their arguments and memory addresses, that the GPU can replay as one unit: one launch from the
# host instead of hundreds. The price is that nothing may change between replays except the
# *contents* of the recorded buffers: not the shapes, not the addresses, not a Python decision in
# the middle. `torch.compile(mode="reduce-overhead")` records such graphs for you, and that is
# why the decode loop has a fixed-shape mode (`dflash_lite/decoding/shapes.py`): caches allocated once and
# rewound instead of cropped, verifies padded to a few bucket widths, acceptance on the device with
# one read back per step.

# %%
fig, ax = subplots(height=2.8)
modes = {"eager": h200_verify["eager"],
         "CUDA graphs\n(reduce-overhead)": h200_verify["reduce-overhead"]}
bf16_floor = floor_ms(tiny_params, 2)                          # the verify below ran in bf16
ax.barh(list(modes), list(modes.values()), color=[COLORBLIND[3], COLORBLIND[2]])
for i, ms in enumerate(modes.values()):
    ax.text(ms, i, f" {ms:.2f} ms", va="center")
ax.axvline(bf16_floor, color="black", lw=2, ls="--")
ax.text(bf16_floor, -0.55, f" bandwidth floor, bf16 weights: {bf16_floor * 1e3:.1f} us",
        va="bottom")
ax.set_xscale("log")
ax.set_xlim(bf16_floor / 2, 3 * max(modes.values()))
ax.set_ylim(1.6, -0.9)
ax.set_xlabel("ms for one verify of 16 tokens, tiny target, bf16, H200 (log scale)")
print(f"bf16 floor of the tiny target {bf16_floor * 1e3:.1f} us; "
      f"eager {modes['eager'] / bf16_floor:.0f}x it, "
      f"graphs {h200_verify['reduce-overhead'] / bf16_floor:.0f}x it")
_ = save_figure(fig, "10_cuda_graphs_verify")

# %% [markdown]
# ## 3. Where a DFlash step's time goes on the H200
#
# `bench` breaks each step into the two forwards it must make (the drafter's over B positions and
# the target's verify) and the rest: building blocks, reading tokens back, acceptance, cache
# bookkeeping. The rest is overhead in the same sense as above: host time.

# %%
cost_rows = {r["name"]: r for r in h200_bench["math"]["cost_model"]["rows"]}
fig, ax = plt.subplots(figsize=(7, 3.0))
for i, (name, row) in enumerate(cost_rows.items()):
    parts = {"target forward": row["t_target_b"], "drafter forward": row["t_draft_b"],
             "loop overhead": row["overhead_per_step_s"]}
    left = 0.0
    for (part, seconds), color in zip(parts.items(), ["tab:blue", "tab:orange", "tab:grey"]):
        ax.barh(i, 1e3 * seconds, left=left, color=color, label=part if i == 0 else None)
        left += 1e3 * seconds
    print(f"{name:<22} step {1e3 * row['step_s']:.2f} ms: target "
          f"{1e3 * row['t_target_b']:.2f}, drafter "
          f"{1e3 * row['t_draft_b']:.2f}, overhead {1e3 * row['overhead_per_step_s']:.2f} ms "
          f"({row['overhead_per_step_s'] / row['step_s']:.0%} of the step)")
ax.set_yticks(range(len(cost_rows)), list(cost_rows))
ax.set_xlabel("ms per step (H200, tiny pair, fp32, held-out math)")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, frameon=False)
_ = save_figure(fig, "10_step_breakdown_h200")

# %% [markdown]
# Both forwards are themselves mostly launch overhead (section 2), and the loop adds its share on
# top. So on a GPU the tiny pair measures Python, not the hardware. The table below is still
# informative: the *ratios* hold, since every method pays the same kind of overhead per forward.

# %%
for domain, report in h200_bench.items():
    print(f"H200, held-out {domain}, fp32 ({report['env']['prompts']} prompts x "
          f"{report['env']['max_new_tokens']} tokens)")
    for row in report["methods"]:
        tau = f"{row['tau']:.2f}" if row["tau"] else "-"
        print(f"  {row['name']:<36} {row['tokens_per_s']:7.1f} tokens/s  {row['speedup']:5.2f}x "
              f" tau {tau:>5}  "
              f"identical {row['identical_to_target']}")

fig, ax = plt.subplots(figsize=(7, 3.2))
rows = h200_bench["math"]["methods"]
ax.barh([r["name"] for r in rows], [r["speedup"] for r in rows], color="tab:blue")
ax.axvline(1, color="k", lw=0.8)
ax.set_xlabel("speedup over the autoregressive loop (H200, held-out math, fp32)")
ax.invert_yaxis()
_ = save_figure(fig, "10_speedups_h200")

# %% [markdown]
# ### Fixed shapes, here
#
# `Engine(compile=True)` and `bench --compile` run the same loop (`dflash_lite/decoding/decode.py: steps`)
# on fixed shapes (`dflash_lite/decoding/shapes.py: FixedShapes`): caches allocated once and masked over the
# whole buffer, verifies padded to a few bucket widths, the drafter's context written in chunks of
# one width, and the forwards through `torch.compile` (on CUDA, CUDA graphs once a GPU run confirms
# they are recorded: see the Summary). On this machine the
# cell keeps the forwards eager (compiling on two cores takes minutes), so it shows what fixed
# shapes cost or save by themselves; with `device = "cuda"` the forwards are compiled. Same
# prompts, interleaved, and every output checked against the target's greedy tokens.

# %%
longest = max(x.shape[1] for x in prompts) + max_new_tokens
# one set of caches for both rows
fixed = FixedShapes(longest, compile=device == "cuda")
expected = [generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens
            for x in prompts]
runs = {"plain, eager loop": lambda x: generate_autoregressive(target, x, max_new_tokens,
                                                               stop_token_ids=stops),
        f"DFlash B={B}, eager loop": lambda x: generate(target, DFlashProposer(drafter, target, B),
                                                        x, max_new_tokens, stop_token_ids=stops),
        "plain, fixed shapes": lambda x: generate(target, NoDraftProposer(fixed), x, max_new_tokens,
                                                  stop_token_ids=stops),
        f"DFlash B={B}, fixed shapes": lambda x: generate(
            target, DFlashProposer(drafter, target, B, shapes=fixed), x, max_new_tokens,
            stop_token_ids=stops)}
timed = interleaved({name: (lambda f=f: [f(x) for x in prompts]) for name, f in runs.items()},
                    repeats=3, device=device)
speed = {}
for name, calls in timed.items():
    assert [r.tokens for r in calls[0][1]] == expected, \
        f"{name} differs from the target's greedy output"
    speed[name] = statistics.median(sum(len(r.tokens) for r in results) / s for s, results in calls)
    print(f"{name:<26} {speed[name]:7.1f} tokens/s")
print(f"fixed shapes / eager on {device}: plain "
      f"{speed['plain, fixed shapes'] / speed['plain, eager loop']:.2f}x, "
      f"DFlash {speed[f'DFlash B={B}, fixed shapes'] / speed[f'DFlash B={B}, eager loop']:.2f}x")

# %% [markdown]
# ## 4. The cost model at the paper's scale
#
# Notebook 06's cost model predicts the speedup of a step that commits tau tokens with one drafter
# forward and one verify of B: speedup = tau · t(1) / (t(B) + t_draft(B)). With the forwards of the
# Qwen3-8B shape measured on the H200 (random weights: the costs are real, the acceptance is not),
# and the paper's tau for Qwen3-8B, it can be compared with the speedup the paper measured.

# %%
# the paper's Table 1: Qwen3-8B on an H200, greedy, B = 16, average
PAPER_TAU, PAPER_SPEEDUP = 6.49, 4.86


def predicted_speedup(tau: float, t1: float, t_verify: float, t_draft: float) -> float:
    return tau * t1 / (t_verify + t_draft)


t = h200_8b["t_target_ms"]
t1, t16, td16 = t["1"], t["16"], h200_8b["t_draft_ms"]["16"]
at_paper = predicted_speedup(PAPER_TAU, t1, t16, td16)
print(f"Qwen3-8B shape on the H200: t(1) {t1:.1f} ms, t(16) {t16:.1f} ms, "
      f"t_draft(16) {td16:.2f} ms")
print(f"cost model at the paper's tau {PAPER_TAU}: {at_paper:.2f}x; the paper measured "
      f"{PAPER_SPEEDUP}x")

taus = [1 + 0.25 * i for i in range(41)]
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.plot(taus, taus, color="grey", ls=":", label="ideal: speedup = tau")
ax.plot(taus, [predicted_speedup(x, t1, t16, td16) for x in taus],
        label="cost model, Qwen3-8B shape, H200")
tiny = cost_rows[f"DFlash (ours) B={B}"]
ax.plot(taus, [predicted_speedup(x, tiny["t_target_1"], tiny["t_target_b"], tiny["t_draft_b"])
               for x in taus],
        label="cost model, tiny pair, H200 (eager)")
ax.plot([PAPER_TAU], [PAPER_SPEEDUP], "k*", ms=12, label="the paper's Table 1 (Qwen3-8B, H200)")
ax.plot([tiny["tau"]], [tiny["measured_speedup"]], "rs",
        label="this project's tiny pair, measured on the H200")
ax.set_xlabel("tau (tokens committed per step)")
ax.set_ylabel("speedup over autoregressive decoding")
ax.legend()
_ = save_figure(fig, "10_cost_model_paper_scale")
on_line = predicted_speedup(tiny["tau"], tiny["t_target_1"], tiny["t_target_b"], tiny["t_draft_b"])
print(f"the tiny pair: tau {tiny['tau']:.2f} (the paper's {PAPER_TAU}); measured "
      f"{tiny['measured_speedup']:.2f}x, its cost model at that tau {on_line:.2f}x")

# %% [markdown]
# The model's prediction at the paper's tau lands close to, and a little above, the paper's
# measured average: a real serving loop adds some overhead per step beyond its two forwards, as
# section 3 measured for this project's loop. The tiny pair's point (the red square) is read against
# its own line: the last printed line gives its tau next to the paper's, and its measured speedup
# next to what its cost model predicts at that tau; the gap between those two is the loop's
# overhead per step on this GPU.

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# ## Summary
#
# * On a GPU a forward over b tokens costs nearly the same for every b measured (up to 64 for the
#   Qwen3-8B shape), because what a small-batch forward waits for is paid once per forward, not
#   per token (reading the weights, launching the kernels), not arithmetic: the premise of
#   speculative decoding holds there, measured, not assumed.
# * The bandwidth floor (weights' bytes / bandwidth) is what a forward cannot beat. The 8B-shaped
#   target comes far closer to it than the tiny target (section 2 prints both ratios), whose time
#   is launch overhead: host work for each of the hundreds of operators a forward dispatches
#   (section 2 prints their count and the time per operator).
# * CUDA graphs replay a recorded sequence of kernels with one launch, which needs fixed shapes and
#   addresses. The one decode loop asks for them in its fixed-shape mode
#   (`dflash_lite/decoding/shapes.py`), and `tools/gpu_bench.sh` measures it compiled against the
#   eager mode on a GPU. The first such run (`results/gpu/h200-2026-12-04/README.md`) found that
#   inductor had recorded no graphs: the caches are written in place, and a graph may write only
#   into inputs marked as static addresses. The caches are marked now; a GPU run still has to
#   confirm that graphs are recorded.
# * With the paper-scale costs, the cost model at the paper's tau predicts a speedup close to the
#   paper's measurement.
# * All of this is one request at a time. A server batches requests, which spends the same idle
#   compute; notebook 11 measures what is left for speculative decoding as the batch grows.
#
# ## Review questions
#
# 1. Why does t(b)/t(1) stay near 1 on a GPU and grow on a CPU?
# 2. What is the bandwidth floor of a forward, and why can batching more tokens not go below it?
# 3. What is launch overhead, and why is it nearly all of the tiny target's forward on a GPU?
# 4. What does a CUDA graph record, and what must not change between its replays?
# 5. Why does the decode loop rewind its caches instead of cropping them?
# 6. Why is the cost model's prediction at the paper's tau above the paper's measured speedup?
#
# ## Exercises
#
# Each has a self-check; worked solutions: `notebooks/solutions/10_gpu_benchmarks.py`.
#
# **1. ★ A bandwidth floor.** What is the bandwidth floor, in ms, of one forward of the Qwen3-8B
# shape in bf16 (2 bytes per parameter, `h200_8b["params_target_B"]` billion parameters) on the H200?

# %% nbgrader={"grade": false, "grade_id": "ch10_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises import ch10
### BEGIN SOLUTION
answer_1 = None   # milliseconds
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch10_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch10.check_bandwidth_floor(answer_1, h200_8b), 1)

# %% [markdown]
# **2. ★ The tau for 5x.** With the Qwen3-8B shape's measured costs (t(1), t(16), t_draft(16)),
# what tau would block size 16 need for the cost model to predict a 5x speedup?

# %% nbgrader={"grade": false, "grade_id": "ch10_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_2 = None   # tau
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch10_exercise_2_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch10.check_tau_for_speedup(answer_2, h200_8b, 5.0), 1)

# %% [markdown]
# **3. ★★ What graphs would buy the tiny pair.** Suppose CUDA graphs made both of the tiny pair's
# forwards on the H200 as much faster as they made the bf16 verify (the ratio of section 2), and
# the loop overhead stayed as `bench` measured it. Using the `DFlash (ours) B=16` row of
# `cost_rows`, what speedup over plain decoding does the cost model then predict, if plain decoding
# (one forward of width 1 plus the same per-step overhead) gets faster by the same ratio too?

# %% nbgrader={"grade": false, "grade_id": "ch10_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
answer_3 = None   # speedup
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch10_exercise_3_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(ch10.check_graphs_speedup(answer_3, cost_rows["DFlash (ours) B=16"], h200_verify), 2)
