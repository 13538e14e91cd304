//! Per-element fusion regions (OPS.md §19): `ElementwiseRegion` (a chain of pointwise steps
//! over broadcast inputs), `TransformRegion` (a chain of 2× nearest upsamplings) and
//! `BatchElementwiseRegion` (one chain applied to every batch slice).

use super::dims_agree;
use crate::ops::elementwise::{Activation, ActivationKind, Binary, BinaryOp, CmpOp, Compare, Where};
use crate::ops::{Arity, OpDef};
use crate::{broadcast, DType, Dim, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// Most inputs an `ElementwiseRegion` reads (the length of `input_modulus`).
pub const MAX_REGION_INPUTS: usize = 16;

/// Where a step reads a value: region input `i`, or the result of earlier step `j`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operand {
    Input(u32),
    Step(u32),
}

/// One pointwise computation of a region chain; the last step is the region's output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ChainStep {
    /// A region-fusable activation (OPS.md §3).
    Activation(ActivationKind, Operand),
    Cast(DType, Operand),
    Binary(BinaryOp, Operand, Operand),
    /// Yields Bool (0/1).
    Compare(CmpOp, Operand, Operand),
    /// `(cond, on_true, on_false)`; `cond` is truthy iff non-zero.
    Where(Operand, Operand, Operand),
}

/// A read transform applied to one input before the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RegionPrologue {
    None,
    /// Input `prologue_input` is half-resolution NCHW, read at `(n, c, ⌊y/2⌋, ⌊x/2⌋)`.
    ResizeNearest2x,
}

/// One step of a [`TransformRegion`]; the only kind doubles H and W of its operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TransformStep {
    ResizeNearest2x(Operand),
}

/// A fused chain of pointwise steps over `num_inputs` (≤ 16) broadcast inputs.
///
/// Output element `g` reads input `i` at `g mod input_modulus[i]` (`0` = element for element,
/// `1` = a scalar); inference accepts exactly the layouts where that equals NumPy
/// broadcasting, i.e. each input (leading 1s dropped) is a suffix of the output shape.
/// `scalar_input_mask` bit `i` marks input `i` as a one-element scalar. With the
/// `ResizeNearest2x` prologue, input `prologue_input` is half-resolution NCHW and counts as
/// its doubled shape `[N, C, 2H, 2W]` when the inputs broadcast (the other inputs are read at
/// the full-resolution output index, so this is the only consistent reading of OPS.md's
/// "broadcast, then the prologue doubling"); its mask bit and modulus must be 0.
///
/// Output dtype: the last step's (`Compare` → Bool, `Cast` → target, `Where` → the branches'
/// dtype as the `Where` op gives, otherwise the first operand's). Unused attribute slots
/// (mask bits and modulus entries past `num_inputs`, `prologue_input` without a prologue)
/// must be 0, so equal regions compare equal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElementwiseRegion {
    pub chain: Vec<ChainStep>,
    pub num_inputs: u32,
    pub scalar_input_mask: u32,
    pub input_modulus: [u32; MAX_REGION_INPUTS],
    pub prologue: RegionPrologue,
    pub prologue_input: u32,
}

/// A chain of nearest-neighbour 2× upsamplings of input 0 (`[N, C, H, W]` → `[N, C, 2ⁿH, 2ⁿW]`
/// for `n` steps). Step 0 reads `Input(0)` and step `j` reads `Step(j − 1)`; inputs other than
/// 0 are carried but not read by the only step kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransformRegion {
    pub steps: Vec<TransformStep>,
    pub num_inputs: u32,
}

/// Horizontal fusion over batch slices: the single-input `chain` (`Input(0)` = the current
/// slice, after the optional prologue) runs on every input, and the results are concatenated
/// on axis 0. Inputs share dtype and every dim but the first; the output's dim 0 is the sum
/// (static unless there is one input). Each slice is read element for element, so
/// `scalar_input_mask`, `input_modulus` and `prologue_input` must be 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchElementwiseRegion {
    pub chain: Vec<ChainStep>,
    pub num_batch_inputs: u32,
    pub scalar_input_mask: u32,
    pub input_modulus: [u32; MAX_REGION_INPUTS],
    pub prologue: RegionPrologue,
    pub prologue_input: u32,
}

