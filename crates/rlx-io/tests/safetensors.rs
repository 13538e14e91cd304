//! rlx-io's safetensors reader against files written by the `safetensors` crate, and against
//! crafted malformed headers.

use half::{bf16, f16};
use rlx_ir::DType;
use rlx_io::{IoError, SafetensorsFile};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::collections::HashMap;
use std::path::PathBuf;

fn path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-io-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{tag}.safetensors"))
}

fn le<T: Copy>(v: &[T], f: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

#[test]
fn round_trip() {
    let mut s = 0x1234_5678u32;
    let f32s: Vec<f32> = (0..12)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1 << 24) as f32 * 4.0 - 2.0
        })
        .collect();
    // Multiples of 1/8 and 1/4 in range are exact in f16 and bf16, so their f32 values are known.
    let halves: Vec<f32> = [-3, 5, 0, 7, -1, 11].iter().map(|&k| k as f32 / 8.0).collect();
    let brains: Vec<f32> = [9, -6, 1, 0, 13].iter().map(|&k| k as f32 / 4.0).collect();
    let i64s = [i64::MIN, -1, 7, i64::MAX];
    let data = [
        ("w.f32", Dtype::F32, vec![3, 4], le(&f32s, |x| x.to_le_bytes().to_vec())),
        ("w.f16", Dtype::F16, vec![2, 3], le(&halves, |x| f16::from_f32(x).to_le_bytes().to_vec())),
        ("w.bf16", Dtype::BF16, vec![5], le(&brains, |x| bf16::from_f32(x).to_le_bytes().to_vec())),
        ("ids", Dtype::I64, vec![2, 2], le(&i64s, |x| x.to_le_bytes().to_vec())),
        ("mask", Dtype::U8, vec![7], vec![1, 0, 1, 1, 0, 0, 1]),
        ("u16", Dtype::U16, vec![3], vec![1, 0, 2, 0, 3, 0]),
        ("fp8", Dtype::F8_E4M3, vec![2], vec![0x38, 0xc0]),
    ];
    let views: Vec<(&str, TensorView<'_>)> =
        data.iter().map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap())).collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let p = path("round_trip");
    safetensors::serialize_to_file(views, &Some(meta), &p).unwrap();

    let f = SafetensorsFile::open(&p).unwrap();
    assert_eq!(f.metadata()["format"], "pt");
    let listed: Vec<(&str, Dtype, Vec<usize>)> = f.tensors().map(|t| (t.name, t.stored, t.shape.to_vec())).collect();
    let mut want: Vec<(&str, Dtype, Vec<usize>)> = data.iter().map(|(n, d, s, _)| (*n, *d, s.clone())).collect();
    want.sort_by_key(|w| w.0);
    assert_eq!(listed, want);
    for (name, d, shape, bytes) in &data {
        let t = f.bytes(name).unwrap();
        assert_eq!((t.bytes, t.shape), (&bytes[..], &shape[..]), "{name}");
        assert_eq!(Some(t.dtype), rlx_io::safetensors::rlx_dtype(*d));
        let loaded = f.load(name).unwrap();
        assert_eq!((loaded.bytes(), loaded.shape(), loaded.dtype()), (&bytes[..], &shape[..], t.dtype));
    }

    let a = f.slice::<f32>("w.f32").unwrap();
    assert_eq!(a, f32s);
    assert!(std::ptr::eq(a.as_ptr(), f.slice::<f32>("w.f32").unwrap().as_ptr()), "slices are borrowed, not copied");
    assert_eq!(f.slice::<i64>("ids").unwrap(), i64s);
    assert_eq!(f.load_f32("w.f32").unwrap().as_slice::<f32>().unwrap(), f32s);
    let h = f.load_f32("w.f16").unwrap();
    assert_eq!((h.dtype(), h.shape(), h.as_slice::<f32>().unwrap()), (DType::F32, &[2, 3][..], &halves[..]));
    assert_eq!(f.load_f32("w.bf16").unwrap().as_slice::<f32>().unwrap(), brains);

    assert!(matches!(f.slice::<f16>("w.f32"), Err(IoError::DTypeMismatch { .. })));
    assert!(matches!(f.load_f32("ids"), Err(IoError::DTypeMismatch { .. })));
    assert_eq!(f.bytes("fp8").unwrap().dtype, DType::F8E4M3FN);
    assert_eq!(f.info("u16").unwrap().shape, [3]);
    let e = f.load("missing").unwrap_err();
    assert!(matches!(e, IoError::NoTensor { .. }) && e.to_string().contains("round_trip"), "{e}");
    std::fs::remove_file(p).unwrap();
}

fn fails(tag: &str, bytes: &[u8]) -> IoError {
    let p = path(tag);
    std::fs::write(&p, bytes).unwrap();
    let e = SafetensorsFile::open(&p).err().unwrap_or_else(|| panic!("{tag}: a malformed file opened"));
    std::fs::remove_file(p).unwrap();
    assert!(e.to_string().contains(tag), "{tag}: {e}");
    e
}

fn with_header(json: &str, data: usize) -> Vec<u8> {
    let mut b = (json.len() as u64).to_le_bytes().to_vec();
    b.extend(json.as_bytes());
    b.resize(b.len() + data, 0);
    b
}

#[test]
fn malformed_headers_are_typed_errors() {
    use safetensors::SafeTensorError as S;
    let st = |e: IoError| match e {
        IoError::Safetensors { source, .. } => source,
        e => panic!("not a safetensors error: {e}"),
    };
    assert!(matches!(st(fails("empty", &[])), S::HeaderTooSmall));
    assert!(matches!(st(fails("huge", &(1u64 << 63).to_le_bytes())), S::HeaderTooLarge));
    assert!(matches!(st(fails("short", &with_header("{}", 0)[..6])), S::HeaderTooSmall));
    let mut cut = with_header(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, 8);
    cut.truncate(20);
    assert!(matches!(st(fails("cut", &cut)), S::InvalidHeaderLength));
    assert!(matches!(st(fails("json", &with_header("{not json", 0))), S::InvalidHeaderDeserialization));
    let past = with_header(r#"{"a":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}}"#, 16);
    assert!(matches!(st(fails("past", &past)), S::MetadataIncompleteBuffer));
    let mismatch = with_header(r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, 8);
    assert!(matches!(st(fails("mismatch", &mismatch)), S::TensorInvalidInfo));
    let overflow = with_header(
        r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}"#,
        8,
    );
    assert!(matches!(st(fails("overflow", &overflow)), S::ValidationOverflow));
}
