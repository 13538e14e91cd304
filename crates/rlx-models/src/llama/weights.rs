//! A decoder's tensors by GGUF name: F32 vectors and matrices, or raw ggml blocks that the
//! graph multiplies without dequantizing them whole.

use crate::error::{ModelError, Result};
use rlx_io::{GgmlType, GgufFile};
use rlx_ir::ops::quant::{gguf, GgufType};
use rlx_ir::DType;
use rlx_runtime::Tensor;
use std::collections::HashMap;

/// One stored tensor. Shapes are row-major, outermost first: a weight is `[n, k]`.
#[derive(Clone, Debug)]
pub enum Stored {
    F32(Tensor),
    /// Whole ggml blocks along each row of `shape`, as a rank-1 U8 tensor.
    Blocks { ty: GgufType, shape: Vec<usize>, bytes: Tensor },
}

/// Tensors by name.
#[derive(Clone, Debug, Default)]
pub struct Weights {
    tensors: HashMap<String, Stored>,
    /// Where they came from, for error messages.
    origin: String,
}

impl Weights {
    /// An empty set; `insert` fills it (random test models).
    pub fn new(origin: &str) -> Weights {
        Weights { tensors: HashMap::new(), origin: origin.into() }
    }

    pub fn insert(&mut self, name: &str, t: Stored) {
        self.tensors.insert(name.into(), t);
    }

    /// Every tensor of `gguf`: block types kept as bytes, F16/BF16/F64 widened to F32.
    /// `progress` is called with (tensors read, total).
    pub fn from_gguf(gguf: &GgufFile, mut progress: impl FnMut(usize, usize)) -> Result<Weights> {
        let mut w = Weights::new(&gguf.path().display().to_string());
        let infos = gguf.tensors();
        for (i, info) in infos.iter().enumerate() {
            let stored = match info.ty {
                GgmlType::Block(ty) => {
                    let t = gguf.tensor(&info.name)?;
                    Stored::Blocks { ty, shape: info.shape.clone(), bytes: Tensor::from_bytes(DType::U8, &[t.bytes.len()], t.bytes)? }
                }
                GgmlType::Plain(_) => Stored::F32(gguf.dequantize(&info.name)?),
            };
            w.insert(&info.name, stored);
            progress(i + 1, infos.len());
        }
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
            Stored::Blocks { ty, .. } => Err(self.error(name, &format!("is {ty:?} blocks, expected F32"))),
        }
    }

    /// A `[rows, width]` table as F32 for `Gather` (the token embedding), decoded block by block.
    pub fn embedding_table(&self, name: &str) -> Result<Tensor> {
        match self.get(name)? {
            Stored::F32(t) => Ok(t.clone()),
            Stored::Blocks { ty, shape, bytes } => {
                let mut out = Tensor::zeros(DType::F32, shape);
                let y = out.as_mut_slice::<f32>()?;
                gguf::dequantize_row(*ty, bytes.bytes(), y).map_err(|e| self.error(name, &e))?;
                Ok(out)
            }
        }
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
