//! Every GitHub reply is read into one typed shape ([`Data`]: every member optional, unknown ones
//! ignored) and normalized into [`Issue`] (spec §4.1.1, §11.3) or the cached [`ProjectInfo`]
//! (spec §11.2). Board items, refreshed issues and blockers are each read on their own, so one bad
//! record only drops itself (or fails only its refresh). Pure functions.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::client::Reply;
use crate::config::Secret;
use crate::model::{contains_name, normalize_labels, BlockerRef, Issue};
use crate::tracker::config::OwnerType;
use crate::tracker::{TrackerConfig, TrackerError, TrackerErrorKind};

/// The `data` of every operation Baton sends; each reads the members it asked for.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Data {
    /// `Resolve*Project`: the organization or user.
    pub owner: Option<NodeRow>,
    /// `ProjectItems*`: the project; `IssueProjectItems`: the issue.
    pub node: Option<NodeRow>,
    /// `Refresh*`: one node per id asked for, each read into a [`NodeRow`] on its own.
    pub nodes: Option<Vec<Box<RawValue>>>,
    pub rate_limit: Option<crate::tracker::TrackerBudget>,
}

/// An object Baton reads: an issue (`IssueFields`, blockers, project items), a project (its
/// items, or its setup and fields), a project field, or the owner of a project.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    #[serde(rename = "__typename")]
    pub typename: Option<String>,
    pub id: Option<String>,
    pub number: Option<u64>,
    pub title: Option<String>,
    pub body: Option<String>,
    pub url: Option<String>,
    /// `OPEN` / `CLOSED`.
    pub state: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub labels: Option<Nodes<Leaf>>,
    pub repository: Option<Leaf>,
    pub blocked_by: Option<Nodes<Value>>,
    pub project_items: Option<Nodes<ItemRow>>,
    pub items: Option<ItemPage>,
    pub project_v2: Option<Box<NodeRow>>,
    pub closed: Option<bool>,
    pub status_field: Option<Box<NodeRow>>,
    pub priority_field: Option<Box<NodeRow>>,
    pub name: Option<String>,
    pub options: Option<Vec<Leaf>>,
}

/// A project's `items` page; each item is read into an [`ItemRow`] on its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemPage {
    pub page_info: PageInfoRow,
    pub nodes: Vec<Box<RawValue>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageInfoRow {
    pub has_next_page: Option<bool>,
    pub end_cursor: Option<String>,
}

impl PageInfoRow {
    /// The cursor of the next page, `None` on the last one; `Err` says what is missing.
    pub fn next(&self) -> Result<Option<String>, &'static str> {
        match self.has_next_page {
            None => Err("pageInfo without hasNextPage"),
            Some(false) => Ok(None),
            Some(true) => (self.end_cursor.clone().filter(|c| !c.is_empty()).map(Some))
                .ok_or("reports hasNextPage without an endCursor"),
        }
    }
}

/// A connection's `nodes` (`null` elements allowed) and whether more follow.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Nodes<T> {
    pub nodes: Option<Vec<Option<T>>>,
    pub page_info: Option<PageInfoRow>,
}

impl<T> Nodes<T> {
    /// True when GitHub reports nodes past this page.
    fn cut(this: &Option<Self>) -> bool {
        let info = this.as_ref().and_then(|n| n.page_info.as_ref());
        info.and_then(|i| i.has_next_page) == Some(true)
    }

    fn iter(this: &Option<Self>) -> impl Iterator<Item = &T> {
        this.iter()
            .filter_map(|n| n.nodes.as_ref())
            .flatten()
            .flatten()
    }
}

/// One project item: of a board page, or of an issue's `projectItems`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemRow {
    pub id: Option<String>,
    /// `ISSUE`, `DRAFT_ISSUE`, `PULL_REQUEST`, `REDACTED`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub is_archived: Option<bool>,
    pub project: Option<Leaf>,
    /// `None` when the member is absent, `Some(None)` when it is null (no Status value).
    #[serde(default, deserialize_with = "present")]
    pub status: Option<Option<Leaf>>,
    pub priority: Option<Leaf>,
    /// The issue (or the bare `__typename` of a draft or pull request).
    pub content: Option<NodeRow>,
}

impl ItemRow {
    fn project_id(&self) -> Option<&str> {
        self.project.as_ref()?.id.as_deref()
    }
}

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The small objects replies nest: a label, a repository, a project, a field option, a
/// single-select value (`{}` for other field types).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Leaf {
    pub id: Option<String>,
    pub name: Option<String>,
    pub option_id: Option<String>,
    pub name_with_owner: Option<String>,
}

