//! Strict prompt rendering with `upon` (spec §5.4, §12; ARCHITECTURE.md). `{% elsif %}` is
//! rewritten to upon's `{% else if %}` inside tags only; error positions are mapped back to
//! WORKFLOW.md's line and column. Issue text only ever enters as `upon::Value` data, so `{{ }}`
//! inside an issue body is printed verbatim and never interpreted.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};

use upon::{Engine, Value};

use crate::model::{BlockerRef, Issue};

/// Deepest nesting of `for` loops a template may use: with the context's lists capped at
/// [`MAX_CONTEXT_LIST`] (and the `issue` map's 16 fields) a render makes at most 64³ loop
/// iterations, so a hostile template cannot spin a render for minutes.
pub const MAX_FOR_NESTING: usize = 3;
/// Entries of `issue.labels` / `issue.blocked_by` visible to a template.
pub const MAX_CONTEXT_LIST: usize = 64;
/// Bound of a rendered prompt (bytes); a longer render stops with a render error.
pub const MAX_RENDER_BYTES: usize = 1024 * 1024;

/// The filters registered on the engine, in the order they are documented.
const FILTERS: &[&str] = &[
    "eq", "ne", "and", "or", "contains", "default", "join", "upcase", "downcase", "size", "plus",
];

/// A template error: class `template_parse_error` or `template_render_error`, message with
/// `line L column C` counted in WORKFLOW.md.
pub type TemplateError = crate::config::ConfigError;

/// A compiled prompt template (cheap to clone; the compiled form is shared).
#[derive(Clone, Debug)]
pub struct PromptTemplate(Arc<(upon::Template<'static>, Source)>);

impl PromptTemplate {
    /// Compile `source`, whose first line is line `first_line` of WORKFLOW.md.
    pub fn compile(source: &str, first_line: usize) -> Result<Self, TemplateError> {
        let src = Source::new(source, first_line);
        let parse_error = |message: String| TemplateError::new("template_parse_error", message);
        let template = engine()
            .compile(src.compiled.clone())
            .map_err(|err| parse_error(src.describe(&err, true)))?;
        if let Some(off) = src.too_deep {
            return Err(parse_error(format!(
                "{}: `for` loops nested deeper than {MAX_FOR_NESTING} levels",
                src.position(off)
            )));
        }
        Ok(PromptTemplate(Arc::new((template, src))))
    }

    /// Dry-render against a fully populated sample issue with `attempt` null and 1.
    pub fn validate(&self) -> Result<(), TemplateError> {
        let issue = sample_issue();
        self.render(&issue, None)?;
        self.render(&issue, Some(1)).map(drop)
    }

    /// Render for `issue` and `attempt` (`None` on the first run).
    pub fn render(&self, issue: &Issue, attempt: Option<u32>) -> Result<String, TemplateError> {
        let issue = Value::from(issue_fields(issue));
        let ctx = Value::from([("issue", issue), ("attempt", attempt.into())]);
        let (template, src) = &*self.0;
        let mut w = BoundedWriter(Vec::new(), false);
        let rendered = std::panic::catch_unwind(AssertUnwindSafe(|| {
            template.render_from(engine(), &ctx).to_writer(&mut w)
        }));
        let message = match rendered {
            Ok(Ok(())) => return Ok(String::from_utf8_lossy(&w.0).into_owned()),
            Ok(Err(_)) if w.1 => format!("the rendered prompt exceeds {MAX_RENDER_BYTES} bytes"),
            Ok(Err(err)) => src.describe(&err, false),
            Err(_) => "internal error: the template engine panicked".to_string(),
        };
        Err(TemplateError::new("template_render_error", message))
    }
}

/// A writer that refuses to grow past [`MAX_RENDER_BYTES`] (and then says so in its flag).
struct BoundedWriter(Vec<u8>, bool);

impl std::io::Write for BoundedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.1 |= self.0.len().saturating_add(data.len()) > MAX_RENDER_BYTES;
        if self.1 {
            return Err(std::io::Error::other("rendered prompt too large"));
        }
        self.0.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The one engine shared by all templates (its configuration never changes).
fn engine() -> &'static Engine<'static> {
    static ENGINE: OnceLock<Engine<'static>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut e = Engine::new();
        e.set_default_formatter(&format_value);
        e.add_function("eq", |a: Value, b: Value| values_equal(&a, &b));
        e.add_function("ne", |a: Value, b: Value| !values_equal(&a, &b));
        e.add_function("and", |a: Value, b: Value| truthy(&a) && truthy(&b));
        e.add_function("or", |a: Value, b: Value| truthy(&a) || truthy(&b));
        e.add_function("contains", filter_contains);
        e.add_function("default", |a: Value, b| if blank(&a) { b } else { a });
        e.add_function("join", filter_join);
        e.add_function("upcase", |v: Value| cased(v, "upcase", str::to_uppercase));
        e.add_function("downcase", |v: Value| {
            cased(v, "downcase", str::to_lowercase)
        });
        e.add_function("size", filter_size);
        e.add_function("plus", filter_plus);
        e
    })
}

