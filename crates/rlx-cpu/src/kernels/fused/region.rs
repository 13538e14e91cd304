//! `ElementwiseRegion`: the chain evaluated block by block, each block's inputs and step
//! values held in buffers of `BLOCK` elements rather than whole-tensor temporaries.
//!
//! F32 chains (f32 or Bool inputs, Bool only from comparisons, casts only to f32) run each
//! step as a tight loop over f32 buffers, comparisons as 0/1. Any other chain runs each step
//! through the standalone elementwise kernels on the block's byte buffers.

use crate::kernels::elementwise::{act, activation, binary, cast, compare, gelu, per_act, select, silu};
use crate::kernels::real::Real;
use crate::kernels::{by_size, PAR_MIN};
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::fused::{ChainStep, ElementwiseRegion, Operand, RegionPrologue};
use rlx_ir::DType;

/// Output elements evaluated together.
const BLOCK: usize = 256;
/// Blocks one task takes.
const BLOCKS_PER_TASK: usize = 16;

/// How output element `g` finds its element of one input.
#[derive(Clone, Copy)]
enum Read {
    /// Element `g` (the input has the output's element count).
    Same,
    /// Element 0.
    Scalar,
    /// Element `g mod m`.
    Modulus(usize),
    /// A half-resolution `[N, C, H, W]` input under a `[N, C, 2H, 2W]` output.
    HalfRes { h: usize, w: usize },
}

impl Read {
    fn of(r: &ElementwiseRegion, i: usize, x: &In, out: &[usize]) -> Read {
        if r.prologue == RegionPrologue::ResizeNearest2x && r.prologue_input as usize == i {
            return Read::HalfRes { h: x.dims[2], w: x.dims[3] };
        }
        match r.input_modulus[i] {
            _ if (r.scalar_input_mask >> i) & 1 == 1 || x.numel() == 1 => Read::Scalar,
            0 => Read::Same,
            m if m as usize == out.iter().product::<usize>() => Read::Same,
            m => Read::Modulus(m as usize),
        }
    }

    /// Fills `dst` with the elements read for outputs `g0 .. g0 + dst.len()`.
    fn gather<T: Copy>(self, src: &[T], g0: usize, dst: &mut [T]) {
        match self {
            Read::Same => dst.copy_from_slice(&src[g0..g0 + dst.len()]),
            Read::Scalar => dst.fill(src[0]),
            Read::Modulus(m) => {
                let mut at = g0 % m;
                for d in dst {
                    *d = src[at];
                    at = if at + 1 == m { 0 } else { at + 1 };
                }
            }
            Read::HalfRes { h, w } => {
                for (k, d) in dst.iter_mut().enumerate() {
                    let g = g0 + k;
                    let (plane, y, x) = (g / (4 * h * w), (g / (2 * w)) % (2 * h), g % (2 * w));
                    *d = src[(plane * h + y / 2) * w + x / 2];
                }
            }
        }
    }
}

/// Runs the region over inputs of any dtype; `out` has the dtype inference gave the chain.
pub fn elementwise_region(r: &ElementwiseRegion, ins: &[In], out: &mut Out) -> Result<(), String> {
    let total = out.numel();
    if total == 0 {
        return Ok(());
    }
    let reads: Vec<Read> = ins.iter().enumerate().map(|(i, x)| Read::of(r, i, x, out.dims)).collect();
    let dtypes = step_dtypes(&r.chain, ins);
    let size = out.dtype.size();
    let fast = f32_chain(&r.chain, ins, &dtypes, out.dtype);
    let task = |(t, o): (usize, &mut [u8])| {
        let g0 = t * BLOCK * BLOCKS_PER_TASK;
        let elems = o.len() / size;
        if fast {
            f32_task(&r.chain, ins, &reads, g0, o, elems);
            Ok(())
        } else {
            generic_task(&r.chain, ins, &reads, &dtypes, g0, o, elems)
        }
    };
    let chunk = BLOCK * BLOCKS_PER_TASK * size;
    if total < PAR_MIN {
        out.bytes.chunks_mut(chunk).enumerate().try_for_each(task)
    } else {
        out.bytes.par_chunks_mut(chunk).enumerate().try_for_each(task)
    }
}

