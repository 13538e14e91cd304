//! cuDNN's fused attention through its backend graph API: the operation graphs of scaled
//! dot-product attention (forward with its log-sum-exp, and backward) that cuDNN's fusion
//! engines take, one execution plan per shape, built once and kept.
//!
//! cuDNN loads at run time (`libcudnn.so.9`); without it, or with `RLX_CUDNN=0`, attention
//! runs on rlx's own kernels ([`crate::attention`]). Plans are built the first time a shape
//! runs, which may be inside a CUDA-graph capture: the build runs with the thread's capture
//! mode relaxed, so that cuDNN's own allocations and module loads do not end the capture.

use crate::gpu::Gpu;
use cudarc::cudnn::sys as dnn;
use cudarc::driver::sys;
use dnn::cudnnBackendAttributeName_t as A;
use dnn::cudnnBackendAttributeType_t as T;
use dnn::cudnnBackendDescriptorType_t as D;
use dnn::cudnnDataType_t as Dt;
use dnn::cudnnPointwiseMode_t as Pw;
use parking_lot::Mutex;
use rlx_ir::DType;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

type Res<V> = Result<V, String>;

/// A cuDNN status as an error saying what was being done.
fn check(status: dnn::cudnnStatus_t, what: &str) -> Res<()> {
    if status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("cuDNN {what}: {status:?}"))
    }
}

/// A backend descriptor, destroyed when dropped.
struct Desc(dnn::cudnnBackendDescriptor_t);

// SAFETY: descriptors are host objects that cuDNN does not tie to a thread; every use of a
// plan is serialised by the engine's stream lock and the plan cache's mutex.
unsafe impl Send for Desc {}
unsafe impl Sync for Desc {}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by `cudnnBackendCreateDescriptor` and destroyed once.
        unsafe {
            let _ = dnn::cudnnBackendDestroyDescriptor(self.0);
        }
    }
}

impl Desc {
    fn new(kind: D) -> Res<Desc> {
        let mut d = std::ptr::null_mut();
        // SAFETY: `d` receives the new descriptor.
        check(unsafe { dnn::cudnnBackendCreateDescriptor(kind, &mut d) }, &format!("creating a {kind:?}"))?;
        Ok(Desc(d))
    }

    /// Sets attribute `name` of type `ty` to `vals`, whose element type is `ty`'s.
    fn set<V>(&self, name: A, ty: T, vals: &[V]) -> Res<()> {
        // SAFETY: `vals` holds `len` elements of the type `ty` names (the callers pair them).
        check(unsafe { dnn::cudnnBackendSetAttribute(self.0, name, ty, vals.len() as i64, vals.as_ptr().cast()) }, &format!("setting {name:?}"))
    }

    fn descs(&self, name: A, descs: &[&Desc]) -> Res<()> {
        let raw: Vec<dnn::cudnnBackendDescriptor_t> = descs.iter().map(|d| d.0).collect();
        self.set(name, T::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw)
    }

    fn finalize(self, what: &str) -> Res<Desc> {
        // SAFETY: a descriptor of this module with its attributes set.
        check(unsafe { dnn::cudnnBackendFinalize(self.0) }, &format!("finalizing {what}"))?;
        Ok(self)
    }
}

/// Row-major strides of `dims`.
fn packed(dims: [i64; 4]) -> [i64; 4] {
    [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1]
}

/// An operation graph being built: its tensors (by index) and operations.
struct Builder {
    handle: dnn::cudnnHandle_t,
    tensors: Vec<Desc>,
    ops: Vec<Desc>,
    held: Vec<Desc>,
    next_uid: i64,
}

impl Builder {
    fn new(handle: dnn::cudnnHandle_t) -> Builder {
        Builder { handle, tensors: Vec::new(), ops: Vec::new(), held: Vec::new(), next_uid: 1000 }
    }

