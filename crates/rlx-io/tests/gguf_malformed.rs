//! Crafted malformed GGUF files: each yields its typed [`IoError`], never a panic, and no
//! single allocation made while opening them exceeds 1 MiB (a global allocator records the
//! largest request per thread), however large the counts and sizes the file claims.

mod common;

use rlx_io::{GgufFile, IoError};
use common::{largest_allocation, write, MIB};

/// A GGUF file under construction.
#[derive(Clone)]
struct G(Vec<u8>);

impl G {
    fn header(version: u32, tensors: u64, kvs: u64) -> G {
        G(b"GGUF".to_vec()).u32(version).u64(tensors).u64(kvs)
    }
    fn u32(mut self, v: u32) -> G {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> G {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn raw(mut self, b: &[u8]) -> G {
        self.0.extend(b);
        self
    }
    fn str(self, s: &str) -> G {
        self.u64(s.len() as u64).raw(s.as_bytes())
    }
    /// A tensor info: name, ggml `ne` (contiguous first), type code, offset.
    fn tensor(self, name: &str, ne: &[u64], code: u32, offset: u64) -> G {
        let g = self.str(name).u32(ne.len() as u32);
        ne.iter().fold(g, |g, &d| g.u64(d)).u32(code).u64(offset)
    }
    /// Zero padding up to a multiple of `a`.
    fn pad(mut self, a: usize) -> G {
        self.0.resize(self.0.len().next_multiple_of(a), 0);
        self
    }
}

fn open(tag: &str, g: &G) -> Result<GgufFile, IoError> {
    let path = write(tag, "gguf", &g.0);
    let (r, largest) = largest_allocation(|| GgufFile::open(&path));
    std::fs::remove_file(path).unwrap();
    assert!(largest < MIB, "{tag}: an allocation of {largest} bytes");
    r
}

fn fails(tag: &str, g: &G) -> IoError {
    match open(tag, g) {
        Ok(_) => panic!("{tag}: a malformed file opened"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(tag), "{tag}: message does not name the file: {msg}");
            e
        }
    }
}

/// A well-formed file: 3 metadata entries, an F32 `[2, 4]` tensor and a Q8_0 `[32]` one.
fn valid() -> G {
    let mut q8 = half::f16::from_f32(0.5).to_le_bytes().to_vec();
    q8.extend((0..32).map(|i| (i as i8 - 16) as u8));
    let floats: Vec<u8> = (0..8).flat_map(|i| (i as f32 * 0.25 - 1.0).to_le_bytes()).collect();
    G::header(3, 2, 3)
        .str("general.alignment")
        .u32(4)
        .u32(32)
        .str("general.name")
        .u32(8)
        .str("tiny")
        .str("tokens")
        .u32(9)
        .u32(8)
        .u64(2)
        .str("a")
        .str("bc")
        .tensor("w", &[4, 2], 0, 0)
        .tensor("q", &[32], 8, 32)
        .pad(32)
        .raw(&floats)
        .raw(&q8)
}

#[test]
fn valid_file_reads() {
    let f = open("valid", &valid()).unwrap();
    let w = f.dequantize("w").unwrap();
    assert_eq!(w.shape(), [2, 4]);
    let want: Vec<f32> = (0..8).map(|i| i as f32 * 0.25 - 1.0).collect();
    assert_eq!(w.as_slice::<f32>().unwrap(), want);
    let q = f.dequantize("q").unwrap();
    let want: Vec<f32> = (0..32).map(|i| (i - 16) as f32 * 0.5).collect();
    assert_eq!(q.as_slice::<f32>().unwrap(), want);
    let tokens = f.get("tokens").unwrap().as_array().unwrap().as_strings().unwrap();
    assert_eq!(tokens.iter().collect::<Vec<_>>(), ["a", "bc"]);
}

#[test]
fn every_truncation_is_an_error() {
    let g = valid();
    for n in 0..g.0.len() {
        let e = fails(&format!("trunc{n}"), &G(g.0[..n].to_vec()));
        assert!(
            matches!(e, IoError::Truncated { .. } | IoError::TooMany { .. } | IoError::OffsetPastEnd { .. }),
            "{n}: {e}"
        );
    }
}

#[test]
fn random_corruption_never_panics() {
    let g = valid();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut errors = 0;
    for i in 0..400 {
        let mut b = g.0.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % b.len() as u64) as usize;
            b[at] ^= 1 << (next() % 8);
        }
        match open(&format!("fuzz{i}"), &G(b)) {
            Ok(f) => {
                for t in f.tensors().to_vec() {
                    let _ = f.dequantize(&t.name);
                }
            }
            Err(_) => errors += 1,
        }
    }
    assert!(errors > 100, "only {errors} of 400 corruptions were detected");
}

