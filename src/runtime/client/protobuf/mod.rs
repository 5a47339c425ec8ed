//! Kubernetes' protobuf encoding, decoded into the same types as its JSON.
//!
//! Mirrors what client-go's typed clientsets do by default for built-in
//! kinds (`rest.Config.ContentType = "application/vnd.kubernetes.protobuf"`):
//! the API server encodes protobuf faster than JSON and the bytes are a
//! third smaller (`docs/benchmarks.md`, "Initial sync of 10,000 Pods": the
//! `ours` and `ours-json` rows). That is CPU the API server spends on
//! every informer's list and on every watch event.
//!
//! There is no Rust protobuf type set that kube can use, and the typed structs
//! are k8s-openapi's, made for JSON. So instead of generating a second set of
//! types, `de.rs` reads protobuf bytes through serde as if they were the
//! object's JSON, guided by tables ([`schema`], generated from the Go types
//! into `generated.rs`) that know each field's number and JSON name. Only kinds
//! with a table ([`ProtobufKind`]) can use it; every other kind, and every
//! custom resource (the API server only speaks JSON for those), stays on JSON.
//!
//! The wire layout: a response body is the 4 bytes `k8s\0` and a
//! `runtime.Unknown` envelope, `{typeMeta = 1, raw = 2, contentEncoding = 3,
//! contentType = 4}`, whose `raw` is the object's (or list's) message. A
//! watch stream (`;stream=watch`) is a series of frames, each a 4-byte
//! big-endian length and a `metav1.WatchEvent` `{type = 1, object = 2}`
//! whose object is `{raw = 1}` holding an enveloped object.
mod de;
mod generated;
pub mod schema;
mod wire;

use serde::de::DeserializeOwned;

use schema::Message;

/// The first four bytes of every protobuf-encoded object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Bytes that are not the protobuf the decoder expected, with where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("protobuf: {0}")]
pub struct Error(String);

impl Error {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// Prefixes the path of the field the error is in, innermost first
    /// outermost last, as it unwinds: `io.k8s.api.core.v1.Pod.spec: ...`.
    fn within(self, message: &str, field: &str) -> Self {
        Self(format!("{message}.{field}: {}", self.0))
    }
}

impl serde::de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

/// The table for `K`, if `K` is a built-in kind that has one (the roots
/// listed in `hack/protobuf-schema`).
pub fn message_for<K: 'static>() -> Option<&'static Message> {
    generated::message_for_type(std::any::TypeId::of::<K>())
}

/// The table for `metav1.Status` (error answers and watch ERROR events).
pub fn status_message() -> &'static Message {
    &generated::META_V1_STATUS
}

/// Decodes one object's message (its envelope's `raw`) into `T`.
pub fn decode<T: DeserializeOwned>(message: &'static Message, bytes: &[u8]) -> Result<T, Error> {
    T::deserialize(de::MessageDeserializer::new(bytes, message))
}

/// [`decode`], leaving out `metadata.managedFields`: never built, rather
/// than built and dropped (they are about half of a Pod's bytes).
pub fn decode_without_managed_fields<T: DeserializeOwned>(
    message: &'static Message,
    bytes: &[u8],
) -> Result<T, Error> {
    T::deserialize(de::MessageDeserializer::new(bytes, message).without_managed_fields())
}

/// A `k8s\0` + `runtime.Unknown` envelope, opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    /// The object's message.
    pub raw: &'a [u8],
}

/// Opens the envelope around an encoded object or list.
pub fn open_envelope(bytes: &[u8]) -> Result<Envelope<'_>, Error> {
    let body = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| Error::new("missing the k8s\\0 prefix: not a Kubernetes protobuf object"))?;
    let mut envelope = Envelope {
        api_version: "",
        kind: "",
        raw: &[],
    };
    let mut r = wire::Reader::new(body);
    while !r.is_empty() {
        match r.field()? {
            (1, wire::Value::Len(type_meta)) => {
                envelope.api_version = wire::find_str(type_meta, 1)?;
                envelope.kind = wire::find_str(type_meta, 2)?;
            }
            (2, wire::Value::Len(raw)) => envelope.raw = raw,
            (3, wire::Value::Len(encoding)) if !encoding.is_empty() => {
                return Err(Error::new("content encodings are not supported"));
            }
            _ => {}
        }
    }
    Ok(envelope)
}

