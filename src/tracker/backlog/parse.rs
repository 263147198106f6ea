//! Pure parsing of a Backlog.md board's files: `config.yml` and one task file (YAML front matter
//! between `---` lines, then a Markdown body), in the format the `backlog` CLI (npm `backlog.md`)
//! writes (`fixtures/backlog/real/`). No I/O here; `read.rs` walks the directory.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::front_matter::{self, FrontMatter};
use crate::model::normalize_name;

/// What Baton needs from a board's `config.yml`: its statuses in column order, its priorities
/// most urgent first, and the task id and file name prefix (lowercased). The default is what
/// Backlog.md uses for a key `config.yml` does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardConfig {
    pub statuses: Vec<String>,
    pub priorities: Vec<String>,
    pub task_prefix: String,
}

impl Default for BoardConfig {
    fn default() -> Self {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        BoardConfig {
            statuses: strings(&["To Do", "In Progress", "Done"]),
            priorities: strings(&["high", "medium", "low"]),
            task_prefix: "task".into(),
        }
    }
}

/// A YAML scalar read as text (Backlog.md stringifies ids, titles and list items the same way).
#[derive(Debug)]
struct Scalar(String);

/// A list of scalars (null items skipped), or one scalar meaning a one-item list.
#[derive(Debug)]
struct ScalarList(Vec<String>);

impl ScalarList {
    /// Trimmed, non-empty item texts.
    fn texts(&self) -> Vec<String> {
        let texts = self.0.iter().map(|s| s.trim().to_string());
        texts.filter(|s| !s.is_empty()).collect()
    }
}

/// Reads text, numbers and booleans as text (with `list`, also a list of them); the error names
/// what was found instead, and serde_yaml prefixes the key and the line (`labels[0]: invalid
/// type: map, expected text …`).
struct Text {
    list: bool,
}

impl<'de> Visitor<'de> for Text {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(["text", "a list of text items"][usize::from(self.list)])
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<String>, E> {
        Ok(vec![v.to_string()])
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<String>, E> {
        Ok(vec![v.to_string()])
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<String>, E> {
        Ok(vec![v.to_string()])
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Vec<String>, E> {
        Ok(vec![v.to_string()])
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Vec<String>, E> {
        Ok(vec![v.to_string()])
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        if !self.list {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Option<Scalar>>()? {
            items.extend(item.map(|s| s.0));
        }
        Ok(items)
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_any(Text { list: false })?;
        Ok(Scalar(text.into_iter().next().unwrap_or_default()))
    }
}

impl<'de> Deserialize<'de> for ScalarList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Text { list: true }).map(ScalarList)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(expecting = "a mapping of config keys")]
struct RawConfig {
    statuses: Option<ScalarList>,
    priorities: Option<ScalarList>,
    task_prefix: Option<Scalar>,
}

/// Parse `config.yml`. Unknown keys are ignored; absent keys take Backlog.md's defaults.
/// Errors are YAML errors (or a non-mapping document), as text.
pub fn parse_config(text: &str) -> Result<BoardConfig, String> {
    let raw: RawConfig = if text.trim().is_empty() {
        RawConfig::default()
    } else {
        crate::front_matter::check_yaml(text)?;
        serde_yaml::from_str(text).map_err(|e| e.to_string())?
    };
    let d = BoardConfig::default();
    let list = |l: Option<ScalarList>| l.map(|l| l.texts()).filter(|l| !l.is_empty());
    let prefix = raw.task_prefix.map(|p| p.0.trim().to_lowercase());
    let prefix = prefix.filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphabetic()));
    Ok(BoardConfig {
        statuses: list(raw.statuses).unwrap_or(d.statuses),
        priorities: list(raw.priorities).unwrap_or(d.priorities),
        task_prefix: prefix.unwrap_or(d.task_prefix),
    })
}

#[derive(Debug, Deserialize)]
#[serde(expecting = "a mapping of front matter keys")]
struct RawTask {
    id: Option<Scalar>,
    title: Option<Scalar>,
    status: Option<Scalar>,
    labels: Option<ScalarList>,
    dependencies: Option<ScalarList>,
    priority: Option<Scalar>,
    created_date: Option<Scalar>,
    updated_date: Option<Scalar>,
}

/// One task file's front matter and body, typed and trimmed (blank labels dropped). Ids are
/// canonical (see [`canonical_id`]), dependencies too (in file order, deduplicated); the priority
/// is lowercased; the dates are RFC 3339 UTC when readable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFile {
    pub id: String,
    pub title: String,
    pub status: String,
    pub labels: Vec<String>,
    pub dependencies: Vec<String>,
    pub priority: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub body: String,
}

/// Why a task file could not be read as a task (the file is skipped), as one line.
pub type TaskProblem = String;

/// The bytes as text, or where the first byte that is not UTF-8 is.
pub fn utf8(bytes: &[u8]) -> Result<&str, TaskProblem> {
    let at = |e: std::str::Utf8Error| e.valid_up_to();
    std::str::from_utf8(bytes)
        .map_err(|e| format!("not valid UTF-8 (first bad byte at offset {})", at(e)))
}

