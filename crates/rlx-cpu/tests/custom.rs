//! `Custom` ops through the CPU kernel registry: an unregistered name fails at compile time
//! naming the op, and a kernel's error reaches the caller with the op's name. A kernel that
//! says which thread runs it shows where the executor runs small and large graphs.

use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

fn graph(name: &str) -> rlx_ir::Graph {
    graph_of(name, "2,3")
}

/// `Custom` op `name` over an f32 input of `dims` (written as the text format writes them).
fn graph_of(name: &str, dims: &str) -> rlx_ir::Graph {
    rlx_ir::text::parse(&format!(
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[{dims}]))()
        %1 = Custom(name:"{name}",num_inputs:1,attrs:[],outputs:[(dtype:F32,shape:[{dims}])])(%0)
        return %1"#
    ))
    .unwrap()
}

#[test]
fn an_unregistered_custom_op_is_a_compile_error_naming_it() {
    let session = Session::new(Arc::new(CpuBackend::new()));
    let err = session.compile(&graph("test.nowhere")).err().expect("compile must fail").to_string();
    assert!(err.contains("test.nowhere") && err.contains("register"), "{err}");
}

#[test]
fn a_registered_kernel_runs_and_its_errors_name_the_op() {
    rlx_cpu::register_custom_kernel("test.double_or_refuse", |_, ins, outs| {
        let x = ins[0].get::<f32>();
        if let Some(i) = x.iter().position(|v| *v < 0.0) {
            return Err(format!("element {i} is negative"));
        }
        outs[0].get::<f32>().iter_mut().zip(x).for_each(|(y, v)| *y = 2.0 * v);
        Ok(())
    });
    let session = Session::new(Arc::new(CpuBackend::new()));
    let mut c = session.compile(&graph("test.double_or_refuse")).unwrap();
    let x = Tensor::from_vec(vec![0.5f32, 1.0, 2.0, 3.0, 4.0, 5.5], &[2, 3]).unwrap();
    let y = c.run(&[("x", &x)]).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![1.0, 2.0, 4.0, 6.0, 8.0, 11.0]);
    let bad = Tensor::from_vec(vec![0.5f32, 1.0, -2.0, 3.0, 4.0, 5.5], &[2, 3]).unwrap();
    let err = c.run(&[("x", &bad)]).unwrap_err().to_string();
    assert!(err.contains("Custom") && err.contains("test.double_or_refuse") && err.contains("element 2"), "{err}");
}

#[test]
fn a_run_too_small_to_split_stays_on_the_callers_thread() {
    rlx_cpu::register_custom_kernel("test.on_pool", |_, _, outs| {
        let on_pool = rayon::current_thread_index().is_some();
        outs[0].get::<f32>().fill(if on_pool { 1.0 } else { 0.0 });
        Ok(())
    });
    let session = Session::new(Arc::new(CpuBackend::new()));
    // Input and output elements summed: 12 (below PAR_MIN), then 2^16 (above).
    for (n, pooled) in [(6, 0.0), (1 << 15, 1.0)] {
        let mut c = session.compile(&graph_of("test.on_pool", &n.to_string())).unwrap();
        let y = c.run(&[("x", &Tensor::from_vec(vec![0.0f32; n], &[n]).unwrap())]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap()[0], pooled, "{n} elements");
    }
}
