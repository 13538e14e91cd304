#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` from the llama-cpp-python source distribution (its
# vendor/llama.cpp), for the side-by-side figures of tools/serve/load_test.py. Nothing it
# fetches or builds belongs in the repository: it works under DIR (default target/llamacpp).
#
#     bash tools/serve/llama_server.sh [DIR]     # prints the server's path
#
# AVX2/FMA/F16C without -march=native, so the binary runs on any x86-64 machine that has them;
# LLAMA_ISA=avx512 adds AVX-512 (F, BW, VL, DQ) and VNNI for CPUs that have them, AMX left off.
set -euo pipefail
dir=${1:-target/llamacpp}
mkdir -p "$dir"
cd "$dir"
if [ ! -x venv/bin/cmake ]; then
    python3 -m venv venv
    venv/bin/pip install -q cmake scikit-build-core
fi
if ! ls -d llama_cpp_python-*/ >/dev/null 2>&1; then
    # No build isolation: pip would otherwise build cmake from source just to read metadata.
    venv/bin/pip download -q --no-binary :all: --no-deps --no-build-isolation llama-cpp-python
    tar xzf llama_cpp_python-*.tar.gz
fi
src=$(ls -d llama_cpp_python-*/vendor/llama.cpp | head -n1)
isa=()
if [ "${LLAMA_ISA:-avx2}" = avx512 ]; then
    isa=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=OFF
        -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
venv/bin/cmake -S "$src" -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON "${isa[@]}" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
venv/bin/cmake --build build --target llama-server -j "${JOBS:-1}" >/dev/null
echo "$PWD/build/bin/llama-server"
