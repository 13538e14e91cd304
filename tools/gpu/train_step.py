"""PyTorch eager's training step for the same model as crates/rlx-cuda/benches/train_step.rs:
the GPT of crates/rlx-models/src/gpt.rs (pre-norm blocks, causal attention through SDPA, GELU
MLP with a bias on the up projection only, learned positions, untied head), GPT-2-small shape,
bf16 autocast over f32 weights, fused AdamW; median step over ten after three warm-ups
(CUDA events), tokens/s and torch.cuda.max_memory_allocated.
Usage: python3 tools/gpu/train_step.py [batch] [layers] [--compile]."""
import sys

import torch
import torch.nn.functional as F

args = [a for a in sys.argv[1:] if not a.startswith("--")]
batch = int(args[0]) if args else 16
layers = int(args[1]) if len(args) > 1 else 12
compiled = "--compile" in sys.argv
vocab, context, d, heads, d_ff = 50257, 1024, 768, 12, 3072


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.wo = torch.nn.Linear(d, d, bias=False)
        self.w1 = torch.nn.Linear(d, d_ff)
        self.w2 = torch.nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.wo(a)
        return x + self.w2(F.gelu(self.w1(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Parameter(torch.randn(context, d) * 0.02)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.tok(tokens) + self.pos
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))


torch.manual_seed(0)
model = Gpt().cuda()
for p in model.parameters():
    if p.dim() > 1:
        torch.nn.init.normal_(p, std=0.02)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
tokens = torch.randint(0, vocab, (batch, context), device="cuda")
targets = torch.roll(tokens, -1, 1)
forward = torch.compile(model) if compiled else model


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = forward(tokens, targets)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


losses = [step().item() for _ in range(3)]
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
times = []
for _ in range(10):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    loss = step()
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end))
    losses.append(loss.item())
times.sort()
ms = times[len(times) // 2]
params = sum(p.numel() for p in model.parameters())
mode = "torch.compile" if compiled else "eager"
print(f"torch train step GPT-2-small shape ({layers} layers, B{batch} x T{context}, bf16 autocast, fused AdamW, {mode}, "
      f"{params / 1e6:.1f}M params): median {ms:.1f} ms, {batch * context / ms * 1e3:.0f} tok/s; loss {losses[0]:.3f} -> {losses[-1]:.3f}")
print(f"torch train step memory: max_memory_allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB "
      f"(weights + AdamW state {params * 12 / 2**20:.0f} MiB; torch {torch.__version__})")
