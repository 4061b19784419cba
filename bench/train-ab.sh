#!/usr/bin/env bash
# Same-machine A/B of training steps: `mdlm bench train --peer none`, the sides alternating run by
# run (A, B, A, B, ...) so that clock and power drift fall on all of them. Prints each run's
# ms/step and each side's median against the first side's.
# A side (AB_SIDES, space-separated; default "head base") is a tree: "head", this tree's dist/ and
# addon, or "base", the dist/ packed from another commit (.device/dist-base.tar.xz:
# `bash bench/pack-device.sh <commit>`), with that commit's addon built from its cuda/
# (.device/cuda-base.tar.xz, packed beside it) when AB_BACKEND is cuda.
# Usage: bash bench/train-ab.sh   (env: AB_SIDES, AB_RUNS=3 rounds, AB_CASES="llama-124m:mdlm
#   llama-1.3b:mdlm", AB_BACKEND=cuda, AB_STEPS=20 timed steps (1.3B: 5), AB_ARGS more bench train
#   options; OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sides=${AB_SIDES:-head base}
rm -f /tmp/ab-head-addon.node
for side in $sides; do [ "$side" = head ] || [ "$side" = base ] || { echo "train-ab: a side is head or base, not '$side'"; exit 2; }; done
uses_base=0; for side in $sides; do [ "$side" = base ] && uses_base=1; done
if [ "$uses_base" = 1 ]; then
  base_tar=${AB_BASE:-.device/dist-base.tar.xz}
  [ -f "$base_tar" ] || { echo "train-ab: no $base_tar (make it with: bash bench/pack-device.sh <commit>)"; exit 2; }
  rm -rf /tmp/ab-base && mkdir -p /tmp/ab-base && tar -xJf "$base_tar" -C /tmp/ab-base || exit 2
  [ -d /tmp/ab-base/dist ] || { echo "train-ab: $base_tar holds no dist/"; exit 2; }
  # The base addon, built in /tmp/ab-base-cuda beside a link to this tree's node_modules. The
  # build is incremental and the archive keeps the commit's file times, so a later A/B on the
  # same machine and base rebuilds nothing.
  base_build=/tmp/ab-base-cuda
  addon=cuda/build/Release/mdlm_cuda.node base_addon=$base_build/cuda/build/Release/mdlm_cuda.node
  if [ "${AB_BACKEND:-cuda}" = cuda ]; then
    [ -f .device/cuda-base.tar.xz ] || { echo "train-ab: no .device/cuda-base.tar.xz (bash bench/pack-device.sh <commit>)"; exit 2; }
    mkdir -p $base_build && ln -sfn "$PWD/node_modules" $base_build/node_modules && tar -xJf .device/cuda-base.tar.xz -C $base_build || exit 2
    node $base_build/cuda/build.mjs > "$OUT/ab-base-build.log" 2>&1 || { tail -n 20 "$OUT/ab-base-build.log"; echo "train-ab: the base addon did not build"; exit 2; }
    cp "$addon" /tmp/ab-head-addon.node
  fi
fi
# Puts side $1's dist/ (and addon) in place (head's dist/ is kept in /tmp/ab-head while base runs).
use() {
  if [ "$1" = base ]; then mv dist /tmp/ab-head && cp -r /tmp/ab-base/dist dist; else rm -rf dist && mv /tmp/ab-head dist; fi
  if [ -f /tmp/ab-head-addon.node ]; then cp "$([ "$1" = base ] && echo "$base_addon" || echo /tmp/ab-head-addon.node)" "$addon"; fi
}
trap '[ -d /tmp/ab-head ] && use head' EXIT
for case in ${AB_CASES:-llama-124m:mdlm llama-1.3b:mdlm}; do
  preset=${case%%:*}; objective=${case##*:}
  steps=${AB_STEPS:-$([ "$preset" = llama-1.3b ] && echo 5 || echo 20)}
  for r in $(seq "${AB_RUNS:-3}"); do
    for side in $sides; do
      f="$OUT/ab-$preset-$objective-$side-$r"
      [ "$side" = base ] && use base
      node bin/mdlm.js bench train --preset "$preset" --objective "$objective" --backend "${AB_BACKEND:-cuda}" --steps "$steps" --warmup 3 \
        --peer none --json ${AB_ARGS:-} > "$f.json" 2> "$f.err"
      [ "$side" = base ] && use head
      node -e "const j = require('$f.json'); console.log('$preset $objective run $r $side', j.ms_step.toFixed(3), 'ms/step')" \
        || { echo "train-ab: $preset $objective $side run $r failed:"; tail -n 5 "$f.err"; }
    done
  done
  node -e "
    const runs = ${AB_RUNS:-3}, sides = '$sides'.split(' '), labels = sides;
    const ms = (l) => Array.from({ length: runs }, (_, i) => { try { return require('$OUT/ab-$preset-$objective-' + l + '-' + (i + 1) + '.json').ms_step; } catch { return NaN; } }).filter(Number.isFinite).sort((a, b) => a - b);
    const med = (xs) => xs.length % 2 ? xs[(xs.length - 1) / 2] : (xs[xs.length / 2 - 1] + xs[xs.length / 2]) / 2;
    const first = med(ms(labels[0]));
    for (const [i, s] of sides.entries()) {
      const m = med(ms(labels[i]));
      console.log('$preset $objective median ms/step:', s, m.toFixed(3) + (i ? ' (' + (m - first >= 0 ? '+' : '') + (m - first).toFixed(3) + ' against ' + sides[0] + ')' : ''));
    }"
done
