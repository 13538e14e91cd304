//! The one place that maps each claimed op onto its kernel.

use crate::kernels::{attention, conv, elementwise, fused, index, linalg, matmul, norm, quant, random, reduce, rnn, shape, signal, softmax, spd, splat, ssm};
use crate::view::{In, Out};
use rlx_ir::ops::conv::Conv;
use rlx_ir::ops::fused::FusedConvBiasAct;
use rlx_ir::ops::quant::Activations;
use rlx_ir::{DType, Op};
use rlx_runtime::Tensor;

/// Whether `op` has a kernel that updates its first operand in place when that operand is
/// graph state (a parameter): [`run_in_place`] runs it.
pub fn updates_state(op: &Op) -> bool {
    matches!(op, Op::KvAppend(_))
}

/// Whether the output of such an update is the state itself (no copy): the run-time-position
/// `KvAppend`, which returns the whole cache.
pub fn output_is_state(op: &Op, inputs: usize) -> bool {
    matches!(op, Op::KvAppend(_)) && inputs == 3
}

/// Runs an op of [`updates_state`] on the parameter `state` in place; `ins` are its other
/// operands, `outs` its outputs (none when [`output_is_state`]).
pub fn run_in_place(op: &Op, state: &mut Out, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    match op {
        Op::KvAppend(a) => {
            let at = shape::kv_position(a.pos, ins.get(1).copied())?;
            shape::kv_write(a.axis, at, state.bytes, state.dims, ins[0])?;
            match outs.first_mut() {
                Some(out) => shape::slice(a.axis, 0, 1, state.as_in(), out),
                None => Ok(()),
            }
        }
        _ => Err(format!("{} has no in-place kernel", op.kind())),
    }
}

/// A weight laid out once for its kernel ([`prepack`]): the GEMM's packed `b` of an f32
/// matmul, an f32 conv's weight as its kernel reads it, the panels of a quantized product, or
/// an f32 matmul's weight rounded to 8 bits or bf16 ([`crate::Products`]).
pub enum Packed {
    Gemm(matmul::PackedB),
    Conv(conv::PackedConv),
    Quant(quant::Panels),
    Rounded(matmul::Rounded),
}

impl Packed {
    /// The weight as given: its bytes (`dims` are the weight's own); a rounded weight gives the
    /// values it stands for.
    pub fn unpack(&self) -> Vec<u8> {
        match self {
            Packed::Gemm(p) => bytemuck::cast_slice(&p.unpack()).to_vec(),
            Packed::Conv(p) => bytemuck::cast_slice(&p.unpack()).to_vec(),
            Packed::Quant(p) => p.unpack(),
            Packed::Rounded(p) => bytemuck::cast_slice(&p.unpack()).to_vec(),
        }
    }
}

/// Whether `op` takes its weight `b` rounded when products are not f32 ([`crate::Products`]):
/// an f32 `MatMul` or `FusedMatMulBiasAct` of a 2-D weight.
pub fn rounds(op: &Op, a: (DType, &[usize]), b: (DType, &[usize])) -> bool {
    a.0 == DType::F32 && !a.1.is_empty() && rounds_weight(op, b)
}

/// The weight half of [`rounds`]: a 2-D f32 `b` of `MatMul` or `FusedMatMulBiasAct`.
fn rounds_weight(op: &Op, b: (DType, &[usize])) -> bool {
    matches!(op, Op::MatMul(_) | Op::FusedMatMulBiasAct(_)) && b.0 == DType::F32 && b.1.len() == 2
}

/// `op`'s weight `b` rounded as `products` says; `None` for f32 products or a weight `op`
/// does not take rounded ([`rounds`]).
pub fn prepack_rounded(products: crate::Products, op: &Op, b: In) -> Option<Packed> {
    let [k, n] = *b.dims else { return None };
    if !rounds_weight(op, (b.dtype, b.dims)) {
        return None;
    }
    matmul::Rounded::new(products, matmul::Mat::row_major(b.get::<f32>(), k, n)).map(Packed::Rounded)
}

