"""SentencePiece-style (byte-fallback) BPE tokenizer.json files and the `tokenizers` package's
encodings and decodings with them, for rlx's `BpeTokenizer::from_tokenizer_json`.

    /work/.anchors/venv/bin/python tools/models/spm_tokenizer_fixtures.py
        # -> crates/rlx-models/tests/data/spm_<name>.json (tokenizer) and spm_<name>_cases.json,
        #    spm_<name>.gguf and spm_<name>_gguf_cases.json (llama, gemma)

Written with tokenizers 0.23.3, gguf 0.19.0 and llama-cpp-python 0.3.36 (Python 3.11). Each
tokenizer is trained here on the corpus
below (no download), then given the 256 byte tokens `<0x00>`…`<0xFF>` at ids 3–258 as
SentencePiece vocabularies have them, and the pipeline of one family of real checkpoints:

- `llama2`: Llama 2 / TinyLlama / Mistral as converted with `legacy=True`: normalizer
  Sequence[Prepend "▁", Replace " " → "▁"], no pre-tokenizer, decoder Sequence[Replace "▁" → " ",
  ByteFallback, Fuse, Strip(" ", 1, 0)], `<s> $A` template, unk `<unk>` with fuse_unk;
- `metaspace`: the same converted with `legacy=False` (transformers 5's LlamaTokenizer): no
  normalizer, Metaspace pre-tokenizer (prepend_scheme "first", split false), the same decoder;
- `metaspace_split`: Metaspace (prepend_scheme "always", split true) with a Sequence[ByteFallback,
  Metaspace] decoder and `ignore_merges`;
- `gemma`: Gemma / Gemma 3: normalizer Replace " " → "▁", pre-tokenizer Split(" ",
  MergedWithPrevious), decoder Sequence[Replace, ByteFallback, Fuse], `<bos> $A`, special
  `<start_of_turn>` / `<end_of_turn>` and a non-special added token `<tool>`; its merges were
  learnt across spaces (whole lines are words), so long words exercise the merge order.

Each vocabulary keeps only the 60 commonest characters of the corpus, so accents, CJK and emoji
mostly take the byte fallback. The cases file holds, per text, the ids of `encode` (special tokens
added by the post-processor) with added special tokens matched (`parse_special`) and with
`encode_special_tokens` set (not matched), and `decode` of those ids with and without
`skip_special_tokens`; plus `decode` of id lists chosen to hit the decoders' edges (lone and
invalid byte runs, leading "▁"s, special tokens first).

The llama2 and gemma vocabularies are also written as vocab-only GGUF files with
`tokenizer.ggml.model = "llama"` (SentencePiece as llama.cpp runs it: merges chosen by
`tokenizer.ggml.scores`, here minus the learnt order in steps of three so that ties occur; `<unk>`
of type unknown, the others special of type control, `<tool>` user-defined, byte tokens of type
byte; gemma without `add_space_prefix`), with llama.cpp's ids of every text (BOS added, special
tokens parsed and not).
"""
import collections
import json
import random
from pathlib import Path

import gguf
import llama_cpp
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/rlx-models/tests/data"
LEARNED = 340
ALPHABET = 60
BYTES = [f"<0x{b:02X}>" for b in range(256)]

CORPUS = """\
The quick brown fox jumps over the lazy dog. The dog did not mind; it was asleep in the sun.
Once upon a time there was a tokenizer that split every word into pieces, and the pieces into bytes.
It is 12:45 on 2024-03-01 and the train leaves at 13:07 from platform 9, costing $3,141.59 in total.
She said: "Don't worry, we'll be there by seven." He replied, 'I'm not so sure about that.'
In the beginning the model reads the prompt; then it writes one token at a time until it stops.
Numbers like 0, 1, 42, 100, 2048 and 65536 appear in code and in prose alike.
Café, naïve, résumé, façade, jalapeño, Übermensch, smörgåsbord, crème brûlée: accents everywhere.
Les élèves étudient à l'école; el niño está en la playa; die Straße ist lang.
日本語のテキストを少し書きます。中文也有一些。한국어도 조금 있습니다.
Emoji appear too: 🙂 👍 🦀 🚀 and sometimes 👩‍💻 with joiners.
def tokenize(text):
    words = text.split(" ")
    return [w for w in words if w]  # keep non-empty words

for i in range(10):
    print(i * i, end="\\t")
if (x > 0 && y < 10) { return x + y; } else { return -1; }
    Indented lines    with   several   spaces   between   words.
Tabs\tseparate\tthese\tcolumns\tand\tthat\tis\tfine.
Line one
Line two

Line four after an empty line.
the the the of of and and to to in in is is that that it it for for on on with with as as
tokenizers split text, merge pairs, and map pieces to ids; decoders map ids back to text.
"""


