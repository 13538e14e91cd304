//! Matmuls over weights stored quantized, activations float (OPS.md §5).
//!
//! Packed GGUF operands are U8 and either rank 2 `[n, row_bytes]` (one row of `k` weights
//! per output feature, so `n` and `k` are checked) or a rank-1 blob, which carries no shape:
//! then the attributes declare `n` (`out_dim`) and the blob's byte count is checked.

use super::{div_exact, last_dim, need_dtype, need_float, need_shape, scale_exact, static_bytes, GgufType, QuantScheme};
use crate::ops::matmul::{dims_agree, need_index_vector, need_rank, pick_dim};
use crate::ops::{Arity, OpDef};
use crate::{DType, Dim, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// `x [.., m, k] · dequant(W) → [.., m, n]` F32, the weight operands set by `scheme`
/// (OPS.md §5 table). Non-GGUF schemes store `W [k, n]` except the MLX ones, which keep MLX's
/// `[n, k]` (`quantized_matmul(transpose=True)`) layout as `DequantGroupedMatMulMlx` does [def];
/// MLX codes are U32 words `[n, k·bits/32]` or the same bytes as U8 `[n, k·bits/8]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantMatMul {
    pub scheme: QuantScheme,
    /// `n`, declared for a rank-1 GGUF blob; elsewhere optional and checked.
    pub out_dim: Option<usize>,
    /// How `x` meets the weight; printed only when not [`Activations::Exact`].
    #[serde(default, skip_serializing_if = "Activations::is_exact")]
    pub activations: Activations,
}

/// The arithmetic of a `DequantMatMul`'s product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Activations {
    /// Float `x` times the exactly decoded weight, accumulated in floats (the op's semantics).
    #[default]
    Exact,
    /// llama.cpp's CPU arithmetic, for GGUF `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1` and `Q8_0` weights:
    /// each block of 32 values of a row of `x` is first rounded to 8 bits,
    /// `q = round_even(x·127/max|x|)` with scale `d = max|x|/127` stored as f16 (and, against
    /// `Q4_1`/`Q5_1`, the block sum `f16(d·Σq)`); each block pair then contributes
    /// `d_w·d·Σ q_w·q` (`Q4_0`'s codes offset by −8, `Q5_0`'s by −16) plus `Q4_1`/`Q5_1`'s
    /// `m·f16(d·Σq)`.
    ///
    /// Against the K-quants `Q4_K`, `Q5_K` and `Q6_K` the row is rounded in blocks of 256 as
    /// ggml's `Q8_K`: with `v` the block's value of largest magnitude (the first such),
    /// `s = −127/v`, `q = round_even(s·x)` and the f32 scale `d = 1/s`; each super-block pair then
    /// contributes `d·d_w·Σ_j sc_j·Σ q_w·q` over the weight's sub-blocks `j` (`Q6_K`'s codes
    /// offset by −32), minus `d·dmin_w·Σ_j mn_j·Σ q` for `Q4_K`/`Q5_K`'s minimums. Results then
    /// agree with llama.cpp's up to float summation order.
    Q8Blocks,
}

impl Activations {
    fn is_exact(&self) -> bool {
        *self == Activations::Exact
    }

    /// An error unless `scheme` defines this arithmetic.
    fn check(self, scheme: &QuantScheme) -> Result<(), String> {
        use GgufType::{Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};
        match (self, scheme) {
            (Activations::Exact, _) | (Activations::Q8Blocks, QuantScheme::Gguf(Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | Q5_K | Q6_K)) => Ok(()),
            _ => Err(format!("activations Q8Blocks needs a Gguf Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K scheme, got {scheme:?}")),
        }
    }
}

/// MoE expert GEMM over GGUF expert slabs dequantized on the fly: `input [M, K]`, `weight`
/// U8 (`[E, N, row_bytes]`, or a rank-1 blob with `out_dim` = N), `expert_idx [M]` → `[M, N]` F32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantGroupedMatMul {
    pub scheme: QuantScheme,
    /// `N`, declared for a rank-1 blob.
    pub out_dim: Option<usize>,
}