impl ChainStep {
    fn operands(&self) -> Vec<Operand> {
        match *self {
            ChainStep::Activation(_, a) | ChainStep::Cast(_, a) => vec![a],
            ChainStep::Binary(_, a, b) | ChainStep::Compare(_, a, b) => vec![a, b],
            ChainStep::Where(c, t, f) => vec![c, t, f],
        }
    }
}

/// The dtype a chain produces from these input dtypes (its last step's).
fn chain_dtype(chain: &[ChainStep], inputs: &[DType]) -> Result<DType, String> {
    Ok(*chain_dtypes(chain, inputs)?.last().expect("a checked chain is not empty"))
}

/// The dtype of each step's value for these input dtypes, checking every operand reference and
/// every step's dtype rule (those of the standalone elementwise ops).
pub fn chain_dtypes(chain: &[ChainStep], inputs: &[DType]) -> Result<Vec<DType>, String> {
    if chain.is_empty() {
        return Err("the chain is empty".into());
    }
    let mut steps: Vec<DType> = Vec::with_capacity(chain.len());
    for (j, step) in chain.iter().enumerate() {
        let mut args = Vec::new();
        for op in step.operands() {
            let dtype = match op {
                Operand::Input(i) => inputs.get(i as usize).copied().ok_or_else(|| {
                    format!("step {j} ({step:?}) reads input {i}, but the region has {} inputs", inputs.len())
                })?,
                Operand::Step(k) => steps
                    .get(k as usize)
                    .copied()
                    .ok_or_else(|| format!("step {j} ({step:?}) reads step {k}, which is not an earlier step"))?,
            };
            args.push(TensorType::new(dtype, Shape::scalar()));
        }
        let out = match *step {
            ChainStep::Activation(kind, _) if !kind.region_fusable() => {
                Err(format!("{kind:?} is not region-fusable"))
            }
            ChainStep::Activation(kind, _) => Activation { kind }.infer(&args),
            ChainStep::Cast(to, _) => Ok(vec![args[0].with_dtype(to)]),
            ChainStep::Binary(op, ..) => Binary { op }.infer(&args),
            ChainStep::Compare(op, ..) => Compare { op }.infer(&args),
            ChainStep::Where(..) => Where {}.infer(&args),
        };
        let dtype = out
            .map_err(|e| format!("step {j} ({step:?}): {e}"))?
            .first()
            .map(|t| t.dtype)
            .ok_or_else(|| format!("step {j} ({step:?}) produced no value"))?;
        steps.push(dtype);
    }
    Ok(steps)
}

/// `[N, C, H, W]` → `[N, C, 2H, 2W]`; H and W must be static.
fn resize2x(what: &str, t: &TensorType) -> Result<Shape, String> {
    if t.rank() != 4 {
        return Err(format!("{what} {t} must be NCHW for ResizeNearest2x"));
    }
    let mut dims = t.shape.dims().to_vec();
    for axis in [2, 3] {
        let n = t.static_dim(axis)?;
        dims[axis] = Dim::Static(n.checked_mul(2).ok_or_else(|| format!("{what} {t} is too large to double"))?);
    }
    Ok(Shape(dims))
}

/// The dims after dropping leading static 1s (empty for a one-element tensor).
fn strip_ones(dims: &[Dim]) -> &[Dim] {
    let k = dims.iter().take_while(|d| **d == Dim::Static(1)).count();
    &dims[k..]
}

/// Checks that reading input `i` at `g mod modulus` is NumPy broadcasting into `out`.
fn check_read(i: usize, t: &TensorType, scalar: bool, modulus: u32, out: &Shape) -> Result<(), String> {
    let s = strip_ones(t.shape.dims());
    let o = strip_ones(out.dims());
    let one = s.is_empty();
    let suffix = s.len() <= o.len() && s.iter().zip(&o[o.len() - s.len()..]).all(|(a, b)| dims_agree(a, b));
    if scalar && !one {
        return Err(format!("input {i} {t} is flagged in scalar_input_mask but has more than one element"));
    }
    match modulus {
        0 if !(suffix && s.len() == o.len()) => Err(format!(
            "input {i} {t} has input_modulus 0 (read element for element) but the output is {out}"
        )),
        1 if !one => Err(format!("input {i} {t} has input_modulus 1 (a scalar) but more than one element")),
        0 | 1 => Ok(()),
        m => {
            let numel = Shape(s.to_vec()).numel();
            if numel != Some(m as usize) {
                let have = numel.map_or_else(|| "a symbolic number of".to_string(), |n| n.to_string());
                return Err(format!("input {i} {t} has input_modulus {m} but {have} elements"));
            }
            if !suffix {
                return Err(format!(
                    "input {i} {t} is read at g mod {m}, which is NumPy broadcasting only when its shape \
                     is a suffix of the output {out}"
                ));
            }
            Ok(())
        }
    }
}

