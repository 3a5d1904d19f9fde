#!/usr/bin/env bash
# One GPU run of the shipped tiny pair: the environment, `bench` in fp32 and bf16 (JSON in
# results/gpu/), a static-shape verify eager vs CUDA graphs (torch.compile "reduce-overhead"),
# and the greedy identity check, which `bench` makes on every greedy method of its table.
#
#   bash tools/gpu_bench.sh                 # from the repository root, with the package importable
#   NUM_PROMPTS=8 MAX_NEW_TOKENS=128 bash tools/gpu_bench.sh
#
# Without an NVIDIA GPU it says so in one line and exits with status 2, having run nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT=${OUT:-results/gpu}
NUM_PROMPTS=${NUM_PROMPTS:-6}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-96}
REPEATS=${REPEATS:-3}

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_bench.sh: no CUDA device visible to torch (torch.cuda.is_available() is False); nothing was run" >&2
    exit 2
fi
mkdir -p "$OUT"

echo "== environment"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
"$PYTHON" - <<'PY' | tee "$OUT/env.txt"
import platform, torch, transformers
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}, "
      f"cuDNN {torch.backends.cudnn.version()}), transformers {transformers.__version__}")
print(f"device: {torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}")
PY

for dtype in float32 bfloat16; do
    echo "== bench, tiny pair, cuda, $dtype"
    "$PYTHON" -m dflash_lite bench --device cuda --dtype "$dtype" --domain mixed --num-prompts "$NUM_PROMPTS" \
        --max-new-tokens "$MAX_NEW_TOKENS" --repeats "$REPEATS" --block-sizes 4,8,16 \
        --json "$OUT/bench_tiny_${dtype}.json"
done

echo "== verify of 16 tokens: eager vs CUDA graphs"
for dtype in float32 bfloat16; do
    "$PYTHON" tools/gpu_verify_compile.py --device cuda --dtype "$dtype" --json "$OUT/verify_compile_${dtype}.json" \
        || echo "(torch.compile failed for $dtype: see the traceback above)"
done

echo "== greedy identity on the GPU (every greedy method against the target's greedy output, same run)"
"$PYTHON" - "$OUT" <<'PY'
import json, pathlib, sys
failed = False
for path in sorted(pathlib.Path(sys.argv[1]).glob("bench_tiny_*.json")):
    for row in json.loads(path.read_text())["methods"]:
        if row["identical_to_target"] is not None:
            print(f"{path.stem:>24}  {row['name']:<36} identical: {row['identical_to_target']}")
            ours = row.get("kind") in ("dflash", "dflash_policy", "dflash_adaptive")   # DFlash, our loop, no tree
            failed |= ours and "float32" in path.stem and not row["identical_to_target"]
sys.exit("fp32 DFlash output differs from the target's greedy output" if failed else 0)
PY
echo "== done: $OUT"
