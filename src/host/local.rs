//! [`LocalHost`]: runs on this machine — `std::fs` for workspaces, the [`supervisor`] for
//! processes. Root containment is checked on canonical paths, so a symlink can never lead an agent
//! or a removal outside the root.
//!
//! [`supervisor`]: super::supervisor

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{supervisor, Host, Process, ProcessSpec};
use super::{Workspace, WorkspaceError};

/// This machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalHost;

impl LocalHost {
    /// This machine as a shareable host.
    pub fn shared() -> std::sync::Arc<dyn Host> {
        std::sync::Arc::new(LocalHost)
    }
}

impl Host for LocalHost {
    fn create_workspace(&self, root: &Path, path: &Path) -> Result<Workspace, WorkspaceError> {
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
        let path = check_contained(&root_canon, &target)?;
        Ok(Workspace { path, created_now })
    }

    fn check_workspace(&self, root: &Path, path: &Path) -> Result<PathBuf, WorkspaceError> {
        let root = root.canonicalize().map_err(|e| {
            WorkspaceError(format!(
                "workspace root {} is not accessible: {e}",
                root.display()
            ))
        })?;
        check_contained(&root, path)
    }

    fn remove_workspace(
        &self,
        root: &Path,
        path: &Path,
        before_remove: &mut dyn FnMut(&Path),
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
        before_remove(&target);
        fs::remove_dir_all(&target).map_err(|e| {
            WorkspaceError(format!("cannot remove workspace {}: {e}", target.display()))
        })?;
        Ok(true)
    }

    fn spawn(&self, spec: &ProcessSpec) -> io::Result<Box<dyn Process>> {
        Ok(Box::new(supervisor::spawn(spec)?))
    }
}

/// Create the root (if needed) and return its canonical path.
pub(crate) fn canonical_root(root: &Path) -> Result<PathBuf, WorkspaceError> {
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

/// Check that `path`, resolved, is a directory strictly inside the canonical root. Returns the
/// canonical path.
pub(crate) fn check_contained(root_canon: &Path, path: &Path) -> Result<PathBuf, WorkspaceError> {
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
pub(crate) fn check_name(root: &Path, path: &Path) -> Result<(), WorkspaceError> {
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
