"""The official `openai` client against `rlx serve` on tiny random models (CI, about a minute).

Usage: python3 tools/serve/openai_test.py PATH/TO/rlx

Serves the repo's tiny random Llama (fixtures/models/hf-tiny/llama, given a chat template
here) and a tiny random BERT written here, then checks chat, completion and embedding calls,
streaming and not, greedy determinism (a request alone equals the same request among
concurrent ones), a client that disconnects mid-stream, and that bad requests get OpenAI's
4xx status and error body. Prints 'N passed, N failed'.
"""

import array
import concurrent.futures
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA = "tiny-llama"
BERT = "tiny-bert"
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' + m['role']) }}{% endif %}"
    "<|{{ m['role'] }}|>\n{{ m['content'] | trim }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def write_llama(dst):
    shutil.copytree(os.path.join(ROOT, "fixtures/models/hf-tiny/llama"), dst)
    with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": TEMPLATE}, f)


def write_bert(dst):
    """A BERT of hidden size 16 with random weights and a small WordPiece vocabulary."""
    os.makedirs(dst)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "cat", "dog", "sits", "runs", "the", "on", "mat", "##s", ".", ","]
    h, inter, layers, vocab, positions = 16, 32, 2, len(words), 32
    config = {"vocab_size": vocab, "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": 2,
              "intermediate_size": inter, "max_position_embeddings": positions, "type_vocab_size": 2,
              "layer_norm_eps": 1e-12, "hidden_act": "gelu", "model_type": "bert"}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f)
    tokenizer = {
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "model": {"type": "WordPiece", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": "[UNK]",
                  "continuing_subword_prefix": "##", "max_input_chars_per_word": 100},
        "added_tokens": [{"id": i, "content": w, "special": True, "normalized": False} for i, w in enumerate(words[:4])],
    }
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)
    rng = random.Random(5)
    shapes = {
        "embeddings.word_embeddings.weight": [vocab, h],
        "embeddings.position_embeddings.weight": [positions, h],
        "embeddings.token_type_embeddings.weight": [2, h],
        "embeddings.LayerNorm.weight": [h],
        "embeddings.LayerNorm.bias": [h],
    }
    for l in range(layers):
        p = f"encoder.layer.{l}."
        for name, out, inp in [("attention.self.query", h, h), ("attention.self.key", h, h), ("attention.self.value", h, h),
                               ("attention.output.dense", h, h), ("intermediate.dense", inter, h), ("output.dense", h, inter)]:
            shapes[p + name + ".weight"] = [out, inp]
            shapes[p + name + ".bias"] = [out]
        for name in ["attention.output.LayerNorm", "output.LayerNorm"]:
            shapes[p + name + ".weight"] = [h]
            shapes[p + name + ".bias"] = [h]
    header, blobs, offset = {}, [], 0
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        centre = 1.0 if name.endswith("LayerNorm.weight") else 0.0
        data = array.array("f", [centre + rng.gauss(0, 0.3) for _ in range(n)]).tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base, proc, log):
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"rlx serve exited with {proc.returncode}:\n{open(log).read()}")
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("rlx serve did not start in 60 s")


