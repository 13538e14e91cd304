//! Dtypes that inference accepts but a CPU kernel does not take compile, through the CPU's
//! claims, to casts around the native kernel or to a decomposition instead of failing at run
//! time; results against f64 or integer arithmetic written here.

use rlx_cpu::CpuBackend;
use rlx_ir::OpKind;
use rlx_opt::Outcome;
use rlx_runtime::{CompiledGraph, Session, Tensor};
use std::sync::Arc;

fn compile(src: &str) -> Result<CompiledGraph, String> {
    let g = rlx_ir::text::parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    Session::new(Arc::new(CpuBackend::new())).compile(&g).map_err(|e| e.to_string())
}

fn run(c: &mut CompiledGraph, inputs: &[(&str, &Tensor)]) -> Vec<Tensor> {
    c.run(inputs).unwrap_or_else(|e| panic!("{e}\n{}", c.graph()))
}

#[test]
fn half_float_gradients_of_f32_f64_kernels_run_in_f32() {
    let mut c = compile(
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[6]))()
        %1 = Input(name:"dy",ty:(dtype:F32,shape:[6]))()
        %2 = Cast(to:F16)(%0)
        %3 = Cast(to:F16)(%1)
        %4 = ReluBackward()(%2, %3)
        %5 = Cast(to:BF16)(%0)
        %6 = Cast(to:BF16)(%1)
        %7 = ReluBackward()(%5, %6)
        %8 = Cast(to:F64)(%4)
        %9 = Cast(to:F64)(%7)
        return %8, %9"#,
    )
    .unwrap();
    assert_eq!(c.report().count(OpKind::ReluBackward, Outcome::Cast), 2, "{}", c.report());
    let x = [-2.0f32, -0.5, 0.25, 1.5, 3.0, -7.0];
    let dy = [1.0f32, 2.0, -4.0, 0.5, -0.125, 6.0];
    let want: Vec<f64> = x.iter().zip(&dy).map(|(&x, &d)| if x > 0.0 { f64::from(d) } else { 0.0 }).collect();
    let (tx, tdy) = (Tensor::from_slice(&x, &[6]).unwrap(), Tensor::from_slice(&dy, &[6]).unwrap());
    for out in run(&mut c, &[("x", &tx), ("dy", &tdy)]) {
        assert_eq!(out.to_f64_vec(), want);
    }
}

#[test]
fn unsigned_activations_run_in_a_wider_signed_type() {
    let mut c = compile(
        r#"%0 = Input(name:"x",ty:(dtype:U8,shape:[5]))()
        %1 = Activation(kind:Abs)(%0)
        %2 = Activation(kind:Neg)(%0)
        %3 = Activation(kind:Sign)(%0)
        %4 = Activation(kind:Relu)(%0)
        %5 = Input(name:"w",ty:(dtype:U64,shape:[4]))()
        %6 = Activation(kind:Neg)(%5)
        return %1, %2, %3, %4, %6"#,
    )
    .unwrap();
    assert_eq!(c.report().count(OpKind::Activation, Outcome::Cast), 5, "{}", c.report());
    let x: [u8; 5] = [0, 1, 7, 200, 255];
    let w: [u64; 4] = [0, 1, 1 << 63, u64::MAX];
    let out = run(&mut c, &[("x", &Tensor::from_slice(&x, &[5]).unwrap()), ("w", &Tensor::from_slice(&w, &[4]).unwrap())]);
    let neg: Vec<u8> = x.iter().map(|&v| ((256 - u32::from(v)) % 256) as u8).collect();
    let sign: Vec<u8> = x.iter().map(|&v| u8::from(v != 0)).collect();
    assert_eq!(out[0].to_vec::<u8>().unwrap(), x);
    assert_eq!(out[1].to_vec::<u8>().unwrap(), neg);
    assert_eq!(out[2].to_vec::<u8>().unwrap(), sign);
    assert_eq!(out[3].to_vec::<u8>().unwrap(), x);
    let neg_w: Vec<u64> = w.iter().map(|&v| ((1u128 << 64) - u128::from(v)) as u64).collect();
    assert_eq!(out[4].to_vec::<u64>().unwrap(), neg_w);
}

