#!/usr/bin/env bash
# One call on the GPU machine: unpack the carried Node.js, node_modules, dist/ and Vulkan loader
# (.device/ and .gl/, see docs/WEBGPU.md), then probe, time kernels against peers
# and run the parity tests on the real GPU. Usage there: bash bench/gpu-run.sh [probe matmul kernels parity tests]
set -uo pipefail
mkdir -p /tmp/n && xz -T8 -dc .device/node.xz > /tmp/n/node && chmod +x /tmp/n/node && export PATH=/tmp/n:$PATH
tar -xJf .device/nm.tar.xz && tar -xJf .device/dist.tar.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export XDG_RUNTIME_DIR=/tmp/xdg && mkdir -p $XDG_RUNTIME_DIR
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
for w in ${*:-probe matmul kernels parity}; do
  echo "=== $w"
  case $w in
    probe) node bin/mdlm.js probe 2>&1 | grep -v Warning | tee "$OUT/probe.txt" ;;
    matmul) timeout 150 node bin/mdlm.js bench matmul --sizes 1024,2048,4096 --reps 30 --json > "$OUT/matmul.json" 2> "$OUT/matmul.err"; cat "$OUT/matmul.json" | grep -E '"shape"|Tflops|ratio' ;;
    kernels) timeout 150 node bin/mdlm.js bench kernels --backend webgpu --scale bench --no-check --reps 20 --json > "$OUT/kernels.json" 2> "$OUT/kernels.err"
      node -e "for (const r of require('$OUT/kernels.json')) console.log(r.op.padEnd(22), r.case.padEnd(34), (r.ms??NaN).toFixed(3)+' ms', r.tflops ? r.tflops.toFixed(2)+' TFLOP/s' : '', r.error ?? '')" ;;
    parity) timeout 120 node bin/mdlm.js bench kernels --backend webgpu --no-gradients --json > "$OUT/parity.json" 2> "$OUT/parity.err"
      node -e "const r=require('$OUT/parity.json'); const bad=r.filter(x=>!x.pass); console.log(r.length+' parity records, '+bad.length+' failed'); for (const x of bad) console.log(JSON.stringify(x))" ;;
    tests) MDLM_REQUIRE_WEBGPU=1 timeout 240 node node_modules/vitest/vitest.mjs run tests/parity.test.ts tests/backend.test.ts tests/ops 2>&1 | grep -v Warning | tail -15 | tee "$OUT/tests.txt" ;;
  esac
done
