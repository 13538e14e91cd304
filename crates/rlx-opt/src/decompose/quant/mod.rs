//! Decompositions of the quant family (OPS.md §5, §14, backward ops §22), split as rlx-ir
//! splits the family: affine integer quantization and the integer-scheme `DequantMatMul`
//! here, quantization-aware training in `fake`, the low-precision formats in `scaled`.
//!
//! Not decomposed (legalization names them as missing): `DequantMatMul` over GGUF, MLX,
//! NVFP4-block and two-plane FP4 weights, the MoE variants and `DequantMoEWeights` (their
//! block decoders are kernel work, OPS.md §5), `FakeQuantize` with an EMA state (its in-place
//! state update has no primitive form), and `ScaledQuantScale`/`ScaledQuantize` (no OPS.md
//! decomposition).

mod fake;
mod scaled;

use super::build::{channel_shape, scalar};
use rlx_ir::ops::conv::Conv;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::quant::{DequantMatMul, QConv2d, QMatMul, QuantScheme, ScaledFormat};
use rlx_ir::{DType, Dim, Graph, IrError, Op, OpKind, Shape, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Quantize,
    OpKind::Dequantize,
    OpKind::QMatMul,
    OpKind::QConv2d,
    OpKind::DequantMatMul,
    OpKind::FakeQuantize,
    OpKind::FakeQuantizeLSQ,
    OpKind::FakeQuantizeBackward,
    OpKind::FakeQuantizeLSQBackwardX,
    OpKind::FakeQuantizeLSQBackwardScale,
    OpKind::ScaledDequantize,
    OpKind::ScaledMatMul,
];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::Quantize(q) => quantize(g, x[0], q.axis, &q.scales, &q.zero_points),
        Op::Dequantize(q) => dequantize(g, x[0], q.axis, &q.scales, &q.zero_points),
        Op::QMatMul(q) => qmatmul(g, q, x),
        Op::QConv2d(q) => qconv2d(g, q, x),
        Op::DequantMatMul(d) => dequant_matmul(g, d, x)?,
        Op::FakeQuantize(f) => fake::fake_quantize(g, f, x)?,
        Op::FakeQuantizeLSQ(f) => fake::lsq(g, f.bits, f.axis, x[0], x[1]),
        Op::FakeQuantizeBackward(f) => fake::backward(g, f, x),
        Op::FakeQuantizeLSQBackwardX(f) => fake::lsq_backward_x(g, f.bits, f.axis, x),
        Op::FakeQuantizeLSQBackwardScale(f) => fake::lsq_backward_scale(g, f.bits, f.axis, x),
        Op::ScaledDequantize(s) => scaled::dequantize(g, &s.format, &s.scale_layout, x[0], x[1]),
        Op::ScaledMatMul(s) => scaled::matmul(g, s, x),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

/// `v` cast to F32 unless it is already.
fn f32_of(g: &mut Graph, v: ValueId) -> Result<ValueId, IrError> {
    if g.ty(v).dtype == DType::F32 {
        Ok(v)
    } else {
        g.cast(v, DType::F32)
    }
}

/// `lo ≤ v ≤ hi` by `Max` then `Min` with scalars of `v`'s dtype.
fn clamp(g: &mut Graph, v: ValueId, lo: f64, hi: f64) -> Result<ValueId, IrError> {
    let dt = g.ty(v).dtype;
    let lo = scalar(g, dt, lo)?;
    let hi = scalar(g, dt, hi)?;
    let v = g.binary(BinaryOp::Max, v, lo)?;
    g.binary(BinaryOp::Min, v, hi)
}

/// The per-tensor or per-channel F32 parameter `values` as a constant that broadcasts along
/// `axis` of a rank-`rank` tensor (rank 0 for one value).
fn param(g: &mut Graph, rank: usize, axis: Option<usize>, values: &[f32]) -> Result<ValueId, IrError> {
    let shape = if values.len() == 1 { Shape::scalar() } else { channel_shape(rank, axis, Dim::Static(values.len())) };
    let dims: Vec<usize> = shape.dims().iter().filter_map(Dim::as_static).collect();
    g.constant_f32(&dims, values)
}

