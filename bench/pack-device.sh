#!/usr/bin/env bash
# Run here (no GPU) before GPU runs: packs into .device/ (git-ignored) what bench/gpu-run.sh and
# bench/cuda-run.sh unpack on the GPU machine, which has no Node.js and no network: Node itself,
# node_modules (less TypeScript: dist/ is built here), dist/, and Node's headers for the CUDA
# addon's build. Then carry ".device" with the run.
# With a commit (bash bench/pack-device.sh <commit>), also that commit's dist/, built in a
# temporary worktree, as .device/dist-base.tar.xz, and its cuda/ sources as
# .device/cuda-base.tar.xz: the other side of bench/train-ab.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
npx tsc -p tsconfig.json
mkdir -p .device
node_bin=$(command -v node)
xz -T0 -c "$node_bin" > .device/node.xz
nm=$(realpath node_modules)
# Linux x64 only, no source maps: what fits the device run's 64 MiB of carried files.
tar -C "$(dirname "$nm")" --exclude='node_modules/typescript' --exclude='*.map' --exclude='node_modules/webgpu/dist/darwin-*' \
  --exclude='node_modules/webgpu/dist/win32-*' --exclude='node_modules/webgpu/dist/linux-arm64' -cf - node_modules | xz -T0 > .device/nm.tar.xz
tar -cJf .device/dist.tar.xz dist
include=$(dirname "$(dirname "$(realpath "$node_bin")")")/include/node
[ -f "$include/node_api.h" ] || include=/usr/include/node
tar -C "$(dirname "$include")" -cJf .device/node-include.tar.xz node
if [ -n "${1:-}" ]; then
  wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$1"
  ln -s "$nm" "$wt/node_modules"
  (cd "$wt" && npx tsc -p tsconfig.json)
  tar -C "$wt" --exclude='*.map' -cJf .device/dist-base.tar.xz dist
  git archive "$1" cuda | xz > .device/cuda-base.tar.xz
  git worktree remove --force "$wt"
fi
ls -l .device
