//! Normalization of GitHub payloads into [`Issue`] (spec §4.1.1, §11.3). Board pages are
//! deserialized straight into typed rows ([`ItemsPage`], [`ItemRow`], [`IssueRow`]: every member
//! optional, unknown ones ignored) instead of `serde_json::Value` trees; each item is read into
//! its row on its own, so one bad record only drops itself. Pure functions, so every bad shape is
//! a unit test away.

use serde::Deserialize;
use serde_json::Value;

use crate::model::{contains_name, normalize_name, BlockerRef, Issue};

/// Why a project item did not become an issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// A draft issue.
    Draft,
    /// A pull request.
    PullRequest,
    /// A redacted item (content not visible to the token).
    Redacted,
    /// An archived item.
    Archived,
    /// The content could not be normalized (logged).
    Malformed,
    /// The item has no Status value.
    NoStatus,
}

/// A selected single-select value: option id and trimmed name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionValue {
    /// Option id.
    pub option_id: Option<String>,
    /// Option name (trimmed).
    pub name: String,
}

/// The `data` of one `ProjectItems*` reply.
#[derive(Debug, Default, Deserialize)]
pub struct ItemsPage {
    /// The project node (`null` when the id no longer resolves).
    pub node: Option<ItemsNode>,
    /// The query's cost and budget.
    #[serde(rename = "rateLimit")]
    pub rate_limit: Option<RateLimitRow>,
}

/// The project node of an items page.
#[derive(Debug, Deserialize)]
pub struct ItemsNode {
    /// The `items` connection.
    pub items: ItemConnection,
}

/// One page of the `items` connection.
#[derive(Debug, Deserialize)]
pub struct ItemConnection {
    /// Paging state.
    #[serde(rename = "pageInfo")]
    pub page_info: PageInfoRow,
    /// The items, each read into an [`ItemRow`] on its own (one that does not fit is malformed
    /// and dropped alone).
    pub nodes: Vec<Box<serde_json::value::RawValue>>,
}

/// `pageInfo`.
#[derive(Debug, Deserialize)]
pub struct PageInfoRow {
    /// More pages follow.
    #[serde(rename = "hasNextPage")]
    pub has_next_page: Option<bool>,
    /// Cursor of the last item of this page.
    #[serde(rename = "endCursor")]
    pub end_cursor: Option<String>,
}

/// The `RateLimit` fragment.
#[derive(Debug, Deserialize)]
pub struct RateLimitRow {
    /// Points this query cost.
    pub cost: Option<i64>,
    /// Points per window.
    pub limit: Option<i64>,
    /// Points left.
    pub remaining: Option<i64>,
    /// Window reset (RFC 3339).
    #[serde(rename = "resetAt")]
    pub reset_at: Option<String>,
}

/// One project item of a page.
#[derive(Debug, Deserialize)]
pub struct ItemRow {
    /// Item node id.
    pub id: Option<String>,
    /// `ISSUE`, `DRAFT_ISSUE`, `PULL_REQUEST`, `REDACTED`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Archived on the board.
    #[serde(rename = "isArchived")]
    pub is_archived: Option<bool>,
    /// Status value.
    pub status: Option<OptionRow>,
    /// Priority value (when asked for).
    pub priority: Option<OptionRow>,
    /// The issue (or the bare `__typename` of a draft or pull request).
    pub content: Option<IssueRow>,
}

/// A single-select field value as sent (`{}` for other field types).
#[derive(Debug, Default, Deserialize)]
pub struct OptionRow {
    /// Option name.
    pub name: Option<String>,
    /// Option id.
    #[serde(rename = "optionId")]
    pub option_id: Option<String>,
}

/// The `IssueFields` fragment (plus `blockedBy` nodes, kept as small `Value`s so one unusable
/// blocker only drops itself).
#[derive(Debug, Default, Deserialize)]
pub struct IssueRow {
    /// `Issue`, `DraftIssue`, `PullRequest`.
    #[serde(rename = "__typename")]
    pub typename: Option<String>,
    /// Issue node id.
    pub id: Option<String>,
    /// Issue number.
    pub number: Option<u64>,
    /// Title.
    pub title: Option<String>,
    /// Body.
    pub body: Option<String>,
    /// HTML URL.
    pub url: Option<String>,
    /// `OPEN` / `CLOSED`.
    pub state: Option<String>,
    /// RFC 3339.
    #[serde(rename = "createdAt")]
    pub created_at: Option<String>,
    /// RFC 3339.
    #[serde(rename = "updatedAt")]
    pub updated_at: Option<String>,
    /// Labels.
    pub labels: Option<Nodes<NameRow>>,
    /// Repository.
    pub repository: Option<RepositoryRow>,
    /// Blockers.
    #[serde(rename = "blockedBy")]
    pub blocked_by: Option<Nodes<Value>>,
}

