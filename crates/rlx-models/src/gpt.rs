//! A GPT-style decoder-only transformer (pre-norm blocks of causal multi-head attention and a
//! GELU MLP, learned position embeddings, an untied output head), as in GPT-2 without biases
//! on the projections. Token ids come in as `tokens [B, T]`, next-token ids as `targets [B, T]`.

use crate::ParamSpec;
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, Result, Shape, TensorType, ValueId};
use rlx_train::Init;

/// The architecture's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GptConfig {
    pub vocab: usize,
    /// Context length: every sequence fed in has exactly this many tokens.
    pub context: usize,
    pub d_model: usize,
    pub heads: usize,
    pub layers: usize,
    /// Hidden width of each MLP.
    pub d_ff: usize,
}

/// A built model: the graph, its named values and how to initialise each parameter.
pub struct Gpt {
    pub graph: Graph,
    /// `[B, T, vocab]` next-token logits.
    pub logits: ValueId,
    /// Mean next-token cross-entropy in nats (a scalar).
    pub loss: ValueId,
    pub params: Vec<ParamSpec>,
}

/// Names of the graph inputs.
pub const TOKENS: &str = "tokens";
pub const TARGETS: &str = "targets";

impl GptConfig {
    /// Builds the model with a symbolic batch; outputs are `[logits, loss]`.
    pub fn build(&self) -> Result<Gpt> {
        let GptConfig { vocab, context, d_model: d, heads, layers, d_ff } = *self;
        let mut b = Builder { g: Graph::new(), params: Vec::new() };
        let rows = Shape(vec![Dim::sym("B"), Dim::Static(context)]);
        let tokens = b.g.input(TOKENS, TensorType::new(DType::I64, rows.clone()));
        let targets = b.g.input(TARGETS, TensorType::new(DType::I64, rows));
        let small = Init::Normal(0.02);
        // GPT-2 scales the projections into the residual stream by 1/√(2·layers).
        let residual = Init::Normal(0.02 / (2.0 * layers as f32).sqrt());
        let tok_emb = b.param("tok_emb", &[vocab, d], small);
        let pos_emb = b.param("pos_emb", &[context, d], small);
        let x = b.g.gather(tok_emb, tokens, 0)?;
        let mut x = b.g.binary(BinaryOp::Add, x, pos_emb)?;
        for l in 0..layers {
            let h = b.layer_norm(&format!("h{l}.ln1"), x, d)?;
            let (wq, wk, wv) = (b.param(&format!("h{l}.wq"), &[d, d], small), b.param(&format!("h{l}.wk"), &[d, d], small), b.param(&format!("h{l}.wv"), &[d, d], small));
            let (q, k, v) = (b.g.matmul(h, wq)?, b.g.matmul(h, wk)?, b.g.matmul(h, wv)?);
            let a = b.g.attention(Attention::new(heads, d / heads, MaskKind::Causal), q, k, v, None)?;
            let wo = b.param(&format!("h{l}.wo"), &[d, d], residual);
            let a = b.g.matmul(a, wo)?;
            x = b.g.binary(BinaryOp::Add, x, a)?;
            let h = b.layer_norm(&format!("h{l}.ln2"), x, d)?;
            let w1 = b.param(&format!("h{l}.w1"), &[d, d_ff], small);
            let b1 = b.param(&format!("h{l}.b1"), &[d_ff], Init::Zeros);
            let up = b.g.matmul(h, w1)?;
            let up = b.g.binary(BinaryOp::Add, up, b1)?;
            let up = b.g.activation(ActivationKind::Gelu, up)?;
            let w2 = b.param(&format!("h{l}.w2"), &[d_ff, d], residual);
            let down = b.g.matmul(up, w2)?;
            x = b.g.binary(BinaryOp::Add, x, down)?;
        }
        let h = b.layer_norm("ln_f", x, d)?;
        let head = b.param("head", &[d, vocab], small);
        let logits = b.g.matmul(h, head)?;
        let per_token = b.g.softmax_cross_entropy_with_logits(logits, targets, None)?;
        let loss = b.g.reduce(ReduceOp::Mean, per_token, &[0, 1], false)?;
        b.g.set_outputs(vec![logits, loss])?;
        Ok(Gpt { graph: b.g, logits, loss, params: b.params })
    }

    /// Number of trainable scalars.
    pub fn parameter_count(&self) -> usize {
        let GptConfig { vocab, context, d_model: d, layers, d_ff, .. } = *self;
        vocab * d + context * d + layers * (4 * d + 4 * d * d + d * d_ff + d_ff + d_ff * d) + 2 * d + d * vocab
    }

    /// Multiply-adds per token of one forward pass, times two (FLOPs), attention included.
    pub fn forward_flops_per_token(&self) -> usize {
        let GptConfig { vocab, context, d_model: d, layers, d_ff, .. } = *self;
        2 * (layers * (4 * d * d + 2 * d * d_ff + context * d) + d * vocab)
    }
}

struct Builder {
    g: Graph,
    params: Vec<ParamSpec>,
}

impl Builder {
    fn param(&mut self, name: &str, shape: &[usize], init: Init) -> ValueId {
        self.params.push(ParamSpec { name: name.to_string(), shape: shape.to_vec(), init });
        self.g.param(name, TensorType::of(DType::F32, shape))
    }

    fn layer_norm(&mut self, name: &str, x: ValueId, d: usize) -> Result<ValueId> {
        let gamma = self.param(&format!("{name}.g"), &[d], Init::Ones);
        let beta = self.param(&format!("{name}.b"), &[d], Init::Zeros);
        self.g.layer_norm(x, gamma, beta, -1, 1e-5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_declared_once_with_their_shapes_and_counted() {
        let cfg = GptConfig { vocab: 11, context: 8, d_model: 16, heads: 2, layers: 2, d_ff: 32 };
        let m = cfg.build().unwrap();
        let declared: usize = m.params.iter().map(|p| p.shape.iter().product::<usize>()).sum();
        assert_eq!(declared, cfg.parameter_count());
        assert_eq!(m.graph.params().len(), m.params.len());
        for p in &m.params {
            let (_, v) = m.graph.params().into_iter().find(|(n, _)| *n == p.name).unwrap();
            assert_eq!(m.graph.ty(v).shape.as_static().unwrap(), p.shape, "{}", p.name);
        }
        assert_eq!(m.graph.ty(m.logits).to_string(), "f32[B, 8, 11]");
    }
}
