//! A local tracker: a Backlog.md board (npm `backlog.md`) in the repository, read-only. The
//! board directory (default `backlog/`) holds `config.yml` (its `statuses`) and one Markdown file
//! per task with YAML front matter, `tasks/task-<n> - <Title>.md`; Baton reads `tasks/`,
//! `completed/` and `archive/tasks/` (both terminal, like a CLOSED GitHub issue). How a task maps
//! to an [`Issue`](crate::model::Issue): docs/trackers/backlog.md.
//!
//! Layers: [`parse`] (pure text → typed rows), [`board`] (pure assembly, duplicates, mapping,
//! selection), [`read`] (the filesystem walk), and [`BoardReader`], which logs each warning once
//! while it persists. On top of them, the tracker kind `backlog_md`: [`config`] (`tracker.path`,
//! the registry entry, state validation, its section of `baton check`), [`tracker`]
//! ([`BacklogTracker`]) and [`watch`] (the debounced board watch behind `Tracker::watch`). Baton
//! never writes the board.

pub mod board;
pub mod config;
pub mod parse;
pub mod read;
pub mod tracker;
pub mod watch;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

pub use board::{Board, BoardTask, BoardWarning, Location, WarningKind};
pub use config::validate_states;
pub use read::{read_board, read_board_keeping, MAX_FILE_BYTES};
pub use tracker::BacklogTracker;

/// Reads one board repeatedly (each refresh re-reads it) and logs each warning once: when it
/// first appears, and again only if it disappears and comes back. A task keeps its file when a
/// duplicate of its id appears later (the newcomer is skipped).
#[derive(Debug)]
pub struct BoardReader {
    dir: PathBuf,
    reported: HashSet<BoardWarning>,
    owners: HashMap<String, PathBuf>,
}

impl BoardReader {
    /// A reader for the board at `dir` (nothing is read yet).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BoardReader {
            dir: dir.into(),
            reported: HashSet::new(),
            owners: HashMap::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Read the board now. New warnings are logged (`log::error!` for duplicate ids,
    /// `log::warn!` otherwise); all current warnings are also in the returned board.
    pub fn read(&mut self) -> Result<Board, crate::tracker::TrackerError> {
        let board = read_board_keeping(&self.dir, &self.owners)?;
        self.owners = board.owners();
        let current: HashSet<BoardWarning> = board.warnings.iter().cloned().collect();
        for w in &board.warnings {
            if self.reported.contains(w) {
                continue;
            }
            match w.kind {
                WarningKind::DuplicateId => log::error!("backlog board: {}", w.message),
                _ => log::warn!("backlog board: {}", w.message),
            }
        }
        self.reported = current;
        Ok(board)
    }
}
