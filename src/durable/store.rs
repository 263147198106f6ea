//! The state directory: Baton's own, locked, and never a path to follow.
//!
//! * [`StateDir::open`] creates the directory 0700 when missing and refuses it (and, with
//!   [`check_private`], the workspace root) unless this user owns it, no one else can write it,
//!   and every parent can only be changed by this user or root (a root-owned sticky directory
//!   such as `/tmp` is fine), as OpenSSH's `StrictModes` does.
//! * The directory is opened once without following a symlink; every file in it is opened
//!   relative to that descriptor with `O_NOFOLLOW` and written by rename.
//! * One instance per directory: an exclusive `flock` on the directory itself, which no rename or
//!   deletion of a file can take away; before every write the path must still name the locked
//!   directory (`state_lock_lost` otherwise). The holder's pid is written to `pid` for messages.

use std::ffi::CString;
use std::fmt;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const STATE_FILE: &str = "state.json";
const TEMP_FILE: &str = ".state.json.tmp";
/// The holder's pid (informational: the lock is the directory's `flock`).
const PID_FILE: &str = "pid";
/// A state file larger than this is not read; it is treated as corrupt (ours stay far below).
const MAX_STATE_BYTES: u64 = 64 * 1024 * 1024;

/// The name of the error that ends the daemon: another instance may own the directory now.
pub const LOCK_LOST: &str = "state_lock_lost";

/// An error of the state directory: a stable name (logs, `baton check`; the binary prints it
/// after `baton: `) and a message naming the path.
#[derive(Debug)]
pub struct StoreError {
    /// `state_locked`, `state_version_unsupported`, `state_lock_lost`, `state_io`, or the
    /// `what` of [`check_private`] (`state_dir_unsafe`, `workspace_root_unsafe`).
    name: &'static str,
    message: String,
}

impl StoreError {
    pub(crate) fn new(name: &'static str, message: String) -> Self {
        StoreError { name, message }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// `op` names what was being done (`create state dir`, `write state`, ...).
    pub fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        StoreError::new("state_io", format!("{op} {}: {source}", path.display()))
    }