def train(normalizer, pre_tokenizer):
    """A BPE vocabulary and merges learnt on CORPUS through `normalizer` and `pre_tokenizer`."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    counts = collections.Counter(CORPUS.replace(" ", "▁"))
    alphabet = sorted(counts, key=lambda c: (-counts[c], c))[:ALPHABET]
    trainer = trainers.BpeTrainer(vocab_size=LEARNED, initial_alphabet=alphabet, limit_alphabet=ALPHABET, show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines(keepends=True) * 2, trainer)
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], model["merges"]


def spm(specials, vocab, merges, ignore_merges=False):
    """A byte-fallback BPE model: `specials`, the byte tokens, then the learnt vocabulary."""
    tokens = specials + BYTES + sorted((t for t in vocab if t not in specials and t not in BYTES), key=vocab.get)
    ids = {t: i for i, t in enumerate(tokens)}
    return models.BPE(
        vocab=ids, merges=[tuple(m) for m in merges], unk_token="<unk>", fuse_unk=True, byte_fallback=True,
        ignore_merges=ignore_merges,
    )


def llama_decoder(strip=True):
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    return decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if strip else []))


def bos_template(tok, bos):
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )


def build(name):
    metaspace_words = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    specials = ["<unk>", "<s>", "</s>"]
    if name == "llama2":
        normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        vocab, merges = train(normalizer, metaspace_words)
        tok = Tokenizer(spm(specials, vocab, merges))
        tok.normalizer = normalizer
        tok.decoder = llama_decoder()
    elif name == "metaspace":
        vocab, merges = train(None, metaspace_words)
        tok = Tokenizer(spm(specials, vocab, merges))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = llama_decoder()
    elif name == "metaspace_split":
        vocab, merges = train(None, metaspace_words)
        tok = Tokenizer(spm(specials, vocab, merges, ignore_merges=True))
        tok.pre_tokenizer = metaspace_words
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)])
    else:
        specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
        normalizer = normalizers.Replace(" ", "▁")
        split = pre_tokenizers.Split(" ", "merged_with_previous", invert=False)
        vocab, merges = train(normalizer, split)
        model = spm(specials, vocab, merges)
        tok = Tokenizer(model)
        tok.normalizer = normalizer
        tok.pre_tokenizer = split
        tok.decoder = llama_decoder(strip=False)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if name == "gemma":
        tok.add_special_tokens(["<start_of_turn>", "<end_of_turn>"])
        tok.add_tokens([AddedToken("<tool>", special=False, normalized=True)])
        bos_template(tok, "<bos>")
    elif name != "metaspace_split":
        bos_template(tok, "<s>")
    return tok


TEXTS = [
    "",
    " ",
    "   ",
    "a",
    "Hello world",
    "Hello  world,   how are you?\n",
    " leading space",
    "   three leading spaces and two trailing  ",
    "The quick brown fox jumps over the lazy dog.",
    "the tokenizer splits the text into the pieces",
    "naïve café résumé façade — “quotes” ‘single’ Ærøskøbing",
    "decomposed: cafe\u0301 and A\u030a stay as written",
    "日本語のテキストと中文文本，还有한국어。",
    "emoji 🦀🚀 mixed with ZWJ 👩‍💻 and flags 🇫🇷 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "def f(x):\n    return x**2 + 10_000 // 7  # comment\n",
    "tabs\tand\r\ncarriage returns\u00a0nbsp\u2003em space",
    "1234567890 3.14159 1e-9 0x1F",
    "\n\n\nnewlines first\n\n",
    "▁already▁has▁metaspace ▁ and ▁▁ doubled",
    "<s>Hello</s> world<s>",
    "<unk> is the unknown token",
    "{start}user\nWhat is 2+2?{end}\n{start}model\n4{end}",
    "call <tool> now<tool>",
    "text{start}",
    "\u0000 nul and \u007f del and \u00ad soft hyphen",
]


def id_cases(tok, rng):
    """Id lists whose decoding hits the decoders' edges, and a few random ones."""
    t = tok.token_to_id
    lists = [
        [t("<0xE6>"), t("<0x97>"), t("<0xA5>")],
        [t("<0xE6>"), t("<0x97>")],
        [t("<0x41>"), t("<0xFF>"), t("<0x42>")],
        [t("▁"), t("▁"), t("<0x0A>"), t("▁")],
        [t("<0x20>"), t("<0x20>")],
        [1, t("▁")],
        [2, 1],
        [],
    ]
    size = tok.get_vocab_size()
    lists += [[rng.randrange(size) for _ in range(rng.randrange(1, 12))] for _ in range(30)]
    return [[i for i in ids if i is not None] for ids in lists]


