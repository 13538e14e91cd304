//! `rlx onnx-run`: imports an ONNX model, compiles it for the CPU and runs it on `.npy` inputs
//! (the `cmd:` protocol of the ONNX conformance runner), or times it on random inputs.
//!
//! Protocol: `--inputs DIR` holds `manifest.json` and `input_<J>.npy` (a sequence as the
//! folder `input_<J>/` of `<k>.npy`, an empty optional as `input_<J>.none`); outputs go to
//! `--out DIR` the same way as `output_<J>`. The process exits with 0 when it ran, 77 when the model
//! uses something rlx does not support, 1 on any other error.

use clap::Args;
use rlx_io::onnx::{self, ImportOptions, Layout, OnnxGraph, TensorData};
use rlx_io::IoError;
use rlx::cpu::Products;
use rlx::{CompiledGraph, DType, Device, Session, Tensor};
use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Exit status for "not supported" (the conformance runner's convention).
pub const UNSUPPORTED_EXIT: i32 = 77;

/// Arguments of `rlx onnx-run`.
#[derive(Args, Debug)]
pub struct OnnxRunArgs {
    /// The model file (.onnx).
    pub model: PathBuf,
    /// Folder with manifest.json and input_<J>.npy.
    #[arg(long, required_unless_present = "bench")]
    pub inputs: Option<PathBuf>,
    /// Folder for output_<J>.npy.
    #[arg(long, required_unless_present = "bench")]
    pub out: Option<PathBuf>,
    /// Time the model on random inputs of the declared shapes instead.
    #[arg(long)]
    pub bench: bool,
    /// Timed runs for --bench (the median is reported).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Sizes of symbolic input dims for --bench, as NAME=SIZE (others default to 1).
    #[arg(long = "dim", value_parser = parse_dim)]
    pub dims: Vec<(String, usize)>,
    /// With --bench: time every node of the compiled graph and print where the runs went.
    #[arg(long, requires = "bench")]
    pub profile: bool,
    /// Where to run: cpu, cuda[:N], wgpu[:N] (what the device does not run goes to the CPU).
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// What the products of the model's weights compute in: f32, int8 (each weight rounded to
    /// 8 bits per output column once, each activation row as it runs) or bf16 (both operands
    /// rounded to bf16, summed in f32); int8 and bf16 on the CPU only.
    #[arg(long, value_enum, default_value = "f32")]
    pub precision: Precision,
}

/// `rlx onnx-run --precision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Precision {
    F32,
    Int8,
    Bf16,
}

impl Precision {
    fn products(self) -> Products {
        match self {
            Precision::F32 => Products::F32,
            Precision::Int8 => Products::Int8,
            Precision::Bf16 => Products::Bf16,
        }
    }
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, size) = s.split_once('=').ok_or("expected NAME=SIZE")?;
    Ok((name.to_string(), size.parse().map_err(|_| format!("`{size}` is not a size"))?))
}

/// A failure, with whether it means "unsupported".
#[derive(Debug)]
struct Failure {
    unsupported: bool,
    message: String,
}

impl<E: Error> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure { unsupported: false, message: e.to_string() }
    }
}

fn unsupported(message: impl Into<String>) -> Failure {
    Failure { unsupported: true, message: message.into() }
}

fn io_failure(e: IoError) -> Failure {
    let unsupported = matches!(e, IoError::OnnxUnsupported { .. })
        || matches!(&e, IoError::OnnxModel { reason, .. } if reason.contains("not supported") || reason.contains("unsupported"));
    Failure { unsupported, message: e.to_string() }
}

/// Runs the subcommand; returns the process exit status.
pub fn main(args: &OnnxRunArgs) -> i32 {
    let result = if args.bench { bench(args) } else { run_protocol(args) };
    match result {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("error: {}", f.message);
            if f.unsupported {
                UNSUPPORTED_EXIT
            } else {
                1
            }
        }
    }
}

fn run_protocol(args: &OnnxRunArgs) -> Result<(), Failure> {
    let (Some(in_dir), Some(out_dir)) = (&args.inputs, &args.out) else {
        return Err(Failure { unsupported: false, message: "--inputs and --out are required".into() });
    };
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(in_dir.join("manifest.json"))?)?;
    let mut inputs = Inputs::default();
    for e in manifest["inputs"].as_array().into_iter().flatten() {
        inputs.read(in_dir, e)?;
    }
    let imported = import_for(&args.model, &inputs)?;
    let outputs = execute(&imported, &inputs.tensors, args.device, args.precision)?;
    let mut outputs = outputs.iter();
    let mut next = || outputs.next().ok_or_else(|| Failure { unsupported: false, message: "the graph returned fewer outputs than it declares".into() });
    for (j, (_, layout)) in imported.outputs.iter().enumerate() {
        match layout {
            Layout::Tensor => npy::write(&out_dir.join(format!("output_{j}.npy")), next()?)?,
            Layout::Sequence(len) => {
                let dir = out_dir.join(format!("output_{j}"));
                std::fs::create_dir_all(&dir)?;
                for k in 0..*len {
                    npy::write(&dir.join(format!("{k}.npy")), next()?)?;
                }
            }
            Layout::Absent => std::fs::write(out_dir.join(format!("output_{j}.none")), b"")?,
        }
    }
    Ok(())
}

