#!/usr/bin/env bash
# Builds, on the CPU machine, everything the GPU machine runs (it has no Rust toolchain):
# the rlx-cuda and rlx-wgpu (named wgpu_*) test and bench binaries in the stripped `gpu`
# profile, in target/device/bins.tar.xz, which the device run carries (`carry:
# ["target/device"]`) and tools/gpu/check.sh runs there, with this machine's Vulkan loader
# (the GPU machine has NVIDIA's Vulkan driver but no loader).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf target/device/bin && mkdir -p target/device/bin
# Crate $1's test and bench binaries into target/device/bin, each named $2 + its target name.
binaries() {
  cargo build --profile gpu -p "$1" --tests --benches --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        shutil.copy(m["executable"], "target/device/bin/" + sys.argv[1] + m["target"]["name"])
' "$2"
}
binaries rlx-cuda ""
binaries rlx-wgpu wgpu_
mkdir -p target/device/lib
cp -L /usr/lib/x86_64-linux-gnu/libvulkan.so.1 target/device/lib/ 2>/dev/null \
  || echo "no Vulkan loader here (apt-get install libvulkan1): the wgpu binaries will skip there"
# The `rlx` command, for the user's paths with --device cuda.
cargo build --profile gpu -p rlx-cli --bin rlx
cp target/gpu/rlx target/device/bin/rlx
ls -la target/device/bin
# The ONNX node tests for tools/gpu/onnx.sh, where this checkout has them (tools/onnx/materialize.sh).
[ -d target/onnx/tests/node ] && tar cJf target/device/node.tar.xz -C target/onnx/tests node
# Compressed, as the binaries together pass the 64 MiB a device run may carry. Even so all
# of them and the checkout do (~57 + 14 MiB): by default the CUDA ones and `rlx` go, and
# ONLY="name ..." packs just the binaries it names (e.g. ONLY="wgpu_ops wgpu_models wgpu_wgpu").
packed=$(cd target/device && ls -d bin/* | grep -v '^bin/wgpu_')
[ -n "${ONLY:-}" ] && packed=$(printf 'bin/%s ' $ONLY)
tar cJf target/device/bins.tar.xz -C target/device $packed && rm -rf target/device/bin
du -sh target/device
