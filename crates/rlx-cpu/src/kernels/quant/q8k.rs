//! `DequantMatMul` under `Activations::Q8Blocks` for GGUF `Q4_K`, `Q5_K` and `Q6_K` weights
//! (llama.cpp's CPU arithmetic for the K-quants): each activation row is rounded once to 8-bit
//! blocks of 256 as ggml's `Q8_K` ([`quantize`]), keeping the sum of every 16 codes. Each weight
//! super-block meets its activation block in exact integer sums — per sub-block the dot product
//! of the codes times the sub-block's integer scale, and for `Q4_K`/`Q5_K` the sub-blocks'
//! integer minimums times the activation sums — scaled once per super-block by the f32 products
//! of the two blocks' scales. The weights are read in the panel layout of [`super::panels`];
//! this file holds the portable kernel, [`super::q8k_simd`] the SIMD ones, which give its bits.

use super::panels::{f16_at, Panels, Sums, PANEL};
use rlx_ir::ops::quant::GgufType;

/// Values per super-block, of the weights and of the rounded activations.
pub(super) const QK_K: usize = 256;
/// Values per activation sum, and per `Q6_K` sub-block.
pub(super) const GROUP: usize = 16;

/// Rows of activations rounded to 8-bit blocks of 256, block `i` covering values `256·i ..`.
pub(super) struct Q8KRows {
    /// The codes, `[rows, k]`.
    pub q: Vec<i8>,
    /// Per block: the f32 scale `1/s`, where `s = −127/v` and `v` is the block's value of
    /// largest magnitude; 0 for an all-zero block.
    pub d: Vec<f32>,
    /// Per 16 values: `Σq` (ggml's `bsums`).
    pub sums: Vec<i32>,
}

/// Rounds `x` (a whole number of 256-blocks) as ggml's `quantize_row_q8_K` does:
/// `q = round_half_even(s·x)` with `s = −127/v` for `v` the first value of largest magnitude,
/// and scale `1/s`, so the value `v` becomes −127; an all-zero block keeps zero codes and scale.
pub(super) fn quantize(x: &[f32]) -> Q8KRows {
    let blocks = x.len() / QK_K;
    let mut rows = Q8KRows { q: vec![0; blocks * QK_K], d: vec![0.0; blocks], sums: vec![0; blocks * (QK_K / GROUP)] };
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("sse4.1") {
        // Safety: SSE4.1 was just detected.
        unsafe { quantize_sse41(x, &mut rows) };
        return rows;
    }
    quantize_into(x, &mut rows);
    rows
}

/// [`quantize_into`] compiled with SSE4.1, whose `roundps` rounds half to even in one
/// instruction (baseline x86-64 calls libm's `rintf` per value).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
unsafe fn quantize_sse41(x: &[f32], rows: &mut Q8KRows) {
    quantize_into(x, rows)
}

#[inline(always)]
fn quantize_into(x: &[f32], rows: &mut Q8KRows) {
    let blocks = x.chunks_exact(QK_K).zip(rows.q.chunks_exact_mut(QK_K)).zip(&mut rows.d).zip(rows.sums.chunks_exact_mut(QK_K / GROUP));
    for (((xb, qb), d_out), sums) in blocks {
        let (mut amax, mut v) = (0f32, 0f32);
        for &e in xb {
            if e.abs() > amax {
                (amax, v) = (e.abs(), e);
            }
        }
        if amax == 0.0 {
            continue;
        }
        let s = -127.0 / v;
        for (q, &e) in qb.iter_mut().zip(xb) {
            *q = (s * e).round_ties_even().min(127.0) as i8;
        }
        *d_out = 1.0 / s;
        for (sum, g) in sums.iter_mut().zip(qb.chunks_exact(GROUP)) {
            *sum = g.iter().map(|&q| i32::from(q)).sum();
        }
    }
}

/// The integer parts of one K-quant super-block, per value and per 16 values.
struct Parts {
    /// Unsigned codes: 4 bits (`Q4_K`), 5 (`Q5_K`) or 6 (`Q6_K`, to be offset by −32).
    codes: [u8; QK_K],
    /// Per 16 values, the sub-block's integer scale (`Q4_K`/`Q5_K` repeat each of their 8).
    scales: [i32; QK_K / GROUP],
    /// Per 16 values, the sub-block's integer minimum (0 for `Q6_K`).
    mins: [i32; QK_K / GROUP],
    d: f32,
    dmin: f32,
}

