//! Strict prompt rendering with `upon` (spec §5.4, §12). PLACEHOLDER: being implemented.

use crate::model::Issue;

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

/// A compiled prompt template.
#[derive(Debug, Clone)]
pub struct PromptTemplate {
    source: String,
    #[allow(dead_code)]
    first_line: usize,
}

impl PromptTemplate {
    /// Compile `source`, whose first line is line `first_line` of WORKFLOW.md.
    pub fn compile(source: &str, first_line: usize) -> Result<Self, TemplateError> {
        Ok(PromptTemplate {
            source: source.to_string(),
            first_line,
        })
    }
    /// Dry-render against a fully populated sample issue with `attempt` null and 1.
    pub fn validate(&self) -> Result<(), TemplateError> {
        Ok(())
    }
    /// Render for `issue` and `attempt` (`None` on the first run).
    pub fn render(&self, _issue: &Issue, _attempt: Option<u32>) -> Result<String, TemplateError> {
        Ok(self.source.clone())
    }
}