#[test]
fn an_unsigned_activation_with_no_exact_cast_fails_at_compile_time() {
    let Err(err) = compile(
        r#"%0 = Input(name:"w",ty:(dtype:U64,shape:[4]))()
        %1 = Activation(kind:Abs)(%0)
        return %1"#,
    ) else {
        panic!("Abs on u64 compiled")
    };
    assert!(err.starts_with("backend `cpu` cannot run Activation(u64): claim it in the backend"), "{err}");
}

#[test]
fn u16_and_8_bit_float_products_run_in_wider_types() {
    let mut c = compile(
        r#"%0 = Input(name:"a",ty:(dtype:U16,shape:[2,3]))()
        %1 = Input(name:"b",ty:(dtype:U16,shape:[3,2]))()
        %2 = MatMul()(%0, %1)
        %3 = Input(name:"p",ty:(dtype:F32,shape:[2,3]))()
        %4 = Input(name:"q",ty:(dtype:F32,shape:[3,2]))()
        %5 = Cast(to:F8E4M3FN)(%3)
        %6 = Cast(to:F8E4M3FN)(%4)
        %7 = MatMul()(%5, %6)
        %8 = Cast(to:F64)(%7)
        return %2, %8"#,
    )
    .unwrap();
    assert_eq!(c.report().count(OpKind::MatMul, Outcome::Cast), 2, "{}", c.report());
    let a: [u16; 6] = [60000, 2, 3, 65535, 5, 6];
    let b: [u16; 6] = [7, 40000, 9, 10, 11, 65535];
    // Small integers and halves, whose products and sums e4m3 holds exactly.
    let p = [1.0f32, 2.0, 0.5, -1.0, 3.0, 0.0];
    let q = [2.0f32, -1.0, 1.5, 0.5, 2.0, 1.0];
    let out = run(
        &mut c,
        &[
            ("a", &Tensor::from_slice(&a, &[2, 3]).unwrap()),
            ("b", &Tensor::from_slice(&b, &[3, 2]).unwrap()),
            ("p", &Tensor::from_slice(&p, &[2, 3]).unwrap()),
            ("q", &Tensor::from_slice(&q, &[3, 2]).unwrap()),
        ],
    );
    let mut ab = vec![0u16; 4];
    let mut pq = vec![0.0f64; 4];
    for i in 0..2 {
        for j in 0..2 {
            let s: u64 = (0..3).map(|k| u64::from(a[i * 3 + k]) * u64::from(b[k * 2 + j])).sum();
            ab[i * 2 + j] = (s % 65536) as u16;
            pq[i * 2 + j] = (0..3).map(|k| f64::from(p[i * 3 + k]) * f64::from(q[k * 2 + j])).sum();
        }
    }
    assert_eq!(out[0].to_vec::<u16>().unwrap(), ab);
    assert_eq!(out[1].to_vec::<f64>().unwrap(), pq);
}

#[test]
fn sub_byte_integer_reductions_run_in_bytes_and_wrap() {
    let mut c = compile(
        r#"%0 = Input(name:"x",ty:(dtype:I8,shape:[2,4]))()
        %1 = Cast(to:I4)(%0)
        %2 = Reduce(op:Sum,axes:[1],keep_dim:false)(%1)
        %3 = Reduce(op:Max,axes:[1],keep_dim:false)(%1)
        %4 = Cast(to:I8)(%2)
        %5 = Cast(to:I8)(%3)
        return %4, %5"#,
    )
    .unwrap();
    assert_eq!(c.report().count(OpKind::Reduce, Outcome::Cast), 2, "{}", c.report());
    let x: [i8; 8] = [7, 6, 5, -8, -8, -8, 1, -3];
    let out = run(&mut c, &[("x", &Tensor::from_slice(&x, &[2, 4]).unwrap())]);
    let rows: Vec<&[i8]> = x.chunks(4).collect();
    let sum: Vec<i8> = rows.iter().map(|r| ((r.iter().map(|&v| i32::from(v)).sum::<i32>() + 8).rem_euclid(16) - 8) as i8).collect();
    let max: Vec<i8> = rows.iter().map(|r| *r.iter().max().unwrap()).collect();
    assert_eq!(out[0].to_vec::<i8>().unwrap(), sum);
    assert_eq!(out[1].to_vec::<i8>().unwrap(), max);
}