/// A list message (`PodList` etc.: `{metadata = 1, items = 2}`), split.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListParts<'a> {
    pub resource_version: &'a str,
    pub continue_token: &'a str,
    /// Each item's message.
    pub items: Vec<&'a [u8]>,
}

/// Splits a list's message (an envelope's `raw`) into its items.
pub fn split_list(raw: &[u8]) -> Result<ListParts<'_>, Error> {
    let mut list = ListParts::default();
    let mut r = wire::Reader::new(raw);
    while !r.is_empty() {
        match r.field()? {
            // ListMeta: {selfLink = 1, resourceVersion = 2, continue = 3, remainingItemCount = 4}
            (1, wire::Value::Len(meta)) => {
                list.resource_version = wire::find_str(meta, 2)?;
                list.continue_token = wire::find_str(meta, 3)?;
            }
            (2, wire::Value::Len(item)) => list.items.push(item),
            _ => {}
        }
    }
    Ok(list)
}

/// A watch frame (`metav1.WatchEvent`), split: its type and the envelope
/// bytes of its object.
pub fn split_watch_event(frame: &[u8]) -> Result<(&str, &[u8]), Error> {
    let kind = wire::find_str(frame, 1)?;
    let object = wire::find_bytes(frame, 2)?.unwrap_or_default();
    let raw = wire::find_bytes(object, 1)?.unwrap_or_default();
    Ok((kind, raw))
}

/// What the reflector needs to know about an object without decoding it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub resource_version: &'a str,
}

