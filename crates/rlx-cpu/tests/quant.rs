//! Bad inputs to the quant kernels: each compiles (or is rejected while building) and fails
//! with an error that names the op and the offending value — never a panic.

mod common;

use common::session;
use rlx_ir::text::parse;
use rlx_runtime::Tensor;

/// Compiles `src` and runs it on `inputs`; the error text, which the test expects.
fn run_err(src: &str, inputs: &[(&str, Tensor)]) -> String {
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mut c = session().compile(&g).unwrap_or_else(|e| panic!("compile: {e}"));
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    match c.run(&named) {
        Ok(_) => panic!("ran without an error:\n{src}"),
        Err(e) => e.to_string(),
    }
}

fn x(rows: usize, k: usize) -> Tensor {
    Tensor::from_vec(common::randn(rows * k, 5), &[rows, k]).unwrap()
}

fn bytes(n: usize) -> Tensor {
    Tensor::from_vec((0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>(), &[n]).unwrap()
}

#[test]
fn k_that_is_not_a_whole_number_of_blocks() {
    // K is symbolic when compiled, 40 when run: not a multiple of Q4_0's 32.
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,"K"]))()
        %1 = Input(name:"w",ty:(dtype:U8,shape:["L"]))()
        %2 = DequantMatMul(scheme:Gguf(Q4_0),out_dim:Some(3))(%0, %1)
        return %2"#;
    let e = run_err(src, &[("x", x(2, 40)), ("w", bytes(3 * 18))]);
    assert!(e.contains("DequantMatMul") && e.contains("k = 40 is not a multiple of the Q4_0 block size 32"), "{e}");
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,"K"]))()
        %1 = Param(name:"s",ty:(dtype:F32,shape:[5,2]))()
        %2 = Input(name:"w",ty:(dtype:U32,shape:[5,"W"]))()
        %3 = DequantMatMul(scheme:MlxAffine(bits:4,group_size:32),out_dim:None)(%0, %2, %1, %1)
        return %3"#;
    let g = parse(src).unwrap();
    let mut c = session().compile(&g).unwrap();
    c.set_param("s", Tensor::from_vec(vec![0.5f32; 10], &[5, 2]).unwrap()).unwrap();
    let w = Tensor::from_vec(vec![7u32; 5 * 6], &[5, 6]).unwrap();
    let e = c.run(&[("x", &x(2, 48)), ("w", &w)]).unwrap_err().to_string();
    assert!(e.contains("DequantMatMul") && e.contains("k = 48 is not a multiple of 32"), "{e}");
}

#[test]
fn packed_bytes_that_do_not_match_the_declared_shape() {
    // Three rows of K = 64 in Q8_0 take 3·2·34 bytes; one byte short.
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,64]))()
        %1 = Input(name:"w",ty:(dtype:U8,shape:["L"]))()
        %2 = DequantMatMul(scheme:Gguf(Q8_0),out_dim:Some(3))(%0, %1)
        return %2"#;
    let e = run_err(src, &[("x", x(2, 64)), ("w", bytes(3 * 68 - 1))]);
    assert!(e.contains("DequantMatMul") && e.contains("holds 203 bytes") && e.contains("need 204"), "{e}");
    // An expert stack that is not a whole number of [N, K] slabs.
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,32]))()
        %1 = Input(name:"w",ty:(dtype:U8,shape:["L"]))()
        %2 = Input(name:"idx",ty:(dtype:I32,shape:[2]))()
        %3 = DequantGroupedMatMul(scheme:Gguf(Q4_0),out_dim:Some(4))(%0, %1, %2)
        return %3"#;
    let idx = Tensor::from_vec(vec![0i32, 0], &[2]).unwrap();
    let e = run_err(src, &[("x", x(2, 32)), ("w", bytes(4 * 18 + 5)), ("idx", idx)]);
    assert!(e.contains("DequantGroupedMatMul") && e.contains("u8[77] is not a whole number of [4, 32] Q4_0 slabs"), "{e}");
    // MLX experts: the code bytes of 2 experts of [3, 32] at 4 bits are 96, not 100.
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,32]))()
        %1 = Input(name:"w",ty:(dtype:U8,shape:["L"]))()
        %2 = Param(name:"s",ty:(dtype:F32,shape:[2,3,1]))()
        %3 = Input(name:"idx",ty:(dtype:I64,shape:[1]))()
        %4 = DequantGroupedMatMulMlx(scheme:MlxAffine(bits:4,group_size:32))(%0, %1, %2, %2, %3)
        return %4"#;
    let g = parse(src).unwrap();
    let mut c = session().compile(&g).unwrap();
    c.set_param("s", Tensor::from_vec(vec![0.1f32; 6], &[2, 3, 1]).unwrap()).unwrap();
    let idx = Tensor::from_vec(vec![1i64], &[1]).unwrap();
    let e = c.run(&[("x", &x(1, 32)), ("w", &bytes(100)), ("idx", &idx)]).unwrap_err().to_string();
    assert!(e.contains("DequantGroupedMatMulMlx") && e.contains("100 bytes"), "{e}");
    // A declared MoE stack whose K is not a whole number of blocks is rejected while building.
    let src = r#"%0 = Param(name:"w",ty:(dtype:U8,shape:[180]))()
        %1 = DequantMoEWeights(scheme:Gguf(Q4_0),experts:2,k:100,n:5)(%0)
        return %1"#;
    let e = parse(src).unwrap_err().to_string();
    assert!(e.contains("DequantMoEWeights") && e.contains("k = 100 is not a multiple"), "{e}");
}