/// Splits a GGUF block `b` of `t` into its [`Parts`].
fn parts(t: GgufType, b: &[u8]) -> Parts {
    let mut p = Parts { codes: [0; QK_K], scales: [0; QK_K / GROUP], mins: [0; QK_K / GROUP], d: 0.0, dmin: 0.0 };
    if t == GgufType::Q6_K {
        let (ql, qh) = (&b[..128], &b[128..192]);
        for (e, c) in p.codes.iter_mut().enumerate() {
            let (half, sub, l) = (e / 128, e % 128 / 32, e % 32);
            let lo = (ql[64 * half + 32 * (sub % 2) + l] >> (4 * (sub / 2))) & 15;
            let hi = (qh[32 * half + l] >> (2 * sub)) & 3;
            *c = lo | (hi << 4);
        }
        for (s, &byte) in p.scales.iter_mut().zip(&b[192..208]) {
            *s = i32::from(byte as i8);
        }
        p.d = f16_at(&b[208..]);
        return p;
    }
    let (packed, qs) = (&b[4..16], if t == GgufType::Q5_K { &b[48..176] } else { &b[16..144] });
    for (e, c) in p.codes.iter_mut().enumerate() {
        let (sub, l) = (e / 32, e % 32);
        *c = (qs[32 * (sub / 2) + l] >> (4 * (sub % 2))) & 15;
        if t == GgufType::Q5_K {
            *c |= ((b[16 + l] >> sub) & 1) << 4;
        }
    }
    for sub in 0..8 {
        let (sc, mn) = if sub < 4 {
            (packed[sub] & 63, packed[sub + 4] & 63)
        } else {
            ((packed[sub + 4] & 15) | ((packed[sub - 4] >> 6) << 4), (packed[sub + 4] >> 4) | ((packed[sub] >> 6) << 4))
        };
        p.scales[2 * sub..2 * sub + 2].fill(i32::from(sc));
        p.mins[2 * sub..2 * sub + 2].fill(i32::from(mn));
    }
    (p.d, p.dmin) = (f16_at(b), f16_at(&b[2..]));
    p
}

