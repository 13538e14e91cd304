//! `MatMul` as a tiled product in workgroup memory: a 16 × 16 workgroup computes a 64 × 64
//! output tile, each invocation 4 × 4 outputs strided by 16 (so stores and tile loads are
//! coalesced), over K in steps of 16 staged through two 16 × 64 tiles. Batches are the
//! dispatch's third dimension, each item's A and B found through the broadcast walk.
//!
//! Parameters: `p[K]` the batch items, the walk of A's and B's batch offsets (operands 0 and
//! 1 of the walk), and `p[K + 35 ..]` = `M, N, K`. `FusedMatMulBiasAct` is the same product
//! with its bias (a fourth operand, one value per column) and activation applied to each
//! output before the store.

use super::{header, load_fn, ty, Kernel, WALK};
use rlx_ir::ops::elementwise::{emit, table, ActivationKind};
use rlx_ir::DType;

/// Rows and columns of a workgroup's output tile.
pub const TILE: u32 = 64;

/// What the product adds to each output before storing it: `Some(activation)` a bias
/// (operand 3) and then the activation, if any.
pub type Epilogue = Option<Option<ActivationKind>>;

/// The product of f32 operands (f16 and bf16 are cast to f32 around it by legalization), with
/// `epilogue`'s bias and activation.
pub fn matmul(d: DType, epilogue: Epilogue) -> Option<Kernel> {
    (d == DType::F32).then_some(())?;
    let operands = if epilogue.is_some() { 4 } else { 3 };
    let mut code = header(operands, false);
    code += WALK;
    code += &load_fn(1, ty(d)?);
    code += &load_fn(2, ty(d)?);
    let value = match epilogue {
        None => "acc[i][j]".to_string(),
        Some(act) => {
            code += &load_fn(3, ty(d)?);
            if let Some(kind) = act {
                code += &(emit::prelude(emit::Target::Wgsl) + &emit::function(emit::Target::Wgsl, "f", &table::forward_expr(kind)));
            }
            let biased = "acc[i][j] + ld3(c)";
            if act.is_some() { format!("f({biased})") } else { biased.to_string() }
        }
    };
    code += &"var<workgroup> ta: array<f32, 1024>;
var<workgroup> tb: array<f32, 1024>;
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = p[K + 35u];
    let n = p[K + 36u];
    let kd = p[K + 37u];
    let z = wg.z;
    let ab = walk(z, 0u);
    let bb = walk(z, 1u);
    let ob = z * m * n;
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    let t = lid.y * 16u + lid.x;
    var acc: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < kd; k0 += 16u) {
        for (var i = 0u; i < 4u; i++) {
            let idx = t + i * 256u;
            let ar = row0 + idx / 16u;
            let ak = k0 + idx % 16u;
            var va = 0.0;
            if (ar < m && ak < kd) { va = ld1(ab + ar * kd + ak); }
            ta[(idx % 16u) * 64u + idx / 16u] = va;
            let bk = k0 + idx / 64u;
            let bc = col0 + idx % 64u;
            var vb = 0.0;
            if (bk < kd && bc < n) { vb = ld2(bb + bk * n + bc); }
            tb[idx] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            let a = vec4<f32>(ta[kk * 64u + lid.y], ta[kk * 64u + lid.y + 16u], ta[kk * 64u + lid.y + 32u], ta[kk * 64u + lid.y + 48u]);
            let b = vec4<f32>(tb[kk * 64u + lid.x], tb[kk * 64u + lid.x + 16u], tb[kk * 64u + lid.x + 32u], tb[kk * 64u + lid.x + 48u]);
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let r = row0 + lid.y + 16u * i;
        if (r >= m) { continue; }
        for (var j = 0u; j < 4u; j++) {
            let c = col0 + lid.x + 16u * j;
            if (c < n) { b0[p[0] + ob + r * n + c] = bitcast<u32>(VALUE); }
        }
    }
}
".replace("VALUE", &value);
    Some(Kernel { name: "matmul", code, operands, report: false })
}
