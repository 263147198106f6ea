//! The one temporary-directory type of the tests: unique per process and call, short (sockets
//! live below some of them), and removed on drop even when a test made it read-only. Depends on
//! nothing else in `support`, so the test binaries outside `tests/it/` can include it.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// `/tmp/bt-<pid>-<tag>-<n>`, removed on drop. Derefs to its [`Path`].
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh, empty directory.
    pub fn new(tag: &str) -> TempDir {
        let dir = TempDir::unborn(tag);
        fs::create_dir_all(&dir.0).unwrap();
        dir
    }

    /// A fresh path whose directory does not exist yet (for code that must create it).
    pub fn unborn(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let p = PathBuf::from(format!("/tmp/bt-{}-{tag}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside.
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o700));
        let _ = fs::remove_file(&self.0);
        let _ = fs::remove_dir_all(&self.0);
    }
}
