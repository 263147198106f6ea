//! A local, read-only tracker: a Backlog.md board (npm `backlog.md`) in the repository; its
//! layout, layers and mapping to issues: ARCHITECTURE.md and docs/trackers/backlog.md.
//!
//! One poll refreshes the running tasks, validates (which reads only `config.yml`) and fetches
//! the candidates, and a 5,000-task board takes about 110 ms of CPU to read, so while the board
//! is watched the calls of one refresh share one read: a read is reused only while no change
//! event arrived since it began and for at most [`REUSE_FOR`]. Without a watch every call reads
//! the board.

pub mod board;
pub mod config;
pub mod parse;
pub mod read;
pub mod watch;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

pub use board::{Board, BoardTask, BoardWarning, Location, WarningKind};
pub use config::validate_states;
pub use read::{read_board, read_board_after, MAX_FILE_BYTES};

use crate::model::Issue;
use crate::tracker::config::TrackerConfig;
use crate::tracker::{Tracker, TrackerBudget, TrackerError, TrackerErrorKind, WatchGuard};

/// The class of a configured state that is not a status of the board.
pub const UNKNOWN_STATE_CLASS: &str = "backlog_unknown_state";

/// Longest a board read is reused (only while watched and unchanged).
pub const REUSE_FOR: Duration = Duration::from_secs(1);

/// The last successful read (its tasks' files, the warnings already logged), and the change
/// count seen when it began (`None` once a later read failed: never reused then). It is kept
/// while the next read runs, so a read holds two boards at its peak (the board is the
/// repository's own task files, each at most [`MAX_FILE_BYTES`]).
type LastRead = (Option<Arc<Board>>, Option<(u64, Instant)>);

/// A Backlog.md board as a tracker (read-only). It re-reads the board for each call and logs
/// each warning once: when it first appears, and again only if it disappears and comes back. A
/// task keeps its file when a duplicate of its id appears later (the newcomer is skipped).
#[derive(Debug)]
pub struct BacklogTracker {
    dir: PathBuf,
    last: Mutex<LastRead>,
    /// Bumped by the watch on every relevant change event (before the debounce).
    changes: Arc<AtomicU64>,
    /// True once a watch is running; reads are reused only then.
    watched: AtomicBool,
    active_states: Vec<String>,
    terminal_states: Vec<String>,
}

impl BacklogTracker {
    /// A tracker for the board at `tracker.path` (nothing is read yet).
    pub fn new(cfg: &TrackerConfig) -> Result<Self, TrackerError> {
        Ok(BacklogTracker {
            dir: config::board_dir(cfg),
            last: Mutex::new((None, None)),
            changes: Arc::new(AtomicU64::new(0)),
            watched: AtomicBool::new(false),
            active_states: cfg.active_states.clone(),
            terminal_states: cfg.terminal_states.clone(),
        })
    }

    /// The whole board: read now (new warnings are logged, `log::error!` for duplicate ids), or
    /// the last read while the board is watched, nothing changed since that read began, and it
    /// is under [`REUSE_FOR`] old.
    pub fn board(&self) -> Result<Arc<Board>, TrackerError> {
        // A panic while holding the lock leaves only the last read behind; keep going.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let changes = self.changes.load(Ordering::SeqCst);
        if let (Some(board), Some((seen, at))) = &*last {
            if self.watched.load(Ordering::SeqCst) && *seen == changes && at.elapsed() < REUSE_FOR {
                return Ok(board.clone());
            }
        }
        last.1 = None;
        let at = Instant::now();
        let board = Arc::new(read_board_after(&self.dir, last.0.as_deref())?);
        let reported: HashSet<&BoardWarning> = last.0.iter().flat_map(|b| &b.warnings).collect();
        for w in board.warnings.iter().filter(|w| !reported.contains(w)) {
            match w.kind {
                WarningKind::DuplicateId => log::error!("backlog board: {}", w.message),
                _ => log::warn!("backlog board: {}", w.message),
            }
        }
        *last = (Some(board.clone()), Some((changes, at)));
        Ok(board)
    }
}