/// MoE expert GEMM over MLX affine weights: `input [M, K]`, `weight` (U32 words or U8 bytes of
/// `E·out·K·bits/8` bytes, any shape), `scales`/`biases [E, out, K/group_size]`, `expert_idx [M]`
/// → `[M, out]` F32; `out[i] = input[i] · dequant(expert_idx[i])ᵀ`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantGroupedMatMulMlx {
    pub scheme: QuantScheme,
}

/// Materializes a GGUF expert stack (E slabs of `[N, K]`) as `[E, K, N]` F32, the
/// `GroupedMatMul` bank layout; the output is declared by the attributes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DequantMoEWeights {
    pub scheme: QuantScheme,
    pub experts: usize,
    pub k: usize,
    pub n: usize,
}

/// The ggml type of a scheme that must be GGUF.
fn need_gguf(scheme: &QuantScheme) -> Result<GgufType, String> {
    scheme.gguf().ok_or_else(|| format!("needs a Gguf scheme, got {scheme:?}"))
}

/// Bytes of one GGUF row of `k` weights (`None` if `k` is symbolic).
fn gguf_row(t: GgufType, k: &Dim) -> Result<Option<usize>, String> {
    k.as_static().map(|k| t.row_bytes(k)).transpose()
}

/// Checks packed GGUF rows of `k` weights (`[rows, row_bytes]` or a rank-1 blob of
/// `out_dim` rows) and returns the row count `n`.
fn gguf_rows(t: GgufType, packed: &TensorType, k: &Dim, out_dim: Option<usize>) -> Result<Dim, String> {
    need_dtype("packed_w", packed, &[DType::U8])?;
    let row = gguf_row(t, k)?;
    match packed.rank() {
        2 => {
            need_shape("packed_w [n, row_bytes]", packed, &[None, row.map(Dim::Static)])?;
            Ok(packed.shape.dim(0).clone())
        }
        1 => {
            let n = out_dim.ok_or_else(|| format!("packed_w {packed} is a rank-1 blob: out_dim must declare n"))?;
            check_blob(packed, row.map(|r| n * r), &format!("{n} rows of k = {k} in {t:?}"))?;
            Ok(Dim::Static(n))
        }
        _ => Err(format!("packed_w must be [n, row_bytes] or a rank-1 blob, got {packed}")),
    }
}

/// Checks a blob's byte count against `need` when both are known.
fn check_blob(blob: &TensorType, need: Option<usize>, of: &str) -> Result<(), String> {
    match (static_bytes(blob), need) {
        (Some(have), Some(need)) if have != need => {
            Err(format!("the packed weight {blob} holds {have} bytes, but {of} need {need}"))
        }
        _ => Ok(()),
    }
}

/// Checks MLX packed codes `[rows, k·bits/32]` U32 (or `[rows, k·bits/8]` U8).
fn mlx_codes(w: &TensorType, rows: &Dim, k: &Dim, bits: usize) -> Result<(), String> {
    need_dtype("w_q", w, &[DType::U32, DType::U8])?;
    let per = 8 * w.dtype.size();
    let cols = scale_exact("k", k, bits, per)?;
    need_shape(&format!("w_q [n, k·{bits}/{per}]"), w, &[Some(rows.clone()), cols])
}

