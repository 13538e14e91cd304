//! The random stream of `RngUniform`, `RngNormal` and `Sample` (OPS.md §12): every backend
//! produces exactly these numbers. Element `i` of an output (row-major) and row `r`'s draw of a
//! `Sample` are pure functions of the op's attributes and that index, so the values do not
//! depend on threads, launch shapes or the device.
//!
//! - **Generator.** [`philox4x32_10`] (Salmon et al. 2011, Random123's `philox4x32_10`: 10
//!   rounds, multipliers `0xD2511F53`, `0xCD9E8D57`, Weyl key increments `0x9E3779B9`,
//!   `0xBB67AE85`). One call maps a 128-bit counter and a 64-bit key to four u32 words.
//! - **Key.** `[key as u32, (key >> 32) as u32]` from the op's `key` (`Sample`: its `seed`, or
//!   [`DEFAULT_SEED`] when the seed is 0).
//! - **Counter of block `b`** (the u64 block number): `[b as u32, (b >> 32) as u32, s, t]`,
//!   where for `RngNormal`/`RngUniform` `s` is the bit pattern of `op_seed + 0.0` (so −0.0 is
//!   0.0) and `t = 1` when `op_seed` is present, `s = t = 0` when it is absent; `Sample` uses
//!   `s = 0, t = 2`. The words `s, t` separate the streams of one key.
//! - **Uniform element `i`**: word `i % 4` of block `i / 4`, `u = (word >> 8)·2⁻²⁴ ∈ [0, 1)`;
//!   the value is `low + (high − low)·u` computed in f64 and rounded to f32, lowered to the
//!   largest f32 below `high` if rounding reached it.
//! - **Normal element `i`**: Box–Muller on the word pair `(w[2p], w[2p+1])`, `p = (i % 4) / 2`,
//!   of block `i / 4`: `u1 = ((w[2p] >> 8) + 1)·2⁻²⁴ ∈ (0, 1]`, `u2 = (w[2p+1] >> 8)·2⁻²⁴`,
//!   `r = √(−2 ln u1)`, `z = r·cos(2π·u2)` for even `i` and `r·sin(2π·u2)` for odd `i`, in f64;
//!   the value is `mean + scale·z` rounded to f32. (|z| ≤ 5.77: the 24-bit `u1` bounds the tail.)
//! - **Sample row `r`** (of the flattened leading axes) draws word `r % 4` of block `r / 4` as
//!   `u = ((word >> 8) + 1)·2⁻²⁴ ∈ (0, 1]`.
//!
//! **Exactness.** The words are integer arithmetic: identical everywhere. Uniform values use
//! only IEEE f64 `−`, `×`, `+` and one rounding to f32, so a backend with f64 arithmetic gives
//! them bit for bit. Normal values also take f64 `ln`, `cos` and `sin`, which math libraries
//! round differently in the last place; after the rounding to f32 that changes a value (by one
//! f32 ulp) only when the f64 result lies within a few f64 ulps of an f32 rounding boundary,
//! about one value in 2²⁸. A backend without f64 (WGSL) evaluates the same formulas in f32 and
//! agrees to within a few f32 ulps.

use super::{RngNormal, RngUniform, Sample};
use crate::ops::elementwise::emit::Target;

/// The key `Sample` uses for `seed = 0`.
pub const DEFAULT_SEED: u64 = 0x005E_ED0F_71C5_5A3D;

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox-4×32 with 10 rounds: the block of four words for `ctr` under `key`.
#[inline]
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = u64::from(M0) * u64::from(c[0]);
        let p1 = u64::from(M1) * u64::from(c[2]);
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
    }
    c
}

/// One op's stream: its key and the two counter words that tell its streams apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    pub key: [u32; 2],
    pub tag: [u32; 2],
}

impl Stream {
    /// The stream of an `RngUniform` or `RngNormal` with this `key` and `op_seed`.
    pub fn rng(key: u64, op_seed: Option<f32>) -> Stream {
        let tag = match op_seed {
            Some(s) => [(s + 0.0).to_bits(), 1],
            None => [0, 0],
        };
        Stream { key: split(key), tag }
    }

