#!/usr/bin/env bash
# One call on the GPU machine for the CUDA backend: unpack the carried Node.js, node_modules, dist/
# and Node's headers (.device/, made here by bench/pack-device.sh), build the addon for the GPU at
# hand, probe, check every kernel against the float64 reference (bf16 and f32), time the bench
# shapes against PyTorch on the same GPU, run tests/cuda.test.ts (which ends with 20 training steps
# per objective in bf16 against the CPU in f32), and time training against PyTorch eager and
# torch.compile (mdlm bench train). Logs go to $OUT.
# Usage there: bash bench/cuda-run.sh [build probe parity bench peer attn wgmma tests train train-1.3b train-fp8 fp8-quality train-ab attn-ab run ncu ncu-gemm ncu-train matmul-ws]
#   (default: build probe wgmma parity bench peer tests train; attn = attention forward and
#   backward at the bench shapes beside PyTorch SDPA; run = mdlm train --backend cuda, both
#   objectives, on the built-in byte corpus and on Brown prepared with the GPT-2 tokenizer; wgmma =
#   tests/cuda_emu/wgmma_check.cu on the GPU, which holds the CPU emulator's model of Hopper's
#   wgmma to the hardware)
# TRAIN_ARGS: more options for the train and train-1.3b steps' mdlm bench train (e.g. --logit-chunks 2,
#   which keeps llama-1.3b 8 × 2048 below PyTorch's peak memory).
# All steps can take longer than one 10-minute device call: split them, e.g. "build probe parity",
# then "bench peer", then "tests"; a warm machine keeps cuda/build/, so later builds are no-ops.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# Unpacked once a machine: a second invocation in the same call would find node busy.
if [ ! -x /tmp/n/node ]; then
  mkdir -p /tmp/n /tmp/include && xz -T0 -dc .device/node.xz > /tmp/n/node.tmp && chmod +x /tmp/n/node.tmp
  tar -xJf .device/nm.tar.xz && tar -xJf .device/dist.tar.xz && tar -xJf .device/node-include.tar.xz -C /tmp/include && mv /tmp/n/node.tmp /tmp/n/node
fi
export PATH=/tmp/n:$PATH
export MDLM_NODE_INCLUDE=/tmp/include/node MDLM_CUDA_ARCHS=${MDLM_CUDA_ARCHS:-90a}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"

# Prints one table row per record of a bench kernels JSON file, failures first.
summary() {
  [ -s "$1" ] || { echo "no records in $1"; return; }
  node -e "
    const rs = require('$1'); const bad = rs.filter((r) => !r.pass);
    for (const r of [...bad, ...rs.filter((r) => r.pass)]) console.log((r.pass ? 'pass' : 'FAIL').padEnd(5), r.op.padEnd(20), r.case.slice(0, 34).padEnd(34), (r.dtype ?? '').padEnd(5),
      Number.isFinite(r.relErr) ? r.relErr.toExponential(2).padStart(9) : String(r.relErr).padStart(9), r.ms !== undefined ? (r.ms.toFixed(4) + ' ms').padStart(12) : '',
      r.tflops ? r.tflops.toFixed(2) + ' TFLOP/s' : '', r.error ?? '');
    console.log(rs.length + ' records, ' + bad.length + ' failed');"
}

# bench/matmul_ws.cu (the Hopper GEMM's fused epilogues beside cuBLASLt) as /tmp/matmul_ws.
build_matmul_ws() {
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  "$cuda/bin/nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Icuda bench/matmul_ws.cu -L"$cuda/lib64" -lcublasLt -Xlinker -rpath="$cuda/lib64" -o /tmp/matmul_ws
}

