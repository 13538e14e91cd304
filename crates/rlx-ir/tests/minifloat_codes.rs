//! The minifloat dtypes' codecs against ml_dtypes and onnx (fixtures/ir/minifloat_codes.json,
//! written by tools/fixtures/minifloat_codes.py): the value of every byte code, and the code
//! `Cast` gives ties, near-ties, overflow, specials and random values.

use rlx_ir::ops::quant::minifloat::{dtype_table, DTypeEncoder};
use rlx_ir::DType;
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/ir/minifloat_codes.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

fn ints(v: &Value) -> Vec<u64> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("integer")).collect()
}

#[test]
fn every_code_decodes_and_every_input_encodes_as_the_reference() {
    let f = fixture();
    for d in DType::ALL.into_iter().filter(|d| d.is_minifloat()) {
        let case = &f[d.name()];
        let table = dtype_table(d).expect("minifloat table");
        for (code, want) in ints(&case["decode"]).into_iter().enumerate() {
            let (got, want) = (table[code], f32::from_bits(want as u32));
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{d} code {code:#04x}: {got} != {want}");
        }
        let enc = DTypeEncoder::new(d).expect("encoder");
        let inputs = ints(&case["inputs"]);
        let codes = ints(&case["codes"]);
        assert!(inputs.len() > 500);
        for (x, want) in inputs.into_iter().zip(codes) {
            let x = f32::from_bits(x as u32);
            let got = enc.encode(f64::from(x));
            let (gv, wv) = (table[usize::from(got)], table[want as usize]);
            // NaN codes may differ in sign; FP4 has no NaN (ml_dtypes sends it to a zero).
            let same = got == want as u8 || (gv.is_nan() && wv.is_nan()) || (x.is_nan() && gv == 0.0 && wv == 0.0);
            assert!(same, "{d}: {x:e} ({:#010x}) encodes to {got:#04x} = {gv}, reference {want:#04x} = {wv}", x.to_bits());
        }
    }
}
