//! Remote workspace operations: fixed `sh` scripts whose only inputs are positional arguments
//! (root and workspace name), with the local containment rules — the workspace must resolve
//! (`cd -P`, `pwd -P`) to a directory strictly inside the resolved root.

use std::ffi::OsStr;
use std::path::Path;

use super::SshHost;
use crate::host::local::check_name;
use crate::host::WorkspaceError;

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
pub(super) const CREATE: &str = r#"
if [ -L "$t" ] || [ -d "$t" ]; then c=0
elif [ -e "$t" ]; then echo "workspace path $t exists and is not a directory; refusing to replace it" >&2; exit 4
else mkdir -- "$t" || exit 4; c=1; fi
p=$(cd -P -- "$t" 2>/dev/null && pwd -P) || { echo "workspace $t is not accessible" >&2; exit 4; }
inside "$p"
printf '%s %s\n' "$c" "$p"
"#;

/// check: prints the resolved path.
pub(super) const CHECK: &str = r#"
p=$(cd -P -- "$t" 2>/dev/null && pwd -P) || { echo "workspace $t is not accessible" >&2; exit 4; }
inside "$p"
printf '%s\n' "$p"
"#;

/// inspect before removal: `none`, `unlinked` (a symlink or file was removed), or `dir <path>`.
pub(super) const INSPECT: &str = r#"
if [ -L "$t" ] || { [ -e "$t" ] && [ ! -d "$t" ]; }; then rm -f -- "$t" || exit 4; echo unlinked
elif [ -d "$t" ]; then printf 'dir %s\n' "$t"
else echo none; fi
"#;

/// delete a directory after `before_remove` (re-checked: still a real directory inside the root).
pub(super) const DELETE: &str = r#"
if [ -L "$t" ] || [ ! -d "$t" ]; then exit 0; fi
rm -rf -- "$t" || exit 4
"#;

impl SshHost {
    /// Run workspace script `body` (after [`PRELUDE`]) for `path`, which must be a direct child
    /// of `root` (`mode` is `$3`): its first stdout line, or an error naming the host.
    pub(super) fn workspace_sh(
        &self,
        body: &str,
        root: &Path,
        path: &Path,
        mode: &str,
    ) -> Result<String, WorkspaceError> {
        check_name(root, path)?;
        let args = [
            root.as_os_str(),
            path.file_name().unwrap_or_default(),
            OsStr::new(mode),
        ];
        let out = self.sh(&format!("{PRELUDE}{body}"), &args);
        let out = out.map_err(|e| self.workspace_error(e))?;
        Ok(out.lines().next().unwrap_or_default().to_string())
    }

    pub(super) fn workspace_error(&self, e: String) -> WorkspaceError {
        WorkspaceError(format!("{e} (host {})", self.destination))
    }
}
