//! The entry points the fuzz targets drive, one per reader: each takes arbitrary bytes, may
//! return an error anywhere, and must never panic, hang or allocate without bound. The same
//! functions replay the saved corpora in `crates/rlx-models/tests/fuzz_replay.rs`, so CI checks
//! every saved input on stable without libFuzzer.

use rlx_cpu::{CpuBackend, CpuConstEval};
use rlx_io::onnx::{import, ImportOptions, OnnxGraph};
use rlx_io::{GgufFile, SafetensorsFile};
use rlx_ir::{DType, Dim, OpKind, Shape};
use rlx_models::bpe::BpeTokenizer;
use rlx_models::llama::LlamaConfig;
use rlx_models::wordpiece::WordPiece;
use rlx_runtime::{Session, Tensor};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Texts every loaded tokenizer encodes and decodes: ASCII, digits, accents, CJK, emoji,
/// control and special-token-like pieces.
const TEXTS: [&str; 4] = [
    "Hello world, it's 2024: 12345 tokens!",
    "  leading spaces\tand\ttabs\nnew\r\nlines  ",
    "Ümläute naïve café 日本語 한국어 🦀🤗 \u{0}\u{7f}\u{200b}",
    "<s></s><|im_start|>user<|im_end|>[CLS][SEP][UNK]<unk>",
];

/// Symbolic dims are bound to this size when running an imported graph.
const SYM_SIZE: usize = 2;
/// An imported graph runs only if no value it computes exceeds this many elements.
const MAX_VALUE_ELEMENTS: usize = 1 << 16;

/// Calls `f` with a temporary file holding `data` (the readers map files), then removes it.
fn with_file<R>(ext: &str, data: &[u8], f: impl FnOnce(&Path) -> R) -> R {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path: PathBuf = std::env::temp_dir().join(format!("rlx-fuzz-{}-{n}.{ext}", std::process::id()));
    std::fs::write(&path, data).expect("the temporary directory is writable");
    let r = f(&path);
    let _ = std::fs::remove_file(&path);
    r
}

/// GGUF: parse, read every metadata value and every tensor, dequantise each.
pub fn gguf(data: &[u8]) {
    with_file("gguf", data, |path| {
        let Ok(file) = GgufFile::open(path) else { return };
        for (key, value) in file.metadata() {
            let _ = format!("{key}{value:?}");
        }
        for info in file.tensors() {
            let _ = file.tensor(&info.name);
            let _ = file.dequantize(&info.name);
        }
    });
}

/// safetensors: parse, then borrow and load every tensor as stored and as f32.
pub fn safetensors(data: &[u8]) {
    with_file("safetensors", data, |path| {
        let Ok(file) = SafetensorsFile::open(path) else { return };
        let names: Vec<String> = file.tensors().map(|t| t.name.to_string()).collect();
        for name in &names {
            let _ = file.bytes(name);
            let _ = file.load(name);
            let _ = file.load_f32(name);
        }
    });
}

/// ONNX: import (folding constants through the CPU kernels), then compile for the CPU and run
/// on small inputs drawn from the bytes, when every value is small and no loop is present.
pub fn onnx(data: &[u8]) {
    let options = ImportOptions { evaluator: Some(&CpuConstEval), ..Default::default() };
    let Some(g) = with_file("onnx", data, |path| import(path, &options).ok()) else { return };
    run_small(&g, data);
}

/// The IR text format: parse; what parses prints, and the print parses back to the same text.
pub fn ir_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(g) = rlx_ir::text::parse(text) else { return };
    let printed = g.to_string();
    let again = rlx_ir::text::parse(&printed).unwrap_or_else(|e| panic!("the printed graph does not parse: {e}\n{printed}"));
    assert_eq!(again.to_string(), printed, "printing is not stable across a parse");
}

