//! A real Prometheus (built by `e2e/tools.sh`) scraping operators started by
//! a test, every second, with the chart's alert rules loaded: the parser and
//! query engine our users run, instead of string matching on `/metrics`.
//! Dropping a [`Prometheus`] kills its process.
#![allow(dead_code)] // Each test module uses a different subset.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::cluster::{bin_dir, cluster_dir, wait_until};
use crate::loopback::http_get;

/// The scrape job name, as in the chart's rules (`job="tfjob-operator"`).
pub const JOB: &str = "tfjob-operator";

/// The chart's alert rules, loaded into every Prometheus started here.
pub static RULES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    crate::support::repo_file("charts/tfjob-operator/files/prometheus-rules.yaml")
});

pub struct Prometheus {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus scraping `/metrics` on each of `metrics_ports`
    /// (loopback) as job [`JOB`], every second, with [`RULES.as_str()`] loaded.
    pub fn start(metrics_ports: &[u16]) -> Self {
        Self::start_with(metrics_ports, None)
    }

    /// [`start`](Self::start) for operators run with `--metrics-secure`:
    /// scrapes over https, sending `token` as its bearer token, and accepts
    /// the operator's self-signed certificate (`insecure_skip_verify`, what
    /// the chart's ServiceMonitor does by default).
    pub fn start_secure(metrics_ports: &[u16], token: &str) -> Self {
        Self::start_with(metrics_ports, Some(token))
    }

    fn start_with(metrics_ports: &[u16], token: Option<&str>) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        let dir = cluster_dir().join(format!("prometheus-{port}"));
        std::fs::create_dir_all(&dir).expect("the Prometheus dir");
        let targets: Vec<String> = metrics_ports
            .iter()
            .map(|p| format!("'127.0.0.1:{p}'"))
            .collect();
        let secure = match token {
            None => String::new(),
            Some(token) => {
                let file = dir.join("token");
                std::fs::write(&file, token).expect("the token file");
                [
                    "    scheme: https".to_owned(),
                    "    authorization:".to_owned(),
                    format!("      credentials_file: {}", file.display()),
                    "    tls_config:".to_owned(),
                    "      insecure_skip_verify: true\n".to_owned(),
                ]
                .join("\n")
            }
        };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: {JOB}\n{secure}    static_configs:\n      - targets: [{}]\n",
            targets.join(", "),
            rules = RULES.as_str(),
        );
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("the Prometheus config");
        let log = dir.join("prometheus.log");
        let file = std::fs::File::create(&log).expect("the Prometheus log file");
        let child = Command::new(bin_dir().join("prometheus"))
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::from(file.try_clone().expect("a log file handle")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("failed to start prometheus (built by `bash e2e/tools.sh`)");
        Self {
            child: Some(child),
            port,
            log,
        }
    }

    /// `GET /api/v1/<path>` (query already encoded): the `data` field, or
    /// `None` while Prometheus is not answering or answers with an error.
    pub fn api(&self, path: &str) -> Option<Value> {
        let (code, body) = http_get(self.port, &format!("/api/v1/{path}"))?;
        let mut reply: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && reply["status"] == "success").then(|| reply["data"].take())
    }

    /// Waits until every target has been scraped successfully `scrapes` times
    /// (judged by Prometheus' own `up` series).
    pub async fn wait_scraped(&self, targets: usize, scrapes: usize) {
        let query = format!("count_over_time(up{{job=\"{JOB}\"}}[5m]) >= {scrapes}");
        let log = self.log.display().to_string();
        wait_until(
            &format!("Prometheus to scrape {targets} target(s) {scrapes} times (log: {log})"),
            Duration::from_secs(60),
            || async {
                let healthy = self.query(&query).await?;
                (healthy.len() == targets).then_some(())
            },
        )
        .await;
    }

    /// An instant query's result vector (`None` if it failed to evaluate).
    pub async fn query(&self, expr: &str) -> Option<Vec<Value>> {
        let data = self.api(&format!("query?query={}", url_encode(expr)))?;
        match &data["result"] {
            Value::Array(v) => Some(v.clone()),
            _ => None,
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Percent-encodes a query parameter (RFC 3986 unreserved characters stay).
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
