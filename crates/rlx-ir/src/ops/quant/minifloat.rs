//! The element codecs of the `ScaledFormat` minifloats and their scale bytes (OPS.md §5
//! `ScaledMatMul`, §14 `ScaledQuantize`/`ScaledDequantize`): bit-exact decoding, and encoding
//! that rounds to the nearest code (ties to the even code), saturates to ±max_finite (±inf
//! included) and sends NaN to code 0.
//!
//! Formats narrower than 8 bits sit in the low bits of their byte, the sign at the format's
//! top bit; decoding ignores the bits above.

use super::ScaledFormat;

/// How a minifloat spends its top codes.
#[derive(Clone, Copy, PartialEq)]
enum Special {
    /// Every code is a finite number (the MX FP6/FP4 formats and custom minifloats).
    Finite,
    /// IEEE-style: the top exponent is ±inf (mantissa 0) or NaN (F8E5M2).
    Ieee,
    /// OCP E4M3: only `S.1111.111` is NaN; no infinities.
    OcpE4M3,
    /// AMD FNUZ: `0x80` (negative zero's code) is NaN; no infinities.
    Fnuz,
}

/// `(exponent bits, mantissa bits, bias, special codes)` of a format.
fn layout(f: &ScaledFormat) -> (u32, u32, i32, Special) {
    match *f {
        ScaledFormat::F8E4M3 => (4, 3, 7, Special::OcpE4M3),
        ScaledFormat::F8E5M2 => (5, 2, 15, Special::Ieee),
        ScaledFormat::F8E4M3Fnuz => (4, 3, 8, Special::Fnuz),
        ScaledFormat::F8E5M2Fnuz => (5, 2, 16, Special::Fnuz),
        ScaledFormat::F6E2M3 => (2, 3, 1, Special::Finite),
        ScaledFormat::F6E3M2 => (3, 2, 3, Special::Finite),
        ScaledFormat::F4E2M1 => (2, 1, 1, Special::Finite),
        ScaledFormat::Custom { exp_bits, mant_bits, bias } => {
            let e = u32::from(exp_bits);
            (e, u32::from(mant_bits), bias.unwrap_or((1 << (e - 1)) - 1), Special::Finite)
        }
    }
}

/// The value of `code` in format `f` (a validated format).
pub fn decode(f: &ScaledFormat, code: u8) -> f32 {
    let (e, m, bias, special) = layout(f);
    let c = u32::from(code) & ((1 << (1 + e + m)) - 1);
    let negative = (c >> (e + m)) & 1 == 1;
    let exp = (c >> m) & ((1 << e) - 1);
    let man = c & ((1 << m) - 1);
    let top = (1 << e) - 1;
    let mag = match special {
        Special::Fnuz if negative && exp == 0 && man == 0 => return f32::NAN,
        Special::OcpE4M3 if exp == top && man == (1 << m) - 1 => return f32::NAN,
        Special::Ieee if exp == top && man != 0 => return f32::NAN,
        Special::Ieee if exp == top => f64::INFINITY,
        _ => {
            let frac = f64::from(man) / f64::from(1u32 << m);
            if exp == 0 {
                frac * 2f64.powi(1 - bias)
            } else {
                (1.0 + frac) * 2f64.powi(exp as i32 - bias)
            }
        }
    };
    (if negative { -mag } else { mag }) as f32
}

/// An E8M0 scale byte: `2^(e − 127)`, with `0xFF` NaN (OCP MX).
pub fn e8m0(e: u8) -> f32 {
    if e == 255 {
        f32::NAN
    } else {
        2f64.powi(i32::from(e) - 127) as f32
    }
}

/// Encodes values into one format: the non-negative finite codes in increasing order, which
/// for these formats are the codes `0..=max_code` (magnitude grows with the code).
#[derive(Clone, Debug)]
pub struct Encoder {
    magnitudes: Vec<f64>,
    sign_bit: u8,
    /// FNUZ formats have no negative zero: `−0` encodes as `0x00`.
    unsigned_zero: bool,
}

