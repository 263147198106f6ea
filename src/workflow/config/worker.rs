//! `worker.*` (spec Appendix A): SSH worker hosts and the per-host cap.

use super::section::Section;
use super::ConfigError;

/// Default of `worker.ssh_command_timeout_ms`.
pub const DEFAULT_SSH_COMMAND_TIMEOUT_MS: u64 = 30_000;
/// Default of `worker.ssh_sessions_per_connection`: sshd's default `MaxSessions`.
pub const DEFAULT_SSH_SESSIONS_PER_CONNECTION: u32 = 10;
/// Default of `worker.orphan_grace_ms` (10 minutes).
pub const DEFAULT_ORPHAN_GRACE_MS: u64 = 600_000;

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
    /// `worker.ssh_command_timeout_ms`: the deadline of every short remote command (workspace
    /// scripts, probes, signals, master start) and of a remote start; a host whose commands time
    /// out is marked down like an unreachable one.
    pub ssh_command_timeout_ms: u64,
    /// `worker.ssh_sessions_per_connection`: sessions multiplexed over one SSH connection before
    /// another is opened to the host (keep it at most the server's `MaxSessions`).
    pub ssh_sessions_per_connection: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            ssh_hosts: Vec::new(),
            max_concurrent_agents_per_host: None,
            orphan_grace_ms: DEFAULT_ORPHAN_GRACE_MS,
            ssh_command_timeout_ms: DEFAULT_SSH_COMMAND_TIMEOUT_MS,
            ssh_sessions_per_connection: DEFAULT_SSH_SESSIONS_PER_CONNECTION,
        }
    }
}

/// The keys of the section.
pub(crate) const KEYS: &[&str] = &[
    "ssh_hosts",
    "max_concurrent_agents_per_host",
    "orphan_grace_ms",
    "ssh_command_timeout_ms",
    "ssh_sessions_per_connection",
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
            ssh_command_timeout_ms: worker
                .positive("ssh_command_timeout_ms")?
                .unwrap_or(DEFAULT_SSH_COMMAND_TIMEOUT_MS),
            ssh_sessions_per_connection: worker
                .positive_u32("ssh_sessions_per_connection")?
                .unwrap_or(DEFAULT_SSH_SESSIONS_PER_CONNECTION),
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
            "worker: {ssh_hosts: [build-1, 'baton@10.0.0.5', 'ssh://h:2222'], max_concurrent_agents_per_host: 4, ssh_command_timeout_ms: 5000, ssh_sessions_per_connection: 4, orphan_grace_ms: 5000}",
        )
        .unwrap();
        assert_eq!(w.orphan_grace_ms, 5_000);
        assert_eq!(parse("{}").unwrap().orphan_grace_ms, 600_000);
        assert_eq!(w.ssh_hosts, ["build-1", "baton@10.0.0.5", "ssh://h:2222"]);
        assert_eq!(w.max_concurrent_agents_per_host, Some(4));
        assert_eq!(w.ssh_command_timeout_ms, 5000);
        assert_eq!(w.ssh_sessions_per_connection, 4);
        let d = parse("{}").unwrap();
        assert_eq!(d.ssh_command_timeout_ms, 30_000);
        assert_eq!(d.ssh_sessions_per_connection, 10);
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
            (
                "worker: {ssh_command_timeout_ms: 0}",
                "ssh_command_timeout_ms",
            ),
            (
                "worker: {ssh_sessions_per_connection: 0}",
                "ssh_sessions_per_connection",
            ),
            ("worker: {ssh_sessions_per_connection: many}", "many"),
        ] {
            let e = parse(yaml).unwrap_err();
            assert_eq!(e.class, "invalid_config", "{yaml}");
            assert!(e.message.contains("worker."), "{e}");
            assert!(e.message.contains(needle), "{yaml}: {e}");
        }
    }
}