#[test]
fn bad_magic_and_versions() {
    let e = fails("magic", &G(b"GGML".to_vec()).u32(3).u64(0).u64(0));
    assert!(matches!(e, IoError::BadMagic { ref found, .. } if found == b"GGML"), "{e}");
    for v in [0, 1, 4, 0x0300_0000] {
        let e = fails(&format!("version{v}"), &G::header(v, 0, 0));
        assert!(matches!(e, IoError::UnsupportedVersion { version, .. } if version == v), "{e}");
    }
    assert!(matches!(fails("empty", &G(vec![])), IoError::Truncated { need: 4, .. }));
    assert!(open("v2", &G::header(2, 0, 0)).is_ok());
}

#[test]
fn absurd_counts_fail_before_allocating() {
    let e = fails("tensors", &G::header(3, 1 << 60, 0));
    assert!(matches!(e, IoError::TooMany { what: "tensors", count, .. } if count == 1 << 60), "{e}");
    let e = fails("some_tensors", &G::header(3, 200_000, 0).raw(&[0; 64]));
    assert!(matches!(e, IoError::TooMany { what: "tensors", limit: 3, .. }), "{e}");
    let e = fails("kvs", &G::header(3, 0, u64::MAX));
    assert!(matches!(e, IoError::TooMany { what: "metadata entries", .. }), "{e}");
    let e = fails("array", &G::header(3, 0, 1).str("k").u32(9).u32(10).u64(1 << 62));
    assert!(matches!(e, IoError::TooMany { what: "array elements", .. }), "{e}");
    let e = fails("strings", &G::header(3, 0, 1).str("k").u32(9).u32(8).u64(1 << 40).raw(&[0; 64]));
    assert!(matches!(e, IoError::TooMany { what: "array elements", .. }), "{e}");
    let e = fails("keylen", &G::header(3, 0, 1).u64(1 << 63).raw(&[0; 32]));
    assert!(matches!(e, IoError::Truncated { need, .. } if need == 1 << 63), "{e}");
    let e = fails("strlen", &G::header(3, 0, 1).str("k").u32(8).u64(u64::MAX).raw(&[0; 32]));
    assert!(matches!(e, IoError::Truncated { .. }), "{e}");
    let deep = (0..12).fold(G::header(3, 0, 1).str("k").u32(9), |g, _| g.u32(9).u64(1));
    let e = fails("deep", &deep.u32(0).u64(1).raw(&[0; 16]));
    assert!(matches!(e, IoError::TooMany { what: "levels of nested arrays", .. }), "{e}");
    let e = fails("dims", &G::header(3, 1, 0).tensor("t", &[1; 5], 0, 0).pad(32));
    assert!(matches!(e, IoError::TooMany { what: "dimensions", count: 5, .. }), "{e}");
}

#[test]
fn absurd_sizes_and_offsets() {
    let one = |ne: &[u64], code: u32, offset: u64| {
        G::header(3, 1, 0).tensor("t", ne, code, offset).pad(32).raw(&[0; 64])
    };
    let e = fails("overflow", &one(&[1 << 32, 1 << 32, 1 << 32], 0, 0));
    assert!(matches!(e, IoError::BadShape { .. }), "{e}");
    let e = fails("zerodim", &one(&[0, 1 << 40, 1 << 40], 0, 0));
    assert!(matches!(e, IoError::BadShape { .. }), "{e}");
    let e = fails("huge", &one(&[1 << 40], 0, 0));
    assert!(matches!(e, IoError::OffsetPastEnd { len: 64, .. }), "{e}");
    let e = fails("past", &one(&[8], 0, 64));
    assert!(matches!(e, IoError::OffsetPastEnd { start: 64, end: 96, .. }), "{e}");
    let e = fails("wrap", &one(&[8], 0, u64::MAX - 7));
    assert!(matches!(e, IoError::OffsetPastEnd { .. }), "{e}");
    let e = fails("misaligned", &one(&[4], 0, 4));
    assert!(matches!(e, IoError::Misaligned { offset: 4, alignment: 32, .. }), "{e}");
    let e = fails("partial_block", &one(&[48], 2, 0));
    assert!(matches!(e, IoError::BadShape { .. }), "{e}");
    let e = fails("scalar_block", &one(&[], 2, 0));
    assert!(matches!(e, IoError::BadShape { .. }), "{e}");
    let e = fails("nopad", &G::header(3, 1, 0).tensor("t", &[0], 0, 0));
    assert!(matches!(e, IoError::Truncated { .. }), "{e}");
}

