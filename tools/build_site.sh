#!/usr/bin/env bash
# Build the course site: tools/build_site.sh [OUT_DIR] [--instructor]  (default: _site, the student site).
# Needs the docs dependencies: pip install -r docs/requirements.txt. Nothing is executed or downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m dflash_lite.course site "${1:-_site}" "${@:2}"   # add --instructor for the solutions
