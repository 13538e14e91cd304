//! Out-of-range indices reach the caller as errors naming the op and the bad index, through
//! a compiled graph (the kernels' own unit tests cover every index kind).

use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

fn run(src: &str, inputs: &[(&str, &Tensor)]) -> Result<Vec<Tensor>, String> {
    let g = rlx_ir::text::parse(src).unwrap();
    let mut c = Session::new(Arc::new(CpuBackend::new())).compile(&g).map_err(|e| e.to_string())?;
    c.run(inputs).map_err(|e| e.to_string())
}

#[test]
fn gather_and_scatter_reject_indices_outside_the_table() {
    let table = Tensor::from_vec((0..12).map(|v| v as f32).collect(), &[4, 3]).unwrap();
    let gather = r#"%0 = Input(name:"t",ty:(dtype:F32,shape:[4,3]))()
        %1 = Input(name:"i",ty:(dtype:I64,shape:[3]))()
        %2 = Gather(axis:0)(%0, %1)
        return %2"#;
    let ok = Tensor::from_vec(vec![3i64, 0, 2], &[3]).unwrap();
    assert_eq!(run(gather, &[("t", &table), ("i", &ok)]).unwrap()[0].to_vec::<f32>().unwrap()[..3], [9.0, 10.0, 11.0]);
    for bad in [4i64, -1] {
        let idx = Tensor::from_vec(vec![0i64, bad, 1], &[3]).unwrap();
        let err = run(gather, &[("t", &table), ("i", &idx)]).unwrap_err();
        assert!(err.contains("Gather") && err.contains(&bad.to_string()), "{err}");
    }
    let scatter = r#"%0 = Input(name:"u",ty:(dtype:F32,shape:[3,3]))()
        %1 = Input(name:"i",ty:(dtype:I64,shape:[3]))()
        %2 = ScatterAdd(out_dim:4)(%0, %1)
        return %2"#;
    let idx = Tensor::from_vec(vec![0i64, 7, 1], &[3]).unwrap();
    let u = Tensor::from_vec(vec![1.0f32; 9], &[3, 3]).unwrap();
    let err = run(scatter, &[("u", &u), ("i", &idx)]).unwrap_err();
    assert!(err.contains("ScatterAdd") && err.contains('7'), "{err}");
}
