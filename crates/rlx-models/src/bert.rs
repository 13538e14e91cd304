//! A BERT encoder (Hugging Face `BertModel`) with sentence-transformers' mean pooling and L2
//! normalisation, as all-MiniLM-L6-v2 runs it: word + position + token-type embeddings and a
//! LayerNorm, then post-norm layers of padding-masked self-attention and an exact-GELU MLP.
//!
//! The graph takes `input_ids`, `attention_mask` and `token_type_ids` (I64 `[B, S]`, both dims
//! symbolic, `S` ≤ `max_position_embeddings`) and returns the `[B, hidden]` sentence
//! embeddings. Parameters carry the names of `model.safetensors`; the dense weights, stored
//! `[out, in]` there, are declared `[in, out]` so the products read them row-major, and
//! [`Bert::weights`] transposes them once while loading.

use crate::wordpiece::{TokenizerError, WordPiece};
use rlx_io::{IoError, SafetensorsFile};
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, IrError, Shape, TensorType, ValueId};
use rlx_runtime::{CompiledGraph, RuntimeError, Session, Tensor};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Names of the graph inputs (those of Hugging Face tokenizers).
pub const INPUT_IDS: &str = "input_ids";
pub const ATTENTION_MASK: &str = "attention_mask";
pub const TOKEN_TYPE_IDS: &str = "token_type_ids";

/// Loading or running a BERT model failed; file errors name the file.
#[derive(Debug, Error)]
pub enum BertError {
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: {source}", path.display())]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("{}: {what}", path.display())]
    Config { path: PathBuf, what: String },
    #[error("{}: tensor `{tensor}` is {got:?}, expected {expected:?}", path.display())]
    WeightShape { path: PathBuf, tensor: String, expected: Vec<usize>, got: Vec<usize> },
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("building the BERT graph: {0}")]
    Graph(#[from] IrError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// The fields of a Hugging Face BERT `config.json` the encoder uses.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub hidden_act: String,
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
}

fn absolute() -> String {
    "absolute".into()
}

/// How the token states become one vector per text (sentence-transformers' `Pooling` with
/// `pooling_mode_mean_tokens`, optionally followed by `Normalize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pooling {
    /// Divide by the L2 norm (floored at 1e-12, as `torch.nn.functional.normalize`).
    pub normalize: bool,
}

/// One parameter of the graph and where its value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BertParam {
    /// The tensor's name in `model.safetensors` and in the graph.
    pub name: String,
    /// The shape the graph declares.
    pub shape: Vec<usize>,
    /// Whether the graph holds the transpose of the stored `[out, in]` matrix.
    pub transposed: bool,
}

/// A built encoder graph and its parameters.
#[derive(Clone, Debug)]
pub struct Bert {
    pub config: BertConfig,
    pub graph: Graph,
    /// `[B, hidden]` pooled embeddings (the graph's one output).
    pub embeddings: ValueId,
    pub params: Vec<BertParam>,
}

