"""rlx.InferenceSession against onnxruntime on the same models and inputs."""

import threading

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import rlx
from conftest import rel_err
from onnx_models import bert, resnet, vit


def feed_for(name, rng, batch=2):
    if name == "resnet":
        return {"image": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}
    if name == "bert":
        mask = np.ones((batch, 16), np.int64)
        mask[0, 11:] = 0
        return {"input_ids": rng.integers(0, 100, (batch, 16)).astype(np.int64), "attention_mask": mask}
    return {"pixel_values": rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)}


BUILDERS = {"resnet": resnet, "bert": bert, "vit": vit}


def script(ort, model, feed):
    """Code written for onnxruntime, run with either module as `ort`."""
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(None, feed)


@pytest.mark.parametrize("name", ["resnet", "bert", "vit"])
def test_drop_in_for_onnxruntime(name, rng, tmp_path):
    model = BUILDERS[name](rng)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model)
    for batch in (1, 3):
        feed = feed_for(name, rng, batch)
        want_names, want = script(onnxruntime, str(path), feed)
        got_names, got = script(rlx, str(path), feed)
        assert got_names == want_names
        for n, g, w in zip(want_names, got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, n
            assert rel_err(g, w) <= 1e-4, (name, n, rel_err(g, w))


def test_inputs_and_outputs_describe_the_model_as_onnxruntime_does(rng):
    model = bert(rng)
    mine, theirs = rlx.InferenceSession(model), onnxruntime.InferenceSession(model)
    for a, b in [(mine.get_inputs(), theirs.get_inputs()), (mine.get_outputs(), theirs.get_outputs())]:
        assert [(x.name, x.type, x.shape) for x in a] == [(x.name, x.type, x.shape) for x in b]


def test_run_selects_outputs_by_name_in_the_order_asked(rng):
    model = bert(rng)
    feed = feed_for("bert", rng)
    sess = rlx.InferenceSession(model)
    pooled, hidden = sess.run(["pooler_output", "last_hidden_state"], feed)
    all_out = sess.run(None, feed)
    np.testing.assert_array_equal(pooled, all_out[1])
    np.testing.assert_array_equal(hidden, all_out[0])
    with pytest.raises(rlx.RlxError, match="no output named"):
        sess.run(["nope"], feed)


def test_outputs_are_handed_over_without_a_copy(rng):
    sess = rlx.InferenceSession(resnet(rng))
    (out,) = sess.run(None, feed_for("resnet", rng))
    assert not out.flags.owndata and out.base is not None and out.flags.writeable
    out[0, 0] = 7.0
    assert out[0, 0] == 7.0


def test_errors_are_typed_and_carry_rlx_message(rng, tmp_path):
    sess = rlx.InferenceSession(resnet(rng))
    good = feed_for("resnet", rng)
    with pytest.raises(rlx.RlxError, match="no input named `picture`"):
        sess.run(None, {"picture": good["image"]})
    with pytest.raises(rlx.DTypeError, match="image"):
        sess.run(None, {"image": good["image"].astype(np.float64)})
    with pytest.raises(rlx.ShapeError, match="image"):
        sess.run(None, {"image": good["image"][:, :, :16]})
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(rlx.FileError):
        rlx.InferenceSession(str(bad))
    with pytest.raises(rlx.FileError):
        rlx.InferenceSession(str(tmp_path / "missing.onnx"))
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(rlx.UnsupportedError, match="FancyOp"):
        rlx.InferenceSession(m.SerializeToString())


def test_threads_share_one_session(rng):
    model = vit(rng)
    mine, ref = rlx.InferenceSession(model), onnxruntime.InferenceSession(model)
    feeds = [feed_for("vit", np.random.default_rng(i)) for i in range(8)]
    want = [ref.run(None, f)[0] for f in feeds]
    got = [None] * len(feeds)

    def work(i):
        got[i] = mine.run(None, feeds[i])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        assert rel_err(g, w) <= 1e-4


def test_float16_and_bfloat16_models(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for onnx_type, np_type in [(TensorProto.FLOAT16, np.float16), (TensorProto.BFLOAT16, ml_dtypes.bfloat16)]:
        nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT),
                 helper.make_node("Relu", ["h"], ["r"]),
                 helper.make_node("Cast", ["r"], ["y"], to=onnx_type)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx_type, [3, 4])],
                              [helper.make_tensor_value_info("y", onnx_type, [3, 4])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        x = rng.standard_normal((3, 4)).astype(np_type)
        (y,) = rlx.InferenceSession(m.SerializeToString()).run(None, {"x": x})
        assert y.dtype == np.dtype(np_type)
        np.testing.assert_array_equal(y.astype(np.float32), np.maximum(x.astype(np.float32), 0))
