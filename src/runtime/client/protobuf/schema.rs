//! The shape of a Kubernetes protobuf message, as the decoder needs it.
//!
//! Kubernetes' `.proto` files say how a message is laid out on the wire, but
//! not how the same object looks in JSON — and the typed structs we decode
//! into (k8s-openapi) are made for the JSON. The tables in `generated.rs` are
//! built from the Go types themselves (`hack/protobuf-schema`), which carry
//! both: each field's protobuf number and its JSON name, whether JSON inlines
//! it, and whether JSON omits its zero value.

/// One message type: a Go struct with protobuf tags.
#[derive(Debug)]
pub struct Message {
    /// The OpenAPI name, e.g. `io.k8s.api.core.v1.Pod`, for error messages.
    pub name: &'static str,
    /// Sorted by `number`.
    pub fields: &'static [Field],
}

/// One field of a [`Message`].
#[derive(Debug)]
pub struct Field {
    pub number: u32,
    /// The JSON name (empty when `inline`).
    pub json: &'static str,
    pub kind: Kind,
    /// A Go slice: JSON holds an array of `kind`.
    pub repeated: bool,
    /// JSON has no key of its own: the message's fields are its parent's
    /// (Go `json:",inline"`, e.g. `Volume.VolumeSource`). Only for messages.
    pub inline: bool,
    /// A non-pointer scalar tagged `omitempty`: Go's protobuf encoder
    /// writes it even when zero, Go's JSON encoder leaves it out. Skipping
    /// zeros here makes both decode to the same object.
    pub omit_zero: bool,
}

/// What a field holds, and how its JSON looks.
#[derive(Debug)]
pub enum Kind {
    String,
    Bool,
    Int32,
    Int64,
    Double,
    /// Go `[]byte`: base64 text in JSON.
    Bytes,
    Message(&'static Message),
    /// Go `map[string]V`: repeated `{key = 1, value = 2}` entries.
    Map(&'static Kind),
    /// `metav1.Time`: `{seconds, nanos}`, JSON RFC 3339 to the second, UTC.
    Time,
    /// `metav1.MicroTime`: JSON RFC 3339 to the microsecond, UTC.
    MicroTime,
    /// `resource.Quantity`: `{string = 1}`, JSON its string.
    Quantity,
    /// `intstr.IntOrString`: `{type, intVal, strVal}`, JSON a number or a string.
    IntOrString,
    /// `metav1.Duration`: nanoseconds, JSON a Go duration string.
    Duration,
    /// `metav1.FieldsV1`: `{Raw = 1}`, the raw bytes are JSON.
    FieldsV1,
    /// `runtime.RawExtension`: `{raw = 1}`, the raw bytes are JSON.
    RawExtension,
}

/// A kind whose protobuf message the decoder knows (generated for the
/// built-in kinds listed in `hack/protobuf-schema`).
pub trait ProtobufKind {
    const MESSAGE: &'static Message;
}