impl BertConfig {
    /// Reads and checks `config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<BertConfig, BertError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| BertError::Read { path: path.into(), source })?;
        BertConfig::from_json(&text, path)
    }

    /// Parses and checks the text of a `config.json`; `path` names it in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<BertConfig, BertError> {
        let c: BertConfig = serde_json::from_str(text).map_err(|source| BertError::Json { path: path.into(), source })?;
        let bad = |what: String| Err(BertError::Config { path: path.into(), what });
        if c.hidden_act != "gelu" {
            return bad(format!("hidden_act `{}` is not supported (the exact-erf `gelu` is)", c.hidden_act));
        }
        if c.position_embedding_type != "absolute" {
            return bad(format!("position_embedding_type `{}` is not supported (`absolute` is)", c.position_embedding_type));
        }
        let sizes = [c.vocab_size, c.hidden_size, c.num_attention_heads, c.intermediate_size, c.max_position_embeddings, c.type_vocab_size];
        if sizes.contains(&0) || c.hidden_size % c.num_attention_heads != 0 {
            return bad(format!(
                "sizes must be positive and hidden_size {} a multiple of num_attention_heads {}",
                c.hidden_size, c.num_attention_heads
            ));
        }
        if !(c.layer_norm_eps.is_finite() && c.layer_norm_eps > 0.0) {
            return bad(format!("layer_norm_eps {} must be positive", c.layer_norm_eps));
        }
        Ok(c)
    }

    /// Builds the encoder graph with `pooling`, in f32.
    pub fn build(&self, pooling: Pooling) -> Result<Bert, BertError> {
        self.build_in(pooling, DType::F32)
    }

    /// Builds the encoder graph computing in `compute` (f32, or bf16 / f16 as PyTorch's
    /// `model.to(dtype)` does): the parameters stay f32 and are cast once in the graph (the
    /// executor hoists parameter-only casts out of the run); norms keep f32 statistics inside
    /// their kernels, and pooling runs in f32, so the embeddings are f32 either way.
    pub fn build_in(&self, pooling: Pooling, compute: DType) -> Result<Bert, BertError> {
        let h = self.hidden_size;
        let mut b = Builder { g: Graph::new(), params: Vec::new(), eps: self.layer_norm_eps as f32, compute };
        let rows = TensorType::new(DType::I64, Shape(vec![Dim::sym("B"), Dim::sym("S")]));
        let ids = b.g.input(INPUT_IDS, rows.clone());
        let mask = b.g.input(ATTENTION_MASK, rows.clone());
        let types = b.g.input(TOKEN_TYPE_IDS, rows);

        let word = b.param("embeddings.word_embeddings.weight", &[self.vocab_size, h], false)?;
        let pos = b.param("embeddings.position_embeddings.weight", &[self.max_position_embeddings, h], false)?;
        let typ = b.param("embeddings.token_type_embeddings.weight", &[self.type_vocab_size, h], false)?;
        let ones = b.g.compare(CmpOp::Eq, ids, ids)?;
        let ones = b.g.cast(ones, DType::I64)?;
        let positions = b.g.cumsum(ones, 1, true)?;
        let x = b.g.gather(word, ids, 0)?;
        let p = b.g.gather(pos, positions, 0)?;
        let t = b.g.gather(typ, types, 0)?;
        let x = b.g.binary(BinaryOp::Add, x, p)?;
        let x = b.g.binary(BinaryOp::Add, x, t)?;
        let mut x = b.layer_norm("embeddings.LayerNorm", x, h)?;

        let keep = b.g.cast(mask, DType::F32)?;
        let heads = self.num_attention_heads;
        let attention = Attention::new(heads, h / heads, MaskKind::Custom);
        for l in 0..self.num_hidden_layers {
            let at = format!("encoder.layer.{l}.attention");
            let q = b.dense(&format!("{at}.self.query"), x, h, h)?;
            let k = b.dense(&format!("{at}.self.key"), x, h, h)?;
            let v = b.dense(&format!("{at}.self.value"), x, h, h)?;
            let a = b.g.attention(attention.clone(), q, k, v, Some(keep))?;
            let a = b.dense(&format!("{at}.output.dense"), a, h, h)?;
            let a = b.g.binary(BinaryOp::Add, a, x)?;
            x = b.layer_norm(&format!("{at}.output.LayerNorm"), a, h)?;
            let up = b.dense(&format!("encoder.layer.{l}.intermediate.dense"), x, h, self.intermediate_size)?;
            let up = b.g.activation(ActivationKind::Gelu, up)?;
            let down = b.dense(&format!("encoder.layer.{l}.output.dense"), up, self.intermediate_size, h)?;
            let down = b.g.binary(BinaryOp::Add, down, x)?;
            x = b.layer_norm(&format!("encoder.layer.{l}.output.LayerNorm"), down, h)?;
        }

        let x = if compute == DType::F32 { x } else { b.g.cast(x, DType::F32)? };
        let embeddings = b.mean_pool(x, keep, pooling)?;
        b.g.set_outputs(vec![embeddings])?;
        Ok(Bert { config: self.clone(), graph: b.g, embeddings, params: b.params })
    }
}

