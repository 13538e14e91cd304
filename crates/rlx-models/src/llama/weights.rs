//! A decoder's tensors by GGUF name: F32 vectors and matrices, or ggml blocks left in the
//! memory-mapped model file, which the graph multiplies (and gathers embedding rows from)
//! without dequantizing them whole.

use super::LlamaConfig;
use crate::error::{ModelError, Result};
use rlx_io::{GgmlType, GgufFile};
use rlx_ir::ops::quant::GgufType;
use rlx_ir::DType;
use rlx_runtime::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// One stored tensor. Shapes are row-major, outermost first: a weight is `[n, k]`.
#[derive(Clone, Debug)]
pub enum Stored {
    F32(Tensor),
    /// Whole ggml blocks along each row of `shape`, in the weights' GGUF file.
    Blocks { ty: GgufType, shape: Vec<usize> },
    /// Seeded pseudo-random weights of `shape` (models of a config's shape for benchmarks and
    /// tests), made when the graph is built, in the layout and dtype it takes: element `i` of
    /// the row-major tensor is `scale·u(seed, i)` with `u` uniform in [−1, 1), or with
    /// `blocks` random ggml blocks of that type.
    Random { shape: Vec<usize>, seed: u64, scale: f32, blocks: Option<GgufType> },
}

/// Tensors by name.
#[derive(Clone, Default)]
pub struct Weights {
    tensors: HashMap<String, Stored>,
    /// Where they came from, for error messages.
    origin: String,
    /// The mapped file the blocks lie in.
    file: Option<Arc<GgufFile>>,
}

/// A tensor's ggml blocks in a mapped GGUF file, as the `[rows, row_bytes]` U8 matrix a graph
/// parameter holds.
#[derive(Clone)]
pub struct MappedBlocks {
    pub file: Arc<GgufFile>,
    pub tensor: String,
    pub dims: [usize; 2],
}

impl MappedBlocks {
    /// The blocks, borrowed from the map.
    pub fn bytes(&self) -> Result<&[u8]> {
        Ok(self.file.tensor(&self.tensor)?.bytes)
    }

    /// Drops the blocks' pages from resident memory once a backend holds a copy.
    pub fn release(&self) -> Result<()> {
        Ok(self.file.release(&self.tensor)?)
    }
}

impl Weights {
    /// An empty set; `insert` fills it (random test models).
    pub fn new(origin: &str) -> Weights {
        Weights { tensors: HashMap::new(), origin: origin.into(), file: None }
    }

    pub fn insert(&mut self, name: &str, t: Stored) {
        self.tensors.insert(name.into(), t);
    }

    /// Every tensor of `gguf`: block types left in the file, F16/BF16/F64 widened to F32
    /// (their pages in the file released).
    /// `progress` is called with (tensors read, total).
    pub fn from_gguf(gguf: Arc<GgufFile>, mut progress: impl FnMut(usize, usize)) -> Result<Weights> {
        let mut w = Weights::new(&gguf.path().display().to_string());
        let infos = gguf.tensors();
        for (i, info) in infos.iter().enumerate() {
            let stored = match info.ty {
                GgmlType::Block(ty) => Stored::Blocks { ty, shape: info.shape.clone() },
                GgmlType::Plain(_) => {
                    let t = gguf.dequantize(&info.name)?;
                    gguf.release(&info.name)?;
                    Stored::F32(t)
                }
            };
            w.insert(&info.name, stored);
            progress(i + 1, infos.len());
        }
        w.file = Some(gguf);
        Ok(w)
    }

    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn get(&self, name: &str) -> Result<&Stored> {
        self.tensors.get(name).ok_or_else(|| self.error(name, "is missing"))
    }

    /// An F32 tensor (norm gains, biases); block-quantized ones are refused.
    pub fn f32(&self, name: &str) -> Result<Tensor> {
        match self.get(name)? {
            Stored::F32(t) => Ok(t.clone()),
            Stored::Random { shape, seed, scale, blocks: None } => random_dense(shape, *seed, *scale, false, DType::F32),
            Stored::Blocks { ty, .. } | Stored::Random { blocks: Some(ty), .. } => Err(self.error(name, &format!("is {ty:?} blocks, expected F32"))),
        }
    }

