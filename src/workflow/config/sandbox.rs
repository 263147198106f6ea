//! `sandbox.*` (spec §15.5): parsed here, applied by `host::sandbox`.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::section::{describe, Section};
use super::{resolve_path, ConfigEnv, ConfigError, SandboxConfig};

/// The section name.
pub(crate) const SECTION: &str = "sandbox";
/// Every key of the section.
pub(crate) const KEYS: &[&str] = &["kind", "network", "writable", "readable"];

/// Parse `sandbox.*`; paths expand `~` and `$VAR` and are relative to `workflow_dir`.
pub(crate) fn parse(
    s: &Section<'_>,
    workflow_dir: &Path,
    env: &dyn ConfigEnv,
) -> Result<SandboxConfig, ConfigError> {
    let choice = |key, a: &str, b: &str| match s.raw(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::String(v)) if v == a => Ok(false),
        Some(Value::String(v)) if v == b => Ok(true),
        Some(other) => Err(s.invalid(key, &format!("{a} or {b}"), &describe(other))),
    };
    let paths = |key: &str| -> Result<Vec<PathBuf>, ConfigError> {
        let raw = s.string_list(key)?.unwrap_or_default();
        raw.iter()
            .map(|p| {
                resolve_path(p, workflow_dir, env)
                    .filter(|_| !p.is_empty())
                    .ok_or_else(|| s.invalid(key, "paths (a $VAR must be set)", &format!("{p:?}")))
            })
            .collect()
    };
    Ok(SandboxConfig {
        bubblewrap: choice("kind", "none", "bubblewrap")?,
        no_network: choice("network", "host", "none")?,
        writable: paths("writable")?,
        readable: paths("readable")?,
        hidden: Vec::new(),
    })
}
