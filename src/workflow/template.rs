//! Strict prompt rendering with `upon` (spec §5.4, §12).
//!
//! `compile` rewrites the one Liquid-ism upon lacks in its grammar (`{% elsif %}` becomes
//! `{% else if %}`, only inside tags) and compiles with one shared engine that knows the filters
//! below and prints lists joined by `", "`. `validate` dry-renders against a fully populated sample
//! issue with `attempt` null and 1, because upon's strictness (unknown variable / unknown filter)
//! only bites on branches that are actually rendered. Errors carry `line L column C` counted in
//! WORKFLOW.md: upon's own positions are mapped back through the `elsif` rewrite.
//!
//! Issue text only ever enters as `upon::Value` data in the render context, so `{{ }}` inside an
//! issue body is printed verbatim and never interpreted.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};

use upon::{Engine, Value};

use crate::model::{BlockerRef, Issue};

/// Error class for a template that does not compile.
pub(crate) const TEMPLATE_PARSE_ERROR: &str = "template_parse_error";
/// Error class for a template that compiles but fails to render.
pub(crate) const TEMPLATE_RENDER_ERROR: &str = "template_render_error";

/// Deepest nesting of `for` loops a template may use: with the context's lists capped at
/// [`MAX_CONTEXT_LIST`] (and the `issue` map's 16 fields) a render makes at most 64³ loop
/// iterations, so a hostile template cannot spin a render for minutes.
pub const MAX_FOR_NESTING: usize = 3;
/// Entries of `issue.labels` / `issue.blocked_by` visible to a template.
pub const MAX_CONTEXT_LIST: usize = 64;
/// Bound of a rendered prompt (bytes); a longer render stops with a render error.
pub const MAX_RENDER_BYTES: usize = 1024 * 1024;

/// The filters registered on the engine, in the order they are documented.
pub(crate) const FILTERS: &[&str] = &[
    "eq", "ne", "and", "or", "contains", "default", "join", "upcase", "downcase", "size", "plus",
];

/// The fields of the `issue` variable.
pub(crate) const ISSUE_FIELDS: &[&str] = &[
    "id",
    "item_id",
    "identifier",
    "number",
    "repository",
    "title",
    "description",
    "priority",
    "state",
    "branch_name",
    "url",
    "labels",
    "blocked_by",
    "created_at",
    "updated_at",
    "closed",
];

/// A template error: class `template_parse_error` or `template_render_error`, message with
/// `line L column C` counted in WORKFLOW.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// `template_parse_error` or `template_render_error`.
    pub class: &'static str,
    /// Detail with the file position.
    pub message: String,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

impl std::error::Error for TemplateError {}

/// A compiled prompt template (cheap to clone; the compiled form is shared).
#[derive(Clone)]
pub struct PromptTemplate {
    inner: Arc<Compiled>,
}

struct Compiled {
    template: upon::Template<'static>,
    /// The source as written in WORKFLOW.md.
    original: String,
    prepared: Prepared,
    first_line: usize,
}

impl std::fmt::Debug for PromptTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptTemplate")
            .field("first_line", &self.inner.first_line)
            .field("source_bytes", &self.inner.original.len())
            .finish_non_exhaustive()
    }
}

impl PromptTemplate {
    /// Compile `source`, whose first line is line `first_line` of WORKFLOW.md.
    pub fn compile(source: &str, first_line: usize) -> Result<Self, TemplateError> {
        let prepared = prepare(source);
        let locator = Locator {
            original: source,
            prepared: &prepared,
            first_line,
        };
        let template = match engine().compile(prepared.compiled.clone()) {
            Ok(t) => t,
            Err(err) => {
                // Locate with the shadow text (same syntax, ASCII raw text), which fails the same way.
                let shadow_err = engine().compile(prepared.shadow.as_str()).err();
                let located = shadow_err.as_ref().unwrap_or(&err);
                return Err(TemplateError {
                    class: TEMPLATE_PARSE_ERROR,
                    message: locator.describe(&err, located, true),
                });
            }
        };
        if let Some(off) = too_deep_loop(&prepared.compiled) {
            return Err(TemplateError {
                class: TEMPLATE_PARSE_ERROR,
                message: format!(
                    "{}: `for` loops nested deeper than {MAX_FOR_NESTING} levels",
                    locator.position(locator.to_original(off))
                ),
            });
        }
        Ok(PromptTemplate {
            inner: Arc::new(Compiled {
                template,
                original: source.to_string(),
                prepared,
                first_line,
            }),
        })
    }

