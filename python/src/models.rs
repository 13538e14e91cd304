//! The model layer: `rlx.Embedder` (a sentence-transformers folder) and `rlx.LLM` (a
//! Llama-family GGUF file or Hugging Face folder) with token streaming.

use crate::array::{to_numpy, to_tensor};
use crate::device::session;
use crate::error::{self, RlxError};
use pyo3::prelude::*;
use rlx::models::bert::{SentenceEncoder, ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS};
use rlx::models::bpe::BpeTokenizer;
use rlx::models::llama::{sample, GgufModel, Generator, HfModel, Llama, Rng, Sampling};
use rlx::{DType, Tensor};
use std::path::PathBuf;
use crate::lock::lock;
use std::sync::{Arc, Mutex};

/// Sentence embeddings from a sentence-transformers folder (`config.json`,
/// `model.safetensors`, `tokenizer.json`, `modules.json`).
#[pyclass(frozen, module = "rlx._rlx", name = "Embedder")]
pub struct Embedder {
    encoder: Mutex<SentenceEncoder>,
    dim: usize,
}

#[pymethods]
impl Embedder {
    #[new]
    #[pyo3(signature = (folder, device = "cpu"))]
    fn new(py: Python<'_>, folder: PathBuf, device: &str) -> PyResult<Embedder> {
        let session = session(device)?;
        let encoder = py.detach(|| SentenceEncoder::load(&folder, &session)).map_err(error::bert)?;
        let dim = encoder.bert.config.hidden_size;
        Ok(Embedder { encoder: Mutex::new(encoder), dim })
    }

    /// The embedding width.
    #[getter]
    fn dim(&self) -> usize {
        self.dim
    }

    /// Texts are cut to this many tokens.
    #[getter]
    fn max_seq_length(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(lock(py, &self.encoder)?.max_len)
    }

    /// One row of `dim` floats per text, in batches of `batch_size` texts.
    #[pyo3(signature = (texts, batch_size = 32))]
    fn embed<'py>(&self, py: Python<'py>, texts: Vec<String>, batch_size: usize) -> PyResult<Bound<'py, PyAny>> {
        let mut guard = lock(py, &self.encoder)?;
        let encoder = &mut *guard;
        let dim = self.dim;
        let flat = py
            .detach(|| -> Result<Vec<f32>, rlx::models::bert::BertError> {
                let mut flat = Vec::with_capacity(texts.len() * dim);
                for chunk in texts.chunks(batch_size.max(1)) {
                    let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
                    flat.extend(encoder.embed(&refs)?.into_iter().flatten());
                }
                Ok(flat)
            })
            .map_err(error::bert)?;
        to_numpy(py, Tensor::from_vec(flat, &[texts.len(), dim]).map_err(error::runtime)?)
    }

    /// The embeddings of a pre-tokenised batch: int64 arrays `[batch, seq]` (token types
    /// default to zeros), without tokenising.
    #[pyo3(signature = (input_ids, attention_mask, token_type_ids = None))]
    fn forward<'py>(&self, py: Python<'py>, input_ids: &Bound<'py, PyAny>, attention_mask: &Bound<'py, PyAny>, token_type_ids: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let ids = to_tensor(input_ids, Some(DType::I64))?;
        let mask = to_tensor(attention_mask, Some(DType::I64))?;
        let types = match token_type_ids {
            Some(t) => to_tensor(t, Some(DType::I64))?,
            None => Tensor::zeros(DType::I64, ids.shape()),
        };
        let mut guard = lock(py, &self.encoder)?;
        let compiled = guard.compiled();
        let inputs = [(INPUT_IDS, &ids), (ATTENTION_MASK, &mask), (TOKEN_TYPE_IDS, &types)];
        let out = py.detach(|| compiled.run(&inputs)).map_err(error::runtime)?;
        let first = out.into_iter().next().ok_or_else(|| RlxError::new_err("the encoder returned no output"))?;
        to_numpy(py, first)
    }

    /// WordPiece ids of a text, `[CLS]` and `[SEP]` included.
    fn tokenize(&self, py: Python<'_>, text: &str) -> PyResult<Vec<u32>> {
        let encoder = lock(py, &self.encoder)?;
        Ok(encoder.tokenizer.encode(text, encoder.max_len))
    }
}

/// A decoder-only language model compiled once with a KV cache of `context` positions.
#[pyclass(frozen, module = "rlx._rlx", name = "LLM")]
pub struct Llm {
    generator: Arc<Mutex<Generator>>,
    tokenizer: Arc<BpeTokenizer>,
    capacity: usize,
}

