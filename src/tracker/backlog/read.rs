//! The thin filesystem side of the Backlog.md reader: find the board's files, bound their size,
//! read their bytes, and hand them to the pure parser and [`Board::assemble`].

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::board::{Board, BoardWarning, Location, ScannedFile, WarningKind};
use super::parse::{parse_config, parse_task_bytes, BoardConfig, TaskProblem};

/// Task and config files larger than this are skipped unread (1 MiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The folders read, in order. `drafts/` is never read.
const LOCATIONS: [Location; 3] = [Location::Tasks, Location::Completed, Location::Archived];

/// Why a board could not be read at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoardErrorKind {
    /// The board directory does not exist.
    MissingBoardDir,
    /// The board path exists but is not a directory.
    NotADirectory,
    /// `config.yml` exists but is unreadable, too large or not valid YAML.
    BadConfig,
    /// A board folder could not be listed (permissions, I/O).
    Io,
}

impl BoardErrorKind {
    /// A stable snake_case name for logs and `baton check`.
    pub fn as_str(self) -> &'static str {
        match self {
            BoardErrorKind::MissingBoardDir => "backlog_board_missing",
            BoardErrorKind::NotADirectory => "backlog_board_not_a_directory",
            BoardErrorKind::BadConfig => "backlog_config_invalid",
            BoardErrorKind::Io => "backlog_board_io",
        }
    }
}

/// A board read failure, naming the path concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardError {
    /// The error class.
    pub kind: BoardErrorKind,
    /// The directory or file concerned.
    pub path: PathBuf,
    /// Human-readable detail.
    pub message: String,
}

impl fmt::Display for BoardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.kind.as_str(),
            self.path.display(),
            self.message
        )
    }
}

impl std::error::Error for BoardError {}

fn err(kind: BoardErrorKind, path: &Path, message: impl Into<String>) -> BoardError {
    BoardError {
        kind,
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Read the board at `dir`: `config.yml` (or `config.yaml`), then every `<prefix>-*.md` file in
/// `tasks/`, `completed/` and `archive/tasks/` (not recursive; `drafts/` ignored). Paths in the
/// result are absolute. Bad task files become warnings; only a missing/unlistable board or a bad
/// `config.yml` is an error.
pub fn read_board(dir: &Path) -> Result<Board, BoardError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    check_dir(&dir)?;
    let (config, config_warning) = read_config(&dir)?;
    let mut files = Vec::new();
    for loc in LOCATIONS {
        scan_folder(&dir.join(loc.dir()), loc, &config.task_prefix, &mut files)?;
    }
    let mut board = Board::assemble(&dir, config, files);
    board.warnings.extend(config_warning);
    Ok(board)
}

/// Only the board's configuration (the directory must exist; no task file is read): what
/// validating the configured states needs.
pub fn read_board_config(dir: &Path) -> Result<BoardConfig, BoardError> {
    check_dir(dir)?;
    read_config(dir).map(|(config, _)| config)
}

/// The board directory exists and is a directory.
fn check_dir(dir: &Path) -> Result<(), BoardError> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(err(BoardErrorKind::NotADirectory, dir, "not a directory")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(err(
                BoardErrorKind::MissingBoardDir,
                dir,
                "the Backlog.md board directory does not exist (run `backlog init` or set tracker.path)",
            ))
        }
        Err(e) => return Err(err(BoardErrorKind::Io, dir, e.to_string())),
    }
    Ok(())
}

/// The board's config; absent means Backlog.md's defaults plus a warning.
fn read_config(dir: &Path) -> Result<(BoardConfig, Option<BoardWarning>), BoardError> {
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
    let bytes =
        read_capped(&path).map_err(|p| err(BoardErrorKind::BadConfig, &path, p.to_string()))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        err(
            BoardErrorKind::BadConfig,
            &path,
            TaskProblem::NotUtf8(e.valid_up_to()).to_string(),
        )
    })?;
    let cfg = parse_config(text).map_err(|e| err(BoardErrorKind::BadConfig, &path, e))?;
    Ok((cfg, None))
}

/// Add every task file of one folder to `out`. A missing folder is empty (Backlog.md creates
/// folders lazily).
fn scan_folder(
    folder: &Path,
    location: Location,
    prefix: &str,
    out: &mut Vec<ScannedFile>,
) -> Result<(), BoardError> {
    let entries = match fs::read_dir(folder) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err(BoardErrorKind::Io, folder, e.to_string())),
    };
    for entry in entries {
        let entry = entry.map_err(|e| err(BoardErrorKind::Io, folder, e.to_string()))?;
        let name = entry.file_name();
        if !is_task_file_name(&name.to_string_lossy(), prefix) {
            continue;
        }
        let path = entry.path();
        // `metadata` follows symlinks, as Backlog.md does; directories and sockets are not tasks.
        match fs::metadata(&path) {
            Ok(m) if !m.is_file() => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // deleted meanwhile
            _ => {}
        }
        let parsed = read_capped(&path).and_then(|b| parse_task_bytes(&b));
        out.push(ScannedFile {
            path,
            location,
            parsed,
        });
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

/// The file's bytes, refusing anything over [`MAX_FILE_BYTES`] (checked before reading, and
/// again while reading in case the file grows).
fn read_capped(path: &Path) -> Result<Vec<u8>, TaskProblem> {
    let unreadable = |e: io::Error| TaskProblem::Unreadable(e.to_string());
    let len = fs::metadata(path).map_err(unreadable)?.len();
    if len > MAX_FILE_BYTES {
        return Err(TaskProblem::TooLarge(len));
    }
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(unreadable)?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        return Err(TaskProblem::TooLarge(buf.len() as u64));
    }
    Ok(buf)
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
}
