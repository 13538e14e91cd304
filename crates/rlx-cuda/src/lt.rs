//! f16 / bf16 products through cuBLASLt: per distinct problem (dtype, sizes, batch, strides,
//! transposes, epilogue) a matmul descriptor, layouts and the algorithm its heuristic ranks first, made
//! once and reused; f32 accumulation, and a bias (with ReLU or tanh-GELU) added to the f32
//! sums before the one rounding where the problem asks. Like [`crate::matmul`], row-major
//! `C = A·B` is passed as column-major `Cᵀ = Bᵀ·Aᵀ`, whose rows are `C`'s columns: the bias
//! (one value per column of `C`, in `C`'s dtype) is cuBLASLt's per-row bias.

use crate::gpu::{error, Gpu};
use cudarc::cublaslt::{result as lt, sys};
use rlx_runtime::Result;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// One problem: dtype, `(m, n, k)`, batch count, the batch strides of A and B, whether each
/// is stored transposed (row-major A `[K, M]`, B `[N, K]`), the elements between stored rows
/// of A, B and C (`ld`, at least a row's length), whether C holds f32 (sums kept across
/// calls, A and B still f16 / bf16), and what is added to the product before it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Problem {
    pub half: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub stride_a: i64,
    pub stride_b: i64,
    pub trans_a: bool,
    pub trans_b: bool,
    pub ld: [usize; 3],
    pub c_f32: bool,
    pub epilogue: Epilogue,
}

impl Problem {
    /// The row lengths of A, B and C stored without gaps.
    pub fn packed(m: usize, n: usize, k: usize, trans_a: bool, trans_b: bool) -> [usize; 3] {
        [if trans_a { m } else { k }, if trans_b { k } else { n }, n]
    }
}

/// What cuBLASLt applies to the f32 sums before storing them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    None,
    /// `+ bias[column]`.
    Bias,
    /// `relu(· + bias[column])`.
    ReluBias,
    /// `gelu_tanh(· + bias[column])`: the tanh approximation (`ActivationKind::GeluApprox`).
    GeluBias,
}

impl Epilogue {
    fn code(self) -> sys::cublasLtEpilogue_t {
        use sys::cublasLtEpilogue_t::*;
        match self {
            Epilogue::None => CUBLASLT_EPILOGUE_DEFAULT,
            Epilogue::Bias => CUBLASLT_EPILOGUE_BIAS,
            Epilogue::ReluBias => CUBLASLT_EPILOGUE_RELU_BIAS,
            Epilogue::GeluBias => CUBLASLT_EPILOGUE_GELU_BIAS,
        }
    }
}

/// A problem's descriptor, layouts (Bᵀ, Aᵀ, Cᵀ in cuBLASLt's order) and chosen algorithm.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
}

/// cuBLASLt's handle with the plans made so far.
pub struct Lt {
    handle: sys::cublasLtHandle_t,
    plans: Mutex<HashMap<Problem, Plan>>,
}

// SAFETY: the handle and plans are used only under the plans' lock, on the device's stream.
unsafe impl Send for Lt {}
unsafe impl Sync for Lt {}

fn failed(what: &str) -> impl FnOnce(cudarc::cublaslt::result::CublasError) -> rlx_runtime::RuntimeError + '_ {
    move |e| error(format!("cuBLASLt {what}: {e:?}"))
}

impl Lt {
    pub fn new() -> Result<Lt> {
        Ok(Lt { handle: lt::create_handle().map_err(failed("handle"))?, plans: Mutex::default() })
    }

