//! A small convolutional classifier over NCHW images: 3×3 "same" convolutions with ReLU, one
//! max-pool, ReLU dense layers, then class logits and their mean cross-entropy.

use crate::ParamSpec;
use rlx_ir::ops::conv::{Conv, Pool};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, IrError, Shape, TensorType, ValueId};
use rlx_train::Init;

/// The shape of a [`cnn`]: image size, layer widths and class count.
#[derive(Clone, Debug, PartialEq)]
pub struct CnnConfig {
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    /// Output channels of each 3×3 convolution (stride 1, padding 1), in order.
    pub conv: Vec<usize>,
    /// Window and stride of the max-pool after the convolutions (1: no pooling).
    pub pool: usize,
    /// Widths of the hidden dense layers between the pooled features and the logits.
    pub hidden: Vec<usize>,
    pub classes: usize,
}

impl CnnConfig {
    /// conv 16 → conv 32 → 2×2 max-pool → dense 64 → 10 logits, for 1×8×8 digit images.
    pub fn digits() -> CnnConfig {
        CnnConfig { channels: 1, height: 8, width: 8, conv: vec![16, 32], pool: 2, hidden: vec![64], classes: 10 }
    }
}

/// A built classifier over the input `x` (`f32[batch, C, H, W]`, `batch` symbolic), as two
/// graphs sharing parameter names and value ids.
#[derive(Clone, Debug)]
pub struct Cnn {
    /// Outputs `[logits]`; needs only `x`.
    pub forward: Graph,
    /// `forward` plus the input `labels` (`i64[batch]`); outputs `[loss]`.
    pub train: Graph,
    /// `f32[batch, classes]`, in both graphs.
    pub logits: ValueId,
    /// The mean cross-entropy of `logits` against `labels`, a scalar of `train`.
    pub loss: ValueId,
    /// Every parameter, in creation order, with how to initialise it.
    pub params: Vec<ParamSpec>,
}

