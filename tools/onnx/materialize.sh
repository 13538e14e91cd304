#!/usr/bin/env bash
# Writes the ONNX backend node tests (onnx 1.23.2) under target/onnx/tests/node, in a venv under
# target/onnx/venv (or with $ONNX_PYTHON); prints the python it used. Read by conformance.sh and
# by cargo test's host-fallback test (crates/rlx-io/tests/onnx_fallback.rs). Needs PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=target/onnx
mkdir -p "$work"
python=${ONNX_PYTHON:-}
if [ -z "$python" ]; then
    [ -x "$work/venv/bin/python" ] || python3 -m venv "$work/venv"
    "$work/venv/bin/pip" install --quiet onnx==1.23.2 numpy
    python=$work/venv/bin/python
fi
"$python" tools/onnx/onnx_materialize_tests.py --out "$work/tests" > /dev/null
echo "$python"