/// Reads `metadata` (field 1 of every kind; ObjectMeta `{name = 1,
/// namespace = 3, uid = 5, resourceVersion = 6}`) of an object's message.
pub fn identity(raw: &[u8]) -> Result<Identity<'_>, Error> {
    let meta = wire::find_bytes(raw, 1)?.unwrap_or_default();
    let mut id = Identity::default();
    let mut r = wire::Reader::new(meta);
    while !r.is_empty() {
        match r.field()? {
            (1, wire::Value::Len(b)) => id.name = wire::utf8(b)?,
            (3, wire::Value::Len(b)) => id.namespace = wire::utf8(b)?,
            (5, wire::Value::Len(b)) => id.uid = wire::utf8(b)?,
            (6, wire::Value::Len(b)) => id.resource_version = wire::utf8(b)?,
            _ => {}
        }
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    use super::*;

    /// Field `n` as a length-delimited protobuf field.
    fn len_field(n: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(n << 3) | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn built_in_kinds_have_tables_and_other_types_do_not() {
        assert_eq!(
            message_for::<Pod>().map(|m| m.name),
            Some("io.k8s.api.core.v1.Pod")
        );
        assert!(message_for::<String>().is_none());
    }

    #[test]
    fn a_config_map_decodes_with_json_semantics() {
        // ObjectMeta{name = 1: "cm", generateName = 2: "" (a zero Go writes
        // and JSON omits), creationTimestamp = 8: {seconds = 1: 1_700_000_000}}
        let mut meta = len_field(1, b"cm");
        meta.extend(len_field(2, b""));
        meta.extend(len_field(8, &[0x08, 0x80, 0xe2, 0xcf, 0xaa, 0x06]));
        let mut cm = len_field(1, &meta);
        // data = 2: {"k": "v"} as one map entry
        let mut entry = len_field(1, b"k");
        entry.extend(len_field(2, b"v"));
        cm.extend(len_field(2, &entry));
        let decoded: ConfigMap = decode(message_for::<ConfigMap>().unwrap(), &cm).unwrap();
        let expected: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm", "creationTimestamp": "2023-11-14T22:13:20Z"},
            "data": {"k": "v"},
        }))
        .unwrap();
        assert_eq!(decoded, expected);
    }

    #[test]
    fn bad_bytes_are_errors_that_say_where() {
        let cm = len_field(1, &len_field(1, &[0xff, 0xfe]));
        let err = decode::<ConfigMap>(message_for::<ConfigMap>().unwrap(), &cm).unwrap_err();
        assert!(err.to_string().contains("ConfigMap.metadata"), "{err}");
        assert!(open_envelope(b"{\"kind\":\"Pod\"}").is_err());
        assert!(decode::<ConfigMap>(message_for::<ConfigMap>().unwrap(), &[0x0a, 0x09]).is_err());
    }

    /// A message built from fields named by their JSON names in `message`'s
    /// table, so the test reads like the JSON it must match.
    struct Builder {
        message: &'static Message,
        bytes: Vec<u8>,
    }

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    impl Builder {
        fn new(message: &'static Message) -> Self {
            Self {
                message,
                bytes: Vec::new(),
            }
        }

        fn field(&self, json: &str) -> &'static schema::Field {
            self.message
                .fields
                .iter()
                .find(|f| f.json == json)
                .unwrap_or_else(|| panic!("{} has no field {json}", self.message.name))
        }

        /// The table of message field `json`.
        fn inner(&self, json: &str) -> &'static Message {
            match self.field(json).kind {
                schema::Kind::Message(m) => m,
                ref other => panic!("{json} is {other:?}"),
            }
        }

        fn bytes(mut self, json: &str, value: &[u8]) -> Self {
            let number = self.field(json).number;
            varint(u64::from(number) << 3 | 2, &mut self.bytes);
            varint(value.len() as u64, &mut self.bytes);
            self.bytes.extend_from_slice(value);
            self
        }

        fn int(mut self, json: &str, value: i64) -> Self {
            let number = self.field(json).number;
            varint(u64::from(number) << 3, &mut self.bytes);
            varint(value as u64, &mut self.bytes);
            self
        }

        fn message(self, json: &str, build: impl FnOnce(Builder) -> Builder) -> Self {
            let inner = build(Builder::new(self.inner(json))).bytes;
            self.bytes(json, &inner)
        }
    }

    /// A map entry `{key = 1, value = 2}` with a `Quantity` value.
    fn quantity_entry(key: &str, quantity: &str) -> Vec<u8> {
        let mut entry = len_field(1, key.as_bytes());
        entry.extend(len_field(2, &len_field(1, quantity.as_bytes())));
        entry
    }

    #[test]
    fn inline_fields_int_or_string_quantities_and_zeros_decode_like_json() {
        let pod = Builder::new(message_for::<Pod>().unwrap())
            .message("metadata", |m| {
                m.bytes("name", b"p").bytes("generateName", b"")
            })
            .message("spec", |spec| {
                spec.message("volumes", |v| {
                    // `VolumeSource` is inline: its `emptyDir` is a key of the volume.
                    v.bytes("name", b"scratch").message("", |src| {
                        src.message("emptyDir", |e| e.bytes("sizeLimit", &len_field(1, b"1Gi")))
                    })
                })
                .message("containers", |c| {
                    c.bytes("name", b"c")
                        .bytes("args", b"--a")
                        .bytes("args", b"")
                        .message("ports", |p| p.int("containerPort", 80).int("hostPort", 0))
                        .message("livenessProbe", |probe| {
                            probe.message("", |h| {
                                h.message("tcpSocket", |t| {
                                    // IntOrString {type = 1 (string), strVal = "http"}
                                    let mut port = vec![0x08, 0x01];
                                    port.extend(len_field(3, b"http"));
                                    t.bytes("port", &port)
                                })
                            })
                        })
                        .message("resources", |r| {
                            r.bytes("limits", &quantity_entry("cpu", "500m"))
                        })
                })
                // A pointer (`*int64`): a zero is a value.
                .int("activeDeadlineSeconds", 0)
                // A plain bool with omitempty: Go writes false, JSON omits it.
                .int("hostNetwork", 0)
                // A negative int32, sign-extended on the wire.
                .int("priority", -5)
            })
            .bytes;
        let decoded: Pod = decode(message_for::<Pod>().unwrap(), &pod).unwrap();
        let expected: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
                "containers": [{
                    "name": "c",
                    "args": ["--a", ""],
                    "ports": [{"containerPort": 80}],
                    "livenessProbe": {"tcpSocket": {"port": "http"}},
                    "resources": {"limits": {"cpu": "500m"}},
                }],
                "activeDeadlineSeconds": 0,
                "priority": -5,
            },
        }))
        .unwrap();
        assert_eq!(decoded, expected);
    }

    #[test]
    fn managed_fields_can_be_skipped_while_decoding() {
        let cm = Builder::new(message_for::<ConfigMap>().unwrap())
            .message("metadata", |m| {
                m.bytes("name", b"cm").message("managedFields", |f| {
                    f.bytes("manager", b"kubectl")
                        .bytes("fieldsV1", &len_field(1, br#"{"f:data":{}}"#))
                })
            })
            .bytes;
        let table = message_for::<ConfigMap>().unwrap();
        let full: ConfigMap = decode(table, &cm).unwrap();
        let managed = full.metadata.managed_fields.as_deref().unwrap_or_default();
        assert_eq!(managed.len(), 1);
        assert_eq!(
            managed[0].fields_v1.as_ref().map(|f| &f.0),
            Some(&serde_json::json!({"f:data": {}}))
        );
        let stripped: ConfigMap = decode_without_managed_fields(table, &cm).unwrap();
        assert_eq!(stripped.metadata.managed_fields, None);
        assert_eq!(stripped.metadata.name.as_deref(), Some("cm"));
    }

    #[test]
    fn a_view_of_a_kind_decodes_from_its_table_and_skips_what_it_leaves_out() {
        // A view (see `InformerFactory::view_informer`): the Pod's metadata
        // and status, no spec.
        #[derive(Debug, serde::Deserialize)]
        struct View {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            status: Option<k8s_openapi::api::core::v1::PodStatus>,
        }
        let pod = Builder::new(message_for::<Pod>().unwrap())
            .message("metadata", |m| m.bytes("name", b"p"))
            .message("spec", |spec| {
                spec.message("containers", |c| {
                    c.bytes("name", b"tensorflow").message("env", |e| {
                        e.bytes("name", b"TF_CONFIG").bytes("value", b"{}")
                    })
                })
            })
            .message("status", |s| s.bytes("phase", b"Running"))
            .bytes;
        let view: View =
            decode_without_managed_fields(message_for::<Pod>().unwrap(), &pod).unwrap();
        assert_eq!(view.metadata.name.as_deref(), Some("p"));
        assert_eq!(
            view.status.and_then(|s| s.phase).as_deref(),
            Some("Running")
        );
    }

    #[test]
    fn a_pods_scheduling_group_from_kubernetes_1_37_decodes() {
        // `spec.schedulingGroup` (field 43, 1.36+): the gang a Pod joins
        // (`src/tfjob/integrations/gang/mod.rs`). Our k8s-openapi types are 1.33's, so it is
        // read as JSON, as a client of the raw object would.
        let pod = Builder::new(message_for::<Pod>().unwrap())
            .message("metadata", |m| m.bytes("name", b"p"))
            .message("spec", |spec| {
                spec.message("schedulingGroup", |g| g.bytes("podGroupName", b"job"))
            })
            .bytes;
        let decoded: serde_json::Value = decode(message_for::<Pod>().unwrap(), &pod).unwrap();
        assert_eq!(
            decoded["spec"]["schedulingGroup"],
            serde_json::json!({"podGroupName": "job"})
        );
    }

    #[test]
    fn unknown_fields_are_skipped_like_unknown_json_keys() {
        // Field 15 of the ConfigMap does not exist (a newer server's field).
        let mut cm = Builder::new(message_for::<ConfigMap>().unwrap())
            .message("metadata", |m| m.bytes("name", b"cm"))
            .bytes;
        cm.extend(len_field(15, b"from the future"));
        let decoded: ConfigMap = decode(message_for::<ConfigMap>().unwrap(), &cm).unwrap();
        assert_eq!(decoded.metadata.name.as_deref(), Some("cm"));
    }
}
