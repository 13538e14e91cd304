//! `FusedConvBiasAct`: `act(conv(x, w) + bias[c] [+ residual])`, the conv-block tail.

use super::{conv, conv_f32, forward_channels, Finish, Geom, PackedConv};
use crate::kernels::elementwise::{activation, binary};
use crate::view::{In, Out};
use rlx_ir::ops::conv::Conv;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::fused::FusedConvBiasAct;
use rlx_ir::DType;

/// `x [N, C_in, H, W]`, `w [C_out, C_in/g, kH, kW]`, `bias [C_out]` and, with
/// `has_residual`, `residual` shaped as the output, all one float dtype; `packed` is `w`
/// packed once ([`super::prepack`]; f32 only, `w` may then be empty). In f32 the bias,
/// residual and activation run in the GEMM's epilogue on each finished piece of the output;
/// other dtypes run the `Conv`, `Add` and `Activation` kernels in turn (the decomposition).
pub fn conv_bias_act(a: &FusedConvBiasAct, ins: &[In], packed: Option<&PackedConv>, out: &mut Out) -> Result<(), String> {
    let [x, w, bias] = [ins[0], ins[1], ins[2]];
    let residual = a.has_residual.then(|| ins[3]);
    if out.dtype == DType::F32 && ins.iter().all(|t| t.dtype == DType::F32) {
        let g = Geom::new(&x.dims[2..], &out.dims[2..], &a.kernel_size, &a.stride, &a.padding, &a.dilation);
        let ch = forward_channels(x.dims, w.dims, a.groups);
        let finish = Finish { bias: bias.get::<f32>(), residual: residual.map(|r| r.get::<f32>()), activation: a.activation };
        return conv_f32(x.get::<f32>(), w.get::<f32>(), out.get::<f32>(), ch, &g, Some(&finish), packed);
    }
    let attrs = Conv { kernel_size: a.kernel_size.clone(), stride: a.stride.clone(), padding: a.padding.clone(), dilation: a.dilation.clone(), groups: a.groups };
    conv(&attrs, x, w, out)?;
    let channel = [1, bias.dims[0], 1, 1];
    add_in_place(out, In { dtype: bias.dtype, dims: &channel, bytes: bias.bytes })?;
    if let Some(r) = residual {
        add_in_place(out, r)?;
    }
    if let Some(kind) = a.activation {
        let y = out.bytes.to_vec();
        activation(kind, In { dtype: out.dtype, dims: out.dims, bytes: &y }, out)?;
    }
    Ok(())
}

/// `Conv` in f32 with its weight also given packed once ([`super::prepack`]; `w` may then be
/// empty); other dtypes take [`conv`].
pub fn conv_prepacked(a: &Conv, x: In, w: In, packed: &PackedConv, out: &mut Out) -> Result<(), String> {
    if out.dtype != DType::F32 || x.dtype != DType::F32 || w.dtype != DType::F32 {
        return conv(a, x, w, out);
    }
    let g = Geom::new(&x.dims[2..], &out.dims[2..], &a.kernel_size, &a.stride, &a.padding, &a.dilation);
    conv_f32(x.get::<f32>(), w.get::<f32>(), out.get::<f32>(), forward_channels(x.dims, w.dims, a.groups), &g, None, Some(packed))
}

/// `out ← out + b` through the `Add` kernel (broadcasting `b`).
fn add_in_place(out: &mut Out, b: In) -> Result<(), String> {
    let y = out.bytes.to_vec();
    binary(BinaryOp::Add, In { dtype: out.dtype, dims: out.dims, bytes: &y }, b, out)
}