/// `clamp(round(x/s[c]) + zp[c], −128, 127)` → I8, in F32. A zero scale gives code 0
/// (OPS.md §14: a zero scale yields zero output): it divides by 1 and is masked after.
fn quantize(g: &mut Graph, x: ValueId, axis: Option<usize>, scales: &[f32], zps: &[i32]) -> Result<ValueId, IrError> {
    let rank = g.ty(x).rank();
    let xf = f32_of(g, x)?;
    let safe: Vec<f32> = scales.iter().map(|&s| if s == 0.0 { 1.0 } else { s }).collect();
    let s = param(g, rank, axis, &safe)?;
    let zp: Vec<f32> = zps.iter().map(|&z| z as f32).collect();
    let zp = param(g, rank, axis, &zp)?;
    let q = g.binary(BinaryOp::Div, xf, s)?;
    let q = g.activation(ActivationKind::Round, q)?;
    let q = g.binary(BinaryOp::Add, q, zp)?;
    let mut q = clamp(g, q, -128.0, 127.0)?;
    if scales.contains(&0.0) {
        let keep: Vec<f32> = scales.iter().map(|&s| f32::from(u8::from(s != 0.0))).collect();
        let keep = param(g, rank, axis, &keep)?;
        q = g.binary(BinaryOp::Mul, q, keep)?;
    }
    g.cast(q, DType::I8)
}

/// `(q − zp[c])·s[c]` in F32.
fn dequantize(g: &mut Graph, q: ValueId, axis: Option<usize>, scales: &[f32], zps: &[i32]) -> Result<ValueId, IrError> {
    let rank = g.ty(q).rank();
    let qf = g.cast(q, DType::F32)?;
    let zp: Vec<f32> = zps.iter().map(|&z| z as f32).collect();
    let zp = param(g, rank, axis, &zp)?;
    let s = param(g, rank, axis, scales)?;
    let v = g.binary(BinaryOp::Sub, qf, zp)?;
    g.binary(BinaryOp::Mul, v, s)
}

/// `v` cast to `dtype`, minus the zero point `zp` (skipped when 0).
fn centred(g: &mut Graph, v: ValueId, dtype: DType, zp: i32) -> Result<ValueId, IrError> {
    let v = g.cast(v, dtype)?;
    if zp == 0 {
        return Ok(v);
    }
    let zp = scalar(g, dtype, f64::from(zp))?;
    g.binary(BinaryOp::Sub, v, zp)
}

/// The requantization of `QMatMul`/`QConv2d`: `clamp(round(acc·mult) + out_zp, −128, 127)`
/// with the accumulator cast to F32 first, then `Cast I8`.
fn requantize(g: &mut Graph, acc: ValueId, mult: f32, out_zp: i32) -> Result<ValueId, IrError> {
    let acc = g.cast(acc, DType::F32)?;
    let mult = scalar(g, DType::F32, f64::from(mult))?;
    let y = g.binary(BinaryOp::Mul, acc, mult)?;
    let mut y = g.activation(ActivationKind::Round, y)?;
    if out_zp != 0 {
        let zp = scalar(g, DType::F32, f64::from(out_zp))?;
        y = g.binary(BinaryOp::Add, y, zp)?;
    }
    let y = clamp(g, y, -128.0, 127.0)?;
    g.cast(y, DType::I8)
}

/// `Cast` to I32, `Sub` the zero points, I32 `MatMul`, `Add` bias (exact integer
/// accumulation), then the requantization.
fn qmatmul(g: &mut Graph, q: &QMatMul, x: &[ValueId]) -> Result<ValueId, IrError> {
    let xi = centred(g, x[0], DType::I32, q.x_zp)?;
    let wi = centred(g, x[1], DType::I32, q.w_zp)?;
    let acc = g.matmul(xi, wi)?;
    let acc = g.binary(BinaryOp::Add, acc, x[2])?;
    requantize(g, acc, q.mult, q.out_zp)
}