/// The runner's inputs: tensors by name (element `k` of a sequence `s` as `s[k]`), the element
/// dims of each sequence, and the optionals passed empty.
#[derive(Default)]
struct Inputs {
    tensors: Vec<(String, TensorData)>,
    sequences: HashMap<String, Vec<Vec<usize>>>,
    absent: HashSet<String>,
}

impl Inputs {
    /// Reads the manifest entry `e`: a tensor file, a sequence folder or an empty optional.
    fn read(&mut self, dir: &Path, e: &serde_json::Value) -> Result<(), Failure> {
        let name = e["name"].as_str().unwrap_or_default().to_string();
        let file = e["file"].as_str().unwrap_or_default();
        let kind = match e["kind"].as_str() {
            Some("optional") if file.ends_with(".none") => {
                self.absent.insert(name);
                return Ok(());
            }
            Some("optional") => e["elem"]["kind"].as_str(),
            other => other,
        };
        let dtype = onnx_dtype(e["onnx_dtype"].as_str().unwrap_or_default())?;
        match kind {
            Some("tensor") if file.ends_with(".npy") => {
                let data = npy::read(&dir.join(file), dtype)?;
                self.tensors.push((name, data));
            }
            Some("sequence") => {
                let len = e["length"].as_u64().ok_or_else(|| unsupported(format!("sequence input `{name}` has no length")))?;
                let mut dims = Vec::new();
                for k in 0..len {
                    let data = npy::read(&dir.join(file).join(format!("{k}.npy")), dtype)?;
                    dims.push(data.dims.clone());
                    self.tensors.push((format!("{name}[{k}]"), data));
                }
                self.sequences.insert(name, dims);
            }
            _ => return Err(unsupported(format!("input `{name}` is a {} stored as {file}", e["kind"]))),
        }
        Ok(())
    }
}

/// Imports with the inputs' shapes; when the model needs an input's value at import (a shape,
/// axes or a pad value fed as an input), imports again with the integer and the small (at most
/// 64 elements) inputs as constants.
fn import_for(model: &Path, inputs: &Inputs) -> Result<OnnxGraph, Failure> {
    let shapes: HashMap<String, Vec<usize>> = inputs.tensors.iter().map(|(n, t)| (n.clone(), t.dims.clone())).collect();
    let mut options = ImportOptions {
        input_shapes: shapes,
        sequence_inputs: inputs.sequences.clone(),
        absent_inputs: inputs.absent.clone(),
        evaluator: Some(&rlx::cpu::CpuConstEval),
        ..Default::default()
    };
    match onnx::import(model, &options) {
        Err(IoError::OnnxUnsupported { reason, .. }) if reason.contains("known at import") => {
            options.input_values = inputs
                .tensors
                .iter()
                .filter(|(_, t)| t.dtype.is_int() || t.dtype == DType::Bool || t.numel() <= 64)
                .map(|(n, t)| (n.clone(), t.clone()))
                .collect();
            onnx::import(model, &options).map_err(io_failure)
        }
        other => other.map_err(io_failure),
    }
}

/// Compiles the imported graph for `device` (its weights' products in `precision`) with its
/// parameters set, and the given inputs that the graph takes, as tensors.
fn prepare(imported: &OnnxGraph, inputs: &[(String, TensorData)], device: Device, precision: Precision) -> Result<(CompiledGraph, Vec<(String, Tensor)>), Failure> {
    let mut compiled = Session::with_products(device, precision.products())?.compile(&imported.graph).map_err(|e| {
        let message = e.to_string();
        Failure { unsupported: message.contains("no kernel") || message.contains("missing"), message }
    })?;
    for (name, value) in &imported.params {
        compiled.set_param(name, value.clone())?;
    }
    let tensors = inputs
        .iter()
        .filter(|(n, _)| imported.inputs.iter().any(|(i, _)| i == n))
        .map(|(n, t)| Ok((n.clone(), Tensor::from_bytes(t.dtype, &t.dims, &t.bytes)?)))
        .collect::<Result<_, Failure>>()?;
    Ok((compiled, tensors))
}

