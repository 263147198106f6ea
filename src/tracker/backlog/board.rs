//! A whole Backlog.md board, assembled from parsed task files (pure: no I/O), and its mapping to
//! normalized [`Issue`]s with the same selection rules as the GitHub tracker.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::model::{contains_name, normalize_labels, BlockerRef, Issue};

use super::parse::{id_number, identifier_for, priority_rank, BoardConfig, TaskFile, TaskProblem};

/// The blocker state reported for a dependency with no readable task file.
pub const MISSING_BLOCKER_STATE: &str = "MISSING";

/// Where a task file lives on the board: `tasks/` (the task's `status` decides), `completed/`
/// (`backlog task complete`) or `archive/tasks/` (`backlog task archive`, which keeps the old
/// status); the last two are terminal whatever the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    Tasks,
    Completed,
    Archived,
}

impl Location {
    /// The board sub-directory.
    pub fn dir(self) -> &'static str {
        match self {
            Location::Tasks => "tasks",
            Location::Completed => "completed",
            Location::Archived => "archive/tasks",
        }
    }

    /// True for `completed/` and `archive/tasks/` (mapped to `Issue::closed`).
    pub fn is_terminal(self) -> bool {
        self != Location::Tasks
    }
}

/// One readable task on the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardTask {
    pub path: PathBuf,
    pub location: Location,
    pub task: TaskFile,
}

/// What kind of problem a [`BoardWarning`] reports: one task file skipped, several files with
/// the same id (all skipped but the one read before), or no `config.yml` (defaults used).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WarningKind {
    SkippedFile,
    DuplicateId,
    MissingConfig,
}

/// A problem found while reading the board; the board is still usable without the named files.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BoardWarning {
    pub kind: WarningKind,
    pub paths: Vec<PathBuf>,
    /// One line naming the file(s) and the problem.
    pub message: String,
}

/// A board snapshot: every readable, uniquely identified task plus the warnings about the rest.
#[derive(Debug, Clone, Default)]
pub struct Board {
    pub dir: PathBuf,
    pub config: BoardConfig,
    /// Ordered by id (numerically per segment).
    pub tasks: Vec<BoardTask>,
    /// Skipped files and other problems, in a stable order.
    pub warnings: Vec<BoardWarning>,
    by_id: HashMap<String, usize>,
}

impl Board {
    /// Assemble a board from the files read (a task, or the file and why it is not one):
    /// unreadable files become warnings, and every file of an id claimed by more than one file is
    /// dropped with one warning naming them all, except the id's file in the `previous` read: a
    /// copy that appears later must not take away a task that may be running.
    pub fn assemble(
        dir: &Path,
        config: BoardConfig,
        files: Vec<Result<BoardTask, (PathBuf, TaskProblem)>>,
        previous: Option<&Board>,
    ) -> Board {
        let mut warnings = Vec::new();
        let mut groups: HashMap<String, Vec<BoardTask>> = HashMap::new();
        for f in files {
            match f {
                Ok(t) => groups.entry(t.task.id.clone()).or_default().push(t),
                Err((path, problem)) => warnings.push(BoardWarning {
                    kind: WarningKind::SkippedFile,
                    message: format!("skipping task file {}: {problem}", path.display()),
                    paths: vec![path],
                }),
            }
        }
        let mut tasks = Vec::new();
        for (id, mut group) in groups {
            if group.len() == 1 {
                tasks.extend(group.pop());
                continue;
            }
            let owner = previous.and_then(|p| p.get(&id)).map(|t| &t.path);
            let kept = group.iter().position(|t| Some(&t.path) == owner);
            let kept = kept.map(|i| group.swap_remove(i));
            let mut paths: Vec<PathBuf> = group.into_iter().map(|t| t.path).collect();
            paths.sort();
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            let names = names.join(", ");
            let message = match &kept {
                Some(k) => {
                    let k = k.path.display();
                    format!("duplicate task id {id}: keeping {k} (read before), skipping {names}")
                }
                None => format!("duplicate task id {id}: skipping all of {names}"),
            };
            tasks.extend(kept);
            warnings.push(BoardWarning {
                kind: WarningKind::DuplicateId,
                message,
                paths,
            });
        }
        tasks.sort_by_cached_key(|t| id_sort_key(&t.task.id));
        warnings.sort_by(|a, b| a.paths.cmp(&b.paths));
        let by_id = (tasks.iter().enumerate())
            .map(|(i, t)| (t.task.id.clone(), i))
            .collect();
        Board {
            dir: dir.to_path_buf(),
            config,
            tasks,
            warnings,
            by_id,
        }
    }

