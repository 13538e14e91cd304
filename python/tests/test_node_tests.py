"""A sample of the ONNX backend node tests (written by tools/onnx/materialize.sh, which
.ci/run runs first) through rlx.InferenceSession against the outputs ONNX ships with them."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, load_tensor

import rlx
from conftest import REPO

NODE = REPO / "target/onnx/tests/node"
# Every 15th test, leaving out those whose outputs are random draws (dropout in training
# mode, bernoulli, the random generators): their references are one draw of another generator.
RANDOM = ("dropout", "bernoulli", "random")
SAMPLE = [c for c in sorted(NODE.glob("test_*"))[::15] if not any(r in c.name for r in RANDOM)] if NODE.exists() else []


def read(case, kind):
    files = sorted((case / "test_data_set_0").glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    return [numpy_helper.to_array(load_tensor(str(f))) for f in files]


@pytest.mark.skipif(not SAMPLE, reason="target/onnx/tests/node is absent (bash tools/onnx/materialize.sh)")
def test_node_test_sample_matches_onnx_references():
    ran, unsupported = 0, 0
    for case in SAMPLE:
        model = onnx.load(str(case / "model.onnx"))
        if any(not i.type.HasField("tensor_type") for i in model.graph.input):
            continue  # sequences and optionals are fed as lists and None, which the session does not take
        try:
            sess = rlx.InferenceSession(str(case / "model.onnx"))
            inputs = read(case, "input")
            names = [i.name for i in sess.get_inputs()]
            if len(inputs) != len(names) or any(a.dtype == object for a in inputs):
                continue
            got = sess.run(None, dict(zip(names, inputs)))
        except rlx.UnsupportedError:
            unsupported += 1
            continue
        except rlx.DTypeError as e:
            if "NumPy dtype" not in str(e):  # sub-byte integers: no NumPy dtype holds rlx's values
                raise
            unsupported += 1
            continue
        want = read(case, "output")
        assert len(got) == len(want), case.name
        for g, w in zip(got, want):
            assert g.shape == w.shape, (case.name, g.shape, w.shape)
            if w.dtype.kind in "fc":
                assert np.allclose(g.astype(w.dtype), w, rtol=1e-3, atol=1e-5, equal_nan=True), case.name
            else:
                np.testing.assert_array_equal(g, w, err_msg=case.name)
        ran += 1
    print(f"{ran} node tests ran, {unsupported} unsupported, of {len(SAMPLE)} sampled")
    assert ran >= len(SAMPLE) // 2
