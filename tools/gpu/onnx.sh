#!/usr/bin/env bash
# The ONNX backend node tests on the GPU machine through `rlx onnx-run --device cuda`, beside
# the same tests on its CPU: fails when a test that passes on the CPU fails on CUDA and is not
# in tools/gpu/onnx_cuda_known.txt (the documented list, one test name and why per line).
# Needs target/device/node.tar.xz (tools/gpu/build.sh packs target/onnx/tests/node).
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -d target/device/bin ] || tar xJf target/device/bins.tar.xz -C target/device
[ -d target/device/node ] || tar xJf target/device/node.tar.xz -C target/device
out=${OUT:-target/device}
# ONNX_DEVICES=cuda reuses a CPU result already at $out/onnx-cpu.json.
for device in ${ONNX_DEVICES:-cpu cuda}; do
  python3 tools/onnx/onnx_conformance.py --data target/device/node --jobs "${ONNX_JOBS:-16}" --timeout 120 \
    --json "$out/onnx-$device.json" --exit-zero \
    --executor "cmd:target/device/bin/rlx onnx-run {model} --inputs {inputs_npy} --out {out} --device $device" \
    > "$out/onnx-$device.txt" 2>&1
  echo "onnx node tests, $device: $(tail -n 1 "$out/onnx-$device.txt")"
done
python3 - "$out/onnx-cpu.json" "$out/onnx-cuda.json" tools/gpu/onnx_cuda_known.txt <<'PY'
import json, sys
cpu, cuda = ({r["name"]: r for r in json.load(open(p))["results"]} for p in sys.argv[1:3])
known = {line.split()[0] for line in open(sys.argv[3]) if line.strip() and not line.startswith("#")}
lost = sorted(n for n, r in cpu.items() if r["status"] == "PASS" and cuda.get(n, {}).get("status") != "PASS")
gained = sorted(n for n, r in cuda.items() if r["status"] == "PASS" and cpu.get(n, {}).get("status") != "PASS")
new = [n for n in lost if n not in known]
print(f"passing on the CPU but not on CUDA: {len(lost)} ({len(lost) - len(new)} documented); on CUDA only: {len(gained)}")
for n in new:
    print(f"  {n}: {cuda.get(n, {}).get('status')} {cuda.get(n, {}).get('message', '')[:200]}")
sys.exit(1 if new else 0)
PY
