//! [`BacklogTracker`]: the `Tracker` implementation over a [`BoardReader`]. Every call re-reads
//! the board (a 5,000-task board reads in about 110 ms of CPU), so there is no cache to go
//! stale; the board is never written.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use crossbeam_channel::Sender;

use super::{validate_states, Board, BoardError, BoardErrorKind, BoardReader};
use crate::model::Issue;
use crate::tracker::config::TrackerConfig;
use crate::tracker::{Tracker, TrackerBudget, TrackerError, TrackerErrorKind, WatchGuard};

/// The class of a configured state that is not a status of the board.
pub const UNKNOWN_STATE_CLASS: &str = "backlog_unknown_state";

/// A Backlog.md board as a tracker (read-only).
#[derive(Debug)]
pub struct BacklogTracker {
    reader: Mutex<BoardReader>,
    active_states: Vec<String>,
    terminal_states: Vec<String>,
}

/// A board read failure as a tracker error, keeping the board's stable class name.
pub fn board_error(e: &BoardError) -> TrackerError {
    let kind = match e.kind {
        BoardErrorKind::MissingBoardDir | BoardErrorKind::NotADirectory => {
            TrackerErrorKind::MissingTrackerProject
        }
        BoardErrorKind::BadConfig => TrackerErrorKind::Payload,
        BoardErrorKind::Io => TrackerErrorKind::Transport,
    };
    TrackerError::with_class(
        kind,
        e.kind.as_str(),
        format!("{}: {}", e.path.display(), e.message),
    )
}

impl BacklogTracker {
    /// A tracker for the board at `tracker.path` (nothing is read yet).
    pub fn new(cfg: &TrackerConfig) -> Result<Self, TrackerError> {
        Ok(BacklogTracker {
            reader: Mutex::new(BoardReader::new(super::config::board_dir(cfg))),
            active_states: cfg.active_states.clone(),
            terminal_states: cfg.terminal_states.clone(),
        })
    }

    /// The board directory.
    pub fn dir(&self) -> PathBuf {
        self.lock().dir().to_path_buf()
    }

    /// Read the whole board now (new warnings are logged once).
    pub fn board(&self) -> Result<Board, TrackerError> {
        self.lock().read().map_err(|e| board_error(&e))
    }

    /// The configured states that are not statuses of `board`, one message each.
    pub fn state_problems(&self, board: &Board) -> Vec<String> {
        validate_states(
            &board.config.statuses,
            &self.active_states,
            &self.terminal_states,
        )
    }

    fn lock(&self) -> MutexGuard<'_, BoardReader> {
        // A panic while holding the lock leaves only a warning set behind; keep going.
        self.reader.lock().unwrap_or_else(|p| p.into_inner())
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
        Ok(self
            .board()?
            .issues_by_states(states, &self.terminal_states))
    }

    fn fetch_issue_states_by_ids(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.board()?.issues_by_ids(ids, &self.terminal_states))
    }

    /// The board exists and is readable, and every configured state is one of its statuses.
    fn validate(&self) -> Result<(), TrackerError> {
        let board = self.board()?;
        let problems = self.state_problems(&board);
        match problems.is_empty() {
            true => Ok(()),
            false => Err(TrackerError::with_class(
                TrackerErrorKind::MissingTrackerProject,
                UNKNOWN_STATE_CLASS,
                problems.join("; "),
            )),
        }
    }

    fn reset_cache(&self) {}

    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }

    fn watch(&self, changed: Sender<()>) -> Result<Option<WatchGuard>, TrackerError> {
        let guard = super::watch::watch_board(&self.dir(), changed).map_err(|e| {
            TrackerError::with_class(TrackerErrorKind::Transport, "backlog_watch_failed", e)
        })?;
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
}