impl Encoder {
    /// The encoder of a validated format.
    pub fn new(f: &ScaledFormat) -> Encoder {
        let bits = f.bits();
        let sign_bit = 1u8 << (bits - 1);
        let magnitudes: Vec<f64> =
            (0..sign_bit).map(|c| f64::from(decode(f, c))).take_while(|v| v.is_finite()).collect();
        Encoder { magnitudes, sign_bit, unsigned_zero: layout(f).3 == Special::Fnuz }
    }

    /// The largest finite value.
    pub fn max_finite(&self) -> f64 {
        self.magnitudes[self.magnitudes.len() - 1]
    }

    /// The code nearest to `v` (ties to the even code), saturating; NaN → 0.
    pub fn encode(&self, v: f64) -> u8 {
        if v.is_nan() {
            return 0;
        }
        let a = v.abs();
        let mags = &self.magnitudes;
        // Codes whose magnitude is <= a; at least code 0 (magnitude 0).
        let below = mags.partition_point(|&m| m <= a);
        let code = if below == mags.len() {
            below - 1
        } else {
            let (lo, hi) = (below - 1, below);
            let (dl, dh) = (a - mags[lo], mags[hi] - a);
            if dl < dh || (dl == dh && lo % 2 == 0) {
                lo
            } else {
                hi
            }
        } as u8;
        if v.is_sign_negative() && !(code == 0 && self.unsigned_zero) {
            code | self.sign_bit
        } else {
            code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_and_encode_round_trip_every_finite_code() {
        let custom = ScaledFormat::Custom { exp_bits: 3, mant_bits: 4, bias: None };
        for f in [
            ScaledFormat::F8E4M3,
            ScaledFormat::F8E5M2,
            ScaledFormat::F8E4M3Fnuz,
            ScaledFormat::F8E5M2Fnuz,
            ScaledFormat::F6E2M3,
            ScaledFormat::F6E3M2,
            ScaledFormat::F4E2M1,
            custom,
        ] {
            let enc = Encoder::new(&f);
            assert_eq!(enc.max_finite() as f32, f.max_finite(), "{f:?}");
            for c in 0..(1u32 << f.bits()) {
                let v = decode(&f, c as u8);
                if v.is_finite() {
                    assert_eq!(enc.encode(f64::from(v)), c as u8, "{f:?} code {c:#x} = {v}");
                }
            }
        }
    }

    #[test]
    fn encoding_rounds_ties_to_even_and_saturates() {
        let e4m3 = Encoder::new(&ScaledFormat::F8E4M3);
        // 1.0 = 0x38, 1.125 = 0x39, 1.25 = 0x3A: 1.0625 ties to 0x38, 1.1875 to 0x3A.
        assert_eq!((e4m3.encode(1.0625), e4m3.encode(1.1875), e4m3.encode(1.07)), (0x38, 0x3A, 0x39));
        assert_eq!((e4m3.encode(1e9), e4m3.encode(f64::NEG_INFINITY), e4m3.encode(f64::NAN)), (0x7E, 0xFE, 0));
        assert_eq!((e4m3.encode(-0.0), e4m3.encode(-1e-9)), (0x80, 0x80));
        let fnuz = Encoder::new(&ScaledFormat::F8E4M3Fnuz);
        assert_eq!((fnuz.encode(-0.0), fnuz.encode(-1e-9), fnuz.encode(-300.0)), (0, 0, 0xFF));
        let e5m2 = Encoder::new(&ScaledFormat::F8E5M2);
        assert_eq!((e5m2.encode(f64::INFINITY), e5m2.encode(61440.0)), (0x7B, 0x7B));
        let fp4 = Encoder::new(&ScaledFormat::F4E2M1);
        // 2.5 ties between 2 (code 4) and 3 (code 5); 5 between 4 (6) and 6 (7).
        assert_eq!((fp4.encode(2.5), fp4.encode(5.0), fp4.encode(-0.25)), (4, 6, 8));
        assert_eq!((e8m0(127), e8m0(0)), (1.0, 2f32.powi(-127)));
        assert!(e8m0(255).is_nan());
    }
}
