//! The thin filesystem side of the Backlog.md reader: find the board's files, bound their size,
//! read their bytes, and hand them to the pure parser and [`Board::assemble`].

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::board::{Board, BoardTask, BoardWarning, Location, WarningKind};
use super::parse::{parse_config, parse_task, utf8, BoardConfig, TaskProblem};
use crate::tracker::{TrackerError, TrackerErrorKind};

/// Task and config files larger than this are skipped unread (1 MiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The folders read, in order. `drafts/` is never read.
pub(crate) const LOCATIONS: [Location; 3] =
    [Location::Tasks, Location::Completed, Location::Archived];

/// The class of a missing board directory.
pub(crate) const MISSING: &str = "backlog_board_missing";
const BAD_CONFIG: &str = "backlog_config_invalid";
const IO: &str = "backlog_board_io";

/// A board that cannot be read at all, named by its stable class (docs/trackers/backlog.md) and
/// the path concerned: a missing or non-directory board, a bad `config.yml`, an unlistable folder.
fn err(class: &'static str, path: &Path, message: impl std::fmt::Display) -> TrackerError {
    let kind = match class {
        MISSING | "backlog_board_not_a_directory" => TrackerErrorKind::MissingTrackerProject,
        BAD_CONFIG => TrackerErrorKind::Payload,
        _ => TrackerErrorKind::Transport,
    };
    TrackerError::with_class(kind, class, format!("{}: {message}", path.display()))
}

/// Read the board at `dir`: `config.yml` (or `config.yaml`), then every `<prefix>-*.md` file in
/// `tasks/`, `completed/` and `archive/tasks/` (not recursive; `drafts/` ignored). Paths in the
/// result are absolute. Bad task files become warnings; only a missing/unlistable board or a bad
/// `config.yml` is an error.
pub fn read_board(dir: &Path) -> Result<Board, TrackerError> {
    read_board_after(dir, None)
}

/// [`read_board`] that keeps, on a duplicate id, the file of the `previous` read (see
/// [`Board::assemble`]).
pub fn read_board_after(dir: &Path, previous: Option<&Board>) -> Result<Board, TrackerError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    check_dir(&dir)?;
    let (config, config_warning) = read_config(&dir)?;
    let mut files = Vec::new();
    for loc in LOCATIONS {
        scan_folder(&dir.join(loc.dir()), loc, &config.task_prefix, &mut files)?;
    }
    let mut board = Board::assemble(&dir, config, files, previous);
    board.warnings.extend(config_warning);
    Ok(board)
}

/// Only the board's configuration (the directory must exist; no task file is read): what
/// validating the configured states needs.
pub fn read_board_config(dir: &Path) -> Result<BoardConfig, TrackerError> {
    check_dir(dir)?;
    read_config(dir).map(|(config, _)| config)
}

fn check_dir(dir: &Path) -> Result<(), TrackerError> {
    let missing =
        "the Backlog.md board directory does not exist (run `backlog init` or set tracker.path)";
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(err("backlog_board_not_a_directory", dir, "not a directory")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(err(MISSING, dir, missing)),
        Err(e) => Err(err(IO, dir, e)),
    }
}

/// The board's config; absent means Backlog.md's defaults plus a warning.
fn read_config(dir: &Path) -> Result<(BoardConfig, Option<BoardWarning>), TrackerError> {
    let primary = dir.join("config.yml");
    let path = [primary.clone(), dir.join("config.yaml")]
        .into_iter()
        .find(|p| p.is_file());
    let Some(path) = path else {
        let warning = BoardWarning {
            kind: WarningKind::MissingConfig,
            message: format!(
                "{} not found; using Backlog.md's default statuses (To Do, In Progress, Done)",
                primary.display()
            ),
            paths: vec![primary],
        };
        return Ok((BoardConfig::default(), Some(warning)));
    };
    let bytes = read_capped(&path)
        .and_then(|b| b.ok_or_else(|| "cannot read file: not a regular file".into()));
    let cfg = bytes.and_then(|b| utf8(&b).and_then(parse_config));
    Ok((cfg.map_err(|e| err(BAD_CONFIG, &path, e))?, None))
}