    /// Dry-render against a fully populated sample issue with `attempt` null and 1, then check
    /// the branches no dry render reached for unknown filters, `issue` fields and variables.
    pub fn validate(&self) -> Result<(), TemplateError> {
        let issue = sample_issue();
        self.render(&issue, None)?;
        self.render(&issue, Some(1))?;
        let c = &self.inner;
        if let Some((off, detail)) = static_check(&c.prepared.compiled) {
            let locator = Locator {
                original: &c.original,
                prepared: &c.prepared,
                first_line: c.first_line,
            };
            return Err(TemplateError {
                class: TEMPLATE_RENDER_ERROR,
                message: format!("{}: {detail}", locator.position(locator.to_original(off))),
            });
        }
        Ok(())
    }

    /// Render for `issue` and `attempt` (`None` on the first run).
    pub fn render(&self, issue: &Issue, attempt: Option<u32>) -> Result<String, TemplateError> {
        let ctx = context(issue, attempt);
        let c = &self.inner;
        let result =
            std::panic::catch_unwind(AssertUnwindSafe(|| bounded_render(&c.template, &ctx)));
        let err = match result {
            Ok(Ok(text)) => return Ok(text),
            Ok(Err(None)) => {
                return Err(TemplateError {
                    class: TEMPLATE_RENDER_ERROR,
                    message: format!("the rendered prompt exceeds {MAX_RENDER_BYTES} bytes"),
                })
            }
            Ok(Err(Some(err))) => err,
            Err(_) => {
                return Err(TemplateError {
                    class: TEMPLATE_RENDER_ERROR,
                    message: "internal error: the template engine panicked".to_string(),
                })
            }
        };
        // Same data, same control flow: the shadow fails at the same place, with exact columns.
        let shadow_err = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let shadow = engine().compile(c.prepared.shadow.as_str()).ok()?;
            bounded_render(&shadow, &ctx).err().flatten()
        }))
        .ok()
        .flatten();
        let locator = Locator {
            original: &c.original,
            prepared: &c.prepared,
            first_line: c.first_line,
        };
        Err(TemplateError {
            class: TEMPLATE_RENDER_ERROR,
            message: locator.describe(&err, shadow_err.as_ref().unwrap_or(&err), false),
        })
    }
}

/// A writer that refuses to grow past [`MAX_RENDER_BYTES`].
struct BoundedWriter {
    buf: Vec<u8>,
    overflow: bool,
}