    /// The task with this id (any spelling `canonical_id` accepts).
    pub fn get(&self, id: &str) -> Option<&BoardTask> {
        let canon = super::parse::canonical_id(id)?;
        self.by_id
            .get(&canon)
            .and_then(|&i| self.tasks.get(i))
            .filter(|t| t.task.id == canon)
    }

    /// Every task as an issue. `terminal_states` only decides each blocker's `terminal` flag.
    pub fn issues(&self, terminal_states: &[String]) -> Vec<Issue> {
        self.issues_where(terminal_states, |_| true)
    }

    fn issues_where(&self, terminal: &[String], keep: impl Fn(&BoardTask) -> bool) -> Vec<Issue> {
        let tasks = self.tasks.iter().filter(|t| keep(t));
        tasks.map(|t| self.to_issue(t, terminal)).collect()
    }

    /// `Tracker::fetch_candidate_issues`: status in `active_states`, not terminal, not in
    /// `completed/` or `archive/tasks/`.
    pub fn candidate_issues(&self, active_states: &[String], terminal: &[String]) -> Vec<Issue> {
        self.issues_where(terminal, |t| {
            !t.location.is_terminal()
                && contains_name(active_states, &t.task.status)
                && !contains_name(terminal, &t.task.status)
        })
    }

    /// `Tracker::fetch_issues_by_states`: status in `states`; when `states` names a terminal
    /// state, tasks in `completed/` and `archive/tasks/` are included whatever their status.
    pub fn issues_by_states(&self, states: &[String], terminal: &[String]) -> Vec<Issue> {
        let wants_terminal = states.iter().any(|s| contains_name(terminal, s));
        self.issues_where(terminal, |t| {
            contains_name(states, &t.task.status) || (wants_terminal && t.location.is_terminal())
        })
    }

    /// `Tracker::fetch_issue_states_by_ids`: the tasks with these ids; unknown ids are omitted.
    pub fn issues_by_ids(&self, ids: &[String], terminal_states: &[String]) -> Vec<Issue> {
        let mut seen = std::collections::HashSet::new();
        ids.iter()
            .filter_map(|id| self.get(id))
            .filter(|t| seen.insert(t.task.id.clone()))
            .map(|t| self.to_issue(t, terminal_states))
            .collect()
    }

    /// Map one task to the normalized issue (see the module docs of `tracker::backlog`).
    pub fn to_issue(&self, t: &BoardTask, terminal_states: &[String]) -> Issue {
        let task = &t.task;
        let blocker = |d: &String| self.blocker(d, terminal_states);
        Issue {
            id: task.id.clone(),
            item_id: String::new(),
            identifier: identifier_for(&task.id),
            number: id_number(&task.id),
            repository: String::new(),
            title: task.title.clone(),
            description: Some(task.body.clone()).filter(|b| !b.is_empty()),
            priority: priority_rank(task.priority.as_deref(), &self.config.priorities),
            state: task.status.clone(),
            branch_name: None,
            url: Some(file_url(&t.path)),
            labels: normalize_labels(task.labels.iter().map(String::as_str)),
            blocked_by: task.dependencies.iter().map(blocker).collect(),
            closed: t.location.is_terminal(),
            created_at: task.created_at.clone(),
            updated_at: task.updated_at.clone(),
            truncated: Vec::new(),
        }
    }

    /// The blocker reference for dependency `id`, read from the blocker's own file. A missing
    /// (or skipped) blocker is [`MISSING_BLOCKER_STATE`] and non-terminal.
    fn blocker(&self, id: &str, terminal_states: &[String]) -> BlockerRef {
        match self.get(id) {
            Some(b) => BlockerRef {
                id: b.task.id.clone(),
                identifier: identifier_for(&b.task.id),
                state: b.task.status.clone(),
                terminal: b.location.is_terminal()
                    || contains_name(terminal_states, &b.task.status),
            },
            None => BlockerRef {
                id: id.to_string(),
                identifier: identifier_for(id),
                state: MISSING_BLOCKER_STATE.to_string(),
                terminal: false,
            },
        }
    }
}