impl Bert {
    /// Every parameter's value from `file`, transposed where the graph wants it, each checked
    /// against the shape the configuration implies.
    pub fn weights(&self, file: &SafetensorsFile) -> Result<Vec<(String, Tensor)>, BertError> {
        self.params
            .iter()
            .map(|p| {
                let info = file.bytes(&p.name)?;
                let stored: Vec<usize> = if p.transposed { p.shape.iter().rev().copied().collect() } else { p.shape.clone() };
                if info.shape[..] != stored[..] {
                    return Err(BertError::WeightShape { path: file.path().into(), tensor: p.name.clone(), expected: stored, got: info.shape.to_vec() });
                }
                let t = match (p.transposed, file.slice::<f32>(&p.name)) {
                    (true, Ok(src)) => transposed(src, stored[0], stored[1])?,
                    (true, Err(_)) => transposed(file.load_f32(&p.name)?.as_slice::<f32>()?, stored[0], stored[1])?,
                    (false, _) => file.load_f32(&p.name)?,
                };
                Ok((p.name.clone(), t))
            })
            .collect()
    }
}

/// The transpose of a row-major `[r, c]` F32 matrix, written straight into its tensor (read
/// from the file's map where it is stored as F32, so loading frees no large buffers that the
/// allocator would keep).
fn transposed(src: &[f32], r: usize, c: usize) -> Result<Tensor, RuntimeError> {
    let mut t = Tensor::zeros(DType::F32, &[c, r]);
    let out = t.as_mut_slice::<f32>()?;
    for (i, row) in src.chunks_exact(c).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            out[j * r + i] = v;
        }
    }
    Ok(t)
}

struct Builder {
    g: Graph,
    params: Vec<BertParam>,
    eps: f32,
    /// The dtype activations and products are computed in.
    compute: DType,
}

impl Builder {
    /// The f32 parameter `name`, in the compute dtype.
    fn param(&mut self, name: &str, shape: &[usize], transposed: bool) -> Result<ValueId, IrError> {
        self.params.push(BertParam { name: name.into(), shape: shape.to_vec(), transposed });
        let p = self.g.param(name, TensorType::of(DType::F32, shape));
        if self.compute == DType::F32 {
            return Ok(p);
        }
        self.g.cast(p, self.compute)
    }

    /// `x · W + b` for a stored `[out, in]` weight `{name}.weight` and bias `{name}.bias`.
    fn dense(&mut self, name: &str, x: ValueId, d_in: usize, d_out: usize) -> Result<ValueId, IrError> {
        let w = self.param(&format!("{name}.weight"), &[d_in, d_out], true)?;
        let bias = self.param(&format!("{name}.bias"), &[d_out], false)?;
        let y = self.g.matmul(x, w)?;
        self.g.binary(BinaryOp::Add, y, bias)
    }

    fn layer_norm(&mut self, name: &str, x: ValueId, d: usize) -> Result<ValueId, IrError> {
        let gamma = self.param(&format!("{name}.weight"), &[d], false)?;
        let beta = self.param(&format!("{name}.bias"), &[d], false)?;
        self.g.layer_norm(x, gamma, beta, -1, self.eps)
    }

    /// `Σ_s keep·x / max(Σ_s keep, 1e-9)` over the sequence, then the optional L2 norm.
    fn mean_pool(&mut self, x: ValueId, keep: ValueId, pooling: Pooling) -> Result<ValueId, IrError> {
        let column = Shape(vec![Dim::sym("B"), Dim::sym("S"), Dim::Static(1)]);
        let keep3 = self.g.reshape_to(keep, &column)?;
        let kept = self.g.binary(BinaryOp::Mul, x, keep3)?;
        let sum = self.g.reduce(ReduceOp::Sum, kept, &[1], false)?;
        let count = self.g.reduce(ReduceOp::Sum, keep3, &[1], false)?;
        let floor = self.g.constant_f32(&[1], &[1e-9])?;
        let count = self.g.binary(BinaryOp::Max, count, floor)?;
        let mean = self.g.binary(BinaryOp::Div, sum, count)?;
        if !pooling.normalize {
            return Ok(mean);
        }
        let sq = self.g.binary(BinaryOp::Mul, mean, mean)?;
        let norm = self.g.reduce(ReduceOp::Sum, sq, &[1], true)?;
        let norm = self.g.activation(ActivationKind::Sqrt, norm)?;
        let floor = self.g.constant_f32(&[1], &[1e-12])?;
        let norm = self.g.binary(BinaryOp::Max, norm, floor)?;
        self.g.binary(BinaryOp::Div, mean, norm)
    }
}

