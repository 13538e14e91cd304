//! Mixed precision as a graph transform, as PyTorch's autocast does it: products (matmuls and
//! attention) take their f32 operands cast to a 16-bit float and give their result back in
//! f32, so norms, softmax, the loss and every parameter stay f32, and autodiff's rule for
//! `Cast` brings each gradient back to its parameter's f32.

use crate::{Result, TrainError};
use rlx_ir::{DType, Graph, Op, ValueId};
use rlx_opt::rewrite::Rewriter;
use std::collections::HashMap;

/// The dtypes a training step computes in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// Everything in the model's own dtypes.
    #[default]
    Full,
    /// Matmuls and attention in this 16-bit float (f32 accumulation where the backend has it),
    /// everything else, parameters and optimizer state in f32.
    Mixed(DType),
}

impl Precision {
    /// bf16 products with f32 master weights.
    pub fn bf16() -> Precision {
        Precision::Mixed(DType::BF16)
    }

    /// `g` rewritten to compute in this precision (unchanged for [`Precision::Full`]).
    pub fn apply(self, g: &Graph) -> Result<Graph> {
        match self {
            Precision::Full => Ok(g.clone()),
            Precision::Mixed(low @ (DType::BF16 | DType::F16)) => autocast(g, low),
            Precision::Mixed(d) => Err(TrainError::Config(format!("mixed precision computes in bf16 or f16, not {d}"))),
        }
    }
}

/// How many leading operands of `op` are the product's own (cast to the low dtype): both of a
/// matmul, q, k, v of attention (whose float mask or bias follows q's dtype); 0 for the rest.
fn product_operands(op: &Op) -> usize {
    match op {
        Op::MatMul(_) => 2,
        Op::Attention(_) => 3,
        _ => 0,
    }
}

/// Every f32 matmul and attention of `g` computed in `low`. Each value is cast down once, and a
/// product that reads another product's result takes its `low` value as it came, without the
/// round trip through f32.
fn autocast(g: &Graph, low: DType) -> Result<Graph> {
    let mut rw = Rewriter::new(g);
    let mut low_of: HashMap<ValueId, ValueId> = HashMap::new();
    for id in g.node_ids() {
        let node = g.node(id);
        let own = product_operands(&node.op);
        let f32_product = own > 0 && node.outputs.len() == 1 && node.outputs[0].dtype == DType::F32
            && node.inputs[..own].iter().all(|&v| g.ty(v).dtype == DType::F32);
        if !f32_product {
            rw.keep(id);
            continue;
        }
        let mut ins = rw.inputs(id);
        for v in ins.iter_mut() {
            if rw.built().ty(*v).dtype != DType::F32 {
                continue;
            }
            *v = match low_of.get(v) {
                Some(&l) => l,
                None => {
                    let l = rw.graph().cast(*v, low)?;
                    low_of.insert(*v, l);
                    l
                }
            };
        }
        let y = rw.graph().add1(node.op.clone(), &ins)?;
        let up = rw.graph().cast(y, DType::F32)?;
        low_of.insert(up, y);
        rw.replace(id, vec![up])?;
    }
    Ok(rw.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::text::parse;

    #[test]
    fn products_compute_in_bf16_and_hand_back_f32() {
        let g = parse(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,4]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[4,4]))()
            %2 = Param(name:"v",ty:(dtype:F32,shape:[4,3]))()
            %3 = MatMul()(%0, %1)
            %4 = MatMul()(%3, %2)
            %5 = MatMul()(%0, %2)
            %6 = Activation(kind:Tanh)(%4)
            return %6, %5"#,
        )
        .unwrap();
        let mixed = Precision::bf16().apply(&g).unwrap();
        let want = parse(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,4]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[4,4]))()
            %2 = Param(name:"v",ty:(dtype:F32,shape:[4,3]))()
            %3 = Cast(to:BF16)(%0)
            %4 = Cast(to:BF16)(%1)
            %5 = MatMul()(%3, %4)
            %6 = Cast(to:F32)(%5)
            %7 = Cast(to:BF16)(%2)
            %8 = MatMul()(%5, %7)
            %9 = Cast(to:F32)(%8)
            %10 = MatMul()(%3, %7)
            %11 = Cast(to:F32)(%10)
            %12 = Activation(kind:Tanh)(%9)
            return %12, %11"#,
        )
        .unwrap();
        assert_eq!(mixed.to_string(), want.to_string());
    }

    #[test]
    fn only_16_bit_floats_are_mixed_in() {
        let g = parse(r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2]))()
            return %0"#).unwrap();
        let err = Precision::Mixed(DType::F64).apply(&g).unwrap_err().to_string();
        assert!(err.contains("f64"), "{err}");
    }
}