#[test]
fn unknown_types() {
    for code in [4, 5, 31, 42, 1000, u32::MAX] {
        let g = G::header(3, 1, 0).tensor("t", &[32], code, 0).pad(32).raw(&[0; 64]);
        let e = fails(&format!("type{code}"), &g);
        assert!(matches!(e, IoError::UnknownType { code: c, ref tensor, .. } if c == code && tensor == "t"), "{e}");
    }
    let e = fails("value13", &G::header(3, 0, 1).str("k").u32(13).raw(&[0; 16]));
    assert!(matches!(e, IoError::UnknownValueType { code: 13, ref key, .. } if key == "k"), "{e}");
    let e = fails("elem99", &G::header(3, 0, 1).str("k").u32(9).u32(99).u64(1).raw(&[0; 16]));
    assert!(matches!(e, IoError::UnknownValueType { code: 99, .. }), "{e}");
}

#[test]
fn bad_metadata_and_names() {
    let e = fails("bool", &G::header(3, 0, 1).str("k").u32(7).raw(&[2]));
    assert!(matches!(e, IoError::BadMetadata { .. }), "{e}");
    for (tag, code, v) in [("align0", 4u32, 0u32), ("align48", 4, 48)] {
        let e = fails(tag, &G::header(3, 0, 1).str("general.alignment").u32(code).u32(v));
        assert!(matches!(e, IoError::BadMetadata { ref key, .. } if key == "general.alignment"), "{e}");
    }
    let e = fails("alignstr", &G::header(3, 0, 1).str("general.alignment").u32(8).str("32"));
    assert!(matches!(e, IoError::BadMetadata { .. }), "{e}");
    let e = fails("utf8", &G::header(3, 0, 1).u64(2).raw(&[0xC3, 0x28]).u32(0).raw(&[1]));
    assert!(matches!(e, IoError::BadUtf8 { .. }), "{e}");
    let e = fails("dupkey", &G::header(3, 0, 2).str("k").u32(0).raw(&[1]).str("k").u32(0).raw(&[2]));
    assert!(matches!(e, IoError::Duplicate { what: "metadata key", .. }), "{e}");
    let g = G::header(3, 2, 0).tensor("t", &[8], 0, 0).tensor("t", &[8], 0, 32).pad(32).raw(&[0; 64]);
    assert!(matches!(fails("duptensor", &g), IoError::Duplicate { what: "tensor", .. }));
}

#[test]
fn undecodable_tensors_open_but_refuse_dequantisation() {
    let g = G::header(3, 2, 0).tensor("iq", &[256], 16, 0).tensor("int", &[4], 26, 96).pad(32).raw(&[0; 128]);
    let f = open("undecodable", &g).unwrap();
    assert_eq!(f.tensor("iq").unwrap().bytes.len(), 66);
    assert!(matches!(f.dequantize("iq"), Err(IoError::Unsupported { .. })));
    assert!(matches!(f.dequantize("int"), Err(IoError::Unsupported { .. })));
    assert!(matches!(f.dequantize("none"), Err(IoError::NoTensor { .. })));
}

/// Corrupting the header of gguf-py's fixture file never panics.
#[test]
fn corrupted_fixture_never_panics() {
    let path = format!("{}/../../fixtures/io/gguf_io.gguf", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(path).unwrap();
    let header = GgufFile::open(format!("{}/../../fixtures/io/gguf_io.gguf", env!("CARGO_MANIFEST_DIR")))
        .unwrap()
        .data_offset();
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..200 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let mut b = bytes.clone();
        b[(s % header as u64) as usize] ^= 1 << (s >> 60 & 7);
        if let Ok(f) = open(&format!("fixfuzz{i}"), &G(b)) {
            for t in f.tensors().to_vec() {
                let _ = f.dequantize(&t.name);
            }
        }
    }
}
