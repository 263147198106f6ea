//! Unknown-key warnings with "did you mean" hints. Each section's key list belongs to the module
//! that parses the section: the tracker kind's keys come from the tracker registry, the agent
//! sections' from [`super::agents`].

use serde_yaml::{Mapping, Value};

use super::section::describe;

/// Every section Baton understands with its keys, for the given `tracker.kind`.
pub(crate) fn known_keys(
    tracker_kind: Option<&str>,
) -> Vec<(&'static str, &'static [&'static str])> {
    let mut sections: Vec<(&'static str, &'static [&'static str])> = vec![
        ("tracker", crate::tracker::config::known_keys(tracker_kind)),
        ("polling", &["interval_ms"]),
        ("workspace", &["root"]),
        (
            "hooks",
            &[
                "after_create",
                "before_run",
                "after_run",
                "before_remove",
                "timeout_ms",
            ],
        ),
        (
            "agent",
            &[
                "kind",
                "max_concurrent_agents",
                "max_turns",
                "max_retry_backoff_ms",
                "max_concurrent_agents_by_state",
                "max_attempts",
                "max_runs_per_issue",
                "max_cost_usd_per_issue",
                "max_tokens_per_issue",
                "max_turns_per_issue",
                "env_remove",
                "env_keep_only",
            ],
        ),
    ];
    sections.extend_from_slice(crate::agent::config::KNOWN_SECTIONS);
    sections.push(("server", &["port", "host", "webhook_secret"]));
    sections.push(("state", &["dir"]));
    sections.push(("worker", super::worker::KEYS));
    sections.push((super::sandbox::SECTION, super::sandbox::KEYS));
    sections
}

/// Warn once about unknown keys (top-level and inside known sections), with a hint when a known
/// key is one edit away.
pub(crate) fn check_unknown_keys(
    root: &Mapping,
    known: &[(&str, &[&str])],
    warnings: &mut Vec<String>,
) {
    let top: Vec<&str> = known.iter().map(|(s, _)| *s).collect();
    for (k, v) in root {
        let Some(k) = k.as_str() else {
            warnings.push(format!("ignoring non-string top-level key {}", describe(k)));
            continue;
        };
        let Some((section, keys)) = known.iter().find(|(s, _)| *s == k) else {
            warnings.push(unknown_key_message(k, &top));
            continue;
        };
        let Value::Mapping(m) = v else { continue };
        for sub in m.keys().filter_map(Value::as_str) {
            if !keys.contains(&sub) {
                let known: Vec<String> = keys.iter().map(|k| format!("{section}.{k}")).collect();
                let known: Vec<&str> = known.iter().map(String::as_str).collect();
                warnings.push(unknown_key_message(&format!("{section}.{sub}"), &known));
            }
        }
    }
}

fn unknown_key_message(key: &str, known: &[&str]) -> String {
    match known.iter().find(|k| edit_distance(key, k) == 1) {
        Some(hint) => format!("unknown config key `{key}` is ignored; did you mean `{hint}`?"),
        None => format!("unknown config key `{key}` is ignored"),
    }
}

/// Levenshtein distance (small strings only); used for "did you mean" hints.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
