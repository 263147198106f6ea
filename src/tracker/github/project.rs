//! Project resolution (spec §11.2): the cached ProjectV2 id, the Status single-select field and
//! its options, and the optional priority field's options, read from a `Resolve*Project` reply.

use super::client::Reply;
use super::normalize::FieldRow;
use crate::config::Secret;
use crate::tracker::config::OwnerType;
use crate::tracker::{TrackerConfig, TrackerError, TrackerErrorKind};

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
    /// Untrusted text.
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
    let owner_missing = format!(
        "tracker.owner: {kind_word} {owner:?} was not found or is not visible to the token"
    );
    let project_missing = format!("tracker.project_number: project #{number} of {kind_word} {owner:?} was not found or is not visible to the token");
    let not_found = |paths: std::ops::RangeInclusive<usize>| {
        let mut errors = reply.errors.iter();
        errors.any(|e| e.kind.as_deref() == Some("NOT_FOUND") && paths.contains(&e.path.len()))
    };
    if not_found(1..=1) {
        return Err(missing(format!(
            "{owner_missing} (check tracker.owner and tracker.owner_type)"
        )));
    }
    if not_found(2..=usize::MAX) {
        return Err(missing(format!(
            "{project_missing} (the token needs read:project)"
        )));
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
    let where_ = format!("project #{number} of {kind_word} {owner:?}");
    let name = &cfg.status_field;
    let status = single_select(project.status_field.as_ref(), name, &where_)
        .and_then(|f| match f.options.is_empty() {
            true => Err(format!("field {name:?} on {where_} has no options")),
            false => Ok(f),
        })
        .map_err(|e| missing(format!("tracker.status_field: {e}")))?;
    let priority = match &cfg.priority_field {
        None => PriorityField::NotConfigured,
        Some(name) => match single_select(project.priority_field.as_ref(), name, &where_) {
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

/// The single-select field `name` of `where_`, or why it is not one.
fn single_select(
    f: Option<&FieldRow>,
    name: &str,
    where_: &str,
) -> Result<SingleSelectField, String> {
    let f = f.ok_or_else(|| format!("{where_} has no field named {name:?}"))?;
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
            return Err(format!(
                "field {name:?} on {where_} is a {what}, not a single-select field"
            ));
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
