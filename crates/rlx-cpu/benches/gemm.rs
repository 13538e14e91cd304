//! rlx side of the f32 GEMM benchmark: `MatMul` of row-major `[m, k] × [k, n]` through the
//! CPU backend's kernel entry point, timed per call after a warm-up (at least `WARM_UP`), with
//! the pool's workers kept awake as during a compiled graph's run (`rlx_cpu::awake`); prints
//! one JSON line per shape with the median time and GFLOP/s (2·m·k·n flops per call).
//! `tools/bench/gemm.py` runs it beside NumPy's sgemm and prints ratios.
//!
//! `--peak` instead measures the FMA peak: a loop of independent register-only FMAs on every
//! thread at once, in its AVX-512 and AVX2 forms, one JSON line per form.
//!
//! `--prepacked` also times each shape with `b` packed once beforehand (a weight, as the CPU
//! plan does), alternating call by call with the plain product: `"peer": "rlx-prepacked"`.
//!
//! `--int8` (`--bf16`) instead times the product in 8-bit integers (on operands rounded to
//! bf16): `kernels::matmul::{int8, bfloat16}`, what `--precision int8` (`bf16`) runs, with `b`
//! rounded and packed once, alternating likewise: `"peer": "rlx-int8"` (`"rlx-bf16"`; its
//! "gflops" count the same 2·m·k·n operations).
//!
//! Usage: `cargo bench -p rlx-cpu --bench gemm -- [--threads T] [--reps R] [--warmup W]
//! [--shape M,K,N]... [--peak] [--prepacked] [--int8] [--bf16]`; without `--threads` rayon's default (`RAYON_NUM_THREADS`)
//! applies, without `--shape` the shapes of docs/BENCHMARKS.md run.

use rlx_cpu::kernels::matmul::{matmul, matmul_prepacked, matmul_rounded, prepack, Mat, Rounded};
use rlx_cpu::Products;
use rlx_cpu::view::{In, Out};
use rlx_ir::DType;
use std::time::Instant;

/// Square products and the transformer shapes (MiniLM: d 384, FFN 1536; 128 and 4096 tokens).
const SHAPES: [[usize; 3]; 9] = [
    [512, 512, 512],
    [1024, 1024, 1024],
    [2048, 2048, 2048],
    [128, 384, 384],
    [128, 384, 1536],
    [128, 1536, 384],
    [4096, 384, 384],
    [4096, 384, 1536],
    [4096, 1536, 384],
];

struct Options {
    threads: Option<usize>,
    reps: usize,
    warmup: usize,
    shapes: Vec<[usize; 3]>,
    peak: bool,
    /// The product timed beside the plain one, if any.
    beside: Option<Beside>,
}

/// A second form of each product, timed call by call with the plain one.
#[derive(Clone, Copy, PartialEq)]
enum Beside {
    Prepacked,
    Rounded(Products),
}

