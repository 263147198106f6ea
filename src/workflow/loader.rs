//! WORKFLOW.md loading (spec §5.1–5.2): split YAML front matter from the prompt body, with typed
//! errors whose line/column count in the file (not in the front matter).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use crate::front_matter::{self, FrontMatter};

use super::config::{parse_config, ConfigEnv, ParsedConfig};
use super::template::PromptTemplate;

/// The largest WORKFLOW.md Baton reads.
pub const MAX_WORKFLOW_BYTES: u64 = 1024 * 1024;

/// The prompt used when the body is empty (spec §5.4).
pub const DEFAULT_PROMPT: &str = "You are working on a GitHub issue.";

/// A loaded, validated workflow: typed config plus the compiled prompt template.
#[derive(Debug, Clone)]
pub struct Workflow {
    /// The file it was read from (as given; not canonicalized).
    pub path: PathBuf,
    pub config: ParsedConfig,
    /// Already dry-rendered.
    pub template: PromptTemplate,
    /// The trimmed prompt body as written (empty ⇒ the default prompt is used).
    pub prompt_source: String,
    /// FNV-1a hash of the file bytes, to skip no-op reloads.
    pub content_hash: u64,
}

/// A typed workflow loading error (spec §5.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowError {
    /// `missing_workflow_file`, `workflow_parse_error`, `workflow_front_matter_not_a_map`,
    /// `workflow_too_large`, `workflow_front_matter_too_complex`, `invalid_config`, `template_parse_error`, `template_render_error`, …
    pub class: &'static str,
    pub path: PathBuf,
    /// What went wrong, with `line L column C` when known.
    pub message: String,
}

impl WorkflowError {
    fn at(path: &Path) -> impl Fn(&'static str, String) -> WorkflowError + '_ {
        move |class, message| WorkflowError {
            class,
            path: path.to_path_buf(),
            message,
        }
    }
}

impl fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (class, path, message) = (self.class, self.path.display(), &self.message);
        write!(f, "{class}: {path}: {message}")
    }
}

/// The raw split of a WORKFLOW.md file.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitWorkflow {
    /// Empty when absent.
    pub front_matter: Mapping,
    pub body: String,
    /// 1-based file line where the trimmed body starts (for template error positions).
    pub body_first_line: usize,
}

/// FNV-1a 64-bit hash (stable across builds, unlike `DefaultHasher`).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Read a file with the size cap; errors are `missing_workflow_file` or `workflow_too_large`.
pub(crate) fn read_workflow_bytes(path: &Path) -> Result<Vec<u8>, WorkflowError> {
    let err = WorkflowError::at(path);
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_WORKFLOW_BYTES + 1).read_to_end(&mut buf))
        .map_err(|e| {
            err(
                "missing_workflow_file",
                format!("cannot read the file: {e}"),
            )
        })?;
    if buf.len() as u64 > MAX_WORKFLOW_BYTES {
        return Err(err(
            "workflow_too_large",
            format!(
                "the file is larger than {MAX_WORKFLOW_BYTES} bytes; WORKFLOW.md must be at most 1 MiB"
            ),
        ));
    }
    Ok(buf)
}

/// Split `text` into front matter and body (spec §5.2).
pub fn split_workflow(path: &Path, text: &str) -> Result<SplitWorkflow, WorkflowError> {
    let err = WorkflowError::at(path);
    let Ok(split) = front_matter::split(text) else {
        return Err(err(
            "workflow_parse_error",
            "line 1: front matter opened with `---` is never closed by a second `---` line".into(),
        ));
    };
    let FrontMatter {
        yaml,
        body,
        body_line,
    } = split.unwrap_or(FrontMatter {
        yaml: "",
        body: text.strip_prefix('\u{feff}').unwrap_or(text),
        body_line: 1,
    });
    let yaml = if yaml.trim().is_empty() { "" } else { yaml };
    front_matter::check_yaml(yaml).map_err(|why| {
        err(
            "workflow_front_matter_too_complex",
            format!("line 2: the front matter is not parsed: {why}"),
        )
    })?;
    let value: Value = serde_yaml::from_str(yaml).map_err(|e| {
        // serde_yaml appends " at line L column C"; the position printed counts in the file,
        // whose line 2 is the YAML's first.
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or_default();
        let at = (e.location()).map_or(String::new(), |l| {
            format!("line {} column {}: ", l.line() + 1, l.column())
        });
        err(
            "workflow_parse_error",
            format!("{at}invalid YAML front matter: {msg}"),
        )
    })?;
    let front_matter = match value {
        Value::Mapping(m) => m,
        Value::Null => Mapping::new(),
        other => {
            let kind = match other {
                Value::Sequence(_) => "a list",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "not a map",
            };
            return Err(err(
                "workflow_front_matter_not_a_map",
                format!("line 2: the front matter must be a YAML map of settings, got {kind}"),
            ));
        }
    };
    // The body is trimmed; `body_first_line` is its first non-blank line.
    let skip = body
        .split_inclusive('\n')
        .take_while(|l| l.trim().is_empty())
        .count();
    Ok(SplitWorkflow {
        front_matter,
        body: body.trim().to_string(),
        body_first_line: body_line + skip,
    })
}

/// Load, parse and validate a WORKFLOW.md: config errors and template errors are reported here so
/// a bad file never replaces a good one.
pub fn load_workflow(path: &Path, env: &dyn ConfigEnv) -> Result<Workflow, WorkflowError> {
    parse_workflow_bytes(path, read_workflow_bytes(path)?, env)
}

/// [`load_workflow`] for bytes already read from `path` (by [`read_workflow_bytes`]).
pub(crate) fn parse_workflow_bytes(
    path: &Path,
    bytes: Vec<u8>,
    env: &dyn ConfigEnv,
) -> Result<Workflow, WorkflowError> {
    let err = WorkflowError::at(path);
    let content_hash = fnv1a64(&bytes);
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        err(
            "workflow_parse_error",
            format!("the file is not valid UTF-8 (byte {at})"),
        )
    })?;
    let split = split_workflow(path, &text)?;
    let file = workflow_dir(path).join(path.file_name().unwrap_or_default());
    let config =
        parse_config(&split.front_matter, &file, env).map_err(|e| err(e.class, e.message))?;
    let source = match split.body.as_str() {
        "" => DEFAULT_PROMPT,
        body => body,
    };
    let template = PromptTemplate::compile(source, split.body_first_line)
        .and_then(|t| t.validate().map(|()| t))
        .map_err(|e| err(e.class, e.message))?;
    Ok(Workflow {
        path: path.to_path_buf(),
        config,
        template,
        prompt_source: split.body,
        content_hash,
    })
}

/// The absolute directory holding the workflow file.
pub(crate) fn workflow_dir(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    crate::config::normalize_lexically(abs.parent().unwrap_or(Path::new("/")))
}