/// A single-select value when it names an option: `null`, `{}` (another field type) and blank
/// names are unset.
pub fn selected(v: Option<&Leaf>) -> Option<&Leaf> {
    v.filter(|l| l.name.as_deref().is_some_and(|n| !n.trim().is_empty()))
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

fn timestamp(v: Option<&str>) -> Option<String> {
    let t = crate::timefmt::parse_rfc3339(v?)?;
    Some(crate::timefmt::rfc3339(t))
}

/// Normalize Issue `content` on our project's `item` (without blockers), the one step of board
/// reads and refreshes: `Ok(None)` when the item has no Status value; `Err` names what made the
/// record malformed.
pub fn normalize_issue(
    content: &NodeRow,
    item: &ItemRow,
    project: &ProjectInfo,
) -> Result<Option<Issue>, String> {
    let Some(status) = selected(item.status.as_ref().and_then(Option::as_ref)) else {
        return Ok(None);
    };
    let priority = selected(item.priority.as_ref()).and_then(|v| match &project.priority {
        PriorityField::Resolved(f) => f.position(v.option_id.as_deref(), v.name.as_deref()),
        _ => None,
    });
    let id = (content.id.as_deref().filter(|s| !s.is_empty())).ok_or("issue without id")?;
    let without = |what: &str| format!("issue {id} without {what}");
    let number = content.number.ok_or_else(|| without("a number"))?;
    let repository = (content.repository.as_ref()).and_then(|r| r.name_with_owner.as_deref());
    let repository = repository.ok_or_else(|| without("repository.nameWithOwner"))?;
    let identifier = identifier(repository, number)
        .ok_or_else(|| format!("issue {id} has an unusable repository name {repository:?}"))?;
    let title = content.title.as_deref().ok_or_else(|| without("a title"))?;
    let closed = match content.state.as_deref() {
        Some("OPEN") => false,
        Some("CLOSED") => true,
        other => return Err(format!("issue {id} has an unknown state {other:?}")),
    };
    let (labels_cut, blockers_cut) = (Nodes::cut(&content.labels), Nodes::cut(&content.blocked_by));
    let cut = [("labels", labels_cut), ("blocked_by", blockers_cut)];
    Ok(Some(Issue {
        id: id.to_string(),
        item_id: item.id.clone().unwrap_or_default(),
        identifier,
        number,
        repository: repository.to_string(),
        title: title.to_string(),
        description: (content.body.clone()).filter(|b| !b.trim().is_empty()),
        priority,
        state: status
            .name
            .as_deref()
            .unwrap_or_default()
            .trim()
            .to_string(),
        branch_name: None,
        url: content.url.clone(),
        labels: normalize_labels(Nodes::iter(&content.labels).filter_map(|l| l.name.as_deref())),
        blocked_by: Vec::new(),
        closed,
        created_at: timestamp(content.created_at.as_deref()),
        updated_at: timestamp(content.updated_at.as_deref()),
        truncated: cut.iter().filter(|c| c.1).map(|c| c.0.into()).collect(),
    }))
}

/// Normalize `content`'s blockers. With `project_id`, a blocker's Status is read from its own
/// item on that project (deep refreshes); else it is OPEN/CLOSED. Unusable entries are dropped
/// (best-effort metadata).
pub fn normalize_blockers(
    content: &NodeRow,
    terminal_states: &[String],
    project_id: Option<&str>,
) -> Vec<BlockerRef> {
    let blocker = |b: &Value| {
        let b = NodeRow::deserialize(b).ok()?;
        let identifier = identifier(b.repository?.name_with_owner.as_deref()?, b.number?)?;
        let closed = b.state.as_deref() == Some("CLOSED");
        let status = project_id.and_then(|p| {
            let mut items = Nodes::iter(&b.project_items);
            let ours =
                items.find(|it| it.project_id() == Some(p) && it.is_archived != Some(true))?;
            selected(ours.status.as_ref()?.as_ref())?.name.clone()
        });
        let terminal = closed || status.iter().any(|s| contains_name(terminal_states, s));
        let state = status.unwrap_or_else(|| if closed { "CLOSED" } else { "OPEN" }.to_string());
        Some(BlockerRef {
            id: b.id?,
            identifier,
            state,
            terminal,
        })
    };
    let blockers = Nodes::iter(&content.blocked_by);
    blockers.filter_map(blocker).collect()
}

/// One page of a refreshed issue's `projectItems`, read strictly.
#[derive(Debug)]
pub enum ItemsOnPage<'a> {
    /// Our project's (non-archived) item.
    Ours(&'a ItemRow),
    /// Not on this page; the cursor of the next page, `None` on the last one.
    NotHere(Option<String>),
}

/// Read one page of `issue`'s `projectItems` for project `project_id`. Unlike the blockers'
/// (best effort) every member the query asks for must be there: `Err` names what could not be
/// read, so a malformed reply is never taken as proof that the issue left the project.
pub fn project_items_page<'a>(
    issue: &'a NodeRow,
    project_id: &str,
) -> Result<ItemsOnPage<'a>, String> {
    let items = (issue.project_items.as_ref()).ok_or("issue without a projectItems object")?;
    let nodes = (items.nodes.as_ref()).ok_or("projectItems without a nodes list")?;
    for it in nodes {
        let no_project = "project item without project.id";
        let it = it.as_ref().ok_or(no_project)?;
        let pid = it.project_id().filter(|p| !p.is_empty());
        let pid = pid.ok_or(no_project)?;
        let archived = it.is_archived.ok_or("project item without isArchived")?;
        if pid == project_id && !archived {
            return Ok(ItemsOnPage::Ours(it));
        }
    }
    let info = (items.page_info.as_ref()).ok_or("projectItems without pageInfo")?;
    let next = info.next().map_err(|e| format!("projectItems {e}"))?;
    Ok(ItemsOnPage::NotHere(next))
}

