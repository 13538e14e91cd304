//! The element codecs of the `ScaledFormat` minifloats and their scale bytes (OPS.md §5
//! `ScaledMatMul`, §14 `ScaledQuantize`/`ScaledDequantize`): bit-exact decoding, and encoding
//! that rounds to the nearest code (ties to the even code), saturates to ±max_finite (±inf
//! included) and sends NaN to code 0.
//!
//! [`Encoder::cast`] is the other rounding the minifloat dtypes' `Cast` uses (ml_dtypes'
//! `astype`): ties to even as well, but NaN stays NaN and values beyond the largest finite one
//! become ±inf (E5M2) or NaN, saturating only in FP4, which has neither. [`e8m0_up`] is
//! `Cast` to E8M0: the exponent rounded up (ONNX `round_mode="up"`), saturating.
//!
//! Formats narrower than 8 bits sit in the low bits of their byte, the sign at the format's
//! top bit; decoding ignores the bits above.

use super::ScaledFormat;
use crate::DType;

/// The format whose codec a minifloat dtype's codes follow (`None` for E8M0 and non-minifloats).
pub fn format_of(dtype: DType) -> Option<ScaledFormat> {
    Some(match dtype {
        DType::F8E4M3FN => ScaledFormat::F8E4M3,
        DType::F8E4M3FNUZ => ScaledFormat::F8E4M3Fnuz,
        DType::F8E5M2 => ScaledFormat::F8E5M2,
        DType::F8E5M2FNUZ => ScaledFormat::F8E5M2Fnuz,
        DType::F4E2M1 => ScaledFormat::F4E2M1,
        _ => return None,
    })
}

/// The values of a minifloat dtype's 256 byte codes (for FP4 the bits above the nibble are
/// ignored); `None` for other dtypes.
pub fn dtype_table(dtype: DType) -> Option<Vec<f32>> {
    if dtype == DType::F8E8M0 {
        return Some((0..=255u8).map(e8m0).collect());
    }
    let f = format_of(dtype)?;
    Some((0..=255u8).map(|c| decode(&f, c)).collect())
}

/// `Cast` into a minifloat dtype: [`Encoder::cast`], or [`e8m0_up`] of the value as f32.
#[derive(Clone, Debug)]
pub enum DTypeEncoder {
    Format(Encoder),
    E8M0,
}

impl DTypeEncoder {
    /// The encoder of a minifloat dtype; `None` for other dtypes.
    pub fn new(dtype: DType) -> Option<DTypeEncoder> {
        if dtype == DType::F8E8M0 {
            return Some(DTypeEncoder::E8M0);
        }
        format_of(dtype).map(|f| DTypeEncoder::Format(Encoder::new(&f)))
    }

    /// The code of `v`.
    pub fn encode(&self, v: f64) -> u8 {
        match self {
            DTypeEncoder::Format(e) => e.cast(v),
            DTypeEncoder::E8M0 => e8m0_up(v as f32),
        }
    }
}

/// How a minifloat spends its top codes.
#[derive(Clone, Copy, Debug, PartialEq)]
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

/// `Cast` of an f32 to E8M0: the biased exponent of `|v|`, plus one when the mantissa is not
/// zero unless that passes the largest code (`0xFE`); NaN and ±inf → `0xFF`. Zero and
/// subnormals below `2^-127` give code 0 (the format has no zero).
pub fn e8m0_up(v: f32) -> u8 {
    let bits = v.to_bits();
    let exp = (bits >> 23) & 0xFF;
    if exp == 0xFF {
        return 0xFF;
    }
    let up = bits & 0x7F_FFFF != 0 && exp != 0xFE;
    (exp + u32::from(up)) as u8
}

/// Encodes values into one format: the non-negative finite codes in increasing order, which
/// for these formats are the codes `0..=max_code` (magnitude grows with the code).
#[derive(Clone, Debug)]
pub struct Encoder {
    magnitudes: Vec<f64>,
    sign_bit: u8,
    /// FNUZ formats have no negative zero: `−0` encodes as `0x00`.
    unsigned_zero: bool,
    special: Special,
}

impl Encoder {
    /// The encoder of a validated format.
    pub fn new(f: &ScaledFormat) -> Encoder {
        let bits = f.bits();
        let sign_bit = 1u8 << (bits - 1);
        let magnitudes: Vec<f64> =
            (0..sign_bit).map(|c| f64::from(decode(f, c))).take_while(|v| v.is_finite()).collect();
        let special = layout(f).3;
        Encoder { magnitudes, sign_bit, unsigned_zero: special == Special::Fnuz, special }
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
        self.signed(code, v.is_sign_negative())
    }

    /// `code` with the sign of a negative value, except FNUZ zero.
    fn signed(&self, code: u8, negative: bool) -> u8 {
        if negative && !(code == 0 && self.unsigned_zero) {
            code | self.sign_bit
        } else {
            code
        }
    }

    /// `Cast` rounding: the nearest code (ties to even) as if the top binade went on, so a
    /// value that rounds past the largest finite one overflows to ±inf (IEEE formats) or NaN
    /// (E4M3FN, FNUZ), or saturates (all-finite formats); NaN → the format's NaN (all-finite
    /// formats: 0).
    pub fn cast(&self, v: f64) -> u8 {
        let negative = v.is_sign_negative();
        let nan = match self.special {
            Special::Finite => 0,
            Special::Ieee => self.signed(self.sign_bit - 2, negative),
            Special::OcpE4M3 => self.signed(self.sign_bit - 1, negative),
            Special::Fnuz => self.sign_bit,
        };
        if v.is_nan() {
            return nan;
        }
        let mags = &self.magnitudes;
        let (n, max) = (mags.len(), mags[mags.len() - 1]);
        // Halfway between the largest finite value and the next one of its binade; a tie goes
        // to whichever code is even (the virtual next code is `n`).
        let limit = max + (max - mags[n - 2]) / 2.0;
        let a = v.abs();
        if a > limit || (a == limit && n % 2 == 0) {
            return match self.special {
                Special::Finite => self.signed(n as u8 - 1, negative),
                Special::Ieee => self.signed(n as u8, negative),
                Special::OcpE4M3 | Special::Fnuz => nan,
            };
        }
        self.encode(v)
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
