#!/usr/bin/env bash
# Runs on the GPU machine every binary tools/gpu/build.sh left in target/device/bin (the CUDA
# and wgpu tests against the CPU backend) and prints one line per binary; exits non-zero if
# any fails. The wgpu ones reach the GPU through NVIDIA's Vulkan driver and the loader
# build.sh carried.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/gpu/vulkan.sh
[ -d target/device/bin ] || tar xJf target/device/bins.tar.xz -C target/device
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
# Every test binary at once (each its own context on the one GPU, its tests one at a time):
# their CPU references and kernel builds overlap instead of queueing.
names=()
# Runs test binary $2.. as $1 in the background, its log and exit status under target/device.
run() {
  local name=$1; shift
  names+=("$name")
  ( start=$(date +%s%N)
    "$@" --test-threads=1 > "target/device/$name.log" 2>&1
    echo "$? $(( ($(date +%s%N) - start) / 1000000 ))" > "target/device/$name.rc" ) &
}
trap 'kill $(jobs -p) 2> /dev/null; exit 124' TERM INT
for bin in target/device/bin/*; do
  # The benches run from bench.sh, the command below; the NVRTC and naga checks need no GPU
  # (CI runs them).
  case "$(basename "$bin")" in gemm | sdpa | minilm | decode | train_step | nvrtc | rlx | wgpu_wgpu | wgpu_naga) continue ;; esac
  run "$(basename "$bin")" "$bin"
done
# rlx's own attention kernels, which cuDNN's fused attention replaces where it takes a shape.
[ -x target/device/bin/attention ] && run attention_own env RLX_CUDNN=0 target/device/bin/attention
wait
for name in "${names[@]}"; do
  read -r rc ms < "target/device/$name.rc"
  if [ "$rc" = 0 ]; then result=pass; else result=FAIL; status=1; fi
  summary=$(grep -E "^test result" "target/device/$name.log" | tail -1)
  printf '%-10s %-6s %7d ms  %s\n' "$name" "$result" "$ms" "$summary"
  [ "$result" = FAIL ] && grep -A1 "panicked" "target/device/$name.log" | grep -v "^--" | head -30
  grep -E "^skipped" "target/device/$name.log" | sort | uniq -c
done
# The user's path: `rlx demo` trains the character GPT on the GPU (what CUDA does not run yet
# goes to the CPU); its held-out loss should fall as on the CPU.
start=$(date +%s%N)
if target/device/bin/rlx demo --device cuda --steps 60 --out target/device/demo > target/device/demo.log 2>&1; then result=pass; else result=FAIL; status=1; fi
printf '%-10s %-6s %7d ms  %s\n' "rlx demo" "$result" $(( ($(date +%s%N) - start) / 1000000 )) "$(grep -iE "loss" target/device/demo.log | tail -1)"
exit $status