/// A resolved single-select field; its options' `(id, trimmed name)` in board order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleSelectField {
    pub name: String,
    pub options: Vec<(String, String)>,
}

impl SingleSelectField {
    /// 1-based position of the option with `option_id` (else by trimmed, case-insensitive name).
    pub fn position(&self, option_id: Option<&str>, name: Option<&str>) -> Option<u32> {
        let by_id = (self.options.iter()).position(|o| Some(o.0.as_str()) == option_id);
        let by_name = || {
            let want = crate::model::normalize_name(name?);
            let mut names = self.options.iter();
            names.position(|o| crate::model::normalize_name(&o.1) == want)
        };
        by_id.or_else(by_name).map(|i| i as u32 + 1)
    }
}

/// The configured priority field after resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriorityField {
    /// `tracker.priority_field` is not set: priority is always null.
    NotConfigured,
    Resolved(SingleSelectField),
    /// Configured but unusable (missing, not single-select): priority is null; the text says why.
    Unusable(String),
}

/// Everything cached about the configured project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectInfo {
    /// ProjectV2 node id (`PVT_…`).
    pub id: String,
    pub title: String,
    pub closed: bool,
    pub status: SingleSelectField,
    pub priority: PriorityField,
}

fn missing(msg: String) -> TrackerError {
    TrackerError::new(TrackerErrorKind::MissingTrackerProject, msg)
}

/// Read a resolution reply; NOT_FOUND owner/project and a missing or non-single-select status
/// field are `missing_tracker_project` errors naming the owner, number and field.
pub fn parse_project(
    reply: &Reply,
    cfg: &TrackerConfig,
    owner: &str,
    number: u64,
    token: &Secret,
) -> Result<ProjectInfo, TrackerError> {
    let kind_word = match cfg.owner_type {
        OwnerType::Organization => "organization",
        OwnerType::User => "user",
    };
    let where_ = format!("project #{number} of {kind_word} {owner:?}");
    let hidden = "was not found or is not visible to the token";
    let owner_missing = format!("tracker.owner: {kind_word} {owner:?} {hidden}");
    let project_missing = format!("tracker.project_number: {where_} {hidden}");
    let not_found = |paths: std::ops::RangeInclusive<usize>| {
        let mut errors = reply.errors.iter();
        errors.any(|e| e.kind.as_deref() == Some("NOT_FOUND") && paths.contains(&e.path.len()))
    };
    if not_found(1..=1) {
        let why = format!("{owner_missing} (check tracker.owner and tracker.owner_type)");
        return Err(missing(why));
    }
    if not_found(2..=usize::MAX) {
        let why = format!("{project_missing} (the token needs read:project)");
        return Err(missing(why));
    }
    reply.check_errors(token, |_| false)?;
    let Some(owner_row) = &reply.data.owner else {
        return Err(missing(owner_missing));
    };
    let Some(project) = &owner_row.project_v2 else {
        return Err(missing(project_missing));
    };
    let id = (project.id.clone().filter(|s| !s.is_empty()))
        .ok_or_else(|| super::unknown("project resolution reply has no project id"))?;
    let name = &cfg.status_field;
    let status = single_select(project.status_field.as_deref(), name, &where_)
        .and_then(|f| match f.options.is_empty() {
            true => Err(format!("field {name:?} on {where_} has no options")),
            false => Ok(f),
        })
        .map_err(|e| missing(format!("tracker.status_field: {e}")))?;
    let priority = match &cfg.priority_field {
        None => PriorityField::NotConfigured,
        Some(name) => match single_select(project.priority_field.as_deref(), name, &where_) {
            Ok(f) => PriorityField::Resolved(f),
            Err(e) => {
                PriorityField::Unusable(format!("tracker.priority_field: {e}; priority is null"))
            }
        },
    };
    Ok(ProjectInfo {
        id,
        title: project.title.clone().unwrap_or_default(),
        closed: project.closed.unwrap_or(false),
        status,
        priority,
    })
}

