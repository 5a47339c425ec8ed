//! A serde `Deserializer` over protobuf bytes that presents each message the
//! way its JSON looks, so any type made for the JSON (k8s-openapi's, kube's
//! `Status`) decodes from protobuf unchanged.
//!
//! A message is a map from JSON names to values; repeated fields are
//! sequences; Kubernetes' special types (times, quantities, int-or-string,
//! raw JSON) become the strings, numbers or JSON they are in JSON. Nothing is
//! built in between: each field goes straight to the visitor that wants it.
use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;

use super::Error;
use super::schema::{Field, Kind, Message};
use super::wire::{Reader, Value, find_str, utf8};

/// One message's bytes, read as `message`.
pub struct MessageDeserializer<'de> {
    bytes: &'de [u8],
    message: &'static Message,
    /// A field of this message to leave out.
    skip: Option<u32>,
    /// A field of this message's `metadata` to leave out.
    skip_in_metadata: Option<u32>,
}

/// `metadata` is field 1 of every top-level kind; `managedFields` is field 17
/// of `ObjectMeta`.
const METADATA: u32 = 1;
const MANAGED_FIELDS: u32 = 17;

impl<'de> MessageDeserializer<'de> {
    pub fn new(bytes: &'de [u8], message: &'static Message) -> Self {
        Self {
            bytes,
            message,
            skip: None,
            skip_in_metadata: None,
        }
    }

    /// Reads the top-level object's `metadata` without `managedFields`.
    pub fn without_managed_fields(self) -> Self {
        Self {
            skip_in_metadata: Some(MANAGED_FIELDS),
            ..self
        }
    }
}

impl<'de> de::Deserializer<'de> for MessageDeserializer<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let mut fields = Fields::new(self.bytes, self.message);
        fields.skip = self.skip;
        fields.skip_in_metadata = self.skip_in_metadata;
        visitor.visit_map(fields)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// The field at `number`; numbers are mostly dense from 1, so look there first.
fn lookup(message: &'static Message, number: u32) -> Option<&'static Field> {
    let fields = message.fields;
    match fields.get((number as usize).wrapping_sub(1)) {
        Some(f) if f.number == number => Some(f),
        _ => fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &fields[i]),
    }
}

fn is_zero(value: &Value<'_>) -> bool {
    match *value {
        Value::Varint(v) | Value::Fixed64(v) => v == 0,
        Value::Fixed32(v) => v == 0,
        Value::Len(b) => b.is_empty(),
    }
}

/// What the next `next_value` hands out.
enum Pending<'de> {
    None,
    One(&'static Field, Value<'de>),
    /// A repeated field or a map: all its consecutive occurrences, keys and all.
    /// The count is how many fields the run holds.
    Run(&'static Field, &'de [u8], usize),
}

/// A message's fields as a map of JSON names to values. Inline fields (Go
/// `json:",inline"`) are entered: their fields are this map's.
struct Fields<'de> {
    reader: Reader<'de>,
    message: &'static Message,
    /// Enclosing messages while inside inline fields.
    outer: Vec<(Reader<'de>, &'static Message)>,
    pending: Pending<'de>,
    /// A field number of `metadata` to leave out (top level only).
    skip_in_metadata: Option<u32>,
    /// A field number of this message to leave out.
    skip: Option<u32>,
}

impl<'de> Fields<'de> {
    fn new(bytes: &'de [u8], message: &'static Message) -> Self {
        Self {
            reader: Reader::new(bytes),
            message,
            outer: Vec::new(),
            pending: Pending::None,
            skip_in_metadata: None,
            skip: None,
        }
    }
}

impl<'de> MapAccess<'de> for Fields<'de> {
    type Error = Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        loop {
            if self.reader.is_empty() {
                match self.outer.pop() {
                    Some((reader, message)) => {
                        self.reader = reader;
                        self.message = message;
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let start = self.reader.position();
            let (number, value) = self.reader.field()?;
            // A field this schema does not know (a newer server): skipped,
            // as JSON decoding skips unknown keys.
            let Some(field) = lookup(self.message, number) else {
                continue;
            };
            if self.skip == Some(number) && self.outer.is_empty() {
                continue;
            }
            if field.inline {
                let (Kind::Message(inner), Value::Len(bytes)) = (&field.kind, value) else {
                    return Err(Error::new(format!(
                        "{}: inline field {number} is not a message",
                        self.message.name
                    )));
                };
                let outer = std::mem::replace(&mut self.reader, Reader::new(bytes));
                self.outer.push((outer, self.message));
                self.message = inner;
                continue;
            }
            if field.repeated || matches!(field.kind, Kind::Map(_)) {
                // Go writes a repeated field's elements one after another.
                let mut count = 1;
                while self.reader.peek_number() == Some(number) {
                    self.reader.field()?;
                    count += 1;
                }
                self.pending = Pending::Run(field, self.reader.since(start), count);
            } else {
                if field.omit_zero && is_zero(&value) {
                    continue;
                }
                self.pending = Pending::One(field, value);
            }
            return seed
                .deserialize(BorrowedStrDeserializer::new(field.json))
                .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let (field, de) = match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::One(
                field @ Field {
                    number: METADATA,
                    kind: Kind::Message(meta),
                    ..
                },
                Value::Len(bytes),
            ) if self.skip_in_metadata.is_some() && self.outer.is_empty() => {
                let metadata = MessageDeserializer {
                    skip: self.skip_in_metadata,
                    ..MessageDeserializer::new(bytes, meta)
                };
                return seed
                    .deserialize(metadata)
                    .map_err(|e| e.within(self.message.name, field.json));
            }
            Pending::One(field, value) => (field, ValueDeserializer::One(&field.kind, value)),
            Pending::Run(field, run, count) => (field, ValueDeserializer::Run(field, run, count)),
            Pending::None => return Err(Error::new("a value was asked for before its key")),
        };
        seed.deserialize(de)
            .map_err(|e| e.within(self.message.name, field.json))
    }
}

/// One field's value.
enum ValueDeserializer<'de> {
    One(&'static Kind, Value<'de>),
    Run(&'static Field, &'de [u8], usize),
}

