//! `worker.*` (spec Appendix A): SSH worker hosts and the per-host cap.

use super::section::Section;
use super::ConfigError;

/// `worker.*`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// `worker.ssh_hosts`: SSH destinations exactly as passed to `ssh` (`build-1`,
    /// `baton@10.0.0.5`); empty = everything runs locally.
    pub ssh_hosts: Vec<String>,
    /// `worker.max_concurrent_agents_per_host`: a cap shared by every SSH host.
    pub max_concurrent_agents_per_host: Option<u32>,
    /// `worker.orphan_grace_ms`: after a restart, how long an issue whose previous agent could not
    /// be checked (its host did not answer) waits before it may run on another host.
    pub orphan_grace_ms: u64,
}

/// Default of `worker.orphan_grace_ms` (10 minutes).
pub const DEFAULT_ORPHAN_GRACE_MS: u64 = 600_000;

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            ssh_hosts: Vec::new(),
            max_concurrent_agents_per_host: None,
            orphan_grace_ms: DEFAULT_ORPHAN_GRACE_MS,
        }
    }
}

/// The keys of the section.
pub(crate) const KEYS: &[&str] = &[
    "ssh_hosts",
    "max_concurrent_agents_per_host",
    "orphan_grace_ms",
];

impl WorkerConfig {
    /// Parse and validate `worker.*`.
    pub(crate) fn parse(worker: &Section<'_>) -> Result<WorkerConfig, ConfigError> {
        let hosts = worker.string_list("ssh_hosts")?.unwrap_or_default();
        let mut ssh_hosts: Vec<String> = Vec::with_capacity(hosts.len());
        for h in hosts {
            if let Some(why) = bad_destination(&h) {
                return Err(worker.invalid(
                    "ssh_hosts",
                    &format!("SSH destinations ({why})"),
                    &format!("an entry {h:?}"),
                ));
            }
            if ssh_hosts.contains(&h) {
                return Err(worker.invalid(
                    "ssh_hosts",
                    "distinct SSH destinations",
                    &format!("{h:?} twice"),
                ));
            }
            ssh_hosts.push(h);
        }
        Ok(WorkerConfig {
            ssh_hosts,
            max_concurrent_agents_per_host: worker
                .positive_u32("max_concurrent_agents_per_host")?,
            orphan_grace_ms: worker
                .positive("orphan_grace_ms")?
                .unwrap_or(DEFAULT_ORPHAN_GRACE_MS),
        })
    }
}

/// Why `h` is not usable as an `ssh` destination argument (`None`: fine). A leading `-` would be
/// read as an option; whitespace and control characters never belong in a destination.
pub(crate) fn bad_destination(h: &str) -> Option<&'static str> {
    if h.is_empty() {
        Some("not empty")
    } else if h.starts_with('-') {
        Some("not starting with '-'")
    } else if h.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("no whitespace or control characters")
    } else if h.len() > 255 {
        Some("at most 255 bytes")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_yaml::Mapping;

    fn parse(yaml: &str) -> Result<WorkerConfig, ConfigError> {
        let m: Mapping = serde_yaml::from_str(yaml).unwrap();
        WorkerConfig::parse(&Section::new(&m, "worker")?)
    }

    #[test]
    fn defaults_to_local() {
        assert_eq!(parse("{}").unwrap(), WorkerConfig::default());
    }

    #[test]
    fn parses_hosts_and_cap() {
        let w = parse(
            "worker: {ssh_hosts: [build-1, 'baton@10.0.0.5', 'ssh://h:2222'], max_concurrent_agents_per_host: 4, orphan_grace_ms: 5000}",
        )
        .unwrap();
        assert_eq!(w.orphan_grace_ms, 5_000);
        assert_eq!(parse("{}").unwrap().orphan_grace_ms, 600_000);
        assert_eq!(w.ssh_hosts, ["build-1", "baton@10.0.0.5", "ssh://h:2222"]);
        assert_eq!(w.max_concurrent_agents_per_host, Some(4));
    }

    #[test]
    fn rejects_bad_values_naming_key_and_value() {
        for (yaml, needle) in [
            (
                "worker: {ssh_hosts: ['-oProxyCommand=x']}",
                "-oProxyCommand=x",
            ),
            ("worker: {ssh_hosts: ['a b']}", "a b"),
            ("worker: {ssh_hosts: ['']}", "\"\""),
            ("worker: {ssh_hosts: [a, a]}", "twice"),
            ("worker: {ssh_hosts: build-1}", "ssh_hosts"),
            ("worker: {max_concurrent_agents_per_host: 0}", "0"),
            ("worker: {max_concurrent_agents_per_host: -2}", "-2"),
            ("worker: {orphan_grace_ms: 0}", "orphan_grace_ms"),
        ] {
            let e = parse(yaml).unwrap_err();
            assert_eq!(e.class, "invalid_config", "{yaml}");
            assert!(e.message.contains("worker."), "{e}");
            assert!(e.message.contains(needle), "{yaml}: {e}");
        }
    }
}
