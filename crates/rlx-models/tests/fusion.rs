//! The GPT model compiled with and without fusion on the CPU: the fused graph holds the fused
//! kinds and gives the unfused outputs.

use rlx_cpu::CpuBackend;
use rlx_ir::OpKind;
use rlx_models::gpt::{GptConfig, TARGETS, TOKENS};
use rlx_runtime::{CompileOptions, CompiledGraph, Session, Tensor};
use rlx_train::init::Rng;
use rlx_train::Init;
use std::sync::Arc;

fn compile(g: &rlx_ir::Graph, fuse: bool) -> CompiledGraph {
    let options = CompileOptions { optimize: true, fuse, dispatch_report: false };
    Session::new(Arc::new(CpuBackend::new())).with_options(options).compile(g).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn gpt_gives_the_same_outputs_fused_and_unfused() {
    let cfg = GptConfig { vocab: 29, context: 16, d_model: 32, heads: 4, layers: 2, d_ff: 72 };
    let model = cfg.build().unwrap();
    let mut fused = compile(&model.graph, true);
    let mut plain = compile(&model.graph, false);
    let count = |c: &CompiledGraph, k: OpKind| c.graph().nodes().iter().filter(|n| n.op.kind() == k).count();
    assert_eq!(count(&fused, OpKind::FusedMatMulBiasAct), cfg.layers, "{}", fused.graph());
    assert_eq!(count(&fused, OpKind::MatMul) + cfg.layers, count(&plain, OpKind::MatMul));
    assert!(plain.graph().nodes().iter().all(|n| n.op.kind().family() != "fused"));

    // Random weights everywhere (the zero-initialised biases too, so the epilogue matters).
    let mut rng = Rng::new(7);
    for p in &model.params {
        let t = Init::Normal(0.3).tensor(&p.shape, &mut rng);
        fused.set_param(&p.name, t.clone()).unwrap();
        plain.set_param(&p.name, t).unwrap();
    }
    let ids = |rng: &mut Rng| (0..3 * cfg.context).map(|_| (rng.next_u64() % cfg.vocab as u64) as i64).collect::<Vec<_>>();
    let tokens = Tensor::from_vec(ids(&mut rng), &[3, cfg.context]).unwrap();
    let targets = Tensor::from_vec(ids(&mut rng), &[3, cfg.context]).unwrap();
    let inputs = [(TOKENS, &tokens), (TARGETS, &targets)];
    let (a, b) = (fused.run(&inputs).unwrap(), plain.run(&inputs).unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.ty(), y.ty());
        for (i, (p, q)) in x.to_f64_vec().iter().zip(y.to_f64_vec()).enumerate() {
            assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "element {i}: fused {p}, unfused {q}");
        }
    }
}