/// The portable [`super::panels::Kernel`] of the K-quants: per row of the panel, its GGUF block
/// restored and split into [`Parts`], the exact integer sums `Σ_g scale_g·Σ (code − offset)·q`
/// and `Σ_g min_g·Σq` over the 16 groups of 16 values, then per super-block
/// `acc = fma(isum, d_w·d, acc)` and, with minimums, `acc = fma(−msum, dmin_w·d, acc)` — the f32
/// steps of the SIMD kernels, so all give the same bits.
pub(super) fn kernel_portable(w: &Panels, p: usize, a: &Q8KRows, m0: usize, rows: usize, out: &mut Sums) {
    let (t, bb) = (w.t, w.t.block_bytes());
    let offset = if t == GgufType::Q6_K { 32 } else { 0 };
    let mut blk = vec![0u8; bb];
    for acc in out.iter_mut().take(rows) {
        acc.fill(0.0);
    }
    for b in 0..w.blocks {
        for lane in 0..PANEL {
            w.gguf_block(p, b, lane, &mut blk);
            let k = parts(t, &blk);
            for (r, acc) in out.iter_mut().enumerate().take(rows) {
                let xi = (m0 + r) * w.blocks + b;
                let xq = &a.q[xi * QK_K..(xi + 1) * QK_K];
                let xs = &a.sums[xi * (QK_K / GROUP)..(xi + 1) * (QK_K / GROUP)];
                let (mut isum, mut msum) = (0i32, 0i32);
                for g in 0..QK_K / GROUP {
                    let codes = k.codes[g * GROUP..(g + 1) * GROUP].iter().zip(&xq[g * GROUP..(g + 1) * GROUP]);
                    let dot: i32 = codes.map(|(&c, &x)| (i32::from(c) - offset) * i32::from(x)).sum();
                    isum += k.scales[g] * dot;
                    msum += k.mins[g] * xs[g];
                }
                let acc = &mut acc[lane];
                *acc = (isum as f32).mul_add(k.d * a.d[xi], *acc);
                if t != GgufType::Q6_K {
                    *acc = (-(msum as f32)).mul_add(k.dmin * a.d[xi], *acc);
                }
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::panels::PORTABLE;
    use super::super::q8::tests::{activations, stream, weight_blocks};
    use super::*;
    use half::f16;

    /// Random blocks of `t`: for the K-quants arbitrary bytes with finite f16 scales of either
    /// sign (`d`, `dmin`), for the others [`weight_blocks`].
    pub(in super::super) fn blocks(t: GgufType, count: usize, seed: u32) -> Vec<u8> {
        let halves: &[usize] = match t {
            GgufType::Q4_K | GgufType::Q5_K => &[0, 2],
            GgufType::Q6_K => &[208],
            _ => return weight_blocks(t, count, seed),
        };
        let mut next = stream(seed ^ 0x5eed);
        let mut out: Vec<u8> = (0..count * t.block_bytes()).map(|_| next() as u8).collect();
        for blk in out.chunks_exact_mut(t.block_bytes()) {
            for &at in halves {
                let v = ((next() % 2000) as f32 / 1000.0 - 1.0) * 0.05;
                blk[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        out
    }

    /// The values of a GGUF block of `t`, in f64, written from ggml's block tables
    /// (`y = d·sc·q − dmin·m` per sub-block of 32 for `Q4_K`/`Q5_K`, `y = d·sc·(q − 32)` per
    /// sub-block of 16 for `Q6_K`), walking the bytes as ggml's dequantizers do.
    fn decode_f64(t: GgufType, b: &[u8]) -> Vec<f64> {
        let h = |o: usize| f64::from(f16::from_le_bytes([b[o], b[o + 1]]).to_f32());
        let mut y = Vec::with_capacity(QK_K);
        if t == GgufType::Q6_K {
            let d = h(208);
            let mut vals = [0f64; QK_K];
            for half in 0..2 {
                let (ql, qh, sc) = (&b[64 * half..], &b[128 + 32 * half..], &b[192 + 8 * half..]);
                for l in 0..32 {
                    let is = l / 16;
                    let q = [
                        (ql[l] & 0xF) | ((qh[l] & 3) << 4),
                        (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                        (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                        (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                    ];
                    for (i, &q) in q.iter().enumerate() {
                        vals[128 * half + 32 * i + l] = d * f64::from(sc[is + 2 * i] as i8) * (f64::from(q) - 32.0);
                    }
                }
            }
            y.extend(vals);
            return y;
        }
        let (d, dmin) = (h(0), h(2));
        let s = &b[4..16];
        let scale_min = |j: usize| -> (f64, f64) {
            let (sc, m) = if j < 4 { (s[j] & 63, s[j + 4] & 63) } else { ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)) };
            (f64::from(sc), f64::from(m))
        };
        let (qh, qs) = if t == GgufType::Q5_K { (&b[16..48], &b[48..176]) } else { (&b[0..0], &b[16..144]) };
        for pair in 0..4 {
            for (j, shift) in [(2 * pair, 0), (2 * pair + 1, 4)] {
                let (sc, m) = scale_min(j);
                for l in 0..32 {
                    let mut q = f64::from((qs[32 * pair + l] >> shift) & 0xF);
                    if !qh.is_empty() && (qh[l] >> j) & 1 == 1 {
                        q += 16.0;
                    }
                    y.push(d * sc * q - dmin * m);
                }
            }
        }
        y
    }

    /// ggml's `Q8_K` rounding of one block of 256, written out per value: `(codes, d)`.
    fn round_q8k(x: &[f32]) -> (Vec<f64>, f64) {
        let v = x.iter().fold(0f32, |m, &e| if e.abs() > m.abs() { e } else { m });
        if v == 0.0 {
            return (vec![0.0; x.len()], 0.0);
        }
        let s = -127.0 / v;
        (x.iter().map(|&e| f64::from((s * e).round_ties_even().min(127.0))).collect(), f64::from(1.0 / s))
    }

    /// The f64 reference: each activation block rounded as ggml's `Q8_K`, times the weight's
    /// values in f64; with, per output, the sum of the magnitudes of its terms.
    fn reference(t: GgufType, x: &[f32], w: &[u8], n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
        let (bb, blocks, rows) = (t.block_bytes(), k / QK_K, x.len() / k);
        let (mut out, mut mag) = (vec![0f64; rows * n], vec![0f64; rows * n]);
        for m in 0..rows {
            for b in 0..blocks {
                let (xq, d) = round_q8k(&x[m * k + b * QK_K..m * k + (b + 1) * QK_K]);
                for j in 0..n {
                    let wv = decode_f64(t, &w[(j * blocks + b) * bb..(j * blocks + b + 1) * bb]);
                    for (wv, xq) in wv.iter().zip(&xq) {
                        out[m * n + j] += wv * d * xq;
                        mag[m * n + j] += (wv * d * xq).abs();
                    }
                }
            }
        }
        (out, mag)
    }

    const TYPES: [GgufType; 3] = [GgufType::Q4_K, GgufType::Q5_K, GgufType::Q6_K];
    const SHAPES: [(usize, usize, usize); 7] = [(1, 7, 256), (1, 8, 512), (2, 4, 256), (6, 8, 768), (7, 5, 512), (9, 17, 256), (5, 300, 512)];

    /// Activations of [`activations`] with a whole 256-block of zeros where there are 3 blocks.
    fn k_activations(len: usize, seed: u32) -> Vec<f32> {
        let mut x = activations(len, seed);
        if len >= 3 * QK_K {
            x[QK_K..2 * QK_K].fill(0.0);
        }
        x
    }

    #[test]
    fn rounding_follows_ggml() {
        let mut x = vec![0f32; QK_K];
        x[..5].copy_from_slice(&[-127.0, 2.5, 3.5, -0.5, 127.0]);
        // The first value of largest magnitude, −127, sets s = 1: codes are the values rounded
        // half to even.
        let r = quantize(&x);
        assert_eq!(&r.q[..5], &[-127, 2, 4, 0, 127]);
        assert_eq!((r.d[0], r.sums[0], r.sums[1]), (1.0, 6, 0));
        // A positive extreme: s = −127/4, so codes flip sign and d is negative.
        let mut y = vec![0.25f32; QK_K];
        y[100] = 4.0;
        let r = quantize(&y);
        assert_eq!((r.q[100], r.q[0], r.d[0]), (-127, -8, 1.0 / (-127.0f32 / 4.0)));
        assert_eq!(r.sums[0], -128);
        let zero = quantize(&[0.0; QK_K]);
        assert!(zero.q.iter().all(|&q| q == 0) && zero.d[0] == 0.0 && zero.sums.iter().all(|&s| s == 0));
    }

    /// Blocks decoded by gguf-py (`gguf.quants.dequantize`) against the reference's decoder and
    /// the kernel's [`parts`]; made by `tools/fixtures/kquant_blocks.py`.
    #[test]
    fn blocks_decode_as_gguf_py_does() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/ir/gguf_kquant_blocks.json");
        let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for t in TYPES {
            let cases = fixture["types"][format!("{t:?}")].as_array().unwrap();
            assert!(cases.len() >= 4, "{t:?}");
            for (i, case) in cases.iter().enumerate() {
                let bytes: Vec<u8> = case["bytes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect();
                let want: Vec<f64> = case["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
                let p = parts(t, &bytes);
                let offset = if t == GgufType::Q6_K { 32.0 } else { 0.0 };
                let scale = want.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
                for (e, (&want, got)) in want.iter().zip(decode_f64(t, &bytes)).enumerate() {
                    let g = e / GROUP;
                    let from_parts = f64::from(p.d) * f64::from(p.scales[g]) * (f64::from(p.codes[e]) - offset) - f64::from(p.dmin) * f64::from(p.mins[g]);
                    assert!((got - want).abs() <= 1e-6 * scale, "{t:?} block {i} [{e}]: reference {got} vs gguf-py {want}");
                    assert!((from_parts - want).abs() <= 1e-6 * scale, "{t:?} block {i} [{e}]: parts {from_parts} vs gguf-py {want}");
                }
            }
        }
    }

    #[test]
    fn portable_kernel_matches_the_f64_reference() {
        for t in TYPES {
            for (rows, n, k) in SHAPES {
                let w = blocks(t, n * k / QK_K, (11 * rows + n + k) as u32);
                let x = k_activations(rows * k, (5 * rows + n) as u32);
                let mut got = vec![f32::NAN; rows * n];
                Panels::new(t, &w, n, k).unwrap().matmul(&x, &mut got, PORTABLE);
                let (want, mag) = reference(t, &x, &w, n, k);
                for (i, ((g, e), m)) in got.iter().zip(&want).zip(&mag).enumerate() {
                    assert!((f64::from(*g) - e).abs() <= 1e-6 * m.max(1e-30), "{t:?} {rows}×{n}×{k} [{i}]: {g} vs {e} (terms {m})");
                }
            }
        }
    }
}