impl ElementwiseRegion {
    /// The output shape, after checking the attribute slots and every input's read pattern.
    fn out_shape(&self, inputs: &[TensorType]) -> Result<Shape, String> {
        let n = inputs.len();
        if !(1..=MAX_REGION_INPUTS).contains(&n) {
            return Err(format!("num_inputs must be 1 to {MAX_REGION_INPUTS}, got {n}"));
        }
        if self.scalar_input_mask >> n != 0 {
            return Err(format!("scalar_input_mask {:#b} flags inputs past num_inputs {n}", self.scalar_input_mask));
        }
        if self.input_modulus[n..].iter().any(|&m| m != 0) {
            return Err(format!("input_modulus {:?} has entries past num_inputs {n}", self.input_modulus));
        }
        let p = self.prologue_input as usize;
        let prologue = match self.prologue {
            RegionPrologue::None if p != 0 => return Err(format!("prologue_input {p} is set without a prologue")),
            RegionPrologue::None => None,
            RegionPrologue::ResizeNearest2x if p >= n => {
                return Err(format!("prologue_input {p} is not one of the {n} inputs"))
            }
            RegionPrologue::ResizeNearest2x => {
                if (self.scalar_input_mask >> p) & 1 != 0 || self.input_modulus[p] != 0 {
                    return Err(format!(
                        "prologue input {p} is read by coordinates; its scalar bit and modulus must be 0"
                    ));
                }
                Some(p)
            }
        };
        let shapes = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| if Some(i) == prologue { resize2x(&format!("input {i}"), t) } else { Ok(t.shape.clone()) })
            .collect::<Result<Vec<_>, String>>()?;
        let out = shapes[1..].iter().try_fold(shapes[0].clone(), |acc, s| broadcast(&acc, s))?;
        for (i, t) in inputs.iter().enumerate().filter(|(i, _)| Some(*i) != prologue) {
            check_read(i, t, (self.scalar_input_mask >> i) & 1 != 0, self.input_modulus[i], &out)?;
        }
        Ok(out)
    }
}

impl OpDef for ElementwiseRegion {
    fn arity(&self) -> Arity {
        Arity::Exact(self.num_inputs as usize)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let shape = self.out_shape(inputs)?;
        let dtypes: Vec<DType> = inputs.iter().map(|t| t.dtype).collect();
        Ok(vec![TensorType::new(chain_dtype(&self.chain, &dtypes)?, shape)])
    }
}

impl OpDef for TransformRegion {
    fn arity(&self) -> Arity {
        Arity::Exact(self.num_inputs as usize)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = inputs.first().ok_or("num_inputs must be at least 1")?;
        if self.steps.is_empty() {
            return Err("the region has no steps".into());
        }
        let mut out = x.clone();
        for (j, TransformStep::ResizeNearest2x(op)) in self.steps.iter().enumerate() {
            let want = if j == 0 { Operand::Input(0) } else { Operand::Step(j as u32 - 1) };
            if *op != want {
                return Err(format!("step {j} must read {want:?}, got {op:?} (the steps form one chain from input 0)"));
            }
            out.shape = resize2x("input 0", &out)?;
        }
        Ok(vec![out])
    }
}