impl std::io::Write for BoundedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > MAX_RENDER_BYTES {
            self.overflow = true;
            return Err(std::io::Error::other("rendered prompt too large"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Render with the output bound; `Err(None)` when the bound was hit.
fn bounded_render(t: &upon::Template<'_>, ctx: &Value) -> Result<String, Option<upon::Error>> {
    let mut w = BoundedWriter {
        buf: Vec::new(),
        overflow: false,
    };
    match t.render_from(engine(), ctx).to_writer(&mut w) {
        Ok(()) => Ok(String::from_utf8_lossy(&w.buf).into_owned()),
        Err(_) if w.overflow => Err(None),
        Err(e) => Err(Some(e)),
    }
}

/// The offset of the first `for` tag nested deeper than [`MAX_FOR_NESTING`], if any.
fn too_deep_loop(compiled: &str) -> Option<usize> {
    let b = compiled.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(j) = find_open(b, i) {
        if b[j + 1] == b'#' {
            i = (j + 2..b.len().saturating_sub(1)).find(|&p| b[p..].starts_with(b"#}"))? + 2;
            continue;
        }
        if b[j + 1] != b'%' {
            i = j + 2;
            continue;
        }
        let end = tag_end(b, j + 2)?;
        let words: Vec<&str> = tag_tokens(compiled, j + 2, end - 2)
            .into_iter()
            .map(|(_, w)| w)
            .filter(|w| *w != "-")
            .collect();
        match words.first() {
            Some(&"for") => {
                depth += 1;
                if depth > MAX_FOR_NESTING {
                    return Some(j);
                }
            }
            Some(&"endfor") => depth = depth.saturating_sub(1),
            _ => {}
        }
        i = end;
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Engine, formatter and filters
// ---------------------------------------------------------------------------------------------

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
        e.add_function(
            "default",
            |a: Value, b: Value| {
                if blank(&a) {
                    b
                } else {
                    a
                }
            },
        );
        e.add_function("join", filter_join);
        e.add_function("upcase", |v: Value| {
            change_case(v, "upcase", str::to_uppercase)
        });
        e.add_function("downcase", |v: Value| {
            change_case(v, "downcase", str::to_lowercase)
        });
        e.add_function("size", filter_size);
        e.add_function("plus", filter_plus);
        e
    })
}

/// Prints scalars as upon does (null prints nothing), lists joined by `", "`, and refuses maps.
fn format_value(f: &mut upon::fmt::Formatter<'_>, value: &Value) -> upon::fmt::Result {
    let text = text_of(value).map_err(upon::fmt::Error::from)?;
    std::fmt::Write::write_str(f, &text)?;
    Ok(())
}

/// The printed form of a value (see [`format_value`]).
fn text_of(value: &Value) -> Result<String, String> {
    Ok(match value {
        Value::None => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Integer(n) => n.to_string(),
        Value::Float(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::List(items) => items
            .iter()
            .map(text_of)
            .collect::<Result<Vec<_>, _>>()?
            .join(", "),
        Value::Map(_) => {
            return Err("cannot print a map; print one of its fields instead \
                        (for example `{{ blocker.identifier }}`)"
                .to_string())
        }
    })
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
        Value::None | Value::Bool(false) | Value::Integer(0) => false,
        Value::Float(n) => *n != 0.0,
        Value::String(s) => !s.is_empty(),
        Value::List(l) => !l.is_empty(),
        Value::Map(m) => !m.is_empty(),
        _ => true,
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
            return Err(format!(
                "filter `contains` on {} needs a string argument, got {}",
                kind(&hay),
                kind(n)
            ))
        }
        (h, _) => {
            return Err(format!(
                "filter `contains` needs a string, list or map on its left, got {}",
                kind(h)
            ))
        }
    };
    Ok(Value::Bool(found))
}

fn filter_join(v: Value, sep: String) -> Result<Value, String> {
    match &v {
        Value::List(items) => Ok(Value::String(
            items
                .iter()
                .map(text_of)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("filter `join`: {e}"))?
                .join(&sep),
        )),
        Value::Map(_) => Err("filter `join` needs a list, got a map".to_string()),
        scalar => Ok(Value::String(text_of(scalar)?)),
    }
}