/// The operand of `op` that its kernel can also take pre-packed ([`Packed`]): `b` of
/// `MatMul`, `FusedMatMulBiasAct` and `DequantMatMul`, `w` of `Conv` and `FusedConvBiasAct`,
/// the table of `Gather`, when [`packs`] says so.
pub fn packable_operand(op: &Op) -> Option<usize> {
    match op {
        Op::MatMul(_) | Op::FusedMatMulBiasAct(_) | Op::DequantMatMul(_) | Op::Conv(_) | Op::FusedConvBiasAct(_) => Some(1),
        Op::Gather(_) => Some(0),
        _ => None,
    }
}

/// Whether `op`, with first operand `a` and weight `b` (dtype and dims of each), reads `b`
/// laid out ([`prepack`]): a 2-D f32 `b` under more than [`matmul::FEW_ROWS`] rows of `a`
/// (few-row products read `b` as it is), an ungrouped f32 conv's weight, or a `Q8Blocks`
/// product's GGUF weight. A `Gather` from a `[rows, row_bytes]` U8 table makes no layout of
/// its own but reads the rows of one a product made of the same parameter (a tied embedding
/// and output head keep one copy), and the table as given otherwise.
pub fn packs(op: &Op, a: (DType, &[usize]), b: (DType, &[usize])) -> bool {
    let f32s = a.0 == DType::F32 && b.0 == DType::F32;
    match op {
        Op::Conv(Conv { groups, .. }) | Op::FusedConvBiasAct(FusedConvBiasAct { groups, .. }) => f32s && *groups == 1 && b.1.len() >= 3,
        Op::MatMul(_) | Op::FusedMatMulBiasAct(_) => {
            let rows: usize = a.1[..a.1.len().saturating_sub(1)].iter().product();
            f32s && b.1.len() == 2 && rows > matmul::FEW_ROWS
        }
        Op::DequantMatMul(d) => d.activations == Activations::Q8Blocks && d.scheme.gguf().is_some(),
        Op::Gather(g) => g.axis == 0 && b.0 == DType::U8 && b.1.len() == 2,
        _ => false,
    }
}

/// [`prepack`] taking the weight `b`, laid out in its own memory where the layout allows;
/// `Err(b)` when there is none.
pub fn prepack_owned(op: &Op, b: Tensor, out_dims: &[usize]) -> Result<Packed, Tensor> {
    match op {
        Op::DequantMatMul(d) => match out_dims.last() {
            Some(&n) => quant::prepack_owned(d, b, n).map(Packed::Quant),
            None => Err(b),
        },
        _ => {
            let view = In { dtype: b.dtype(), dims: b.shape(), bytes: b.bytes() };
            prepack(op, view, out_dims).ok_or(b)
        }
    }
}

/// `op`'s weight `b` laid out for its kernel, with `out_dims` the dims of `op`'s output;
/// `None` when the kernel would reject `b` (it then reports why from [`run`]).
pub fn prepack(op: &Op, b: In, out_dims: &[usize]) -> Option<Packed> {
    match op {
        Op::DequantMatMul(d) => quant::prepack(d, b, *out_dims.last()?)?.ok().map(Packed::Quant),
        Op::Gather(_) => None,
        _ if b.dtype != DType::F32 || b.bytes.len() != b.dims.iter().product::<usize>() * 4 => None,
        Op::Conv(Conv { kernel_size, stride, padding, dilation, .. })
        | Op::FusedConvBiasAct(FusedConvBiasAct { kernel_size, stride, padding, dilation, .. }) => {
            let g = conv::Geom::of_output(out_dims.get(2..)?, kernel_size, stride, padding, dilation);
            Some(Packed::Conv(conv::prepack(b.get::<f32>(), b.dims, &g)))
        }
        _ if b.dims.len() == 2 => Some(Packed::Gemm(matmul::prepack(b))),
        _ => None,
    }
}

