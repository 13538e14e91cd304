//! Signal kernels on inputs the fixtures do not cover: lengths only known at run time (bad FFT
//! lengths are errors naming the op), empty extents, an oversized partition, and inputs large
//! enough to take the threaded paths (checked against the single-row / direct results).

mod common;

use common::{randn, run, session};
use num_complex::Complex32;
use rlx_ir::text::parse;
use rlx_ir::{DType, Graph};
use rlx_runtime::Tensor;

fn graph(src: &str) -> Graph {
    parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn c64(z: &[Complex32], shape: &[usize]) -> Tensor {
    Tensor::from_bytes(DType::C64, shape, bytemuck::cast_slice(z)).unwrap()
}

fn complex_values(t: &Tensor) -> Vec<Complex32> {
    bytemuck::cast_slice(t.bytes()).to_vec()
}

/// The error of running `g` on one input `x` (from shape specialization or the kernel).
fn run_err(g: &Graph, x: &Tensor) -> String {
    let mut c = session().compile(g).unwrap_or_else(|e| panic!("compile: {e}\n{g}"));
    match c.run(&[("x", x)]) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("expected an error"),
    }
}

#[test]
fn fft_lengths_known_only_at_run_time_must_be_whole_blocks() {
    let g = graph(
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,"L"]))()
        %1 = Fft(inverse:false,norm:Backward)(%0)
        return %1"#,
    );
    let odd = Tensor::from_vec(randn(14, 1), &[2, 7]).unwrap();
    let e = run_err(&g, &odd);
    assert!(e.contains("Fft") && e.contains("f32[2, 7]") && e.contains("2N re/im blocks"), "{e}");
    let empty = Tensor::from_vec(Vec::<f32>::new(), &[2, 0]).unwrap();
    let e = run_err(&g, &empty);
    assert!(e.contains("Fft") && e.contains("f32[2, 0]") && e.contains("2N re/im blocks"), "{e}");
    let ok = Tensor::from_vec(randn(12, 2), &[2, 6]).unwrap();
    assert_eq!(run(&g, &[("x", &ok)])[0].shape(), &[2, 6]);

    let g = graph(
        r#"%0 = Input(name:"x",ty:(dtype:C64,shape:[3,"N"]))()
        %1 = Fft(inverse:true,norm:Ortho)(%0)
        return %1"#,
    );
    let e = run_err(&g, &c64(&[], &[3, 0]));
    assert!(e.contains("Fft") && e.contains("c64[3, 0]") && e.contains("empty"), "{e}");
}

#[test]
fn fft_of_no_rows_is_empty() {
    let g = graph(
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",8]))()
        %1 = Fft(inverse:false,norm:Ortho)(%0)
        return %1"#,
    );
    let x = Tensor::from_vec(Vec::<f32>::new(), &[0, 8]).unwrap();
    assert_eq!(run(&g, &[("x", &x)])[0].shape(), &[0, 8]);
}

/// Naive DFT of one complex row, in f64.
fn dft(z: &[Complex32], inverse: bool) -> Vec<(f64, f64)> {
    let n = z.len();
    let sign = if inverse { 1.0 } else { -1.0 };
    (0..n)
        .map(|k| {
            z.iter().enumerate().fold((0.0, 0.0), |(re, im), (j, v)| {
                let a = sign * 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
                let (c, s) = (a.cos(), a.sin());
                (re + f64::from(v.re) * c - f64::from(v.im) * s, im + f64::from(v.re) * s + f64::from(v.im) * c)
            })
        })
        .collect()
}

#[test]
fn threaded_fft_rows_match_a_naive_dft() {
    // 70 rows of 600 (= 2³·3·5²) and 40 rows of 1009 (prime): both above the threading threshold.
    for (rows, n) in [(70usize, 600usize), (40, 1009)] {
        let vals = randn(2 * rows * n, n as u64);
        let z: Vec<Complex32> = vals.chunks(2).map(|p| Complex32::new(p[0], p[1])).collect();
        let g = graph(&format!(
            r#"%0 = Input(name:"x",ty:(dtype:C64,shape:[{rows},{n}]))()
            %1 = Fft(inverse:true,norm:Forward)(%0)
            return %1"#
        ));
        let got = complex_values(&run(&g, &[("x", &c64(&z, &[rows, n]))])[0]);
        for r in [0, rows / 2, rows - 1] {
            let want = dft(&z[r * n..(r + 1) * n], true);
            for (k, (g, w)) in got[r * n..(r + 1) * n].iter().zip(&want).enumerate() {
                let err = (f64::from(g.re) - w.0).abs().max((f64::from(g.im) - w.1).abs());
                assert!(err <= 1e-5 * (n as f64).sqrt() * 2.0, "row {r} bin {k}: {g} vs {w:?}");
            }
        }
    }
}

/// `np.convolve(x, h, mode="full")` in f64.
fn convolve(x: &[f32], h: &[f32]) -> Vec<f64> {
    let mut y = vec![0.0; x.len() + h.len() - 1];
    for (i, &xv) in x.iter().enumerate() {
        for (j, &hv) in h.iter().enumerate() {
            y[i + j] += f64::from(xv) * f64::from(hv);
        }
    }
    y
}