/// A sentence-transformers model folder (`config.json`, `model.safetensors`,
/// `tokenizer.json`, and `modules.json` with its `Pooling` config) compiled for one session.
pub struct SentenceEncoder {
    pub bert: Bert,
    pub tokenizer: WordPiece,
    /// Texts are cut to this many tokens, `[CLS]` and `[SEP]` included.
    pub max_len: usize,
    compiled: CompiledGraph,
}

#[derive(Deserialize)]
struct Module {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: usize,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, BertError> {
    let text = std::fs::read_to_string(path).map_err(|source| BertError::Read { path: path.into(), source })?;
    serde_json::from_str(&text).map_err(|source| BertError::Json { path: path.into(), source })
}

/// The pooling `modules.json` in `dir` describes: mean pooling, with `Normalize` or not.
/// A folder without `modules.json` (a bare BERT) gets mean pooling and normalisation.
pub fn read_pooling(dir: &Path) -> Result<Pooling, BertError> {
    let modules_path = dir.join("modules.json");
    if !modules_path.exists() {
        return Ok(Pooling { normalize: true });
    }
    let modules: Vec<Module> = read_json(&modules_path)?;
    let kind = |m: &Module| m.kind.rsplit('.').next().unwrap_or("").to_string();
    let mut normalize = false;
    for m in &modules {
        match kind(m).as_str() {
            "Transformer" => {}
            "Normalize" => normalize = true,
            "Pooling" => {
                let path = dir.join(&m.path).join("config.json");
                let p: PoolingConfig = read_json(&path)?;
                if !p.pooling_mode_mean_tokens || p.pooling_mode_cls_token || p.pooling_mode_max_tokens || p.pooling_mode_mean_sqrt_len_tokens {
                    return Err(BertError::Config { path, what: "only mean-token pooling (pooling_mode_mean_tokens alone) is supported".into() });
                }
            }
            other => {
                return Err(BertError::Config { path: modules_path.clone(), what: format!("module type `{other}` is not supported (Transformer, Pooling, Normalize are)") });
            }
        }
    }
    Ok(Pooling { normalize })
}

impl SentenceEncoder {
    /// Reads the model folder, builds the graph, compiles it on `session` and loads the weights.
    pub fn load(dir: impl AsRef<Path>, session: &Session) -> Result<SentenceEncoder, BertError> {
        SentenceEncoder::load_in(dir, session, DType::F32)
    }

    /// [`SentenceEncoder::load`] computing in `compute` ([`BertConfig::build_in`]).
    pub fn load_in(dir: impl AsRef<Path>, session: &Session, compute: DType) -> Result<SentenceEncoder, BertError> {
        let dir = dir.as_ref();
        let config = BertConfig::from_file(dir.join("config.json"))?;
        let pooling = read_pooling(dir)?;
        let tokenizer = WordPiece::from_file(dir.join("tokenizer.json"))?;
        let st_config = dir.join("sentence_bert_config.json");
        let max_len = if st_config.exists() { read_json::<SentenceBertConfig>(&st_config)?.max_seq_length } else { config.max_position_embeddings };
        let max_len = max_len.min(config.max_position_embeddings);
        let weights = SafetensorsFile::open(dir.join("model.safetensors"))?;
        let bert = config.build_in(pooling, compute)?;
        let mut compiled = session.compile(&bert.graph)?;
        for (name, t) in bert.weights(&weights)? {
            compiled.set_param(&name, t)?;
        }
        Ok(SentenceEncoder { bert, tokenizer, max_len, compiled })
    }

    /// One embedding per text, each `hidden_size` long.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, BertError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let e = self.tokenizer.encode_batch(texts, self.max_len);
        let shape = [e.batch, e.seq];
        let ids = Tensor::from_vec(e.input_ids, &shape)?;
        let mask = Tensor::from_vec(e.attention_mask, &shape)?;
        let types = Tensor::from_vec(e.token_type_ids, &shape)?;
        let out = self.compiled.run(&[(INPUT_IDS, &ids), (ATTENTION_MASK, &mask), (TOKEN_TYPE_IDS, &types)])?;
        let flat = out[0].to_vec::<f32>()?;
        Ok(flat.chunks_exact(self.bert.config.hidden_size).map(<[f32]>::to_vec).collect())
    }

    /// The compiled graph (for running pre-tokenised batches directly).
    pub fn compiled(&mut self) -> &mut CompiledGraph {
        &mut self.compiled
    }
}
