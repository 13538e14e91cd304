//! Sources: runtime inputs, parameters and constants (OPS.md §2).

use super::{Arity, OpDef};
use crate::TensorType;
use serde::{Deserialize, Serialize};

/// A runtime-fed tensor, bound by `name`. Its type may hold symbolic dims.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Input {
    pub name: String,
    pub ty: TensorType,
}

/// A named weight supplied with the model; the trainable leaves of autodiff.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    pub ty: TensorType,
}

/// Literal data: little-endian bytes of `ty`, row-major; `ty` must be static and
/// `data.len()` must equal its byte size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Constant {
    pub ty: TensorType,
    pub data: Vec<u8>,
}

impl OpDef for Input {
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![self.ty.clone()])
    }
}

impl OpDef for Param {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        self.ty.shape.bind(sizes);
    }
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![self.ty.clone()])
    }
}

impl OpDef for Constant {
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let numel = self
            .ty
            .shape
            .numel()
            .ok_or_else(|| format!("constant of type {} must have a static shape", self.ty))?;
        let want = numel * self.ty.dtype.size();
        if self.data.len() != want {
            return Err(format!(
                "constant of type {} needs {want} bytes, got {}",
                self.ty,
                self.data.len()
            ));
        }
        Ok(vec![self.ty.clone()])
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Graph, TensorType};

    #[test]
    fn constant_checks_its_byte_count() {
        let mut g = Graph::new();
        assert!(g.constant_f32(&[2], &[1.0, 2.0]).is_ok());
        let err = g.constant(TensorType::of(DType::F32, &[3]), vec![0; 8]).unwrap_err();
        assert_eq!(err.to_string(), "Constant(): constant of type f32[3] needs 12 bytes, got 8");
    }

    #[test]
    fn inputs_and_params_are_listed_by_name() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F32, &[2]));
        let w = g.param("w", TensorType::of(DType::F32, &[2]));
        assert_eq!(g.inputs(), vec![("x", x)]);
        assert_eq!(g.params(), vec![("w", w)]);
    }
}
