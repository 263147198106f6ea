//! Small helpers shared by the agent stream parsers: bounded reads of untrusted JSON and one-line
//! summaries.

use serde_json::Value;

use crate::text::truncate_chars;

/// `v[key]` as a string, when it is one.
pub(crate) fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `v[key]` as an integer's text, `missing` otherwise.
pub(crate) fn int_text(v: &Value, key: &str, missing: &str) -> String {
    v.get(key)
        .and_then(Value::as_i64)
        .map_or_else(|| missing.to_string(), |n| n.to_string())
}

/// The most telling argument of a tool call (its command, path, pattern, URL…), as one bounded
/// line; empty when there is none.
pub(crate) fn tool_input_detail(input: &Value) -> String {
    const KEYS: [&str; 7] = [
        "command",
        "file_path",
        "path",
        "pattern",
        "url",
        "description",
        "prompt",
    ];
    first_detail(KEYS.map(|k| str_at(input, k)))
}

/// The first present value of a tool call's telling arguments, as one bounded line.
pub(crate) fn first_detail<'s>(values: impl IntoIterator<Item = Option<&'s str>>) -> String {
    values
        .into_iter()
        .flatten()
        .next()
        .map(|s| one_line(s, 120))
        .unwrap_or_default()
}

/// Collapse whitespace/control characters to single spaces, then truncate to `max` characters.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max.saturating_mul(4)));
    let mut last_space = false;
    for c in s.chars() {
        if c.is_whitespace() || c.is_control() {
            if !last_space && !out.is_empty() {
                out.push(' ');
            }
            last_space = true;
        } else {
            out.push(c);
            last_space = false;
        }
        if out.len() > max.saturating_mul(4) {
            break;
        }
    }
    truncate_chars(out.trim_end(), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_collapses_and_bounds() {
        assert_eq!(one_line("a\n\n b\tc", 100), "a b c");
        assert_eq!(one_line(&"é".repeat(500), 3), "ééé…");
    }

    #[test]
    fn tool_detail_picks_the_first_known_key() {
        let v = serde_json::json!({"path": "/a", "command": "ls\n-l"});
        assert_eq!(tool_input_detail(&v), "ls -l");
        assert_eq!(tool_input_detail(&serde_json::json!({"x": 1})), "");
    }
}
