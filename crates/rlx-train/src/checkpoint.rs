//! Checkpoints: one safetensors file with every parameter and optimizer-state slot of a
//! [`Trainer`] under its own name, and the step count in the metadata.

use crate::{Result, TrainError, Trainer};
use rlx_ir::DType;
use rlx_runtime::Tensor;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

const STEP_KEY: &str = "rlx.step";

fn st_dtype(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        _ => return None,
    })
}

fn rlx_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        _ => return None,
    })
}

impl Trainer {
    /// Writes every parameter and state slot, and the step count, to `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let fail = |msg: String| TrainError::Checkpoint { path: path.display().to_string(), msg };
        let tensors: Vec<(String, Tensor)> =
            self.updated().iter().map(|n| Ok((n.clone(), self.param(n)?))).collect::<Result<_>>()?;
        let mut views = Vec::with_capacity(tensors.len());
        for (name, t) in &tensors {
            let dtype = st_dtype(t.dtype()).ok_or_else(|| fail(format!("`{name}` is {}, which checkpoints do not store", t.dtype())))?;
            let view = TensorView::new(dtype, t.shape().to_vec(), t.bytes()).map_err(|e| fail(e.to_string()))?;
            views.push((name.clone(), view));
        }
        let meta = HashMap::from([(STEP_KEY.to_string(), self.steps().to_string())]);
        safetensors::serialize_to_file(views, &Some(meta), path).map_err(|e| fail(e.to_string()))
    }

    /// Restores what [`Trainer::save`] wrote; every parameter and state slot of this trainer
    /// must be in the file with its type.
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let fail = |msg: String| TrainError::Checkpoint { path: path.display().to_string(), msg };
        let bytes = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
        let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| fail(e.to_string()))?;
        let step: u64 = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get(STEP_KEY))
            .ok_or_else(|| fail(format!("no `{STEP_KEY}` entry in the metadata")))?
            .parse()
            .map_err(|e| fail(format!("`{STEP_KEY}`: {e}")))?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| fail(e.to_string()))?;
        for name in self.updated().to_vec() {
            let v = st.tensor(&name).map_err(|_| fail(format!("no tensor `{name}`")))?;
            let dtype = rlx_dtype(v.dtype()).ok_or_else(|| fail(format!("`{name}` has unsupported dtype {:?}", v.dtype())))?;
            let t = Tensor::from_bytes(dtype, v.shape(), v.data()).map_err(|e| fail(format!("`{name}`: {e}")))?;
            self.set_param(&name, t)?;
        }
        self.set_steps(step);
        Ok(())
    }
}