/// A connection's `nodes` (`null` elements allowed).
#[derive(Debug, Deserialize)]
pub struct Nodes<T> {
    /// The nodes.
    pub nodes: Option<Vec<Option<T>>>,
    /// Whether more nodes follow (asked for `labels` and `blockedBy`).
    #[serde(rename = "pageInfo")]
    pub page_info: Option<PageInfoRow>,
}

impl<T> Nodes<T> {
    /// True when GitHub reports nodes past this page.
    fn cut(this: &Option<Self>) -> bool {
        let info = this.as_ref().and_then(|n| n.page_info.as_ref());
        info.and_then(|i| i.has_next_page) == Some(true)
    }
}

/// `{ name }`.
#[derive(Debug, Deserialize)]
pub struct NameRow {
    /// The name.
    pub name: Option<String>,
}

/// `{ nameWithOwner }`.
#[derive(Debug, Deserialize)]
pub struct RepositoryRow {
    /// `owner/name`.
    #[serde(rename = "nameWithOwner")]
    pub name_with_owner: Option<String>,
}

impl IssueRow {
    /// The blocker nodes, if any.
    pub fn blocker_nodes(&self) -> impl Iterator<Item = &Value> {
        self.blocked_by
            .iter()
            .filter_map(|b| b.nodes.as_ref())
            .flatten()
            .flatten()
    }
}

/// Read a typed single-select value: `null`, `{}` (another field type) and blank names are unset.
pub fn option_row(v: Option<&OptionRow>) -> Option<OptionValue> {
    let v = v?;
    let name = v.name.as_deref()?.trim();
    if name.is_empty() {
        return None;
    }
    Some(OptionValue {
        option_id: v.option_id.clone(),
        name: name.to_string(),
    })
}

/// Read a `fieldValueByName` selection: `null`, `{}` (another field type) and blank names are unset.
pub fn option_value(v: Option<&Value>) -> Option<OptionValue> {
    let row = OptionRow::deserialize(v?).ok()?;
    option_row(Some(&row))
}

/// `<owner>__<repo>-<number>` from `owner/repo` (spec §4.2), or GitHub's own `owner/repo#number`
/// when that form would be ambiguous: an owner containing `_` (GitHub logins cannot, a hostile
/// server can) makes `a_/b#1` and `a/_b#1` both `a___b-1`, and two issues would share a
/// workspace. Every identifier then names one issue.
pub fn identifier(name_with_owner: &str, number: u64) -> Option<String> {
    let (owner, repo) = name_with_owner.split_once('/')?;
    if owner.is_empty() || repo.is_empty() || repo.contains('/') {
        return None;
    }
    if owner.contains('_') {
        return Some(format!("{owner}/{repo}#{number}"));
    }
    Some(format!("{owner}__{repo}-{number}"))
}