/// Sort key: the prefix, then each numeric segment as a number (`TASK-2` before `TASK-10`).
fn id_sort_key(id: &str) -> (String, Vec<u64>) {
    let (prefix, body) = id.split_once('-').unwrap_or((id, ""));
    let nums = body
        .split('.')
        .map(|s| s.parse::<u64>().unwrap_or(u64::MAX))
        .collect();
    (prefix.to_string(), nums)
}

/// A `file://` URL for an absolute path, percent-encoding every byte outside
/// `[A-Za-z0-9-._~/]` (spaces, `%`, `#`, `?`, non-ASCII UTF-8, …).
pub fn file_url(path: &Path) -> String {
    let bytes = path.as_os_str().as_encoded_bytes();
    let mut out = String::with_capacity(bytes.len() + 8);
    out.push_str("file://");
    if bytes.first() != Some(&b'/') {
        out.push('/');
    }
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_task;
    use super::*;

    /// A board from `(path, location, id, status, dependencies)` rows.
    fn board(rows: &[(&str, Location, &str, &str, &str)]) -> Board {
        let files = rows
            .iter()
            .map(|(path, location, id, status, deps)| {
                let task = parse_task(&format!(
                    "---\nid: {id}\ntitle: T {id}\nstatus: {status}\ndependencies: [{deps}]\n---\n"
                ));
                Ok(BoardTask {
                    path: PathBuf::from(path),
                    location: *location,
                    task: task.unwrap(),
                })
            })
            .collect();
        Board::assemble(Path::new("/b"), BoardConfig::default(), files, None)
    }

    #[test]
    fn file_urls_are_percent_encoded() {
        assert_eq!(
            file_url(Path::new("/b/tasks/task-1 - Ünï #1%.md")),
            "file:///b/tasks/task-1%20-%20%C3%9Cn%C3%AF%20%231%25.md"
        );
    }

    #[test]
    fn duplicates_are_all_skipped_and_named() {
        let b = board(&[
            (
                "/b/tasks/task-1 - a.md",
                Location::Tasks,
                "task-1",
                "To Do",
                "",
            ),
            (
                "/b/completed/task-01 - b.md",
                Location::Completed,
                "TASK-01",
                "Done",
                "",
            ),
            (
                "/b/tasks/task-2 - c.md",
                Location::Tasks,
                "task-2",
                "To Do",
                "task-1",
            ),
        ]);
        assert_eq!(b.tasks.len(), 1);
        assert_eq!(b.warnings.len(), 1);
        let w = &b.warnings[0];
        assert_eq!(w.kind, WarningKind::DuplicateId);
        assert!(w.message.contains("TASK-1"), "{}", w.message);
        assert!(
            w.message.contains("/b/tasks/task-1 - a.md"),
            "{}",
            w.message
        );
        assert!(
            w.message.contains("/b/completed/task-01 - b.md"),
            "{}",
            w.message
        );
        // The duplicated id now counts as a missing, non-terminal blocker.
        let i = &b.issues(&[])[0];
        assert_eq!(i.blocked_by[0].state, MISSING_BLOCKER_STATE);
        assert!(!i.blocked_by[0].terminal);
    }

    #[test]
    fn selection_follows_github_semantics() {
        let b = board(&[
            (
                "/b/tasks/task-10.md",
                Location::Tasks,
                "task-10",
                "To Do",
                "",
            ),
            ("/b/tasks/task-2.md", Location::Tasks, "task-2", "Done", ""),
            (
                "/b/archive/tasks/task-3.md",
                Location::Archived,
                "task-3",
                "To Do",
                "",
            ),
        ]);
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ids = |v: Vec<Issue>| v.into_iter().map(|i| i.identifier).collect::<Vec<_>>();
        let (active, terminal) = (s(&["To Do"]), s(&["Done"]));
        assert_eq!(ids(b.candidate_issues(&active, &terminal)), ["task-10"]);
        assert_eq!(
            ids(b.issues_by_states(&terminal, &terminal)),
            ["task-2", "task-3"]
        );
        assert_eq!(
            ids(b.issues_by_states(&active, &terminal)),
            ["task-3", "task-10"]
        );
        assert_eq!(
            ids(b.issues_by_ids(&s(&["task-3", "TASK-003", "task-9"]), &terminal)),
            ["task-3"]
        );
    }
}