impl<'de> de::Deserializer<'de> for ValueDeserializer<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            ValueDeserializer::Run(field, run, count) => match &field.kind {
                Kind::Map(value_kind) => visitor.visit_map(Entries {
                    reader: Reader::new(run),
                    value_kind,
                    pending: None,
                }),
                kind => visitor.visit_seq(Elements {
                    reader: Reader::new(run),
                    kind,
                    packed: None,
                    remaining: count,
                }),
            },
            ValueDeserializer::One(kind, value) => one(kind, value, visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            // A zero time is an empty message; in JSON it is `null`.
            ValueDeserializer::One(Kind::Time | Kind::MicroTime, Value::Len([])) => {
                visitor.visit_none()
            }
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    /// A string where a Rust enum is wanted (e.g. kube's `StatusSummary`):
    /// the string names the variant, as in JSON.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            ValueDeserializer::One(Kind::String, Value::Len(b)) => {
                visitor.visit_enum(BorrowedStrDeserializer::new(utf8(b)?))
            }
            other => other.deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier
    }
}

/// One scalar or message value, as JSON has it.
fn one<'de, V: Visitor<'de>>(
    kind: &'static Kind,
    value: Value<'de>,
    visitor: V,
) -> Result<V::Value, Error> {
    match (kind, value) {
        (Kind::String, Value::Len(b)) => visitor.visit_borrowed_str(utf8(b)?),
        (Kind::Bool, Value::Varint(v)) => visitor.visit_bool(v != 0),
        // Negative int32s are sign-extended to 64 bits on the wire.
        (Kind::Int32, Value::Varint(v)) => visitor.visit_i32(v as i32),
        (Kind::Int64, Value::Varint(v)) => visitor.visit_i64(v as i64),
        (Kind::Double, Value::Fixed64(v)) => visitor.visit_f64(f64::from_bits(v)),
        (Kind::Bytes, Value::Len(b)) => {
            use base64::Engine as _;
            visitor.visit_string(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (Kind::Message(m), Value::Len(b)) => visitor.visit_map(Fields::new(b, m)),
        (Kind::Time, Value::Len(b)) => visitor.visit_string(timestamp(b, false)?),
        (Kind::MicroTime, Value::Len(b)) => visitor.visit_string(timestamp(b, true)?),
        (Kind::Quantity, Value::Len(b)) => visitor.visit_borrowed_str(find_str(b, 1)?),
        (Kind::IntOrString, Value::Len(b)) => int_or_string(b, visitor),
        (Kind::FieldsV1 | Kind::RawExtension, Value::Len(b)) => {
            let raw = super::wire::find_bytes(b, 1)?.unwrap_or(b"null");
            de::Deserializer::deserialize_any(
                &mut serde_json::Deserializer::from_slice(raw),
                visitor,
            )
            .map_err(|e| Error::new(format!("embedded JSON: {e}")))
        }
        (Kind::Duration, Value::Len(b)) => {
            visitor.visit_string(go_duration(varint_field(b, 1)? as i64))
        }
        (kind, value) => Err(Error::new(format!(
            "wire value {value:?} does not fit {kind:?}"
        ))),
    }
}

fn varint_field(msg: &[u8], number: u32) -> Result<u64, Error> {
    let mut r = Reader::new(msg);
    while !r.is_empty() {
        if let (n, Value::Varint(v)) = r.field()?
            && n == number
        {
            return Ok(v);
        }
    }
    Ok(0)
}

/// `{seconds = 1, nanos = 2}` as the RFC 3339 text Go's JSON writes: to the
/// second for `Time` (Go drops the nanoseconds even in protobuf), to the
/// microsecond for `MicroTime`.
fn timestamp(msg: &[u8], micro: bool) -> Result<String, Error> {
    let seconds = varint_field(msg, 1)? as i64;
    let nanos = if micro {
        (varint_field(msg, 2)? as i32 / 1000) * 1000
    } else {
        0
    };
    jiff::Timestamp::new(seconds, nanos)
        .map(|t| t.to_string())
        .map_err(|e| Error::new(format!("time out of range: {e}")))
}

/// `{type = 1, intVal = 2, strVal = 3}`: a number or a string.
fn int_or_string<'de, V: Visitor<'de>>(msg: &'de [u8], visitor: V) -> Result<V::Value, Error> {
    let (mut is_string, mut int, mut string) = (false, 0i32, "");
    let mut r = Reader::new(msg);
    while !r.is_empty() {
        match r.field()? {
            (1, Value::Varint(t)) => is_string = t == 1,
            (2, Value::Varint(v)) => int = v as i32,
            (3, Value::Len(b)) => string = utf8(b)?,
            _ => {}
        }
    }
    if is_string {
        visitor.visit_borrowed_str(string)
    } else {
        visitor.visit_i32(int)
    }
}

/// Go's `time.Duration.String()`: "1h2m3.5s", "1.5ms", "0s".
fn go_duration(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let frac = |value: u64, unit: u64| {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            whole.to_string()
        } else {
            let digits = unit.to_string().len() - 1;
            let s = format!("{whole}.{rest:0digits$}");
            s.trim_end_matches('0').to_owned()
        }
    };
    if n == 0 {
        return "0s".to_owned();
    }
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", frac(n, 1_000));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", frac(n, 1_000_000));
    }
    let (h, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let s = frac(rest, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, m) => format!("{sign}{m}m{s}s"),
        (h, m) => format!("{sign}{h}h{m}m{s}s"),
    }
}

