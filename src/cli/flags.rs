//! Flag values spelled as controller-runtime operators spell them.
//!
//! - Bind addresses as in `metricsserver.Options.BindAddress` and
//!   `manager.Options.HealthProbeBindAddress`: `:8080` (every interface),
//!   `host:port`, `[::1]:8080`, and `0` to switch the server off.
//! - The leader-election namespace defaults as in controller-runtime's
//!   `leaderelection` package: the Pod's own namespace, read from the
//!   ServiceAccount mount.
//! - Durations as Go's `time.ParseDuration` reads them (`15s`, `1m30s`,
//!   `500ms`), the form of kube-controller-manager's `--leader-elect-*`
//!   flags; a bare number is seconds.
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

/// Where the in-cluster ServiceAccount mount keeps the Pod's namespace.
pub const SERVICE_ACCOUNT_NAMESPACE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// A server's bind address, or off (`0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindAddress {
    Off,
    At(SocketAddr),
}

impl BindAddress {
    /// The address to bind, `None` when off.
    pub fn addr(self) -> Option<SocketAddr> {
        match self {
            Self::Off => None,
            Self::At(addr) => Some(addr),
        }
    }
}

impl fmt::Display for BindAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Off => f.write_str("0"),
            Self::At(addr) => addr.fmt(f),
        }
    }
}

/// Why a bind address was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid bind address {input:?}: {reason} (want \":8080\", \"host:8080\", \"[::1]:8080\" or \"0\" for off)"
)]
pub struct BindAddressError {
    input: String,
    reason: &'static str,
}

impl FromStr for BindAddress {
    type Err = BindAddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| BindAddressError {
            input: s.to_owned(),
            reason,
        };
        if s == "0" {
            return Ok(Self::Off);
        }
        // Go's ":8080" listens on every interface of both families: `[::]`,
        // which the listener binds dual-stack, falling back to IPv4's
        // 0.0.0.0 where IPv6 is off (`crate::runtime::manager::listen`).
        if let Some(port) = s.strip_prefix(':').filter(|p| !p.contains(':')) {
            let port = port.parse::<u16>().map_err(|_| err("bad port"))?;
            return Ok(Self::At(SocketAddr::from((
                std::net::Ipv6Addr::UNSPECIFIED,
                port,
            ))));
        }
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(Self::At(addr));
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| err("no port"))?;
        if host.is_empty() || host.contains(':') {
            return Err(err("an IPv6 address needs brackets"));
        }
        port.parse::<u16>().map_err(|_| err("bad port"))?;
        // A host name: the first address it resolves to (as Go's net.Listen).
        let addr = s
            .to_socket_addrs()
            .map_err(|_| err("the host name does not resolve"))?
            .next()
            .ok_or_else(|| err("the host name does not resolve"))?;
        Ok(Self::At(addr))
    }
}

/// The leader-election namespace: the flag's value if set, else the Pod's
/// namespace from `service_account_namespace` (in a cluster), else
/// `"default"` (out of a cluster; controller-runtime fails there instead, but
/// `tfjob-operator run` on a laptop should just work).
pub fn leader_election_namespace(flag: Option<&str>, service_account_namespace: &Path) -> String {
    flag.map(str::trim)
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            std::fs::read_to_string(service_account_namespace)
                .ok()
                .map(|ns| ns.trim().to_owned())
                .filter(|ns| !ns.is_empty())
        })
        .unwrap_or_else(|| "default".to_owned())
}

/// A duration flag: `15s`, `1m30s`, `500ms`, `2h`, or a bare number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

/// Why a duration was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {input:?}: {reason} (want e.g. \"15s\", \"1m30s\" or \"500ms\")")]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| DurationError {
            input: s.to_owned(),
            reason,
        };
        if let Ok(seconds) = s.parse::<f64>() {
            return Duration::try_from_secs_f64(seconds)
                .map(Self)
                .map_err(|_| err("negative or too large"));
        }
        let mut rest = s;
        let mut total = Duration::ZERO;
        if rest.is_empty() {
            return Err(err("empty"));
        }
        while !rest.is_empty() {
            let number_len = rest
                .find(|c: char| !c.is_ascii_digit() && c != '.')
                .ok_or(err("a number without a unit"))?;
            let (number, tail) = rest.split_at(number_len);
            let number: f64 = number.parse().map_err(|_| err("not a number"))?;
            let unit_len = tail
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(tail.len());
            let (unit, tail) = tail.split_at(unit_len);
            let unit_seconds = match unit {
                "ms" => 0.001,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return Err(err("units are ms, s, m and h")),
            };
            total +=
                Duration::try_from_secs_f64(number * unit_seconds).map_err(|_| err("too large"))?;
            rest = tail;
        }
        Ok(Self(total))
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> BindAddress {
        BindAddress::At(s.parse().unwrap())
    }

    #[test]
    fn bind_addresses_parse_as_controller_runtime_spells_them() {
        for (input, want) in [
            ("0", BindAddress::Off),
            (":8080", at("[::]:8080")),
            ("127.0.0.1:9090", at("127.0.0.1:9090")),
            ("0.0.0.0:8081", at("0.0.0.0:8081")),
            ("[::1]:8080", at("[::1]:8080")),
            ("[::]:8080", at("[::]:8080")),
            (":0", at("[::]:0")),
        ] {
            assert_eq!(input.parse::<BindAddress>(), Ok(want), "{input}");
        }
    }

    #[test]
    fn a_host_name_resolves_to_its_first_address() {
        let addr = "localhost:8080".parse::<BindAddress>().unwrap();
        let BindAddress::At(addr) = addr else {
            panic!("localhost:8080 parsed as off");
        };
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_eq!(addr.port(), 8080);
    }

    #[test]
    fn bad_bind_addresses_are_refused_with_the_reason() {
        for (input, reason) in [
            ("8080", "no port"),
            (":http", "bad port"),
            (":70000", "bad port"),
            ("::1:8080", "an IPv6 address needs brackets"),
            ("localhost:", "bad port"),
            ("", "no port"),
        ] {
            let err = input.parse::<BindAddress>().unwrap_err();
            assert_eq!(err.reason, reason, "{input}");
            assert!(err.to_string().contains("\"0\" for off"), "{err}");
        }
    }

    #[test]
    fn the_off_address_prints_as_zero_and_binds_nothing() {
        assert_eq!(BindAddress::Off.to_string(), "0");
        assert_eq!(BindAddress::Off.addr(), None);
        assert_eq!(at("[::1]:80").to_string(), "[::1]:80");
    }

    #[test]
    fn the_leader_election_namespace_is_the_flag_then_the_pods_then_default() {
        let dir = std::env::temp_dir().join(format!("sa-ns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("namespace");
        std::fs::write(&file, "kubeflow\n").unwrap();
        let missing = dir.join("missing");
        assert_eq!(leader_election_namespace(Some("ops"), &file), "ops");
        assert_eq!(leader_election_namespace(None, &file), "kubeflow");
        assert_eq!(leader_election_namespace(Some(""), &file), "kubeflow");
        assert_eq!(leader_election_namespace(None, &missing), "default");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn durations_read_as_gos_parse_duration_reads_them() {
        let d = |s: &str| s.parse::<GoDuration>().map(|d| d.0);
        assert_eq!(d("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(d("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(d("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(d("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(
            d("20"),
            Ok(Duration::from_secs(20)),
            "a bare number is seconds"
        );
        for bad in ["", "15x", "s", "-3s", "1m-2s", "-1"] {
            let e = d(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad:?}: {e}");
        }
    }
}
