#!/usr/bin/env bash
# One call on the GPU machine (see DEVELOPERS guide): unpack the carried Node.js, node_modules and
# Vulkan loader, then probe, run the parity suite on the real GPU, and time kernels against peers.
# Usage there: bash bench/gpu-run.sh [what...]   (what: probe tests matmul kernels; default all)
set -uo pipefail
mkdir -p /tmp/n && xz -dc .device/node.xz > /tmp/n/node && chmod +x /tmp/n/node && export PATH=/tmp/n:$PATH
tar -xJf .device/nm.tar.xz
if ! ldconfig -p | grep -q libvulkan; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export XDG_RUNTIME_DIR=/tmp/xdg && mkdir -p $XDG_RUNTIME_DIR
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
what=${*:-probe tests matmul kernels}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
for w in $what; do
  case $w in
    probe) node bin/mdlm.js probe 2>&1 | tee "$OUT/probe.txt" ;;
    tests) MDLM_REQUIRE_WEBGPU=1 node node_modules/vitest/vitest.mjs run 2>&1 | tail -40 | tee "$OUT/tests.txt" ;;
    matmul) node dist/bench/matmul-cli.js --sizes 1024,2048,4096 --reps 20 --json > "$OUT/matmul.json" 2> "$OUT/matmul.err"; cat "$OUT/matmul.json" ;;
    kernels) node bin/mdlm.js bench kernels --backend webgpu --scale bench --reps 10 --no-gradients --json > "$OUT/kernels.json" 2> "$OUT/kernels.err"; node -e "for (const r of require('$OUT/kernels.json')) console.log(r.op, r.case, r.relErr.toExponential(2), r.pass, r.ms?.toFixed(3), r.tflops?.toFixed(2))" ;;
  esac
done
