//! Constant folding with the CPU kernels, lent to rlx-opt's folding pass.

use crate::dispatch;
use crate::supported::CpuClaims;
use crate::view::{In, Out};
use rlx_ir::ops::source::Constant;
use rlx_ir::{DType, Op, TensorType};
use rlx_opt::fold::ConstEval;
use rlx_opt::{Claim, Claims};
use rlx_runtime::Tensor;

pub struct CpuConstEval;

impl ConstEval for CpuConstEval {
    fn eval(&self, op: &Op, inputs: &[&Constant], outputs: &[TensorType]) -> Option<Vec<Vec<u8>>> {
        let dtypes: Vec<DType> = inputs.iter().map(|c| c.ty.dtype).collect();
        if CpuClaims.claim(op, &dtypes) != Claim::Native {
            return None;
        }
        let ins: Vec<(Tensor, Vec<usize>)> = inputs
            .iter()
            .map(|c| {
                let dims = c.ty.shape.as_static()?;
                Some((Tensor::from_bytes(c.ty.dtype, &dims, &c.data).ok()?, dims))
            })
            .collect::<Option<_>>()?;
        let mut outs: Vec<(Tensor, Vec<usize>)> = outputs
            .iter()
            .map(|t| {
                let dims = t.shape.as_static()?;
                Some((Tensor::zeros(t.dtype, &dims), dims))
            })
            .collect::<Option<_>>()?;
        let in_views: Vec<In> = ins.iter().map(|(t, d)| In { dtype: t.dtype(), dims: d, bytes: t.bytes() }).collect();
        let mut out_views: Vec<Out> = outs
            .iter_mut()
            .map(|(t, d)| Out { dtype: t.dtype(), dims: d, bytes: t.bytes_mut() })
            .collect();
        dispatch::run(op, &in_views, &mut out_views).ok()?;
        Some(outs.into_iter().map(|(t, _)| t.bytes().to_vec()).collect())
    }
}