/// The single-select field `name` of project `at`, or why it is not one.
fn single_select(f: Option<&NodeRow>, name: &str, at: &str) -> Result<SingleSelectField, String> {
    let f = f.ok_or_else(|| format!("{at} has no field named {name:?}"))?;
    let what = match f.typename.as_deref().unwrap_or("") {
        "ProjectV2SingleSelectField" => None,
        "ProjectV2IterationField" => Some("iteration field"),
        "ProjectV2Field" => Some("plain (text/number/date) field"),
        "" => Some("field of unknown type"),
        other => Some(other),
    };
    let opts = match (what, &f.id, &f.name, &f.options) {
        (None, Some(_), Some(_), Some(opts)) => opts,
        (what, ..) => {
            let what = what.unwrap_or("malformed single-select field");
            let why = format!("field {name:?} on {at} is a {what}, not a single-select field");
            return Err(why);
        }
    };
    let options = opts
        .iter()
        .filter_map(|o| Some((o.id.clone()?, o.name.as_deref()?.trim().to_string())))
        .collect();
    Ok(SingleSelectField {
        name: f.name.clone().unwrap_or_default(),
        options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `c` on an item with Status `state` and priority option `priority` (of `P1`, `P2`).
    fn norm(c: &Value, state: &str, priority: Option<&str>) -> Result<Issue, String> {
        let row = NodeRow::deserialize(c).map_err(|e| e.to_string())?;
        let item =
            json!({"id": "PVTI_1", "status": {"name": state}, "priority": {"name": priority}});
        let item = ItemRow::deserialize(item).unwrap();
        let options = vec![("o1".into(), "P1".into()), ("o2".into(), "P2".into())];
        let field = SingleSelectField {
            name: "Priority".into(),
            options,
        };
        let project = ProjectInfo {
            id: "P".into(),
            title: String::new(),
            closed: false,
            status: SingleSelectField {
                name: "Status".into(),
                options: Vec::new(),
            },
            priority: PriorityField::Resolved(field),
        };
        Ok(normalize_issue(&row, &item, &project)?.expect("a Status value"))
    }

    fn content() -> Value {
        json!({"__typename":"Issue","id":"I_1","number":12,"title":"Fix it","body":"","url":"https://github.com/acme/app/issues/12",
               "state":"OPEN","createdAt":"2024-01-02T03:04:05Z","updatedAt":"not a time",
               "labels":{"nodes":[{"name":" Bug "},{"name":"bug"},{"name":"  "},{"name":"P1"}]},
               "repository":{"nameWithOwner":"acme/app"}})
    }

    #[test]
    fn normalizes_identifier_labels_timestamps() {
        let i = norm(&content(), " In Progress ", Some("p2")).unwrap();
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
        let leaf = |v: Value| Leaf::deserialize(v).unwrap();
        assert!(selected(None).is_none());
        assert!(selected(Some(&leaf(json!({})))).is_none());
        assert!(selected(Some(&leaf(json!({"name":"  "})))).is_none());
        let todo = leaf(json!({"name":" Todo ","optionId":"f75ad846"}));
        assert_eq!(
            selected(Some(&todo)).unwrap().option_id.as_deref(),
            Some("f75ad846")
        );
    }

    #[test]
    fn blockers_use_project_status_else_open_closed() {
        let on = |status: &str| json!({"nodes":[{"isArchived":false,"project":{"id":"P"},"status":{"name":status}}]});
        let c = NodeRow::deserialize(json!({"blockedBy":{"nodes":[
            {"id":"I_4","number":4,"state":"OPEN","repository":{"nameWithOwner":"acme/app"}},
            {"id":"I_5","number":9,"state":"CLOSED","repository":{"nameWithOwner":"acme/lib"}},
            {"id":"I_6","number":6,"state":"OPEN","repository":{"nameWithOwner":"acme/app"},"projectItems":on("done")},
            {"id":"I_7","number":7,"state":"CLOSED","repository":{"nameWithOwner":"acme/app"},"projectItems":on("Todo")},
            {"id":"I_8"},
            {"id":"I_9","number":"x"}
        ]}}))
        .unwrap();
        let terminal = vec!["Done".to_string()];
        let got = |project| -> Vec<(String, String, bool)> {
            normalize_blockers(&c, &terminal, project)
                .into_iter()
                .map(|b| (b.identifier, b.state, b.terminal))
                .collect()
        };
        let row = |i: &str, s: &str, t| (i.to_string(), s.to_string(), t);
        assert_eq!(
            got(Some("P")),
            vec![
                row("acme__app-4", "OPEN", false),
                row("acme__lib-9", "CLOSED", true),
                row("acme__app-6", "done", true),
                row("acme__app-7", "Todo", true),
            ]
        );
        assert_eq!(got(None)[2], row("acme__app-6", "OPEN", false));
    }
}
