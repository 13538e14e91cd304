//! `rlx demo`: builds a small graph, compiles it for the CPU and runs it at two batch sizes.

use rlx::prelude::*;
use std::error::Error;
use std::time::Instant;

pub fn run() -> Result<(), Box<dyn Error>> {
    println!("rlx demo — build a graph, compile it for the CPU, run it.\n");
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("batch"), Dim::Static(4)])));
    let scale = g.param("scale", TensorType::of(DType::F32, &[4]));
    let shift = g.constant_f32(&[4], &[0.5, -0.5, 0.25, 0.0])?;
    let h = g.binary(BinaryOp::Mul, x, scale)?;
    let h = g.binary(BinaryOp::Add, h, shift)?;
    let y = g.activation(ActivationKind::Gelu, h)?;
    g.set_outputs(vec![y])?;
    println!("1. The graph (rlx text IR; `batch` is a symbolic dim):\n\n{g}");

    let t = Instant::now();
    let mut compiled = Session::new(Device::Cpu)?.compile(&g)?;
    println!("2. Compiled for the CPU in {:.2} ms. {}", t.elapsed().as_secs_f64() * 1e3, compiled.report());

    compiled.set_param("scale", Tensor::from_vec(vec![1.0f32, 2.0, -1.0, 0.5], &[4])?)?;
    println!("3. Set parameter `scale` = [1, 2, -1, 0.5].\n");
    for batch in [2usize, 3] {
        let data: Vec<f32> = (0..batch * 4).map(|i| i as f32 * 0.25 - 1.0).collect();
        let input = Tensor::from_vec(data, &[batch, 4])?;
        let out = compiled.run(&[("x", &input)])?;
        println!("4. Ran with batch = {batch}: gelu(x · scale + shift) =");
        for row in out[0].to_vec::<f32>()?.chunks(4) {
            println!("     {}", row.iter().map(|v| format!("{v:>8.4}")).collect::<Vec<_>>().join(" "));
        }
    }
    println!("\nThe same compiled graph served both batch sizes. Next: `rlx ops` lists every op kind and how the CPU runs it.");
    Ok(())
}
