"""PyTorch's MiniLM-L6-shaped BertModel (random weights, eval, no_grad) on the GPU, f32 and
bf16, at 1x128, 32x128 and 256x128 tokens: the median of 20 forwards after warm-up, each
timed with CUDA events, printed beside rlx's figure from crates/rlx-cuda/benches/minilm.rs."""
import sys

import torch
from transformers import BertConfig, BertModel

dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1] if len(sys.argv) > 1 else "bf16"]
dev = "cuda"
torch.manual_seed(0)
config = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
model = BertModel(config).to(dev).eval().to(dtype)


def median_ms(fn, iters=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


for batch, seq in [(1, 128), (32, 128), (256, 128)]:
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=dev)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        bare = median_ms(lambda: model(input_ids=ids))
        masked = median_ms(lambda: model(input_ids=ids, attention_mask=mask))
    name = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    print(f"minilm-l6 {batch}x{seq} {name}: torch {bare:.3f} ms without a mask (the anchor's), {masked:.3f} ms with one (eager, median of 20)")
