//! A decoder's tensors by GGUF name: F32 vectors and matrices, or ggml blocks left in the
//! memory-mapped model file, which the graph multiplies (and gathers embedding rows from)
//! without dequantizing them whole.

use crate::error::{ModelError, Result};
use rlx_io::{GgmlType, GgufFile};
use rlx_ir::ops::quant::GgufType;
use rlx_runtime::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// One stored tensor. Shapes are row-major, outermost first: a weight is `[n, k]`.
#[derive(Clone, Debug)]
pub enum Stored {
    F32(Tensor),
    /// Whole ggml blocks along each row of `shape`, in the weights' GGUF file.
    Blocks { ty: GgufType, shape: Vec<usize> },
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
            Stored::Blocks { ty, .. } => Err(self.error(name, &format!("is {ty:?} blocks, expected F32"))),
        }
    }

    /// The blocks of the `[n, k]` weight `name` (of type `ty`), where they lie in the file.
    pub(super) fn blocks(&self, name: &str, ty: GgufType, shape: &[usize]) -> Result<MappedBlocks> {
        let file = self.file.clone().ok_or_else(|| self.error(name, "is ggml blocks outside a GGUF file"))?;
        let &[n, k] = shape else { return Err(self.error(name, &format!("is {ty:?} blocks of shape {shape:?}, expected a matrix"))) };
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
