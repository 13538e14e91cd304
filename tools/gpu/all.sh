#!/usr/bin/env bash
# One GPU-machine run that fits a time budget (seconds, default 500): every GPU test
# (check.sh) first, then rlx's benches (CUDA, then wgpu through Vulkan) and PyTorch's figures
# beside them, then the ONNX node tests through --device cuda; each step is cut to what is
# left of the budget and skipped once too little is. PEERS=0 skips PyTorch's figures (when a run already has them), ONNX=0
# the ONNX node tests. The tests take ~260 s and the ONNX node tests ~420 s (16 jobs), more
# than one 600-s device call holds: run `ONNX=0 bash tools/gpu/all.sh 560`, then
# `bash tools/gpu/onnx.sh` (with target/device/onnx-cpu.json copied to $OUT) in a second call.
# Logs (each step's output in full, and the tests' own) go to $OUT/logs.tgz (one file, as a
# run returns few).
cd "$(dirname "$0")/../.."
budget=${1:-500}
out=${OUT:-target/device}
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
step() {
  local t=$1; shift
  local l; l=$(left)
  [ "$l" -lt 15 ] && { echo "SKIPPED (time): $*"; return; }
  [ "$t" -gt "$l" ] && t=$l
  echo "== $* (limit $t s)"
  local log; log="$out/logs/$(echo "$*" | tr -c 'A-Za-z0-9_.\n-' '_' | cut -c1-60).log"
  timeout "$t" "$@" 2>&1 | tee "$log"
  echo "-- rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
}
mkdir -p "$out/logs"
[ -d target/device/bin ] || tar xJf target/device/bins.tar.xz -C target/device
step 300 bash tools/gpu/check.sh
cp target/device/*.log "$out/logs/" 2>/dev/null
step 40 target/device/bin/sdpa
RLX_CUDNN=0 step 40 target/device/bin/sdpa
step 40 target/device/bin/decode 128
step 60 target/device/bin/train_step 16
step 25 target/device/bin/minilm bf16 --profile
# wgpu through Vulkan, where build.sh packed its binaries (ONLY=...).
[ -x target/device/bin/wgpu_wgpu ] && ( . tools/gpu/vulkan.sh && step 120 target/device/bin/wgpu_wgpu 4096 64 )
if [ "${PEERS:-1}" != 0 ]; then
  step 30 python3 tools/gpu/attention.py
  step 20 python3 tools/gpu/minilm.py bf16
  step 60 python3 tools/gpu/train_step.py 16
  step 40 python3 tools/gpu/decode.py 128
  step 20 python3 tools/gpu/gemm.py 4096 4096 4096 f32
  step 20 python3 tools/gpu/gemm.py 4096 4096 4096 f16
fi
# A CPU result carried in target/device/onnx-cpu.json spares the CPU half; ONNX=0 skips them.
if [ -f target/device/onnx-cpu.json ]; then cp target/device/onnx-cpu.json "$out/onnx-cpu.json"; export ONNX_DEVICES=cuda; fi
[ "${ONNX:-1}" != 0 ] && step 450 bash tools/gpu/onnx.sh
tar czf "$out/logs.tgz" -C "$out" logs $(cd "$out" && ls onnx-*.txt 2>/dev/null) && rm -rf "$out/logs"