    /// The stream of a `Sample` with this `seed`.
    pub fn sample(seed: u64) -> Stream {
        Stream { key: split(if seed == 0 { DEFAULT_SEED } else { seed }), tag: [0, 2] }
    }

    /// The four words of block `b`.
    #[inline]
    pub fn block(&self, b: u64) -> [u32; 4] {
        philox4x32_10([b as u32, (b >> 32) as u32, self.tag[0], self.tag[1]], self.key)
    }
}

fn split(key: u64) -> [u32; 2] {
    [key as u32, (key >> 32) as u32]
}

const TWO_POW_M24: f64 = 1.0 / (1u64 << 24) as f64;

/// `[0, 1)` from the top 24 bits.
#[inline]
pub fn unit(w: u32) -> f64 {
    f64::from(w >> 8) * TWO_POW_M24
}

/// `(0, 1]` from the top 24 bits.
#[inline]
pub fn unit_open0(w: u32) -> f64 {
    f64::from((w >> 8) + 1) * TWO_POW_M24
}

/// Uniform element `4b + j` of `U[low, high)` from block `b`'s words `w`.
#[inline]
pub fn uniform(low: f32, high: f32, w: &[u32; 4], j: usize) -> f32 {
    let (lo, hi) = (f64::from(low), f64::from(high));
    let v = (lo + (hi - lo) * unit(w[j])) as f32;
    if v >= high { below(high) } else { v }
}

/// Normal element `4b + j` of `N(mean, scale²)` from block `b`'s words `w`.
#[inline]
pub fn normal(mean: f32, scale: f32, w: &[u32; 4], j: usize) -> f32 {
    let p = j / 2 * 2;
    let r = (-2.0 * unit_open0(w[p]).ln()).sqrt();
    let theta = std::f64::consts::TAU * unit(w[p + 1]);
    let z = if j % 2 == 0 { r * theta.cos() } else { r * theta.sin() };
    (f64::from(mean) + f64::from(scale) * z) as f32
}

/// Element `i` of an `RngUniform` output.
pub fn uniform_at(a: &RngUniform, i: u64) -> f32 {
    uniform(a.low, a.high, &Stream::rng(a.key, a.op_seed).block(i / 4), (i % 4) as usize)
}

/// Element `i` of an `RngNormal` output.
pub fn normal_at(a: &RngNormal, i: u64) -> f32 {
    normal(a.mean, a.scale, &Stream::rng(a.key, a.op_seed).block(i / 4), (i % 4) as usize)
}

/// Row `r`'s draw `u ∈ (0, 1]` of a `Sample`.
pub fn sample_draw(a: &Sample, r: u64) -> f64 {
    unit_open0(Stream::sample(a.seed).block(r / 4)[(r % 4) as usize])
}

/// The largest f32 below `x` (finite `x`).
fn below(x: f32) -> f32 {
    if x > 0.0 {
        f32::from_bits(x.to_bits() - 1)
    } else if x == 0.0 {
        -f32::from_bits(1)
    } else {
        f32::from_bits(x.to_bits() + 1)
    }
}