/// Add every task file of one folder to `out`. A missing folder is empty (Backlog.md creates
/// folders lazily).
fn scan_folder(
    folder: &Path,
    location: Location,
    prefix: &str,
    out: &mut Vec<Result<BoardTask, (PathBuf, TaskProblem)>>,
) -> Result<(), TrackerError> {
    let entries = match fs::read_dir(folder) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err(IO, folder, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| err(IO, folder, e))?;
        let name = entry.file_name();
        if !is_task_file_name(&name.to_string_lossy(), prefix) {
            continue;
        }
        let path = entry.path();
        let task = match read_capped(&path) {
            Ok(Some(b)) => utf8(&b).and_then(parse_task),
            Ok(None) => continue, // deleted meanwhile, or a directory, FIFO, socket, device
            Err(p) => Err(p),
        };
        let task = task.map(|task| BoardTask {
            path: path.clone(),
            location,
            task,
        });
        out.push(task.map_err(|p| (path, p)));
    }
    Ok(())
}

/// `<prefix>-….md`, prefix compared case-insensitively (as Backlog.md's own glob `task-*.md`,
/// made tolerant of `TASK-1 - x.md` written by hand).
pub fn is_task_file_name(name: &str, prefix: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".md")
        && lower.len() > prefix.len() + 1 + ".md".len()
        && lower.starts_with(prefix)
        && lower.as_bytes().get(prefix.len()) == Some(&b'-')
}

/// The bytes of a regular file, refusing anything over [`MAX_FILE_BYTES`]; `Ok(None)` when it
/// is gone or not a regular file. The file is opened with `O_NOFOLLOW | O_NONBLOCK` and its type
/// checked with `fstat` on that descriptor: a name swapped for a FIFO between a check and the
/// open can then never block the reader, and a symlink never leads out of the board.
fn read_capped(path: &Path) -> Result<Option<Vec<u8>>, TaskProblem> {
    use std::os::unix::fs::OpenOptionsExt;
    let unreadable = |e: io::Error| match e.raw_os_error() {
        Some(libc::ELOOP) => "cannot read file: a symbolic link (not followed)".to_string(),
        _ => format!("cannot read file: {e}"),
    };
    let too_large = |n: u64| Err(format!("file is {n} bytes, over the 1 MiB limit"));
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other.map_err(unreadable)?,
    };
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Ok(None);
    }
    if meta.len() > MAX_FILE_BYTES {
        return too_large(meta.len());
    }
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(unreadable)?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        return too_large(buf.len() as u64);
    }
    Ok(Some(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_file_names() {
        assert!(is_task_file_name("task-1 - Set-up-CI.md", "task"));
        assert!(is_task_file_name("TASK-1 - x.md", "task"));
        assert!(is_task_file_name("back-119.2 - x.md", "back"));
        assert!(!is_task_file_name("task-1 - x.md", "back"));
        assert!(!is_task_file_name("README.md", "task"));
        assert!(!is_task_file_name("task-1 - x.md.swp", "task"));
        assert!(!is_task_file_name("tasks-1.md", "task"));
        assert!(!is_task_file_name("task-.md", "task"));
    }

    /// The board reader checked the type by name and then opened the file blocking: a task file
    /// swapped for a FIFO in between blocked the poll thread for good. The open itself must not
    /// block (the read runs on a thread; a hang fails the test at the timeout instead).
    #[test]
    fn a_task_file_swapped_for_a_fifo_does_not_block_the_read() {
        let dir = std::env::temp_dir().join(format!("baton-fifo-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("task-1 - x.md");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let path = fifo.clone();
        std::thread::spawn(move || tx.send(read_capped(&path)).unwrap());
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        if got.is_err() {
            // Unblock the reader before failing.
            let _ = fs::OpenOptions::new().write(true).open(&fifo);
        }
        assert_eq!(got.expect("the read of a FIFO returns"), Ok(None));
        // A symlink is not followed either, and says so.
        let link = dir.join("task-2 - y.md");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        let e = read_capped(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }
}