/// Prints scalars as upon does (null prints nothing), lists joined by `", "`, and refuses maps.
fn format_value(f: &mut upon::fmt::Formatter<'_>, value: &Value) -> upon::fmt::Result {
    Ok(std::fmt::Write::write_str(f, &text_of(value)?)?)
}

fn text_of(value: &Value) -> Result<String, String> {
    Ok(match value {
        Value::None => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Integer(n) => n.to_string(),
        Value::Float(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::List(items) => join_texts(items, ", ")?,
        Value::Map(_) => {
            return Err("cannot print a map; print one of its fields instead \
                        (for example `{{ blocker.identifier }}`)"
                .to_string())
        }
    })
}

fn join_texts(items: &[Value], sep: &str) -> Result<String, String> {
    Ok(items
        .iter()
        .map(text_of)
        .collect::<Result<Vec<_>, _>>()?
        .join(sep))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::None => "null",
        Value::Bool(_) => "a boolean",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::String(_) => "a string",
        Value::List(_) => "a list",
        Value::Map(_) => "a map",
    }
}

/// upon's truthiness (null, false, 0, 0.0, "", [], {} are false).
fn truthy(v: &Value) -> bool {
    match v {
        Value::Integer(0) => false,
        Value::Float(n) => *n != 0.0,
        _ => !blank(v),
    }
}

/// Liquid's "blank" for `default`: null, false, "", [] and {} (but not 0).
fn blank(v: &Value) -> bool {
    match v {
        Value::None | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::List(l) => l.is_empty(),
        Value::Map(m) => m.is_empty(),
        _ => false,
    }
}

/// Equality with integers and floats compared numerically.
fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Integer(i), Value::Float(f)) | (Value::Float(f), Value::Integer(i)) => {
            (*i as f64) == *f
        }
        _ => a == b,
    }
}

fn filter_contains(hay: Value, needle: Value) -> Result<Value, String> {
    let found = match (&hay, &needle) {
        (Value::None, _) => false,
        (Value::String(s), Value::String(n)) => s.contains(n.as_str()),
        (Value::List(items), n) => items.iter().any(|x| values_equal(x, n)),
        (Value::Map(m), Value::String(k)) => m.contains_key(k),
        (Value::String(_) | Value::Map(_), n) => {
            let (h, n) = (kind(&hay), kind(n));
            return Err(format!(
                "filter `contains` on {h} needs a string argument, got {n}"
            ));
        }
        (h, _) => {
            let (h, want) = (kind(h), "a string, list or map on its left");
            return Err(format!("filter `contains` needs {want}, got {h}"));
        }
    };
    Ok(Value::Bool(found))
}

fn filter_join(v: Value, sep: String) -> Result<Value, String> {
    match &v {
        Value::List(items) => join_texts(items, &sep)
            .map(Value::String)
            .map_err(|e| format!("filter `join`: {e}")),
        Value::Map(_) => Err("filter `join` needs a list, got a map".to_string()),
        scalar => Ok(Value::String(text_of(scalar)?)),
    }
}

