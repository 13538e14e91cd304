//! The unrolled ssm decompositions compute what the native kernels compute.

mod common;

use common::{assert_close, randn, run, run_decomposed};
use rlx_ir::{DType, Graph, OpKind, TensorType, ValueId};
use rlx_runtime::Tensor;

/// How an operand's random values are shaped into the range callers prepare.
#[derive(Clone, Copy)]
enum Range {
    /// ±[0.1, 2).
    Any,
    /// (0.05, 1]: softplus'ed steps, beta.
    Positive,
    /// [−2, −0.1): A = −exp(A_log), log-gates.
    Negative,
}

struct Case {
    g: Graph,
    data: Vec<(String, Tensor)>,
}

impl Case {
    fn new() -> Case {
        Case { g: Graph::new(), data: Vec::new() }
    }

    fn input(&mut self, name: &str, dims: &[usize], range: Range) -> ValueId {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = randn(n, 11 + self.data.len() as u64)
            .into_iter()
            .map(|x| match range {
                Range::Any => x,
                Range::Positive => x.abs() / 2.0,
                Range::Negative => -x.abs(),
            })
            .collect();
        self.data.push((name.to_string(), Tensor::from_vec(v, dims).unwrap()));
        self.g.input(name, TensorType::of(DType::F32, dims))
    }

    fn check(mut self, outs: Vec<ValueId>, kind: OpKind) {
        self.g.set_outputs(outs).unwrap();
        let named: Vec<(&str, &Tensor)> = self.data.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let native = run(&self.g, &named);
        let lowered = run_decomposed(&self.g, kind, &named);
        for (x, y) in lowered.iter().zip(&native) {
            assert_close(x, y, 1e-4, 1e-5);
        }
    }
}

#[test]
fn selective_scan_matches_its_kernel() {
    use Range::*;
    let (b, s, hd, n) = (2, 6, 5, 3);
    let mut c = Case::new();
    let x = c.input("x", &[b, s, hd], Any);
    let delta = c.input("delta", &[b, s, hd], Positive);
    let a = c.input("a", &[hd, n], Negative);
    let bm = c.input("b", &[b, s, n], Any);
    let cm = c.input("c", &[b, s, n], Any);
    let y = c.g.selective_scan(x, delta, a, bm, cm).unwrap();
    c.check(vec![y], OpKind::SelectiveScan);
}

#[test]
fn mamba2_matches_its_kernel() {
    use Range::*;
    let (b, s, hh, p, n) = (2, 5, 3, 4, 6);
    let mut c = Case::new();
    let x = c.input("x", &[b, s, hh, p], Any);
    let dt = c.input("dt", &[b, s, hh], Positive);
    let a = c.input("a", &[hh], Negative);
    let bm = c.input("b", &[b, s, hh, n], Any);
    let cm = c.input("c", &[b, s, hh, n], Any);
    let y = c.g.mamba2(x, dt, a, bm, cm).unwrap();
    c.check(vec![y], OpKind::Mamba2);
}

#[test]
fn gated_delta_net_matches_its_kernel() {
    use Range::*;
    let (b, s, hv, n) = (2, 6, 2, 4);
    let mut c = Case::new();
    let q = c.input("q", &[b, s, hv, n], Any);
    let k = c.input("k", &[b, s, hv, n], Any);
    let v = c.input("v", &[b, s, hv, n], Any);
    let g = c.input("g", &[b, s, hv], Negative);
    let gc = c.input("g_channel", &[b, s, hv, n], Negative);
    let beta = c.input("beta", &[b, s, hv], Positive);
    let st = c.input("state", &[b, hv, n, n], Any);
    // Unnormalized q/k of magnitude up to 2 would let the state grow; scale them down.
    let quarter = c.g.constant_f32(&[1], &[0.25]).unwrap();
    let (q, k) = (
        c.g.binary(rlx_ir::ops::elementwise::BinaryOp::Mul, q, quarter).unwrap(),
        c.g.binary(rlx_ir::ops::elementwise::BinaryOp::Mul, k, quarter).unwrap(),
    );
    let o1 = c.g.gated_delta_net(q, k, v, g, beta, None, false).unwrap();
    let o2 = c.g.gated_delta_net(q, k, v, gc, beta, Some(st), true).unwrap();
    c.check(vec![o1, o2], OpKind::GatedDeltaNet);
}