fn options() -> Result<Options, String> {
    let mut o = Options { threads: None, reps: 20, warmup: 3, shapes: Vec::new(), peak: false, beside: None };
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--peak" => o.peak = true,
            "--prepacked" => o.beside = Some(Beside::Prepacked),
            "--int8" => o.beside = Some(Beside::Rounded(Products::Int8)),
            "--bf16" => o.beside = Some(Beside::Rounded(Products::Bf16)),
            _ => {}
        }
        if ["--peak", "--prepacked", "--int8", "--bf16"].contains(&flag.as_str()) {
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--threads" => o.threads = Some(number(&value)?),
            "--reps" => o.reps = number(&value)?.max(1),
            "--warmup" => o.warmup = number(&value)?,
            "--shape" => {
                let dims = value.split(',').map(number).collect::<Result<Vec<_>, _>>()?;
                o.shapes.push(dims.try_into().map_err(|_| format!("--shape {value}: expected M,K,N"))?);
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if o.shapes.is_empty() {
        o.shapes = SHAPES.to_vec();
    }
    Ok(o)
}

/// Uniform values in [-1, 1) from a fixed xorshift stream.
fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// The least time warming up before the timed calls: a core idle just before (the pause
/// `tools/bench/gemm.py` leaves between peers) runs the first ~100 ms of a two-thread product
/// at about one thread's speed on the project machine.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(300);

/// Median seconds of one `MatMul` call at `[m, k] × [k, n]`, and with `beside` of the other
/// form (the two alternating call by call).
fn time_matmul([m, k, n]: [usize; 3], reps: usize, warmup: usize, beside: Option<Beside>) -> Result<(f64, Option<f64>), String> {
    let (a, b) = (random(m * k, 1), random(k * n, 2));
    let mut c = vec![0.0f32; m * n];
    let (da, db, dc) = ([m, k], [k, n], [m, n]);
    let ib = In { dtype: DType::F32, dims: &db, bytes: bytemuck::cast_slice(&b) };
    let packed = (beside == Some(Beside::Prepacked)).then(|| prepack(ib));
    let rounded = match beside {
        Some(Beside::Rounded(p)) => Rounded::new(p, Mat::row_major(&b, k, n)),
        _ => None,
    };
    let (mut plain, mut pre) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    let warm = Instant::now();
    let mut calls = 0;
    while plain.len() < reps {
        // Timed once both the warm-up calls and the warm-up time are past.
        let timed = calls >= warmup && warm.elapsed() >= WARM_UP;
        calls += 1;
        let ia = In { dtype: DType::F32, dims: &da, bytes: bytemuck::cast_slice(&a) };
        let mut out = Out { dtype: DType::F32, dims: &dc, bytes: bytemuck::cast_slice_mut(&mut c) };
        let t = Instant::now();
        matmul(ia, ib, &mut out)?;
        let plain_secs = t.elapsed().as_secs_f64();
        let t = Instant::now();
        if let Some(p) = &packed {
            matmul_prepacked(ia, ib, p, &mut out)?;
        }
        if let Some(p) = &rounded {
            matmul_rounded(ia, p, &mut out, None)?;
        }
        if timed && beside.is_some() {
            pre.push(t.elapsed().as_secs_f64());
        }
        if timed {
            plain.push(plain_secs);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((median(plain), beside.map(|_| median(pre))))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = options()?;
    let mut pool = rayon::ThreadPoolBuilder::new();
    if let Some(t) = o.threads {
        pool = pool.num_threads(t);
    }
    let pool = pool.build()?;
    let threads = pool.current_num_threads();
    if o.peak {
        for (form, gflops) in peak::measure(&pool, o.reps) {
            println!("{{\"peer\": \"peak\", \"form\": \"{form}\", \"threads\": {threads}, \"gflops\": {gflops:.2}}}");
        }
        return Ok(());
    }
    for shape in &o.shapes {
        // Inside a run's context, as a compiled graph calls it: the pool's other workers spin.
        let (secs, other) = pool.install(|| rlx_cpu::awake::run(|| time_matmul(*shape, o.reps, o.warmup, o.beside)))?;
        let [m, k, n] = *shape;
        let name = match o.beside {
            Some(Beside::Rounded(p)) => format!("rlx-{p}"),
            _ => "rlx-prepacked".to_string(),
        };
        for (peer, secs) in [("rlx", Some(secs)), (name.as_str(), other)] {
            let Some(secs) = secs else { continue };
            let gflops = 2.0 * (m * k * n) as f64 / secs / 1e9;
            println!(
                "{{\"peer\": \"{peer}\", \"m\": {m}, \"k\": {k}, \"n\": {n}, \"threads\": {threads}, \"median_ms\": {:.4}, \"gflops\": {gflops:.2}}}",
                secs * 1e3
            );
        }
    }
    Ok(())
}

/// The FMA peak: each thread runs `ACC` independent accumulator chains (more than FMA latency ×
/// FMA ports, so the chains never wait on each other) for `STEPS` steps, all threads at once.
mod peak {
    use std::time::Instant;

    const ACC: usize = 12;
    const STEPS: usize = 1 << 20;

    /// A form's name, its f32 lanes per FMA, and its loop.
    type Form = (&'static str, usize, fn() -> f32);

    /// Best GFLOP/s over `reps` short runs (at least 20: the best is the least disturbed by
    /// other processes) of every form this CPU has, summed over the pool's threads.
    pub fn measure(pool: &rayon::ThreadPool, reps: usize) -> Vec<(&'static str, f64)> {
        let mut forms: Vec<Form> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                forms.push(("avx512", 16, || unsafe { x86::avx512() }));
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                forms.push(("avx2", 8, || unsafe { x86::avx2() }));
            }
        }
        forms
            .into_iter()
            .map(|(form, lanes, run)| {
                let best = (0..reps.max(20))
                    .map(|_| {
                        let t = Instant::now();
                        std::hint::black_box(pool.broadcast(|_| run()));
                        t.elapsed().as_secs_f64()
                    })
                    .fold(f64::INFINITY, f64::min);
                let flops = (2 * lanes * ACC * STEPS * pool.current_num_threads()) as f64;
                (form, flops / best / 1e9)
            })
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use super::{ACC, STEPS};
        use std::arch::x86_64::*;

        #[target_feature(enable = "avx512f")]
        pub unsafe fn avx512() -> f32 {
            let (x, y) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
            let mut acc = [_mm512_set1_ps(1.0); ACC];
            for _ in 0..STEPS {
                for a in acc.iter_mut() {
                    *a = _mm512_fmadd_ps(*a, x, y);
                }
            }
            acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
        }

        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn avx2() -> f32 {
            let (x, y) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
            let mut acc = [_mm256_set1_ps(1.0); ACC];
            for _ in 0..STEPS {
                for a in acc.iter_mut() {
                    *a = _mm256_fmadd_ps(*a, x, y);
                }
            }
            let mut out = [0.0f32; 8];
            acc.iter().for_each(|&a| _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(a, _mm256_loadu_ps(out.as_ptr()))));
            out.iter().sum()
        }
    }
}