fn conv_graph(rows: usize, l: usize, m: usize, block: usize) -> Graph {
    graph(&format!(
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[{rows},{l}]))()
        %1 = Input(name:"h",ty:(dtype:F32,shape:[{m}]))()
        %2 = PartitionedConv(block:{block})(%0, %1)
        return %2"#
    ))
}

fn assert_conv(rows: usize, l: usize, m: usize, block: usize) {
    let (x, h) = (randn(rows * l, 5), randn(m, 6));
    let tx = Tensor::from_vec(x.clone(), &[rows, l]).unwrap();
    let th = Tensor::from_vec(h.clone(), &[m]).unwrap();
    let got = run(&conv_graph(rows, l, m, block), &[("x", &tx), ("h", &th)])[0].to_f64_vec();
    let n = l + m - 1;
    for r in 0..rows {
        let want = convolve(&x[r * l..(r + 1) * l], &h);
        let scale = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        for (i, (g, w)) in got[r * n..(r + 1) * n].iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * scale, "row {r} sample {i}: {g} vs {w} (block {block})");
        }
    }
}

#[test]
fn partitioned_conv_matches_direct_convolution_in_every_regime() {
    assert_conv(4, 6000, 300, 64); // threaded rows, 5 partitions
    assert_conv(3, 20000, 20, 64); // direct, threaded
    assert_conv(1, 40, 35, usize::MAX); // partition clamped to the output length
    assert_conv(2, 3, 50, 1); // one-sample partitions
}

#[test]
fn partitioned_conv_of_an_empty_signal_is_empty() {
    let g = graph(
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,"L"]))()
        %1 = Input(name:"h",ty:(dtype:F32,shape:[1]))()
        %2 = PartitionedConv(block:8)(%0, %1)
        return %2"#,
    );
    let x = Tensor::from_vec(Vec::<f32>::new(), &[2, 0]).unwrap();
    let h = Tensor::from_vec(vec![0.5f32], &[1]).unwrap();
    assert_eq!(run(&g, &[("x", &x), ("h", &h)])[0].shape(), &[2, 0]);
}

#[test]
fn log_mel_of_no_frames_or_no_mels_is_empty() {
    let g = graph(
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,"T",8]))()
        %1 = Input(name:"w",ty:(dtype:F32,shape:["M",3]))()
        %2 = LogMel(per_frame_floor:false)(%0, %1)
        %3 = Input(name:"dy",ty:(dtype:F32,shape:[2,"T","M"]))()
        %4 = LogMelBackward(per_frame_floor:false)(%0, %1, %3)
        return %2, %4"#,
    );
    for (t, m) in [(0usize, 3usize), (3, 0)] {
        let x = Tensor::from_vec(randn(2 * t * 8, 7), &[2, t, 8]).unwrap();
        let w = Tensor::from_vec(randn(m * 3, 8).iter().map(|v| v.abs()).collect(), &[m, 3]).unwrap();
        let dy = Tensor::from_vec(randn(2 * t * m, 9), &[2, t, m]).unwrap();
        let out = run(&g, &[("x", &x), ("w", &w), ("dy", &dy)]);
        assert_eq!(out[0].shape(), &[2, t, m]);
        assert_eq!(out[1].shape(), &[2, t, 8]);
        assert!(out[1].to_f64_vec().iter().all(|&v| v == 0.0));
    }
}

#[test]
fn threaded_butterfly_rows_match_one_row_at_a_time() {
    let (b, n) = (80usize, 512usize);
    let state = randn(b * n * 2, 11);
    let src = |rows: usize| {
        format!(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[{rows},{n},2]))()
            %1 = Input(name:"gate",ty:(dtype:F32,shape:[256]))()
            %2 = Input(name:"rev",ty:(dtype:F32,shape:[256]))()
            %3 = Input(name:"re",ty:(dtype:F32,shape:[256]))()
            %4 = Input(name:"im",ty:(dtype:F32,shape:[256]))()
            %5 = FftButterflyStage(stage:4,n_fft:{n})(%0, %1, %2, %3, %4)
            return %5"#
        )
    };
    let half: Vec<Tensor> = (0..4).map(|i| Tensor::from_vec(randn(256, 20 + i), &[256]).unwrap()).collect();
    let named = |x: &Tensor| -> Vec<Tensor> {
        let names = ["x", "gate", "rev", "re", "im"];
        let ts: Vec<&Tensor> = std::iter::once(x).chain(&half).collect();
        let ins: Vec<(&str, &Tensor)> = names.iter().copied().zip(ts).collect();
        run(&graph(&src(x.shape()[0])), &ins)
    };
    let all = named(&Tensor::from_vec(state.clone(), &[b, n, 2]).unwrap())[0].to_f64_vec();
    for r in [0, b / 2, b - 1] {
        let row = Tensor::from_vec(state[r * 2 * n..(r + 1) * 2 * n].to_vec(), &[1, n, 2]).unwrap();
        assert_eq!(named(&row)[0].to_f64_vec(), all[r * 2 * n..(r + 1) * 2 * n], "row {r}");
    }
}