for w in ${*:-build probe wgmma parity bench peer tests train}; do
  echo "=== $w"
  case $w in
    build)
      if ! node cuda/build.mjs > "$OUT/build.log" 2>&1; then cat "$OUT/build.log"; echo "build failed: compiler output above (and in $OUT/build.log)"; exit 1; fi
      tail -n 3 "$OUT/build.log" ;;
    probe) node bin/mdlm.js probe 2>&1 | grep -v Warning | tee "$OUT/probe.txt" ;;
    parity)
      timeout 240 node bin/mdlm.js bench kernels --backend cuda --dtype bf16,f32 --reps 0 --no-gradients --json > "$OUT/parity.json" 2> "$OUT/parity.err"
      summary "$OUT/parity.json" | tee "$OUT/parity.txt"; tail -n 5 "$OUT/parity.err" ;;
    bench)
      timeout 300 node bin/mdlm.js bench kernels --backend cuda --scale bench --no-check --reps 20 --json > "$OUT/bench.json" 2> "$OUT/bench.err"
      timeout 120 node bin/mdlm.js bench kernels --backend cuda --ops matmul --dtype f32 --scale bench --no-check --reps 10 --json > "$OUT/bench_f32.json" 2>> "$OUT/bench.err"
      { summary "$OUT/bench.json"; summary "$OUT/bench_f32.json"; } | tee "$OUT/bench.txt"; tail -n 5 "$OUT/bench.err" ;;
    peer) timeout 180 python3 bench/cuda_peer.py 2>&1 | tee "$OUT/peer.txt" ;;
    attn)
      timeout 200 node bin/mdlm.js bench kernels --backend cuda --ops attention,attention_backward --dtype bf16 --scale bench --no-check --reps 20 2>&1 \
        | grep -v Warning | tee "$OUT/attn.txt"
      timeout 200 python3 bench/peers/attention_sdpa.py --reps 20 --backends default 2>&1 | tee "$OUT/attn-sdpa.txt" ;;
    train)
      for obj in mdlm ar; do
        timeout 280 node bin/mdlm.js bench train --preset llama-124m --objective $obj --backend cuda --batch 16 --seq-len 1024 --steps 10 --warmup 3 --profile 2 --json ${TRAIN_ARGS:-} \
          > "$OUT/train-124m-$obj.json" 2> >(tee "$OUT/train-124m-$obj.err" >&2)
      done ;;
    train-1.3b)
      for obj in mdlm ar; do
        timeout 290 node bin/mdlm.js bench train --preset llama-1.3b --objective $obj --backend cuda --batch 8 --seq-len 2048 --steps 5 --warmup 2 --profile 2 --json ${TRAIN_ARGS:-} \
          > "$OUT/train-1.3b-$obj.json" 2> >(tee "$OUT/train-1.3b-$obj.err" >&2)
      done ;;
    train-fp8)  # mdlm bench train --precision fp8 (each FP8_SCALING) beside mdlm's bf16 and torch.compile bf16, same call:
      # llama-124m 16 × 1024 and llama-1.3b 8 × 2048, FP8_OBJECTIVES (default: mdlm ar), FP8_PRESETS (default: both)
      for preset in ${FP8_PRESETS:-llama-124m llama-1.3b}; do
        shape=$([ $preset = llama-124m ] && echo "--batch 16 --seq-len 1024 --steps 10 --warmup 3" || echo "--batch 8 --seq-len 2048 --steps 5 --warmup 2")
        for obj in ${FP8_OBJECTIVES:-mdlm ar}; do
          for scaling in ${FP8_SCALING:-delayed}; do
            timeout 290 node bin/mdlm.js bench train --preset $preset --objective $obj --backend cuda $shape --precision fp8 --fp8-scaling $scaling \
              --peer ${FP8_PEER:-compile} --profile 2 --json ${TRAIN_ARGS:-} > "$OUT/train-fp8-$preset-$obj-$scaling.json" 2> >(grep -v Warning | tee "$OUT/train-fp8-$preset-$obj-$scaling.err" >&2)
          done
        done
      done ;;
    fp8-quality)  # QUALITY_STEPS (default 2000) steps of the small preset (byte Brown) and llama-124m (GPT-2 Brown,
      # 16 × 1024, no accumulation) from the same seed in bf16 and in FP8 with each recipe: their metrics.jsonl
      # as $OUT/quality-<preset>-<precision>.jsonl (plot them with bench/plot_loss.py)
      [ -d /tmp/brown-gpt2 ] || node bin/mdlm.js data prepare --tokenizer gpt2 --out /tmp/brown-gpt2 --val-fraction 0.05 --no-progress 2>&1 | tail -n 1
      for preset in ${QUALITY_PRESETS:-small llama-124m}; do
        extra=$([ $preset = llama-124m ] && echo "--data.path /tmp/brown-gpt2 --train.gradAccum 1 --train.warmupSteps 200" || echo "")
        for prec in bf16 fp8-delayed fp8-current; do
          p=${prec%%-*}; sc=${prec#fp8-}; fp8=$([ $p = fp8 ] && echo "--train.fp8.scaling $sc" || echo "")
          rm -rf /tmp/q-$preset-$prec
          timeout 280 node bin/mdlm.js train --preset $preset --backend cuda --steps ${QUALITY_STEPS:-2000} --out /tmp/q-$preset-$prec --train.precision $p $fp8 \
            --train.evalEvery 250 --train.evalBatches 10 --train.saveEvery 0 --train.logEvery 10 $extra 2>&1 | grep -v Warning | tail -n 3
          cp /tmp/q-$preset-$prec/metrics.jsonl "$OUT/quality-$preset-$prec.jsonl"
        done
      done ;;
    run)
      node bin/mdlm.js data prepare --tokenizer gpt2 --out /tmp/brown-gpt2 --val-fraction 0.05 --no-progress 2>&1 | tail -n 3
      for obj in mdlm ar; do
        timeout 140 node bin/mdlm.js train --preset small --objective $obj --backend cuda --steps 200 --out /tmp/run-small-$obj \
          --train.evalEvery 100 --train.saveEvery 200 2>&1 | grep -v Warning | tail -n 8 | tee "$OUT/run-small-$obj.txt"
        timeout 140 node bin/mdlm.js train --preset llama-124m --objective $obj --backend cuda --steps 100 --out /tmp/run-124m-$obj \
          --data.path /tmp/brown-gpt2 --train.gradAccum 1 --train.warmupSteps 10 --train.evalEvery 50 --train.evalBatches 2 --train.saveEvery 100 \
          2>&1 | grep -v Warning | tail -n 8 | tee "$OUT/run-124m-$obj.txt"
      done ;;
    wgmma)  # the emulator's wgmma model (tests/cuda_emu/warp_emu.h) against the hardware
      nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a tests/cuda_emu/wgmma_check.cu -o /tmp/wgmma_check 2>&1 | grep -v C7519
      timeout 60 /tmp/wgmma_check 2>&1 | tee "$OUT/wgmma.txt" ;;
    ncu)  # hardware counters (Nsight Compute) for the first launch of the kernel matching NCU_KERNEL
      # (regex on the demangled name, whose template arguments read like fwd_ws<(int)64, (bool)1, (int)0>) in bench kernels --ops NCU_OPS --case NCU_CASE at bench scale:
      # details page, raw metrics and per-instruction SASS stall samples, as $OUT/ncu-$NCU_TAG*
      rep="$OUT/ncu-${NCU_TAG:-bwd}"
      timeout 280 ncu --clock-control none --set full --kernel-name-base demangled -k "regex:${NCU_KERNEL:-bwd_ws<.*128}" -c 1 \
        -f -o "$rep" node bin/mdlm.js bench kernels --backend cuda --ops "${NCU_OPS:-attention_backward}" --case "${NCU_CASE:-B8 T2048 H16 D128 bidirectional}" \
        --dtype bf16 --scale bench --no-check --reps 1 > "$rep.log" 2>&1; tail -n 5 "$rep.log"
      ncu -i "$rep.ncu-rep" --page details > "$rep-details.txt" 2>&1
      ncu -i "$rep.ncu-rep" --page raw --csv > "$rep-raw.csv" 2>&1
      ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$rep-sass.csv" 2>&1
      grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers|Achieved Occupancy|Warp Cycles Per Issued|Issued Ipc|stall" "$rep-details.txt" | head -n 30 ;;
    matmul-ws)  # cuda/gemm/gemm_ws.cuh's fused epilogues against cuBLASLt's plain product on the training shapes
      build_matmul_ws && /tmp/matmul_ws "${MATMUL_WS_REPS:-50}" 2>&1 | tee "$OUT/matmul-ws.txt" ;;
    ncu-gemm)  # Nsight Compute on cuda/gemm/gemm_ws.cuh's kernels and cuBLASLt's at the matmul-ws shapes
      # whose label contains NCU_GEMM_SHAPE (default "124M q/k"): every launch of each, --set full;
      # the details page as $OUT/ncu-gemm-details.txt (the report itself, large, stays in /tmp).
      # Kernel names: gemm_ws_nt<epilogue, schedule, tile width, a transposed>, nvjet_*.
      build_matmul_ws && timeout 280 ncu --clock-control none --set full -k "regex:gemm_ws_nt|nvjet" -f -o /tmp/ncu-gemm /tmp/matmul_ws 1 "${NCU_GEMM_SHAPE:-124M q/k}" > "$OUT/ncu-gemm.log" 2>&1
      tail -n 3 "$OUT/ncu-gemm.log"
      ncu -i /tmp/ncu-gemm.ncu-rep --page details > "$OUT/ncu-gemm-details.txt" 2>&1
      grep -E "gemm_ws_nt|nvjet|Duration|Compute \(SM\) Throughput|Registers Per|Warp Cycles Per Issued" "$OUT/ncu-gemm-details.txt" | head -n 60 ;;
    ncu-train)  # every kernel of llama-124m and llama-1.3b mdlm training steps (graph-replayed), timed one
      # by one by Nsight Compute, the second step's graph summed by kernel (bench/kernel-times.mjs
      # --from adamw_kernel): the step's GPU time without the per-op waits of --profile
      for preset in llama-124m llama-1.3b; do
        shape=$([ $preset = llama-124m ] && echo "--batch 16 --seq-len 1024" || echo "--batch 8 --seq-len 2048")
        timeout 280 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --kernel-name-base demangled --csv --print-units base \
          --log-file "$OUT/ncu-train-$preset.csv" node bin/mdlm.js bench train --preset $preset --objective ${NCU_OBJECTIVE:-mdlm} --backend cuda $shape \
          --steps 2 --warmup 0 --peer none > "$OUT/ncu-train-$preset.log" 2>&1; tail -n 2 "$OUT/ncu-train-$preset.log"
        node bench/kernel-times.mjs "$OUT/ncu-train-$preset.csv" --from adamw_kernel | tee "$OUT/kernel-times-$preset.txt" | head -n 45
      done ;;
    train-ab)  # this tree's dist/ and addon against another commit's (bash bench/pack-device.sh <commit>),
      # alternating: bench/train-ab.sh (AB_SIDES, AB_CASES, AB_RUNS, AB_ARGS)
      bash bench/train-ab.sh 2>&1 | tee "$OUT/train-ab.txt" ;;
    attn-ab)  # attention at the bench shapes (AB_OPS, default attention_backward) with this tree's
      # addon and the base commit's that train-ab built (bash bench/pack-device.sh <commit>, then
      # "train-ab attn-ab"), alternating head and base AB_RUNS (default 2) times
      base=.device/ab-base/cuda/build/Release/mdlm_cuda.node addon=cuda/build/Release/mdlm_cuda.node
      if [ ! -f "$base" ]; then echo "attn-ab: no base addon at $base (run train-ab before it)"; continue; fi
      cp "$addon" /tmp/attn-ab-head.node
      for r in $(seq "${AB_RUNS:-2}"); do
        for side in head base; do
          cp "$([ $side = head ] && echo /tmp/attn-ab-head.node || echo "$base")" "$addon"
          echo "== $side, run $r"
          timeout 120 node bin/mdlm.js bench kernels --backend cuda --ops "${AB_OPS:-attention_backward}" --dtype bf16 --scale bench --no-check --reps 20 2>&1 \
            | grep -v Warning | cut -c1-100 | tee "$OUT/attn-ab-$side-$r.txt"
        done
      done
      cp /tmp/attn-ab-head.node "$addon" ;;
    # Each test's line as it finishes (the default reporter prints a file's only at its end, so a
    # run cut off at the call's limit would print nothing), the whole log in $OUT.
    tests) MDLM_REQUIRE_CUDA=1 timeout 540 node node_modules/vitest/vitest.mjs run tests/cuda.test.ts --reporter=verbose 2>&1 | grep -v Warning | tee "$OUT/tests.txt" \
      | grep -v " ✓ " | tail -n 40 ;;
  esac
done
