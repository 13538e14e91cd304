//! The quant decompositions that lower to elementwise ops compute OPS.md §14's formulas
//! (checked against scalar references here until the quant kernels exist).

mod common;

use common::{randn, run_decomposed};
use rlx_ir::text::parse;
use rlx_ir::OpKind;
use rlx_runtime::Tensor;

/// The values of every output of `src` with `kind` decomposed (and so every kind it uses that
/// the CPU has no kernel for).
fn lowered(src: &str, kind: OpKind, inputs: &[(&str, &Tensor)]) -> Vec<Vec<f64>> {
    let g = parse(src).unwrap();
    run_decomposed(&g, kind, inputs).iter().map(Tensor::to_f64_vec).collect()
}

#[test]
fn quantize_rounds_half_to_even_per_channel_and_dequantize_inverts() {
    // x [2, 3, 2] quantized along axis 1; channel 1 has a zero scale (code 0).
    let scales = [0.5f32, 0.0, 0.25];
    let zps = [-3i32, 7, 0];
    let mut x = randn(12, 7).iter().map(|v| v * 40.0).collect::<Vec<f32>>();
    x[0] = 1.25; // 2.5 → 2 (ties to even), + zp −3 = −1
    x[1] = 0.75; // 1.5 → 2, − 3 = −1
    x[4] = 0.625; // 2.5 → 2
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,3,2]))()
        %1 = Quantize(axis:Some(1),scales:[0.5,0,0.25],zero_points:[-3,7,0])(%0)
        %2 = Dequantize(axis:Some(1),scales:[0.5,0,0.25],zero_points:[-3,7,0])(%1)
        return %1, %2"#;
    let tx = Tensor::from_vec(x.clone(), &[2, 3, 2]).unwrap();
    let out = lowered(src, OpKind::Quantize, &[("x", &tx)]);
    for (i, &v) in x.iter().enumerate() {
        let c = (i / 2) % 3;
        let q = if scales[c] == 0.0 {
            0.0
        } else {
            ((v / scales[c]).round_ties_even() + zps[c] as f32).clamp(-128.0, 127.0)
        };
        assert_eq!(out[0][i], f64::from(q), "code {i} of {v}");
        assert_eq!(out[1][i], f64::from((q - zps[c] as f32) * scales[c]), "value {i}");
    }
    assert_eq!(&out[0][..2], &[-1.0, -1.0]);
    assert_eq!(out[0][4], 2.0);
}

#[test]
fn fake_quantize_with_a_fixed_scale_and_its_gradients() {
    // Per-tensor scale 0.1 on 4 bits (q_max 7); a zero scale gives zero output.
    let mut x = randn(9, 3);
    x[0] = 0.25; // 2.5 → 2
    x[1] = -0.35; // −3.5 → −4
    let tx = Tensor::from_vec(x.clone(), &[9]).unwrap();
    let dy = randn(9, 4);
    let tdy = Tensor::from_vec(dy.clone(), &[9]).unwrap();
    for s in [0.1f32, 0.0] {
        let ts = Tensor::from_vec(vec![s], &[1]).unwrap();
        let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[9]))()
            %1 = Input(name:"s",ty:(dtype:F32,shape:[1]))()
            %2 = Input(name:"dy",ty:(dtype:F32,shape:[9]))()
            %3 = FakeQuantize(bits:4,axis:None,ste:Identity,scale_mode:Fixed)(%0, %1)
            %4 = FakeQuantizeLSQ(bits:4,axis:None)(%0, %1)
            %5 = FakeQuantizeBackward(bits:4,axis:None,ste:ClippedIdentity)(%0, %2, %1)
            %6 = FakeQuantizeBackward(bits:4,axis:None,ste:Tanh)(%0, %2, %1)
            %7 = FakeQuantizeBackward(bits:4,axis:None,ste:HardTanh)(%0, %2, %1)
            %8 = FakeQuantizeLSQBackwardX(bits:4,axis:None)(%0, %1, %2)
            return %3, %4, %5, %6, %7, %8"#;
        let out = lowered(src, OpKind::FakeQuantize, &[("x", &tx), ("s", &ts), ("dy", &tdy)]);
        let safe = if s == 0.0 { 1.0 } else { s };
        for i in 0..9 {
            let z = x[i] / safe;
            let fq = z.round_ties_even().clamp(-7.0, 7.0) * s;
            let clipped = if z.round_ties_even().abs() <= 7.0 { dy[i] } else { 0.0 };
            let tanh = dy[i] * (1.0 - z.tanh() * z.tanh());
            let hard = dy[i] * (1.0 - z.abs() / 7.0).max(0.0);
            let want = [fq, fq, clipped, tanh, hard, clipped];
            for (k, w) in want.iter().enumerate() {
                let got = out[k][i];
                assert!(
                    (got - f64::from(*w)).abs() <= 1e-6 * (1.0 + w.abs() as f64),
                    "s {s} output {k} element {i}: {got} vs {w}"
                );
            }
        }
        if s != 0.0 {
            assert_eq!((out[0][0], out[0][1]), (f64::from(2.0 * s), f64::from(-4.0 * s)));
        }
    }
}

