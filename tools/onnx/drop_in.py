#!/usr/bin/env python3
"""Runs the models tools/onnx/export_models.py exported (ResNet-18, BERT, ViT) through one
script body twice: once with onnxruntime's `InferenceSession`, once with rlx's, the class the
only difference; fails when any output's max relative error, max|rlx - ort| / max|ort|,
exceeds `--max-rel` (1e-4).

    python tools/onnx/export_models.py --out /tmp/rlx-exported
    python tools/onnx/drop_in.py /tmp/rlx-exported

Needs onnxruntime, onnx and the rlx package (docs/python.md) in one environment.
"""

import argparse
import glob
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def feeds_of(test_dir):
    """The test's inputs by name, from `test_data_set_0/input_N.pb` (each tensor named)."""
    tensors = [onnx.load_tensor(p) for p in glob.glob(os.path.join(test_dir, "test_data_set_0", "input_*.pb"))]
    return {t.name: numpy_helper.to_array(t) for t in tensors}


def run(InferenceSession, test_dir):
    """What an onnxruntime user's script does: open a session, feed it, take every output."""
    session = InferenceSession(os.path.join(test_dir, "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = feeds_of(test_dir)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exported", help="the folder export_models.py wrote (test_<name>/ inside)")
    ap.add_argument("--max-rel", type=float, default=1e-4)
    args = ap.parse_args()

    import onnxruntime
    import rlx

    tests = sorted(glob.glob(os.path.join(args.exported, "test_*")))
    if not tests:
        sys.exit(f"no test_<name> folders in {args.exported}: run export_models.py first")
    worst = 0.0
    for test_dir in tests:
        want = run(onnxruntime.InferenceSession, test_dir)
        got = run(rlx.InferenceSession, test_dir)
        if set(got) != set(want):
            sys.exit(f"{test_dir}: rlx gave outputs {sorted(got)}, onnxruntime {sorted(want)}")
        for name, w in want.items():
            g = got[name]
            if g.shape != w.shape:
                sys.exit(f"{test_dir}: output {name} has shape {g.shape}, onnxruntime's {w.shape}")
            rel = float(np.max(np.abs(g.astype(np.float64) - w)) / max(float(np.max(np.abs(w))), 1e-30))
            worst = max(worst, rel)
            status = "ok" if rel <= args.max_rel else "FAIL"
            print(f"{os.path.basename(test_dir)[5:]:10} {name:24} {str(w.shape):18} max rel {rel:.2e}  {status}")
    print(f"worst max rel {worst:.2e} (bound {args.max_rel:g})")
    sys.exit(0 if worst <= args.max_rel else 1)


if __name__ == "__main__":
    main()