impl DequantMatMul {
    /// Checks the weight operands `ops` (everything after `x`) against `k`; returns `n`.
    fn weight_rows(&self, ops: &[TensorType], k: &Dim) -> Result<Dim, String> {
        let w = &ops[0];
        match self.scheme {
            QuantScheme::Int8Block { block_size } | QuantScheme::Int8BlockAsym { block_size } => {
                need_dtype("w_q", w, &[DType::I8])?;
                need_shape("w_q [k, n]", w, &[Some(k.clone()), None])?;
                let n = w.shape.dim(1).clone();
                let blocks = div_exact("k", k, block_size)?;
                for (what, t) in [("scale [k/bs, n]", &ops[1]), ("zp [k/bs, n]", &ops[2])] {
                    need_float(what, t)?;
                    need_shape(what, t, &[blocks.clone(), Some(n.clone())])?;
                }
                Ok(n)
            }
            QuantScheme::Int4Block { block_size } => {
                let blocks = div_exact("k", k, block_size)?;
                need_float("scale", &ops[1])?;
                need_shape("scale [k/bs, n]", &ops[1], &[blocks.clone(), None])?;
                let n = ops[1].shape.dim(1).clone();
                need_float("zp", &ops[2])?;
                need_shape("zp [k/bs, n]", &ops[2], &[blocks, Some(n.clone())])?;
                need_dtype("w_q", w, &[DType::U8, DType::I8])?;
                need_shape("w_q [k, n/2]", w, &[Some(k.clone()), div_exact("n", &n, 2)?])?;
                Ok(n)
            }
            QuantScheme::Nvfp4Block => {
                need_dtype("scale (E4M3 bytes)", &ops[1], &[DType::U8])?;
                need_shape("scale [k/16, n]", &ops[1], &[div_exact("k", k, 16)?, None])?;
                let n = ops[1].shape.dim(1).clone();
                need_dtype("w_q", w, &[DType::U8])?;
                need_shape("w_q [k, n/2]", w, &[Some(k.clone()), div_exact("n", &n, 2)?])?;
                need_float("global_scale", &ops[2])?;
                need_shape("global_scale", &ops[2], &[Some(Dim::Static(1))])?;
                Ok(n)
            }
            QuantScheme::MlxAffine { bits, group_size } => {
                let groups = div_exact("k", k, group_size)?;
                need_float("scales", &ops[1])?;
                need_shape("scales [n, k/group_size]", &ops[1], &[None, groups.clone()])?;
                let n = ops[1].shape.dim(0).clone();
                need_float("biases", &ops[2])?;
                need_shape("biases [n, k/group_size]", &ops[2], &[Some(n.clone()), groups])?;
                mlx_codes(w, &n, k, usize::from(bits))?;
                Ok(n)
            }
            QuantScheme::MlxMxfp4 { group } | QuantScheme::MlxMxfp8 { group } => {
                need_dtype("scales (E8M0/FP8 bytes)", &ops[1], &[DType::U8])?;
                need_shape("scales [n, k/group]", &ops[1], &[None, div_exact("k", k, group)?])?;
                let n = ops[1].shape.dim(0).clone();
                let bits = self.scheme.code_bits().unwrap_or(8) as usize;
                mlx_codes(w, &n, k, bits)?;
                Ok(n)
            }
            QuantScheme::MxFp4x2Block { group } => {
                need_dtype("scale (two E8M0 sets)", &ops[1], &[DType::U8, DType::F32])?;
                let s = [Some(Dim::Static(2)), div_exact("k", k, group)?, None];
                need_shape("scale [2, k/group, n]", &ops[1], &s)?;
                let n = ops[1].shape.dim(2).clone();
                need_dtype("w_q (two E2M1 planes)", w, &[DType::U8])?;
                let planes = [Some(Dim::Static(2)), Some(k.clone()), div_exact("n", &n, 2)?];
                need_shape("w_q [2, k, n/2]", w, &planes)?;
                Ok(n)
            }
            QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => {
                need_dtype("w_q (FP8 codes)", w, &[DType::U8])?;
                need_shape("w_q [k, n]", w, &[Some(k.clone()), None])?;
                Ok(w.shape.dim(1).clone())
            }
            QuantScheme::Gguf(t) => gguf_rows(t, w, k, self.out_dim),
        }
    }
}

impl OpDef for DequantMatMul {
    fn arity(&self) -> Arity {
        Arity::Exact(self.scheme.dequant_matmul_arity())
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        self.scheme.validate()?;
        self.activations.check(&self.scheme)?;
        let x = &inputs[0];
        need_float("x", x)?;
        let k = last_dim("x [.., m, k]", x, 2)?;
        let n = self.weight_rows(&inputs[1..], &k)?;
        let n = match self.out_dim {
            Some(d) if !dims_agree(&n, &Dim::Static(d)) => {
                return Err(format!("out_dim {d} disagrees with the weight's n = {n}"))
            }
            Some(d) => pick_dim(&n, &Dim::Static(d)),
            None => n,
        };
        let mut dims = x.shape.0.clone();
        dims.pop();
        dims.push(n);
        Ok(vec![TensorType::new(DType::F32, Shape(dims))])
    }
}