/// [`run`] with the [`packable_operand`] given laid out ([`prepack`]) instead of read from
/// `ins`.
pub fn run_prepacked(op: &Op, ins: &[In], packed: &Packed, outs: &mut [Out]) -> Result<(), String> {
    match (op, packed) {
        (Op::MatMul(_), Packed::Gemm(p)) => matmul::matmul_prepacked(ins[0], ins[1], p, &mut outs[0]),
        (Op::FusedMatMulBiasAct(a), Packed::Gemm(p)) => fused::matmul_bias_act(a.activation, ins[0], ins[1], Some(p), ins[2], &mut outs[0]),
        (Op::Conv(a), Packed::Conv(p)) => conv::conv_prepacked(a, ins[0], ins[1], p, &mut outs[0]),
        (Op::FusedConvBiasAct(a), Packed::Conv(p)) => conv::conv_bias_act(a, ins, Some(p), &mut outs[0]),
        (Op::DequantMatMul(_), Packed::Quant(p)) => quant::dequant_matmul_prepacked(p, ins, &mut outs[0]),
        (Op::Gather(_), Packed::Quant(p)) => index::gather_panel_rows(p, ins[1], &mut outs[0]),
        (Op::MatMul(_), Packed::Rounded(p)) => matmul::matmul_rounded(ins[0], p, &mut outs[0], None),
        (Op::FusedMatMulBiasAct(a), Packed::Rounded(p)) => fused::matmul_bias_act_rounded(a.activation, ins[0], p, ins[2], &mut outs[0]),
        _ => run(op, ins, outs),
    }
}