/// `Cast` to F64, `Sub` the zero points (zero padding of the centred input is padding with
/// `x_zp`, as ONNX `QLinearConv` does), `Conv` in F64 — products of centred int8 values are
/// below 2^16 and their sums stay exact integers below 2^53, the I32 accumulator's value —
/// `Add` the bias, then the requantization.
fn qconv2d(g: &mut Graph, q: &QConv2d, x: &[ValueId]) -> Result<ValueId, IrError> {
    let xf = centred(g, x[0], DType::F64, q.x_zp)?;
    let wf = centred(g, x[1], DType::F64, q.w_zp)?;
    let conv = Conv {
        kernel_size: q.kernel_size.clone(),
        stride: q.stride.clone(),
        padding: q.padding.clone(),
        dilation: q.dilation.clone(),
        groups: q.groups,
    };
    let acc = g.conv(xf, wf, conv)?;
    let bias = g.cast(x[2], DType::F64)?;
    let c_out = g.ty(bias).shape.dim(0).clone();
    let bias = g.reshape_to(bias, &channel_shape(4, Some(1), c_out))?;
    let acc = g.binary(BinaryOp::Add, acc, bias)?;
    requantize(g, acc, q.mult, q.out_zp)
}

/// `v` with each entry along `axis` repeated `block` times, cut to `len` entries: a per-block
/// parameter `[.., ⌈len/block⌉, ..]` spread over the elements it scales
/// (`Reshape`, `Expand`, `Reshape`, and a `Narrow` for a ragged last block).
pub(super) fn repeat_blocks(
    g: &mut Graph,
    v: ValueId,
    axis: usize,
    block: usize,
    len: usize,
) -> Result<ValueId, IrError> {
    if block == 1 {
        return Ok(v);
    }
    let dims = g.ty(v).shape.dims().to_vec();
    let nb = dims[axis]
        .as_static()
        .ok_or_else(|| IrError::Invalid(format!("block scales {} need a static block count", g.ty(v))))?;
    let with = |mid: &[usize]| {
        let mut d = dims[..axis].to_vec();
        d.extend(mid.iter().map(|&n| Dim::Static(n)));
        d.extend_from_slice(&dims[axis + 1..]);
        Shape(d)
    };
    let split = g.reshape_to(v, &with(&[nb, 1]))?;
    let wide = g.expand_to(split, &with(&[nb, block]))?;
    let flat = g.reshape_to(wide, &with(&[nb * block]))?;
    if nb * block == len {
        Ok(flat)
    } else {
        g.narrow(flat, axis, 0, len)
    }
}

/// The static extent of `axis` of `v`, named `what` in the error.
fn static_dim(g: &Graph, v: ValueId, axis: usize, what: &str) -> Result<usize, IrError> {
    g.ty(v).static_dim(axis).map_err(|e| IrError::Invalid(format!("{what}: {e}")))
}

/// Two 4-bit codes per byte of `w [k, n/2]` (low nibble = even column, unsigned) as I32 `[k, n]`.
fn unpack_nibbles(g: &mut Graph, w: ValueId) -> Result<ValueId, IrError> {
    let k = g.ty(w).shape.dim(0).clone();
    let half = static_dim(g, w, 1, "Int4Block weight [k, n/2]")?;
    let bytes = if g.ty(w).dtype == DType::U8 { w } else { g.cast(w, DType::U8)? };
    let c = g.cast(bytes, DType::I32)?;
    let sixteen = scalar(g, DType::I32, 16.0)?;
    let lo = g.binary(BinaryOp::Mod, c, sixteen)?;
    let hi = g.binary(BinaryOp::Div, c, sixteen)?;
    let col = Shape(vec![k.clone(), Dim::Static(half), Dim::Static(1)]);
    let lo = g.reshape_to(lo, &col)?;
    let hi = g.reshape_to(hi, &col)?;
    let pairs = g.concat(&[lo, hi], 2)?;
    g.reshape_to(pairs, &Shape(vec![k, Dim::Static(2 * half)]))
}

