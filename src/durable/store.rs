//! The state directory: `state.json` written crash-safely, read defensively.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::schema::{StoredState, SCHEMA_VERSION};

/// File name of the state document.
pub const STATE_FILE: &str = "state.json";
/// Temporary file a write goes to before it is renamed over [`STATE_FILE`].
const TEMP_FILE: &str = ".state.json.tmp";
/// A state file larger than this is not read; it is treated as corrupt (ours stay far below).
const MAX_STATE_BYTES: u64 = 64 * 1024 * 1024;

/// Errors of the state directory. Display strings start with the error name the binary prints
/// after `baton: `.
#[derive(Debug)]
pub enum StoreError {
    /// Another process holds `<dir>/lock`.
    Locked {
        /// The state directory.
        dir: PathBuf,
        /// The holder's pid as written in the lock file (`None` if unreadable).
        pid: Option<u32>,
    },
    /// `state.json` was written by a newer Baton; it is left untouched.
    VersionUnsupported {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: u32,
    },
    /// A filesystem operation failed.
    Io {
        /// What was being done (`create state dir`, `write state`, ...).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

impl StoreError {
    /// The stable error name (`state_locked`, `state_version_unsupported`, `state_io`).
    pub fn name(&self) -> &'static str {
        match self {
            StoreError::Locked { .. } => "state_locked",
            StoreError::VersionUnsupported { .. } => "state_version_unsupported",
            StoreError::Io { .. } => "state_io",
        }
    }

    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Locked { dir, pid } => {
                let pid = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
                write!(f, "state_locked: {} is in use by pid {pid}", dir.display())
            }
            StoreError::VersionUnsupported { path, found } => write!(
                f,
                "state_version_unsupported: {} has schema version {found}; this Baton reads up to {SCHEMA_VERSION}",
                path.display()
            ),
            StoreError::Io { op, path, source } => {
                write!(f, "state_io: {op} {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result of [`StateDir::load`].
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The stored state (empty when there was no usable file).
    pub state: StoredState,
    /// Where an unreadable file was moved to; the caller logs one error naming it.
    pub moved_aside: Option<PathBuf>,
    /// Why the file was unusable (parse error or I/O error), when it was moved aside.
    pub problem: Option<String>,
}

/// The state directory (`state.dir`): holds `state.json` and `lock`.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Use `dir`, creating it (and missing parents) with mode 0700. An existing directory keeps
    /// its permissions; see [`StateDir::loose_permissions`].
    pub fn open(dir: impl Into<PathBuf>) -> Result<StateDir, StoreError> {
        let dir = dir.into();
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| StoreError::io("create state dir", &dir, e))?;
        Ok(StateDir { dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Path of `state.json`.
    pub fn state_file(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The directory's mode when group or others have any access (worth a warning: the file
    /// holds session ids and workspace paths), else `None`.
    pub fn loose_permissions(&self) -> Option<u32> {
        let mode = fs::metadata(&self.dir).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then_some(mode)
    }

    /// Read `state.json`. A missing file is an empty state. A corrupt, truncated or unparseable
    /// file is renamed to `state.json.corrupt-<now_unix_ms>` and an empty state returned (see
    /// [`Loaded::moved_aside`]). A newer schema version is an error and the file stays as it is.
    pub fn load(&self, now_unix_ms: u64) -> Result<Loaded, StoreError> {
        let path = self.state_file();
        let bytes = match read_bounded(&path) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(fresh(None, None)),
            Err(problem) => return self.move_aside(&path, problem, now_unix_ms),
        };
        match parse(&bytes) {
            Ok(state) => Ok(Loaded {
                state,
                moved_aside: None,
                problem: None,
            }),
            Err(Parse::Newer(found)) => Err(StoreError::VersionUnsupported { path, found }),
            Err(Parse::Corrupt(problem)) => self.move_aside(&path, problem, now_unix_ms),
        }
    }

    fn move_aside(&self, path: &Path, problem: String, now: u64) -> Result<Loaded, StoreError> {
        let mut target = self.dir.join(format!("{STATE_FILE}.corrupt-{now}"));
        let mut n = 1u32;
        while target.exists() {
            target = self.dir.join(format!("{STATE_FILE}.corrupt-{now}-{n}"));
            n = n.saturating_add(1);
        }
        fs::rename(path, &target)
            .map_err(|e| StoreError::io("move aside corrupt state", path, e))?;
        Ok(fresh(Some(target), Some(problem)))
    }

    /// Write `state` crash-safely: temp file in the directory, fsync, rename over `state.json`,
    /// fsync the directory. On error the previous `state.json` is intact.
    pub fn save(&self, state: &StoredState) -> Result<(), StoreError> {
        self.save_inner(state, true)
    }

    /// [`StateDir::save`] without the two fsyncs (benchmarks only: atomic but not durable).
    #[doc(hidden)]
    pub fn save_without_fsync(&self, state: &StoredState) -> Result<(), StoreError> {
        self.save_inner(state, false)
    }

    fn save_inner(&self, state: &StoredState, sync: bool) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(state).map_err(|e| {
            StoreError::io("serialize state", &self.state_file(), io::Error::other(e))
        })?;
        let tmp = self.dir.join(TEMP_FILE);
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| StoreError::io("create temp state", &tmp, e))?;
        f.write_all(&bytes)
            .map_err(|e| StoreError::io("write temp state", &tmp, e))?;
        if sync {
            f.sync_all()
                .map_err(|e| StoreError::io("fsync temp state", &tmp, e))?;
        }
        drop(f);
        let path = self.state_file();
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(StoreError::io("rename state", &path, e));
        }
        if sync {
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| StoreError::io("fsync state dir", &self.dir, e))?;
        }
        Ok(())
    }
}

/// An empty state (no file, or one moved aside).
fn fresh(moved_aside: Option<PathBuf>, problem: Option<String>) -> Loaded {
    Loaded {
        state: StoredState::default(),
        moved_aside,
        problem,
    }
}

/// The file's bytes, `None` if it does not exist; `Err(problem)` when it cannot be read.
fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open: {e}")),
    };
    let mut bytes = Vec::new();
    f.take(MAX_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(format!("larger than {MAX_STATE_BYTES} bytes"));
    }
    Ok(Some(bytes))
}

enum Parse {
    Newer(u32),
    Corrupt(String),
}

/// Check the version first (a newer file may have another shape), then parse the document.
fn parse(bytes: &[u8]) -> Result<StoredState, Parse> {
    #[derive(Deserialize)]
    struct Probe {
        schema_version: u32,
    }
    let probe: Probe = serde_json::from_slice(bytes).map_err(|e| Parse::Corrupt(e.to_string()))?;
    if probe.schema_version > SCHEMA_VERSION {
        return Err(Parse::Newer(probe.schema_version));
    }
    if probe.schema_version == 0 {
        return Err(Parse::Corrupt("schema_version 0".into()));
    }
    serde_json::from_slice(bytes).map_err(|e| Parse::Corrupt(e.to_string()))
}