/// The graph's inputs by name, as `CompiledGraph::run` takes them.
fn named(tensors: &[(String, Tensor)]) -> Vec<(&str, &Tensor)> {
    tensors.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

/// Compiles the imported graph for `device` and runs it once.
fn execute(imported: &OnnxGraph, inputs: &[(String, TensorData)], device: Device, precision: Precision) -> Result<Vec<Tensor>, Failure> {
    let (mut compiled, tensors) = prepare(imported, inputs, device, precision)?;
    Ok(compiled.run(&named(&tensors))?)
}

/// The rlx dtype of a manifest's `onnx_dtype`.
fn onnx_dtype(name: &str) -> Result<DType, Failure> {
    Ok(match name {
        "FLOAT" => DType::F32,
        "DOUBLE" => DType::F64,
        "FLOAT16" => DType::F16,
        "BFLOAT16" => DType::BF16,
        "INT8" => DType::I8,
        "UINT8" => DType::U8,
        "INT16" => DType::I16,
        "INT32" => DType::I32,
        "INT64" => DType::I64,
        "UINT32" => DType::U32,
        "UINT16" => DType::U16,
        "UINT64" => DType::U64,
        "FLOAT8E4M3FN" => DType::F8E4M3FN,
        "FLOAT8E4M3FNUZ" => DType::F8E4M3FNUZ,
        "FLOAT8E5M2" => DType::F8E5M2,
        "FLOAT8E5M2FNUZ" => DType::F8E5M2FNUZ,
        "FLOAT8E8M0" => DType::F8E8M0,
        "FLOAT4E2M1" => DType::F4E2M1,
        "INT4" => DType::I4,
        "UINT4" => DType::U4,
        "INT2" => DType::I2,
        "UINT2" => DType::U2,
        "BOOL" => DType::Bool,
        "COMPLEX64" => DType::C64,
        other => return Err(unsupported(format!("element type {other}"))),
    })
}

/// `--bench`: random inputs of the declared shapes, median latency over `runs`.
fn bench(args: &OnnxRunArgs) -> Result<(), Failure> {
    let declared = onnx::import(&args.model, &ImportOptions::default()).map_err(io_failure)?;
    let sizes: HashMap<&str, usize> = args.dims.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut inputs = Vec::new();
    for (name, ty) in &declared.inputs {
        let dims: Vec<usize> = ty.shape.dims().iter().map(|d| d.as_static().unwrap_or_else(|| sizes.get(d.to_string().as_str()).copied().unwrap_or(1))).collect();
        let count: usize = dims.iter().product();
        let values: Vec<f64> = (0..count)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let u = (state >> 11) as f64 / (1u64 << 53) as f64;
                if ty.dtype.is_float() { 2.0 * u - 1.0 } else { (u * 4.0).floor() }
            })
            .collect();
        let bytes = onnx::tensor::from_f64s(ty.dtype, &values);
        inputs.push((name.clone(), TensorData { dtype: ty.dtype, dims, bytes }));
    }
    let inputs = Inputs { tensors: inputs, ..Default::default() };
    let imported = import_for(&args.model, &inputs)?;
    let start = Instant::now();
    let (mut compiled, tensors) = prepare(&imported, &inputs.tensors, args.device, args.precision)?;
    let named = named(&tensors);
    compiled.run(&named)?;
    let first = start.elapsed();
    compiled.set_profiling(args.profile);
    let mut times = Vec::with_capacity(args.runs);
    for _ in 0..args.runs.max(1) {
        let t = Instant::now();
        compiled.run(&named)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{}: median {:.3} ms, min {:.3} ms over {} runs (first run incl. compile {:.1} ms)",
        args.model.display(),
        times[times.len() / 2],
        times[0],
        times.len(),
        first.as_secs_f64() * 1e3
    );
    if args.profile {
        print!("{}", compiled.profile());
    }
    Ok(())
}

/// NumPy `.npy` files (format 1.0–3.0, little-endian, C order), for the runner's protocol.
mod npy {
    use super::{unsupported, Failure};
    use rlx_io::onnx::{tensor, TensorData};
    use rlx::{DType, Tensor};
    use std::path::Path;

    /// The dtype a `.npy` file holds `dtype` in: the runner's containers for the types NumPy
    /// lacks (f32 for BF16 and the minifloats, whose values it holds exactly; int8/uint8 for
    /// the sub-byte integers).
    fn container(dtype: DType) -> DType {
        match dtype {
            DType::BF16 => DType::F32,
            d if d.is_minifloat() => DType::F32,
            DType::I4 | DType::I2 => DType::I8,
            DType::U4 | DType::U2 => DType::U8,
            d => d,
        }
    }

