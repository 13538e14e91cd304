#!/usr/bin/env python3
"""Exports a few PyTorch models with random weights to ONNX, with onnxruntime's outputs as
the reference, in the ONNX backend-test layout (`<dir>/test_<name>/model.onnx` and
`test_data_set_0/{input,output}_N.pb`), so `onnx_conformance.py --data <dir>` runs them too.

With `--rlx BINARY` it also runs each model through `rlx onnx-run` and fails when any output's
max relative error, max|rlx - ort| / max|ort|, exceeds `--max-rel` (1e-4).

The models: a ResNet-18 (torchvision's layout, written out here since torchvision is not
installed), a 2-layer BERT and a 2-layer ViT from `transformers` with small random configs.
Nothing written here is committed; the seed makes the weights and inputs reproducible.

    python tools/onnx/export_models.py --out /tmp/rlx-exported --rlx target/release/rlx
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper
from torch import nn


class BasicBlock(nn.Module):
    """ResNet's two 3x3 convolutions with a residual, downsampling by a strided 1x1 conv."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def randomize_batchnorm(model, gen):
    """Non-trivial running statistics, so BatchNormalization is exercised."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)


def resnet18(gen):
    model = ResNet18()
    randomize_batchnorm(model, gen)
    return model, {"input": torch.randn(1, 3, 224, 224, generator=gen)}


class Unpacked(nn.Module):
    """A `transformers` model returning its last hidden state as a plain tensor."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return self.inner(*args).last_hidden_state


def bert(gen):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=64)
    model = Unpacked(BertModel(cfg, add_pooling_layer=False))
    ids = torch.randint(0, cfg.vocab_size, (2, 16), generator=gen)
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 12:] = 0
    return model, {"input_ids": ids, "attention_mask": mask}


def vit(gen):
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    model = Unpacked(ViTModel(cfg, add_pooling_layer=False))
    return model, {"pixel_values": torch.randn(2, 3, 32, 32, generator=gen)}


MODELS = {"resnet18": resnet18, "bert_tiny": bert, "vit_tiny": vit}


def export(name, make, out_dir, seed, dynamo):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model, inputs = make(gen)
    model.eval()
    test_dir = os.path.join(out_dir, f"test_{name}")
    data_dir = os.path.join(test_dir, "test_data_set_0")
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(test_dir, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs.values()), path, input_names=list(inputs), output_names=["output"], opset_version=18 if dynamo else 17, dynamo=dynamo)
    feeds = {k: v.numpy() for k, v in inputs.items()}
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    declared = [i.name for i in sess.get_inputs()]
    feeds = {k: v for k, v in feeds.items() if k in declared}
    outputs = sess.run(None, feeds)
    for i, k in enumerate(declared):
        onnx.save_tensor(numpy_helper.from_array(feeds[k], k), os.path.join(data_dir, f"input_{i}.pb"))
    for i, (o, v) in enumerate(zip(sess.get_outputs(), outputs)):
        onnx.save_tensor(numpy_helper.from_array(v, o.name), os.path.join(data_dir, f"output_{i}.pb"))
    return path, feeds, outputs


ONNX_DTYPES = {np.dtype("float32"): "FLOAT", np.dtype("int64"): "INT64", np.dtype("int32"): "INT32"}


def run_rlx(rlx, path, feeds):
    """The outputs of `rlx onnx-run` on `feeds`, through the runner's npy protocol."""
    with tempfile.TemporaryDirectory() as tmp:
        in_dir, out_dir = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        os.makedirs(in_dir)
        os.makedirs(out_dir)
        entries = []
        for k, v in feeds.items():
            np.save(os.path.join(in_dir, f"{k}.npy"), v)
            entries.append({"name": k, "kind": "tensor", "onnx_dtype": ONNX_DTYPES[v.dtype], "file": f"{k}.npy"})
        with open(os.path.join(in_dir, "manifest.json"), "w") as f:
            json.dump({"inputs": entries}, f)
        proc = subprocess.run([rlx, "onnx-run", path, "--inputs", in_dir, "--out", out_dir], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.strip())
        files = sorted(f for f in os.listdir(out_dir) if f.startswith("output_"))
        return [np.load(os.path.join(out_dir, f)) for f in sorted(files, key=lambda f: int(f[7:-4]))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="scratch folder for the exported tests")
    ap.add_argument("--rlx", help="an rlx binary to compare against onnxruntime")
    ap.add_argument("--max-rel", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dynamo", action="store_true", help="export with torch.export (default: the TorchScript exporter)")
    ap.add_argument("models", nargs="*", default=list(MODELS))
    args = ap.parse_args()
    failed = 0
    for name in args.models:
        path, feeds, expected = export(name, MODELS[name], args.out, args.seed, args.dynamo)
        if not args.rlx:
            print(f"{name}: exported to {path}")
            continue
        try:
            got = run_rlx(args.rlx, path, feeds)
        except RuntimeError as e:
            print(f"{name}: FAIL ({e})")
            failed += 1
            continue
        errs = []
        for g, e in zip(got, expected):
            if g.shape != e.shape:
                errs.append(float("inf"))
            else:
                errs.append(float(np.max(np.abs(g.astype(np.float64) - e)) / max(np.max(np.abs(e)), 1e-30)))
        ok = len(got) == len(expected) and all(r <= args.max_rel for r in errs)
        failed += not ok
        print(f"{name}: {'PASS' if ok else 'FAIL'} max rel err {max(errs, default=float('inf')):.3g} over {len(expected)} output(s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
