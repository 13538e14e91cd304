#!/usr/bin/env bash
# Builds, on the CPU machine, everything the GPU machine runs (it has no Rust toolchain):
# the rlx-cuda test and bench binaries in the stripped `gpu` profile, in target/device/bins.tar.xz, which
# the device run carries (`carry: ["target/device"]`) and tools/gpu/check.sh runs there.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf target/device/bin && mkdir -p target/device/bin
cargo build --profile gpu -p rlx-cuda --tests --benches --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        shutil.copy(m["executable"], "target/device/bin/" + m["target"]["name"])
'
# The `rlx` command, for the user's paths with --device cuda.
cargo build --profile gpu -p rlx-cli --bin rlx
cp target/gpu/rlx target/device/bin/rlx
ls -la target/device/bin
# The ONNX node tests for tools/gpu/onnx.sh, where this checkout has them (tools/onnx/materialize.sh).
[ -d target/onnx/tests/node ] && tar cJf target/device/node.tar.xz -C target/onnx/tests node
# Compressed, as the binaries together pass the 64 MiB a device run may carry.
tar cJf target/device/bins.tar.xz -C target/device bin && rm -rf target/device/bin
du -sh target/device