impl OpDef for BatchElementwiseRegion {
    fn arity(&self) -> Arity {
        Arity::Exact(self.num_batch_inputs as usize)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let first = inputs.first().ok_or("num_batch_inputs must be at least 1")?;
        if self.scalar_input_mask != 0 || self.input_modulus.iter().any(|&m| m != 0) || self.prologue_input != 0 {
            return Err("a batch region reads each slice element for element: scalar_input_mask, \
                        input_modulus and prologue_input must be 0"
                .into());
        }
        let dtype = chain_dtype(&self.chain, &[first.dtype])?;
        if first.rank() == 0 {
            return Err(format!("input 0 {first} needs a batch axis"));
        }
        for (i, t) in inputs.iter().enumerate().skip(1) {
            let same_rest = t.rank() == first.rank()
                && t.shape.dims()[1..].iter().zip(&first.shape.dims()[1..]).all(|(a, b)| dims_agree(a, b));
            if t.dtype != first.dtype || !same_rest {
                return Err(format!("input {i} {t} must match input 0 {first} in dtype and all dims but the first"));
            }
        }
        let mut slices = first.clone();
        if inputs.len() > 1 {
            let total = inputs.iter().try_fold(0usize, |acc, t| Ok::<_, String>(acc.saturating_add(t.static_dim(0)?)))?;
            slices.shape.0[0] = Dim::Static(total);
        }
        let shape = match self.prologue {
            RegionPrologue::None => slices.shape,
            RegionPrologue::ResizeNearest2x => resize2x("the concatenated slices", &slices)?,
        };
        Ok(vec![TensorType::new(dtype, shape)])
    }
}

/// `scalar_input_mask` and `input_modulus` describing how the region reads these inputs
/// (the prologue input excepted); inference reports inputs no layout fits.
fn region_layout(types: &[TensorType], prologue: Option<usize>) -> (u32, [u32; MAX_REGION_INPUTS]) {
    let mut mask = 0;
    let mut modulus = [0; MAX_REGION_INPUTS];
    let shapes: Vec<Shape> = types
        .iter()
        .enumerate()
        .map(|(i, t)| if Some(i) == prologue { resize2x("", t).unwrap_or_default() } else { t.shape.clone() })
        .collect();
    let Some(Ok(out)) = shapes.split_first().map(|(s0, rest)| rest.iter().try_fold(s0.clone(), |a, s| broadcast(&a, s)))
    else {
        return (mask, modulus);
    };
    let o = strip_ones(out.dims());
    for (i, t) in types.iter().enumerate().take(MAX_REGION_INPUTS).filter(|(i, _)| Some(*i) != prologue) {
        let s = strip_ones(t.shape.dims());
        if s.is_empty() {
            mask |= 1 << i;
            modulus[i] = 1;
        } else if s.len() != o.len() {
            modulus[i] = Shape(s.to_vec()).numel().map_or(0, |n| n as u32);
        }
    }
    (mask, modulus)
}

/// Builders for the fusion regions.
impl crate::Graph {
    /// A fused pointwise chain; the scalar mask and moduli are derived from the inputs'
    /// shapes. `prologue_input` selects a half-resolution input read through `ResizeNearest2x`.
    pub fn elementwise_region(
        &mut self,
        chain: Vec<ChainStep>,
        inputs: &[ValueId],
        prologue_input: Option<usize>,
    ) -> crate::Result<ValueId> {
        let types: Vec<TensorType> = inputs.iter().filter_map(|v| self.try_ty(*v).cloned()).collect();
        let (scalar_input_mask, input_modulus) = region_layout(&types, prologue_input);
        let region = ElementwiseRegion {
            chain,
            num_inputs: inputs.len() as u32,
            scalar_input_mask,
            input_modulus,
            prologue: if prologue_input.is_some() { RegionPrologue::ResizeNearest2x } else { RegionPrologue::None },
            prologue_input: prologue_input.unwrap_or(0) as u32,
        };
        self.add1(region, inputs)
    }

    /// `steps` successive 2× nearest upsamplings of `x`.
    pub fn transform_region(&mut self, x: ValueId, steps: usize) -> crate::Result<ValueId> {
        let steps = (0..steps)
            .map(|j| TransformStep::ResizeNearest2x(if j == 0 { Operand::Input(0) } else { Operand::Step(j as u32 - 1) }))
            .collect();
        self.add1(TransformRegion { steps, num_inputs: 1 }, &[x])
    }