    /// Runs `p` on pointers `a`, `b`, `c` (and `bias`, read where the epilogue adds one) with
    /// `workspace` (`workspace_size` bytes), on `gpu`'s stream; `accumulate` adds the product
    /// to what C holds.
    pub fn matmul(&self, gpu: &Gpu, p: Problem, (a, b, c, bias): (u64, u64, u64, u64), workspace: u64, workspace_size: usize, accumulate: bool) -> Result<()> {
        let mut plans = self.plans.lock().map_err(|_| error("the cuBLASLt plans were poisoned by a panic"))?;
        let plan = match plans.entry(p) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(self.plan(p, workspace_size)?),
        };
        if p.epilogue != Epilogue::None {
            // SAFETY: the descriptor is this plan's, used under the lock; the attribute is a
            // device pointer (8 bytes) to `n` values of C's dtype.
            unsafe { lt::set_matmul_desc_attribute(plan.desc, sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias as *const u64 as *const c_void, 8) }
                .map_err(failed("bias"))?;
        }
        let (one, beta) = (1f32, if accumulate { 1f32 } else { 0f32 });
        // SAFETY: the plan describes matrices that lie inside the operands' ranges; the
        // workspace holds `workspace_size` bytes and is used only on this stream.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                &one as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                b as *const c_void,
                plan.layouts[0],
                a as *const c_void,
                plan.layouts[1],
                c as *const c_void,
                plan.layouts[2],
                c as *mut c_void,
                plan.layouts[2],
                &plan.algo,
                workspace as *mut c_void,
                workspace_size,
                gpu.stream as sys::cudaStream_t,
            )
        }
        .map_err(failed("product"))
    }

    fn plan(&self, p: Problem, workspace_size: usize) -> Result<Plan> {
        let dtype = if p.half { sys::cudaDataType_t::CUDA_R_16F } else { sys::cudaDataType_t::CUDA_R_16BF };
        let desc = lt::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, sys::cudaDataType_t::CUDA_R_32F).map_err(failed("descriptor"))?;
        if p.epilogue != Epilogue::None {
            let code = p.epilogue.code();
            // SAFETY: `desc` was just created; the attribute is the epilogue enum (4 bytes).
            unsafe {
                lt::set_matmul_desc_attribute(desc, sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE, &code as *const _ as *const c_void, std::mem::size_of_val(&code))
            }
            .map_err(failed("epilogue"))?;
        }
        for (attribute, trans) in [
            (sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, p.trans_b),
            (sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB, p.trans_a),
        ] {
            let op = if trans { cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T } else { cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N };
            // SAFETY: `desc` was just created; the attribute is a cublasOperation_t (4 bytes).
            unsafe { lt::set_matmul_desc_attribute(desc, attribute, &op as *const _ as *const c_void, std::mem::size_of_val(&op)) }.map_err(failed("transpose"))?;
        }
        let layout = |dtype: sys::cudaDataType_t, rows: usize, cols: usize, ld: usize, stride: i64| -> Result<sys::cublasLtMatrixLayout_t> {
            let l = lt::create_matrix_layout(dtype, rows as u64, cols as u64, ld as i64).map_err(failed("layout"))?;
            if p.batch > 1 {
                let count = p.batch as i32;
                // SAFETY: `l` was just created; the attributes' sizes are their types'.
                unsafe {
                    lt::set_matrix_layout_attribute(l, sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count as *const i32 as *const c_void, 4)
                        .map_err(failed("batch count"))?;
                    lt::set_matrix_layout_attribute(l, sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride as *const i64 as *const c_void, 8)
                        .map_err(failed("batch stride"))?;
                }
            }
            Ok(l)
        };
        // Column-major, as stored: B is `n × k` (`k × n` transposed), A `k × m` (`m × k`).
        let (b_rows, b_cols) = if p.trans_b { (p.k, p.n) } else { (p.n, p.k) };
        let (a_rows, a_cols) = if p.trans_a { (p.m, p.k) } else { (p.k, p.m) };
        let c_dtype = if p.c_f32 { sys::cudaDataType_t::CUDA_R_32F } else { dtype };
        let layouts = [
            layout(dtype, b_rows, b_cols, p.ld[1], p.stride_b)?,
            layout(dtype, a_rows, a_cols, p.ld[0], p.stride_a)?,
            layout(c_dtype, p.n, p.m, p.ld[2], (p.m * p.ld[2]) as i64)?,
        ];
        let pref = lt::create_matmul_pref().map_err(failed("preference"))?;
        // SAFETY: `pref` was just created; the workspace size is a u64 as the attribute wants.
        let chosen = unsafe {
            let size = workspace_size as u64;
            lt::set_matmul_pref_attribute(pref, sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &size as *const u64 as *const c_void, 8)
                .and_then(|_| lt::get_matmul_algo_heuristic(self.handle, desc, layouts[0], layouts[1], layouts[2], layouts[2], pref))
        };
        // SAFETY: the preference is not used again.
        unsafe {
            let _ = lt::destroy_matmul_pref(pref);
        }
        let algo = chosen.map_err(failed("algorithm choice"))?.algo;
        Ok(Plan { desc, layouts, algo })
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        let plans = self.plans.get_mut().map(std::mem::take).unwrap_or_default();
        // SAFETY: nothing uses the plans or the handle after this.
        unsafe {
            for plan in plans.into_values() {
                for l in plan.layouts {
                    let _ = lt::destroy_matrix_layout(l);
                }
                let _ = lt::destroy_matmul_desc(plan.desc);
            }
            let _ = lt::destroy_handle(self.handle);
        }
    }
}
