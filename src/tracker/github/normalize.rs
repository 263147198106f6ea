//! Normalization of GitHub payloads into [`Issue`] (spec §4.1.1, §11.3). Pure functions over
//! `serde_json::Value`, so every bad shape is a unit test away.

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

/// Read a `fieldValueByName` selection: `null`, `{}` (another field type) and blank names are unset.
pub fn option_value(v: Option<&Value>) -> Option<OptionValue> {
    let v = v?;
    let name = v.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    Some(OptionValue {
        option_id: v
            .get("optionId")
            .and_then(Value::as_str)
            .map(str::to_string),
        name: name.to_string(),
    })
}

/// `<owner>__<repo>-<number>` from `owner/repo` (spec §4.2).
pub fn identifier(name_with_owner: &str, number: u64) -> Option<String> {
    let (owner, repo) = name_with_owner.split_once('/')?;
    if owner.is_empty() || repo.is_empty() || repo.contains('/') {
        return None;
    }
    Some(format!("{owner}__{repo}-{number}"))
}

/// Labels trimmed, lowercased, blank ones dropped, duplicates removed (first occurrence kept).
pub fn normalize_labels(content: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let nodes = content
        .get("labels")
        .and_then(|l| l.get("nodes"))
        .and_then(Value::as_array);
    for l in nodes.into_iter().flatten() {
        if let Some(name) = l.get("name").and_then(Value::as_str) {
            let n = normalize_name(name);
            if !n.is_empty() && !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

fn timestamp(v: Option<&Value>) -> Option<String> {
    let t = crate::timefmt::parse_rfc3339(v?.as_str()?)?;
    Some(crate::timefmt::rfc3339(t))
}

/// Normalize Issue `content` (without blockers). `Err` names what made the record malformed.
pub fn normalize_issue(
    content: &Value,
    item_id: &str,
    state: &str,
    priority: Option<u32>,
) -> Result<Issue, String> {
    let id = content
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("issue without id")?;
    let number = content
        .get("number")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("issue {id} without a number"))?;
    let repository = content
        .get("repository")
        .and_then(|r| r.get("nameWithOwner"))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("issue {id} without repository.nameWithOwner"))?;
    let identifier = identifier(repository, number)
        .ok_or_else(|| format!("issue {id} has an unusable repository name {repository:?}"))?;
    let title = content
        .get("title")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("issue {id} without a title"))?;
    let closed = match content.get("state").and_then(Value::as_str) {
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
            .get("body")
            .and_then(Value::as_str)
            .filter(|b| !b.trim().is_empty())
            .map(str::to_string),
        priority,
        state: state.trim().to_string(),
        branch_name: None,
        url: content
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_string),
        labels: normalize_labels(content),
        blocked_by: Vec::new(),
        closed,
        created_at: timestamp(content.get("createdAt")),
        updated_at: timestamp(content.get("updatedAt")),
    })
}

/// Normalize `content.blockedBy.nodes`. `status_on_project(blocker_node)` returns the blocker's
/// Status on our project when it has one. Unusable entries are dropped (best-effort metadata).
pub fn normalize_blockers(
    content: &Value,
    terminal_states: &[String],
    status_on_project: impl Fn(&Value) -> Option<String>,
) -> Vec<BlockerRef> {
    let nodes = content
        .get("blockedBy")
        .and_then(|b| b.get("nodes"))
        .and_then(Value::as_array);
    let mut out = Vec::new();
    for b in nodes.into_iter().flatten() {
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

/// The cursor of the next page of `issue_node`'s `projectItems`, when GitHub reports one.
pub fn next_items_cursor(issue_node: &Value) -> Option<String> {
    let info = issue_node.get("projectItems")?.get("pageInfo")?;
    if info.get("hasNextPage").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    info.get("endCursor")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn content() -> Value {
        json!({"__typename":"Issue","id":"I_1","number":12,"title":"Fix it","body":"","url":"https://github.com/acme/app/issues/12",
               "state":"OPEN","createdAt":"2024-01-02T03:04:05Z","updatedAt":"not a time",
               "labels":{"nodes":[{"name":" Bug "},{"name":"bug"},{"name":"  "},{"name":"P1"}]},
               "repository":{"nameWithOwner":"acme/app"}})
    }

    #[test]
    fn normalizes_identifier_labels_timestamps() {
        let i = normalize_issue(&content(), "PVTI_1", " In Progress ", Some(2)).unwrap();
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
            assert!(
                normalize_issue(&c, "PVTI_1", "Todo", None).is_err(),
                "{field}"
            );
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
        let b = normalize_blockers(&c, &terminal, |n| match n["id"].as_str() {
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
