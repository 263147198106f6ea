//! Per-issue workspaces (spec §9): `<root>/<key>` directories that are created once, reused across
//! runs and removed only for terminal issues, with their hooks. The filesystem work (and the
//! containment checks) is done by a [`Host`].

pub mod hooks;
pub mod key;
pub(crate) mod reaper;

use std::path::Path;

use crate::host::Host;
use hooks::{run_configured_hook, HookEnv, HooksConfig};

pub use crate::host::{sweep_tombstones, Workspace, WorkspaceError};
pub use key::{workspace_key, workspace_path};

/// Ensure `path` (= `<root>/<key>`, as recorded at dispatch) exists as a directory inside `root`
/// on `host` (spec §9.2). An existing non-directory or an escaping symlink fails without touching
/// anything. On creation runs `after_create`; if that fails the half-made directory is removed.
pub fn ensure_workspace(
    host: &dyn Host,
    root: &Path,
    path: &Path,
    hooks: &HooksConfig,
    env: &HookEnv,
) -> Result<Workspace, WorkspaceError> {
    let ws = host.create_workspace(root, path)?;
    if !ws.created_now {
        return Ok(ws);
    }
    let (kind, script) = ("after_create", hooks.after_create.as_deref());
    let Err(e) = run_configured_hook(host, kind, script, &ws.path, env, hooks.timeout_ms) else {
        return Ok(ws);
    };
    if let Err(rm) = host.remove_workspace(root, path, &mut |_| {}) {
        let ws = ws.path.display();
        log::warn!("workspace cleanup after failed after_create failed workspace={ws} error={rm}");
    }
    Err(WorkspaceError(e))
}

/// Remove the workspace at `path` (recorded at dispatch or derived from the identifier at startup)
/// on `host`: run `before_remove` (failures logged, ignored), then delete it. A symlink is
/// unlinked, never followed; anything not inside the root is left alone. Missing paths are fine.
pub fn remove_workspace_on(
    host: &dyn Host,
    root: &Path,
    path: &Path,
    hooks: &HooksConfig,
    env: &HookEnv,
) -> Result<bool, WorkspaceError> {
    let removed = host.remove_workspace(root, path, &mut |target| {
        let (kind, script) = ("before_remove", hooks.before_remove.as_deref());
        let _ = run_configured_hook(host, kind, script, target, env, hooks.timeout_ms);
    });
    // The agent CLI's per-issue state (sandboxed runs) goes with the workspace.
    let state = crate::host::sandbox::cli_state_dir(path);
    if let Err(e) = host.remove_workspace(root, &state, &mut |_| {}) {
        let state = state.display();
        log::warn!("agent state removal failed path={state} error={e}");
    }
    removed
}
