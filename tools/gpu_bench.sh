#!/usr/bin/env bash
# One prepared GPU run of this project, at most BUDGET seconds (default 560 s, under 10 minutes) on one
# GPU, with no network. In this order, each stage under its own limit:
#   the environment and the demo;
#   the batch sweep (`bench --batch-sizes`: every method at batch 1 to 64), fp32 and bf16, eager;
#   `bench --compile` in bf16 (every row of the one decode loop eager and, in the same interleaved run,
#     on fixed shapes with its forwards recorded as CUDA graphs, with the speedup over compiled plain
#     decoding), then the paper-scale cost probe (a random Qwen3-8B-shaped target and its drafter,
#     eager, and compiled at one token), then `bench --compile` in fp32;
#   the batch sweep compiled (bf16, batch 1 and 16) and one verify eager against CUDA graphs, if time
#     is left;
#   the greedy identity check over every JSON written (every row at every batch size), which always
#     runs: the other stages leave it RESERVE seconds.
# The stage limits come from the H200 run of 2026-12-04 (results/gpu/h200-2026-12-04/README.md): the
# eager sweeps took 54 s (fp32) and 93 s (bf16); one `bench --compile` of 1 prompt took 107 s, nearly
# all of it compiling.
#
#   bash tools/gpu_bench.sh                              # from anywhere; writes results/gpu/*.json and gpu_bench.log
#   OUT=/tmp/run DEVICE=cpu QUICK=1 bash tools/gpu_bench.sh   # every stage with tiny settings on a CPU (a check)
#
# Each stage runs under its own `timeout`, cut to what is left of BUDGET, and prints its start time,
# limit, exit status and duration as it goes, so a run that is cut short still says where it got to.
# A failed or timed-out stage is reported and the run goes on. Without a CUDA device (and DEVICE
# not cpu) it says so in one line and exits with status 2, having run nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python}
OUT=${OUT:-results/gpu}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
BUDGET=${BUDGET:-560}
RESERVE=15      # seconds of BUDGET kept for the greedy identity check, which always runs last
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export DFLASH_LITE_FIGURES=${DFLASH_LITE_FIGURES:-$OUT/figures} DFLASH_LITE_RESULTS=${DFLASH_LITE_RESULTS:-$OUT}

if [ "$QUICK" = 1 ]; then      # enough to see every stage work, on any machine
    PROMPTS=1; NEW=16; REPEATS=1; SHAPE="--shape smoke --context 64 --repeats 3"
    BATCHES=1,2; COMPILED_BATCHES=1,2
else
    PROMPTS=2; NEW=96; REPEATS=2; SHAPE="--shape qwen3-8b --context 512 --repeats 10"
    BATCHES=1,4,16,64; COMPILED_BATCHES=1,16
fi
if [ "$DEVICE" != cpu ] && ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_bench.sh: no CUDA device visible to torch (torch.cuda.is_available() is False); nothing was run" >&2
    exit 2
fi
mkdir -p "$OUT"
LOG="$OUT/gpu_bench.log"
: > "$LOG"
START=$SECONDS

say() { echo "$*" | tee -a "$LOG"; }

# stage NAME LIMIT_S COMMAND...: run COMMAND under `timeout`, its output to the terminal and the log
stage() {
    local name=$1 limit=$2; shift 2
    local left=$((BUDGET - (SECONDS - START) - ${KEEP-$RESERVE}))
    if [ "$left" -lt 10 ]; then
        say "[$((SECONDS - START))s] == $name: skipped, the ${BUDGET}s budget is spent"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    say "[$((SECONDS - START))s] == $name (limit ${limit}s)"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 124 ] && say "   $name: TIMED OUT after ${limit}s"
    say "[$((SECONDS - START))s] -- $name: rc $rc in $((SECONDS - t0))s"
}

stage "environment" 30 "$PYTHON" - "$OUT/env.json" <<'PY'
import json, os, platform, subprocess, sys
import torch, transformers
env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
       "transformers": transformers.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count()}