    /// Random weights of `config`'s shape under GGUF names (seeded; tied embeddings, no
    /// biases): matrices `scale`d to `1/√k`, as random `blocks` of that type when given;
    /// RMSNorm gains 1.
    pub fn random(config: &LlamaConfig, seed: u64, blocks: Option<GgufType>) -> Weights {
        let c = config;
        let mut w = Weights::new("random weights");
        let matrix = |w: &mut Weights, name: &str, n: usize, k: usize| {
            let salt = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
            w.insert(name, Stored::Random { shape: vec![n, k], seed: seed ^ salt, scale: 1.0 / (k as f32).sqrt(), blocks });
        };
        let ones = |d: usize| Stored::F32(Tensor::from_vec(vec![1f32; d], &[d]).expect("a vector of d ones"));
        matrix(&mut w, "token_embd.weight", c.vocab, c.d_model);
        w.insert("output_norm.weight", ones(c.d_model));
        let (q, kv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        for l in 0..c.layers {
            let p = |n: &str| format!("blk.{l}.{n}");
            w.insert(&p("attn_norm.weight"), ones(c.d_model));
            w.insert(&p("ffn_norm.weight"), ones(c.d_model));
            for (name, n, k) in [("attn_q", q, c.d_model), ("attn_k", kv, c.d_model), ("attn_v", kv, c.d_model), ("attn_output", c.d_model, q)] {
                matrix(&mut w, &p(&format!("{name}.weight")), n, k);
            }
            for (name, n, k) in [("ffn_gate", c.d_ff, c.d_model), ("ffn_up", c.d_ff, c.d_model), ("ffn_down", c.d_model, c.d_ff)] {
                matrix(&mut w, &p(&format!("{name}.weight")), n, k);
            }
        }
        w
    }

    /// The blocks of the `[n, k]` weight `name` (of type `ty`), where they lie in the file; an
    /// `[E, n, k]` expert stack as its `E·n` rows.
    pub(super) fn blocks(&self, name: &str, ty: GgufType, shape: &[usize]) -> Result<MappedBlocks> {
        let file = self.file.clone().ok_or_else(|| self.error(name, "is ggml blocks outside a GGUF file"))?;
        let (n, k) = match *shape {
            [n, k] => (n, k),
            [e, n, k] => (e * n, k),
            _ => return Err(self.error(name, &format!("is {ty:?} blocks of shape {shape:?}, expected a matrix or a stack of them"))),
        };
        let row = ty.row_bytes(k).map_err(|e| self.error(name, &e))?;
        Ok(MappedBlocks { file, tensor: name.to_string(), dims: [n, row] })
    }

    fn error(&self, name: &str, what: &str) -> ModelError {
        ModelError::Tensor { file: self.origin.clone(), tensor: name.into(), reason: what.into() }
    }
}

/// A row-major `[n, k]` F32 matrix as `[k, n]`.
pub(super) fn transposed(t: &Tensor) -> std::result::Result<Tensor, String> {
    let &[n, k] = t.shape() else { return Err(format!("expected a matrix, got shape {:?}", t.shape())) };
    let src = t.as_slice::<f32>().map_err(|e| e.to_string())?;
    let mut out = vec![0f32; n * k];
    for (j, row) in src.chunks_exact(k.max(1)).enumerate() {
        for (i, &v) in row.iter().enumerate() {
            out[i * n + j] = v;
        }
    }
    Tensor::from_vec(out, &[k, n]).map_err(|e| e.to_string())
}

/// `u(seed, i)`: SplitMix64 of `seed + i`, as a float uniform in [−1, 1).
fn uniform(seed: u64, i: u64) -> f32 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// Fills `out` (`width` bytes per element) with `f(i)` for each element index `i`, on all cores.
fn fill_parallel(out: &mut [u8], width: usize, f: &(dyn Fn(usize, &mut [u8]) + Sync)) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = (out.len() / width).div_ceil(threads).max(1) * width;
    std::thread::scope(|s| {
        for (c, chunk) in out.chunks_mut(per).enumerate() {
            s.spawn(move || {
                for (j, e) in chunk.chunks_exact_mut(width).enumerate() {
                    f(c * per / width + j, e);
                }
            });
        }
    });
}