fn cased(v: Value, name: &str, f: fn(&str) -> String) -> Result<Value, String> {
    match v {
        Value::String(s) => Ok(Value::String(f(&s))),
        Value::None => Ok(Value::None),
        other => Err(format!(
            "filter `{name}` needs a string, got {}",
            kind(&other)
        )),
    }
}

fn filter_size(v: Value) -> Result<Value, String> {
    let n = match &v {
        Value::None => 0,
        Value::String(s) => s.chars().count(),
        Value::List(l) => l.len(),
        Value::Map(m) => m.len(),
        other => {
            let k = kind(other);
            return Err(format!(
                "filter `size` needs a string, list or map, got {k}"
            ));
        }
    };
    Ok(Value::Integer(i64::try_from(n).unwrap_or(i64::MAX)))
}

/// Numeric addition; null counts as 0 (so `attempt | plus: 1` works on the first run).
fn filter_plus(a: Value, b: Value) -> Result<Value, String> {
    let as_num = |v: &Value| match v {
        Value::None => Some((0, None)),
        Value::Integer(i) => Some((*i, None)),
        Value::Float(f) => Some((0, Some(*f))),
        _ => None,
    };
    match (as_num(&a), as_num(&b)) {
        (Some((x, None)), Some((y, None))) => x
            .checked_add(y)
            .map(Value::Integer)
            .ok_or_else(|| "filter `plus`: integer overflow".to_string()),
        (Some((x, fx)), Some((y, fy))) => Ok(Value::Float(
            fx.unwrap_or(x as f64) + fy.unwrap_or(y as f64),
        )),
        _ => {
            let (a, b) = (kind(&a), kind(&b));
            Err(format!("filter `plus` needs numbers, got {a} and {b}"))
        }
    }
}