if torch.cuda.is_available():
    env["gpu"] = torch.cuda.get_device_name(0)
    env["capability"] = list(torch.cuda.get_device_capability(0))
    env["memory_GiB"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        env["driver"] = None
print(json.dumps(env))
open(sys.argv[1], "w").write(json.dumps(env, indent=1))
PY

stage "demo ($DEVICE)" 45 "$PYTHON" -m dflash_lite demo --device "$DEVICE" --repeats 2 --max-new-tokens "$NEW"

for dtype in float32 bfloat16; do      # the batch sweep: every method at each batch size, eager
    stage "bench --batch-sizes $BATCHES, $dtype" 120 "$PYTHON" -m dflash_lite bench --device "$DEVICE" \
        --dtype "$dtype" --domain math --num-prompts 8 --max-new-tokens "$NEW" --repeats 1 --block-sizes 8,16 \
        --tree-sizes 16 --cost-repeats 3 --batch-sizes "$BATCHES" --json "$OUT/bench_batch_math_${dtype}.json"
done

for dtype in bfloat16 float32; do      # every row eager and compiled (fixed shapes), one interleaved run
    stage "bench --compile, $dtype" 180 "$PYTHON" -m dflash_lite bench --device "$DEVICE" --dtype "$dtype" \
        --domain math --num-prompts "$PROMPTS" --max-new-tokens "$NEW" --repeats "$REPEATS" --block-sizes 16 \
        --tree-sizes 16 --no-baselines --no-hf-dflash --cost-repeats 5 --compile --json "$OUT/bench_math_${dtype}.json"
    if [ "$dtype" = bfloat16 ]; then   # between the two: fp32's compiled rows matter least
        stage "cost probe at the paper's scale" 120 "$PYTHON" tools/gpu_cost_probe.py --device "$DEVICE" \
            $SHAPE --compiled-sizes 1 --json "$OUT/cost_probe.json"
    fi
done

stage "bench --batch-sizes $COMPILED_BATCHES --compile, bfloat16" 120 "$PYTHON" -m dflash_lite bench \
    --device "$DEVICE" --dtype bfloat16 --domain math --num-prompts 8 --max-new-tokens "$NEW" --repeats 1 \
    --block-sizes 16 --tree-sizes 16 --cost-repeats 3 --batch-sizes "$COMPILED_BATCHES" --compile \
    --json "$OUT/bench_batch_math_compiled_bfloat16.json"

stage "one verify of 16 tokens, eager vs CUDA graphs (bf16, if time is left)" 60 "$PYTHON" tools/gpu_verify_compile.py \
    --device "$DEVICE" --dtype bfloat16 --repeats 30 --modes "$([ "$DEVICE" = cpu ] && echo eager || echo eager,reduce-overhead)" \
    --json "$OUT/verify_compile_bfloat16.json"

KEEP=0 stage "greedy identity" 30 "$PYTHON" - "$OUT" <<'PY'
import json, pathlib, sys
failed = []
for path in sorted(pathlib.Path(sys.argv[1]).glob("*_math_*.json")):
    report = json.loads(path.read_text())
    rows = ({row["name"] + (f" at batch {row['batch_size']}" if "batch_size" in row else ""):
             row["identical_to_target"] for row in report["methods"]} if "methods" in report
            else {name: row["identical"] for name, row in report["rows"].items()})
    for name, same in rows.items():
        if same is None:
            continue
        print(f"{path.stem:>34}  {name:<56} identical: {same}")
        if not same and "float32" in path.stem and ("DFlash" in name or "plain" in name or "autoregressive" in name):
            failed.append(f"{path.stem}: {name}")    # bf16 may differ at genuine logit ties; fp32 may not
sys.exit(f"fp32 output differs from the target's greedy output: {failed}" if failed else 0)
PY

say "[$((SECONDS - START))s] == done: $OUT (log: $LOG)"