#[test]
fn expert_ids_outside_the_stack() {
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,32]))()
        %1 = Input(name:"w",ty:(dtype:U8,shape:[2,4,18]))()
        %2 = Input(name:"idx",ty:(dtype:I64,shape:[3]))()
        %3 = DequantGroupedMatMul(scheme:Gguf(Q4_0),out_dim:None)(%0, %1, %2)
        return %3"#;
    let w = Tensor::from_vec(vec![0u8; 2 * 4 * 18], &[2, 4, 18]).unwrap();
    for (bad, shown) in [(2i64, "expert_idx[1] = 2 is outside the 2 experts"), (-1, "expert_idx[1] = -1 is outside")] {
        let idx = Tensor::from_vec(vec![0i64, bad, 1], &[3]).unwrap();
        let e = run_err(src, &[("x", x(3, 32)), ("w", w.clone()), ("idx", idx)]);
        assert!(e.contains("DequantGroupedMatMul") && e.contains(shown), "{e}");
    }
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,32]))()
        %1 = Input(name:"w",ty:(dtype:U32,shape:[2,3,4]))()
        %2 = Input(name:"s",ty:(dtype:F32,shape:[2,3,1]))()
        %3 = Input(name:"idx",ty:(dtype:I32,shape:[2]))()
        %4 = DequantGroupedMatMulMlx(scheme:MlxAffine(bits:4,group_size:32))(%0, %1, %2, %2, %3)
        return %4"#;
    let idx = Tensor::from_vec(vec![1i32, 7], &[2]).unwrap();
    let w = Tensor::from_vec(vec![0u32; 24], &[2, 3, 4]).unwrap();
    let s = Tensor::from_vec(vec![1f32; 6], &[2, 3, 1]).unwrap();
    let e = run_err(src, &[("x", x(2, 32)), ("w", w), ("s", s), ("idx", idx)]);
    assert!(e.contains("DequantGroupedMatMulMlx") && e.contains("expert_idx[1] = 7 is outside the 2 experts"), "{e}");
}

#[test]
fn gguf_types_without_a_decoder_are_an_unsupported_scheme() {
    for (src, op) in [
        (
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,256]))()
            %1 = Input(name:"w",ty:(dtype:U8,shape:[2,66]))()
            %2 = DequantMatMul(scheme:Gguf(IQ2_XXS),out_dim:None)(%0, %1)
            return %2"#,
            "DequantMatMul",
        ),
        (
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,256]))()
            %1 = Input(name:"w",ty:(dtype:U8,shape:[1,2,66]))()
            %2 = Input(name:"idx",ty:(dtype:I32,shape:[1]))()
            %3 = DequantGroupedMatMul(scheme:Gguf(TQ2_0),out_dim:None)(%0, %1, %2)
            return %3"#,
            "DequantGroupedMatMul",
        ),
    ] {
        let w_dims: Vec<usize> = if op == "DequantMatMul" { vec![2, 66] } else { vec![1, 2, 66] };
        let mut inputs = vec![("x", x(1, 256)), ("w", Tensor::from_vec(vec![0u8; 132], &w_dims).unwrap())];
        if op != "DequantMatMul" {
            inputs.push(("idx", Tensor::from_vec(vec![0i32], &[1]).unwrap()));
        }
        let e = run_err(src, &inputs);
        assert!(e.starts_with(op) && e.contains("unsupported scheme Gguf("), "{e}");
    }
    let src = r#"%0 = Input(name:"w",ty:(dtype:U8,shape:[2,1,136]))()
        %1 = DequantMoEWeights(scheme:Gguf(IQ4_XS),experts:2,k:256,n:1)(%0)
        return %1"#;
    let e = run_err(src, &[("w", Tensor::from_vec(vec![0u8; 272], &[2, 1, 136]).unwrap())]);
    assert!(e.starts_with("DequantMoEWeights") && e.contains("unsupported scheme Gguf(IQ4_XS)"), "{e}");
}
