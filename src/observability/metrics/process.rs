//! The standard `process_*` metrics, read from `/proc/self` at scrape time.
//!
//! client_golang's process collector (registered by every controller-runtime
//! manager) exports CPU seconds, resident and virtual memory, open and
//! maximum file descriptors and the start time; alerts such as "operator
//! restarted" and "leaking fds" are written against these names. Linux only:
//! elsewhere (or if `/proc` is unreadable) the families are left out rather
//! than reported as zero.
use std::fmt;
use std::path::{Path, PathBuf};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::SharedRegistry;

/// Clock ticks per second in `/proc/<pid>/stat`: the kernel's `USER_HZ`,
/// fixed at 100 in the ABI of every architecture Kubernetes runs on
/// (client_golang's procfs makes the same assumption).
const USER_HZ: f64 = 100.0;

/// One reading of the process's numbers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_memory_bytes: f64,
    pub virtual_memory_bytes: f64,
    pub open_fds: f64,
    pub max_fds: Option<f64>,
    pub start_time_seconds: f64,
}

impl ProcessStats {
    /// Reads the process under `proc_dir` (e.g. `/proc/self`); `proc_root`
    /// holds `stat` with the boot time (`/proc`).
    pub fn read(proc_root: &Path, proc_dir: &Path) -> Option<Self> {
        let stat = std::fs::read_to_string(proc_dir.join("stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses: the
        // fields after it start behind the last ')'.
        let after_comm = &stat[stat.rfind(')')? + 1..];
        // After the name, field 3 (state) is index 0; utime is field 14,
        // stime 15, starttime 22.
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
        let cpu_ticks = field(14)? + field(15)?;
        let start_ticks = field(22)?;

        let status = std::fs::read_to_string(proc_dir.join("status")).ok()?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<f64>()
                        .ok()
                })
                .map(|v| v * 1024.0)
        };

        let boot_time = std::fs::read_to_string(proc_root.join("stat"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())?;

        let open_fds = std::fs::read_dir(proc_dir.join("fd")).ok()?.count() as f64;
        let max_fds = std::fs::read_to_string(proc_dir.join("limits"))
            .ok()
            .and_then(|limits| {
                limits
                    .lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3))
                    .and_then(|soft| soft.parse::<f64>().ok())
            });

        Some(Self {
            cpu_seconds: cpu_ticks / USER_HZ,
            // Kernel threads have neither; a user process has both.
            resident_memory_bytes: kib("VmRSS:")?,
            virtual_memory_bytes: kib("VmSize:")?,
            open_fds,
            max_fds,
            start_time_seconds: boot_time + start_ticks / USER_HZ,
        })
    }
}

/// Reads `/proc` on every scrape.
#[derive(Debug)]
pub struct ProcessCollector {
    proc_root: PathBuf,
    proc_dir: PathBuf,
}

impl ProcessCollector {
    /// A collector for this process.
    pub fn new() -> Self {
        Self {
            proc_root: PathBuf::from("/proc"),
            proc_dir: PathBuf::from("/proc/self"),
        }
    }

    /// Registers a collector for this process in `registry`.
    pub fn register(registry: &SharedRegistry) {
        registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .register_collector(Box::new(Self::new()));
    }
}

impl Default for ProcessCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(s) = ProcessStats::read(&self.proc_root, &self.proc_dir) else {
            return Ok(());
        };
        // The descriptor names counters without `_total`; the encoder adds it.
        let counter = encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(s.cpu_seconds).encode(counter)?;
        let mut gauges = vec![
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_memory_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                s.open_fds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                s.start_time_seconds,
            ),
        ];
        if let Some(max) = s.max_fds {
            gauges.push((
                "process_max_fds",
                "Maximum number of open file descriptors",
                max,
            ));
        }
        for (name, help, value) in gauges {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(value).encode(metric)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::{encode, new_registry};

    /// A fake `/proc` with one process whose name holds `) (` to trip naive parsers.
    fn fake_proc(dir: &Path) -> PathBuf {
        let pid = dir.join("42");
        std::fs::create_dir_all(pid.join("fd")).unwrap();
        for fd in ["0", "1", "2"] {
            std::fs::write(pid.join("fd").join(fd), "").unwrap();
        }
        std::fs::write(dir.join("stat"), "cpu  1 2 3\nbtime 1700000000\n").unwrap();
        // utime 250 + stime 50 ticks = 3 s; starttime 1234 ticks = 12.34 s after boot.
        std::fs::write(
            pid.join("stat"),
            "42 (tf) (op) S 1 42 42 0 -1 4194304 0 0 0 0 250 50 0 0 20 0 8 0 1234 999 7\n",
        )
        .unwrap();
        std::fs::write(
            pid.join("status"),
            "Name:\ttf\nVmSize:\t  2048 kB\nVmRSS:\t   512 kB\n",
        )
        .unwrap();
        std::fs::write(
            pid.join("limits"),
            "Limit                     Soft Limit           Hard Limit           Units\n\
             Max open files            1024                 4096                 files\n",
        )
        .unwrap();
        pid
    }

    #[test]
    fn stats_are_read_from_a_proc_tree() {
        let dir = std::env::temp_dir().join(format!("proc-test-{}", std::process::id()));
        let pid = fake_proc(&dir);
        let stats = ProcessStats::read(&dir, &pid).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            stats,
            ProcessStats {
                cpu_seconds: 3.0,
                resident_memory_bytes: 512.0 * 1024.0,
                virtual_memory_bytes: 2048.0 * 1024.0,
                open_fds: 3.0,
                max_fds: Some(1024.0),
                start_time_seconds: 1_700_000_012.34,
            }
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reports_every_process_family() {
        let registry = new_registry();
        ProcessCollector::register(&registry);
        let text = encode(&registry);
        for family in [
            "# TYPE process_cpu_seconds counter",
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(family), "missing {family} in:\n{text}");
        }
    }
}
