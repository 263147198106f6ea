//! The typed reader every config parser shares: one top-level section of the front matter with
//! getters that name `section.key` and the bad value in their errors (never a secret).

use serde_yaml::{Mapping, Value};

use super::{ConfigEnv, ConfigError, Secret};

/// Where a secret read by [`Section::secret`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecretOrigin {
    /// A literal in WORKFLOW.md.
    Literal,
    /// `$NAME` in WORKFLOW.md.
    EnvReference,
}

/// `Some(NAME)` when `s` is exactly `$NAME`.
pub(crate) fn env_reference(s: &str) -> Option<&str> {
    let name = s.strip_prefix('$')?;
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    ok.then_some(name)
}

/// A short, secret-free description of a YAML value for error messages.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a map".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

/// One top-level section of the front matter, with typed getters that name `section.key` in errors.
pub(crate) struct Section<'a> {
    name: &'static str,
    map: Option<&'a Mapping>,
}

impl<'a> Section<'a> {
    pub(crate) fn new(root: &'a Mapping, name: &'static str) -> Result<Self, ConfigError> {
        match root.get(name) {
            None | Some(Value::Null) => Ok(Section { name, map: None }),
            Some(Value::Mapping(m)) => Ok(Section { name, map: Some(m) }),
            Some(other) => Err(ConfigError::new(
                "invalid_config",
                format!("{name} must be a map of settings, got {}", describe(other)),
            )),
        }
    }

    pub(crate) fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.and_then(|m| m.get(key))
    }

    pub(crate) fn is_set(&self, key: &str) -> bool {
        !matches!(self.raw(key), None | Some(Value::Null))
    }

    pub(crate) fn invalid(&self, key: &str, expected: &str, got: &str) -> ConfigError {
        ConfigError::new(
            "invalid_config",
            format!("{}.{key} must be {expected}, got {got}", self.name),
        )
    }

    /// A string; `$NAME` resolves from the environment (empty/unset ⇒ `None`).
    pub(crate) fn string(
        &self,
        key: &str,
        env: &dyn ConfigEnv,
    ) -> Result<Option<String>, ConfigError> {
        Ok(match self.plain_string(key)? {
            None => None,
            Some(s) => match env_reference(s.trim()) {
                Some(name) => env
                    .var(name)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| v.trim().to_string()),
                None => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
            },
        })
    }

    /// A secret string, with the same `$NAME` rule; reports where it came from.
    pub(crate) fn secret(
        &self,
        key: &str,
        env: &dyn ConfigEnv,
    ) -> Result<Option<(Secret, SecretOrigin)>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(match env_reference(s.trim()) {
                Some(name) => env
                    .var(name)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (Secret::new(v.trim()), SecretOrigin::EnvReference)),
                None => Some(s.trim())
                    .filter(|s| !s.is_empty())
                    .map(|s| (Secret::new(s), SecretOrigin::Literal)),
            }),
            // Never echo the value: it may be a secret.
            Some(_) => Err(ConfigError::new(
                "invalid_config",
                format!(
                    "{}.{key} must be a string (a literal or $VAR_NAME)",
                    self.name
                ),
            )),
        }
    }

    /// A string taken verbatim (URLs, prompts): no `$VAR` or `~` rewriting.
    pub(crate) fn plain_string(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.invalid(key, "a string", &describe(other))),
        }
    }

    /// A shell command: verbatim, but it must not be blank when set.
    pub(crate) fn command(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.plain_string(key)? {
            Some(s) if s.trim().is_empty() => {
                Err(self.invalid(key, "a non-empty shell command", "\"\""))
            }
            other => Ok(other),
        }
    }

    /// A hook script: verbatim; a blank script counts as absent.
    pub(crate) fn script(&self, key: &str) -> Result<Option<String>, ConfigError> {
        Ok(self.plain_string(key)?.filter(|s| !s.trim().is_empty()))
    }

    pub(crate) fn string_list(&self, key: &str) -> Result<Option<Vec<String>>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Sequence(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.trim().to_string()),
                    Value::Number(n) => Ok(n.to_string()),
                    other => Err(self.invalid(
                        key,
                        "a list of strings",
                        &format!("an entry {}", describe(other)),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(self.invalid(key, "a list of strings", &describe(other))),
        }
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.invalid(key, "true or false", &describe(other))),
        }
    }

    /// A signed integer (numbers or numeric strings).
    pub(crate) fn int(&self, key: &str) -> Result<Option<i64>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.invalid(key, "an integer", &n.to_string())),
            Some(Value::String(s)) => s
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| self.invalid(key, "an integer", &format!("{s:?}"))),
            Some(other) => Err(self.invalid(key, "an integer", &describe(other))),
        }
    }

    /// A non-negative integer.
    pub(crate) fn uint(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.int(key) {
            Ok(Some(n)) if n < 0 => {
                Err(self.invalid(key, "a non-negative integer", &n.to_string()))
            }
            Ok(v) => Ok(v.map(|n| n as u64)),
            Err(_) => Err(self.invalid(key, "a non-negative integer", &self.got(key))),
        }
    }

    /// A positive integer.
    pub(crate) fn positive(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.int(key) {
            Ok(Some(n)) if n <= 0 => Err(self.invalid(key, "a positive integer", &n.to_string())),
            Ok(v) => Ok(v.map(|n| n as u64)),
            Err(_) => Err(self.invalid(key, "a positive integer", &self.got(key))),
        }
    }

    pub(crate) fn positive_u32(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        match self.positive(key)? {
            Some(n) if n > u32::MAX as u64 => {
                Err(self.invalid(key, "a positive integer", &n.to_string()))
            }
            other => Ok(other.map(|n| n as u32)),
        }
    }

    /// A positive, finite number (integers, decimals or numeric strings).
    pub(crate) fn positive_number(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        const EXPECTED: &str = "a positive number";
        let v = match self.raw(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
            Some(_) => None,
        };
        match v {
            Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
            _ => Err(self.invalid(key, EXPECTED, &self.got(key))),
        }
    }

    pub(crate) fn got(&self, key: &str) -> String {
        self.raw(key)
            .map(describe)
            .unwrap_or_else(|| "nothing".into())
    }
}
