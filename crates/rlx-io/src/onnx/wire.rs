//! The protobuf wire format, read with a bounds check on every byte: varints, 64-bit and
//! 32-bit fixed values, length-delimited fields and packed repeated scalars.
//!
//! Errors carry the field path they occurred in (`GraphProto.node.attribute`), built as the
//! message decoders unwind, so a malformed file names the field that broke.

/// A decoding failure: what was wrong and the field path (innermost last).
#[derive(Debug)]
pub(crate) struct WireError {
    pub(crate) fields: Vec<String>,
    pub(crate) reason: String,
}

impl WireError {
    pub(crate) fn new(reason: impl Into<String>) -> WireError {
        WireError { fields: Vec::new(), reason: reason.into() }
    }

    /// Prefixes the field path with `field` (called by the enclosing decoder).
    pub(crate) fn within(mut self, field: &str) -> WireError {
        self.fields.insert(0, field.to_string());
        self
    }

    /// The field path as `Message.field.subfield`.
    pub(crate) fn field_path(&self) -> String {
        self.fields.join(".")
    }
}

pub(crate) type WireResult<T> = Result<T, WireError>;

/// One field's payload, by wire type.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Value<'a> {
    pub(crate) fn varint(self, what: &str) -> WireResult<u64> {
        match self {
            Value::Varint(v) => Ok(v),
            other => Err(wrong_type(what, "a varint", other)),
        }
    }

    pub(crate) fn int64(self, what: &str) -> WireResult<i64> {
        self.varint(what).map(|v| v as i64)
    }

    /// An `int32` or enum field: the low 32 bits, sign-extended as protobuf encodes them.
    pub(crate) fn int32(self, what: &str) -> WireResult<i32> {
        self.varint(what).map(|v| v as i32)
    }

    pub(crate) fn float(self, what: &str) -> WireResult<f32> {
        match self {
            Value::Fixed32(v) => Ok(f32::from_bits(v)),
            other => Err(wrong_type(what, "a 32-bit float", other)),
        }
    }

    pub(crate) fn bytes(self, what: &str) -> WireResult<&'a [u8]> {
        match self {
            Value::Bytes(b) => Ok(b),
            other => Err(wrong_type(what, "length-delimited bytes", other)),
        }
    }

    pub(crate) fn string(self, what: &str) -> WireResult<String> {
        let b = self.bytes(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| WireError::new("not valid UTF-8").within(what))
    }

    /// Appends a repeated varint field, packed (one length-delimited run) or not.
    pub(crate) fn push_varints(self, what: &str, out: &mut Vec<i64>) -> WireResult<()> {
        match self {
            Value::Varint(v) => out.push(v as i64),
            Value::Bytes(b) => {
                let mut w = Wire::new(b);
                while !w.at_end() {
                    out.push(w.varint().map_err(|e| e.within(what))? as i64);
                }
            }
            other => return Err(wrong_type(what, "varints", other)),
        }
        Ok(())
    }

    /// Appends a repeated `float` field, packed or not.
    pub(crate) fn push_floats(self, what: &str, out: &mut Vec<f32>) -> WireResult<()> {
        match self {
            Value::Fixed32(v) => out.push(f32::from_bits(v)),
            Value::Bytes(b) => out.extend(fixed_chunks::<4>(b, what)?.map(f32::from_le_bytes)),
            other => return Err(wrong_type(what, "32-bit floats", other)),
        }
        Ok(())
    }

    /// Appends a repeated `double` field, packed or not.
    pub(crate) fn push_doubles(self, what: &str, out: &mut Vec<f64>) -> WireResult<()> {
        match self {
            Value::Fixed64(v) => out.push(f64::from_bits(v)),
            Value::Bytes(b) => out.extend(fixed_chunks::<8>(b, what)?.map(f64::from_le_bytes)),
            other => return Err(wrong_type(what, "64-bit doubles", other)),
        }
        Ok(())
    }
}

