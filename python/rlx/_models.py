"""The model layer: sentence embeddings and text generation."""

from __future__ import annotations

import os
from typing import Iterator, Sequence

import numpy as np

from . import _rlx


class Embedder:
    """A sentence-transformers model folder (BERT encoder, mean pooling, optional Normalize)
    compiled for `device`; `encode` follows sentence-transformers' `encode`."""

    def __init__(self, folder: str | os.PathLike, device: str = "cpu"):
        self._e = _rlx.Embedder(os.fspath(folder), device)

    @property
    def dim(self) -> int:
        return self._e.dim

    def get_sentence_embedding_dimension(self) -> int:
        return self._e.dim

    @property
    def max_seq_length(self) -> int:
        return self._e.max_seq_length

    def tokenize(self, text: str) -> list[int]:
        return self._e.tokenize(text)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> np.ndarray:
        """Embeddings `[batch, dim]` of a pre-tokenised batch (int64 `[batch, seq]` arrays)."""
        return self._e.forward(input_ids, attention_mask, token_type_ids)

    def encode(self, sentences: str | Sequence[str], batch_size: int = 32,
               normalize_embeddings: bool = False, **kwargs) -> np.ndarray:
        """float32 embeddings: `[len(sentences), dim]`, or `[dim]` for one string.
        The folder's own Normalize module applies as in sentence-transformers;
        `normalize_embeddings=True` scales every row to unit length as well."""
        one = isinstance(sentences, str)
        out = self._e.embed([sentences] if one else list(sentences), batch_size)
        if normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out[0] if one else out


class LLM:
    """A Llama-family decoder (GGUF file or Hugging Face folder: Llama, Qwen2/3, Gemma 3, SmolLM2)
    compiled once for `device`, with a KV cache of `context` positions."""

    def __init__(self, path: str | os.PathLike, device: str = "cpu", context: int = 2048):
        self._m = _rlx.LLM(os.fspath(path), device, context)

    @property
    def context(self) -> int:
        return self._m.context

    def encode(self, text: str) -> list[int]:
        return self._m.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self._m.decode(list(ids))

    def tokens(self, prompt: str | Sequence[int], max_tokens: int = 128, *, temperature: float = 0.0,
               top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop_at_eos: bool = True) -> Iterator[tuple[int, str]]:
        """The new tokens as `(id, text piece)` pairs, one decode step per item. One stream
        per model at a time: a new stream restarts the cache."""
        return self._m.stream(prompt if isinstance(prompt, str) else list(prompt), max_tokens,
                              temperature, top_k, top_p, seed, stop_at_eos)

    def generate(self, prompt: str | Sequence[int], max_tokens: int = 128, *, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, stream: bool = False):
        """The generated text (greedy by default); with `stream=True`, an iterator of text pieces."""
        pieces = (p for _, p in self.tokens(prompt, max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed))
        return pieces if stream else "".join(pieces)