impl OpDef for DequantGroupedMatMul {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let t = need_gguf(&self.scheme)?;
        let (x, w, idx) = (&inputs[0], &inputs[1], &inputs[2]);
        need_float("input", x)?;
        need_rank("input [M, K]", x, 2)?;
        let (m, k) = (x.shape.dim(0), x.shape.dim(1));
        need_index_vector("expert_idx", idx, m)?;
        need_dtype("weight", w, &[DType::U8])?;
        let row = gguf_row(t, k)?;
        let n = match w.rank() {
            3 => {
                let n = self.out_dim.map(Dim::Static);
                need_shape("weight [E, N, row_bytes]", w, &[None, n.clone(), row.map(Dim::Static)])?;
                n.map_or_else(|| w.shape.dim(1).clone(), |n| pick_dim(w.shape.dim(1), &n))
            }
            1 => {
                let n = self.out_dim.ok_or_else(|| format!("weight {w} is a rank-1 blob: out_dim must declare N"))?;
                if let (Some(have), Some(row)) = (static_bytes(w), row) {
                    if have == 0 || have % (n * row) != 0 {
                        return Err(format!("the packed weight {w} is not a whole number of [{n}, {k}] {t:?} slabs ({} bytes each)", n * row));
                    }
                }
                Dim::Static(n)
            }
            _ => return Err(format!("weight must be [E, N, row_bytes] or a rank-1 blob, got {w}")),
        };
        Ok(vec![TensorType::new(DType::F32, Shape(vec![m.clone(), n]))])
    }
}

impl OpDef for DequantGroupedMatMulMlx {
    fn arity(&self) -> Arity {
        Arity::Exact(5)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let QuantScheme::MlxAffine { bits, group_size } = self.scheme else {
            return Err(format!("needs an MlxAffine scheme, got {:?}", self.scheme));
        };
        self.scheme.validate()?;
        let (x, w, scales, biases, idx) = (&inputs[0], &inputs[1], &inputs[2], &inputs[3], &inputs[4]);
        need_float("input", x)?;
        need_rank("input [M, K]", x, 2)?;
        let (m, k) = (x.shape.dim(0), x.shape.dim(1));
        need_index_vector("expert_idx", idx, m)?;
        need_float("scales", scales)?;
        need_shape("scales [E, out, K/group_size]", scales, &[None, None, div_exact("K", k, group_size)?])?;
        let want: Vec<Option<Dim>> = scales.shape.dims().iter().cloned().map(Some).collect();
        need_float("biases", biases)?;
        need_shape("biases (as scales)", biases, &want)?;
        need_dtype("weight", w, &[DType::U32, DType::U8])?;
        let (e, out) = (scales.shape.dim(0), scales.shape.dim(1));
        if let (Some(e), Some(out), Some(k)) = (e.as_static(), out.as_static(), k.as_static()) {
            if (k * usize::from(bits)) % 32 != 0 {
                return Err(format!("K = {k} times {bits} bits does not fill whole 32-bit words"));
            }
            check_blob(w, Some(e * out * k * usize::from(bits) / 8), &format!("{e} experts of [{out}, {k}] at {bits} bits"))?;
        }
        Ok(vec![TensorType::new(DType::F32, Shape(vec![m.clone(), out.clone()]))])
    }
}

impl OpDef for DequantMoEWeights {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let t = need_gguf(&self.scheme)?;
        let w = &inputs[0];
        need_dtype("packed experts", w, &[DType::U8])?;
        let (e, k, n) = (self.experts, self.k, self.n);
        let row = t.row_bytes(k)?;
        if w.rank() == 3 {
            need_shape("packed experts [E, N, row_bytes]", w, &[Some(e.into()), Some(n.into()), Some(row.into())])?;
        } else {
            check_blob(w, Some(e * n * row), &format!("{e} experts of [{n}, {k}] in {t:?}"))?;
        }
        Ok(vec![TensorType::of(DType::F32, &[e, k, n])])
    }
}

