//! Checking the configured `active_states`/`terminal_states` against a board's `statuses`.

use crate::config::edit_distance;
use crate::model::{contains_name, normalize_name};

/// One message per configured state that is not a board status (compared trimmed and
/// lowercased), naming the setting and the state, with a "did you mean" hint when a status is
/// within 3 edits. Empty when every state is known.
pub fn validate_states(
    statuses: &[String],
    active_states: &[String],
    terminal_states: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    for (which, states) in [("active", active_states), ("terminal", terminal_states)] {
        for s in states {
            if contains_name(statuses, s) {
                continue;
            }
            let want = normalize_name(s);
            let hint = statuses
                .iter()
                .map(|o| (edit_distance(&normalize_name(o), &want), o))
                .filter(|(d, _)| *d <= 3)
                .min_by_key(|(d, _)| *d)
                .map(|(_, o)| format!("; did you mean {o:?}?"))
                .unwrap_or_default();
            let known: Vec<String> = statuses.iter().map(|o| format!("{o:?}")).collect();
            out.push(format!(
                "tracker.{which}_states: {s:?} is not a status of the Backlog.md board \
                 (config.yml statuses: {}){hint}",
                known.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_the_misspelled_state_with_a_hint() {
        let statuses = v(&["To Do", "In Progress", "Done"]);
        assert!(
            validate_states(&statuses, &v(&["to do", " In Progress"]), &v(&["DONE"])).is_empty()
        );
        let m = validate_states(&statuses, &v(&["To Do", "In Progres"]), &v(&["Closed"]));
        assert_eq!(m.len(), 2);
        assert!(
            m[0].starts_with("tracker.active_states: \"In Progres\""),
            "{}",
            m[0]
        );
        assert!(m[0].ends_with("did you mean \"In Progress\"?"), "{}", m[0]);
        assert!(
            m[1].starts_with("tracker.terminal_states: \"Closed\""),
            "{}",
            m[1]
        );
        assert!(!m[1].contains("did you mean"), "{}", m[1]);
    }
}
