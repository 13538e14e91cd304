"""Tiny random GGUF models of each architecture rlx loads, converted by llama.cpp's own
converter, and llama.cpp's greedy continuations of them, for rlx's GGUF loader.

    pip download --no-binary :all: --no-deps llama-cpp-python   # the sdist: converter + gguf-py
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF" \\
        pip install ./llama_cpp_python-0.3.36          # llama.cpp itself, from the same sdist
        # (AVX-512 only where the CPU has it: an AVX-512 build dies with SIGILL on AVX2 machines)
    pip install torch transformers tokenizers safetensors sentencepiece numpy protobuf
    python tools/models/gguf_arch_fixtures.py --llama-cpp llama_cpp_python-0.3.36/vendor/llama.cpp
        # -> fixtures/models/gguf-tiny/<name>.gguf and <name>.json

Written with llama-cpp-python 0.3.36 (its vendored llama.cpp, convert_hf_to_gguf.py and gguf-py),
transformers 5.25.0, torch 2.15.0, tokenizers 0.23.3, sentencepiece 0.2.3, numpy 2.4.6 (Python 3.11),
built without AVX-512.

Each model is a transformers checkpoint with every weight redrawn (`hf_tiny_fixtures.randomize`),
saved with a tokenizer trained here, and converted by `convert_hf_to_gguf.py` exactly as a user
converts a download. Byte-level BPE folders use `hf_tiny_fixtures.tokenizer` (Llama-3 or Qwen2
split regex); as their merges are not a published model's, the converter cannot recognise the
pre-tokenizer by its hash, so `tokenizer.ggml.pre` is set to the name of the regex they were
trained with (`llama-bpe`, `qwen2`). SentencePiece folders hold a `tokenizer.model` trained with
`sentencepiece` (BPE with byte fallback), as Mistral, Phi-3 and Gemma ship.

- `mistral` (llama architecture): SentencePiece vocabulary, grouped-query attention, untied head;
  the converter permutes Q/K for llama.cpp's adjacent-pair rope.
- `qwen2`: byte-level BPE (`qwen2`), q/k/v biases, tied head, rope base 1e6.
- `qwen3`: QK-norm, head_dim 16 ≠ hidden/heads, linear rope scaling ×2 (`rope.scaling.*`).
- `gemma3`: SentencePiece without space prefix, 6 layers (llama.cpp's default pattern: 5
  sliding, the 6th global), window 4 < prompt, GeGLU, pre/post norms (the converter adds the 1),
  √d embedding scale, QK-norm, final logit softcap, global rope linear ×8, local base 10000.
- `phi3`: SentencePiece, fused `attn_qkv` and gate/up `ffn_up` halves.
- `qwen3moe`: 4 experts, 2 used, QK-norm, softmax routing renormalised over the chosen ones,
  in Q8_0 (the converter's `--outtype q8_0`): experts as ggml blocks.

The others are F32 (`--outtype f32`) so that both sides multiply exact weights.

llama.cpp runs each file on the CPU (one thread, F32 KV cache, flash attention off, batch of the
whole prompt): a prompt of 12 random ids, then 16 greedy steps, each the argmax of the last
row's logits. `<name>.json` holds the `prompt`, the `greedy` ids, per step the `top` 4
(id, logit) pairs (to tell a near-tie from a bug), and `tokens`: texts with the ids
`Llama.tokenize` gives (special tokens parsed, BOS as the vocabulary says), and `generate`:
the greedy continuation of "Hello world" (8 tokens or up to end-of-sequence) as ids and text,
which `rlx generate` must print.
"""
import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece as spm
import tokenizers
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_tiny_fixtures as hf  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures/models/gguf-tiny"
PROMPT_LEN = 12
GREEDY = 16
TOP = 4
SPM_VOCAB = 384
CLI_PROMPT = "Hello world"
CLI_TOKENS = 8

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog. It's 12:45!",
    "  leading spaces and trailing  \n\n",
    "naïve café — Ünïcödé",
    "def f(x):\n    return x**2  # comment\n",
]


def spm_tokenizer(folder, specials):
    """Trains a BPE SentencePiece model with byte fallback into folder/tokenizer.model."""
    sentences = [line for doc in hf.corpus() for line in doc.splitlines() if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_prefix=str(folder / "tokenizer"), vocab_size=SPM_VOCAB,
        model_type="bpe", byte_fallback=True, character_coverage=0.995, user_defined_symbols=specials,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2,
    )
    (folder / "tokenizer.vocab").unlink()


def bpe_tokenizer(folder, kind):
    tok, specials = hf.tokenizer(kind)
    tok.save(str(folder / "tokenizer.json"))
    return specials


def llama_base(**kw):
    return dict(vocab_size=hf.VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2) | kw


