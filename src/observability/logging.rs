//! Log setup in the shape of controller-runtime's `pkg/log/zap` options:
//! `--zap-log-level` (`debug`, `info`, `error`, a verbosity number, or here
//! any tracing filter) and a flat JSON format, one object per line, in which
//! the fields of the enclosing spans (`controller`, `namespace`, `name`,
//! `reconcileID` of a reconcile) sit at the top level beside `ts`, `level`
//! and `msg`, as zap's `WithValues` puts them: log pipelines (Loki, Cloud
//! Logging, Elasticsearch) index top-level keys, not tracing's nested `spans`.
use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The tracing filter for a `--zap-log-level` value.
///
/// zap's names map to tracing's levels (`panic` and `dpanic` log at `error`);
/// a number is zap's verbosity (`1` debug, `2` and up trace, `0` info);
/// anything else is taken as an `EnvFilter` directive list, e.g.
/// `info,tfjob_operator=debug`.
pub fn log_filter(level: &str) -> String {
    let level = level.trim();
    match level.to_ascii_lowercase().as_str() {
        "panic" | "dpanic" | "fatal" => "error".to_owned(),
        "warning" => "warn".to_owned(),
        lower @ ("error" | "warn" | "info" | "debug" | "trace") => lower.to_owned(),
        other => match other.parse::<u8>() {
            Ok(0) => "info".to_owned(),
            Ok(1) => "debug".to_owned(),
            Ok(_) => "trace".to_owned(),
            Err(_) => level.to_owned(),
        },
    }
}

/// Formats each event as one flat JSON object. Use with
/// `tracing_subscriber::fmt::format::JsonFields` as the field formatter, so
/// span fields are stored as JSON and can be lifted to the top level.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert(
            "ts".into(),
            Value::String(jiff::Timestamp::now().to_string()),
        );
        line.insert(
            "level".into(),
            Value::String(meta.level().as_str().to_ascii_lowercase()),
        );
        line.insert("msg".into(), Value::String(String::new()));
        line.insert("logger".into(), Value::String(meta.target().to_owned()));
        // Outermost span first, so an inner span's field wins, and the
        // event's own fields win over all of them.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    // `otel.*` fields are instructions to the trace exporter
                    // (a span's name, kind, status), not data to log.
                    line.extend(fields.into_iter().filter(|(k, _)| !k.starts_with("otel.")));
                }
            }
        }
        event.record(&mut FieldVisitor(&mut line));
        // ts, level, msg and logger first (a Map without serde_json's
        // `preserve_order` sorts its keys), then the rest by name.
        let mut text = String::from("{");
        for key in LEADING {
            if let Some(value) = line.remove(key) {
                push_entry(&mut text, key, &value)?;
            }
        }
        for (key, value) in &line {
            push_entry(&mut text, key, value)?;
        }
        text.push('}');
        writeln!(writer, "{text}")
    }
}

/// The keys every line starts with, in this order (zap's production layout).
const LEADING: [&str; 4] = ["ts", "level", "msg", "logger"];

fn push_entry(out: &mut String, key: &str, value: &Value) -> fmt::Result {
    if out.len() > 1 {
        out.push(',');
    }
    out.push_str(&serde_json::to_string(key).map_err(|_| fmt::Error)?);
    out.push(':');
    out.push_str(&serde_json::to_string(value).map_err(|_| fmt::Error)?);
    Ok(())
}

/// Collects an event's fields as JSON values (`message` becomes `msg`).
struct FieldVisitor<'a>(&'a mut Map<String, Value>);

impl FieldVisitor<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        let key = match field.name() {
            "message" => "msg",
            name => name,
        };
        self.0.insert(key.to_owned(), value);
    }
}

impl Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields;

    use super::*;

    #[test]
    fn zap_levels_and_verbosities_map_to_tracing_filters() {
        for (zap, filter) in [
            ("debug", "debug"),
            ("INFO", "info"),
            ("error", "error"),
            ("panic", "error"),
            ("warning", "warn"),
            ("0", "info"),
            ("1", "debug"),
            ("4", "trace"),
            ("info,tfjob_operator=debug", "info,tfjob_operator=debug"),
        ] {
            assert_eq!(log_filter(zap), filter, "{zap}");
        }
    }

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn json_lines_are_flat_with_the_reconciles_span_fields_at_the_top() {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(buffer.clone())
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("manager", controller = "outer", pod = "op-0");
            let _outer = outer.enter();
            let span = tracing::info_span!(
                "reconcile",
                controller = "tfjob",
                namespace = "ns",
                name = "job",
                reconcileID = 7_u64,
                otel.status_code = tracing::field::Empty
            );
            span.record("otel.status_code", "error");
            let _inner = span.enter();
            tracing::warn!(attempt = 2, ok = false, "status conflict");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with(r#"{"ts":""#), "{text}");
        assert!(
            text.contains(r#"","level":"warn","msg":"status conflict","logger":"#),
            "{text}"
        );
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        let object = line.as_object().unwrap();
        assert_eq!(object["level"], "warn");
        assert_eq!(object["msg"], "status conflict");
        assert_eq!(object["controller"], "tfjob", "the inner span wins");
        assert_eq!(object["pod"], "op-0");
        assert_eq!(object["namespace"], "ns");
        assert_eq!(object["name"], "job");
        assert_eq!(object["reconcileID"], 7);
        assert_eq!(object["attempt"], 2);
        assert_eq!(object["ok"], false);
        assert!(!object.contains_key("otel.status_code"), "{text}");
        assert!(object["ts"].as_str().unwrap().ends_with('Z'), "{text}");
        assert!(
            object.values().all(|v| !v.is_object() && !v.is_array()),
            "nothing nested: {text}"
        );
    }
}
