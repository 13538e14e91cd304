"""Batch-1 decode of a Llama-3.2-1B-shaped bf16 model (random weights) in plain PyTorch with a
static KV cache: per-step time (CUDA events, median) run eagerly and as one captured CUDA
graph per step, and torch.cuda.max_memory_allocated over the work. The same work as
crates/rlx-cuda/benches/decode.rs (a 512-position cache, 16 prompt tokens, then decode).

Usage: python3 tools/gpu/decode.py [steps]"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 128
LAYERS, D, HEADS, KV, FF, VOCAB = 16, 2048, 32, 8, 8192, 128256
HD, CAP, PROMPT, THETA = D // HEADS, 512, 16, 500000.0
dev, bf = "cuda", torch.bfloat16
torch.manual_seed(0)


def weight(n, k):
    """The [k, n] matrix of an n-by-k linear, uniform in ±1/√k."""
    return torch.empty(k, n, device=dev, dtype=bf).uniform_(-k ** -0.5, k ** -0.5)


torch.cuda.reset_peak_memory_stats()
emb = torch.empty(VOCAB, D, device=dev, dtype=bf).uniform_(-D ** -0.5, D ** -0.5)  # tied to the head
layers = [dict(qkv=weight((HEADS + 2 * KV) * HD, D), o=weight(D, HEADS * HD), gate_up=weight(2 * FF, D), down=weight(D, FF),
               n1=torch.ones(D, device=dev, dtype=bf), n2=torch.ones(D, device=dev, dtype=bf)) for _ in range(LAYERS)]
final_norm = torch.ones(D, device=dev, dtype=bf)
weight_bytes = sum(t.numel() * 2 for ly in layers for t in ly.values()) + emb.numel() * 2 + final_norm.numel() * 2
k_cache = torch.zeros(LAYERS, 1, KV, CAP, HD, device=dev, dtype=bf)
v_cache = torch.zeros_like(k_cache)
inv_freq = 1.0 / THETA ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float32) / HD)
slots = torch.arange(CAP, device=dev)


def rms(x, g):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(bf) * g


def rotate(x, positions):
    angles = positions.float()[:, None] * inv_freq[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(bf), torch.cat([angles.sin()] * 2, -1).to(bf)
    half = HD // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos[:, None] + rotated * sin[:, None]


def forward(tokens, positions):
    s = tokens.shape[0]
    x = emb[tokens][None]
    mask = (slots[None, :] <= positions[:, None])[None, None]
    for i, ly in enumerate(layers):
        q, k, v = (rms(x, ly["n1"]) @ ly["qkv"]).split([HEADS * HD, KV * HD, KV * HD], -1)
        q = rotate(q.view(1, s, HEADS, HD), positions).transpose(1, 2)
        k = rotate(k.view(1, s, KV, HD), positions).transpose(1, 2)
        k_cache[i].index_copy_(2, positions, k)
        v_cache[i].index_copy_(2, positions, v.view(1, s, KV, HD).transpose(1, 2))
        a = F.scaled_dot_product_attention(q, k_cache[i], v_cache[i], attn_mask=mask, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(1, s, D) @ ly["o"]
        gate, up = (rms(x, ly["n2"]) @ ly["gate_up"]).chunk(2, -1)
        x = x + (F.silu(gate) * up) @ ly["down"]
    return rms(x[:, -1], final_norm) @ emb.t()


token = torch.zeros(1, dtype=torch.long, device=dev)
pos = torch.zeros(1, dtype=torch.long, device=dev)


def step():
    logits = forward(token, pos)
    token.copy_(logits.argmax(-1).view(1))
    pos.add_(1)


def timed(run, n):
    times = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


with torch.no_grad():
    prompt = torch.arange(PROMPT, device=dev) * 7919 % VOCAB
    forward(prompt, torch.arange(PROMPT, device=dev))
    pos.fill_(PROMPT)
    for _ in range(8):
        step()
    eager_ms = timed(step, STEPS)
    pos.fill_(PROMPT)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    pos.fill_(PROMPT)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    pos.fill_(PROMPT)
    for _ in range(8):
        graph.replay()
    graph_ms = timed(graph.replay, STEPS)
    torch.cuda.synchronize()

mb = 1e6
print(json.dumps({
    "torch_decode_llama1b_bf16": {
        "eager_tok_s": round(1e3 / eager_ms, 1), "cuda_graph_tok_s": round(1e3 / graph_ms, 1),
        "eager_step_ms": round(eager_ms, 3), "cuda_graph_step_ms": round(graph_ms, 3),
        "max_memory_allocated_mb": round(torch.cuda.max_memory_allocated() / mb, 1),
        "weights_mb": round(weight_bytes / mb, 1), "kv_cache_mb": round(2 * k_cache.numel() * 2 / mb, 1),
        "torch": torch.__version__, "device": torch.cuda.get_device_name(),
    }
}), flush=True)