impl Tracker for BacklogTracker {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        let board = self.board()?;
        Ok(board.candidate_issues(&self.active_states, &self.terminal_states))
    }

    fn fetch_issues_by_states(&self, states: &[String]) -> Result<Vec<Issue>, TrackerError> {
        if states.is_empty() {
            return Ok(Vec::new());
        }
        let board = self.board()?;
        Ok(board.issues_by_states(states, &self.terminal_states))
    }

    fn fetch_issue_states_by_ids(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.board()?.issues_by_ids(ids, &self.terminal_states))
    }

    /// The board directory and its `config.yml` are readable, and every configured state is one
    /// of its statuses (no task file is read).
    fn validate(&self) -> Result<(), TrackerError> {
        let statuses = read::read_board_config(&self.dir)?.statuses;
        let problems = validate_states(&statuses, &self.active_states, &self.terminal_states);
        if problems.is_empty() {
            return Ok(());
        }
        let (kind, why) = (TrackerErrorKind::MissingTrackerProject, problems.join("; "));
        Err(TrackerError::with_class(kind, UNKNOWN_STATE_CLASS, why))
    }

    fn reset_cache(&self) {}

    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }

    fn watch(&self, changed: Sender<()>) -> Result<Option<WatchGuard>, TrackerError> {
        let guard = watch::watch_board(&self.dir, self.changes.clone(), changed);
        let failed =
            |e| TrackerError::with_class(TrackerErrorKind::Transport, "backlog_watch_failed", e);
        let guard = guard.map_err(failed)?;
        self.watched.store(true, Ordering::SeqCst);
        Ok(Some(Box::new(guard)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(board: &str, active: &[&str]) -> BacklogTracker {
        let cfg = TrackerConfig {
            kind: Some("backlog_md".into()),
            path: Some(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("fixtures/backlog")
                    .join(board),
            ),
            active_states: active.iter().map(|s| s.to_string()).collect(),
            terminal_states: vec!["Done".into()],
            ..TrackerConfig::default()
        };
        BacklogTracker::new(&cfg).unwrap()
    }

    #[test]
    fn reads_the_board_through_the_tracker_trait() {
        let t = tracker("real", &["To Do", "In Progress"]);
        t.validate().unwrap();
        let ids: Vec<String> = t
            .fetch_candidate_issues()
            .unwrap()
            .into_iter()
            .map(|i| i.identifier)
            .collect();
        assert_eq!(ids, ["task-1", "task-1.1", "task-2", "task-4"]);
        let done = t.fetch_issues_by_states(&["Done".into()]).unwrap();
        assert!(done.iter().any(|i| i.identifier == "task-5" && i.closed));
        let by_id = t
            .fetch_issue_states_by_ids(&["task-2".into(), "TASK-99".into()])
            .unwrap();
        assert_eq!(by_id.len(), 1);
        assert_eq!((by_id[0].number, by_id[0].repository.as_str()), (2, ""));
        assert!(by_id[0].url.as_deref().unwrap().starts_with("file:///"));
        assert!(t.fetch_issue_states_by_ids(&[]).unwrap().is_empty());
        assert_eq!(t.rate_limit(), None);
    }

    #[test]
    fn errors_keep_the_board_classes() {
        let t = tracker("real", &["To Do", "In Progres"]);
        let e = t.validate().unwrap_err();
        assert_eq!(e.class, UNKNOWN_STATE_CLASS);
        assert!(e.message.contains("did you mean \"In Progress\"?"), "{e}");
        let t = tracker("no-such-board", &["To Do"]);
        let e = t.fetch_candidate_issues().unwrap_err();
        assert_eq!(e.class, "backlog_board_missing");
        assert_eq!(e.kind, TrackerErrorKind::MissingTrackerProject);
        assert_eq!(t.validate().unwrap_err().class, "backlog_board_missing");
    }

    #[test]
    fn one_read_serves_a_refresh_while_watched_and_unchanged() {
        let dir = std::env::temp_dir().join(format!("baton-backlog-reuse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tasks")).unwrap();
        let file = dir.join("tasks/task-1 - a.md");
        let task = |status: &str| format!("---\nid: TASK-1\ntitle: a\nstatus: {status}\n---\n");
        std::fs::write(&file, task("To Do")).unwrap();
        let cfg = TrackerConfig {
            kind: Some("backlog_md".into()),
            path: Some(dir.clone()),
            active_states: vec!["To Do".into()],
            ..TrackerConfig::default()
        };
        let t = BacklogTracker::new(&cfg).unwrap();
        let (a, b) = (t.board().unwrap(), t.board().unwrap());
        assert!(!Arc::ptr_eq(&a, &b), "not watched: every call reads");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let _guard = t.watch(tx).unwrap().expect("a watch");
        let (a, b) = (t.board().unwrap(), t.board().unwrap());
        assert!(Arc::ptr_eq(&a, &b), "watched and unchanged: one read");
        assert_eq!(t.fetch_candidate_issues().unwrap().len(), 1);
        std::fs::write(&file, task("Done")).unwrap();
        rx.recv_timeout(Duration::from_secs(5))
            .expect("a change ping");
        assert!(
            t.fetch_candidate_issues().unwrap().is_empty(),
            "the edit is seen"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
