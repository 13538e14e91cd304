#!/usr/bin/env python3
"""PyTorch CPU side of the training-step benchmark: the `rlx demo` character GPT, same sizes,
same batch, same AdamW + clipping step, timed per step. Prints one JSON line.

Usage: train_step_torch.py --threads N [--steps 30] [--warmup 5] [--compile]
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT, D, HEADS, LAYERS, FF, BATCH = 76, 64, 128, 4, 4, 512, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.w1, self.w2 = nn.Linear(D, FF), nn.Linear(FF, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.ln1(x)
        heads = lambda m: m(h).view(b, t, HEADS, D // HEADS).transpose(1, 2)
        a = F.scaled_dot_product_attention(heads(self.wq), heads(self.wk), heads(self.wv), is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, D))
        return x + self.w2(F.gelu(self.w1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Parameter(torch.randn(CONTEXT, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, tokens, targets):
        x = self.tok(tokens) + self.pos
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    fwd = torch.compile(model) if a.compile else model
    times = []
    for i in range(a.warmup + a.steps):
        tokens = torch.randint(0, VOCAB, (BATCH, CONTEXT))
        targets = torch.randint(0, VOCAB, (BATCH, CONTEXT))
        t = time.perf_counter()
        loss = fwd(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t)
    print(json.dumps({"peer": "torch.compile" if a.compile else "torch eager", "torch": torch.__version__,
                      "threads": a.threads, "median_ms": statistics.median(times) * 1e3,
                      "tokens_per_s": BATCH * CONTEXT / statistics.median(times)}))


if __name__ == "__main__":
    main()
