#!/usr/bin/env bash
# Runs one fuzz target for SECONDS (default 600) on one core, from its working corpus
# (fuzz/target/corpus/TARGET, seeded from fuzz/seeds/TARGET; the ONNX target also from the
# ONNX backend node tests that tools/onnx/materialize.sh writes). Crashes, timeouts and
# out-of-memory inputs land in fuzz/artifacts/TARGET; the run goes on past them.
#
#     bash fuzz/run.sh TARGET [SECONDS]
set -euo pipefail
cd "$(dirname "$0")"
target=$1
seconds=${2:-600}
corpus=target/corpus/$target
mkdir -p "$corpus"
cp -n seeds/"$target"/* "$corpus"/ 2>/dev/null || true
if [ "$target" = onnx ] && [ -d ../target/onnx/tests/node ]; then
    for m in ../target/onnx/tests/node/*/model.onnx; do
        n=$corpus/node_$(basename "$(dirname "$m")")
        [ -e "$n" ] || cp "$m" "$n"
    done
fi
case $target in
    onnx|safetensors|gguf|gguf_tokenizer) max_len=65536 ;;
    tokenizer_json) max_len=131072 ;;
    *) max_len=16384 ;;
esac
# Built by cargo fuzz, run directly: after a finding `cargo fuzz run` rebuilds the target with
# other flags only to print the input.
cargo +nightly fuzz build -s none -a -O "$target"
mkdir -p "artifacts/$target"
export TMPDIR=/dev/shm
"target/x86_64-unknown-linux-gnu/release/$target" "$corpus" \
    -max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb=3072 -malloc_limit_mb=512 -timeout=20 \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -print_final_stats=1 \
    -artifact_prefix="artifacts/$target/"
