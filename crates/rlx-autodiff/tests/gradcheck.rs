//! Finite-difference checks of every VJP rule, and the walk over every `OpKind` that keeps
//! the list of kinds without a checked gradient explicit.

#[path = "gradcheck/harness.rs"]
mod harness;
#[path = "gradcheck/attention.rs"]
mod attention;
#[path = "gradcheck/conv.rs"]
mod conv;
#[path = "gradcheck/core.rs"]
mod core;
#[path = "gradcheck/index.rs"]
mod index;
#[path = "gradcheck/linalg.rs"]
mod linalg;
#[path = "gradcheck/signal.rs"]
mod signal;
#[path = "gradcheck/spd.rs"]
mod spd;
#[path = "gradcheck/norm.rs"]
mod norm;
#[path = "gradcheck/quant.rs"]
mod quant;
#[path = "gradcheck/fused.rs"]
mod fused;
#[path = "gradcheck/matmul.rs"]
mod matmul;
#[path = "gradcheck/rnn.rs"]
mod rnn;
#[path = "gradcheck/control.rs"]
mod control;
#[path = "gradcheck/splat.rs"]
mod splat;
#[path = "gradcheck/reduce.rs"]
mod reduce;
#[path = "gradcheck/complex.rs"]
mod complex;
#[path = "gradcheck/vmap.rs"]
mod vmap;
#[path = "gradcheck/directional.rs"]
mod directional;

use rlx_autodiff::rules::{NON_DIFFERENTIABLE, NOT_DIFFERENTIATED};
use rlx_ir::OpKind;
use std::collections::BTreeSet;

/// Every family's cases.
fn all_cases() -> Vec<&'static harness::Case> {
    [
        attention::CASES,
        conv::CASES,
        core::CASES,
        index::CASES,
        linalg::CASES,
        norm::CASES,
        signal::CASES,
        spd::CASES,
        quant::CASES,
        fused::CASES,
        matmul::CASES,
        rnn::CASES,
        control::CASES,
        splat::CASES,
        reduce::CASES,
        complex::CASES,
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[test]
fn gradients_match_central_differences() {
    let failures: Vec<String> = all_cases().into_iter().filter_map(|c| harness::check(c).err()).collect();
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn jvp_and_hvp_match_central_differences_along_a_tangent() {
    for c in all_cases() {
        if let Some((kind, order, why)) = directional::limit(c) {
            println!("checked up to {order:?} (directional::LIMITED, {kind}: {why}): {}", c.name);
        }
    }
    let failures: Vec<String> = all_cases().into_iter().filter_map(|c| directional::check(c).err()).collect();
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn vmap_matches_a_loop_over_examples() {
    let (skipped, cases): (Vec<_>, Vec<_>) = all_cases().into_iter().partition(|c| vmap::skipped(c));
    println!("skipped (a kind in vmap::UNBATCHED): {:?}", skipped.iter().map(|c| c.name).collect::<Vec<_>>());
    let failures: Vec<String> = cases.into_iter().filter_map(|c| vmap::check(c).err()).collect();
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn straight_through_gradients_match_their_stop_gradient_forms() {
    let failures: Vec<String> = quant::STE.iter().filter_map(|c| quant::check_ste(c).err()).collect();
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn every_kind_is_checked_or_listed_with_a_reason() {
    let mut checked = BTreeSet::new();
    let checked_elsewhere = quant::STE.iter().map(|(c, _)| c).chain([&control::CUSTOM]);
    for case in all_cases().into_iter().chain(checked_elsewhere) {
        let g = rlx_ir::text::parse(case.src).unwrap();
        checked.extend(g.nodes().iter().map(|n| n.op.kind()));
    }
    let nondiff: BTreeSet<OpKind> = NON_DIFFERENTIABLE.iter().map(|(k, _)| *k).collect();
    let refused: BTreeSet<OpKind> = NOT_DIFFERENTIATED.iter().map(|(k, _)| *k).collect();
    let unlisted: Vec<&str> =
        OpKind::ALL.iter().filter(|k| !checked.contains(k) && !nondiff.contains(k) && !refused.contains(k)).map(|k| k.name()).collect();
    assert!(unlisted.is_empty(), "kinds with no gradient case and no listed reason:\n{}", unlisted.join("\n"));
    let both: Vec<&str> = nondiff.intersection(&refused).map(|k| k.name()).collect();
    assert!(both.is_empty(), "kinds listed both as non-differentiable and as not differentiated: {both:?}");
}
