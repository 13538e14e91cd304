#!/usr/bin/env bash
# GPU benchmarks beside PyTorch, on the GPU machine (after tools/gpu/build.sh here): one
# line per measurement, rlx's then torch's for the same work.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d target/device/bin ] || tar xJf target/device/bins.tar.xz -C target/device
for shape in "8192 8192 8192 bf16" "4096 4096 4096 f32" "4096 4096 4096 f16"; do
  target/device/bin/gemm $shape
  python3 tools/gpu/gemm.py $shape
done