/// Labels trimmed, lowercased, blank ones dropped, duplicates removed (first occurrence kept).
pub fn normalize_labels(content: &IssueRow) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let nodes = content.labels.as_ref().and_then(|l| l.nodes.as_ref());
    for l in nodes.into_iter().flatten().flatten() {
        if let Some(name) = &l.name {
            let n = normalize_name(name);
            if !n.is_empty() && !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

fn timestamp(v: Option<&str>) -> Option<String> {
    let t = crate::timefmt::parse_rfc3339(v?)?;
    Some(crate::timefmt::rfc3339(t))
}

/// Normalize Issue `content` (without blockers). `Err` names what made the record malformed.
pub fn normalize_issue(
    content: &IssueRow,
    item_id: &str,
    state: &str,
    priority: Option<u32>,
) -> Result<Issue, String> {
    let id = content
        .id
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or("issue without id")?;
    let number = content
        .number
        .ok_or_else(|| format!("issue {id} without a number"))?;
    let repository = content
        .repository
        .as_ref()
        .and_then(|r| r.name_with_owner.as_deref())
        .ok_or_else(|| format!("issue {id} without repository.nameWithOwner"))?;
    let identifier = identifier(repository, number)
        .ok_or_else(|| format!("issue {id} has an unusable repository name {repository:?}"))?;
    let title = content
        .title
        .as_deref()
        .ok_or_else(|| format!("issue {id} without a title"))?;
    let closed = match content.state.as_deref() {
        Some("OPEN") => false,
        Some("CLOSED") => true,
        other => return Err(format!("issue {id} has an unknown state {other:?}")),
    };
    Ok(Issue {
        id: id.to_string(),
        item_id: item_id.to_string(),
        identifier,
        number,
        repository: repository.to_string(),
        title: title.to_string(),
        description: content
            .body
            .as_deref()
            .filter(|b| !b.trim().is_empty())
            .map(str::to_string),
        priority,
        state: state.trim().to_string(),
        branch_name: None,
        url: content.url.clone(),
        labels: normalize_labels(content),
        blocked_by: Vec::new(),
        closed,
        created_at: timestamp(content.created_at.as_deref()),
        updated_at: timestamp(content.updated_at.as_deref()),
        truncated: [
            ("labels", Nodes::cut(&content.labels)),
            ("blocked_by", Nodes::cut(&content.blocked_by)),
        ]
        .into_iter()
        .filter(|(_, cut)| *cut)
        .map(|(list, _)| list.to_string())
        .collect(),
    })
}

/// [`normalize_issue`] of an issue node read as a `Value` (refresh replies): a member of the
/// wrong type makes the record malformed.
pub fn normalize_issue_value(
    content: &Value,
    item_id: &str,
    state: &str,
    priority: Option<u32>,
) -> Result<Issue, String> {
    let row = IssueRow::deserialize(content).map_err(|e| format!("malformed issue record: {e}"))?;
    normalize_issue(&row, item_id, state, priority)
}

/// Normalize blocker nodes (`blockedBy.nodes`). `status_on_project(blocker_node)` returns the
/// blocker's Status on our project when it has one. Unusable entries are dropped (best-effort
/// metadata).
pub fn normalize_blockers<'a>(
    nodes: impl IntoIterator<Item = &'a Value>,
    terminal_states: &[String],
    status_on_project: impl Fn(&Value) -> Option<String>,
) -> Vec<BlockerRef> {
    let mut out = Vec::new();
    for b in nodes {
        let (Some(id), Some(number), Some(repo)) = (
            b.get("id").and_then(Value::as_str),
            b.get("number").and_then(Value::as_u64),
            b.get("repository")
                .and_then(|r| r.get("nameWithOwner"))
                .and_then(Value::as_str),
        ) else {
            continue;
        };
        let Some(ident) = identifier(repo, number) else {
            continue;
        };
        let closed = b.get("state").and_then(Value::as_str) == Some("CLOSED");
        let (state, terminal) = match status_on_project(b) {
            Some(status) => {
                let t = closed || contains_name(terminal_states, &status);
                (status, t)
            }
            None if closed => ("CLOSED".to_string(), true),
            None => ("OPEN".to_string(), false),
        };
        out.push(BlockerRef {
            id: id.to_string(),
            identifier: ident,
            state,
            terminal,
        });
    }
    out
}

/// The Status of `issue_node` on project `project_id` from its `projectItems` (archived items
/// ignored), plus the item itself.
pub fn item_on_project<'a>(issue_node: &'a Value, project_id: &str) -> Option<&'a Value> {
    issue_node
        .get("projectItems")
        .and_then(|p| p.get("nodes"))
        .and_then(Value::as_array)?
        .iter()
        .find(|it| {
            it.get("project")
                .and_then(|p| p.get("id"))
                .and_then(Value::as_str)
                == Some(project_id)
                && it.get("isArchived").and_then(Value::as_bool) != Some(true)
        })
}

/// One page of a refreshed issue's `projectItems`, read strictly.
#[derive(Debug, PartialEq)]
pub enum ItemsOnPage<'a> {
    /// Our project's (non-archived) item.
    Ours(&'a Value),
    /// Not on this page; the cursor of the next page, `None` on the last one.
    NotHere(Option<String>),
}