fn change_case(v: Value, name: &str, f: fn(&str) -> String) -> Result<Value, String> {
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
            return Err(format!(
                "filter `size` needs a string, list or map, got {}",
                kind(other)
            ))
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
        _ => Err(format!(
            "filter `plus` needs numbers, got {} and {}",
            kind(&a),
            kind(&b)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Render context
// ---------------------------------------------------------------------------------------------

fn opt_string(v: &Option<String>) -> Value {
    v.clone().map(Value::String).unwrap_or(Value::None)
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn blocker_value(b: &BlockerRef) -> Value {
    map(vec![
        ("id", Value::String(b.id.clone())),
        ("identifier", Value::String(b.identifier.clone())),
        ("state", Value::String(b.state.clone())),
        ("terminal", Value::Bool(b.terminal)),
    ])
}

/// The `issue` variable: every field of [`Issue`]; absent optional fields are null.
fn issue_value(issue: &Issue) -> Value {
    map(vec![
        ("id", Value::String(issue.id.clone())),
        ("item_id", Value::String(issue.item_id.clone())),
        ("identifier", Value::String(issue.identifier.clone())),
        (
            "number",
            Value::Integer(i64::try_from(issue.number).unwrap_or(i64::MAX)),
        ),
        ("repository", Value::String(issue.repository.clone())),
        ("title", Value::String(issue.title.clone())),
        ("description", opt_string(&issue.description)),
        (
            "priority",
            issue
                .priority
                .map(|p| Value::Integer(i64::from(p)))
                .unwrap_or(Value::None),
        ),
        ("state", Value::String(issue.state.clone())),
        ("branch_name", opt_string(&issue.branch_name)),
        ("url", opt_string(&issue.url)),
        (
            "labels",
            Value::List(
                issue
                    .labels
                    .iter()
                    .take(MAX_CONTEXT_LIST)
                    .cloned()
                    .map(Value::String)
                    .collect(),
            ),
        ),
        (
            "blocked_by",
            Value::List(
                issue
                    .blocked_by
                    .iter()
                    .take(MAX_CONTEXT_LIST)
                    .map(blocker_value)
                    .collect(),
            ),
        ),
        ("created_at", opt_string(&issue.created_at)),
        ("updated_at", opt_string(&issue.updated_at)),
        ("closed", Value::Bool(issue.closed)),
    ])
}

fn context(issue: &Issue, attempt: Option<u32>) -> Value {
    map(vec![
        ("issue", issue_value(issue)),
        (
            "attempt",
            attempt
                .map(|a| Value::Integer(i64::from(a)))
                .unwrap_or(Value::None),
        ),
    ])
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

// ---------------------------------------------------------------------------------------------
// Source preparation (elsif) and error positions
// ---------------------------------------------------------------------------------------------

/// The source as compiled, plus what is needed to map upon's error positions back.
struct Prepared {
    /// What upon compiles: the source with `{% elsif` rewritten to `{% else if`.
    compiled: String,
    /// `compiled` with every non-ASCII character outside tags replaced by as many `~` as it has
    /// bytes. Its syntax and control flow are identical, and upon (counting chars per line) then
    /// reports columns from which the exact byte offset can be recovered.
    shadow: String,
    /// Byte offsets in `compiled` where `else if` (7 bytes) replaced `elsif` (5 bytes).
    elsif_at: Vec<usize>,
    /// Offset in `compiled` of a `{{`/`{%`/`{#` that is never closed, if any.
    unclosed: Option<usize>,
}

/// The next `{{`, `{%` or `{#` at or after `from`.
fn find_open(b: &[u8], from: usize) -> Option<usize> {
    (from..b.len().saturating_sub(1))
        .find(|&i| b[i] == b'{' && matches!(b[i + 1], b'{' | b'%' | b'#'))
}

/// The end (exclusive) of the tag whose body starts at `p`: after the first `}}`/`%}` outside a
/// string literal (`Some`), or `None` when the text ends first.
fn tag_end(b: &[u8], mut p: usize) -> Option<usize> {
    while p < b.len() {
        if b[p..].starts_with(b"}}") || b[p..].starts_with(b"%}") {
            return Some(p + 2);
        }
        if b[p] == b'"' {
            p += 1;
            while p < b.len() {
                match b[p] {
                    b'\\' => p += 2,
                    b'"' => {
                        p += 1;
                        break;
                    }
                    _ => p += 1,
                }
            }
            continue;
        }
        p += 1;
    }
    None
}

/// Where the `elsif` keyword starts inside a `{% … %}` tag, if the tag is an `elsif`.
fn elsif_keyword(tag: &str) -> Option<usize> {
    let b = tag.as_bytes();
    let mut k = 2;
    if b.get(k) == Some(&b'-') {
        k += 1;
    }
    while b
        .get(k)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
    {
        k += 1;
    }
    let after = b.get(k + 5).copied();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    (b[k..].starts_with(b"elsif") && !after.is_some_and(is_ident)).then_some(k)
}

fn push_text(text: &str, compiled: &mut String, shadow: &mut String) {
    compiled.push_str(text);
    for ch in text.chars() {
        if ch.is_ascii() {
            shadow.push(ch);
        } else {
            shadow.extend(std::iter::repeat_n('~', ch.len_utf8()));
        }
    }
}

fn prepare(src: &str) -> Prepared {
    let b = src.as_bytes();
    let mut compiled = String::with_capacity(src.len() + 16);
    let mut shadow = String::with_capacity(src.len() + 16);
    let mut elsif_at = Vec::new();
    let mut unclosed = None;
    let mut i = 0;
    while i < b.len() {
        let Some(j) = find_open(b, i) else {
            push_text(&src[i..], &mut compiled, &mut shadow);
            break;
        };
        push_text(&src[i..j], &mut compiled, &mut shadow);
        if b[j + 1] == b'#' {
            // A comment: upon ignores its content, so it is shadowed like raw text.
            let end = (j + 2..b.len().saturating_sub(1))
                .find(|&p| b[p] == b'#' && b[p + 1] == b'}')
                .map(|p| p + 2);
            if end.is_none() {
                unclosed.get_or_insert(compiled.len());
            }
            let end = end.unwrap_or(b.len());
            push_text(&src[j..end], &mut compiled, &mut shadow);
            i = end;
            continue;
        }
        let end = tag_end(b, j + 2);
        if end.is_none() {
            unclosed.get_or_insert(compiled.len());
        }
        let end = end.unwrap_or(b.len()).min(b.len());
        let tag = &src[j..end];
        match (b[j + 1] == b'%').then(|| elsif_keyword(tag)).flatten() {
            Some(k) => {
                elsif_at.push(compiled.len() + k);
                for out in [&mut compiled, &mut shadow] {
                    out.push_str(&tag[..k]);
                    out.push_str("else if");
                    out.push_str(&tag[k + 5..]);
                }
            }
            None => {
                compiled.push_str(tag);
                shadow.push_str(tag);
            }
        }
        i = end;
    }
    Prepared {
        compiled,
        shadow,
        elsif_at,
        unclosed,
    }
}

/// upon's block keywords (never variables).
const KEYWORDS: &[&str] = &[
    "if", "not", "else", "endif", "for", "in", "endfor", "with", "as", "endwith", "include",
    "true", "false",
];

/// A rough token of a tag body: identifiers, numbers and single punctuation characters
/// (string literals are skipped), with byte offsets in the compiled text.
fn tag_tokens(text: &str, start: usize, end: usize) -> Vec<(usize, &str)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut p = start;
    while p < end {
        let c = b[p];
        if c == b'"' {
            p += 1;
            while p < end && b[p] != b'"' {
                p += if b[p] == b'\\' { 2 } else { 1 };
            }
            p += 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let q = (p..end)
                .find(|&q| !(b[q].is_ascii_alphanumeric() || b[q] == b'_'))
                .unwrap_or(end);
            out.push((p, &text[p..q]));
            p = q;
        } else if c.is_ascii_punctuation() {
            out.push((p, &text[p..p + 1]));
            p += 1;
        } else {
            p += 1;
        }
    }
    out
}

/// Checks every tag, rendered or not: filters must be known, root variables must be `issue`,
/// `attempt`, `loop` or declared by some `for`/`with`, and `issue.X` must be an issue field.
/// Returns the first problem's offset in `compiled` and its wording. Scopes are ignored, so
/// this can miss mistakes but never rejects a template that renders.
fn static_check(compiled: &str) -> Option<(usize, String)> {
    let b = compiled.as_bytes();
    let mut tags = Vec::new();
    let mut i = 0;
    while let Some(j) = find_open(b, i) {
        let close: &[u8] = if b[j + 1] == b'#' { b"#}" } else { b"" };
        let end = if close.is_empty() {
            tag_end(b, j + 2)?
        } else {
            (j + 2..b.len().saturating_sub(1)).find(|&p| b[p..].starts_with(close))? + 2
        };
        if close.is_empty() {
            tags.push(tag_tokens(compiled, j + 2, end - 2));
        }
        i = end;
    }
    let mut declared: Vec<&str> = vec!["issue", "attempt", "loop"];
    for t in &tags {
        let words: Vec<&str> = t.iter().map(|(_, w)| *w).filter(|w| *w != "-").collect();
        if words.first() == Some(&"for") {
            let names = words[1..].iter().take_while(|w| **w != "in");
            declared.extend(names.filter(|w| **w != ","));
        }
        if let Some(k) = words.iter().position(|w| *w == "as") {
            declared.extend(words.get(k + 1));
        }
    }
    let issue_rebound = declared.iter().filter(|w| **w == "issue").count() > 1;
    for t in &tags {
        for (k, &(off, word)) in t.iter().enumerate() {
            let first = word.as_bytes()[0];
            if !(first.is_ascii_alphabetic() || first == b'_') || KEYWORDS.contains(&word) {
                continue;
            }
            let prev = |n: usize| k.checked_sub(n).map(|i| t[i].1);
            let next = t.get(k + 1).map(|x| x.1);
            if prev(1) == Some("|") || next == Some("(") {
                if !FILTERS.contains(&word) {
                    let list = FILTERS.join(", ");
                    return Some((off, format!("unknown filter `{word}` (filters: {list})")));
                }
            } else if prev(1) == Some(".") {
                let root = prev(2) == Some("issue") && !matches!(prev(3), Some(".") | Some("?"));
                if root && !issue_rebound && !ISSUE_FIELDS.contains(&word) {
                    let fields = ISSUE_FIELDS.join(", ");
                    let msg = format!("unknown variable `issue.{word}` (issue fields: {fields})");
                    return Some((t[k - 2].0, msg));
                }
            } else if prev(1) != Some("?") && !declared.contains(&word) {
                let msg = format!(
                    "unknown variable `{word}` (variables: issue, attempt, and loop variables \
                     inside for)"
                );
                return Some((off, msg));
            }
        }
    }
    None
}

/// upon's zero-based (line, column) of an error, read from its `{:#}` rendering
/// (`--> <anonymous>:LINE:COL`); the fields themselves are private.
fn upon_position(err: &upon::Error) -> Option<(usize, usize)> {
    let text = format!("{err:#}");
    let at = text.find("--> ")?;
    let line = text[at + 4..].lines().next()?;
    let mut parts = line.rsplitn(3, ':');
    let col: usize = parts.next()?.trim().parse().ok()?;
    let ln: usize = parts.next()?.trim().parse().ok()?;
    Some((ln.checked_sub(1)?, col.checked_sub(1)?))
}

/// upon's reason without its `render error: ` style prefix.
fn upon_reason(err: &upon::Error) -> String {
    let text = err.to_string();
    for prefix in [
        "invalid syntax: ",
        "render error: ",
        "function error: ",
        "format error: ",
    ] {
        if let Some(rest) = text.strip_prefix(prefix) {
            return rest.to_string();
        }
    }
    text
}

/// Maps positions in the prepared text back to WORKFLOW.md and words the error.
struct Locator<'a> {
    original: &'a str,
    prepared: &'a Prepared,
    first_line: usize,
}

impl Locator<'_> {
    /// The byte offset in `compiled`/`shadow` where upon located `err` (computed on the shadow).
    fn offset(&self, err: &upon::Error) -> Option<usize> {
        let (ln, col) = upon_position(err)?;
        // Invert upon's `to_ln_col`: it walks lines adding (chars + 1) until passing the offset.
        let shadow = &self.prepared.shadow;
        let lines: Vec<&str> = shadow.split_terminator('\n').collect();
        if ln >= lines.len() {
            return Some(shadow.len());
        }
        let before: usize = lines[..ln].iter().map(|l| l.chars().count() + 1).sum();
        Some((before + col).min(shadow.len()))
    }

    /// An offset in `compiled` mapped to the original source.
    fn to_original(&self, mut off: usize) -> usize {
        let mut shift = 0;
        for &at in &self.prepared.elsif_at {
            if off >= at + 7 {
                shift += 2;
            } else {
                if off > at {
                    off = at;
                }
                break;
            }
        }
        let mut orig = off.saturating_sub(shift).min(self.original.len());
        while !self.original.is_char_boundary(orig) {
            orig -= 1;
        }
        orig
    }

    /// `line L column C` in WORKFLOW.md for an offset in the original source.
    fn position(&self, orig: usize) -> String {
        let before = &self.original[..orig];
        let line = self.first_line + before.matches('\n').count();
        let line_start = before.rfind('\n').map_or(0, |p| p + 1);
        let column = before[line_start..].chars().count() + 1;
        format!("line {line} column {column}")
    }

    /// The message for `err`, positioned with `located` (the shadow's equivalent error).
    fn describe(&self, err: &upon::Error, located: &upon::Error, parse: bool) -> String {
        let reason = upon_reason(err);
        let off = self.offset(located);
        let (detail, off) = match (off, self.prepared.unclosed) {
            (Some(off), _) if !parse => self.render_detail(&reason, off),
            (_, Some(open)) if parse && reason.contains("found EOF") => {
                let opener = self.prepared.compiled.get(open..open + 2).unwrap_or("{{");
                let closer = match opener {
                    "{%" => "%}",
                    "{#" => "#}",
                    _ => "}}",
                };
                (
                    format!("invalid template syntax: `{opener}` is never closed with `{closer}`"),
                    Some(open),
                )
            }
            (Some(off), _) => (
                format!(
                    "invalid template syntax: {}",
                    self.parse_detail(&reason, off)
                ),
                Some(off),
            ),
            (None, _) => (format!("invalid template syntax: {reason}"), None),
        };
        match off {
            Some(off) => format!("{}: {detail}", self.position(self.to_original(off))),
            None => detail,
        }
    }

    /// The wording for a syntax error at `off` (hints for the usual Liquid habits).
    fn parse_detail(&self, reason: &str, off: usize) -> String {
        let compiled = &self.prepared.compiled;
        if reason.contains("expected keyword, found identifier") {
            let (_, word) = word_at(compiled, off, false);
            return format!(
                "unknown tag `{word}` (tags: if, elsif, else, endif, for, endfor, with, endwith)"
            );
        }
        if reason.contains("unexpected character") {
            let ch = compiled
                .get(off..)
                .and_then(|t| t.chars().next())
                .unwrap_or(' ');
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
    fn render_detail(&self, reason: &str, off: usize) -> (String, Option<usize>) {
        let compiled = &self.prepared.compiled;
        if reason.contains("not found in map") || reason.contains("not found in this scope") {
            let (start, path) = word_at(compiled, off, true);
            let hint = if path.starts_with("issue.") {
                format!(" (issue fields: {})", ISSUE_FIELDS.join(", "))
            } else if reason.contains("scope") {
                " (variables: issue, attempt, and loop variables inside for)".to_string()
            } else {
                String::new()
            };
            return (format!("unknown variable `{path}`{hint}"), Some(start));
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
            return (format!("`{path}`: {reason}"), Some(start));
        } else {
            reason.to_string()
        };
        (detail, Some(off))
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
        let p = prepare("elsif {% if a %}x{%- elsif b -%}y{% else %}{{ \"elsif\" }}{% endif %}");
        assert_eq!(
            p.compiled,
            "elsif {% if a %}x{%- else if b -%}y{% else %}{{ \"elsif\" }}{% endif %}"
        );
        assert_eq!(p.elsif_at, vec![21]);
        // `elsifx` is not the keyword.
        assert!(prepare("{% elsifx %}").elsif_at.is_empty());
    }

    #[test]
    fn shadow_keeps_byte_layout() {
        let p = prepare("é—{{ \"ü\" }}{# ö #}");
        assert_eq!(p.shadow.len(), p.compiled.len());
        assert_eq!(p.shadow, "~~~~~{{ \"ü\" }}{# ~~ #}");
    }

    #[test]
    fn unterminated_tags_do_not_panic() {
        for src in [
            "{{", "{%", "{#", "{% elsif", "{{ \"abc", "{{ \"\\", "{", "é{%-",
        ] {
            let p = prepare(src);
            assert_eq!(p.shadow.len(), p.compiled.len(), "{src:?}");
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
