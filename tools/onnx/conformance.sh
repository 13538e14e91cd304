#!/usr/bin/env bash
# ONNX backend node tests (onnx 1.23.2) through `rlx onnx-run`; fails when fewer pass than the
# count in tools/onnx/floor.txt. Needs python3 with venv and network access to PyPI.
#
#   bash tools/onnx/conformance.sh            # venv and tests under target/onnx/, release build
#   ONNX_PYTHON=/path/to/venv/bin/python bash tools/onnx/conformance.sh
#   RLX_ONNX_PROFILE=test bash tools/onnx/conformance.sh   # reuse `cargo test`'s build (CI)
set -euo pipefail
cd "$(dirname "$0")/../.."
work=target/onnx
python=$(bash tools/onnx/materialize.sh)
profile=${RLX_ONNX_PROFILE:-release}
cargo build --profile "$profile" -p rlx-cli --bin rlx
case $profile in release) bin=target/release/rlx ;; *) bin=target/debug/rlx ;; esac
"$python" tools/onnx/onnx_conformance.py --data "$work/tests/node" --jobs "${ONNX_JOBS:-2}" --quiet \
    --timeout 60 --json "$work/results.json" \
    --executor "cmd:$bin onnx-run {model} --inputs {inputs_npy} --out {out}" \
    --exit-zero | tee "$work/report.txt" | tail -n 3
passed=$(tail -n 1 "$work/report.txt" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
floor=$(tr -dc '0-9' < tools/onnx/floor.txt)
echo "ONNX conformance: $passed passed, floor $floor"
[ -n "$passed" ] && [ "$passed" -ge "$floor" ]