/// Runs `op` on `ins`, writing `outs`. Shapes and dtypes were checked by inference; the
/// kernel checks only what depends on data (indices, labels, matrix conditions). The match
/// names every kind, so a new kind is a compile error here until it has an arm.
pub fn run(op: &Op, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let out = &mut outs[0];
    match op {
        // elementwise
        Op::Activation(a) => elementwise::activation(a.kind, ins[0], out),
        Op::Cast(_) => elementwise::cast(ins[0], out),
        Op::StopGradient(_) => elementwise::copy(ins[0], out),
        Op::Binary(a) => elementwise::binary(a.op, ins[0], ins[1], out),
        Op::Compare(a) => elementwise::compare(a.op, ins[0], ins[1], out),
        Op::Where(_) => elementwise::select(ins[0], ins[1], ins[2], out),
        Op::Fma(_) => elementwise::fma(ins[0], ins[1], ins[2], out),
        Op::ReluBackward(_) => elementwise::relu_backward(ins[0], ins[1], out),
        Op::ActivationBackward(a) => elementwise::activation_backward(a.kind, ins[0], ins[1], out),
        Op::SplineActivation(a) => elementwise::spline((a.num_basis, a.grid_min, a.grid_max), ins[0], ins[1], out),
        Op::SplineActivationBackwardX(a) => {
            elementwise::spline_backward_x((a.num_basis, a.grid_min, a.grid_max), ins[0], ins[1], ins[2], out)
        }
        Op::SplineActivationBackwardCoeff(a) => {
            elementwise::spline_backward_coeff((a.num_basis, a.grid_min, a.grid_max), ins[0], ins[1], out)
        }
        // matmul
        Op::MatMul(_) => matmul::matmul(ins[0], ins[1], out),
        Op::DotGeneral(d) => matmul::dot_general(d, ins[0], ins[1], out),
        // shape
        Op::Reshape(_) => shape::reshape(ins[0], out),
        Op::Transpose(a) => shape::transpose(&a.perm, ins[0], out),
        Op::Narrow(a) => shape::slice(a.axis, a.start, 1, ins[0], out),
        Op::Slice(a) => shape::slice(a.axis, a.start, a.step, ins[0], out),
        Op::Concat(a) => shape::concat(a.axis, ins, out),
        Op::Expand(_) => shape::expand(ins[0], out),
        Op::Reverse(a) => shape::reverse(&a.axes, ins[0], out),
        Op::Pad(a) => shape::pad(&a.pads, &a.mode, ins[0], out),
        Op::KvAppend(a) => shape::kv_append(a.axis, shape::kv_position(a.pos, ins.get(2).copied())?, ins[0], ins[1], out),
        // index
        Op::Gather(a) => index::gather(a.axis, ins[0], ins[1], out),
        Op::GatherBackward(a) => index::gather_backward(a.axis, ins[0], ins[1], out),
        Op::GatherNd(a) => index::gather_nd(a.batch_dims, ins[0], ins[1], out),
        Op::GatherElements(a) => index::gather_elements(a.axis, ins[0], ins[1], out),
        Op::ScatterAdd(_) => index::scatter_add(ins[0], ins[1], out),
        Op::ScatterNd(a) => index::scatter_nd(a.reduction, ins[0], ins[1], ins[2], out),
        Op::ScatterElements(a) => index::scatter_elements(a.axis, a.reduction, ins[0], ins[1], ins[2], out),
        // reduce
        Op::Reduce(a) => reduce::reduce(a.op, &a.axes, ins[0], out),
        Op::Cumsum(a) => reduce::cumsum(a.axis, a.exclusive, ins[0], out),
        Op::CumProd(a) => reduce::cum_prod(a.axis, a.exclusive, ins[0], out),
        Op::CumMax(a) => reduce::cum_max(a.axis, a.exclusive, ins[0], out),
        Op::CumsumBackward(a) => reduce::cumsum_backward(a.axis, a.exclusive, ins[0], out),
        Op::ArgMax(a) => reduce::arg_max(a.axis, ins[0], out),
        Op::ArgMin(a) => reduce::arg_min(a.axis, ins[0], out),
        Op::TopK(a) => {
            let [values, indices] = outs else { return Err("TopK has two outputs".into()) };
            reduce::top_k(a.k, ins[0], values, indices)
        }
        Op::Sort(a) => reduce::sort(a.axis, a.descending, ins[0], out),
        Op::ArgSort(a) => reduce::arg_sort(a.axis, a.descending, ins[0], out),
        // softmax
        Op::Softmax(a) => softmax::softmax(a.axis, ins[0], out),
        Op::SoftmaxCrossEntropy(_) => softmax::softmax_cross_entropy(ins[0], ins[1], out),
        Op::SoftmaxCrossEntropyWithLogits(a) => softmax::softmax_cross_entropy_with_logits(a.ignore_index, ins[0], ins[1], out),
        Op::SoftmaxCrossEntropyBackward(a) => softmax::softmax_cross_entropy_backward(a.ignore_index, ins[0], ins[1], ins[2], out),
        // random
        Op::RngNormal(a) => random::rng_normal(a, out),
        Op::RngUniform(a) => random::rng_uniform(a, out),
        Op::Sample(a) => random::sample(a, ins[0], out),
        // norm
        Op::LayerNorm(a) => norm::layer_norm(a, ins, outs),
        Op::LayerNorm2d(a) => norm::layer_norm_2d(a, ins, outs),
        Op::GroupNorm(a) => norm::group_norm(a, ins, outs),
        Op::RmsNorm(a) => norm::rms_norm(a, ins, outs),
        Op::BatchNormInference(a) => norm::batch_norm_inference(a, ins, outs),
        Op::LayerNormBackwardInput(a) => norm::layer_norm_backward_input(a, ins, outs),
        Op::LayerNormBackwardGamma(a) => norm::layer_norm_backward_gamma(a, ins, outs),
        Op::RmsNormBackwardInput(a) => norm::rms_norm_backward_input(a, ins, outs),
        Op::RmsNormBackwardGamma(a) => norm::rms_norm_backward_gamma(a, ins, outs),
        Op::RmsNormBackwardBeta(a) => norm::rms_norm_backward_beta(a, ins, outs),
        Op::GroupNormBackwardInput(a) => norm::group_norm_backward_input(a, ins, outs),
        Op::GroupNormBackwardGamma(a) => norm::group_norm_backward_gamma(a, ins, outs),
        Op::GroupNormBackwardBeta(a) => norm::group_norm_backward_beta(a, ins, outs),
        Op::BatchNormInferenceBackwardInput(a) => norm::batch_norm_inference_backward_input(a, ins, outs),
        Op::BatchNormInferenceBackwardGamma(a) => norm::batch_norm_inference_backward_gamma(a, ins, outs),
        Op::BatchNormInferenceBackwardBeta(a) => norm::batch_norm_inference_backward_beta(a, ins, outs),
        // attention
        Op::Attention(a) => attention::attention(a, ins, outs),
        Op::AttentionBackward(a) => attention::attention_backward(a, ins, outs),
        Op::AttentionBackwardAll(a) => attention::attention_backward_all(a, ins, outs),
        Op::Rope(a) => attention::rope(a, ins, outs),
        Op::RopeBackward(a) => attention::rope_backward(a, ins, outs),
        Op::AxialRope2d(a) => attention::axial_rope_2d(a, ins, outs),
        // conv
        Op::Conv(a) => conv::conv(a, ins[0], ins[1], out),
        Op::Conv3d(a) => conv::conv3d(a, ins[0], ins[1], out),
        Op::ConvTranspose2d(a) => conv::conv_transpose2d(a, ins[0], ins[1], out),
        Op::ConvTranspose3d(a) => conv::conv_transpose3d(a, ins[0], ins[1], out),
        Op::Im2Col(a) => conv::im2col_op(a, ins[0], out),
        Op::Pool(a) => conv::pool(a, ins[0], out),
        Op::ResizeNearest2x(_) | Op::Interpolate3d(_) => conv::resize_nearest(ins[0], out),
        Op::Conv2dBackwardInput(a) => conv::conv2d_backward_input(a, ins[0], ins[1], out),
        Op::Conv2dBackwardWeight(a) => conv::conv2d_backward_weight(a, ins[0], ins[1], out),
        Op::Conv3dBackwardInput(a) => conv::conv3d_backward_input(a, ins[0], ins[1], out),
        Op::Conv3dBackwardWeight(a) => conv::conv3d_backward_weight(a, ins[0], ins[1], out),
        Op::MaxPool2dBackward(a) => conv::max_pool_backward(a, ins[0], ins[1], out),
        Op::MaxPool3dBackward(a) => conv::max_pool3d_backward(a, ins[0], ins[1], out),
        // rnn (outputs y, h_n[, c_n]; carried states are read, not written back: see kernels::rnn)
        Op::Lstm(a) => rnn::lstm(a, ins, outs),
        Op::Gru(a) => rnn::gru(a, ins, outs),
        Op::Rnn(a) => rnn::rnn(a, ins, outs),
        // ssm (GatedDeltaNet's carried state is read, not written back: see kernels::ssm)
        Op::SelectiveScan(a) => ssm::selective_scan(a, ins, out),
        Op::Mamba2(a) => ssm::mamba2(a, ins, out),
        Op::GatedDeltaNet(a) => ssm::gated_delta_net(a, ins, out, None),
        // fused
        Op::FusedMatMulBiasAct(a) => fused::matmul_bias_act(a.activation, ins[0], ins[1], None, ins[2], out),
        Op::FusedSwiGLU(a) => fused::swiglu(a.gate_first, ins[0], out),
        Op::FusedConvBiasAct(a) => conv::conv_bias_act(a, ins, None, out),
        Op::FusedResidualLN(a) => fused::residual_layer_norm(a, ins, out),
        Op::FusedResidualRmsNorm(a) => fused::residual_rms_norm(a, ins, out),
        Op::ElementwiseRegion(r) => fused::elementwise_region(r, ins, out),
        // custom
        Op::Custom(c) => crate::custom::run(c, ins, outs),
        // signal
        Op::Fft(a) => signal::fft(a, ins[0], out),
        Op::FftButterflyStage(a) => signal::fft_butterfly_stage(a, ins, out),
        Op::LogMel(a) => signal::log_mel(a, ins[0], ins[1], out),
        Op::LogMelBackward(a) => signal::log_mel_backward(a, ins[0], ins[1], ins[2], out),
        Op::WelchPeaks(a) => signal::welch_peaks(a, ins[0], out),
        Op::PartitionedConv(a) => signal::partitioned_conv(a, ins[0], ins[1], out),
        Op::ComplexNormSq(_) => signal::complex_norm_sq(ins[0], out),
        Op::ComplexNormSqBackward(_) => signal::complex_norm_sq_backward(ins[0], ins[1], out),
        Op::Conjugate(_) => signal::conjugate(ins[0], out),
        // linalg
        Op::DenseSolve(_) => linalg::dense_solve(ins, out),
        Op::BatchedDenseSolve(_) => linalg::batched_dense_solve(ins, out),
        Op::Cholesky(_) => linalg::cholesky(ins[0], out),
        Op::TriangularSolve(a) => linalg::triangular_solve(a, ins, out),
        Op::Det(_) => linalg::det(ins[0], out),
        Op::LogDet(_) => linalg::log_det(ins[0], out),
        Op::Svd(_) => linalg::svd(ins[0], outs),
        Op::Qr(_) => linalg::qr(ins[0], outs),
        Op::Eigh(_) => linalg::eigh(ins[0], outs),
        Op::EighBackward(_) => linalg::eigh_backward(ins, out),
        Op::EighBatch(_) => linalg::eigh_batch(ins[0], outs),
        Op::EighBatchBackward(_) => linalg::eigh_batch_backward(ins, out),
        // spd (BiMap lowers to MatMul + Transpose)
        Op::ReEig(a) => spd::re_eig(a.eps, ins, outs),
        Op::LogEig(a) => spd::log_eig(a.eps, ins, outs),
        Op::SpdBatchNorm(a) => spd::spd_batch_norm(a.eps, ins, outs),
        Op::SpdKarcherMean(a) => spd::spd_karcher_mean(a.iters, a.tol, ins, outs),
        Op::SpdKarcherMeanWeighted(a) => spd::spd_karcher_mean_weighted(a.iters, a.tol, ins, outs),
        Op::SpdLogMap(_) => spd::spd_log_map(ins, outs),
        Op::SpdExpMap(_) => spd::spd_exp_map(ins, outs),
        Op::SpdParallelTransport(_) => spd::spd_parallel_transport(ins, outs),
        Op::SpdMatrixFnBatch(a) => spd::spd_matrix_fn_batch(a.kind, ins, outs),
        Op::ReEigBackward(a) => spd::re_eig_backward(a.eps, ins, outs),
        Op::LogEigBackward(a) => spd::log_eig_backward(a.eps, ins, outs),
        Op::SpdBatchNormBackwardX(a) => spd::spd_batch_norm_backward_x(a.eps, ins, outs),
        Op::SpdBatchNormBackwardG(a) => spd::spd_batch_norm_backward_g(a.eps, ins, outs),
        Op::SpdLogMapBackward(_) => spd::spd_log_map_backward(ins, outs),
        Op::SpdExpMapBackward(_) => spd::spd_exp_map_backward(ins, outs),
        Op::SpdParallelTransportBackward(_) => spd::spd_parallel_transport_backward(ins, outs),
        Op::SpdMatrixFnBatchBackward(a) => spd::spd_matrix_fn_batch_backward(a.kind, ins, outs),
        // quant
        Op::DequantMatMul(a) => quant::dequant_matmul(a, ins, out),
        Op::DequantGroupedMatMul(a) => quant::dequant_grouped_matmul(a, ins, out),
        Op::DequantGroupedMatMulMlx(a) => quant::dequant_grouped_matmul_mlx(a, ins, out),
        Op::DequantMoEWeights(a) => quant::dequant_moe_weights(a, ins[0], out),
        Op::ScaledQuantScale(a) => quant::scaled_quant_scale(a, ins[0], out),
        Op::ScaledQuantize(a) => quant::scaled_quantize(a, ins[0], ins[1], out),
        // splat
        Op::GaussianSplatRender(a) => splat::gaussian_splat_render(a, ins, out),
        Op::GaussianSplatPrepare(a) => splat::gaussian_splat_prepare(a, ins, out),
        Op::GaussianSplatRasterize(a) => splat::gaussian_splat_rasterize(a, ins, out),
        Op::GaussianSplatRenderBackward(a) => splat::gaussian_splat_render_backward(a, ins, outs),
        // Sources are the executor's values, not kernel calls.
        Op::Input(_) | Op::Param(_) | Op::Constant(_) => Err(format!("{} is a source, not a kernel call", op.kind())),
        // Not claimed: legalization lowers these through their decompositions first.
        Op::AdaLayerNorm(_)
        | Op::AdaLayerNormBackward(_)
        | Op::BatchElementwiseRegion(_)
        | Op::BiMap(_)
        | Op::CustomFn(_)
        | Op::Dequantize(_)
        | Op::FakeQuantize(_)
        | Op::FakeQuantizeBackward(_)
        | Op::FakeQuantizeLSQ(_)
        | Op::FakeQuantizeLSQBackwardScale(_)
        | Op::FakeQuantizeLSQBackwardX(_)
        | Op::FusedAttentionBlock(_)
        | Op::FusedTransformerLayer(_)
        | Op::GatedResidual(_)
        | Op::GatedResidualBackward(_)
        | Op::GroupedMatMul(_)
        | Op::If(_)
        | Op::LoraMatMul(_)
        | Op::QConv2d(_)
        | Op::QMatMul(_)
        | Op::Quantize(_)
        | Op::ScaledDequantize(_)
        | Op::ScaledMatMul(_)
        | Op::Scan(_)
        | Op::ScanBackward(_)
        | Op::ScanBackwardXs(_)
        | Op::SynthMatMul(_)
        | Op::SynthReconstruct(_)
        | Op::TransformRegion(_)
        | Op::While(_) => Err(format!("{} has no CPU kernel; legalization lowers it", op.kind())),
    }
}