#[test]
fn u64_pooling_decomposes_and_u16_pooling_runs_in_u32() {
    let mut c = compile(
        r#"%0 = Input(name:"x",ty:(dtype:U64,shape:[1,1,2,4]))()
        %1 = Pool(kind:Max,kernel_size:[2,2],stride:[2,2],padding:[0,0])(%0)
        %2 = Input(name:"y",ty:(dtype:U16,shape:[1,1,2,4]))()
        %3 = Pool(kind:Sum,kernel_size:[2,2],stride:[2,2],padding:[0,0])(%2)
        return %1, %3"#,
    )
    .unwrap();
    assert_eq!(c.report().count(OpKind::Pool, Outcome::CommonIr), 1, "{}", c.report());
    assert_eq!(c.report().count(OpKind::Pool, Outcome::Cast), 1, "{}", c.report());
    let x: [u64; 8] = [1 << 63, 5, 3, u64::MAX, 0, 1, 2, 9];
    let y: [u16; 8] = [60000, 10000, 1, 2, 3, 4, 5, 6];
    let out = run(&mut c, &[("x", &Tensor::from_slice(&x, &[1, 1, 2, 4]).unwrap()), ("y", &Tensor::from_slice(&y, &[1, 1, 2, 4]).unwrap())]);
    let window = |v: &dyn Fn(usize) -> u64, w: usize| [v(2 * w), v(2 * w + 1), v(4 + 2 * w), v(5 + 2 * w)];
    let max: Vec<u64> = (0..2).map(|w| window(&|i| x[i], w).into_iter().max().unwrap()).collect();
    let sum: Vec<u16> = (0..2).map(|w| (window(&|i| u64::from(y[i]), w).into_iter().sum::<u64>() % 65536) as u16).collect();
    assert_eq!(out[0].to_vec::<u64>().unwrap(), max);
    assert_eq!(out[1].to_vec::<u16>().unwrap(), sum);
}

#[test]
fn a_region_with_an_unsigned_activation_is_unfused_and_cast() {
    let mut c = compile(
        r#"%0 = Input(name:"x",ty:(dtype:U8,shape:[4]))()
        %1 = ElementwiseRegion(chain:[Activation(Neg,Input(0)),Binary(Add,Step(0),Input(0))],num_inputs:1,scalar_input_mask:0,input_modulus:(0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%0)
        %2 = Activation(kind:Neg)(%0)
        %3 = Binary(op:Mul)(%2, %0)
        return %1, %3"#,
    )
    .unwrap();
    assert_eq!(c.report().count(OpKind::ElementwiseRegion, Outcome::Rewritten), 1, "{}", c.report());
    assert!(c.graph().nodes().iter().any(|n| n.op.kind() == OpKind::ElementwiseRegion), "the cast chain fuses again:\n{}", c.graph());
    let x: [u8; 4] = [0, 3, 128, 255];
    let out = run(&mut c, &[("x", &Tensor::from_slice(&x, &[4]).unwrap())]);
    let neg = |v: u8| ((256 - u32::from(v)) % 256) as u8;
    let sum: Vec<u8> = x.iter().map(|&v| ((u32::from(neg(v)) + u32::from(v)) % 256) as u8).collect();
    let product: Vec<u8> = x.iter().map(|&v| ((u32::from(neg(v)) * u32::from(v)) % 256) as u8).collect();
    assert_eq!(out[0].to_vec::<u8>().unwrap(), sum);
    assert_eq!(out[1].to_vec::<u8>().unwrap(), product);
}