/// Builders for the quantized matmuls.
impl crate::Graph {
    /// `x · dequant(W)`; `operands` are the scheme's weight inputs after `x` (OPS.md §5).
    pub fn dequant_matmul(&mut self, attrs: DequantMatMul, x: ValueId, operands: &[ValueId]) -> crate::Result<ValueId> {
        let inputs: Vec<ValueId> = std::iter::once(x).chain(operands.iter().copied()).collect();
        self.add1(attrs, &inputs)
    }

    /// GGUF MoE GEMM `input[i] · dequant(weight[expert_idx[i]])ᵀ`.
    pub fn dequant_grouped_matmul(
        &mut self,
        attrs: DequantGroupedMatMul,
        input: ValueId,
        weight: ValueId,
        expert_idx: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(attrs, &[input, weight, expert_idx])
    }

    /// MLX-affine MoE GEMM.
    pub fn dequant_grouped_matmul_mlx(
        &mut self,
        scheme: QuantScheme,
        input: ValueId,
        weight: ValueId,
        scales: ValueId,
        biases: ValueId,
        expert_idx: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(DequantGroupedMatMulMlx { scheme }, &[input, weight, scales, biases, expert_idx])
    }

    /// Dequantizes a GGUF expert stack to `[E, K, N]` F32.
    pub fn dequant_moe_weights(&mut self, attrs: DequantMoEWeights, packed: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[packed])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn ty(dtype: DType, dims: &[Dim]) -> TensorType {
        TensorType::new(dtype, Shape(dims.to_vec()))
    }

    fn gguf(t: GgufType, out_dim: Option<usize>) -> DequantMatMul {
        DequantMatMul { scheme: QuantScheme::Gguf(t), out_dim, activations: Activations::Exact }
    }

    #[test]
    fn gguf_rows_and_blobs() {
        let mut g = Graph::new();
        let x = g.input("x", ty(DType::F32, &["B".into(), 512.into()]));
        let rows = g.param("w", TensorType::of(DType::U8, &[1024, 2 * 144]));
        let y = g.dequant_matmul(gguf(GgufType::Q4_K, None), x, &[rows]).unwrap();
        assert_eq!(g.ty(y), &ty(DType::F32, &["B".into(), 1024.into()]));
        let blob = g.param("b", TensorType::of(DType::U8, &[1024 * 16 * 34]));
        let y = g.dequant_matmul(gguf(GgufType::Q8_0, Some(1024)), x, &[blob]).unwrap();
        assert_eq!(g.ty(y), &ty(DType::F32, &["B".into(), 1024.into()]));
        let e = g.dequant_matmul(gguf(GgufType::Q8_0, None), x, &[blob]).unwrap_err().to_string();
        assert!(e.contains("out_dim must declare n"), "{e}");
        let e = g.dequant_matmul(gguf(GgufType::Q4_0, Some(1024)), x, &[blob]).unwrap_err().to_string();
        assert!(e.contains("need 294912"), "{e}");
        let e = g.dequant_matmul(gguf(GgufType::Q4_K, Some(7)), x, &[rows]).unwrap_err().to_string();
        assert!(e.contains("out_dim 7 disagrees"), "{e}");
    }

