//! Project resolution (spec §11.2): the cached ProjectV2 id, the Status single-select field and
//! its options, and the optional priority field's options, parsed from a `Resolve*Project` reply.

use serde_json::Value;

use super::client::Reply;
use crate::tracker::{TrackerError, TrackerErrorKind};
use crate::workflow::config::{OwnerType, Secret};

/// One option of a single-select field, in board order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldOption {
    /// Option id (8 hex chars on github.com).
    pub id: String,
    /// Option name as shown on the board (trimmed).
    pub name: String,
}

/// A resolved single-select field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleSelectField {
    /// Field node id (`PVTSSF_…`).
    pub id: String,
    /// Field name.
    pub name: String,
    /// Options in board order (position 1 first).
    pub options: Vec<FieldOption>,
}

impl SingleSelectField {
    /// 1-based position of the option with `option_id` (else by trimmed, case-insensitive name).
    pub fn position(&self, option_id: Option<&str>, name: Option<&str>) -> Option<u32> {
        if let Some(id) = option_id {
            if let Some(i) = self.options.iter().position(|o| o.id == id) {
                return Some(i as u32 + 1);
            }
        }
        let want = crate::model::normalize_name(name?);
        self.options
            .iter()
            .position(|o| crate::model::normalize_name(&o.name) == want)
            .map(|i| i as u32 + 1)
    }
}

/// The configured priority field after resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriorityField {
    /// `tracker.priority_field` is not set: priority is always null.
    NotConfigured,
    /// Resolved single-select field.
    Resolved(SingleSelectField),
    /// Configured but unusable (missing, not single-select): priority is null; the text says why.
    Unusable(String),
}

/// Everything cached about the configured project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectInfo {
    /// ProjectV2 node id (`PVT_…`).
    pub id: String,
    /// Owner login as configured.
    pub owner: String,
    /// Project number.
    pub number: u64,
    /// Project title (untrusted text).
    pub title: String,
    /// Project URL, when reported.
    pub url: Option<String>,
    /// True when the project is closed.
    pub closed: bool,
    /// The Status field.
    pub status: SingleSelectField,
    /// The priority field.
    pub priority: PriorityField,
}

/// Parse a resolution reply; NOT_FOUND owner/project and a missing or non-single-select status
/// field are `missing_tracker_project` errors naming the owner, number and field.
pub fn parse_project(
    reply: &Reply,
    owner: &str,
    owner_type: OwnerType,
    number: u64,
    status_field: &str,
    priority_field: Option<&str>,
    token: &Secret,
) -> Result<ProjectInfo, TrackerError> {
    let kind_word = match owner_type {
        OwnerType::Organization => "organization",
        OwnerType::User => "user",
    };
    let project = project_node(reply, owner, kind_word, number, token)?;
    let id = project
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            super::error(
                TrackerErrorKind::Payload,
                "project resolution reply has no project id",
            )
        })?;
    let where_ = format!("project #{number} of {kind_word} {owner:?}");
    Ok(ProjectInfo {
        id: id.to_string(),
        owner: owner.to_string(),
        number,
        title: project
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        url: project
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_string),
        closed: project
            .get("closed")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        status: status_field_of(project, status_field, &where_)?,
        priority: priority_field_of(project, priority_field, &where_),
    })
}

fn missing(msg: String) -> TrackerError {
    TrackerError::new(TrackerErrorKind::MissingTrackerProject, msg)
}

/// The `projectV2` object of the reply, or why the owner or project does not resolve.
fn project_node<'a>(
    reply: &'a Reply,
    owner: &str,
    kind_word: &str,
    number: u64,
    token: &Secret,
) -> Result<&'a Value, TrackerError> {
    let not_found = |min_path: usize, max_path: usize| {
        reply.errors.iter().any(|e| {
            e.kind.as_deref() == Some("NOT_FOUND") && (min_path..=max_path).contains(&e.path.len())
        })
    };
    let owner_missing = format!(
        "tracker.owner: {kind_word} {owner:?} was not found or is not visible to the token"
    );
    let project_missing = format!("tracker.project_number: project #{number} of {kind_word} {owner:?} was not found or is not visible to the token");
    if not_found(1, 1) {
        return Err(missing(format!(
            "{owner_missing} (check tracker.owner and tracker.owner_type)"
        )));
    }
    if not_found(2, usize::MAX) {
        return Err(missing(format!(
            "{project_missing} (the token needs read:project)"
        )));
    }
    reply.check_errors(token, |_| false)?;
    let owner_v = reply.data.get("owner").unwrap_or(&Value::Null);
    if owner_v.is_null() {
        return Err(missing(owner_missing));
    }
    let project = owner_v.get("projectV2").unwrap_or(&Value::Null);
    if project.is_null() {
        return Err(missing(project_missing));
    }
    Ok(project)
}

/// The Status field: it must exist, be single-select and have options.
fn status_field_of(
    project: &Value,
    name: &str,
    where_: &str,
) -> Result<SingleSelectField, TrackerError> {
    match parse_single_select(project.get("statusField")) {
        Ok(f) if f.options.is_empty() => Err(missing(format!(
            "tracker.status_field: field {name:?} on {where_} has no options"
        ))),
        Ok(f) => Ok(f),
        Err(None) => Err(missing(format!(
            "tracker.status_field: {where_} has no field named {name:?}"
        ))),
        Err(Some(t)) => Err(missing(format!(
            "tracker.status_field: field {name:?} on {where_} is a {t}, not a single-select field"
        ))),
    }
}

/// The priority field: when configured but unusable, priority is null and the reason is kept.
fn priority_field_of(project: &Value, name: Option<&str>, where_: &str) -> PriorityField {
    let Some(name) = name else {
        return PriorityField::NotConfigured;
    };
    match parse_single_select(project.get("priorityField")) {
        Ok(f) => PriorityField::Resolved(f),
        Err(None) => PriorityField::Unusable(format!(
            "tracker.priority_field: {where_} has no field named {name:?}; priority is null"
        )),
        Err(Some(t)) => PriorityField::Unusable(format!(
            "tracker.priority_field: field {name:?} on {where_} is a {t}, not a single-select field; priority is null"
        )),
    }
}

/// `Err(None)` = absent/null; `Err(Some(typename))` = not single-select (or malformed).
fn parse_single_select(v: Option<&Value>) -> Result<SingleSelectField, Option<String>> {
    let v = match v {
        None | Some(Value::Null) => return Err(None),
        Some(v) => v,
    };
    let typename = v.get("__typename").and_then(Value::as_str).unwrap_or("");
    if typename != "ProjectV2SingleSelectField" {
        let t = match typename {
            "ProjectV2IterationField" => "iteration field".to_string(),
            "ProjectV2Field" => "plain (text/number/date) field".to_string(),
            "" => "field of unknown type".to_string(),
            other => other.to_string(),
        };
        return Err(Some(t));
    }
    let (Some(id), Some(name), Some(opts)) = (
        v.get("id").and_then(Value::as_str),
        v.get("name").and_then(Value::as_str),
        v.get("options").and_then(Value::as_array),
    ) else {
        return Err(Some("malformed single-select field".into()));
    };
    let options = opts
        .iter()
        .filter_map(|o| {
            Some(FieldOption {
                id: o.get("id")?.as_str()?.to_string(),
                name: o.get("name")?.as_str()?.trim().to_string(),
            })
        })
        .collect();
    Ok(SingleSelectField {
        id: id.to_string(),
        name: name.to_string(),
        options,
    })
}
