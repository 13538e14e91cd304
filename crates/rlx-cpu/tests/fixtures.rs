//! Runs every reference fixture under `fixtures/cpu/` (made by `tools/fixtures/gen.py` with
//! NumPy / SciPy / JAX) on the CPU backend and compares with the stored outputs; then walks
//! every `OpKind`: each must run on the CPU, natively in at least one fixture if the backend
//! claims it, or appear in at least one fixture if it runs through the common IR.

use rlx_cpu::{CpuBackend, SUPPORTED_OPS};
use rlx_ir::{DType, OpKind};
use rlx_opt::Outcome;
use rlx_runtime::{Session, Tensor};
use safetensors::SafeTensors;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/cpu");
    let mut out = Vec::new();
    let mut dirs = vec![root];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "safetensors") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn dtype_of(d: safetensors::Dtype) -> DType {
    use safetensors::Dtype as S;
    match d {
        S::F32 => DType::F32,
        S::F64 => DType::F64,
        S::F16 => DType::F16,
        S::BF16 => DType::BF16,
        S::I8 => DType::I8,
        S::U8 => DType::U8,
        S::I16 => DType::I16,
        S::I32 => DType::I32,
        S::I64 => DType::I64,
        S::U32 => DType::U32,
        S::BOOL => DType::Bool,
        other => panic!("fixture dtype {other:?} is not an rlx dtype"),
    }
}

/// A stored tensor; complex ones are float32 pairs that become C64.
fn load(st: &SafeTensors, name: &str, complex: &BTreeSet<&str>) -> Tensor {
    let v = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    if complex.contains(name) {
        let dims = &v.shape()[..v.shape().len() - 1];
        Tensor::from_bytes(DType::C64, dims, v.data()).unwrap()
    } else {
        Tensor::from_bytes(dtype_of(v.dtype()), v.shape(), v.data()).unwrap()
    }
}

/// `|got − want| ≤ atol + rtol·|want|` per element (NaN must meet NaN); exact for integers.
fn compare(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("got {}, want {}", got.ty(), want.ty()));
    }
    let pairs: Vec<(f64, f64)> = if got.dtype() == DType::C64 {
        let g: Vec<f32> = bytemuck_f32(got.bytes());
        let w: Vec<f32> = bytemuck_f32(want.bytes());
        g.into_iter().map(f64::from).zip(w.into_iter().map(f64::from)).collect()
    } else {
        got.to_f64_vec().into_iter().zip(want.to_f64_vec()).collect()
    };
    let mut worst = (0usize, 0.0f64);
    for (i, (g, w)) in pairs.iter().enumerate() {
        let ok = if w.is_nan() { g.is_nan() } else if w.is_infinite() { g == w } else { (g - w).abs() <= atol + rtol * w.abs() };
        if !ok {
            let excess = (g - w).abs() / (atol + rtol * w.abs()).max(f64::MIN_POSITIVE);
            if excess > worst.1 || excess.is_nan() {
                worst = (i, excess);
            }
        }
    }
    if worst.1 > 0.0 || worst.1.is_nan() {
        let (g, w) = pairs[worst.0];
        return Err(format!("element {} is {g}, want {w} (rtol {rtol}, atol {atol})", worst.0));
    }
    Ok(())
}

fn bytemuck_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The user kernel `fixtures/cpu/custom/` calls: `attrs` holds an f32 scale `s`; inputs
/// `x, v [.., n]` f32 → `s·softplus(x)` and the row dot products `Σ x·v` as `[.., 1]`.
fn register_fixture_kernels() {
    rlx_cpu::register_custom_kernel("fixture.softplus_and_dot", |attrs, ins, outs| {
        let scale = f32::from_le_bytes(attrs.try_into().map_err(|_| format!("attrs hold {} bytes, want 4", attrs.len()))?);
        let (x, v) = (ins[0].get::<f32>(), ins[1].get::<f32>());
        let n = *ins[0].dims.last().ok_or("x needs an axis")?;
        for (y, &a) in outs[0].get::<f32>().iter_mut().zip(x) {
            *y = a.exp().ln_1p() * scale;
        }
        for (d, (xr, vr)) in outs[1].get::<f32>().iter_mut().zip(x.chunks(n).zip(v.chunks(n))) {
            *d = xr.iter().zip(vr).map(|(a, b)| a * b).sum();
        }
        Ok(())
    });
}

#[test]
fn cpu_matches_reference_fixtures_and_covers_every_op_kind() {
    register_fixture_kernels();
    let session = Session::new(Arc::new(CpuBackend::new()));
    let files = fixture_files();
    assert!(!files.is_empty(), "no fixtures found");
    let mut native: BTreeMap<OpKind, usize> = BTreeMap::new();
    let mut written: BTreeSet<OpKind> = BTreeSet::new();
    let mut failures = Vec::new();
    for path in &files {
        let name = path.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")).unwrap_or(path).display().to_string();
        let bytes = std::fs::read(path).unwrap();
        let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        let meta = meta.metadata().clone().expect("fixture metadata");
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let complex: BTreeSet<&str> = meta["complex"].split(',').filter(|s| !s.is_empty()).collect();
        let rtol: f64 = meta["rtol"].parse().unwrap();
        // One atol for every output, or one per output (comma-separated).
        let atols: Vec<f64> = meta["atol"].split(',').map(|a| a.trim().parse().unwrap()).collect();
        let result = (|| -> Result<(), String> {
            let g = rlx_ir::text::parse(&meta["ir"]).map_err(|e| e.to_string())?;
            written.extend(g.nodes().iter().map(|n| n.op.kind()));
            let mut c = session.compile(&g).map_err(|e| e.to_string())?;
            for n in c.graph().nodes() {
                *native.entry(n.op.kind()).or_default() += 1;
            }
            for (p, _) in g.params() {
                c.set_param(p, load(&st, &format!("param.{p}"), &complex)).map_err(|e| e.to_string())?;
            }
            let inputs: Vec<(String, Tensor)> =
                g.inputs().iter().map(|(n, _)| (n.to_string(), load(&st, &format!("input.{n}"), &complex))).collect();
            let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
            let outs = c.run(&named).map_err(|e| e.to_string())?;
            for (i, got) in outs.iter().enumerate() {
                let want = load(&st, &format!("output.{i}"), &complex);
                let atol = if atols.len() == 1 { atols[0] } else { *atols.get(i).ok_or_else(|| format!("no atol for output {i}"))? };
                compare(got, &want, rtol, atol).map_err(|e| format!("output {i}: {e}"))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} fixtures failed:\n{}", failures.len(), files.len(), failures.join("\n"));
    let uncovered: Vec<String> = OpKind::ALL
        .iter()
        .filter_map(|&k| match rlx_opt::legalize::outcome_of(k, SUPPORTED_OPS) {
            Outcome::Native if !native.contains_key(&k) => Some(format!("{k} (claimed, never ran natively)")),
            Outcome::CommonIr | Outcome::Rewritten if !written.contains(&k) => Some(format!("{k} (lowered, in no fixture)")),
            Outcome::Missing => Some(format!("{k} (the CPU cannot run it)")),
            _ => None,
        })
        .collect();
    assert!(uncovered.is_empty(), "op kinds without a CPU run against a reference fixture:\n{}", uncovered.join("\n"));
    eprintln!("{} fixtures passed", files.len());
}
