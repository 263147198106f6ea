//! Bounding untrusted text for summaries, logs and pages.

/// `s` cut to at most `max` characters, with `…` appended when something was cut.
pub(crate) fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((idx, _)) => format!("{}…", &s[..idx]),
    }
}

/// [`truncate_chars`] with every control character (newlines included) turned into a space, so
/// the result is one line.
pub(crate) fn single_line(s: &str, max: usize) -> String {
    truncate_chars(s, max).replace(char::is_control, " ")
}

/// Untrusted text quoted for one terminal line (control characters removed, length capped).
pub(crate) fn quoted(s: &str) -> String {
    format!("{:?}", single_line(s, 80))
}

/// Each item [`quoted`], joined by `sep`.
pub(crate) fn quoted_list<S: AsRef<str>>(items: &[S], sep: &str) -> String {
    let q: Vec<String> = items.iter().map(|s| quoted(s.as_ref())).collect();
    q.join(sep)
}

/// `s` with every character that `replace` maps to `Some(text)` replaced by that text (the
/// escapers of HTML and Prometheus labels).
#[cfg(feature = "http")]
pub(crate) fn replace_chars(s: &str, replace: impl Fn(char) -> Option<&'static str>) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match replace(c) {
            Some(text) => out.push_str(text),
            None => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_characters_not_bytes() {
        assert_eq!(truncate_chars("ééé", 2), "éé…");
        assert_eq!(truncate_chars("éé", 2), "éé");
        assert_eq!(single_line("a\nb\tc", 10), "a b c");
        assert_eq!(single_line("a\nbcd", 3), "a b…");
    }
}
