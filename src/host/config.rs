//! `worker.*` (spec Appendix A: SSH worker hosts and the per-host cap) and `sandbox.*` (spec
//! §15.5, applied by [`super::sandbox`]).

use std::path::PathBuf;

use serde::Deserialize;

use super::sandbox::SandboxConfig;
use crate::config::{bad_destination, ConfigError, Section};

/// `worker.*`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
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
    /// another is opened to the host (keep it at most the server's `MaxSessions`; sshd's default
    /// is 10).
    pub ssh_sessions_per_connection: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            ssh_hosts: Vec::new(),
            max_concurrent_agents_per_host: None,
            orphan_grace_ms: 600_000,
            ssh_command_timeout_ms: 30_000,
            ssh_sessions_per_connection: 10,
        }
    }
}

impl WorkerConfig {
    /// Read `worker.*`; every SSH destination must be usable and distinct.
    pub(crate) fn parse(s: &Section<'_>) -> Result<WorkerConfig, ConfigError> {
        let w: WorkerConfig = s.read()?;
        for (i, h) in w.ssh_hosts.iter().enumerate() {
            if let Some(why) = bad_destination(h) {
                let want = format!("SSH destinations ({why})");
                return Err(s.invalid("ssh_hosts", &want, &format!("an entry {h:?}")));
            }
            if w.ssh_hosts[..i].contains(h) {
                let got = format!("{h:?} twice");
                return Err(s.invalid("ssh_hosts", "distinct SSH destinations", &got));
            }
        }
        Ok(w)
    }
}

/// Read `sandbox.*`; `hidden` are the paths the agents must not see besides the workspace root
/// and home.
pub(crate) fn sandbox(s: &Section<'_>, hidden: Vec<PathBuf>) -> Result<SandboxConfig, ConfigError> {
    #[derive(Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        None,
        Bubblewrap,
    }
    #[derive(Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Network {
        Host,
        None,
    }
    Ok(SandboxConfig {
        bubblewrap: s.get::<Option<Kind>>("kind")? == Some(Kind::Bubblewrap),
        no_network: s.get::<Option<Network>>("network")? == Some(Network::None),
        writable: s.paths("writable")?,
        readable: s.paths("readable")?,
        hidden,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{test_env::EmptyEnv, FrontMatter};
    use std::path::Path;

    fn parse(yaml: &str) -> Result<WorkerConfig, ConfigError> {
        let m: serde_yaml::Mapping = serde_yaml::from_str(yaml).unwrap();
        WorkerConfig::parse(&FrontMatter::new(&m, &EmptyEnv, Path::new("/")).section("worker")?)
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
