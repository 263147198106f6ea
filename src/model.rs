//! The normalized domain model shared by the tracker, the orchestrator, prompts and the status surface
//! (spec §4.1.1).

use serde::{Deserialize, Serialize};

/// A normalized issue from the tracker (spec §4.1.1). Field docs give the GitHub Projects (v2)
/// meaning; another tracker fills what applies and leaves the rest empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Issue {
    /// The tracker's stable id (GitHub: the Issue node id `I_…`); the internal map key.
    pub id: String,
    /// The id of the board entry (GitHub: the ProjectV2Item node id `PVTI_…`); may be empty.
    pub item_id: String,
    /// Human-readable key used for logs and workspace names (GitHub: `<owner>__<repo>-<number>`,
    /// e.g. `acme__myrepo-123`).
    pub identifier: String,
    pub number: u64,
    /// `owner/name` of the repository (empty when the tracker has none).
    pub repository: String,
    /// Issue title (untrusted text).
    pub title: String,
    /// Issue body (untrusted text), if any.
    pub description: Option<String>,
    /// 1-based position of the `priority_field` option; lower is more urgent; `None` when unset.
    pub priority: Option<u32>,
    /// The state name (trimmed), e.g. `In Progress` (GitHub: the project Status option).
    pub state: String,
    pub branch_name: Option<String>,
    /// URL of the issue (GitHub: its HTML page).
    pub url: Option<String>,
    /// Labels, trimmed, lowercased and deduplicated.
    pub labels: Vec<String>,
    pub blocked_by: Vec<BlockerRef>,
    /// True when the issue is closed outside the board (GitHub: CLOSED), which is always
    /// terminal whatever its state.
    pub closed: bool,
    /// RFC 3339 creation timestamp, when known.
    pub created_at: Option<String>,
    /// RFC 3339 update timestamp, when known.
    pub updated_at: Option<String>,
    /// Lists the tracker returned only in part (`labels`, `blocked_by`: GitHub's first 50
    /// labels and 20 blockers): a dispatch rule that depends on one fails closed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<String>,
}

/// A "blocked by" reference (spec §4.1.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct BlockerRef {
    pub id: String,
    pub identifier: String,
    /// The blocker's state (GitHub: its Status on the same project when present, otherwise
    /// `OPEN`/`CLOSED`).
    pub state: String,
    /// True when the blocker counts as terminal (a terminal state, or GitHub CLOSED when not on
    /// the project).
    pub terminal: bool,
}

/// Normalize a state or label for comparison: trim, then lowercase (spec §4.2).
pub(crate) fn normalize_name(s: &str) -> String {
    s.trim().to_lowercase()
}

/// Labels trimmed, lowercased, blank ones dropped, duplicates removed (first occurrence kept).
pub(crate) fn normalize_labels<'a>(labels: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in labels.into_iter().map(normalize_name) {
        if !n.is_empty() && !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// True when `list` holds `name`, both compared trimmed and lowercased (states, labels, repos).
pub(crate) fn contains_name(list: &[String], name: &str) -> bool {
    let n = normalize_name(name);
    list.iter().any(|s| normalize_name(s) == n)
}

impl Issue {
    pub(crate) fn normalized_state(&self) -> String {
        normalize_name(&self.state)
    }

    /// True when the issue carries `label` (compared trimmed and lowercased).
    pub(crate) fn has_label(&self, label: &str) -> bool {
        let want = normalize_name(label);
        !want.is_empty() && self.labels.iter().any(|l| normalize_name(l) == want)
    }
}