/// The dtype of each step's value (the standalone ops' rules).
fn step_dtypes(chain: &[ChainStep], ins: &[In]) -> Vec<DType> {
    let mut dtypes: Vec<DType> = Vec::with_capacity(chain.len());
    for step in chain {
        let of = |o: Operand| match o {
            Operand::Input(i) => ins[i as usize].dtype,
            Operand::Step(j) => dtypes[j as usize],
        };
        let d = match *step {
            ChainStep::Activation(_, a) | ChainStep::Binary(_, a, _) | ChainStep::Where(_, a, _) => of(a),
            ChainStep::Cast(to, _) => to,
            ChainStep::Compare(..) => DType::Bool,
        };
        dtypes.push(d);
    }
    dtypes
}

/// Whether the chain runs on f32 buffers: every input f32 or Bool (read as 0/1), every step
/// f32 but comparisons (0/1), casts only to f32, and an f32 or Bool result.
fn f32_chain(chain: &[ChainStep], ins: &[In], dtypes: &[DType], out: DType) -> bool {
    let inputs = ins.iter().all(|i| matches!(i.dtype, DType::F32 | DType::Bool));
    let steps = chain.iter().zip(dtypes).all(|(s, d)| match s {
        ChainStep::Compare(..) => true,
        ChainStep::Cast(to, _) => *to == DType::F32,
        _ => *d == DType::F32,
    });
    inputs && steps && matches!(out, DType::F32 | DType::Bool)
}

/// One task of the f32 path: `elems` outputs from `g0` into `out` (f32, or Bool bytes when
/// the chain ends in a comparison).
fn f32_task(chain: &[ChainStep], ins: &[In], reads: &[Read], g0: usize, out: &mut [u8], elems: usize) {
    let n_in = ins.len();
    let direct: Vec<Option<&[f32]>> =
        ins.iter().zip(reads).map(|(x, r)| (x.dtype == DType::F32 && matches!(r, Read::Same)).then(|| x.get::<f32>())).collect();
    let mut bufs = vec![[0f32; BLOCK]; n_in + chain.len()];
    let bool_out = out.len() == elems;
    for start in (0..elems).step_by(BLOCK) {
        let len = BLOCK.min(elems - start);
        let g = g0 + start;
        for (i, (x, read)) in ins.iter().zip(reads).enumerate() {
            match x.dtype {
                _ if direct[i].is_some() => {}
                DType::F32 => read.gather(x.get::<f32>(), g, &mut bufs[i][..len]),
                _ => {
                    let mut flags = [0u8; BLOCK];
                    read.gather(x.bytes, g, &mut flags[..len]);
                    bufs[i][..len].iter_mut().zip(&flags[..len]).for_each(|(b, &f)| *b = if f != 0 { 1.0 } else { 0.0 });
                }
            }
        }
        for (j, step) in chain.iter().enumerate() {
            let (done, rest) = bufs.split_at_mut(n_in + j);
            let at = |o: Operand| -> &[f32] {
                match o {
                    Operand::Input(i) => match direct[i as usize] {
                        Some(x) => &x[g..g + len],
                        None => &done[i as usize][..len],
                    },
                    Operand::Step(k) => &done[n_in + k as usize][..len],
                }
            };
            f32_step(step, at, &mut rest[0][..len]);
        }
        let last = &bufs[n_in + chain.len() - 1][..len];
        if bool_out {
            out[start..start + len].iter_mut().zip(last).for_each(|(o, &v)| *o = (v != 0.0) as u8);
        } else {
            let o: &mut [f32] = bytemuck::cast_slice_mut(&mut out[4 * start..4 * (start + len)]);
            o.copy_from_slice(last);
        }
    }
}