SPECS = {
    "mistral": dict(
        tok="spm", pre=None, outtype="f32",
        config=lambda: transformers.LlamaConfig(**llama_base(vocab_size=SPM_VOCAB, tie_word_embeddings=False,
                                                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    ),
    "qwen2": dict(
        tok="qwen", pre="qwen2", outtype="f32",
        config=lambda: transformers.Qwen2Config(**llama_base(rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=0,
                                                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    ),
    "qwen3": dict(
        tok="qwen", pre="qwen2", outtype="f32",
        config=lambda: transformers.Qwen3Config(**llama_base(head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=0,
                                                             rope_parameters={"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0})),
    ),
    "gemma3": dict(
        tok="spm-gemma", pre=None, outtype="f32",
        config=lambda: transformers.Gemma3TextConfig(
            vocab_size=SPM_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=6, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=128, rms_norm_eps=1e-6,
            sliding_window=4, attn_logit_softcapping=None, final_logit_softcapping=15.0, bos_token_id=1, eos_token_id=2,
            pad_token_id=0,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        ),
    ),
    "phi3": dict(
        tok="spm", pre=None, outtype="f32",
        config=lambda: transformers.Phi3Config(**llama_base(vocab_size=SPM_VOCAB, tie_word_embeddings=False, pad_token_id=0,
                                                            original_max_position_embeddings=128, rope_theta=10000.0)),
    ),
    "qwen3moe": dict(
        tok="qwen", pre="qwen2", outtype="q8_0",
        config=lambda: transformers.Qwen3MoeConfig(**llama_base(
            head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=0, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[],
            norm_topk_prob=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    ),
}


def convert(llama_cpp, folder, out, outtype, pre):
    """Runs llama.cpp's convert_hf_to_gguf.py on `folder` in this process, naming the BPE
    pre-tokenizer `pre` (the merges here are not a published model's)."""
    sys.path.insert(0, str(llama_cpp))
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import convert_hf_to_gguf
    from conversion import base

    if pre is not None:
        base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
    sys.argv = ["convert_hf_to_gguf.py", str(folder), "--outfile", str(out), "--outtype", outtype]
    convert_hf_to_gguf.main()


def reference(path, seed):
    """llama.cpp's greedy continuation of a random prompt, its top logits, and tokenizations."""
    import llama_cpp

    llm = llama_cpp.Llama(str(path), n_ctx=64, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, flash_attn=False,
                          swa_full=True, logits_all=True, seed=seed, verbose=False)
    rng = random.Random(seed)
    vocab = llm.n_vocab()
    prompt = [rng.randrange(vocab) for _ in range(PROMPT_LEN)]
    llm.eval(prompt)
    greedy, top = [], []
    for _ in range(GREEDY):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        assert np.abs(row).max() > 0, "llama.cpp returned no logits"
        order = np.argsort(-row, kind="stable")[:TOP]
        top.append([[int(i), float(f"{row[i]:.7g}")] for i in order])
        greedy.append(int(order[0]))
        llm.eval([greedy[-1]])
    tokens = [{"text": t, "ids": llm.tokenize(t.encode(), add_bos=True, special=True)} for t in TEXTS]
    return {"prompt": prompt, "greedy": greedy, "top": top, "tokens": tokens, "generate": generate(llm)}


def generate(llm):
    """What `rlx generate --prompt CLI_PROMPT -n CLI_TOKENS` must print after the prompt:
    llama.cpp's greedy tokens up to and including the end-of-sequence token, as text (control
    tokens left out)."""
    llm.reset()
    llm.eval(llm.tokenize(CLI_PROMPT.encode(), add_bos=True, special=True))
    out = []
    for _ in range(CLI_TOKENS):
        token = int(np.argmax(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)))
        out.append(token)
        if token == llm.token_eos():
            break
        llm.eval([token])
    return {"prompt": CLI_PROMPT, "n": CLI_TOKENS, "ids": out, "text": llm.detokenize(out).decode("utf-8", "replace")}


def build(llama_cpp, name, spec, seed):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gen = torch.Generator().manual_seed(seed)
        config = spec["config"]()
        model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
        hf.randomize(model, name.startswith("gemma"), gen)
        model.save_pretrained(folder)
        if spec["tok"].startswith("spm"):
            specials = ["<start_of_turn>", "<end_of_turn>"] if spec["tok"] == "spm-gemma" else ["<|user|>", "<|end|>"]
            spm_tokenizer(folder, specials)
        else:
            specials = bpe_tokenizer(folder, spec["tok"])
        (folder / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "LlamaTokenizer" if spec["tok"].startswith("spm") else "PreTrainedTokenizerFast",
            "add_bos_token": spec["tok"].startswith("spm"),
        }))
        out = OUT / f"{name}.gguf"
        convert(llama_cpp, folder, out, spec["outtype"], spec["pre"])
    ref = reference(out, seed)
    import llama_cpp as lc
    ref["versions"] = {"llama-cpp-python": lc.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                       "tokenizers": tokenizers.__version__, "sentencepiece": spm.__version__}
    ref["outtype"] = spec["outtype"]
    (OUT / f"{name}.json").write_text(json.dumps(ref, ensure_ascii=False) + "\n")
    margins = [t[0][1] - t[1][1] for t in ref["top"]]
    print(f"{name}: {out.stat().st_size // 1024} KiB, greedy {ref['greedy']}, smallest top-2 margin {min(margins):.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source (vendor/llama.cpp of the sdist)")
    ap.add_argument("names", nargs="*", help="which models (all when none)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for i, (name, spec) in enumerate(SPECS.items()):
        if not args.names or name in args.names:
            build(args.llama_cpp.resolve(), name, spec, seed=4321 + i)


if __name__ == "__main__":
    main()