    fn descr(dtype: DType) -> Option<&'static str> {
        Some(match dtype {
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::F16 => "<f2",
            DType::I8 => "|i1",
            DType::U8 => "|u1",
            DType::I16 => "<i2",
            DType::U16 => "<u2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::U32 => "<u4",
            DType::U64 => "<u8",
            DType::Bool => "|b1",
            DType::C64 => "<c8",
            _ => return None,
        })
    }

    /// Reads `path` as `dtype` (held in its [`container`] and converted).
    pub(super) fn read(path: &Path, dtype: DType) -> Result<TensorData, Failure> {
        let bytes = std::fs::read(path)?;
        let bad = |m: &str| Failure { unsupported: false, message: format!("{}: {m}", path.display()) };
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err(bad("not a .npy file"));
        }
        let (header_len, start) = if bytes[6] == 1 {
            (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
        } else {
            let b = bytes.get(8..12).ok_or_else(|| bad("truncated header"))?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        };
        let header = std::str::from_utf8(bytes.get(start..start + header_len).ok_or_else(|| bad("truncated header"))?)
            .map_err(|_| bad("header is not text"))?;
        let field = |key: &str| header.split(&format!("'{key}':")).nth(1).map(str::trim);
        let stored = field("descr").and_then(|d| d.split('\'').nth(1)).ok_or_else(|| bad("no descr"))?;
        if field("fortran_order").is_some_and(|f| f.starts_with("True")) {
            return Err(bad("Fortran order"));
        }
        let shape_text = field("shape").and_then(|s| s.strip_prefix('(')).and_then(|s| s.split(')').next()).ok_or_else(|| bad("no shape"))?;
        let dims = shape_text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<usize>().map_err(|_| bad("bad shape")))
            .collect::<Result<Vec<_>, _>>()?;
        let payload = &bytes[start + header_len..];
        let container = container(dtype);
        let expected = descr(container).ok_or_else(|| unsupported(format!("{}: no .npy type for {dtype}", path.display())))?;
        if stored != expected && !(container == DType::Bool && stored == "|u1") {
            return Err(unsupported(format!("{}: stored as {stored}, expected {expected}", path.display())));
        }
        let numel: usize = dims.iter().product();
        let payload = payload.get(..numel * container.size()).ok_or_else(|| bad("payload shorter than the shape"))?;
        let bytes = if container == dtype {
            payload.to_vec()
        } else {
            tensor::from_f64s(dtype, &tensor::to_f64s(container, payload))
        };
        Ok(TensorData { dtype, dims, bytes })
    }

    /// Writes `t` (in its dtype's [`container`]).
    pub(super) fn write(path: &Path, t: &Tensor) -> Result<(), Failure> {
        let container = container(t.dtype());
        let descr = descr(container).ok_or_else(|| unsupported(format!("{}: no .npy type for {}", path.display(), t.dtype())))?;
        let dims = t.shape();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
        };
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        if container == t.dtype() {
            out.extend(t.bytes());
        } else {
            out.extend(tensor::from_f64s(container, &tensor::to_f64s(t.dtype(), t.bytes())));
        }
        std::fs::write(path, out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::npy;
    use rlx::{DType, Tensor};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Files as `np.save` writes them (numpy 2.4): int64 [[1, -2, 3], [4, 5, -6]] and bool [T, F, T].
    #[test]
    fn reads_numpy_files() {
        let dir = std::env::temp_dir().join(format!("rlx-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ints = dir.join("i.npy");
        std::fs::write(&ints, hex("934e554d5059010076007b276465736372273a20273c6938272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c2033292c207d202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a0100000000000000feffffffffffffff030000000000000004000000000000000500000000000000faffffffffffffff")).unwrap();
        let t = npy::read(&ints, DType::I64).unwrap();
        assert_eq!(t.dims, vec![2, 3]);
        let values: Vec<i64> = t.bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(values, vec![1, -2, 3, 4, 5, -6]);
        let bools = dir.join("b.npy");
        std::fs::write(&bools, hex("934e554d5059010076007b276465736372273a20277c6231272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028332c292c207d2020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a010001")).unwrap();
        let t = npy::read(&bools, DType::Bool).unwrap();
        assert_eq!((t.dims.clone(), t.bytes.clone()), (vec![3], vec![1, 0, 1]));
        assert!(npy::read(&ints, DType::F32).is_err(), "a dtype other than the manifest's is refused");
    }

    #[test]
    fn writes_what_it_reads() {
        let dir = std::env::temp_dir().join(format!("rlx-npy-w-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("o.npy");
        let t = Tensor::from_vec(vec![0.5f32, -1.25, 3.0, 7.5, 0.0, -2.0], &[3, 2]).unwrap();
        npy::write(&path, &t).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!((bytes.len() - 6 * 4) % 64, 0, "header padded to 64 bytes");
        let back = npy::read(&path, DType::F32).unwrap();
        assert_eq!((back.dims, back.bytes), (vec![3, 2], t.bytes().to_vec()));
    }
}