#[pymethods]
impl Llm {
    #[new]
    #[pyo3(signature = (path, device = "cpu", context = 2048))]
    fn new(py: Python<'_>, path: PathBuf, device: &str, context: usize) -> PyResult<Llm> {
        let session = session(device)?;
        let (generator, tokenizer, capacity) = py
            .detach(|| -> rlx::models::Result<_> {
                let (tokenizer, config, weights) = if path.is_dir() {
                    let m = HfModel::open(&path, |_, _| {})?;
                    (m.tokenizer, m.config, m.weights)
                } else {
                    let m = GgufModel::open(&path, |_, _| {})?;
                    (m.tokenizer, m.config, m.weights)
                };
                let capacity = context.clamp(1, config.context.max(1));
                let model = Llama::build(&config, &weights, capacity)?;
                drop(weights);
                Ok((Generator::new(model, &session)?, tokenizer, capacity))
            })
            .map_err(error::model)?;
        Ok(Llm { generator: Arc::new(Mutex::new(generator)), tokenizer: Arc::new(tokenizer), capacity })
    }

    /// Positions the KV cache holds: prompt and new tokens together.
    #[getter]
    fn context(&self) -> usize {
        self.capacity
    }

    #[getter]
    fn eos(&self) -> Option<u32> {
        self.tokenizer.eos
    }

    /// Token ids of `text` (with the BOS token where the tokenizer adds one; special-token
    /// texts such as `<|im_start|>` become their ids).
    fn encode(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, true)
    }

    /// The text of `ids`, control tokens left out.
    fn decode(&self, ids: Vec<u32>) -> String {
        self.tokenizer.decode(&ids, false)
    }

    /// A stream of the new tokens after `prompt` (a text or token ids): each `next` runs one
    /// decode step and gives `(token id, text piece)`; it stops at `max_tokens` or EOS.
    #[pyo3(signature = (prompt, max_tokens = 128, temperature = 0.0, top_k = 0, top_p = 1.0, seed = 0, stop_at_eos = true))]
    #[allow(clippy::too_many_arguments)]
    fn stream(&self, prompt: &Bound<'_, PyAny>, max_tokens: usize, temperature: f32, top_k: usize, top_p: f32, seed: u64, stop_at_eos: bool) -> PyResult<TokenStream> {
        let ids: Vec<u32> = match prompt.extract::<String>() {
            Ok(text) => self.tokenizer.encode(&text, true),
            Err(_) => prompt.extract()?,
        };
        if ids.is_empty() {
            return Err(RlxError::new_err("the prompt has no tokens"));
        }
        if ids.len() + max_tokens > self.capacity {
            return Err(error::ShapeError::new_err(format!(
                "{} prompt tokens + {max_tokens} new ones exceed the context of {} positions (LLM(..., context=N))",
                ids.len(),
                self.capacity
            )));
        }
        let sampling = Sampling { temperature, top_k, top_p, seed };
        Ok(TokenStream {
            generator: self.generator.clone(),
            tokenizer: self.tokenizer.clone(),
            state: Mutex::new(StreamState { prompt: Some(ids), logits: Vec::new(), left: max_tokens, rng: Rng::new(seed), pending: Vec::new() }),
            sampling,
            stop: if stop_at_eos { self.tokenizer.eos } else { None },
        })
    }
}

struct StreamState {
    /// The prompt, until the first step feeds it.
    prompt: Option<Vec<u32>>,
    logits: Vec<f32>,
    left: usize,
    rng: Rng,
    /// Bytes of a UTF-8 character split across tokens.
    pending: Vec<u8>,
}

/// Iterator over `(token id, text piece)` pairs; the model's cache restarts with each stream.
#[pyclass(frozen, module = "rlx._rlx", name = "TokenStream")]
pub struct TokenStream {
    generator: Arc<Mutex<Generator>>,
    tokenizer: Arc<BpeTokenizer>,
    state: Mutex<StreamState>,
    sampling: Sampling,
    stop: Option<u32>,
}

#[pymethods]
impl TokenStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<(u32, String)>> {
        let mut state = lock(py, &self.state)?;
        if state.left == 0 {
            return Ok(None);
        }
        let st = &mut *state;
        let token = py
            .detach(|| -> rlx::models::Result<u32> {
                let mut generator = self.generator.lock().map_err(|_| rlx::models::ModelError::Generate("an earlier step panicked".into()))?;
                if let Some(prompt) = st.prompt.take() {
                    generator.reset();
                    st.logits = generator.feed(&prompt)?;
                }
                let token = sample(&st.logits, &self.sampling, &mut st.rng);
                st.left -= 1;
                if Some(token) == self.stop {
                    st.left = 0;
                } else if st.left > 0 {
                    st.logits = generator.feed(&[token])?;
                }
                Ok(token)
            })
            .map_err(error::model)?;
        st.pending.extend(self.tokenizer.token_bytes(token, false));
        let valid = match std::str::from_utf8(&st.pending) {
            Ok(s) => s.len(),
            Err(e) if st.left == 0 => e.valid_up_to().max(st.pending.len()),
            Err(e) => e.valid_up_to(),
        };
        let piece = String::from_utf8_lossy(&st.pending[..valid]).into_owned();
        st.pending.drain(..valid);
        Ok(Some((token, piece)))
    }
}

/// Registers the model classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Embedder>()?;
    m.add_class::<Llm>()?;
    m.add_class::<TokenStream>()?;
    Ok(())
}