    /// Another process holds the directory's lock (`pid` as written in `pid`, if readable).
    pub(crate) fn locked(dir: &Path, pid: Option<u32>) -> Self {
        let pid = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
        let message = format!("{} is in use by pid {pid}", dir.display());
        StoreError::new("state_locked", message)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for StoreError {}

/// The open state directory. Clones share the descriptor (and so the lock).
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
    dir: Arc<File>,
}

/// Why `dir` must not hold private files (`None`: it may). See the module docs; checked on the
/// path as given and on the path it resolves to.
pub fn unsafe_reason(dir: &Path) -> Option<String> {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let check = || -> Result<(), String> {
        let real = std::fs::canonicalize(dir).map_err(|e| format!("cannot resolve: {e}"))?;
        let meta = std::fs::metadata(&real).map_err(|e| format!("cannot stat: {e}"))?;
        let mode = meta.mode() & 0o7777;
        if !meta.is_dir() {
            return Err("not a directory".into());
        }
        if meta.uid() != uid {
            return Err(format!("owned by uid {}, not by uid {uid}", meta.uid()));
        }
        if mode & 0o022 != 0 {
            return Err(format!("writable by group or others (mode {mode:o})"));
        }
        for p in dir.ancestors().chain(real.ancestors().skip(1)) {
            let Ok(m) = std::fs::symlink_metadata(p) else {
                continue;
            };
            if m.uid() != uid && m.uid() != 0 {
                return Err(format!("{} is owned by uid {}", p.display(), m.uid()));
            }
            let sticky_root = m.uid() == 0 && m.mode() & 0o1000 != 0;
            if m.is_dir() && m.mode() & 0o022 != 0 && !sticky_root {
                return Err(format!("{} is writable by group or others", p.display()));
            }
        }
        Ok(())
    };
    check().err()
}

/// Create `dir` and its missing parents, 0700.
pub fn create_private(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Refuse `dir` as a private directory (`what` names the error), see [`unsafe_reason`].
pub fn check_private(what: &'static str, dir: &Path) -> Result<(), StoreError> {
    match unsafe_reason(dir) {
        None => Ok(()),
        Some(reason) => Err(StoreError::new(
            what,
            format!("{}: {reason}", dir.display()),
        )),
    }
}

impl StateDir {
    /// Open `path` (created 0700 with its missing parents when `create`), refusing an unsafe one
    /// (`state_dir_unsafe`). The directory is opened without following a symlink.
    pub fn open(path: impl Into<PathBuf>, create: bool) -> Result<StateDir, StoreError> {
        let path = path.into();
        if create {
            create_private(&path).map_err(|e| StoreError::io("create state dir", &path, e))?;
        }
        check_private("state_dir_unsafe", &path)?;
        let real = std::fs::canonicalize(&path).map_err(|e| StoreError::io("open", &path, e))?;
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&real)
            .map_err(|e| StoreError::io("open state dir", &path, e))?;
        Ok(StateDir {
            path,
            dir: Arc::new(dir),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn state_file(&self) -> PathBuf {
        self.path.join(STATE_FILE)
    }

    /// True when group or others may read the directory (worth a warning: the file holds session
    /// ids and workspace paths).
    pub fn readable_by_others(&self) -> bool {
        self.dir.metadata().is_ok_and(|m| m.mode() & 0o077 != 0)
    }

    /// Take the instance lock without blocking and write our pid to `pid`. Another holder gives
    /// `state_locked`.
    pub fn lock(&self) -> Result<(), StoreError> {
        let taken = flock(&self.dir, libc::LOCK_EX);
        if !taken.map_err(|e| StoreError::io("lock", &self.path, e))? {
            return Err(StoreError::locked(&self.path, read_pid_patiently(self)));
        }
        let pid = format!("{}\n", std::process::id());
        self.write(PID_FILE, pid.as_bytes(), false)
    }

    /// Who holds the lock, without taking it (for `baton check`): `None` when nobody does. The
    /// probe holds a shared lock for an instant.
    pub fn lock_holder(&self) -> Option<Option<u32>> {
        match flock(&self.dir, libc::LOCK_SH) {
            Ok(true) => {
                let _ = flock(&self.dir, libc::LOCK_UN);
                None
            }
            Ok(false) => Some(read_pid_patiently(self)),
            Err(_) => None,
        }
    }

    /// True while an older Baton holds the `lock` file it used in this directory.
    pub fn old_lock_held(&self) -> bool {
        let lock = self.open_at("lock", libc::O_RDONLY);
        lock.is_ok_and(|f| matches!(flock(&f, libc::LOCK_SH), Ok(false)))
    }

    /// The bytes of `state.json`, `None` if there is none; `Err(problem)` when it cannot be
    /// read (a symlink, a FIFO, too large…): the caller moves it aside.
    pub fn read_state(&self) -> Result<Option<Vec<u8>>, String> {
        let f = match self.open_at(STATE_FILE, libc::O_RDONLY | libc::O_NONBLOCK) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot open: {e}")),
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            return Err("not a regular file".into());
        }
        let mut bytes = Vec::new();
        f.take(MAX_STATE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read: {e}"))?;
        if bytes.len() as u64 > MAX_STATE_BYTES {
            return Err(format!("larger than {MAX_STATE_BYTES} bytes"));
        }
        Ok(Some(bytes))
    }

    /// Rename `state.json` to `state.json.<tag>-<now>` (never over an existing file); the new
    /// path.
    pub fn move_aside(&self, tag: &str, now: u64) -> Result<PathBuf, StoreError> {
        let mut n = 0u32;
        loop {
            let name = match n {
                0 => format!("{STATE_FILE}.{tag}-{now}"),
                _ => format!("{STATE_FILE}.{tag}-{now}-{n}"),
            };
            if self.open_at(&name, libc::O_RDONLY).is_err() {
                self.rename_at(STATE_FILE, &name)
                    .map_err(|e| StoreError::io("move aside state", &self.state_file(), e))?;
                return Ok(self.path.join(name));
            }
            n = n.saturating_add(1);
        }
    }

    /// Write `bytes` as `state.json` crash-safely (temp file, fsync, rename, fsync of the
    /// directory), after checking that the path still names the locked directory. On error the
    /// previous `state.json` is intact.
    pub fn save(&self, bytes: &[u8]) -> Result<(), StoreError> {
        match (std::fs::metadata(&self.path), self.dir.metadata()) {
            (Ok(a), Ok(b)) if a.dev() == b.dev() && a.ino() == b.ino() => {}
            _ => {
                let dir = self.path.display();
                let message = format!("{dir} is no longer the directory this Baton locked");
                return Err(StoreError::new(LOCK_LOST, message));
            }
        }
        self.write(STATE_FILE, bytes, true)
    }

    fn write(&self, name: &str, bytes: &[u8], sync: bool) -> Result<(), StoreError> {
        let tmp = self.path.join(TEMP_FILE);
        let _ = self.unlink_at(TEMP_FILE);
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let mut f = self
            .open_at(TEMP_FILE, flags)
            .map_err(|e| StoreError::io("create temp state", &tmp, e))?;
        f.write_all(bytes)
            .and_then(|()| if sync { f.sync_all() } else { Ok(()) })
            .map_err(|e| StoreError::io("write temp state", &tmp, e))?;
        drop(f);
        if let Err(e) = self.rename_at(TEMP_FILE, name) {
            let _ = self.unlink_at(TEMP_FILE);
            return Err(StoreError::io("rename state", &self.path.join(name), e));
        }
        if sync {
            self.dir
                .sync_all()
                .map_err(|e| StoreError::io("fsync state dir", &self.path, e))?;
        }
        Ok(())
    }

    /// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, 0600)`.
    fn open_at(&self, name: &str, flags: libc::c_int) -> io::Result<File> {
        let name = cname(name)?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid directory descriptor and a NUL-terminated name; the returned
        // descriptor is owned by the File.
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), name.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn rename_at(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to, d) = (cname(from)?, cname(to)?, self.dir.as_raw_fd());
        // SAFETY: valid descriptor and NUL-terminated names; renameat never follows a symlink.
        cvt(unsafe { libc::renameat(d, from.as_ptr(), d, to.as_ptr()) })
    }

    fn unlink_at(&self, name: &str) -> io::Result<()> {
        let name = cname(name)?;
        // SAFETY: valid descriptor and a NUL-terminated name; a symlink itself is removed.
        cvt(unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) })
    }
}

fn cname(name: &str) -> io::Result<CString> {
    CString::new(Path::new(name).as_os_str().as_bytes()).map_err(io::Error::other)
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `flock(op | LOCK_NB)`: `Ok(false)` when another holder has the lock.
fn flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: flock on a valid open descriptor owned by `file`.
        if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// The pid in `pid`. A holder that has just taken the lock may not have written it yet, so it
/// is re-read a few times (at most ~50 ms).
fn read_pid_patiently(dir: &StateDir) -> Option<u32> {
    for _ in 0..10 {
        let mut s = String::new();
        let read = dir.open_at(PID_FILE, libc::O_RDONLY | libc::O_NONBLOCK);
        if read.is_ok_and(|f| f.take(64).read_to_string(&mut s).is_ok()) {
            if let Some(pid) = s.trim().parse().ok().filter(|&p| p > 0) {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}