/// The random `[n, k]` matrix of [`Stored::Random`] as F32 or BF16, transposed to `[k, n]`
/// when `transpose` (element `(j, i)` is then the `[n, k]` tensor's `(i, j)`).
pub(super) fn random_dense(shape: &[usize], seed: u64, scale: f32, transpose: bool, dtype: DType) -> Result<Tensor> {
    let dims: Vec<usize> = if transpose { shape.iter().rev().copied().collect() } else { shape.to_vec() };
    let mut t = Tensor::zeros(dtype, &dims);
    let cols = *dims.last().unwrap_or(&1);
    let rows = *dims.first().unwrap_or(&1);
    let source = |e: usize| -> u64 {
        match transpose {
            true => ((e % cols) * rows + e / cols) as u64,
            false => e as u64,
        }
    };
    match dtype {
        DType::F32 => fill_parallel(t.bytes_mut(), 4, &|e, b| b.copy_from_slice(&(scale * uniform(seed, source(e))).to_le_bytes())),
        DType::BF16 => fill_parallel(t.bytes_mut(), 2, &|e, b| b.copy_from_slice(&half::bf16::from_f32(scale * uniform(seed, source(e))).to_le_bytes())),
        d => return Err(ModelError::Unsupported(format!("random weights in {d}: F32 and BF16 are made"))),
    }
    Ok(t)
}

/// Random ggml blocks of `ty` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K) for an
/// `[n, k]` matrix as the `[n, row_bytes]` U8 tensor a graph parameter holds: random codes
/// (and K-quant sub-block scales), f16 scales that make weights of about `scale`, Q4_1/Q5_1
/// minimums near `−scale`, K-quant minimums that centre the codes.
pub fn random_blocks(shape: &[usize], seed: u64, scale: f32, ty: GgufType) -> Result<Tensor> {
    let &[n, k] = shape else { return Err(ModelError::Unsupported(format!("random {ty:?} blocks of shape {shape:?}: a matrix is needed"))) };
    let row = ty.row_bytes(k).map_err(ModelError::Unsupported)?;
    let bytes = ty.block_bytes();
    // Per type: where its f16 scale and (for the types with one) its minimum sit, and the scale
    // over `scale` that keeps the values about that size; every other byte is random codes
    // (and the K-quants' sub-block scales).
    let (d_at, m_at, d_per_scale) = match ty {
        GgufType::Q4_0 => (0, None, 1.0 / 8.0),
        GgufType::Q8_0 => (0, None, 1.0 / 127.0),
        GgufType::Q4_1 => (0, Some(2), 1.0 / 8.0),
        GgufType::Q5_0 => (0, None, 1.0 / 16.0),
        GgufType::Q5_1 => (0, Some(2), 1.0 / 16.0),
        GgufType::Q4_K => (0, Some(2), 1.0 / 120.0),
        GgufType::Q5_K => (0, Some(2), 1.0 / 240.0),
        GgufType::Q6_K => (208, None, 1.0 / 1024.0),
        t => return Err(ModelError::Unsupported(format!("random {t:?} blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K are made"))),
    };
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    let mut t = Tensor::zeros(DType::U8, &[n, row]);
    fill_parallel(t.bytes_mut(), bytes, &|b, out| {
        let u = |j: u64| uniform(seed, (b as u64) * 512 + j);
        for (j, q) in out.iter_mut().enumerate() {
            *q = ((u(2 + j as u64) + 1.0) * 128.0) as u8;
        }
        let d = scale * d_per_scale * (0.75 + 0.25 * u(0).abs());
        out[d_at..d_at + 2].copy_from_slice(&f16(d));
        if let Some(at) = m_at {
            // K-quants subtract `dmin·m` (codes' mean times d); Q4_1/Q5_1 add `m`.
            let m = match ty {
                GgufType::Q4_K => 7.5 * d,
                GgufType::Q5_K => 15.5 * d,
                _ => -scale * (0.9 + 0.1 * u(1)),
            };
            out[at..at + 2].copy_from_slice(&f16(m));
        }
    });
    Ok(t)
}