/// `x · W` with `W [k, n]` dequantized to F32: `(q − zp)·scale` with the `[k/bs, n]` block
/// parameters repeated along K for the integer schemes, a table decode for the FP8 ones.
/// `None` for the schemes whose decoders are kernel work.
fn dequant_matmul(g: &mut Graph, d: &DequantMatMul, x: &[ValueId]) -> Option<Result<ValueId, IrError>> {
    let block = match d.scheme {
        QuantScheme::Int8Block { block_size }
        | QuantScheme::Int8BlockAsym { block_size }
        | QuantScheme::Int4Block { block_size } => Some(block_size),
        QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => None,
        _ => return None,
    };
    let run = |g: &mut Graph| -> Result<ValueId, IrError> {
        let w = match (block, &d.scheme) {
            (None, scheme) => {
                let format = if *scheme == QuantScheme::Fp8E4m3 { ScaledFormat::F8E4M3 } else { ScaledFormat::F8E5M2 };
                scaled::decode(g, x[1], &scaled::table(&format))?
            }
            (Some(bs), scheme) => {
                let k = static_dim(g, x[1], 0, "DequantMatMul weight [k, ..]")?;
                let codes =
                    if matches!(scheme, QuantScheme::Int4Block { .. }) { unpack_nibbles(g, x[1])? } else { x[1] };
                let q = g.cast(codes, DType::F32)?;
                let s = f32_of(g, x[2])?;
                let zp = f32_of(g, x[3])?;
                let s = repeat_blocks(g, s, 0, bs, k)?;
                let zp = repeat_blocks(g, zp, 0, bs, k)?;
                let centred = g.binary(BinaryOp::Sub, q, zp)?;
                g.binary(BinaryOp::Mul, centred, s)?
            }
        };
        let xf = f32_of(g, x[0])?;
        g.matmul(xf, w)
    };
    Some(run(g))
}

#[cfg(test)]
mod tests {
    use super::super::build::testing::{count, lower, lower_text};
    use rlx_ir::OpKind;