    #[test]
    fn q8_block_activations_print_and_need_a_type_with_integer_products() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F32, &[2, 64]));
        let w = g.param("w", TensorType::of(DType::U8, &[3, 2 * 20]));
        let q8 = |t| DequantMatMul { activations: Activations::Q8Blocks, ..gguf(t, None) };
        let exact = g.dequant_matmul(gguf(GgufType::Q4_1, None), x, &[w]).unwrap();
        let rounded = g.dequant_matmul(q8(GgufType::Q4_1), x, &[w]).unwrap();
        g.set_outputs(vec![exact, rounded]).unwrap();
        let text = g.to_string();
        assert!(text.contains("DequantMatMul(scheme:Gguf(Q4_1),out_dim:None)(%0, %1)"), "{text}");
        assert!(text.contains("DequantMatMul(scheme:Gguf(Q4_1),out_dim:None,activations:Q8Blocks)(%0, %1)"), "{text}");
        assert_eq!(crate::text::parse(&text).unwrap().to_string(), text);
        let x = g.input("x256", TensorType::of(DType::F32, &[2, 256]));
        let k = g.param("k", TensorType::of(DType::U8, &[3, 144]));
        assert!(g.dequant_matmul(q8(GgufType::Q4_K), x, &[k]).is_ok());
        let q2 = g.param("q2", TensorType::of(DType::U8, &[3, 84]));
        let e = g.dequant_matmul(q8(GgufType::Q2_K), x, &[q2]).unwrap_err().to_string();
        assert!(e.contains("Q8Blocks needs a Gguf Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K scheme"), "{e}");
    }

    #[test]
    fn int_and_mlx_schemes() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F32, &[4, 256]));
        let wq = g.param("wq", TensorType::of(DType::U8, &[256, 64]));
        let s = g.param("s", TensorType::of(DType::F32, &[8, 128]));
        let int4 = DequantMatMul { scheme: QuantScheme::Int4Block { block_size: 32 }, out_dim: None, activations: Activations::Exact };
        let y = g.dequant_matmul(int4.clone(), x, &[wq, s, s]).unwrap();
        assert_eq!(g.ty(y), &TensorType::of(DType::F32, &[4, 128]));
        let s16 = g.param("s16", TensorType::of(DType::F32, &[16, 128]));
        let e = g.dequant_matmul(int4, x, &[wq, s16, s16]).unwrap_err().to_string();
        assert!(e.contains("scale [k/bs, n] must be [8, ?]"), "{e}");

        let mlx = DequantMatMul { scheme: QuantScheme::MlxAffine { bits: 4, group_size: 64 }, out_dim: None, activations: Activations::Exact };
        let words = g.param("words", TensorType::of(DType::U32, &[128, 32]));
        let ms = g.param("ms", TensorType::of(DType::F32, &[128, 4]));
        let y = g.dequant_matmul(mlx.clone(), x, &[words, ms, ms]).unwrap();
        assert_eq!(g.ty(y), &TensorType::of(DType::F32, &[4, 128]));
        let bytes = g.param("bytes", TensorType::of(DType::U8, &[128, 128]));
        assert!(g.dequant_matmul(mlx.clone(), x, &[bytes, ms, ms]).is_ok());
        let e = g.dequant_matmul(mlx, x, &[wq, ms, ms]).unwrap_err().to_string();
        assert!(e.contains("w_q [n, k·4/8] must be [128, 128]"), "{e}");
    }

    #[test]
    fn moe_variants() {
        let mut g = Graph::new();
        let x = g.input("x", ty(DType::F32, &["T".into(), 256.into()]));
        let idx = g.input("idx", ty(DType::I32, &["T".into()]));
        let stack = g.param("stack", TensorType::of(DType::U8, &[8, 64, 144]));
        let attrs = DequantGroupedMatMul { scheme: QuantScheme::Gguf(GgufType::Q4_K), out_dim: None };
        let y = g.dequant_grouped_matmul(attrs, x, stack, idx).unwrap();
        assert_eq!(g.ty(y), &ty(DType::F32, &["T".into(), 64.into()]));
        let moe = DequantMoEWeights { scheme: QuantScheme::Gguf(GgufType::Q4_K), experts: 8, k: 256, n: 64 };
        let w = g.dequant_moe_weights(moe.clone(), stack).unwrap();
        assert_eq!(g.ty(w), &TensorType::of(DType::F32, &[8, 256, 64]));
        let e = g.dequant_moe_weights(DequantMoEWeights { n: 32, ..moe }, stack).unwrap_err().to_string();
        assert!(e.contains("must be [8, 32, 144]"), "{e}");

        let mlx = QuantScheme::MlxAffine { bits: 4, group_size: 64 };
        let words = g.param("words", TensorType::of(DType::U32, &[8 * 64 * 32]));
        let sc = g.param("sc", TensorType::of(DType::F32, &[8, 64, 4]));
        let y = g.dequant_grouped_matmul_mlx(mlx.clone(), x, words, sc, sc, idx).unwrap();
        assert_eq!(g.ty(y), &ty(DType::F32, &["T".into(), 64.into()]));
        let e = g.dequant_grouped_matmul_mlx(mlx, x, stack, sc, sc, idx).unwrap_err().to_string();
        assert!(e.contains("holds 73728 bytes"), "{e}");
    }
}