/// A map field's entries, `{key = 1, value = 2}` each.
struct Entries<'de> {
    reader: Reader<'de>,
    value_kind: &'static Kind,
    pending: Option<Value<'de>>,
}

/// A map entry's value when the entry leaves it out: the kind's zero.
fn zero_of(kind: &Kind) -> Value<'static> {
    match kind {
        Kind::Bool | Kind::Int32 | Kind::Int64 => Value::Varint(0),
        Kind::Double => Value::Fixed64(0),
        _ => Value::Len(&[]),
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        if self.reader.is_empty() {
            return Ok(None);
        }
        let (_, Value::Len(entry)) = self.reader.field()? else {
            return Err(Error::new("a map entry is not a message"));
        };
        let (mut key, mut value) = ("", None);
        let mut r = Reader::new(entry);
        while !r.is_empty() {
            match r.field()? {
                (1, Value::Len(b)) => key = utf8(b)?,
                (2, v) => value = Some(v),
                _ => {}
            }
        }
        self.pending = Some(value.unwrap_or_else(|| zero_of(self.value_kind)));
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let value = self
            .pending
            .take()
            .ok_or_else(|| Error::new("a value was asked for before its key"))?;
        seed.deserialize(ValueDeserializer::One(self.value_kind, value))
    }
}

/// A repeated field's elements (packed or not).
struct Elements<'de> {
    reader: Reader<'de>,
    kind: &'static Kind,
    /// Inside a packed run of numbers.
    packed: Option<Reader<'de>>,
    /// The number of fields left in the run (a packed one counts once): the
    /// size hint that lets a `Vec` allocate its exact length up front, so
    /// decoded objects need no compacting copy (see the reflector).
    remaining: usize,
}

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = Error;

    fn size_hint(&self) -> Option<usize> {
        // Exact unless packed (rare: Kubernetes' proto2 fields are unpacked).
        Some(self.remaining)
    }

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        loop {
            if let Some(packed) = &mut self.packed {
                if !packed.is_empty() {
                    let value = match self.kind {
                        Kind::Double => {
                            let b: [u8; 8] = packed.take(8)?.try_into().unwrap_or([0; 8]);
                            Value::Fixed64(u64::from_le_bytes(b))
                        }
                        _ => Value::Varint(packed.varint()?),
                    };
                    return seed
                        .deserialize(ValueDeserializer::One(self.kind, value))
                        .map(Some);
                }
                self.packed = None;
            }
            if self.reader.is_empty() {
                return Ok(None);
            }
            let (_, value) = self.reader.field()?;
            self.remaining = self.remaining.saturating_sub(1);
            match (self.kind, value) {
                (Kind::Bool | Kind::Int32 | Kind::Int64 | Kind::Double, Value::Len(b)) => {
                    self.packed = Some(Reader::new(b));
                }
                _ => {
                    return seed
                        .deserialize(ValueDeserializer::One(self.kind, value))
                        .map(Some);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::go_duration;

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(2_000_000), "2ms");
        assert_eq!(go_duration(90_000_000_000), "1m30s");
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(go_duration(3_723_500_000_000), "1h2m3.5s");
        assert_eq!(go_duration(-1_000_000_000), "-1s");
    }
}
