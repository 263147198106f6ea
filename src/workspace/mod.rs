//! Per-issue workspaces (spec §9): `<root>/<key>` directories that are created once, reused across
//! runs and removed only for terminal issues; root containment is checked on canonical paths so a
//! symlink can never lead an agent or a removal outside the root.

pub mod hooks;
pub mod key;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::workflow::config::HooksConfig;
use hooks::{run_configured_hook, HookEnv, HookKind};

pub use key::{workspace_key, workspace_path};

/// A prepared workspace (spec §4.1.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Canonical absolute path.
    pub path: PathBuf,
    /// True when this call created the directory.
    pub created_now: bool,
}

/// A workspace failure (spec §14.1 class 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceError(pub String);

impl std::fmt::Display for WorkspaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WorkspaceError {}

/// Create the root (if needed) and return its canonical path.
pub fn canonical_root(root: &Path) -> Result<PathBuf, WorkspaceError> {
    fs::create_dir_all(root).map_err(|e| {
        WorkspaceError(format!(
            "cannot create workspace root {}: {e}",
            root.display()
        ))
    })?;
    root.canonicalize().map_err(|e| {
        WorkspaceError(format!(
            "workspace root {} is not accessible: {e}",
            root.display()
        ))
    })
}

/// Check that `path` is a direct child of `root` by name and, resolved, a directory strictly inside
/// the canonical root. Returns the canonical path.
pub fn check_contained(root_canon: &Path, path: &Path) -> Result<PathBuf, WorkspaceError> {
    let canon = path.canonicalize().map_err(|e| {
        WorkspaceError(format!(
            "workspace {} is not accessible: {e}",
            path.display()
        ))
    })?;
    if canon == root_canon || !canon.starts_with(root_canon) {
        return Err(WorkspaceError(format!(
            "workspace {} resolves to {}, outside the workspace root {}",
            path.display(),
            canon.display(),
            root_canon.display()
        )));
    }
    if !canon.is_dir() {
        return Err(WorkspaceError(format!(
            "workspace {} is not a directory",
            canon.display()
        )));
    }
    Ok(canon)
}

/// The workspace directory's name must be exactly one normal path component (a workspace key).
fn check_name(root: &Path, path: &Path) -> Result<(), WorkspaceError> {
    let ok = path.parent() == Some(root)
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n != "." && n != ".." && !n.is_empty());
    if ok {
        Ok(())
    } else {
        Err(WorkspaceError(format!(
            "workspace {} is not a direct child of the workspace root {}",
            path.display(),
            root.display()
        )))
    }
}

/// Ensure `path` (= `<root>/<key>`, as recorded at dispatch) exists as a directory inside `root`
/// (spec §9.2). An existing non-directory or an escaping symlink fails without touching anything.
/// On creation runs `after_create`; if that fails the half-made directory is removed.
pub fn ensure_workspace(
    root: &Path,
    path: &Path,
    hooks: &HooksConfig,
    env: &HookEnv,
) -> Result<Workspace, WorkspaceError> {
    check_name(root, path)?;
    let root_canon = canonical_root(root)?;
    let target = root_canon.join(path.file_name().unwrap_or_default());
    let created_now = match fs::symlink_metadata(&target) {
        // An existing symlink is followed only by the containment check below, which rejects
        // links that escape the root or do not lead to a directory.
        Ok(meta) if meta.file_type().is_symlink() || meta.is_dir() => false,
        Ok(_) => {
            return Err(WorkspaceError(format!(
                "workspace path {} exists and is not a directory; refusing to replace it",
                target.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir(&target).map_err(|e| {
                WorkspaceError(format!("cannot create workspace {}: {e}", target.display()))
            })?;
            true
        }
        Err(e) => {
            return Err(WorkspaceError(format!(
                "cannot inspect workspace {}: {e}",
                target.display()
            )))
        }
    };
    let canon = check_contained(&root_canon, &target)?;
    if created_now {
        let mut env = env.clone();
        env.workspace = canon.clone();
        if let Err(e) = run_configured_hook(
            HookKind::AfterCreate,
            hooks.after_create.as_deref(),
            &canon,
            &env,
            hooks.timeout_ms,
        ) {
            if let Err(rm) = fs::remove_dir_all(&canon) {
                log::warn!(
                    "workspace cleanup after failed after_create failed workspace={} error={rm}",
                    canon.display()
                );
            }
            return Err(WorkspaceError(e));
        }
    }
    Ok(Workspace {
        path: canon,
        created_now,
    })
}

/// Remove the workspace at `path` (recorded at dispatch or derived from the identifier at startup):
/// run `before_remove` (failures logged, ignored), then delete it. A symlink is unlinked, never
/// followed; anything not inside the root is left alone. Missing paths are fine.
pub fn remove_workspace(
    root: &Path,
    path: &Path,
    hooks: &HooksConfig,
    env: &HookEnv,
) -> Result<bool, WorkspaceError> {
    check_name(root, path)?;
    let Ok(root_canon) = root.canonicalize() else {
        return Ok(false); // no root, nothing to remove
    };
    let target = root_canon.join(path.file_name().unwrap_or_default());
    let meta = match fs::symlink_metadata(&target) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(WorkspaceError(format!(
                "cannot inspect workspace {}: {e}",
                target.display()
            )))
        }
    };
    if meta.file_type().is_symlink() || !meta.is_dir() {
        fs::remove_file(&target)
            .map_err(|e| WorkspaceError(format!("cannot remove {}: {e}", target.display())))?;
        return Ok(true);
    }
    let mut env = env.clone();
    env.workspace = target.clone();
    let _ = run_configured_hook(
        HookKind::BeforeRemove,
        hooks.before_remove.as_deref(),
        &target,
        &env,
        hooks.timeout_ms,
    );
    fs::remove_dir_all(&target).map_err(|e| {
        WorkspaceError(format!("cannot remove workspace {}: {e}", target.display()))
    })?;
    Ok(true)
}