def raw_post(base, path, body, content_type="application/json"):
    """(status, parsed JSON body) of a POST of raw bytes."""
    req = urllib.request.Request(base + path, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Checks:
    def __init__(self):
        self.passed, self.failed = 0, 0

    def run(self, name, fn):
        try:
            fn()
            self.passed += 1
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001 - each check reports its own failure
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")


def main():
    rlx = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rlx-serve-ci-")
    llama, bert, log = os.path.join(tmp, LLAMA), os.path.join(tmp, BERT), os.path.join(tmp, "serve.log")
    write_llama(llama)
    write_bert(bert)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen([rlx, "serve", "--model", llama, "--embedding-model", bert, "--port", str(port),
                                 "--kv-memory", "1", "--max-batch", "4"], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_ready(base, proc, log)
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=60)
        checks = Checks()
        run_checks(checks, client, base)
    finally:
        proc.send_signal(2)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "killed"
    print(open(log).read())
    checks.run("Ctrl-C stops the server cleanly", lambda: expect(code == 0, f"exit status {code}"))
    checks.run("one log line per request", lambda: expect(open(log).read().count("completion tokens in") >= 8, "too few request lines"))
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks.passed} passed, {checks.failed} failed")
    sys.exit(1 if checks.failed else 0)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def run_checks(checks, client, base):
    greedy = dict(temperature=0, max_tokens=12)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]

    def models():
        ids = sorted(m.id for m in client.models.list())
        expect(ids == sorted([LLAMA, BERT]), f"models {ids}")

    def chat():
        r = client.chat.completions.create(model=LLAMA, messages=messages, **greedy)
        c = r.choices[0]
        expect(c.message.role == "assistant" and isinstance(c.message.content, str), f"message {c.message}")
        expect(c.finish_reason in ("stop", "length"), f"finish {c.finish_reason}")
        expect(r.usage.prompt_tokens > 10 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"usage {r.usage}")
        expect(r.usage.completion_tokens <= 12, f"usage {r.usage}")

    def chat_stream_equals_whole():
        whole = client.chat.completions.create(model=LLAMA, messages=messages, **greedy)
        chunks = list(client.chat.completions.create(model=LLAMA, messages=messages, stream=True, stream_options={"include_usage": True}, **greedy))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        expect(chunks[0].choices[0].delta.role == "assistant", "the first chunk names the role")
        expect(text == whole.choices[0].message.content, f"stream {text!r} vs whole {whole.choices[0].message.content!r}")
        expect(finish == [whole.choices[0].finish_reason], f"finish {finish}")
        expect(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens, f"usage {chunks[-1].usage}")

    def completion():
        r = client.completions.create(model=LLAMA, prompt="Once upon a time", **greedy)
        expect(r.object == "text_completion" and isinstance(r.choices[0].text, str), f"{r}")
        expect(r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length", f"{r.usage} {r.choices[0].finish_reason}")
        streamed = "".join(c.choices[0].text for c in client.completions.create(model=LLAMA, prompt="Once upon a time", stream=True, **greedy))
        expect(streamed == r.choices[0].text, f"stream {streamed!r} vs whole {r.choices[0].text!r}")

    def stop_strings():
        whole = client.completions.create(model=LLAMA, prompt="Once upon a time", temperature=0, max_tokens=24).choices[0].text
        cut = whole[3:6]
        expect(len(cut.strip()) > 0, f"no text to stop at in {whole!r}")
        r = client.completions.create(model=LLAMA, prompt="Once upon a time", temperature=0, max_tokens=24, stop=[cut])
        expect(r.choices[0].text == whole[: whole.index(cut)] and r.choices[0].finish_reason == "stop", f"{r.choices[0].text!r} from {whole!r} at {cut!r}")

    def seeded_sampling():
        a = client.completions.create(model=LLAMA, prompt="The", temperature=1.0, top_p=0.9, seed=7, max_tokens=16).choices[0].text
        b = client.completions.create(model=LLAMA, prompt="The", temperature=1.0, top_p=0.9, seed=7, max_tokens=16).choices[0].text
        expect(a == b, f"seed 7 gave {a!r} then {b!r}")

    def concurrent_equals_alone():
        prompts = [f"Story number {i}:" for i in range(8)]
        alone = [client.completions.create(model=LLAMA, prompt=p, temperature=0, max_tokens=20).choices[0].text for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda p: "".join(c.choices[0].text for c in client.completions.create(model=LLAMA, prompt=p, temperature=0, max_tokens=20, stream=True)), prompts))
        expect(together == alone, f"{together} vs {alone}")

    def disconnect_cancels():
        stream = client.completions.create(model=LLAMA, prompt="Go on and on", temperature=0, max_tokens=400, stream=True)
        next(iter(stream))
        stream.close()
        time.sleep(0.5)
        r = client.completions.create(model=LLAMA, prompt="Still serving?", temperature=0, max_tokens=4)
        expect(r.usage.completion_tokens == 4, f"{r.usage}")

    def embeddings():
        r = client.embeddings.create(model=BERT, input=["a cat sits on the mat.", "the dog runs."])
        expect(len(r.data) == 2 and len(r.data[0].embedding) == 16, f"{len(r.data)} vectors")
        norm = sum(x * x for x in r.data[0].embedding) ** 0.5
        expect(abs(norm - 1) < 1e-4, f"norm {norm}")
        expect(r.usage.prompt_tokens == 15, f"usage {r.usage}")
        floats = client.embeddings.create(model=BERT, input="the dog runs.", encoding_format="float").data[0].embedding
        expect(max(abs(a - b) for a, b in zip(floats, r.data[1].embedding)) < 1e-6, "float and base64 encodings differ")

    def error(status, code_or_type, call):
        try:
            call()
        except openai.APIStatusError as e:
            expect(e.status_code == status, f"status {e.status_code}, body {e.body}")
            body = e.body if isinstance(e.body, dict) else {}
            expect(body.get("message") and code_or_type in (body.get("code"), body.get("type")), f"body {e.body}")
            return
        raise AssertionError("no error")

    for name, fn in [("models", models), ("chat", chat), ("chat streamed equals whole", chat_stream_equals_whole),
                     ("completion, whole and streamed", completion), ("stop strings", stop_strings),
                     ("seeded sampling repeats", seeded_sampling), ("concurrent requests equal each alone", concurrent_equals_alone),
                     ("a client disconnecting cancels its sequence", disconnect_cancels), ("embeddings", embeddings)]:
        checks.run(name, fn)

    checks.run("unknown model: 404", lambda: error(404, "model_not_found", lambda: client.chat.completions.create(model="gpt-9", messages=messages)))
    checks.run("negative max_tokens: 400", lambda: error(400, "invalid_request_error", lambda: client.completions.create(model=LLAMA, prompt="x", max_tokens=-3)))
    checks.run("prompt longer than the context: 400", lambda: error(400, "context_length_exceeded", lambda: client.completions.create(model=LLAMA, prompt="word " * 200)))
    checks.run("a role the template refuses: 400", lambda: error(400, "invalid_request_error", lambda: client.chat.completions.create(model=LLAMA, messages=[{"role": "tool", "content": "x"}])))
    checks.run("temperature out of range: 400", lambda: error(400, "invalid_request_error", lambda: client.completions.create(model=LLAMA, prompt="x", temperature=7)))
    checks.run("unknown embedding model: 404", lambda: error(404, "model_not_found", lambda: client.embeddings.create(model=LLAMA, input="x")))

    def malformed():
        for body in [b"{\"model\": ", b"not json", b"[1, 2]", b"{\"model\": \"tiny-llama\", \"messages\": 5}", b"{\"messages\": []}"]:
            status, reply = raw_post(base, "/v1/chat/completions", body)
            expect(status == 400 and reply["error"]["type"] == "invalid_request_error" and reply["error"]["message"], f"{body!r}: {status} {reply}")
        status, reply = raw_post(base, "/v1/completions", b"\xff\xfe garbage")
        expect(status == 400, f"{status} {reply}")

    checks.run("malformed JSON: 400 with an error body", malformed)
    checks.run("the server still answers after every bad request", chat)


if __name__ == "__main__":
    main()
