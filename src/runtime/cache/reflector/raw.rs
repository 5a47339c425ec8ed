//! One object as it came off the wire, not yet decoded: JSON text, or the
//! protobuf message of a built-in kind (see `crate::runtime::client::protobuf`).
use std::borrow::Cow;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::runtime::cache::key::ObjectKey;
use crate::runtime::client::protobuf;
use crate::runtime::client::protobuf::schema::Message;

/// One object, undecoded.
#[derive(Clone, Debug)]
pub enum RawObject {
    /// The object's JSON text, checked to be well-formed.
    Json(Box<RawValue>),
    /// The object's protobuf message (the envelope's `raw`), a slice of the
    /// response it came in, and the table that decodes it.
    Protobuf {
        message: &'static Message,
        bytes: Bytes,
    },
}

impl From<Box<RawValue>> for RawObject {
    fn from(json: Box<RawValue>) -> Self {
        Self::Json(json)
    }
}

/// Why an object did not decode.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Protobuf(#[from] protobuf::Error),
}

/// Who an object is and at which version, read without decoding the rest.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity<'a> {
    #[serde(borrow, default)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub uid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub resource_version: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct WithMetadata<'a> {
    #[serde(borrow)]
    metadata: Identity<'a>,
}

impl RawObject {
    /// Decodes the object into `K`. `skip_managed_fields` leaves
    /// `metadata.managedFields` out where that saves work (protobuf); the
    /// caller still clears them for JSON.
    pub fn decode<K: DeserializeOwned>(&self, skip_managed_fields: bool) -> Result<K, DecodeError> {
        Ok(match self {
            Self::Json(text) => serde_json::from_str(text.get())?,
            Self::Protobuf { message, bytes } if skip_managed_fields => {
                protobuf::decode_without_managed_fields(message, bytes)?
            }
            Self::Protobuf { message, bytes } => protobuf::decode(message, bytes)?,
        })
    }

    /// The object's namespace, name, uid and resourceVersion: a scan that
    /// allocates nothing (unless JSON escapes force a copy).
    pub fn identity(&self) -> Option<Identity<'_>> {
        fn some(s: &str) -> Option<Cow<'_, str>> {
            (!s.is_empty()).then_some(Cow::Borrowed(s))
        }
        match self {
            Self::Json(text) => serde_json::from_str::<WithMetadata<'_>>(text.get())
                .ok()
                .map(|w| w.metadata),
            Self::Protobuf { bytes, .. } => protobuf::identity(bytes).ok().map(|id| Identity {
                namespace: some(id.namespace),
                name: some(id.name),
                uid: some(id.uid),
                resource_version: some(id.resource_version),
            }),
        }
    }

    /// The object's key (`namespace/name`) read from its metadata alone, so
    /// an object whose body does not decode can still be named; `None` when
    /// even the metadata is unreadable or has no name.
    pub fn key(&self) -> Option<ObjectKey> {
        let id = self.identity()?;
        Some(ObjectKey::new(id.namespace.as_deref(), id.name.as_deref()?))
    }

    /// The object's resourceVersion, read from its metadata alone.
    pub fn resource_version(&self) -> Option<String> {
        self.identity()?.resource_version.map(Cow::into_owned)
    }

    /// The JSON text, if this came as JSON.
    pub fn json(&self) -> Option<&str> {
        match self {
            Self::Json(text) => Some(text.get()),
            Self::Protobuf { .. } => None,
        }
    }
}