    fn tensor(&mut self, uid: i64, dt: Dt, dims: [i64; 4], strides: [i64; 4], virt: bool, by_value: bool) -> Res<usize> {
        let t = Desc::new(D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
        t.set(A::CUDNN_ATTR_TENSOR_DATA_TYPE, T::CUDNN_TYPE_DATA_TYPE, &[dt])?;
        t.set(A::CUDNN_ATTR_TENSOR_DIMENSIONS, T::CUDNN_TYPE_INT64, &dims)?;
        t.set(A::CUDNN_ATTR_TENSOR_STRIDES, T::CUDNN_TYPE_INT64, &strides)?;
        t.set(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, T::CUDNN_TYPE_INT64, &[uid])?;
        t.set(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, T::CUDNN_TYPE_INT64, &[16i64])?;
        t.set(A::CUDNN_ATTR_TENSOR_IS_VIRTUAL, T::CUDNN_TYPE_BOOLEAN, &[virt])?;
        if by_value {
            t.set(A::CUDNN_ATTR_TENSOR_IS_BY_VALUE, T::CUDNN_TYPE_BOOLEAN, &[true])?;
        }
        self.tensors.push(t.finalize("a tensor")?);
        Ok(self.tensors.len() - 1)
    }

    /// A tensor the caller passes in memory.
    fn io(&mut self, uid: Uid, dt: Dt, dims: [i64; 4], strides: [i64; 4]) -> Res<usize> {
        self.tensor(uid as i64, dt, dims, strides, false, false)
    }

    /// A float scalar the caller passes by value.
    fn scalar(&mut self, uid: Uid) -> Res<usize> {
        self.tensor(uid as i64, Dt::CUDNN_DATA_FLOAT, [1; 4], [1; 4], false, true)
    }

    /// An intermediate the engine keeps to itself.
    fn virt(&mut self, dt: Dt, dims: [i64; 4]) -> Res<usize> {
        self.virt_strided(dt, dims, packed(dims))
    }

    fn virt_strided(&mut self, dt: Dt, dims: [i64; 4], strides: [i64; 4]) -> Res<usize> {
        self.next_uid += 1;
        self.tensor(self.next_uid, dt, dims, strides, true, false)
    }

    fn matmul(&mut self, a: usize, b: usize, c: usize) -> Res<()> {
        let m = Desc::new(D::CUDNN_BACKEND_MATMUL_DESCRIPTOR)?;
        m.set(A::CUDNN_ATTR_MATMUL_COMP_TYPE, T::CUDNN_TYPE_DATA_TYPE, &[Dt::CUDNN_DATA_FLOAT])?;
        let m = m.finalize("a matmul")?;
        let op = Desc::new(D::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)?;
        op.descs(A::CUDNN_ATTR_OPERATION_MATMUL_ADESC, &[&self.tensors[a]])?;
        op.descs(A::CUDNN_ATTR_OPERATION_MATMUL_BDESC, &[&self.tensors[b]])?;
        op.descs(A::CUDNN_ATTR_OPERATION_MATMUL_CDESC, &[&self.tensors[c]])?;
        op.descs(A::CUDNN_ATTR_OPERATION_MATMUL_DESC, &[&m])?;
        self.ops.push(op.finalize("a matmul operation")?);
        self.held.push(m);
        Ok(())
    }

    /// `y = mode(x, b)` (`t` selects for `BINARY_SELECT`; `axis` for `GEN_INDEX`).
    fn pointwise(&mut self, mode: Pw, x: usize, b: Option<usize>, t: Option<usize>, y: usize, axis: Option<i64>) -> Res<()> {
        let p = Desc::new(D::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
        p.set(A::CUDNN_ATTR_POINTWISE_MODE, T::CUDNN_TYPE_POINTWISE_MODE, &[mode])?;
        let prec = if mode == Pw::CUDNN_POINTWISE_CMP_GE { Dt::CUDNN_DATA_BOOLEAN } else { Dt::CUDNN_DATA_FLOAT };
        p.set(A::CUDNN_ATTR_POINTWISE_MATH_PREC, T::CUDNN_TYPE_DATA_TYPE, &[prec])?;
        if let Some(axis) = axis {
            p.set(A::CUDNN_ATTR_POINTWISE_AXIS, T::CUDNN_TYPE_INT64, &[axis])?;
        }
        let p = p.finalize("a pointwise descriptor")?;
        let op = Desc::new(D::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
        op.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &[&p])?;
        op.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &[&self.tensors[x]])?;
        if let Some(b) = b {
            op.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_BDESC, &[&self.tensors[b]])?;
        }
        op.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &[&self.tensors[y]])?;
        if let Some(t) = t {
            op.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_TDESC, &[&self.tensors[t]])?;
        }
        op.set(A::CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, T::CUDNN_TYPE_FLOAT, &[1.0f32])?;
        op.set(A::CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, T::CUDNN_TYPE_FLOAT, &[1.0f32])?;
        self.ops.push(op.finalize(&format!("a {mode:?} operation"))?);
        self.held.push(p);
        Ok(())
    }

    /// `mode(x, b)` into a new virtual f32 tensor of `dims`.
    fn map(&mut self, mode: Pw, x: usize, b: Option<usize>, dims: [i64; 4]) -> Res<usize> {
        let y = self.virt(Dt::CUDNN_DATA_FLOAT, dims)?;
        self.pointwise(mode, x, b, None, y, None)?;
        Ok(y)
    }

    fn reduce(&mut self, op: dnn::cudnnReduceTensorOp_t, x: usize, y: usize) -> Res<()> {
        let r = Desc::new(D::CUDNN_BACKEND_REDUCTION_DESCRIPTOR)?;
        r.set(A::CUDNN_ATTR_REDUCTION_COMP_TYPE, T::CUDNN_TYPE_DATA_TYPE, &[Dt::CUDNN_DATA_FLOAT])?;
        r.set(A::CUDNN_ATTR_REDUCTION_OPERATOR, T::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &[op])?;
        let r = r.finalize("a reduction")?;
        let o = Desc::new(D::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)?;
        o.descs(A::CUDNN_ATTR_OPERATION_REDUCTION_DESC, &[&r])?;
        o.descs(A::CUDNN_ATTR_OPERATION_REDUCTION_XDESC, &[&self.tensors[x]])?;
        o.descs(A::CUDNN_ATTR_OPERATION_REDUCTION_YDESC, &[&self.tensors[y]])?;
        self.ops.push(o.finalize("a reduction operation")?);
        self.held.push(r);
        Ok(())
    }

    fn reshape(&mut self, x: usize, y: usize) -> Res<()> {
        let o = Desc::new(D::CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)?;
        o.descs(A::CUDNN_ATTR_OPERATION_RESHAPE_XDESC, &[&self.tensors[x]])?;
        o.descs(A::CUDNN_ATTR_OPERATION_RESHAPE_YDESC, &[&self.tensors[y]])?;
        self.ops.push(o.finalize("a reshape operation")?);
        Ok(())
    }

    /// Scores with the causal mask applied where asked: `row ≥ column` keeps a score, the
    /// rest become −∞ (query `i` sees keys `0..=i`; the scores are square).
    fn causal(&mut self, s: usize, dims: [i64; 4]) -> Res<usize> {
        let row = self.virt(Dt::CUDNN_DATA_INT32, dims)?;
        self.pointwise(Pw::CUDNN_POINTWISE_GEN_INDEX, s, None, None, row, Some(2))?;
        let col = self.virt(Dt::CUDNN_DATA_INT32, dims)?;
        self.pointwise(Pw::CUDNN_POINTWISE_GEN_INDEX, s, None, None, col, Some(3))?;
        let keep = self.virt(Dt::CUDNN_DATA_BOOLEAN, dims)?;
        self.pointwise(Pw::CUDNN_POINTWISE_CMP_GE, row, Some(col), None, keep, None)?;
        let neg = self.scalar(Uid::NegInf)?;
        let out = self.virt(Dt::CUDNN_DATA_FLOAT, dims)?;
        self.pointwise(Pw::CUDNN_POINTWISE_BINARY_SELECT, s, Some(neg), Some(keep), out, None)?;
        Ok(out)
    }

    /// The graph's execution plan: the first of cuDNN's heuristic choices that finalizes.
    fn plan(self) -> Res<Plan> {
        let graph = Desc::new(D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        let ops: Vec<&Desc> = self.ops.iter().collect();
        graph.descs(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &ops)?;
        graph.set(A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, T::CUDNN_TYPE_HANDLE, &[self.handle])?;
        let graph = graph.finalize("the attention graph")?;
        let heur = Desc::new(D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        heur.descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[&graph])?;
        heur.set(A::CUDNN_ATTR_ENGINEHEUR_MODE, T::CUDNN_TYPE_HEUR_MODE, &[dnn::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A])?;
        let heur = heur.finalize("the engine heuristics")?;
        let mut count = 0i64;
        // SAFETY: asks for the number of results only.
        check(
            unsafe { dnn::cudnnBackendGetAttribute(heur.0, A::CUDNN_ATTR_ENGINEHEUR_RESULTS, T::CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &mut count, std::ptr::null_mut()) },
            "counting the engine choices",
        )?;
        let configs = (0..count.max(0)).map(|_| Desc::new(D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)).collect::<Res<Vec<_>>>()?;
        let mut raw: Vec<dnn::cudnnBackendDescriptor_t> = configs.iter().map(|c| c.0).collect();
        let mut got = 0i64;
        // SAFETY: `raw` holds `count` created engine-config descriptors for cuDNN to fill.
        check(
            unsafe { dnn::cudnnBackendGetAttribute(heur.0, A::CUDNN_ATTR_ENGINEHEUR_RESULTS, T::CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &mut got, raw.as_mut_ptr().cast()) },
            "reading the engine choices",
        )?;
        let mut last = format!("cuDNN offers no engine for this attention ({count} choices)");
        for config in configs.iter().take(got.max(0) as usize) {
            let plan = Desc::new(D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
            plan.set(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, T::CUDNN_TYPE_HANDLE, &[self.handle])?;
            plan.descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[config])?;
            match plan.finalize("an execution plan") {
                Ok(plan) => {
                    let mut workspace = 0i64;
                    let mut n = 0i64;
                    // SAFETY: one int64 into `workspace`.
                    check(
                        unsafe {
                            dnn::cudnnBackendGetAttribute(plan.0, A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, T::CUDNN_TYPE_INT64, 1, &mut n, (&mut workspace as *mut i64).cast())
                        },
                        "reading the plan's workspace",
                    )?;
                    let mut held = self.held;
                    held.extend(self.tensors);
                    held.extend(self.ops);
                    held.extend([graph, heur]);
                    return Ok(Plan { plan, workspace: workspace.max(0) as usize, _held: held });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// The unique ids of the tensors a caller passes.
#[derive(Clone, Copy)]
enum Uid {
    Q = 1,
    K,
    V,
    O,
    Stats,
    Scale,
    NegInf,
    DO,
    DQ,
    DK,
    DV,
    /// `Σ dO∘O` per row (backward scratch).
    RowDot,
    /// dQ summed in f32 (backward scratch, zeroed before each run).
    DqSum,
    /// 1, the dropout's rescale (no dropout).
    One,
}

/// A finalized plan and every descriptor it was built from.
struct Plan {
    plan: Desc,
    workspace: usize,
    _held: Vec<Desc>,
}

/// What a plan is for: the direction, dtype, sizes, mask and the element strides (batch,
/// head, row) of Q, K, V, O (forward and backward) and of dO, dQ, dK, dV (backward).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Shape {
    pub backward: bool,
    pub dtype: DType,
    pub batch: usize,
    pub heads: usize,
    pub s_q: usize,
    pub s_k: usize,
    pub d: usize,
    pub causal: bool,
    pub strides: Vec<[i64; 3]>,
}

impl Shape {
    fn dims(&self, rows: usize, cols: usize) -> [i64; 4] {
        [self.batch as i64, self.heads as i64, rows as i64, cols as i64]
    }

    /// `[B, H, rows, D]` strides of operand `i` (a batch of one gets a real stride).
    fn rows(&self, i: usize, rows: usize) -> [i64; 4] {
        let s = self.strides[i];
        let batch = if self.batch == 1 { (self.heads * rows * self.d) as i64 } else { s[0] };
        [batch, s[1], s[2], 1]
    }

    /// Operand `i` read transposed, `[B, H, D, rows]`.
    fn cols(&self, i: usize, rows: usize) -> [i64; 4] {
        let r = self.rows(i, rows);
        [r[0], r[1], 1, r[2]]
    }

    fn dt(&self) -> Dt {
        if self.dtype == DType::F16 {
            Dt::CUDNN_DATA_HALF
        } else {
            Dt::CUDNN_DATA_BFLOAT16
        }
    }

    /// Softmax statistics (log-sum-exp) per query row, f32 `[B, H, S_q, 1]`.
    fn stats(&self) -> ([i64; 4], [i64; 4]) {
        let dims = self.dims(self.s_q, 1);
        (dims, packed(dims))
    }

    /// Forward: `O = softmax(scale · Q Kᵀ (masked)) V` and the rows' log-sum-exp (cuDNN's
    /// fused engines took no forward without it here, cuDNN 9.14).
    fn forward(&self, b: &mut Builder) -> Res<()> {
        let (dt, sq, sk, d) = (self.dt(), self.s_q, self.s_k, self.d);
        let q = b.io(Uid::Q, dt, self.dims(sq, d), self.rows(0, sq))?;
        let kt = b.io(Uid::K, dt, self.dims(d, sk), self.cols(1, sk))?;
        let v = b.io(Uid::V, dt, self.dims(sk, d), self.rows(2, sk))?;
        let o = b.io(Uid::O, dt, self.dims(sq, d), self.rows(3, sq))?;
        let (sdims, sstrides) = self.stats();
        let stats = b.io(Uid::Stats, Dt::CUDNN_DATA_FLOAT, sdims, sstrides)?;
        let scale = b.scalar(Uid::Scale)?;
        let full = self.dims(sq, sk);
        let s = b.virt(Dt::CUDNN_DATA_FLOAT, full)?;
        b.matmul(q, kt, s)?;
        let mut s = b.map(Pw::CUDNN_POINTWISE_MUL, s, Some(scale), full)?;
        if self.causal {
            s = b.causal(s, full)?;
        }
        let max = b.virt(Dt::CUDNN_DATA_FLOAT, sdims)?;
        b.reduce(dnn::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_MAX, s, max)?;
        let shifted = b.map(Pw::CUDNN_POINTWISE_SUB, s, Some(max), full)?;
        let e = b.map(Pw::CUDNN_POINTWISE_EXP, shifted, None, full)?;
        let sum = b.virt(Dt::CUDNN_DATA_FLOAT, sdims)?;
        b.reduce(dnn::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD, e, sum)?;
        let log = b.map(Pw::CUDNN_POINTWISE_LOG, sum, None, sdims)?;
        b.pointwise(Pw::CUDNN_POINTWISE_ADD, max, Some(log), None, stats, None)?;
        let p = b.virt(dt, full)?;
        b.pointwise(Pw::CUDNN_POINTWISE_DIV, e, Some(sum), None, p, None)?;
        b.matmul(p, v, o)
    }

    /// Backward from Q, K, V, O, dO and the forward's log-sum-exp: dQ, dK, dV.
    fn backward(&self, b: &mut Builder) -> Res<()> {
        let (dt, sq, sk, d) = (self.dt(), self.s_q, self.s_k, self.d);
        let f32 = Dt::CUDNN_DATA_FLOAT;
        let q = b.io(Uid::Q, dt, self.dims(sq, d), self.rows(0, sq))?;
        let kt = b.io(Uid::K, dt, self.dims(d, sk), self.cols(1, sk))?;
        let vt = b.io(Uid::V, dt, self.dims(d, sk), self.cols(2, sk))?;
        let o = b.io(Uid::O, dt, self.dims(sq, d), self.rows(3, sq))?;
        let d_o = b.io(Uid::DO, dt, self.dims(sq, d), self.rows(4, sq))?;
        let dq = b.io(Uid::DQ, dt, self.dims(sq, d), self.rows(5, sq))?;
        let dk = b.io(Uid::DK, dt, self.dims(sk, d), self.rows(6, sk))?;
        let dv = b.io(Uid::DV, dt, self.dims(sk, d), self.rows(7, sk))?;
        let (sdims, sstrides) = self.stats();
        let stats = b.io(Uid::Stats, f32, sdims, sstrides)?;
        let row_dot = b.io(Uid::RowDot, f32, sdims, sstrides)?;
        let qd = self.dims(sq, d);
        let dq_sum = b.io(Uid::DqSum, f32, qd, packed(qd))?;
        let scale = b.scalar(Uid::Scale)?;
        let one = b.scalar(Uid::One)?;
        let full = self.dims(sq, sk);
        let dp = b.virt(f32, full)?;
        b.matmul(d_o, vt, dp)?;
        let s = b.virt(f32, full)?;
        b.matmul(q, kt, s)?;
        let d_oo = b.map(Pw::CUDNN_POINTWISE_MUL, d_o, Some(o), qd)?;
        let k = b.virt(f32, self.dims(sk, d))?;
        b.reshape(kt, k)?;
        let s = b.map(Pw::CUDNN_POINTWISE_MUL, s, Some(scale), full)?;
        let mut s = b.map(Pw::CUDNN_POINTWISE_SUB, s, Some(stats), full)?;
        if self.causal {
            s = b.causal(s, full)?;
        }
        let p = b.map(Pw::CUDNN_POINTWISE_EXP, s, None, full)?;
        let transposed = [full[0], full[1], full[3], full[2]];
        let tstrides = [full[1] * full[2] * full[3], full[2] * full[3], 1, full[3]];
        let pt = b.virt_strided(dt, transposed, tstrides)?;
        b.reshape(p, pt)?;
        b.matmul(pt, d_o, dv)?;
        let summed = b.virt(f32, sdims)?;
        b.reduce(dnn::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD, d_oo, summed)?;
        b.pointwise(Pw::CUDNN_POINTWISE_MUL, summed, Some(one), None, row_dot, None)?;
        let dp = b.map(Pw::CUDNN_POINTWISE_SUB, dp, Some(row_dot), full)?;
        let ds = b.map(Pw::CUDNN_POINTWISE_MUL, dp, Some(p), full)?;
        let ds = b.map(Pw::CUDNN_POINTWISE_MUL, ds, Some(scale), full)?;
        b.matmul(ds, k, dq_sum)?;
        b.pointwise(Pw::CUDNN_POINTWISE_IDENTITY, dq_sum, None, None, dq, None)?;
        let dst = b.virt_strided(dt, transposed, tstrides)?;
        b.reshape(ds, dst)?;
        b.matmul(dst, q, dk)
    }
}

/// Device pointers of one attention run, in [`Shape::strides`]' order (Q, K, V, O, then for
/// the backward dO, dQ, dK, dV), the log-sum-exp buffer and the softmax scale.
pub(crate) struct Run<'a> {
    pub ptrs: &'a [sys::CUdeviceptr],
    pub stats: sys::CUdeviceptr,
    pub scale: f32,
}

/// cuDNN on one device: its handle (on the device's stream) and the plans built so far.
pub(crate) struct Cudnn {
    handle: dnn::cudnnHandle_t,
    /// Per shape: the plan, or why cuDNN refused it (not asked again).
    plans: Mutex<HashMap<Shape, Result<Arc<Plan>, String>>>,
}

// SAFETY: the handle is used only under the device's stream lock, and the plan map behind
// its mutex.
unsafe impl Send for Cudnn {}
unsafe impl Sync for Cudnn {}

impl Drop for Cudnn {
    fn drop(&mut self) {
        self.plans.lock().clear();
        // SAFETY: created in `open` and destroyed once, after its plans.
        unsafe {
            let _ = dnn::cudnnDestroy(self.handle);
        }
    }
}

/// The version of the cuDNN attention runs on (`91900` for 9.19.0): `None` where the library
/// does not load, is older than 9, or `RLX_CUDNN=0` asks for rlx's own kernels.
pub fn version() -> Option<usize> {
    if std::env::var("RLX_CUDNN").is_ok_and(|v| v == "0") {
        return None;
    }
    // SAFETY: only tries to load the library.
    if !unsafe { dnn::is_culib_present() } {
        return None;
    }
    // SAFETY: a plain query of the loaded library.
    let v = unsafe { dnn::cudnnGetVersion() };
    (v >= 90000).then_some(v)
}

/// Runs `f` with the thread's stream-capture mode relaxed (restored after), so that calls
/// which allocate or load modules may run while this thread captures a CUDA graph.
pub(crate) fn relaxed<R>(f: impl FnOnce() -> R) -> R {
    let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: swaps this thread's mode; the old one is put back below.
    let swapped = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) } == sys::CUresult::CUDA_SUCCESS;
    let r = f();
    if swapped {
        // SAFETY: restores the mode read above.
        unsafe {
            sys::cuThreadExchangeStreamCaptureMode(&mut mode);
        }
    }
    r
}

impl Cudnn {
    /// cuDNN on `gpu`'s stream, or `None` where the library does not load, is older than
    /// 9, or `RLX_CUDNN=0` asks for rlx's own kernels.
    pub(crate) fn open(gpu: &Gpu) -> Option<Cudnn> {
        version()?;
        gpu.bind().ok()?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: the device's context is bound; `handle` receives the new handle.
        if unsafe { dnn::cudnnCreate(&mut handle) } != dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return None;
        }
        let cudnn = Cudnn { handle, plans: Mutex::new(HashMap::new()) };
        // SAFETY: the stream belongs to the bound context and outlives the handle.
        let set = unsafe { dnn::cudnnSetStream(handle, gpu.stream as dnn::cudaStream_t) };
        (set == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS).then_some(cudnn)
    }

    /// The plan of `shape`, built on first use; `Err` says why cuDNN does not take it.
    fn plan(&self, shape: &Shape) -> Res<Arc<Plan>> {
        let mut plans = self.plans.lock();
        if let Some(p) = plans.get(shape) {
            return p.clone();
        }
        let built = relaxed(|| {
            let mut b = Builder::new(self.handle);
            if shape.backward { shape.backward(&mut b) } else { shape.forward(&mut b) }?;
            b.plan()
        })
        .map(Arc::new);
        plans.insert(shape.clone(), built.clone());
        built
    }

    /// Whether cuDNN has (or builds now) a plan for `shape`.
    pub(crate) fn takes(&self, shape: &Shape) -> bool {
        self.plan(shape).is_ok()
    }

    /// The workspace bytes `shape`'s plan needs beyond its own scratch.
    pub(crate) fn workspace(&self, shape: &Shape) -> Res<usize> {
        Ok(self.plan(shape)?.workspace)
    }

    /// Launches `shape`'s plan on the stream over `run`; `workspace` holds what
    /// [`Cudnn::workspace`] asked for, and for the backward first `RowDot` (f32 per query
    /// row) then `DqSum` (f32 per element of dQ, which must be zero).
    pub(crate) fn launch(&self, shape: &Shape, run: &Run<'_>, workspace: sys::CUdeviceptr, scratch: [sys::CUdeviceptr; 2]) -> Res<()> {
        let plan = self.plan(shape)?;
        let neg_inf = f32::NEG_INFINITY;
        let one = 1.0f32;
        let host = |v: &f32| v as *const f32 as *mut c_void;
        let dev = |p: sys::CUdeviceptr| p as *mut c_void;
        let mut uids = vec![Uid::Q, Uid::K, Uid::V, Uid::O];
        if shape.backward {
            uids.extend([Uid::DO, Uid::DQ, Uid::DK, Uid::DV]);
        }
        let mut ptrs: Vec<*mut c_void> = run.ptrs.iter().map(|&p| dev(p)).collect();
        uids.extend([Uid::Stats, Uid::Scale]);
        ptrs.extend([dev(run.stats), host(&run.scale)]);
        if shape.causal {
            uids.push(Uid::NegInf);
            ptrs.push(host(&neg_inf));
        }
        if shape.backward {
            uids.extend([Uid::RowDot, Uid::DqSum, Uid::One]);
            ptrs.extend([dev(scratch[0]), dev(scratch[1]), host(&one)]);
        }
        let ids: Vec<i64> = uids.iter().map(|&u| u as i64).collect();
        let pack = Desc::new(D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        pack.set(A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, T::CUDNN_TYPE_INT64, &ids)?;
        pack.set(A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, T::CUDNN_TYPE_VOID_PTR, &ptrs)?;
        pack.set(A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE, T::CUDNN_TYPE_VOID_PTR, &[dev(workspace)])?;
        let pack = pack.finalize("the variant pack")?;
        // SAFETY: the plan was built on this handle; every pointer in the pack is live device
        // memory of the sizes the plan's tensors describe (or a host scalar read at launch).
        check(unsafe { dnn::cudnnBackendExecute(self.handle, plan.plan.0, pack.0) }, "running attention")
    }
}
