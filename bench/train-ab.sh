#!/usr/bin/env bash
# Same-machine A/B of two builds of the TypeScript side (dist/) on one addon: `mdlm bench train
# --peer none` with this tree's dist/ ("head") and with the dist/ packed from another commit
# ("base", .device/dist-base.tar.xz: `bash bench/pack-device.sh <commit>`), alternating head, base,
# head, base, ... so that clock and power drift fall on both. Prints each run's ms/step and the
# medians. Changes to cuda/ are not A/B'd this way: both sides run the addon built from this tree.
# Usage: bash bench/train-ab.sh   (env: AB_RUNS=3 pairs, AB_CASES="llama-124m:mdlm llama-1.3b:mdlm",
#   AB_BACKEND=cuda, AB_STEPS=20 timed steps (1.3B: 5), AB_ARGS more bench train options; OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
base_tar=${AB_BASE:-.device/dist-base.tar.xz}
[ -f "$base_tar" ] || { echo "train-ab: no $base_tar (make it with: bash bench/pack-device.sh <commit>)"; exit 2; }
rm -rf /tmp/ab-base && mkdir -p /tmp/ab-base && tar -xJf "$base_tar" -C /tmp/ab-base || exit 2
[ -d /tmp/ab-base/dist ] || { echo "train-ab: $base_tar holds no dist/"; exit 2; }
# Puts side $1's dist/ in place (head's is kept in /tmp/ab-head while base runs).
use() {
  if [ "$1" = base ]; then mv dist /tmp/ab-head && cp -r /tmp/ab-base/dist dist; else rm -rf dist && mv /tmp/ab-head dist; fi
}
trap '[ -d /tmp/ab-head ] && use head' EXIT
for case in ${AB_CASES:-llama-124m:mdlm llama-1.3b:mdlm}; do
  preset=${case%%:*}; objective=${case##*:}
  steps=${AB_STEPS:-$([ "$preset" = llama-1.3b ] && echo 5 || echo 20)}
  for r in $(seq "${AB_RUNS:-3}"); do
    for side in head base; do
      [ $side = base ] && use base
      node bin/mdlm.js bench train --preset "$preset" --objective "$objective" --backend "${AB_BACKEND:-cuda}" --steps "$steps" --warmup 3 \
        --peer none --json ${AB_ARGS:-} > "$OUT/ab-$preset-$objective-$side-$r.json" 2> "$OUT/ab-$preset-$objective-$side-$r.err"
      [ $side = base ] && use head
      node -e "const j = require('$OUT/ab-$preset-$objective-$side-$r.json'); console.log('$preset $objective run $r $side', j.ms_step.toFixed(3), 'ms/step')" \
        || { echo "train-ab: $preset $objective $side run $r failed:"; tail -n 5 "$OUT/ab-$preset-$objective-$side-$r.err"; }
    done
  done
  node -e "
    const ms = (side) => Array.from({ length: ${AB_RUNS:-3} }, (_, i) => { try { return require('$OUT/ab-$preset-$objective-' + side + '-' + (i + 1) + '.json').ms_step; } catch { return NaN; } }).filter(Number.isFinite).sort((a, b) => a - b);
    const med = (xs) => xs.length % 2 ? xs[(xs.length - 1) / 2] : (xs[xs.length / 2 - 1] + xs[xs.length / 2]) / 2;
    const h = ms('head'), b = ms('base');
    console.log('$preset $objective median ms/step: head', med(h).toFixed(3), 'base', med(b).toFixed(3), 'head − base', (med(h) - med(b)).toFixed(3));"
done
