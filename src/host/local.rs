//! [`LocalHost`]: `std::fs` for workspaces, the supervisor for processes. Root containment is
//! checked on canonical paths, so a symlink can never lead an agent or a removal outside the root.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{orphan, supervisor, Host, OrphanOutcome, Process, ProcessSpec};
use super::{BeforeRemove, Removal, Workspace, WorkspaceError};

/// This machine (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalHost;

impl LocalHost {
    pub fn shared() -> std::sync::Arc<dyn Host> {
        std::sync::Arc::new(LocalHost)
    }
}

/// An I/O failure on `path` as a workspace error: `msg` with its `{}` replaced by the path.
fn fail<'a>(msg: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> WorkspaceError + 'a {
    move |e| {
        let p = path.display().to_string();
        WorkspaceError(format!("{}: {e}", msg.replace("{}", &p)))
    }
}

impl Host for LocalHost {
    fn create_workspace(&self, root: &Path, path: &Path) -> Result<Workspace, WorkspaceError> {
        check_name(root, path)?;
        fs::create_dir_all(root).map_err(fail("cannot create workspace root {}", root))?;
        let root_canon = resolved_root(root)?;
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
                fs::create_dir(&target).map_err(fail("cannot create workspace {}", &target))?;
                true
            }
            Err(e) => return Err(fail("cannot inspect workspace {}", &target)(e)),
        };
        let path = check_contained(&root_canon, &target)?;
        Ok(Workspace { path, created_now })
    }

    fn check_workspace(&self, root: &Path, path: &Path) -> Result<PathBuf, WorkspaceError> {
        check_contained(&resolved_root(root)?, path)
    }

    fn remove_workspace(&self, root: &Path, path: &Path, hook: &mut BeforeRemove) -> Removal {
        check_name(root, path)?;
        let Ok(root_canon) = root.canonicalize() else {
            return Ok(false); // no root, nothing to remove
        };
        let root_canon = pinned(root, root_canon)?;
        let target = root_canon.join(path.file_name().unwrap_or_default());
        let meta = match fs::symlink_metadata(&target) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(fail("cannot inspect workspace {}", &target)(e)),
        };
        if meta.file_type().is_symlink() || !meta.is_dir() {
            fs::remove_file(&target).map_err(fail("cannot remove {}", &target))?;
            return Ok(true);
        }
        hook(&target);
        // Rename first (atomic): from here on a re-dispatch creates a fresh directory (and runs
        // `after_create` again) instead of sharing the one being deleted.
        let tomb = tombstone_path(&root_canon, &target);
        match fs::rename(&target, &tomb) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(fail("cannot move workspace {} aside", &target)(e)),
        }
        fs::remove_dir_all(&tomb).map_err(|e| {
            let (t, m) = (target.display(), tomb.display());
            WorkspaceError(format!("cannot remove workspace {t} (moved to {m}): {e}"))
        })?;
        Ok(true)
    }

    fn spawn(&self, spec: &ProcessSpec) -> io::Result<Box<dyn Process>> {
        Ok(Box::new(supervisor::spawn(spec)?))
    }

    fn stop_orphan(&self, pgid: u32, leader_start: u64) -> Result<OrphanOutcome, String> {
        orphan::stop_with(pgid, leader_start, |args| {
            let out = super::command_output("sh", args, orphan::CHECK_TIMEOUT);
            let out = out.ok_or("the orphan check did not finish")?;
            Ok(String::from_utf8_lossy(&out).into_owned())
        })
    }
}

/// The root's canonical path, pinned (see [`pinned`]).
fn resolved_root(root: &Path) -> Result<PathBuf, WorkspaceError> {
    let canon = (root.canonicalize()).map_err(fail("workspace root {} is not accessible", root))?;
    pinned(root, canon)
}

/// Prefix of a workspace being deleted (`.trash-<key>-<ts>`), inside the root.
const TOMBSTONE_PREFIX: &str = ".trash-";

fn tombstone_path(root_canon: &Path, target: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let key = target.file_name().unwrap_or_default().to_string_lossy();
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    root_canon.join(format!("{TOMBSTONE_PREFIX}{key}-{ts}-{seq}"))
}

/// Remove tombstones a crash left in `root` (symlinks are unlinked, never followed). Returns
/// how many were removed.
pub fn sweep_tombstones(root: &Path) -> usize {
    // The first use of the root: pins its resolution (see `pinned`).
    let root = match root.canonicalize().map(|canon| pinned(root, canon)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            log::warn!("tombstone sweep skipped error={e}");
            return 0;
        }
        Err(_) => return 0,
    };
    let Ok(entries) = fs::read_dir(&root) else {
        return 0;
    };
    let mut n = 0;
    for entry in entries.flatten() {
        if !(entry.file_name().to_string_lossy()).starts_with(TOMBSTONE_PREFIX) {
            continue;
        }
        let path = entry.path();
        let r = (entry.file_type()).and_then(|t| match t.is_dir() {
            true => fs::remove_dir_all(&path),
            false => fs::remove_file(&path),
        });
        match r {
            Ok(()) => n += 1,
            Err(e) => log::warn!(
                "cannot remove leftover workspace tombstone path={} error={e}",
                path.display()
            ),
        }
    }
    n
}

/// The workspace roots as first resolved by this process: `configured path → canonical path`.
static PINNED_ROOTS: std::sync::Mutex<Vec<(PathBuf, PathBuf)>> = std::sync::Mutex::new(Vec::new());

/// Pin `root`'s first resolution; refuse (error, nothing touched) when a later resolution of the
/// same configured root differs, e.g. a symlink in it was re-pointed while Baton runs.
fn pinned(root: &Path, canon: PathBuf) -> Result<PathBuf, WorkspaceError> {
    let mut roots = PINNED_ROOTS.lock().unwrap_or_else(|p| p.into_inner());
    match roots.iter().find(|(r, _)| r == root) {
        Some((_, first)) if *first == canon => Ok(canon),
        Some((_, first)) => {
            let (r, c, f) = (root.display(), canon.display(), first.display());
            Err(WorkspaceError(format!(
                "workspace root {r} now resolves to {c}, but resolved to {f} at first use; \
                 refusing to touch it (restart Baton after moving the root)"
            )))
        }
        None => {
            roots.push((root.to_path_buf(), canon.clone()));
            Ok(canon)
        }
    }
}

/// Check that `path`, resolved, is a directory strictly inside the canonical root. Returns the
/// canonical path.
fn check_contained(root_canon: &Path, path: &Path) -> Result<PathBuf, WorkspaceError> {
    let canon = (path.canonicalize()).map_err(fail("workspace {} is not accessible", path))?;
    let (p, c, r) = (path.display(), canon.display(), root_canon.display());
    if canon == root_canon || !canon.starts_with(root_canon) {
        let e = format!("workspace {p} resolves to {c}, outside the workspace root {r}");
        return Err(WorkspaceError(e));
    }
    if !canon.is_dir() {
        return Err(WorkspaceError(format!("workspace {c} is not a directory")));
    }
    Ok(canon)
}

/// The workspace directory's name must be exactly one normal path component (a workspace key).
pub(crate) fn check_name(root: &Path, path: &Path) -> Result<(), WorkspaceError> {
    let name = path.file_name().and_then(|n| n.to_str());
    if path.parent() == Some(root) && name.is_some_and(|n| n != "." && n != ".." && !n.is_empty()) {
        return Ok(());
    }
    let (p, r) = (path.display(), root.display());
    let e = format!("workspace {p} is not a direct child of the workspace root {r}");
    Err(WorkspaceError(e))
}
