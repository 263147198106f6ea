//! The `backlog_md` section of `baton check`: the board directory and its `config.yml`
//! statuses, the configured states checked against them (with a "did you mean" hint), a count of
//! the tasks read per folder, and one warning line per skipped file.

use super::board::{Location, WarningKind};
use super::config::board_dir;
use super::read_board;
use super::tracker::board_error;
use crate::model::Issue;
use crate::tracker::config::{report_states, CheckLines, TrackerConfig};

/// What a configured state must match.
const STATES_NOUN: &str = "status of the Backlog.md board (config.yml statuses)";

/// The Backlog.md part of the report; every task as an issue for the plan, `None` when the
/// board cannot be read.
pub(crate) fn report(cfg: &TrackerConfig, r: &mut CheckLines) -> Option<Vec<Issue>> {
    // Read directly, not through the tracker's reader: the report lists the warnings itself,
    // so they are not logged too.
    let board = match read_board(&board_dir(cfg)) {
        Ok(b) => b,
        Err(e) => {
            r.push("fail", format!("board: {}", board_error(&e)));
            return None;
        }
    };
    r.push("ok", format!("board: {}", board.dir.display()));
    let names: Vec<&str> = board.config.statuses.iter().map(String::as_str).collect();
    report_states(r, "statuses (config.yml)", &names, cfg, STATES_NOUN);
    let count = |loc: Location| board.tasks.iter().filter(|t| t.location == loc).count();
    r.push(
        "ok",
        format!(
            "tasks: {} in tasks/, {} in completed/, {} in archive/tasks/ (terminal); {} warning(s)",
            count(Location::Tasks),
            count(Location::Completed),
            count(Location::Archived),
            board.warnings.len()
        ),
    );
    for w in &board.warnings {
        match w.kind {
            WarningKind::DuplicateId => r.push("fail", &w.message),
            _ => r.push("warn", &w.message),
        }
    }
    // Tasks in completed/ and archive/tasks/ are terminal whatever their status: not in the plan.
    let mut issues = board.issues(&cfg.terminal_states);
    issues.retain(|i| !i.closed);
    Some(issues)
}
