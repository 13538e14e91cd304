//! rlx-io against a GGUF file written by gguf-py's GGUFWriter (fixtures/io/gguf_io.gguf, from
//! tools/fixtures/gguf_io.py): every tensor dequantises bit-exactly to what gguf-py's
//! `gguf.quants.dequantize` made of the same bytes, and every metadata value reads back.

use rlx_io::gguf::GgufArray;
use rlx_io::{GgmlType, GgufFile, GgufValue};
use safetensors::SafeTensors;

fn fixture(name: &str) -> String {
    format!("{}/../../fixtures/io/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn dequantisation_matches_gguf_py_bit_for_bit() {
    let f = GgufFile::open(fixture("gguf_io.gguf")).unwrap();
    let ref_bytes = std::fs::read(fixture("gguf_io_ref.safetensors")).unwrap();
    let reference = SafeTensors::deserialize(&ref_bytes).unwrap();
    assert_eq!(f.tensors().len(), reference.len());
    for info in f.tensors() {
        let want = reference.tensor(&info.name).unwrap();
        assert_eq!(info.shape, want.shape(), "{}", info.name);
        let got = f.dequantize(&info.name).unwrap();
        assert_eq!(got.shape(), want.shape(), "{}", info.name);
        let want: Vec<u32> = want.data().chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect();
        let got: Vec<u32> = got.as_slice::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        assert!(want.iter().any(|&b| f32::from_bits(b) != 0.0), "{}: degenerate reference", info.name);
        assert_eq!(got, want, "{} ({})", info.name, info.ty);
    }
}

#[test]
fn tensor_infos_and_raw_bytes() {
    let f = GgufFile::open(fixture("gguf_io.gguf")).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset() % 64, 0);
    let t = f.tensor("blk.q4_k").unwrap();
    assert_eq!(t.ty, GgmlType::Block(rlx_ir::ops::quant::GgufType::Q4_K));
    assert_eq!(t.shape, [3, 512]);
    assert_eq!(t.bytes.len(), 3 * 2 * 144);
    let t = f.tensor("blk.q4_0_3d").unwrap();
    assert_eq!(t.shape, [2, 3, 64]);
    assert_eq!(t.bytes.len(), 6 * 2 * 18);
    let t = f.tensor("plain.bf16").unwrap();
    assert_eq!((t.ty, t.shape, t.bytes.len()), (GgmlType::Plain(rlx_ir::DType::BF16), &[2, 3, 4][..], 48));
    for info in f.tensors() {
        assert_eq!(info.offset % 64, 0, "{}", info.name);
    }
    assert!(matches!(f.tensor("nope"), Err(rlx_io::IoError::NoTensor { .. })));
}

#[test]
fn released_tensors_read_back_the_same_bytes() {
    let f = GgufFile::open(fixture("gguf_io.gguf")).unwrap();
    let before: Vec<Vec<u8>> = f.tensors().iter().map(|t| f.tensor(&t.name).unwrap().bytes.to_vec()).collect();
    for (info, want) in f.tensors().iter().zip(&before) {
        f.release(&info.name).unwrap();
        assert_eq!(f.tensor(&info.name).unwrap().bytes, want.as_slice(), "{}", info.name);
    }
    assert!(matches!(f.release("nope"), Err(rlx_io::IoError::NoTensor { .. })));
}

#[test]
fn metadata_of_every_value_type() {
    let f = GgufFile::open(fixture("gguf_io.gguf")).unwrap();
    let get = |k: &str| f.get(k).unwrap_or_else(|| panic!("no `{k}`")).clone();
    assert_eq!(get("general.architecture").as_str(), Some("rlxtest"));
    assert_eq!(get("general.alignment"), GgufValue::U32(64));
    assert_eq!(get("rlx.test.u8"), GgufValue::U8(200));
    assert_eq!(get("rlx.test.i8"), GgufValue::I8(-100));
    assert_eq!(get("rlx.test.u16"), GgufValue::U16(60000));
    assert_eq!(get("rlx.test.i16"), GgufValue::I16(-30000));
    assert_eq!(get("rlx.test.u32"), GgufValue::U32(4_000_000_000));
    assert_eq!(get("rlx.test.i32"), GgufValue::I32(-2_000_000_000));
    assert_eq!(get("rlx.test.f32"), GgufValue::F32(0.125));
    assert_eq!(get("rlx.test.bool"), GgufValue::Bool(true));
    assert_eq!(get("rlx.test.string").as_str(), Some("héllo ☃"));
    assert_eq!(get("rlx.test.u64"), GgufValue::U64((1 << 63) + 5));
    assert_eq!(get("rlx.test.i64"), GgufValue::I64(-(1 << 62)));
    assert_eq!(get("rlx.test.f64"), GgufValue::F64(-2.5e300));
    assert_eq!(get("rlx.test.i64").as_u64(), None);
    assert_eq!(get("rlx.test.u16").as_u64(), Some(60000));
    assert_eq!(
        get("rlx.test.nested"),
        GgufValue::Array(GgufArray::Array(vec![
            GgufArray::I32(vec![1, 2, 3]),
            GgufArray::I32(vec![4]),
            GgufArray::I32(vec![5, 6]),
        ]))
    );
    assert_eq!(f.metadata().count(), 17);
}

/// rlx-io's table of ggml type codes is gguf-py's `GGMLQuantizationType`, entry for entry.
#[test]
fn type_codes_match_gguf_py() {
    let f = GgufFile::open(fixture("gguf_io.gguf")).unwrap();
    let names = f.get("rlx.test.ggml_type_names").and_then(GgufValue::as_array).and_then(GgufArray::as_strings);
    let Some(GgufValue::Array(GgufArray::I32(codes))) = f.get("rlx.test.ggml_type_codes") else {
        panic!("codes array missing");
    };
    let names = names.unwrap();
    assert_eq!(names.len(), codes.len());
    for (name, &code) in names.iter().zip(codes) {
        let t = GgmlType::from_code(code as u32).unwrap_or_else(|| panic!("{name} = {code} unknown to rlx-io"));
        assert_eq!(&t.to_string(), name, "code {code}");
    }
    let known = (0..64).filter(|&c| GgmlType::from_code(c).is_some()).count();
    assert_eq!(known, names.len(), "rlx-io knows codes gguf-py does not");
}