/// [`philox4x32_10`] as source: CUDA C `__device__ uint4 rlx_philox4x32_10(uint4 ctr, uint2
/// key)` (high words by `__umulhi`), or WGSL `fn rlx_philox4x32_10(ctr: vec4<u32>, key:
/// vec2<u32>) -> vec4<u32>` with its `rlx_mulhi` (WGSL has no 64-bit product: four 16-bit ones).
pub fn philox_source(target: Target) -> String {
    match target {
        Target::CudaC => format!(
            "__device__ __forceinline__ uint4 rlx_philox4x32_10(uint4 ctr, uint2 key) {{
    for (int r = 0; r < 10; ++r) {{
        if (r > 0) {{
            key.x += {W0:#010x}u;
            key.y += {W1:#010x}u;
        }}
        const unsigned int hi0 = __umulhi({M0:#010x}u, ctr.x), lo0 = {M0:#010x}u * ctr.x;
        const unsigned int hi1 = __umulhi({M1:#010x}u, ctr.z), lo1 = {M1:#010x}u * ctr.z;
        ctr = make_uint4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
    }}
    return ctr;
}}
"
        ),
        Target::Wgsl => format!(
            "fn rlx_mulhi(a: u32, b: u32) -> u32 {{
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let ll = al * bl;
    let hl = ah * bl;
    let lh = al * bh;
    let mid = (ll >> 16u) + (hl & 0xffffu) + (lh & 0xffffu);
    return ah * bh + (hl >> 16u) + (lh >> 16u) + (mid >> 16u);
}}
fn rlx_philox4x32_10(ctr: vec4<u32>, key: vec2<u32>) -> vec4<u32> {{
    var c = ctr;
    var k = key;
    for (var r = 0u; r < 10u; r++) {{
        if (r > 0u) {{
            k += vec2<u32>({W0:#010x}u, {W1:#010x}u);
        }}
        let hi0 = rlx_mulhi({M0:#010x}u, c.x);
        let lo0 = {M0:#010x}u * c.x;
        let hi1 = rlx_mulhi({M1:#010x}u, c.z);
        let lo1 = {M1:#010x}u * c.z;
        c = vec4<u32>(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }}
    return c;
}}
"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Shape;

    #[test]
    fn philox_matches_random123_known_answers() {
        assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
        assert_eq!(philox4x32_10([u32::MAX; 4], [u32::MAX; 2]), [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]);
        assert_eq!(
            philox4x32_10([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    /// Values the CPU kernels gave before the stream moved here (their bit patterns at
    /// elements 0–7, 1001, 4097 and 4099), which every backend must reproduce.
    #[test]
    fn values_are_the_recorded_ones() {
        const AT: [u64; 11] = [0, 1, 2, 3, 4, 5, 6, 7, 1001, 4097, 4099];
        let bits = |f: &dyn Fn(u64) -> f32| AT.map(|i| f(i).to_bits());
        let u = |key, op_seed, low, high| RngUniform { low, high, key, op_seed, shape: Some(Shape::of(&[4100])) };
        let n = |key, op_seed, mean, scale| RngNormal { mean, scale, key, op_seed, shape: Some(Shape::of(&[4100])) };
        let a = u(7, None, 0.0, 1.0);
        assert_eq!(
            bits(&|i| uniform_at(&a, i)),
            [
                0x3f74607a, 0x3f4009f9, 0x3de9d5d0, 0x3daf6d60, 0x3ed05d1c, 0x3f4b97bc, 0x3e2febfc, 0x3f7535ee,
                0x3f7f9f70, 0x3f2feecd, 0x3ec97d96
            ]
        );
        let a = u(0x0123_4567_89ab_cdef, Some(2.5), -3.0, 5.0);
        assert_eq!(
            bits(&|i| uniform_at(&a, i)),
            [
                0xbf849098, 0x3f63f2e8, 0x3f216f18, 0xbf98d628, 0x3fb94c28, 0xbe284820, 0xc0043bd4, 0x3fd95788,
                0x40839243, 0x3f228018, 0x402fd034
            ]
        );
        let a = u(u64::MAX, Some(-0.0), 1.0, 1.0 + 8.0 * f32::EPSILON);
        assert_eq!(
            bits(&|i| uniform_at(&a, i)),
            [
                0x3f800002, 0x3f800002, 0x3f800000, 0x3f800006, 0x3f800003, 0x3f800007, 0x3f800006, 0x3f800002,
                0x3f800005, 0x3f800007, 0x3f800001
            ]
        );
        let a = n(3, None, 0.0, 1.0);
        assert_eq!(
            bits(&|i| normal_at(&a, i)),
            [
                0x3ef1f29d, 0x3eda49d2, 0x3db3acac, 0xbf69f9d5, 0xbfc4dd33, 0xbf0422f7, 0xbfac81de, 0xbf8a993f,
                0xbf2ccbd8, 0xbf338416, 0x3ffa0ad9
            ]
        );
        let a = n(0xdead_beef_0000_0001, Some(-1.0), 1.5, 2.0);
        assert_eq!(
            bits(&|i| normal_at(&a, i)),
            [
                0x4002031d, 0xbd8a7ac3, 0x3ec3763f, 0x40257117, 0xbfcd216e, 0x3f545249, 0xbe0a657f, 0x403417a7,
                0x3ca44b78, 0x4004cdee, 0xbf1926f5
            ]
        );
        // `Sample` over 2¹⁶ equal logits picks token ⌈u·2¹⁶⌉ − 1 (the recorded ids).
        for (seed, ids) in [
            (0, [39259, 50063, 22539, 45640, 38064, 27269, 12676, 16823, 38009]),
            (42, [21440, 12277, 29491, 4808, 24674, 54668, 37536, 4351, 50299]),
        ] {
            let s = Sample { top_k: 0, top_p: 1.0, temperature: 1.0, seed };
            for (r, id) in ids.into_iter().enumerate() {
                let u = sample_draw(&s, r as u64);
                assert_eq!((u * 65536.0).ceil() as i64 - 1, id, "seed {seed} row {r}: u = {u}");
            }
        }
    }

    #[test]
    fn element_i_reads_word_i_mod_4_of_block_i_div_4() {
        let a = RngUniform { low: 0.0, high: 1.0, key: 0xfeed_f00d_1234_5678, op_seed: Some(3.0), shape: None };
        let s = Stream::rng(a.key, a.op_seed);
        assert_eq!(s, Stream { key: [0x1234_5678, 0xfeed_f00d], tag: [3.0f32.to_bits(), 1] });
        for i in [0u64, 5, (1 << 34) + 3, u64::MAX - 2] {
            let w = philox4x32_10([(i / 4) as u32, ((i / 4) >> 32) as u32, 3.0f32.to_bits(), 1], s.key);
            assert_eq!(uniform_at(&a, i), ((w[(i % 4) as usize] >> 8) as f64 / 16_777_216.0) as f32);
        }
    }

    #[test]
    fn philox_sources_are_well_formed() {
        for target in [Target::CudaC, Target::Wgsl] {
            let src = philox_source(target);
            let mut depth = 0i32;
            for c in src.chars() {
                depth += match c {
                    '(' | '{' => 1,
                    ')' | '}' => -1,
                    _ => 0,
                };
                assert!(depth >= 0, "{src}");
            }
            assert_eq!(depth, 0, "{src}");
            for constant in ["0xd2511f53u", "0xcd9e8d57u", "0x9e3779b9u", "0xbb67ae85u"] {
                assert!(src.contains(constant), "{constant} missing from\n{src}");
            }
            assert!(src.contains("rlx_philox4x32_10("));
        }
        assert!(philox_source(Target::CudaC).contains("__umulhi("));
        assert!(philox_source(Target::Wgsl).contains("fn rlx_mulhi(a: u32, b: u32) -> u32"));
    }

    /// The WGSL high-word product, transcribed to Rust, against the 64-bit one.
    #[test]
    fn sixteen_bit_high_word_product_is_exact() {
        let mulhi = |a: u32, b: u32| {
            let (al, ah, bl, bh) = (a & 0xffff, a >> 16, b & 0xffff, b >> 16);
            let (ll, hl, lh) = (al * bl, ah * bl, al * bh);
            let mid = (ll >> 16) + (hl & 0xffff) + (lh & 0xffff);
            ah * bh + (hl >> 16) + (lh >> 16) + (mid >> 16)
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (a, b) = (x as u32, (x >> 32) as u32);
            assert_eq!(mulhi(a, b), ((u64::from(a) * u64::from(b)) >> 32) as u32);
        }
        assert_eq!(mulhi(u32::MAX, u32::MAX), 0xffff_fffe);
    }
}