    /// The single-input `chain` over every batch slice in `inputs`, concatenated on axis 0.
    pub fn batch_elementwise_region(
        &mut self,
        chain: Vec<ChainStep>,
        inputs: &[ValueId],
        prologue: RegionPrologue,
    ) -> crate::Result<ValueId> {
        let region = BatchElementwiseRegion {
            chain,
            num_batch_inputs: inputs.len() as u32,
            scalar_input_mask: 0,
            input_modulus: [0; MAX_REGION_INPUTS],
            prologue,
            prologue_input: 0,
        };
        self.add1(region, inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;
    use ChainStep as S;
    use Operand::{Input as In, Step};

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    #[test]
    fn region_broadcasts_suffix_inputs_and_derives_its_layout() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape(vec!["B".into(), 8.into(), 4.into()])));
        let bias = g.input("bias", f32s(&[1, 4]));
        let one = g.constant_f32(&[1], &[0.5]).unwrap();
        let chain = vec![
            S::Binary(BinaryOp::Add, In(0), In(1)),
            S::Activation(ActivationKind::Silu, Step(0)),
            S::Compare(CmpOp::Gt, Step(1), In(2)),
            S::Where(Step(2), Step(1), In(2)),
            S::Cast(DType::F16, Step(3)),
        ];
        let y = g.elementwise_region(chain, &[x, bias, one], None).unwrap();
        assert_eq!(g.ty(y), &TensorType::new(DType::F16, g.ty(x).shape.clone()));
        let crate::Op::ElementwiseRegion(r) = &g.node(y.node).op else { panic!() };
        assert_eq!((r.scalar_input_mask, &r.input_modulus[..3]), (0b100, &[0, 4, 1][..]));
    }

    #[test]
    fn region_rejects_non_numpy_reads_and_bad_chains() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[3, 4]));
        let col = g.input("col", f32s(&[3, 1]));
        let add = vec![S::Binary(BinaryOp::Add, In(0), In(1))];
        let e = g.elementwise_region(add.clone(), &[x, col], None).unwrap_err().to_string();
        assert!(e.contains("input 1 f32[3, 1] has input_modulus 0"), "{e}");
        let fwd = vec![S::Activation(ActivationKind::Exp, Step(0))];
        assert!(g.elementwise_region(fwd, &[x], None).unwrap_err().to_string().contains("not an earlier step"));
        let floor = vec![S::Activation(ActivationKind::Floor, In(0))];
        assert!(g.elementwise_region(floor, &[x], None).unwrap_err().to_string().contains("not region-fusable"));
        let i = g.input("i", TensorType::of(DType::I32, &[3, 4]));
        let e = g.elementwise_region(add, &[x, i], None).unwrap_err().to_string();
        assert!(e.contains("step 0 (Binary(Add, Input(0), Input(1))): operands must share one dtype"), "{e}");
    }

    #[test]
    fn prologue_input_counts_doubled() {
        let mut g = Graph::new();
        let low = g.input("low", f32s(&[1, 16, 8, 8]));
        let skip = g.input("skip", f32s(&[1, 16, 16, 16]));
        let chain = vec![S::Binary(BinaryOp::Add, In(0), In(1))];
        let y = g.elementwise_region(chain.clone(), &[low, skip], Some(0)).unwrap();
        assert_eq!(g.ty(y), &f32s(&[1, 16, 16, 16]));
        assert!(g.elementwise_region(chain, &[low, skip], None).is_err());
    }

    #[test]
    fn transform_and_batch_regions() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[2, 3, 5, 7]));
        let y = g.transform_region(x, 2).unwrap();
        assert_eq!(g.ty(y), &f32s(&[2, 3, 20, 28]));
        assert!(g.transform_region(x, 0).is_err());
        let bad = TransformRegion { steps: vec![TransformStep::ResizeNearest2x(Step(0))], num_inputs: 1 };
        assert!(g.add1(bad, &[x]).unwrap_err().to_string().contains("must read Input(0)"));

        let a = g.input("a", f32s(&[1, 3, 5, 7]));
        let chain = vec![S::Activation(ActivationKind::Relu, In(0))];
        let z = g.batch_elementwise_region(chain.clone(), &[a, x, a], RegionPrologue::ResizeNearest2x).unwrap();
        assert_eq!(g.ty(z), &f32s(&[4, 3, 10, 14]));
        let two = vec![S::Binary(BinaryOp::Mul, In(0), In(1))];
        let e = g.batch_elementwise_region(two, &[a, a], RegionPrologue::None).unwrap_err().to_string();
        assert!(e.contains("reads input 1, but the region has 1 inputs"), "{e}");
        let other = g.input("other", f32s(&[1, 4, 5, 7]));
        assert!(g.batch_elementwise_region(chain, &[a, other], RegionPrologue::None).is_err());
    }
}