pub fn parse_task(text: &str) -> Result<TaskFile, TaskProblem> {
    let broken = |why: &str| format!("broken front matter: {why}");
    let Ok(Some(FrontMatter { yaml, body, .. })) = front_matter::split(text) else {
        return Err(broken("no `---` block at the top"));
    };
    front_matter::check_yaml(yaml).map_err(|why| format!("front matter not parsed: {why}"))?;
    let raw: RawTask = serde_yaml::from_str(yaml)
        .map_err(|e| broken(&crate::text::single_line(&e.to_string(), 200)))?;
    let required = |v: &Option<Scalar>, key: &str| {
        v.as_ref()
            .map(|s| s.0.trim().to_string())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("front matter has no `{key}`"))
    };
    let id_text = required(&raw.id, "id")?;
    let id = canonical_id(&id_text).ok_or_else(|| format!("id {id_text:?} is not like TASK-12"))?;
    let status = required(&raw.status, "status")?;
    let title = required(&raw.title, "title")?;
    let mut dependencies: Vec<String> = Vec::new();
    for d in raw.dependencies.map(|l| l.texts()).unwrap_or_default() {
        // A bare number (`- 3`) refers to a task with this board's prefix.
        let prefix = id.split_once('-').map_or("", |(p, _)| p);
        let canon = canonical_id(&d).or_else(|| canonical_id(&format!("{prefix}-{d}")));
        if let Some(c) = canon.filter(|c| *c != id && !dependencies.contains(c)) {
            dependencies.push(c);
        }
    }
    Ok(TaskFile {
        id,
        title,
        status,
        labels: raw.labels.map(|l| l.texts()).unwrap_or_default(),
        dependencies,
        priority: (raw.priority.map(|p| normalize_name(&p.0))).filter(|p| !p.is_empty()),
        created_at: raw.created_date.and_then(|d| backlog_date_to_rfc3339(&d.0)),
        updated_at: raw.updated_date.and_then(|d| backlog_date_to_rfc3339(&d.0)),
        body: body.trim().to_string(),
    })
}

/// Backlog.md's canonical task id: `<PREFIX>-<n>[.<n>…]` upper-cased with leading zeros dropped
/// from each numeric segment (`task-007` and `TASK-7` are the same task). `None` when `id` is not
/// letters, `-`, then dot-separated decimal numbers.
pub fn canonical_id(id: &str) -> Option<String> {
    let (prefix, body) = id.trim().split_once('-')?;
    if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    let mut segments = Vec::new();
    for seg in body.split('.') {
        if seg.is_empty() || !seg.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let trimmed = seg.trim_start_matches('0');
        segments.push(if trimmed.is_empty() { "0" } else { trimmed });
    }
    let (prefix, segments) = (prefix.to_ascii_uppercase(), segments.join("."));
    Some(format!("{prefix}-{segments}"))
}

/// The numeric part of an id: `12` for `TASK-12`, `3.1` for the subtask `TASK-3.1`
/// (for `BATON_ISSUE_NUMBER`).
pub fn id_number_text(id: &str) -> &str {
    id.split_once('-').map(|(_, n)| n).unwrap_or("")
}

/// The top-level task number of an id (`3` for `TASK-3.1`); 0 when it does not fit a `u64`.
pub fn id_number(id: &str) -> u64 {
    id_number_text(id)
        .split('.')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Convert a Backlog.md date to RFC 3339 UTC (Backlog.md writes UTC): `YYYY-MM-DD` (older
/// releases), `YYYY-MM-DD HH:MM` (current releases) or `YYYY-MM-DDTHH:MM`. `None` otherwise.
pub fn backlog_date_to_rfc3339(s: &str) -> Option<String> {
    let s = s.trim();
    let (date, time) = match s.len() {
        10 => (s, "00:00"),
        16 if matches!(s.as_bytes()[10], b' ' | b'T') => (s.get(..10)?, s.get(11..)?),
        _ => return None,
    };
    let out = format!("{date}T{time}:00Z");
    // Validate the shape and the calendar (rejects 2026-02-30, 25:00, stray characters).
    crate::timefmt::parse_rfc3339(&out)?;
    let shape_ok = out.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 => b == b'-',
        10 => b == b'T',
        13 | 16 => b == b':',
        19 => b == b'Z',
        _ => b.is_ascii_digit(),
    });
    shape_ok.then_some(out)
}

/// The identifier Baton shows and keys workspaces by: the canonical id lower-cased (`task-12`),
/// as in the task's file name.
pub fn identifier_for(id: &str) -> String {
    id.to_ascii_lowercase()
}

