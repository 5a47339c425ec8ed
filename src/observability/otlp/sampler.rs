//! Which reconciles are traced: the standard `OTEL_TRACES_SAMPLER` and
//! `OTEL_TRACES_SAMPLER_ARG`, checked at startup.
//!
//! The OpenTelemetry SDK's counterpart is its own reading of the same
//! variables (`opentelemetry_sdk::trace::Config::default`, Go's
//! `sdk/trace` `samplerFromEnv`). The Rust SDK falls back to tracing every
//! reconcile on a value it cannot read and says so only in a log line
//! emitted while the provider is built, before the operator's log exists;
//! a typo such as `OTEL_TRACES_SAMPLER_ARG=0,1` would silently trace
//! everything. Here a value that is not one of the specification's is a
//! startup error instead. (Go's SDK also refuses such values, though only
//! with a log line.)
use opentelemetry_sdk::trace::Sampler;

/// The samplers of the specification this SDK implements.
const KNOWN: &str = "always_on, always_off, traceidratio, parentbased_always_on, \
                     parentbased_always_off, parentbased_traceidratio";

/// Why the sampler variables were refused.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error(
        "OTEL_TRACES_SAMPLER={0:?} is not a sampler the operator implements: use one of {KNOWN}"
    )]
    Unknown(String),
    #[error(
        "OTEL_TRACES_SAMPLER_ARG={arg:?} is not a ratio for OTEL_TRACES_SAMPLER={sampler}: \
         give a number from 0 (no reconcile traced) to 1 (every reconcile)"
    )]
    Ratio { sampler: String, arg: String },
}

/// The sampler the variables name; unset, the specification's default
/// (`parentbased_always_on`: every reconcile, since each is a root).
pub fn from_env() -> Result<Sampler, SamplerError> {
    let sampler = std::env::var("OTEL_TRACES_SAMPLER").ok();
    let arg = std::env::var("OTEL_TRACES_SAMPLER_ARG").ok();
    parse(sampler.as_deref(), arg.as_deref())
}

/// [`from_env`] on given values. A missing ratio is 1, as the specification
/// says; an empty sampler is unset.
pub fn parse(sampler: Option<&str>, arg: Option<&str>) -> Result<Sampler, SamplerError> {
    let ratio = |name: &str| -> Result<f64, SamplerError> {
        let Some(arg) = arg.map(str::trim).filter(|a| !a.is_empty()) else {
            return Ok(1.0);
        };
        arg.parse::<f64>()
            .ok()
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| SamplerError::Ratio {
                sampler: name.to_owned(),
                arg: arg.to_owned(),
            })
    };
    let parent_based = |root: Sampler| Sampler::ParentBased(Box::new(root));
    Ok(match sampler.map(str::trim).unwrap_or_default() {
        "" | "parentbased_always_on" => parent_based(Sampler::AlwaysOn),
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "parentbased_always_off" => parent_based(Sampler::AlwaysOff),
        name @ "traceidratio" => Sampler::TraceIdRatioBased(ratio(name)?),
        name @ "parentbased_traceidratio" => parent_based(Sampler::TraceIdRatioBased(ratio(name)?)),
        other => return Err(SamplerError::Unknown(other.to_owned())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(sampler: Option<&str>, arg: Option<&str>) -> String {
        format!("{:?}", parse(sampler, arg).unwrap())
    }

    #[test]
    fn the_standard_samplers_are_read_and_a_bad_name_or_ratio_is_refused() {
        assert_eq!(shown(None, None), "ParentBased(AlwaysOn)");
        assert_eq!(shown(Some("always_off"), Some("0.5")), "AlwaysOff");
        assert_eq!(
            shown(Some("traceidratio"), Some("0")),
            "TraceIdRatioBased(0.0)"
        );
        assert_eq!(
            shown(Some("parentbased_traceidratio"), Some(" 0.1 ")),
            "ParentBased(TraceIdRatioBased(0.1))"
        );
        // What Helm renders a tiny ratio as.
        assert_eq!(
            shown(Some("parentbased_traceidratio"), Some("1e-05")),
            "ParentBased(TraceIdRatioBased(1e-5))"
        );
        assert_eq!(
            shown(Some("traceidratio"), None),
            "TraceIdRatioBased(1.0)",
            "a missing ratio is 1"
        );

        let unknown = parse(Some("jaeger_remote"), None).unwrap_err().to_string();
        assert!(
            unknown.contains("OTEL_TRACES_SAMPLER=\"jaeger_remote\""),
            "{unknown}"
        );
        assert!(unknown.contains("parentbased_traceidratio"), "{unknown}");
        for bad in ["0,1", "10%", "-0.1", "1.5", "NaN"] {
            let error = parse(Some("parentbased_traceidratio"), Some(bad))
                .unwrap_err()
                .to_string();
            assert!(error.contains("OTEL_TRACES_SAMPLER_ARG"), "{error}");
            assert!(error.contains(bad), "{error}");
        }
    }
}
