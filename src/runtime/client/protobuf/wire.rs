//! Reading the protobuf wire format: varints, field keys, length-delimited
//! slices. Just what Kubernetes' messages use (proto2, no groups).
use super::Error;

/// Wire types (the low three bits of a field key).
pub const VARINT: u8 = 0;
pub const FIXED64: u8 = 1;
pub const LEN: u8 = 2;
pub const FIXED32: u8 = 5;

/// A cursor over one message's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'de> {
    buf: &'de [u8],
    pos: usize,
}

/// One field as found on the wire, its value not yet interpreted.
#[derive(Clone, Copy, Debug)]
pub enum Value<'de> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Len(&'de [u8]),
}

impl<'de> Reader<'de> {
    pub fn new(buf: &'de [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes from `start` to the cursor.
    pub fn since(&self, start: usize) -> &'de [u8] {
        &self.buf[start..self.pos]
    }

    pub fn varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(Error::new("truncated varint"));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(Error::new("varint longer than 10 bytes"))
    }

    pub fn take(&mut self, n: usize) -> Result<&'de [u8], Error> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| Error::new("truncated field"))?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The next field's number and value.
    pub fn field(&mut self) -> Result<(u32, Value<'de>), Error> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| Error::new("field number too large"))?;
        let value = match (key & 7) as u8 {
            VARINT => Value::Varint(self.varint()?),
            FIXED64 => {
                let b = self.take(8)?;
                Value::Fixed64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            }
            LEN => {
                let n =
                    usize::try_from(self.varint()?).map_err(|_| Error::new("length too large"))?;
                Value::Len(self.take(n)?)
            }
            FIXED32 => {
                let b = self.take(4)?;
                Value::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
            }
            other => return Err(Error::new(format!("unsupported wire type {other}"))),
        };
        Ok((number, value))
    }

    /// The number of the next field, without moving the cursor.
    pub fn peek_number(&self) -> Option<u32> {
        let mut probe = *self;
        probe.varint().ok().map(|key| (key >> 3) as u32)
    }
}

/// The first length-delimited field numbered `number` in `msg`, if any.
pub fn find_bytes(msg: &[u8], number: u32) -> Result<Option<&[u8]>, Error> {
    let mut r = Reader::new(msg);
    while !r.is_empty() {
        if let (n, Value::Len(b)) = r.field()?
            && n == number
        {
            return Ok(Some(b));
        }
    }
    Ok(None)
}

/// A string field's bytes as text.
pub fn utf8(bytes: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(bytes).map_err(|_| Error::new("a string field is not UTF-8"))
}

/// The first string field numbered `number` in `msg` ("" if absent, as Go
/// reads a missing string).
pub fn find_str(msg: &[u8], number: u32) -> Result<&str, Error> {
    utf8(find_bytes(msg, number)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_varints_keys_and_lengths() {
        // field 1 varint 300, field 2 "hi", field 3 fixed64 1.5
        let mut bytes = vec![0x08, 0xac, 0x02, 0x12, 2, b'h', b'i', 0x19];
        bytes.extend_from_slice(&1.5f64.to_le_bytes());
        let mut r = Reader::new(&bytes);
        assert!(matches!(r.field(), Ok((1, Value::Varint(300)))));
        assert_eq!(r.peek_number(), Some(2));
        assert!(matches!(r.field(), Ok((2, Value::Len(b"hi")))));
        assert!(matches!(r.field(), Ok((3, Value::Fixed64(b))) if f64::from_bits(b) == 1.5));
        assert!(r.is_empty());
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        for bytes in [&[0x12, 5, b'a'][..], &[0x08, 0xff][..], &[0x19, 1, 2][..]] {
            assert!(Reader::new(bytes).field().is_err(), "{bytes:?}");
        }
    }
}
