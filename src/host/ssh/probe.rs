//! `baton check`'s per-host probe: SSH reachable, `workspace.root` writable, the agent CLI
//! present (with its version) — one remote script, one line of verdict.

use std::ffi::OsStr;
use std::path::Path;

use super::SshHost;

/// The probe script: `$1` = workspace root, `$2` = the agent command (operator shell text, run
/// as agents are: `bash -lc`). Prints the CLI's version line.
const PROBE: &str = r#"root=$1; agent=$2
mkdir -p -- "$root" 2>/dev/null && t=$(mktemp "$root/.baton-check.XXXXXX" 2>/dev/null) && rm -f -- "$t" || { echo "workspace.root $root is not writable" >&2; exit 3; }
v=$(bash -lc "$agent --version" </dev/null 2>&1) || { echo "agent CLI ($agent) did not run: $(printf '%s' "$v" | tail -n 1)" >&2; exit 4; }
printf '%s\n' "$v" | head -n 1
"#;

/// Probe `host`: `Ok(agent version)` or the first problem found.
pub fn probe_host(
    host: &SshHost,
    workspace_root: &Path,
    agent_command: &str,
) -> Result<String, String> {
    host.check_reachable()?;
    let out = host.sh(
        PROBE,
        &[workspace_root.as_os_str(), OsStr::new(agent_command)],
    )?;
    Ok(out.trim().to_string())
}