/// The `issue` variable: every field of [`Issue`] (in the order error messages list them);
/// absent optional fields are null.
fn issue_fields(i: &Issue) -> [(&'static str, Value); 16] {
    let blocker = |b: &BlockerRef| {
        Value::from([
            ("id", Value::from(b.id.as_str())),
            ("identifier", b.identifier.as_str().into()),
            ("state", b.state.as_str().into()),
            ("terminal", b.terminal.into()),
        ])
    };
    let labels = i.labels.iter().take(MAX_CONTEXT_LIST).map(String::as_str);
    let blockers = i.blocked_by.iter().take(MAX_CONTEXT_LIST).map(blocker);
    [
        ("id", Value::from(i.id.as_str())),
        ("item_id", i.item_id.as_str().into()),
        ("identifier", i.identifier.as_str().into()),
        ("number", i64::try_from(i.number).unwrap_or(i64::MAX).into()),
        ("repository", i.repository.as_str().into()),
        ("title", i.title.as_str().into()),
        ("description", i.description.as_deref().into()),
        ("priority", i.priority.into()),
        ("state", i.state.as_str().into()),
        ("branch_name", i.branch_name.as_deref().into()),
        ("url", i.url.as_deref().into()),
        ("labels", labels.collect()),
        ("blocked_by", blockers.collect()),
        ("created_at", i.created_at.as_deref().into()),
        ("updated_at", i.updated_at.as_deref().into()),
        ("closed", i.closed.into()),
    ]
}

/// A fully populated issue for load-time dry renders: every optional field set, lists non-empty.
pub fn sample_issue() -> Issue {
    Issue {
        id: "I_kwDOsample".to_string(),
        item_id: "PVTI_lADOsample".to_string(),
        identifier: "acme__widgets-42".to_string(),
        number: 42,
        repository: "acme/widgets".to_string(),
        title: "Sample issue title".to_string(),
        description: Some("Sample issue description.".to_string()),
        priority: Some(1),
        state: "In Progress".to_string(),
        branch_name: Some("issue-42-sample".to_string()),
        url: Some("https://github.com/acme/widgets/issues/42".to_string()),
        labels: vec!["bug".to_string(), "backend".to_string()],
        blocked_by: vec![BlockerRef {
            id: "I_kwDOblocker".to_string(),
            identifier: "acme__widgets-41".to_string(),
            state: "Done".to_string(),
            terminal: true,
        }],
        closed: false,
        created_at: Some("2025-01-02T03:04:05Z".to_string()),
        updated_at: Some("2025-01-03T03:04:05Z".to_string()),
        truncated: Vec::new(),
    }
}

/// The text upon compiles, and what maps upon's error positions back to WORKFLOW.md.
#[derive(Debug)]
struct Source {
    original: String,
    first_line: usize,
    /// `original` with `{% elsif` rewritten to `{% else if`, and padded (see [`Source::offset`]).
    compiled: String,
    /// Offsets in `compiled` where `else if` (7 bytes) replaced `elsif` (5 bytes).
    elsif_at: Vec<usize>,
    /// Offset in `original` of a `{{`/`{%`/`{#` that is never closed.
    unclosed: Option<usize>,
    /// Offset in `original` of the first `for` tag nested deeper than [`MAX_FOR_NESTING`].
    too_deep: Option<usize>,
}

/// The next `{{`, `{%` or `{#` at or after `from`.
fn find_open(b: &[u8], from: usize) -> Option<usize> {
    (from..b.len().saturating_sub(1))
        .find(|&i| b[i] == b'{' && matches!(b[i + 1], b'{' | b'%' | b'#'))
}

/// The end (exclusive) of the tag whose body starts at `p`: after the first `}}`/`%}` outside a
/// string literal, or `None` when the text ends first.
fn tag_end(b: &[u8], mut p: usize) -> Option<usize> {
    while p < b.len() {
        if b[p..].starts_with(b"}}") || b[p..].starts_with(b"%}") {
            return Some(p + 2);
        }
        if b[p] == b'"' {
            p += 1;
            while p < b.len() && b[p] != b'"' {
                p += if b[p] == b'\\' { 2 } else { 1 };
            }
        }
        p += 1;
    }
    None
}

impl Source {
    fn new(src: &str, first_line: usize) -> Source {
        let b = src.as_bytes();
        let mut s = Source {
            original: src.to_string(),
            first_line,
            compiled: String::with_capacity(src.len() + 16),
            elsif_at: Vec::new(),
            unclosed: None,
            too_deep: None,
        };
        let mut depth = 0;
        let mut i = 0;
        while let Some(j) = find_open(b, i) {
            s.compiled.push_str(&src[i..j]);
            let end = if b[j + 1] == b'#' {
                (j + 2..b.len() - 1)
                    .find(|&p| b[p..].starts_with(b"#}"))
                    .map(|p| p + 2)
            } else {
                tag_end(b, j + 2)
            };
            let end = end.unwrap_or_else(|| {
                s.unclosed.get_or_insert(j);
                b.len()
            });
            let tag = &src[j..end];
            let body = tag[2..].strip_prefix('-').unwrap_or(&tag[2..]);
            let body = body.trim_start_matches([' ', '\t', '\r', '\n']);
            let word = body
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next();
            match (b[j + 1], word) {
                (b'%', Some("elsif")) => {
                    let k = tag.len() - body.len();
                    s.elsif_at.push(s.compiled.len() + k);
                    s.compiled.push_str(&tag[..k]);
                    s.compiled.push_str("else if");
                    s.compiled.push_str(&tag[k + 5..]);
                    i = end;
                    continue;
                }
                (b'%', Some("for")) => {
                    depth += 1;
                    if depth > MAX_FOR_NESTING {
                        s.too_deep.get_or_insert(j);
                    }
                }
                (b'%', Some("endfor")) => depth = depth.saturating_sub(1),
                _ => {}
            }
            s.compiled.push_str(tag);
            i = end;
        }
        s.compiled.push_str(&src[i..]);
        // upon turns an error's byte offset into a line and column by counting characters per
        // line, so past non-ASCII text an offset can land beyond the last line and be lost.
        // Padding as long as the multi-byte surplus keeps every offset on a line: a comment, or
        // plain spaces inside a tag that is never closed (the compile fails there anyway).
        let pad = " ".repeat(src.len() - src.chars().count());
        if s.unclosed.is_some() || pad.is_empty() {
            s.compiled.push_str(&pad);
        } else {
            s.compiled.push_str(&format!("{{#{pad}#}}"));
        }
        s
    }

    /// The byte offset in `compiled` where upon located `err`: the inverse of upon's `to_ln_col`,
    /// which adds (characters + 1) per line before the error's line to its column.
    fn offset(&self, err: &upon::Error) -> Option<usize> {
        // upon's position, read from its `{:#}` rendering (`--> <anonymous>:LINE:COL`).
        let text = format!("{err:#}");
        let at = text[text.find("--> ")? + 4..].lines().next()?;
        let mut parts = at.rsplitn(3, ':');
        let col: usize = parts.next()?.trim().parse().ok()?;
        let ln: usize = parts.next()?.trim().parse().ok()?;
        let lines = self
            .compiled
            .split_terminator('\n')
            .take(ln.checked_sub(1)?);
        let before: usize = lines.map(|l| l.chars().count() + 1).sum();
        Some((before + col.checked_sub(1)?).min(self.compiled.len()))
    }

    /// `line L column C` in WORKFLOW.md for an offset in `original`.
    fn position(&self, orig: usize) -> String {
        let before = &self.original[..orig];
        let line = self.first_line + before.matches('\n').count();
        let line_start = before.rfind('\n').map_or(0, |p| p + 1);
        let column = before[line_start..].chars().count() + 1;
        format!("line {line} column {column}")
    }

    /// An offset in `compiled` mapped to `original` (inside a rewritten `else if`: its start).
    fn to_original(&self, mut off: usize) -> usize {
        let mut shift = 0;
        for &at in &self.elsif_at {
            if off < at + 7 {
                off = off.min(at);
                break;
            }
            shift += 2;
        }
        let mut orig = off.saturating_sub(shift).min(self.original.len());
        while !self.original.is_char_boundary(orig) {
            orig -= 1;
        }
        orig
    }

    /// The message for `err`: its position in WORKFLOW.md and a wording for the usual mistakes.
    fn describe(&self, err: &upon::Error, parse: bool) -> String {
        // upon's `{kind}: {reason}` (`invalid syntax: …`, `render error: …`): the reason.
        let text = err.to_string();
        let reason = text.split_once(": ").map_or(text.as_str(), |(_, r)| r);
        let (detail, at) = match (self.offset(err), self.unclosed) {
            (Some(off), _) if !parse => {
                let (detail, off) = self.render_detail(reason, off);
                (detail, Some(self.to_original(off)))
            }
            (_, Some(open)) if parse && reason.contains("found EOF") => {
                let opener = &self.original[open..open + 2];
                let closer = match opener {
                    "{%" => "%}",
                    "{#" => "#}",
                    _ => "}}",
                };
                let detail = format!("`{opener}` is never closed with `{closer}`");
                (format!("invalid template syntax: {detail}"), Some(open))
            }
            (off, _) => {
                let detail = off.map_or(reason.to_string(), |o| self.parse_detail(reason, o));
                let at = off.map(|o| self.to_original(o));
                (format!("invalid template syntax: {detail}"), at)
            }
        };
        match at {
            Some(orig) => format!("{}: {detail}", self.position(orig)),
            None => detail,
        }
    }

    /// The wording for a syntax error at `off` (hints for the usual Liquid habits).
    fn parse_detail(&self, reason: &str, off: usize) -> String {
        if reason.contains("expected keyword, found identifier") {
            let (_, word) = word_at(&self.compiled, off, false);
            return format!(
                "unknown tag `{word}` (tags: if, elsif, else, endif, for, endfor, with, endwith)"
            );
        }
        if reason.contains("unexpected character") {
            let ch = self.compiled.get(off..).and_then(|t| t.chars().next());
            let ch = ch.unwrap_or(' ');
            let hint = if matches!(ch, '=' | '!' | '<' | '>' | '&') {
                "; there are no comparison operators, use filters: `a | eq: b`, `a | and: b`"
            } else {
                ""
            };
            return format!("unexpected character `{ch}`{hint}");
        }
        if reason.contains("unexpected end expression") || reason.contains("unexpected end block") {
            return format!(
                "{reason}; to print a literal `}}}}` or `%}}` write {{{{ \"}}}}\" }}}}"
            );
        }
        reason.to_string()
    }

    /// The wording for a render error at `off`, and the offset to report (a variable error
    /// points at the start of its dotted path).
    fn render_detail(&self, reason: &str, off: usize) -> (String, usize) {
        let compiled = &self.compiled;
        if reason.contains("not found in map") || reason.contains("not found in this scope") {
            let (start, path) = word_at(compiled, off, true);
            let hint = if path.starts_with("issue.") {
                let fields = issue_fields(&sample_issue()).map(|(name, _)| name);
                format!(" (issue fields: {})", fields.join(", "))
            } else if reason.contains("scope") {
                " (variables: issue, attempt, and loop variables inside for)".to_string()
            } else {
                String::new()
            };
            return (format!("unknown variable `{path}`{hint}"), start);
        }
        let detail = if reason.contains("unknown function")
            || reason.contains("unknown formatter or function")
        {
            let (_, name) = word_at(compiled, off, false);
            format!("unknown filter `{name}` (filters: {})", FILTERS.join(", "))
        } else if reason.contains("unknown template") {
            "`include` is not supported in prompt templates".to_string()
        } else if reason.contains("function expects") {
            format!(
                "a filter got the wrong number of arguments ({reason}; the value before `|` \
                 counts as the first)"
            )
        } else if reason.contains("key-based access") || reason.contains("integer-based access") {
            let (start, path) = word_at(compiled, off, true);
            return (format!("`{path}`: {reason}"), start);
        } else {
            reason.to_string()
        };
        (detail, off)
    }
}

/// The identifier (or dotted path when `path`) around byte `off` of `text`, with its start.
fn word_at(text: &str, off: usize, path: bool) -> (usize, String) {
    let b = text.as_bytes();
    let keep = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || (path && (c == b'.' || c == b'?'));
    let off = off.min(b.len());
    let mut start = off;
    while start > 0 && keep(b[start - 1]) {
        start -= 1;
    }
    let mut end = off;
    while end < b.len() && keep(b[end]) {
        end += 1;
    }
    while start < end && matches!(b[start], b'.' | b'?') {
        start += 1;
    }
    let word = text.get(start..end).unwrap_or("");
    (start, word.trim_end_matches(['.', '?']).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elsif_is_rewritten_only_inside_tags() {
        let s = Source::new(
            "elsif {% if a %}x{%- elsif b -%}y{% else %}{{ \"elsif\" }}{% endif %}",
            1,
        );
        assert_eq!(
            s.compiled,
            "elsif {% if a %}x{%- else if b -%}y{% else %}{{ \"elsif\" }}{% endif %}"
        );
        assert_eq!(s.elsif_at, vec![21]);
        // `elsifx` is not the keyword.
        assert!(Source::new("{% elsifx %}", 1).elsif_at.is_empty());
    }

    #[test]
    fn unterminated_tags_do_not_panic() {
        for src in [
            "{{", "{%", "{#", "{% elsif", "{{ \"abc", "{{ \"\\", "{", "é{%-",
        ] {
            assert!(
                Source::new(src, 1).unclosed.is_some() || src == "{",
                "{src:?}"
            );
            assert!(
                PromptTemplate::compile(src, 1).is_err() || src == "{",
                "{src:?}"
            );
        }
    }

    #[test]
    fn word_at_extracts_paths() {
        assert_eq!(
            word_at("{{ issue.titel }}", 8, true),
            (3, "issue.titel".into())
        );
        assert_eq!(word_at("{{ x | shout }}", 7, false), (7, "shout".into()));
        assert_eq!(word_at("{{ ?.x }}", 3, true), (5, "x".into()));
    }
}