/// One step over f32 buffers (comparisons give 0/1, casts to f32 copy).
fn f32_step<'a>(step: &ChainStep, at: impl Fn(Operand) -> &'a [f32], dst: &mut [f32]) {
    fn zip(a: &[f32], b: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32) {
        dst.iter_mut().zip(a).zip(b).for_each(|((d, &x), &y)| *d = f(x, y));
    }
    match *step {
        ChainStep::Activation(ActivationKind::Gelu, a) => gelu(at(a), dst),
        ChainStep::Activation(ActivationKind::Silu, a) => silu(at(a), dst),
        ChainStep::Activation(kind, a) => {
            let a = at(a);
            per_act!(kind, K => dst.iter_mut().zip(a).for_each(|(d, &x)| *d = act(K, x)))
        }
        ChainStep::Cast(_, a) => dst.copy_from_slice(at(a)),
        ChainStep::Binary(op, a, b) => {
            let (a, b) = (at(a), at(b));
            match op {
                BinaryOp::Add => zip(a, b, dst, |x, y| x + y),
                BinaryOp::Sub => zip(a, b, dst, |x, y| x - y),
                BinaryOp::Mul => zip(a, b, dst, |x, y| x * y),
                BinaryOp::Div => zip(a, b, dst, |x, y| x / y),
                BinaryOp::Max => zip(a, b, dst, Real::max_nan),
                BinaryOp::Min => zip(a, b, dst, Real::min_nan),
                BinaryOp::Pow => zip(a, b, dst, f32::powf),
                BinaryOp::Mod => zip(a, b, dst, |x, y| x % y),
                BinaryOp::Atan2 => zip(a, b, dst, f32::atan2),
                _ => unreachable!("inference gives bitwise ops no f32 operands"),
            }
        }
        ChainStep::Compare(op, a, b) => {
            let (a, b) = (at(a), at(b));
            let bit = |c: bool| if c { 1.0 } else { 0.0 };
            match op {
                CmpOp::Eq => zip(a, b, dst, |x, y| bit(x == y)),
                CmpOp::Ne => zip(a, b, dst, |x, y| bit(x != y)),
                CmpOp::Lt => zip(a, b, dst, |x, y| bit(x < y)),
                CmpOp::Le => zip(a, b, dst, |x, y| bit(x <= y)),
                CmpOp::Gt => zip(a, b, dst, |x, y| bit(x > y)),
                CmpOp::Ge => zip(a, b, dst, |x, y| bit(x >= y)),
            }
        }
        ChainStep::Where(c, t, f) => {
            let (c, t, f) = (at(c), at(t), at(f));
            dst.iter_mut().zip(c).zip(t.iter().zip(f)).for_each(|((d, &c), (&t, &f))| *d = if c != 0.0 { t } else { f });
        }
    }
}

/// One task of the generic path: per block, inputs gathered into byte buffers and each step
/// run by its standalone kernel over `[len]` operands.
fn generic_task(
    chain: &[ChainStep],
    ins: &[In],
    reads: &[Read],
    dtypes: &[DType],
    g0: usize,
    out: &mut [u8],
    elems: usize,
) -> Result<(), String> {
    let size = out.len() / elems.max(1);
    let words = |d: DType| (BLOCK * d.size()).div_ceil(8);
    let mut input_words: Vec<Vec<u64>> = ins.iter().map(|x| vec![0; words(x.dtype)]).collect();
    let mut step_words: Vec<Vec<u64>> = dtypes.iter().map(|&d| vec![0; words(d)]).collect();
    let mut inputs: Vec<&mut [u8]> = input_words.iter_mut().map(|w| bytemuck::cast_slice_mut(w.as_mut_slice())).collect();
    let mut steps: Vec<&mut [u8]> = step_words.iter_mut().map(|w| bytemuck::cast_slice_mut(w.as_mut_slice())).collect();
    for start in (0..elems).step_by(BLOCK) {
        let len = BLOCK.min(elems - start);
        let dims = [len];
        for ((x, read), buf) in ins.iter().zip(reads).zip(&mut inputs) {
            let bytes = &mut buf[..len * x.dtype.size()];
            by_size!(x.dtype.size(), T => read.gather(x.get::<T>(), g0 + start, bytemuck::cast_slice_mut::<u8, T>(bytes)));
        }
        for (j, step) in chain.iter().enumerate() {
            let (done, rest) = steps.split_at_mut(j);
            let at = |o: Operand| match o {
                Operand::Input(i) => {
                    let d = ins[i as usize].dtype;
                    In { dtype: d, dims: &dims, bytes: &inputs[i as usize][..len * d.size()] }
                }
                Operand::Step(k) => {
                    let d = dtypes[k as usize];
                    In { dtype: d, dims: &dims, bytes: &done[k as usize][..len * d.size()] }
                }
            };
            let mut dst = Out { dtype: dtypes[j], dims: &dims, bytes: &mut rest[0][..len * dtypes[j].size()] };
            match *step {
                ChainStep::Activation(kind, a) => activation(kind, at(a), &mut dst),
                ChainStep::Cast(_, a) => cast(at(a), &mut dst),
                ChainStep::Binary(op, a, b) => binary(op, at(a), at(b), &mut dst),
                ChainStep::Compare(op, a, b) => compare(op, at(a), at(b), &mut dst),
                ChainStep::Where(c, t, f) => select(at(c), at(t), at(f), &mut dst),
            }?;
        }
        let last = steps.last().ok_or("the region chain is empty")?;
        out[start * size..(start + len) * size].copy_from_slice(&last[..len * size]);
    }
    Ok(())
}
