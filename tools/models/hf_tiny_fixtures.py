"""Tiny random-weight Hugging Face checkpoints and their reference outputs, for rlx's HF loader.

    python tools/models/hf_tiny_fixtures.py      # -> fixtures/models/hf-tiny/<name>/

Each folder is a checkpoint as `save_pretrained` writes it (config.json, model.safetensors) plus a
byte-level BPE tokenizer.json trained here with the `tokenizers` package, and `reference.json`:

- `prompt` (12 token ids), `logits` (`[12, vocab]`, every prompt row), `greedy` (8 tokens, argmax
  of a full forward pass each step, no KV cache), and `final_logits` (last row after prompt and
  7 greedy tokens), all from transformers in float32 with eager attention, after reloading the
  saved folder;
- `tokens`: texts with the ids `tokenizers` gives them (`encode`, special tokens added by the
  post-processor) and its decoding of those ids (special tokens kept).

The models differ in what rlx must configure: `llama` (bf16, rope_scaling llama3 written in the
legacy `rope_theta`/`rope_scaling` form, attention and MLP biases, untied head), `qwen2` (f16,
q/k/v biases, YaRN, tied), `qwen3` (f32, QK-norm, head_dim ≠ hidden/heads, linear scaling),
`gemma3_text` (bf16, GeGLU, (1+w) norms, pre/post norms, embedding scale, query_pre_attn_scalar,
final logit softcap, sliding window 4 < sequence, local rope base; `attn_logit_softcapping` is
set too, and transformers' Gemma3 does not apply it). Weights are redrawn larger than
the initialisers' (so norms, biases and softcaps all matter) and rounded to the stored dtype
before the reference runs. The tokenizers: Llama-3 split regex + `ignore_merges` + BOS template
(llama), NFC + Qwen2 regex (qwen2, qwen3), individual digits + GPT-2 byte-level regex (gemma3's
folder; Gemma's own SentencePiece-style tokenizer is tested by spm_tokenizer_fixtures.py).
"""
import inspect
import json
import random
import shutil
from pathlib import Path

import safetensors
import tokenizers
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures/models/hf-tiny"
VOCAB = 512
PROMPT_LEN = 12
GREEDY = 8

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TEXTS = [
    "Hello world",
    "Hello  world,   how are you?\n",
    "The quick brown fox jumps over the lazy dog. It's 12:45 and I'd've paid $3,141.59!",
    "  leading spaces and trailing  \t\n\n",
    "naïve café résumé — Ünïcödé “quotes” ‘single’",
    "decomposed: cafe\u0301 and A\u030a (NFC composes them)",
    "日本語のテキストと中文文本，还有한국어。",
    "emoji 🦀🚀 mixed with ZWJ 👩‍💻 and flags 🇫🇷",
    "def f(x):\n    return x**2 + 10_000 // 7  # comment\n",
    "don't won't I'M WE'LL they're you've she's 'quoted'",
    "tabs\tand\r\ncarriage returns\u00a0nbsp",
    "1234567890 3.14159 1e-9 0x1F",
    "{special} user\nWhat is 2+2?{end} and <tool> calls\n",
    " ",
    "a",
]


def corpus():
    """Deterministic English and code to train merges on: docstrings of stdlib modules."""
    import collections, functools, itertools, json as j, pathlib, re, textwrap
    mods = [collections, functools, itertools, j, pathlib, re, textwrap, inspect, random]
    out = []
    for m in mods:
        for _, obj in inspect.getmembers(m):
            doc = inspect.getdoc(obj)
            if doc:
                out.append(doc)
    return out + TEXTS * 3


def tokenizer(kind):
    if kind == "llama":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    elif kind == "qwen":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 8, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.add_tokens(["<tool>"])
    if kind == "llama":
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    assert tok.get_vocab_size() <= VOCAB
    return tok, specials


def token_cases(tok, specials):
    cases = []
    for t in TEXTS:
        text = t.format(special=specials[1], end=specials[2])
        ids = tok.encode(text).ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return cases


def randomize(model, gemma, gen):
    """Every parameter redrawn: matrices N(0, 0.2²), norm gains around 1 (Gemma: offsets around
    0), biases N(0, 0.1²), embeddings N(0, 0.5²) (Gemma N(0, 0.1²): the model scales them by √64)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(0.2 * noise if gemma else 1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_((0.1 if gemma else 0.5) * noise)
            else:
                p.copy_(0.2 * noise)


SPECS = {
    "llama": dict(
        tok="llama", dtype=torch.bfloat16,
        config=transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
            attention_bias=True, mlp_bias=True, bos_token_id=0, eos_token_id=1,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        ),
    ),
    "qwen2": dict(
        tok="qwen", dtype=torch.float16,
        config=transformers.Qwen2Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=True,
            bos_token_id=0, eos_token_id=2,
            rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                             "original_max_position_embeddings": 32},
        ),
    ),
    "qwen3": dict(
        tok="qwen", dtype=torch.float32,
        config=transformers.Qwen3Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=24, max_position_embeddings=128, rms_norm_eps=1e-6,
            tie_word_embeddings=True, bos_token_id=0, eos_token_id=2,
            rope_parameters={"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0},
        ),
    ),
    "gemma3_text": dict(
        tok="gpt2", dtype=torch.bfloat16,
        config=transformers.Gemma3TextConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=24, max_position_embeddings=128,
            rms_norm_eps=1e-6, sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            attn_logit_softcapping=2.0, final_logit_softcapping=15.0, bos_token_id=0, eos_token_id=2, pad_token_id=1,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        ),
    ),
}


def legacy_rope(folder):
    """Rewrites config.json's `rope_parameters` as the `rope_theta` + `rope_scaling` most
    published checkpoints carry."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def build(name, spec, seed):
    folder = OUT / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)
    config = spec["config"]
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    randomize(model, name.startswith("gemma"), gen)
    model.to(spec["dtype"]).save_pretrained(folder)
    if name == "llama":
        legacy_rope(folder)
    tok, specials = tokenizer(spec["tok"])
    tok.save(str(folder / "tokenizer.json"))

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    rng = random.Random(seed)
    prompt = [rng.randrange(VOCAB) for _ in range(PROMPT_LEN)]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0]
        seq = list(prompt)
        greedy = []
        for _ in range(GREEDY):
            last = model(torch.tensor([seq])).logits[0, -1]
            greedy.append(int(torch.argmax(last)))
            seq.append(greedy[-1])
        final = model(torch.tensor([seq[:-1]])).logits[0, -1]
    ref = {
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__, "tokenizers": tokenizers.__version__},
        "prompt": prompt,
        "logits": [[float(f"{v:.7g}") for v in row] for row in logits.tolist()],
        "greedy": greedy,
        "final_logits": [float(f"{v:.7g}") for v in final.tolist()],
        "tokens": token_cases(tok, specials),
    }
    (folder / "reference.json").write_text(json.dumps(ref, ensure_ascii=False) + "\n")
    size = sum(f.stat().st_size for f in folder.iterdir())
    print(f"{name}: {size // 1024} KiB, logits max |x| {logits.abs().max():.3f}, greedy {greedy}")


def main():
    for i, (name, spec) in enumerate(SPECS.items()):
        build(name, spec, seed=1234 + i)


if __name__ == "__main__":
    main()