/// Read one page of `issue_node`'s `projectItems` for project `project_id`. Unlike
/// [`item_on_project`] (blockers, best effort) every member the query asks for must be there
/// with its type: `Err` names what could not be read, so a malformed reply is never taken as
/// proof that the issue left the project.
pub fn project_items_page<'a>(
    issue_node: &'a Value,
    project_id: &str,
) -> Result<ItemsOnPage<'a>, String> {
    let items = issue_node
        .get("projectItems")
        .filter(|v| v.is_object())
        .ok_or("issue without a projectItems object")?;
    let nodes = items
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or("projectItems without a nodes list")?;
    for it in nodes {
        let pid = it
            .get("project")
            .and_then(|p| p.get("id"))
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or("project item without project.id")?;
        let archived = it
            .get("isArchived")
            .and_then(Value::as_bool)
            .ok_or("project item without isArchived")?;
        if pid == project_id && !archived {
            return Ok(ItemsOnPage::Ours(it));
        }
    }
    let info = items
        .get("pageInfo")
        .filter(|v| v.is_object())
        .ok_or("projectItems without pageInfo")?;
    let has_next = info
        .get("hasNextPage")
        .and_then(Value::as_bool)
        .ok_or("projectItems pageInfo without hasNextPage")?;
    if !has_next {
        return Ok(ItemsOnPage::NotHere(None));
    }
    let cursor = info
        .get("endCursor")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .ok_or("projectItems reports hasNextPage without an endCursor")?;
    Ok(ItemsOnPage::NotHere(Some(cursor.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn norm(c: &Value, state: &str, priority: Option<u32>) -> Result<Issue, String> {
        normalize_issue_value(c, "PVTI_1", state, priority)
    }

    fn content() -> Value {
        json!({"__typename":"Issue","id":"I_1","number":12,"title":"Fix it","body":"","url":"https://github.com/acme/app/issues/12",
               "state":"OPEN","createdAt":"2024-01-02T03:04:05Z","updatedAt":"not a time",
               "labels":{"nodes":[{"name":" Bug "},{"name":"bug"},{"name":"  "},{"name":"P1"}]},
               "repository":{"nameWithOwner":"acme/app"}})
    }

    #[test]
    fn normalizes_identifier_labels_timestamps() {
        let i = norm(&content(), " In Progress ", Some(2)).unwrap();
        assert_eq!(i.identifier, "acme__app-12");
        assert_eq!(i.labels, vec!["bug", "p1"]);
        assert_eq!(i.state, "In Progress");
        assert_eq!(i.created_at.as_deref(), Some("2024-01-02T03:04:05Z"));
        assert_eq!(i.updated_at, None);
        assert_eq!(i.description, None);
        assert_eq!(i.priority, Some(2));
        assert!(!i.closed);
    }

    #[test]
    fn malformed_records_name_the_problem() {
        for (field, val) in [
            ("id", Value::Null),
            ("number", json!("12")),
            ("title", Value::Null),
            ("state", json!("MERGED")),
            ("repository", json!({"nameWithOwner":"noslash"})),
        ] {
            let mut c = content();
            c[field] = val;
            assert!(norm(&c, "Todo", None).is_err(), "{field}");
        }
    }

    #[test]
    fn option_value_unset_shapes() {
        assert_eq!(option_value(None), None);
        assert_eq!(option_value(Some(&Value::Null)), None);
        assert_eq!(option_value(Some(&json!({}))), None);
        assert_eq!(option_value(Some(&json!({"name":"  "}))), None);
        assert_eq!(
            option_value(Some(&json!({"name":" Todo ","optionId":"f75ad846"}))),
            Some(OptionValue {
                option_id: Some("f75ad846".into()),
                name: "Todo".into()
            })
        );
    }

    #[test]
    fn blockers_use_project_status_else_open_closed() {
        let c = json!({"blockedBy":{"nodes":[
            {"id":"I_4","number":4,"state":"OPEN","repository":{"nameWithOwner":"acme/app"}},
            {"id":"I_5","number":9,"state":"CLOSED","repository":{"nameWithOwner":"acme/lib"}},
            {"id":"I_6","number":6,"state":"OPEN","repository":{"nameWithOwner":"acme/app"}},
            {"id":"I_7","number":7,"state":"CLOSED","repository":{"nameWithOwner":"acme/app"}},
            {"id":"I_8"}
        ]}});
        let terminal = vec!["Done".to_string()];
        let nodes = c["blockedBy"]["nodes"].as_array().unwrap();
        let b = normalize_blockers(nodes, &terminal, |n| match n["id"].as_str() {
            Some("I_6") => Some("done".into()),
            Some("I_7") => Some("Todo".into()),
            _ => None,
        });
        let got: Vec<(&str, &str, bool)> = b
            .iter()
            .map(|b| (b.identifier.as_str(), b.state.as_str(), b.terminal))
            .collect();
        assert_eq!(
            got,
            vec![
                ("acme__app-4", "OPEN", false),
                ("acme__lib-9", "CLOSED", true),
                ("acme__app-6", "done", true),
                ("acme__app-7", "Todo", true),
            ]
        );
    }
}
