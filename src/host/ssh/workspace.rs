//! Remote workspace operations: fixed `sh` scripts whose only inputs are positional arguments
//! (root and workspace name), with the local containment rules — the workspace must resolve
//! (`cd -P`, `pwd -P`) to a directory strictly inside the resolved root.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::SshHost;
use crate::host::local::check_name;
use crate::host::{Workspace, WorkspaceError};

/// Shared prelude: `$r` = resolved root (created when `$3` = create), `$t` = `$r/$2`.
const PRELUDE: &str = r#"set -u
root=$1; name=$2
if [ "${3:-}" = create ]; then mkdir -p -- "$root" || exit 3; fi
r=$(cd -P -- "$root" 2>/dev/null && pwd -P) || { echo "workspace root $root is not accessible" >&2; exit 3; }
t="${r%/}/$name"
inside() {
  case "$1" in "${r%/}"/?*) return 0 ;; esac
  echo "workspace $t resolves to $1, outside the workspace root $r" >&2; exit 5
}
"#;

/// create: prints `<created 0|1> <resolved path>`.
const CREATE: &str = r#"
if [ -L "$t" ] || [ -d "$t" ]; then c=0
elif [ -e "$t" ]; then echo "workspace path $t exists and is not a directory; refusing to replace it" >&2; exit 4
else mkdir -- "$t" || exit 4; c=1; fi
p=$(cd -P -- "$t" 2>/dev/null && pwd -P) || { echo "workspace $t is not accessible" >&2; exit 4; }
inside "$p"
printf '%s %s\n' "$c" "$p"
"#;

/// check: prints the resolved path.
const CHECK: &str = r#"
p=$(cd -P -- "$t" 2>/dev/null && pwd -P) || { echo "workspace $t is not accessible" >&2; exit 4; }
inside "$p"
printf '%s\n' "$p"
"#;

/// inspect before removal: `none`, `unlinked` (a symlink or file was removed), or `dir <path>`.
const INSPECT: &str = r#"
if [ -L "$t" ] || { [ -e "$t" ] && [ ! -d "$t" ]; }; then rm -f -- "$t" || exit 4; echo unlinked
elif [ -d "$t" ]; then printf 'dir %s\n' "$t"
else echo none; fi
"#;

/// delete a directory after `before_remove` (re-checked: still a real directory inside the root).
const DELETE: &str = r#"
if [ -L "$t" ] || [ ! -d "$t" ]; then exit 0; fi
rm -rf -- "$t" || exit 4
"#;

/// Run `body` after [`PRELUDE`] for `path` in `root` (`mode` is `$3`): its first stdout line.
fn run(host: &SshHost, body: &str, root: &Path, path: &Path, mode: &str) -> Result<String, String> {
    let args = [
        root.as_os_str(),
        path.file_name().unwrap_or_default(),
        OsStr::new(mode),
    ];
    let out = host.sh(&format!("{PRELUDE}{body}"), &args)?;
    Ok(out.lines().next().unwrap_or_default().to_string())
}

fn err(host: &SshHost, e: String) -> WorkspaceError {
    WorkspaceError(format!("{e} (host {})", host.destination))
}

pub(super) fn create(
    host: &SshHost,
    root: &Path,
    path: &Path,
) -> Result<Workspace, WorkspaceError> {
    check_name(root, path)?;
    let line = run(host, CREATE, root, path, "create").map_err(|e| err(host, e))?;
    let (created, p) = line
        .split_once(' ')
        .ok_or_else(|| err(host, format!("unexpected reply {line:?}")))?;
    Ok(Workspace {
        path: PathBuf::from(p),
        created_now: created == "1",
    })
}

pub(super) fn check(host: &SshHost, root: &Path, path: &Path) -> Result<PathBuf, WorkspaceError> {
    check_name(root, path)?;
    let line = run(host, CHECK, root, path, "check").map_err(|e| err(host, e))?;
    Ok(PathBuf::from(line))
}

pub(super) fn remove(
    host: &SshHost,
    root: &Path,
    path: &Path,
    before_remove: &mut dyn FnMut(&Path),
) -> Result<bool, WorkspaceError> {
    check_name(root, path)?;
    let line = match run(host, INSPECT, root, path, "inspect") {
        Ok(l) => l,
        // No root: nothing to remove (as locally).
        Err(e) if e.contains("is not accessible") => return Ok(false),
        Err(e) => return Err(err(host, e)),
    };
    match line.split_once(' ') {
        Some(("dir", p)) => {
            before_remove(Path::new(p));
            run(host, DELETE, root, path, "delete").map_err(|e| err(host, e))?;
            Ok(true)
        }
        _ => Ok(line == "unlinked"),
    }
}
