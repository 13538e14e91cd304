#!/usr/bin/env bash
# Per-kernel device times by Nsight Compute on the GPU machine (after tools/gpu/build.sh
# here): `bash tools/gpu/ncu.sh NAME COUNT -- BINARY ARGS...` profiles the first COUNT kernel
# launches of the command (graph nodes one by one), writes $OUT/NAME.csv and prints the
# kernels summed by name and launch shape (tools/gpu/ncu_sum.py). Clocks are left alone.
set -uo pipefail
cd "$(dirname "$0")/../.."
name=$1 count=$2; shift 3
out=${OUT:-target/device}
[ -d target/device/bin ] || tar xJf target/device/bins.tar.xz -C target/device
ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count "$count" "$@" \
  > "$out/$name.csv" 2> "$out/$name.err"
echo "ncu rc=$? ($name: $(grep -c '"gpu__time_duration.sum"' "$out/$name.csv") kernels)"
python3 tools/gpu/ncu_sum.py "$out/$name.csv"