/// tokenizer.json, read as a BPE and as a WordPiece tokenizer; each that loads encodes and
/// decodes [`TEXTS`].
pub fn tokenizer_json(data: &[u8]) {
    with_file("json", data, |path| {
        if let Ok(t) = BpeTokenizer::from_tokenizer_json(path) {
            exercise_bpe(&t);
        }
    });
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(t) = WordPiece::from_json(text, Path::new("fuzz.json")) {
            for text in TEXTS {
                let _ = t.encode(text, 64);
            }
            let _ = t.encode_batch(&TEXTS, 16);
        }
    }
}

/// A GGUF file's tokenizer and Llama config, as `rlx generate` reads them.
pub fn gguf_tokenizer(data: &[u8]) {
    with_file("gguf", data, |path| {
        let Ok(file) = GgufFile::open(path) else { return };
        let _ = LlamaConfig::from_gguf(&file);
        if let Ok(t) = BpeTokenizer::from_gguf(&file) {
            exercise_bpe(&t);
        }
    });
}

fn exercise_bpe(t: &BpeTokenizer) {
    for text in TEXTS {
        for special in [false, true] {
            let ids = t.encode(text, special);
            let _ = t.decode(&ids, special);
        }
    }
    let _ = t.decode(&[0, 1, 2, 3, 255, 256, 1000, u32::MAX], true);
}

/// Elements of `shape` with symbols bound to [`SYM_SIZE`], if that fits a `usize`.
fn elements(shape: &Shape) -> Option<usize> {
    shape.dims().iter().try_fold(1usize, |n, d| n.checked_mul(d.as_static().unwrap_or(SYM_SIZE)))
}

fn run_small(g: &OnnxGraph, data: &[u8]) {
    for node in g.graph.nodes() {
        if node.op.kind() == OpKind::While {
            return;
        }
        if node.outputs.iter().any(|t| elements(&t.shape).is_none_or(|n| n > MAX_VALUE_ELEMENTS)) {
            return;
        }
    }
    let Ok(mut compiled) = Session::new(Arc::new(CpuBackend::new())).compile(&g.graph) else { return };
    for (name, value) in &g.params {
        if compiled.set_param(name, value.clone()).is_err() {
            return;
        }
    }
    let mut rng = Rng::from_bytes(data);
    let inputs: Vec<(String, Tensor)> = g
        .inputs
        .iter()
        .map(|(name, ty)| {
            let dims: Vec<usize> = ty.shape.dims().iter().map(|d| if let Dim::Static(n) = d { *n } else { SYM_SIZE }).collect();
            (name.clone(), rng.tensor(ty.dtype, &dims))
        })
        .collect();
    let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let _ = compiled.run(&refs);
}

/// A xorshift stream seeded from the input, so a saved input replays the same run.
struct Rng(u64);

impl Rng {
    fn from_bytes(data: &[u8]) -> Rng {
        let seed = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Floats in [-2, 2), integers in [-3, 3], bools 0/1, other types raw bytes.
    fn tensor(&mut self, dtype: DType, dims: &[usize]) -> Tensor {
        let n: usize = dims.iter().product();
        let unit = |r: &mut Rng| (r.next() >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0;
        let small = |r: &mut Rng| (r.next() % 7) as i64 - 3;
        let t = match dtype {
            DType::F32 => Tensor::from_vec((0..n).map(|_| unit(self) as f32).collect(), dims),
            DType::F64 => Tensor::from_vec((0..n).map(|_| unit(self)).collect(), dims),
            DType::I64 => Tensor::from_vec((0..n).map(|_| small(self)).collect(), dims),
            DType::I32 => Tensor::from_vec((0..n).map(|_| small(self) as i32).collect(), dims),
            DType::Bool => Tensor::from_bytes(dtype, dims, &(0..n).map(|_| (self.next() & 1) as u8).collect::<Vec<u8>>()),
            _ => Tensor::from_bytes(dtype, dims, &(0..n * dtype.size()).map(|_| self.next() as u8).collect::<Vec<u8>>()),
        };
        t.expect("the element count matches the dims")
    }
}
