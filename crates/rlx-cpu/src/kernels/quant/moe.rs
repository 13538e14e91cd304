//! Mixture-of-experts over quantized expert stacks (OPS.md §5): each token's row times its
//! expert's weight, decoded on the fly one expert slab at a time (tokens are grouped by
//! expert, so a slab serves all its tokens); and `DequantMoEWeights`, the materialized stack.

use super::rows::{matmul_rows, Rows};
use super::weights::{Gguf, MlxAffine};
use super::{expert_ids, need_len, widen_f32};
use crate::kernels::matmul::widen;
use crate::kernels::real::Real;
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::quant::{DequantGroupedMatMul, DequantGroupedMatMulMlx, DequantMoEWeights, GgufType, QuantScheme};
use rlx_ir::DType;

/// The ggml type of a GGUF scheme.
fn gguf_type(scheme: &QuantScheme) -> Result<GgufType, String> {
    scheme.gguf().ok_or_else(|| format!("needs a Gguf scheme, got {scheme:?}"))
}

/// How many slabs of `slab` bytes `len` bytes hold: an error unless a positive whole number.
fn whole_slabs(len: usize, slab: usize, of: &str) -> Result<usize, String> {
    if slab == 0 || len == 0 || !len.is_multiple_of(slab) {
        return Err(format!("the packed weight holds {len} bytes, not a whole number of {of} ({slab} bytes each)"));
    }
    Ok(len / slab)
}

/// `out[i] = input[i] · dequant(weight[expert_idx[i]])ᵀ` over GGUF slabs `[N, K]`
/// (`input [M, K]` float, `out [M, N]` F32); the expert count is the slab count.
pub fn dequant_grouped_matmul(a: &DequantGroupedMatMul, ins: &[In], out: &mut Out) -> Result<(), String> {
    let t = gguf_type(&a.scheme)?;
    let (x, w) = (ins[0], ins[1]);
    let (k, n) = (x.dims[1], out.dims[1]);
    let slab = n * t.row_bytes(k)?;
    let experts = whole_slabs(w.bytes.len(), slab, &format!("[{n}, {k}] {t:?} slabs"))?;
    let ids = expert_ids(ins[2], experts)?;
    grouped(x, &ids, experts, out, &|e| Ok(Box::new(Gguf::new(t, &w.bytes[e * slab..(e + 1) * slab], n, k)?)))
}

/// `out[i] = input[i] · dequant(expert_idx[i])ᵀ` with MLX affine experts: `weight` holds
/// `E·out·K·bits/8` code bytes (each expert `[out, K]` rows of bit streams), `scales`/`biases
/// [E, out, K/group_size]`.
pub fn dequant_grouped_matmul_mlx(a: &DequantGroupedMatMulMlx, ins: &[In], out: &mut Out) -> Result<(), String> {
    let QuantScheme::MlxAffine { bits, group_size } = a.scheme else {
        return Err(format!("needs an MlxAffine scheme, got {:?}", a.scheme));
    };
    let (x, w, bits) = (ins[0], ins[1], usize::from(bits));
    let (k, n, experts) = (x.dims[1], out.dims[1], ins[2].dims[0]);
    let (scales, biases) = (widen_f32(ins[2])?, widen_f32(ins[3])?);
    let (codes, groups) = (n * k * bits / 8, n * k / group_size.max(1));
    need_len(&format!("the packed weight ({experts} experts of [{n}, {k}] at {bits} bits)"), w.bytes.len(), experts * codes)?;
    need_len("scales", scales.len(), experts * groups)?;
    need_len("biases", biases.len(), experts * groups)?;
    let ids = expert_ids(ins[4], experts)?;
    grouped(x, &ids, experts, out, &|e| {
        let (s, z) = (scales[e * groups..(e + 1) * groups].to_vec(), biases[e * groups..(e + 1) * groups].to_vec());
        Ok(Box::new(MlxAffine::new(&w.bytes[e * codes..(e + 1) * codes], s, z, bits, group_size, (n, k))?))
    })
}

/// The rows of expert `e`.
type Slab<'s, 'a> = dyn Fn(usize) -> Result<Box<dyn Rows + 'a>, String> + 's;

/// Tokens grouped by expert, each group one blockwise product against its expert's rows.
fn grouped(x: In, ids: &[usize], experts: usize, out: &mut Out, slab: &Slab) -> Result<(), String> {
    if out.dtype != DType::F32 {
        return Err(format!("the output must be f32, got {}", out.dtype));
    }
    let (k, n) = (x.dims[1], out.dims[1]);
    let o = out.get::<f32>();
    match x.dtype {
        DType::F32 => grouped_typed(x.get::<f32>(), k, n, ids, experts, o, slab),
        DType::F64 => grouped_typed(x.get::<f64>(), k, n, ids, experts, o, slab),
        DType::F16 | DType::BF16 => grouped_typed(&widen(x), k, n, ids, experts, o, slab),
        d => Err(format!("input must be float, got {d}")),
    }
}

fn grouped_typed<T: Real + From<f32>>(
    x: &[T],
    k: usize,
    n: usize,
    ids: &[usize],
    experts: usize,
    out: &mut [f32],
    slab: &Slab,
) -> Result<(), String> {
    let mut tokens = vec![Vec::new(); experts];
    for (i, &e) in ids.iter().enumerate() {
        tokens[e].push(i);
    }
    for (e, toks) in tokens.iter().enumerate().filter(|(_, t)| !t.is_empty()) {
        let w = slab(e)?;
        let xs: Vec<T> = toks.iter().flat_map(|&i| x[i * k..(i + 1) * k].iter().copied()).collect();
        let mut res = vec![0f32; toks.len() * n];
        matmul_rows(&xs, &*w, &mut res);
        for (r, &i) in toks.iter().enumerate() {
            out[i * n..(i + 1) * n].copy_from_slice(&res[r * n..(r + 1) * n]);
        }
    }
    Ok(())
}

/// A GGUF expert stack (E slabs of `[N, K]` rows) decoded to `[E, K, N]` F32, the
/// `GroupedMatMul` bank layout (each slab transposed).
pub fn dequant_moe_weights(a: &DequantMoEWeights, w: In, out: &mut Out) -> Result<(), String> {
    let t = gguf_type(&a.scheme)?;
    let (e, k, n) = (a.experts, a.k, a.n);
    let slab = n * t.row_bytes(k)?;
    need_len(&format!("the packed weight ({e} experts of [{n}, {k}] in {t:?})"), w.bytes.len(), e * slab)?;
    if out.dtype != DType::F32 {
        return Err(format!("the output must be f32, got {}", out.dtype));
    }
    let o = out.get::<f32>();
    need_len("the output", o.len(), e * k * n)?;
    let mut rows = vec![0f32; n * k];
    for (bytes, o) in w.bytes.chunks_exact(slab.max(1)).zip(o.chunks_exact_mut((k * n).max(1))) {
        let slab = Gguf::new(t, bytes, n, k)?;
        rows.par_chunks_mut(k.max(1)).enumerate().for_each(|(j, row)| {
            for (b, blk) in row.chunks_mut(slab.block()).enumerate() {
                slab.decode(j, b, blk);
            }
        });
        o.par_chunks_mut(n.max(1)).enumerate().for_each(|(kk, o)| {
            for (j, o) in o.iter_mut().enumerate() {
                *o = rows[j * k + kk];
            }
        });
    }
    Ok(())
}