def cases(name, tok):
    start, end = ("<start_of_turn>", "<end_of_turn>") if name == "gemma" else ("<s>", "</s>")
    out = []
    for text in (t.format(start=start, end=end) for t in TEXTS):
        case = {"text": text}
        for key, split_special in [("special", False), ("plain", True)]:
            tok.encode_special_tokens = split_special
            ids = tok.encode(text).ids
            case[key] = {
                "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip": tok.decode(ids, skip_special_tokens=True),
            }
        tok.encode_special_tokens = False
        out.append(case)
    decodes = [
        {"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False), "decoded_skip": tok.decode(ids, skip_special_tokens=True)}
        for ids in id_cases(tok, random.Random(name))
    ]
    return {"tokenizers": tokenizers.__version__, "texts": out, "decodes": decodes}


def write_gguf(name, tok):
    """`tok`'s vocabulary as a vocab-only SentencePiece GGUF; returns its path."""
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.get)
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    first_learned = 4 + len(BYTES) if name == "gemma" else 3 + len(BYTES)
    types, scores = [], []
    for i, t in enumerate(tokens):
        kind = gguf.TokenType.NORMAL
        if t == "<unk>":
            kind = gguf.TokenType.UNKNOWN
        elif t in special:
            kind = gguf.TokenType.CONTROL
        elif t == "<tool>":
            kind = gguf.TokenType.USER_DEFINED
        elif t in BYTES:
            kind = gguf.TokenType.BYTE
        types.append(kind)
        scores.append(0.0 if i < first_learned else -float((i - first_learned) // 3))
    path = OUT / f"spm_{name}.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(vocab["<bos>" if name == "gemma" else "<s>"])
    w.add_eos_token_id(vocab["<eos>" if name == "gemma" else "</s>"])
    w.add_add_space_prefix(name != "gemma")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_cases(name, path):
    """llama.cpp's ids of every text, BOS added, with special tokens parsed and not."""
    model = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    start, end = ("<start_of_turn>", "<end_of_turn>") if name == "gemma" else ("<s>", "</s>")
    texts = [t.format(start=start, end=end) for t in TEXTS] + ["<tool> and <unk>"]
    out = [
        {"text": t, "special": model.tokenize(t.encode(), add_bos=True, special=True), "plain": model.tokenize(t.encode(), add_bos=True, special=False)}
        for t in texts
    ]
    return {"llama_cpp": llama_cpp.__version__, "texts": out}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name in ["llama2", "metaspace", "metaspace_split", "gemma"]:
        tok = build(name)
        tok.save(str(OUT / f"spm_{name}.json"))
        (OUT / f"spm_{name}_cases.json").write_text(json.dumps(cases(name, tok), ensure_ascii=False, indent=1) + "\n")
        print(name, tok.get_vocab_size(), "tokens")
        if name in ("llama2", "gemma"):
            if name == "llama2":
                tok.add_tokens([AddedToken("<tool>", special=False, normalized=False)])
            path = write_gguf(name, tok)
            (OUT / f"spm_{name}_gguf_cases.json").write_text(json.dumps(gguf_cases(name, path), ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