/// The `N`-byte little-endian elements of a packed fixed-width run.
fn fixed_chunks<'b, const N: usize>(b: &'b [u8], what: &str) -> WireResult<impl Iterator<Item = [u8; N]> + 'b> {
    if b.len() % N != 0 {
        return Err(WireError::new(format!("packed run of {} bytes is not a multiple of {N}", b.len())).within(what));
    }
    Ok(b.chunks_exact(N).map(|c| {
        let mut a = [0; N];
        a.copy_from_slice(c);
        a
    }))
}

fn wrong_type(what: &str, expected: &str, got: Value<'_>) -> WireError {
    let got = match got {
        Value::Varint(_) => "a varint",
        Value::Fixed64(_) => "a 64-bit value",
        Value::Bytes(_) => "length-delimited bytes",
        Value::Fixed32(_) => "a 32-bit value",
    };
    WireError::new(format!("expected {expected}, found {got}")).within(what)
}

/// A cursor over one message's bytes.
pub(crate) struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Wire<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Wire<'a> {
        Wire { buf, pos: 0 }
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> WireResult<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(WireError::new(format!("truncated varint at byte {}", self.pos)));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::new(format!("varint longer than 10 bytes ending at byte {}", self.pos)))
    }

    fn take(&mut self, n: u64) -> WireResult<&'a [u8]> {
        let left = (self.buf.len() - self.pos) as u64;
        if n > left {
            return Err(WireError::new(format!(
                "truncated: {n} bytes needed at byte {}, {left} left in the message",
                self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    /// The next field as `(number, value)`, or `None` at the end of the message.
    pub(crate) fn next_field(&mut self) -> WireResult<Option<(u32, Value<'a>)>> {
        if self.at_end() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = (key >> 3) as u32;
        if number == 0 || key >> 3 > u64::from(u32::MAX >> 3) {
            return Err(WireError::new(format!("invalid field number {} at byte {}", key >> 3, self.pos)));
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| WireError::new("short fixed64"))?)),
            2 => {
                let n = self.varint()?;
                Value::Bytes(self.take(n)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| WireError::new("short fixed32"))?)),
            t => return Err(WireError::new(format!("unsupported wire type {t} for field {number}"))),
        };
        Ok(Some((number, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_wire_type() {
        // field 1 varint 300, field 2 fixed64, field 3 bytes "ab", field 4 fixed32
        let mut b = vec![0x08, 0xac, 0x02, 0x11];
        b.extend(7u64.to_le_bytes());
        b.extend([0x1a, 2, b'a', b'b', 0x25]);
        b.extend(1.5f32.to_le_bytes());
        let mut w = Wire::new(&b);
        assert!(matches!(w.next_field().unwrap(), Some((1, Value::Varint(300)))));
        assert!(matches!(w.next_field().unwrap(), Some((2, Value::Fixed64(7)))));
        assert!(matches!(w.next_field().unwrap(), Some((3, Value::Bytes(b"ab")))));
        let (n, v) = w.next_field().unwrap().unwrap();
        assert_eq!((n, v.float("f").unwrap()), (4, 1.5));
        assert!(w.next_field().unwrap().is_none());
    }

    #[test]
    fn packed_and_unpacked_repeated_fields_agree() {
        let mut out = Vec::new();
        Value::Bytes(&[1, 0x96, 0x01, 3]).push_varints("ints", &mut out).unwrap();
        Value::Varint(u64::MAX).push_varints("ints", &mut out).unwrap();
        assert_eq!(out, vec![1, 150, 3, -1]);
    }

    #[test]
    fn truncation_is_an_error() {
        for b in [&[0x08][..], &[0x08, 0x80], &[0x1a, 5, 1], &[0x25, 1, 2], &[0x0f]] {
            assert!(Wire::new(b).next_field().is_err(), "{b:?}");
        }
        assert!(Value::Bytes(&[1, 2, 3]).push_floats("f", &mut Vec::new()).is_err());
    }
}