/// 1-based position of `value` in `priorities` (compared trimmed and lowercased); `None` when
/// unset or not a configured priority. With the default list: high → 1, medium → 2, low → 3.
pub fn priority_rank(value: Option<&str>, priorities: &[String]) -> Option<u32> {
    let v = normalize_name(value?);
    let pos = priorities.iter().position(|p| normalize_name(p) == v)?;
    u32::try_from(pos).ok()?.checked_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_ids() {
        assert_eq!(canonical_id("task-12").as_deref(), Some("TASK-12"));
        assert_eq!(canonical_id(" TASK-007 ").as_deref(), Some("TASK-7"));
        assert_eq!(canonical_id("back-119.02").as_deref(), Some("BACK-119.2"));
        assert_eq!(canonical_id("task-0").as_deref(), Some("TASK-0"));
        for bad in [
            "12", "task-", "task-x", "-1", "ta sk-1", "task-1.", "tâsk-1",
        ] {
            assert_eq!(canonical_id(bad), None, "{bad}");
        }
        assert_eq!(id_number("TASK-3.1"), 3);
        assert_eq!(id_number_text("TASK-3.1"), "3.1");
        assert_eq!(id_number("TASK-99999999999999999999999"), 0);
        assert_eq!(identifier_for("TASK-12"), "task-12");
    }

    #[test]
    fn dates_both_forms() {
        let f = backlog_date_to_rfc3339;
        assert_eq!(f("2025-06-09").as_deref(), Some("2025-06-09T00:00:00Z"));
        assert_eq!(
            f("2026-11-30 06:40").as_deref(),
            Some("2026-11-30T06:40:00Z")
        );
        assert_eq!(
            f("2026-11-30T06:40").as_deref(),
            Some("2026-11-30T06:40:00Z")
        );
        for bad in [
            "",
            "2026-02-30",
            "2026-11-30 25:00",
            "30-11-26",
            "2026-11-30 06:4x",
            "é",
        ] {
            assert_eq!(f(bad), None, "{bad}");
        }
    }

    #[test]
    fn priority_ranks() {
        let p = BoardConfig::default().priorities;
        assert_eq!(priority_rank(Some("high"), &p), Some(1));
        assert_eq!(priority_rank(Some(" Medium "), &p), Some(2));
        assert_eq!(priority_rank(Some("low"), &p), Some(3));
        assert_eq!(priority_rank(Some("urgent"), &p), None);
        assert_eq!(priority_rank(None, &p), None);
    }

    #[test]
    fn config_defaults_and_values() {
        assert_eq!(parse_config("").unwrap(), BoardConfig::default());
        let c = parse_config(
            "project_name: \"X\"\nstatuses: [\"Todo\", 'Doing', Done]\ntask_prefix: \"back\"\n\
             definition_of_done: [\"a\"]\n",
        )
        .unwrap();
        assert_eq!(c.statuses, ["Todo", "Doing", "Done"]);
        assert_eq!(c.task_prefix, "back");
        let block = parse_config("statuses:\n  - A\n  - B\npriorities: [P1, P2]\n").unwrap();
        assert_eq!(block.statuses, ["A", "B"]);
        assert_eq!(block.priorities, ["P1", "P2"]);
        assert!(parse_config("statuses: [\"A\"\n").is_err());
        assert!(parse_config("- a\n- b\n").is_err());
    }

    #[test]
    fn task_fields_and_problems() {
        let t = parse_task(
            "---\nid: task-3\ntitle: T\nstatus: To Do\nlabels: solo\ndependencies: [1, TASK-01, task-3]\n\
             priority: HIGH\ncreated_date: 2025-06-09\n---\n\n body \n",
        )
        .unwrap();
        assert_eq!(t.id, "TASK-3");
        assert_eq!(t.labels, ["solo"]);
        assert_eq!(t.dependencies, ["TASK-1"]);
        assert_eq!(t.priority.as_deref(), Some("high"));
        assert_eq!(t.created_at.as_deref(), Some("2025-06-09T00:00:00Z"));
        assert_eq!(t.body, "body");
        let e = |s: &str| parse_task(s).unwrap_err();
        assert_eq!(
            e("---\ntitle: T\nstatus: A\n---\n"),
            "front matter has no `id`"
        );
        assert_eq!(
            e("---\nid: task-1\ntitle: T\nstatus: ''\n---\n"),
            "front matter has no `status`"
        );
        assert_eq!(
            e("---\nid: nope\ntitle: T\nstatus: A\n---\n"),
            "id \"nope\" is not like TASK-12"
        );
        assert!(e("---\nid: [\n---\n").starts_with("broken front matter: "));
        assert!(e("no front matter").starts_with("broken front matter: "));
        // Type errors name the key and the position.
        let labels = e("---\nid: task-1\ntitle: x\nstatus: y\nlabels: {a: b}\n---\n").to_string();
        assert!(
            labels.contains("labels: invalid type: map, expected a list of text items at line 4"),
            "{labels}"
        );
        let list = e("---\n- a\n---\n").to_string();
        assert!(
            list.contains("expected a mapping of front matter keys"),
            "{list}"
        );
        let lenient = parse_task(
            "---\nid: task-1\ntitle: 12\nstatus: To Do\nlabels: [a, null, 3, true]\n---\n",
        )
        .unwrap();
        assert_eq!((lenient.title.as_str(), lenient.labels.len()), ("12", 3));
        assert_eq!(
            utf8(b"---\nid: task-1\n---\n\xff")
                .and_then(parse_task)
                .unwrap_err(),
            "not valid UTF-8 (first bad byte at offset 19)"
        );
    }
}
