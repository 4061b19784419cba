#!/usr/bin/env bash
# Hugging Face interop check (bench/hf_interop.py says what it compares and why the thresholds).
# Run from anywhere on a machine with Python (torch, transformers, safetensors), node on PATH and
# dist/ built (npx tsc -p tsconfig.json). Exits 0 on PASS, 1 on FAIL, 2 when something is missing.
#   bash bench/hf_interop.sh                      # mdlm's cpu backend
#   MDLM_BACKENDS=cpu,webgpu bash bench/hf_interop.sh
# On the GPU machine, which has no Node.js: `bash bench/pack-device.sh` here, carry .device, and the
# script unpacks the Node, node_modules and dist/ it carries when they are missing.
# Environment: PYTHON (default python3), MDLM_BACKENDS (default cpu), WORK (scratch dir, default a new temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
missing() { echo "hf_interop: FAIL: $*"; exit 2; }
if ! command -v node >/dev/null && [ -f .device/node.xz ]; then
  mkdir -p /tmp/n && xz -dc .device/node.xz > /tmp/n/node && chmod +x /tmp/n/node && export PATH=/tmp/n:$PATH
fi
[ -d node_modules ] || [ ! -f .device/nm.tar.xz ] || tar -xJf .device/nm.tar.xz
[ -f dist/cli/index.js ] || [ ! -f .device/dist.tar.xz ] || tar -xJf .device/dist.tar.xz
command -v node >/dev/null || missing "node is not on PATH (on the GPU machine: bash bench/pack-device.sh here, then carry .device)"
[ -f dist/cli/index.js ] || missing "dist/ is not built; run npx tsc -p tsconfig.json"
command -v "$PY" >/dev/null || missing "$PY not found; set PYTHON"
"$PY" -c 'import torch, transformers, safetensors, numpy' 2>/dev/null || missing "$PY lacks torch, transformers, safetensors or numpy"
WORK=${WORK:-$(mktemp -d /tmp/hf-interop.XXXXXX)}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/xdg}; mkdir -p "$XDG_RUNTIME_DIR"
exec "$PY" bench/hf_interop.py --work "$WORK" --backends "${MDLM_BACKENDS:-cpu}" "$@"