#[test]
fn dequant_matmul_kernel_matches_its_decomposition() {
    // The integer and FP8 schemes, which both paths run; x carries a batch axis.
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,3,8]))()
        %1 = Input(name:"w_i8",ty:(dtype:I8,shape:[8,6]))()
        %2 = Input(name:"s",ty:(dtype:F32,shape:[2,6]))()
        %3 = Input(name:"zp",ty:(dtype:F32,shape:[2,6]))()
        %4 = DequantMatMul(scheme:Int8BlockAsym(block_size:4),out_dim:None)(%0, %1, %2, %3)
        %5 = DequantMatMul(scheme:Int8Block(block_size:4),out_dim:None)(%0, %1, %2, %3)
        %6 = Input(name:"w_i4",ty:(dtype:U8,shape:[8,3]))()
        %7 = DequantMatMul(scheme:Int4Block(block_size:4),out_dim:None)(%0, %6, %2, %3)
        %8 = Input(name:"w_fp8",ty:(dtype:U8,shape:[8,6]))()
        %9 = DequantMatMul(scheme:Fp8E4m3,out_dim:None)(%0, %8)
        %10 = DequantMatMul(scheme:Fp8E5m2,out_dim:None)(%0, %8)
        return %4, %5, %7, %9, %10"#;
    let g = parse(src).unwrap();
    let byte = |i: usize| ((i * 37 + 11) % 251) as u8 & 0x7B;
    let x = Tensor::from_vec(randn(48, 1), &[2, 3, 8]).unwrap();
    let w_i8 = Tensor::from_vec((0..48).map(|i| byte(i) as i8).collect::<Vec<i8>>(), &[8, 6]).unwrap();
    let s = Tensor::from_vec(randn(12, 2).iter().map(|v| v.abs() * 0.05).collect::<Vec<f32>>(), &[2, 6]).unwrap();
    let zp = Tensor::from_vec((0..12).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<f32>>(), &[2, 6]).unwrap();
    let w_i4 = Tensor::from_vec((0..24).map(byte).collect::<Vec<u8>>(), &[8, 3]).unwrap();
    let w_fp8 = Tensor::from_vec((0..48).map(byte).collect::<Vec<u8>>(), &[8, 6]).unwrap();
    let inputs = [("x", &x), ("w_i8", &w_i8), ("s", &s), ("zp", &zp), ("w_i4", &w_i4), ("w_fp8", &w_fp8)];
    let native = common::run(&g, &inputs);
    let lowered = common::run_decomposed(&g, OpKind::DequantMatMul, &inputs);
    for (a, b) in native.iter().zip(&lowered) {
        common::assert_close(a, b, 1e-5, 1e-5);
    }
}
