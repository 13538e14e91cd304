//! `MatMul` as a tiled product in workgroup memory: a 16 × 16 workgroup computes a 128 × 128
//! output tile, each invocation an 8 × 8 block of it held in registers, over K in steps of 16
//! staged through an A tile stored K-major and a B tile (both read as `vec4`s: four loads
//! feed 64 multiply-adds). Batches are the dispatch's third dimension, each item's A and B
//! found through the broadcast walk.
//!
//! Parameters: `p[K]` the batch items, the walk of A's and B's batch offsets (operands 0 and
//! 1 of the walk), and `p[K + 35 ..]` = `M, N, K`. `FusedMatMulBiasAct` is the same product
//! with its bias (a fourth operand, one value per column) and activation applied to each
//! output before the store.

use super::{header, load_fn, ty, Kernel, WALK};
use rlx_ir::ops::elementwise::{emit, table, ActivationKind};
use rlx_ir::DType;

/// Rows and columns of a workgroup's output tile.
pub const TILE: u32 = 128;

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
        None => "v".to_string(),
        Some(act) => {
            code += &load_fn(3, ty(d)?);
            if let Some(kind) = act {
                code += &(emit::prelude(emit::Target::Wgsl) + &emit::function(emit::Target::Wgsl, "f", &table::forward_expr(kind)));
            }
            let biased = "v + ld3(c)";
            if act.is_some() { format!("f({biased})") } else { biased.to_string() }
        }
    };
    code += KERNEL;
    code += &store(&value);
    Some(Kernel { name: "matmul", code, operands, report: false })
}

/// The product into `acc`: 16 `vec4`s, row `i`'s eight columns in `acc[2i]` and `acc[2i + 1]`.
const KERNEL: &str = "var<workgroup> ta: array<vec4<f32>, 512>;
var<workgroup> tb: array<vec4<f32>, 512>;
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = p[K + 35u];
    let n = p[K + 36u];
    let kd = p[K + 37u];
    let z = wg.z;
    let ab = walk(z, 0u);
    let bb = walk(z, 1u);
    let ob = z * m * n;
    let row0 = wg.y * 128u;
    let col0 = wg.x * 128u;
    let t = lid.y * 16u + lid.x;
    var acc: array<vec4<f32>, 16>;
    for (var k0 = 0u; k0 < kd; k0 += 16u) {
        for (var i = 0u; i < 8u; i++) {
            let idx = t + i * 256u;
            let ar = idx / 16u;
            let ak = idx % 16u;
            var va = 0.0;
            if (row0 + ar < m && k0 + ak < kd) { va = ld1(ab + (row0 + ar) * kd + k0 + ak); }
            let at = ak * 128u + ar;
            ta[at / 4u][at % 4u] = va;
            let bk = idx / 128u;
            let bc = idx % 128u;
            var vb = 0.0;
            if (k0 + bk < kd && col0 + bc < n) { vb = ld2(bb + (k0 + bk) * n + col0 + bc); }
            tb[idx / 4u][idx % 4u] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            let a0 = ta[kk * 32u + lid.y * 2u];
            let a1 = ta[kk * 32u + lid.y * 2u + 1u];
            let b0 = tb[kk * 32u + lid.x * 2u];
            let b1 = tb[kk * 32u + lid.x * 2u + 1u];
            acc[0] += a0.x * b0; acc[1] += a0.x * b1;
            acc[2] += a0.y * b0; acc[3] += a0.y * b1;
            acc[4] += a0.z * b0; acc[5] += a0.z * b1;
            acc[6] += a0.w * b0; acc[7] += a0.w * b1;
            acc[8] += a1.x * b0; acc[9] += a1.x * b1;
            acc[10] += a1.y * b0; acc[11] += a1.y * b1;
            acc[12] += a1.z * b0; acc[13] += a1.z * b1;
            acc[14] += a1.w * b0; acc[15] += a1.w * b1;
        }
        workgroupBarrier();
    }
";

/// The stores of the invocation's 8 × 8 block, each output `v` written as `value` (the
/// epilogue's expression of `v` and its column `c`), then the kernel's closing brace.
fn store(value: &str) -> String {
    let mut code = String::new();
    for i in 0..8 {
        code += &format!("    {{\n        let r = row0 + lid.y * 8u + {i}u;\n        if (r < m) {{\n");
        for j in 0..8 {
            let v = format!("acc[{}][{}]", 2 * i + j / 4, j % 4);
            code += &format!(
                "            {{ let c = col0 + lid.x * 8u + {j}u; let v = {v}; if (c < n) {{ b0[p[0] + ob + r * n + c] = bitcast<u32>({value}); }} }}\n"
            );
        }
        code += "        }\n    }\n";
    }
    code + "}\n"
}
