#!/usr/bin/env bash
# GPU benchmarks beside PyTorch, on the GPU machine (after tools/gpu/build.sh here): one
# line per measurement, rlx's then torch's for the same work.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d target/device/bin ] || tar xJf target/device/bins.tar.xz -C target/device
for case in "8192 bf16" "4096 f32" "4096 f16" "4096 bf16"; do
  set -- $case
  target/device/bin/gemm "$1" "$2"
  python3 tools/gpu/gemm.py "$1" "$1" "$1" "$2"
done
for dtype in bf16 f32; do
  target/device/bin/minilm "$dtype" --profile
  python3 tools/gpu/minilm.py "$dtype"
done
target/device/bin/sdpa
RLX_CUDNN=0 target/device/bin/sdpa
python3 tools/gpu/attention.py
target/device/bin/decode 128
python3 tools/gpu/decode.py 128
# A GPT-2-small-shaped bf16 training step (B16 x T1024, and B4 should the larger not fit).
for b in 16 4; do
  target/device/bin/train_step "$b"
  python3 tools/gpu/train_step.py "$b"
done
python3 tools/gpu/train_step.py 16 12 --compile
