//! Normalized `Issue` builders shared by the orchestrator tests.
#![allow(dead_code)]

use baton::model::Issue;

/// Issue `acme/repo#n` (identifier `acme__repo-<n>`, id `I_<n>`) in Status `state`.
pub fn issue(n: u64, state: &str) -> Issue {
    Issue {
        id: format!("I_{n}"),
        item_id: format!("PVTI_{n}"),
        identifier: format!("acme__repo-{n}"),
        number: n,
        repository: "acme/repo".into(),
        title: format!("Issue {n}"),
        state: state.into(),
        url: Some(format!("https://github.com/acme/repo/issues/{n}")),
        ..Issue::default()
    }
}
