//! Peak resident memory (`VmHWM`) of loading SmolLM2-135M-Instruct from its GGUF and generating
//! a few tokens, against issue 19's bound: 1.1 × (file size + planned arena + KV cache). The KV
//! cache counts with the arena: it is graph state the caller sized (capacity positions), planned
//! like the arena, not a copy of anything in the file.
//!
//! Not met yet, so ignored (run it with `--ignored`): it prints the whole peak and the part of
//! it that is the executable's and shared libraries' pages (`RssFile` once the model file is
//! unmapped), and asserts the bound on the whole peak. Measured (docs/BENCHMARKS.md): the peak
//! is ~1.23× the planned bytes; the executable's pages alone (~11 MB) take more than the 10%,
//! and the rest is ~1.12× (plans' hoisted constants, graphs, tokenizer, thread stacks). Linux
//! only (`/proc/self/status`); skipped when the model is absent. The test binary holds only this
//! test, so the peak is this load's.

use rlx_cpu::CpuBackend;
use rlx_models::llama::{GgufModel, Generator, Llama, Sampling};
use rlx_runtime::Session;
use std::sync::Arc;

mod common;

use common::smollm2 as model;

/// A `/proc/self/status` figure in bytes (`VmHWM`, `VmRSS`, `RssAnon`, `RssFile`).
fn status(key: &str) -> usize {
    let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = text.lines().find(|l| l.starts_with(&format!("{key}:"))).unwrap_or_else(|| panic!("no {key}"));
    let kib: usize = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{line}"));
    kib * 1024
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

fn report(stage: &str) {
    eprintln!(
        "{stage:>10}: rss {:6.1} MB (anon {:6.1}, file {:5.1}), peak {:6.1} MB",
        mb(status("VmRSS")),
        mb(status("RssAnon")),
        mb(status("RssFile")),
        mb(status("VmHWM"))
    );
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "issue 19: the peak is ~1.23× file + arena + KV cache, over the 1.1× bound"]
fn peak_rss_is_the_file_and_planned_memory_plus_a_tenth() {
    let Some(path) = model() else { return };
    let file = std::fs::metadata(&path).unwrap().len() as usize;
    report("start");
    let m = GgufModel::open(&path, |_, _| {}).unwrap();
    report("opened");
    let prompt = m.tokenizer.encode("The capital of France is", true);
    let n = 16;
    let model = Llama::build(&m.config, &m.weights, prompt.len() + n).unwrap();
    drop(m.weights);
    report("built");
    let session = Session::new(Arc::new(CpuBackend::new()));
    let mut gen = Generator::new(model, &session).unwrap();
    report("compiled");
    let (tokens, _) = gen.generate(&prompt, n, Sampling::GREEDY, m.tokenizer.eos.as_slice(), |_| {}).unwrap();
    report("generated");
    assert!(!tokens.is_empty());
    let arena = gen.arena_bytes(prompt.len()).unwrap().max(gen.arena_bytes(1).unwrap());
    let cache = gen.model.cache_bytes();
    let (peak, code) = (status("VmHWM"), status("RssFile"));
    let planned = file + arena + cache;
    let bound = planned as f64 * 1.1;
    eprintln!(
        "file {:.2} MB, arena {:.2} MB, KV cache {:.2} MB ({} positions): bound {:.1} MB; peak {:.1} MB ({:.3}×), \
         of which executable and libraries {:.1} MB; the rest {:.1} MB ({:.3}×)",
        mb(file),
        mb(arena),
        mb(cache),
        gen.model.capacity,
        bound / 1e6,
        mb(peak),
        peak as f64 / planned as f64,
        mb(code),
        mb(peak - code),
        (peak - code) as f64 / planned as f64
    );
    assert!(peak as f64 <= bound, "peak RSS {:.1} MB over the bound {:.1} MB", mb(peak), bound / 1e6);
}