/// Builds the classifier `config` describes.
pub fn cnn(config: &CnnConfig) -> rlx_ir::Result<Cnn> {
    let CnnConfig { channels, height, width, pool, classes, .. } = *config;
    if [channels, height, width, pool, classes].contains(&0) || config.conv.contains(&0) || config.hidden.contains(&0) {
        return Err(IrError::Invalid(format!("cnn: every size must be positive, got {config:?}")));
    }
    if height < pool || width < pool {
        return Err(IrError::Invalid(format!("cnn: the {pool}×{pool} pool does not fit a {height}×{width} image")));
    }
    let mut g = Graph::new();
    let mut params = Vec::new();
    let batch = Dim::sym("batch");
    let x_ty = TensorType::new(DType::F32, Shape(vec![batch.clone(), Dim::Static(channels), Dim::Static(height), Dim::Static(width)]));
    let mut h = g.input("x", x_ty);
    let mut param = |g: &mut Graph, name: String, shape: Vec<usize>, init: Init| {
        let v = g.param(&name, TensorType::of(DType::F32, &shape));
        params.push(ParamSpec { name, shape, init });
        v
    };

    let mut c_in = channels;
    for (i, &c_out) in config.conv.iter().enumerate() {
        let he = (2.0 / (c_in * 9) as f32).sqrt();
        let w = param(&mut g, format!("conv{i}.w"), vec![c_out, c_in, 3, 3], Init::Normal(he));
        let b = param(&mut g, format!("conv{i}.b"), vec![c_out, 1, 1], Init::Zeros);
        let conv = Conv { kernel_size: vec![3, 3], stride: vec![1, 1], padding: vec![1, 1], dilation: vec![1, 1], groups: 1 };
        h = g.conv(h, w, conv)?;
        h = g.binary(BinaryOp::Add, h, b)?;
        h = g.activation(ActivationKind::Relu, h)?;
        c_in = c_out;
    }
    let (mut oh, mut ow) = (height, width);
    if pool > 1 {
        h = g.pool(h, Pool { kind: ReduceOp::Max, kernel_size: vec![pool, pool], stride: vec![pool, pool], padding: vec![0, 0] })?;
        (oh, ow) = (height / pool, width / pool);
    }
    let mut features = c_in * oh * ow;
    h = g.reshape_to(h, &Shape(vec![batch, Dim::Static(features)]))?;

    let widths = config.hidden.iter().map(|&n| (n, true)).chain([(classes, false)]);
    for (i, (n, relu)) in widths.enumerate() {
        let init = if relu { Init::Normal((2.0 / features as f32).sqrt()) } else { Init::XavierUniform };
        let w = param(&mut g, format!("dense{i}.w"), vec![features, n], init);
        let b = param(&mut g, format!("dense{i}.b"), vec![n], Init::Zeros);
        h = g.matmul(h, w)?;
        h = g.binary(BinaryOp::Add, h, b)?;
        if relu {
            h = g.activation(ActivationKind::Relu, h)?;
        }
        features = n;
    }
    let logits = h;
    g.set_outputs(vec![logits])?;
    let forward = g.clone();
    let labels = g.input("labels", TensorType::new(DType::I64, Shape(vec![Dim::sym("batch")])));
    let per_row = g.softmax_cross_entropy_with_logits(logits, labels, None)?;
    let loss = g.reduce(ReduceOp::Mean, per_row, &[0], false)?;
    g.set_outputs(vec![loss])?;
    Ok(Cnn { forward, train: g, logits, loss, params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_runtime::{Session, Tensor};
    use rlx_train::init::Rng;
    use std::sync::Arc;

    fn shapes(cnn: &Cnn) -> Vec<(&str, Vec<usize>)> {
        cnn.params.iter().map(|p| (p.name.as_str(), p.shape.clone())).collect()
    }

    #[test]
    fn the_digits_model_has_the_expected_parameters() {
        let cnn = cnn(&CnnConfig::digits()).unwrap();
        let want: Vec<(&str, Vec<usize>)> = vec![
            ("conv0.w", vec![16, 1, 3, 3]),
            ("conv0.b", vec![16, 1, 1]),
            ("conv1.w", vec![32, 16, 3, 3]),
            ("conv1.b", vec![32, 1, 1]),
            ("dense0.w", vec![512, 64]),
            ("dense0.b", vec![64]),
            ("dense1.w", vec![64, 10]),
            ("dense1.b", vec![10]),
        ];
        assert_eq!(shapes(&cnn), want);
        for g in [&cnn.forward, &cnn.train] {
            let in_graph: Vec<(&str, Vec<usize>)> =
                g.params().into_iter().map(|(n, v)| (n, g.ty(v).shape.as_static().unwrap())).collect();
            assert_eq!(in_graph, want);
        }
        assert_eq!(cnn.forward.ty(cnn.logits).to_string(), "f32[batch, 10]");
        assert_eq!(cnn.train.ty(cnn.loss).rank(), 0);
        assert_eq!(cnn.forward.inputs().iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["x"]);
        assert_eq!(cnn.train.inputs().iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["x", "labels"]);
    }

    #[test]
    fn a_zero_size_or_an_oversized_pool_is_an_error() {
        let bad = [CnnConfig { conv: vec![4, 0], ..CnnConfig::digits() }, CnnConfig { pool: 9, ..CnnConfig::digits() }];
        for config in bad {
            assert!(matches!(cnn(&config), Err(IrError::Invalid(_))), "{config:?}");
        }
    }

    /// The classifier in f64 loops: `x` is `[n, c, h, w]` row-major, weights as in the graph.
    fn host_logits(cfg: &CnnConfig, p: &[Vec<f32>], x: &[f32], n: usize) -> Vec<f64> {
        let (h, w) = (cfg.height, cfg.width);
        let mut act: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let mut c_in = cfg.channels;
        for (l, &c_out) in cfg.conv.iter().enumerate() {
            let (wt, b) = (&p[2 * l], &p[2 * l + 1]);
            let mut out = vec![0.0; n * c_out * h * w];
            for (b_i, o, y, xx) in (0..n).flat_map(|b| (0..c_out).flat_map(move |o| (0..h).flat_map(move |y| (0..w).map(move |xx| (b, o, y, xx))))) {
                let mut s = f64::from(b[o]);
                for (i, ky, kx) in (0..c_in).flat_map(|i| (0..3).flat_map(move |ky| (0..3).map(move |kx| (i, ky, kx)))) {
                    let (sy, sx) = (y as isize + ky as isize - 1, xx as isize + kx as isize - 1);
                    if (0..h as isize).contains(&sy) && (0..w as isize).contains(&sx) {
                        let a = act[((b_i * c_in + i) * h + sy as usize) * w + sx as usize];
                        s += a * f64::from(wt[((o * c_in + i) * 3 + ky) * 3 + kx]);
                    }
                }
                out[((b_i * c_out + o) * h + y) * w + xx] = s.max(0.0);
            }
            act = out;
            c_in = c_out;
        }
        let k = cfg.pool;
        let (ph, pw) = (h / k, w / k);
        let mut feats = Vec::with_capacity(n * c_in * ph * pw);
        for (b_i, c, y, xx) in (0..n).flat_map(|b| (0..c_in).flat_map(move |c| (0..ph).flat_map(move |y| (0..pw).map(move |x| (b, c, y, x))))) {
            let window = (0..k).flat_map(|dy| (0..k).map(move |dx| (y * k + dy, xx * k + dx)));
            feats.push(window.map(|(sy, sx)| act[((b_i * c_in + c) * h + sy) * w + sx]).fold(f64::NEG_INFINITY, f64::max));
        }
        let mut width = c_in * ph * pw;
        let layers = cfg.hidden.len() + 1;
        for l in 0..layers {
            let (wt, b) = (&p[2 * (cfg.conv.len() + l)], &p[2 * (cfg.conv.len() + l) + 1]);
            let out_w = b.len();
            let mut out = vec![0.0; n * out_w];
            for (r, j) in (0..n).flat_map(|r| (0..out_w).map(move |j| (r, j))) {
                let s: f64 = f64::from(b[j]) + (0..width).map(|i| feats[r * width + i] * f64::from(wt[i * out_w + j])).sum::<f64>();
                out[r * out_w + j] = if l + 1 < layers { s.max(0.0) } else { s };
            }
            feats = out;
            width = out_w;
        }
        feats
    }

    #[test]
    fn forward_and_loss_match_a_host_reference() {
        let cfg = CnnConfig { channels: 2, height: 5, width: 6, conv: vec![3, 4], pool: 2, hidden: vec![5], classes: 3 };
        let model = cnn(&cfg).unwrap();
        let session = Session::new(Arc::new(rlx_cpu::CpuBackend::new()));
        let (mut fwd, mut train) = (session.compile(&model.forward).unwrap(), session.compile(&model.train).unwrap());
        let mut rng = Rng::new(11);
        let mut host = Vec::new();
        for spec in &model.params {
            let init = if spec.init == Init::Zeros { Init::Normal(0.3) } else { spec.init };
            let t = init.tensor(&spec.shape, &mut rng);
            host.push(t.to_vec::<f32>().unwrap());
            fwd.set_param(&spec.name, t.clone()).unwrap();
            train.set_param(&spec.name, t).unwrap();
        }
        let n = 3;
        let xs: Vec<f32> = (0..n * 2 * 5 * 6).map(|_| rng.normal() as f32).collect();
        let labels: Vec<i64> = vec![2, 0, 1];
        let x = Tensor::from_slice(&xs, &[n, 2, 5, 6]).unwrap();
        let got = fwd.run(&[("x", &x)]).unwrap()[0].to_vec::<f32>().unwrap();
        let want = host_logits(&cfg, &host, &xs, n);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((f64::from(*g) - w).abs() < 1e-4 * w.abs().max(1.0), "{got:?} vs {want:?}");
        }
        let y = Tensor::from_slice(&labels, &[n]).unwrap();
        let loss = train.run(&[("x", &x), ("labels", &y)]).unwrap()[0].to_f64_vec()[0];
        let host_loss: f64 = (0..n)
            .map(|r| {
                let row = &want[r * 3..r * 3 + 3];
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln() - row[labels[r] as usize]
            })
            .sum::<f64>()
            / n as f64;
        assert!((loss - host_loss).abs() < 1e-4, "{loss} vs {host_loss}");
    }
}