    #[test]
    fn quantize_and_dequantize_are_elementwise_chains() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:F16,shape:["N",3,2]))()
            %1 = Quantize(axis:Some(1),scales:[0.02,0,0.025],zero_points:[-128,3,0])(%0)
            %2 = Dequantize(axis:Some(1),scales:[0.02,0,0.025],zero_points:[-128,3,0])(%1)
            %3 = Quantize(axis:None,scales:[0.5],zero_points:[0])(%0)
            return %2, %3"#,
            OpKind::Quantize,
            &[],
        );
        assert_eq!(count(&out, OpKind::Dequantize), 0);
        // The zero scale of channel 1 is masked once; two roundings.
        assert_eq!(count(&out, OpKind::Activation), 2);
        // Div, Add, Max, Min (+ the mask Mul) per Quantize; Sub, Mul for Dequantize.
        assert_eq!(count(&out, OpKind::Binary), 5 + 2 + 4);
    }

    #[test]
    fn qmatmul_accumulates_in_i32() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:I8,shape:["M",5]))()
            %1 = Param(name:"w",ty:(dtype:I8,shape:[5,3]))()
            %2 = Param(name:"b",ty:(dtype:I32,shape:[3]))()
            %3 = QMatMul(x_zp:-3,w_zp:0,out_zp:-2,mult:0.0125)(%0, %1, %2)
            return %3"#,
            OpKind::QMatMul,
            &[],
        );
        let mm = out.nodes().iter().find(|n| n.op.kind() == OpKind::MatMul).unwrap();
        assert_eq!(mm.outputs[0].dtype, rlx_ir::DType::I32);
    }

    #[test]
    fn qconv2d_convolves_centred_values_in_f64() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:I8,shape:["N",4,7,5]))()
            %1 = Param(name:"w",ty:(dtype:I8,shape:[6,2,3,3]))()
            %2 = Param(name:"b",ty:(dtype:I32,shape:[6]))()
            %3 = QConv2d(kernel_size:[3,3],stride:[2,1],padding:[1,1],dilation:[1,1],groups:2,x_zp:-3,w_zp:0,out_zp:5,mult:0.01)(%0, %1, %2)
            return %3"#,
            OpKind::QConv2d,
            &[OpKind::Conv],
        );
        let conv = out.nodes().iter().find(|n| n.op.kind() == OpKind::Conv).unwrap();
        assert_eq!(conv.outputs[0].dtype, rlx_ir::DType::F64);
        // Sub x_zp, Add bias, Mul mult, Add out_zp, Max, Min.
        assert_eq!(count(&out, OpKind::Binary), 6);
        assert_eq!(out.outputs().len(), 1);
        assert_eq!(out.ty(out.outputs()[0]).dtype, rlx_ir::DType::I8);
    }

    #[test]
    fn integer_dequant_matmuls_repeat_block_parameters() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:F16,shape:["B",7,8]))()
            %1 = Param(name:"w_i8",ty:(dtype:I8,shape:[8,6]))()
            %2 = Param(name:"s",ty:(dtype:F32,shape:[2,6]))()
            %3 = DequantMatMul(scheme:Int8BlockAsym(block_size:4),out_dim:None)(%0, %1, %2, %2)
            %4 = Param(name:"w_i4",ty:(dtype:I8,shape:[8,3]))()
            %5 = DequantMatMul(scheme:Int4Block(block_size:4),out_dim:None)(%0, %4, %2, %2)
            %6 = Param(name:"w_fp8",ty:(dtype:U8,shape:[8,6]))()
            %7 = DequantMatMul(scheme:Fp8E4m3,out_dim:None)(%0, %6)
            return %3, %5, %7"#,
            OpKind::DequantMatMul,
            &[],
        );
        assert_eq!(count(&out, OpKind::MatMul), 3);
        // Scale and zero point of the two integer schemes.
        assert_eq!(count(&out, OpKind::Expand), 4);
        assert_eq!(count(&out, OpKind::Gather), 1);
    }

    #[test]
    fn quant_kinds_of_the_ir_sample_lower() {
        // Without the lines whose kinds or schemes stay kernel work.
        let kernel_work = ["Gguf", "Mlx", "Nvfp4Block", "MxFp4x2", "Ema("];
        let src = include_str!("../../../../rlx-ir/tests/data/quant.rlx");
        let kept: Vec<&str> = src.lines().filter(|l| !kernel_work.iter().any(|w| l.contains(w))).collect();
        let g = rlx_ir::text::parse(&prune_returns(&kept.join("\n"))).unwrap();
        let out = lower(&g, &[OpKind::ScaledQuantScale, OpKind::ScaledQuantize]);
        for kind in super::KINDS {
            assert_eq!(count(&out, *kind), 0, "{kind} left in\n{out}");
        }
    }

    #[test]
    fn kernel_only_forms_are_named_missing() {
        for line in [
            r#"%1 = Param(name:"w",ty:(dtype:U8,shape:[16,144]))()
            %2 = DequantMatMul(scheme:Gguf(Q4_K),out_dim:None)(%0, %1)"#,
            r#"%1 = Param(name:"m",ty:(dtype:F32,shape:[256]))()
            %2 = FakeQuantize(bits:4,axis:Some(1),ste:HardTanh,scale_mode:Ema(decay:0.99))(%0, %1)"#,
        ] {
            let src = format!("%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2,256]))()\n{line}\nreturn %2");
            let g = rlx_ir::text::parse(&src).unwrap();
            let claims: Vec<OpKind> = super::super::PRIMITIVES.to_vec();
            let err = crate::legalize(&g, "test", &claims[..]).unwrap_err().to_string();
            let kind = g.node(g.outputs()[0].node).op.kind();
            assert!(err.starts_with(&format!("backend `test` cannot run {kind}")), "{err}");
        }
    }

    /// Keeps only the returned values whose nodes are still defined.
    fn prune_returns(src: &str) -> String {
        let defined: Vec<&str> =
            src.lines().filter_map(|l| l.trim().split_once(" = ").map(|(v, _)| v.trim())).collect();
        src.lines()
            .map(|l| match l.trim().strip_prefix("return ") {
                Some(vals) => {
                    let kept: Vec<&str> =
                        vals.split(", ").filter(|v| defined.contains(&v.split('.').next().unwrap_or(v))).collect();
                    format!("return {}", kept.join(", "))
                }
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
