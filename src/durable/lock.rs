//! One instance per state directory: an exclusive `flock` on `<dir>/lock`, held for the life of
//! the process (released by the kernel when the process dies, even by `kill -9`), with the
//! holder's pid written into the file for the error message and `baton check`.
//!
//! `flock` locks belong to an open file description, so a second open of the file conflicts
//! even within one process. The file is opened close-on-exec (std's default), so agent processes
//! never inherit the lock and an orphaned agent cannot keep a restarted daemon out.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::store::{StateDir, StoreError};

/// File name of the lock inside the state directory.
pub const LOCK_FILE: &str = "lock";

/// The held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A process found holding the lock by [`lock_holder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockHolder {
    /// Its pid, as written in the lock file (`None` if the file does not name one yet).
    pub pid: Option<u32>,
}

impl StateDir {
    /// Take the instance lock without blocking and write our pid into it. Another holder gives
    /// [`StoreError::Locked`] (`state_locked: <dir> is in use by pid N`).
    pub fn lock(&self) -> Result<StateLock, StoreError> {
        let path = self.path().join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| StoreError::io("open lock", &path, e))?;
        match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(StoreError::Locked {
                    dir: self.path().to_path_buf(),
                    pid: read_pid_patiently(&path),
                })
            }
            Err(e) => return Err(StoreError::io("lock", &path, e)),
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.write_all_at(pid.as_bytes(), 0))
            .map_err(|e| StoreError::io("write pid to lock", &path, e))?;
        Ok(StateLock { _file: file, path })
    }
}

/// Who holds the lock of the state directory `dir`, without taking it (for `baton check`):
/// `None` when nobody does (or there is no lock file). The probe holds a shared lock for an
/// instant, so a daemon starting in that instant reports `state_locked`; it is not retried.
pub fn lock_holder(dir: &Path) -> Option<LockHolder> {
    let path = dir.join(LOCK_FILE);
    let file = File::open(&path).ok()?;
    match flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
        Ok(()) => {
            let _ = flock(&file, libc::LOCK_UN);
            None
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(LockHolder {
            pid: read_pid_patiently(&path),
        }),
        Err(_) => None,
    }
}

fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: flock on a valid open descriptor owned by `file`.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The pid in the lock file. A holder that has just taken the lock may not have written it yet,
/// so an empty file is re-read a few times (at most ~50 ms).
fn read_pid_patiently(path: &Path) -> Option<u32> {
    for _ in 0..10 {
        if let Some(pid) = read_pid(path) {
            return Some(pid);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn read_pid(path: &Path) -> Option<u32> {
    let mut s = String::new();
    File::open(path)
        .ok()?
        .take(64)
        .read_to_string(&mut s)
        .ok()?;
    s.trim().parse().ok().filter(|&p| p > 0)
}
