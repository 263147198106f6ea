//! The config kit (ARCHITECTURE.md): what every WORKFLOW.md section parser shares, in a leaf
//! module so that the parsers depend on it and not on each other. A missing key keeps the
//! section struct's `Default`; every error names `section.key` and the value (never a secret:
//! [`Secret`] says only what it expects); what a type cannot say the section's parser checks
//! afterwards, through [`Section::invalid`].

use std::cell::RefCell;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;
use serde_yaml::{Mapping, Value};

/// A secret string (token, webhook secret). Its `Debug` never prints the value; it has no
/// `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret value; only for putting it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The error drops the value: it may be the secret.
        let text = "must be a string (a literal or $VAR_NAME)";
        String::deserialize(d).map_or_else(|_| Err(de::Error::custom(text)), |s| Ok(Secret(s)))
    }
}

/// A configuration problem: a class (e.g. `invalid_config`) and a message naming key and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Stable error class, e.g. `invalid_config`, `unsupported_tracker_kind`.
    pub class: &'static str,
    /// Human message naming the key and the bad value (never a secret).
    pub message: String,
}

impl ConfigError {
    pub fn new(class: &'static str, message: impl Into<String>) -> Self {
        ConfigError {
            class,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

/// The environment the config resolves against; injectable for tests.
pub trait ConfigEnv {
    /// An environment variable, `None` when unset.
    fn var(&self, name: &str) -> Option<String>;
    /// The user's home directory for `~`.
    fn home(&self) -> Option<PathBuf>;
    /// The output of `gh auth token` when `gh` is installed and logged in.
    fn gh_auth_token(&self) -> Option<String>;
}

/// The keys whose value, when it is exactly `$NAME`, is read from the environment
/// (docs/configuration.md). Their values are trimmed, and an empty one (or an empty or unset
/// variable) leaves the key unset.
const FROM_ENV: &str = "tracker.kind tracker.token tracker.owner tracker.owner_type \
    tracker.status_field tracker.priority_field agent.kind claude_code.model \
    claude_code.permission_mode copilot.model codex.model codex.thread_sandbox gemini.model \
    gemini.approval_mode gemini.auth_type server.webhook_secret";

/// The front matter being read: hands out its sections and remembers every section and
/// `section.key` they read, so that the rest can be warned about.
pub(crate) struct FrontMatter<'a> {
    root: &'a Mapping,
    /// What `$NAME`, `~` and credentials resolve against.
    env: &'a dyn ConfigEnv,
    /// WORKFLOW.md's directory: relative paths start there.
    dir: &'a Path,
    known: RefCell<Vec<String>>,
}

impl<'a> FrontMatter<'a> {
    pub(crate) fn new(root: &'a Mapping, env: &'a dyn ConfigEnv, dir: &'a Path) -> Self {
        let known = RefCell::default();
        FrontMatter {
            root,
            env,
            dir,
            known,
        }
    }

    /// The top-level section `name`; absent or null reads as empty, anything but a map is an error.
    pub(crate) fn section(&'a self, name: &'static str) -> Result<Section<'a>, ConfigError> {
        self.known.borrow_mut().push(name.into());
        let map = match self.root.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Mapping(m)) => Some(m),
            Some(v) => {
                let got = describe(v);
                return Err(invalid(format!(
                    "{name} must be a map of settings, got {got}"
                )));
            }
        };
        Ok(Section {
            name,
            map,
            fm: self,
        })
    }

    /// A warning for every key no section read, with a hint when a known key one edit away has
    /// the same parent.
    pub(crate) fn unknown_keys(&self) -> Vec<String> {
        let known = self.known.borrow();
        let mut out = Vec::new();
        for (k, v) in self.root {
            let Some(k) = k.as_str() else {
                out.push(format!("ignoring non-string top-level key {}", describe(k)));
                continue;
            };
            let keys: Vec<String> = match v {
                Value::Mapping(m) if known.iter().any(|s| s == k) => m
                    .keys()
                    .filter_map(Value::as_str)
                    .map(|s| format!("{k}.{s}"))
                    .collect(),
                _ => vec![k.to_string()],
            };
            for key in keys.into_iter().filter(|key| !known.contains(key)) {
                let parent = key.split_once('.').map(|p| p.0);
                let mut near = known
                    .iter()
                    .filter(|c| c.split_once('.').map(|p| p.0) == parent);
                let hint = near.find(|c| edit_distance(&key, c) == 1);
                let hint = hint.map_or(String::new(), |h| format!("; did you mean `{h}`?"));
                out.push(format!("unknown config key `{key}` is ignored{hint}"));
            }
        }
        out
    }
}

fn invalid(message: String) -> ConfigError {
    ConfigError::new("invalid_config", message)
}

/// One top-level section of the front matter.
pub(crate) struct Section<'a> {
    name: &'static str,
    map: Option<&'a Mapping>,
    fm: &'a FrontMatter<'a>,
}

impl<'a> Section<'a> {
    /// The section read into `T` (every field of `T` is a known key).
    pub(crate) fn read<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        self.read_keys(None)
    }

    /// The section read into `T` from those of its fields `only` lists (when given): the keys
    /// that become known.
    pub(crate) fn read_keys<T: DeserializeOwned>(
        &self,
        only: Option<&[&str]>,
    ) -> Result<T, ConfigError> {
        let entries = Vec::new();
        let reader = Reader {
            s: self,
            only,
            entries,
        };
        T::deserialize(reader).map_err(|e| invalid(e.to_string()))
    }

    /// One value read like a field of a derived struct (`Option<T>`: `None` when unset).
    pub(crate) fn get<T: DeserializeOwned>(&self, key: &'static str) -> Result<T, ConfigError> {
        let field = Field(self.value(key).unwrap_or(Value::Null));
        T::deserialize(field).map_err(|e| invalid(self.named(key, e).to_string()))
    }

    /// The raw value of `key` (a known key from now on); `None` when unset or null.
    pub(crate) fn raw(&self, key: &'static str) -> Option<&'a Value> {
        self.fm
            .known
            .borrow_mut()
            .push(format!("{}.{key}", self.name));
        self.map?.get(key).filter(|v| !v.is_null())
    }

    /// The value of `key` as a field reads it (`None`: unset).
    fn value(&self, key: &'static str) -> Option<Value> {
        let dotted = format!("{}.{key}", self.name);
        match self.raw(key)? {
            Value::String(s) if FROM_ENV.split_whitespace().any(|k| k == dotted) => {
                let s = match env_reference(s.trim()) {
                    Some(name) => self.fm.env.var(name).unwrap_or_default(),
                    None => s.clone(),
                };
                Some(s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .map(Value::String)
            }
            v => Some(v.clone()),
        }
    }

    fn named(&self, key: &str, e: Error) -> Error {
        de::Error::custom(format!("{}.{key} {e}", self.name))
    }

    /// `section.key must be <expected>, got <got>`.
    pub(crate) fn invalid(&self, key: &str, expected: &str, got: &str) -> ConfigError {
        invalid(format!("{}.{key} must be {expected}, got {got}", self.name))
    }

    pub(crate) fn env(&self) -> &'a dyn ConfigEnv {
        self.fm.env
    }

    #[cfg_attr(not(feature = "backlog"), allow(dead_code))] // the Backlog.md board's directory
    pub(crate) fn dir(&self) -> &'a Path {
        self.fm.dir
    }

    /// An integer from 1 to `max`; `default` when unset.
    pub(crate) fn ranged(
        &self,
        key: &'static str,
        default: u64,
        max: u64,
    ) -> Result<u64, ConfigError> {
        let Some(v) = self.raw(key) else {
            return Ok(default);
        };
        match Field(v.clone()).int() {
            Some(n) if n >= 1 && n as u64 <= max => Ok(n as u64),
            _ => Err(self.invalid(key, &format!("an integer from 1 to {max}"), &describe(v))),
        }
    }

    /// A path (see [`resolve_path`]); `None` when unset.
    pub(crate) fn path(&self, key: &'static str) -> Result<Option<PathBuf>, ConfigError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(s)) => resolve_path(s, self.fm.dir, self.fm.env)
                .map(Some)
                .ok_or_else(|| {
                    let want = "a path (or $VAR naming a set variable)";
                    self.invalid(key, want, &format!("{s:?}"))
                }),
            Some(other) => Err(self.invalid(key, "a path string", &describe(other))),
        }
    }

    /// A list of paths, each resolved like [`Section::path`].
    pub(crate) fn paths(&self, key: &'static str) -> Result<Vec<PathBuf>, ConfigError> {
        let raw: Option<Vec<String>> = self.get(key)?;
        let resolve =
            |p: &String| resolve_path(p, self.fm.dir, self.fm.env).filter(|_| !p.is_empty());
        let bad = |p: &String| self.invalid(key, "paths (a $VAR must be set)", &format!("{p:?}"));
        (raw.unwrap_or_default().iter())
            .map(|p| resolve(p).ok_or_else(|| bad(p)))
            .collect()
    }
}

type Error = de::value::Error;

/// A section as a serde deserializer (of a struct: it learns the fields) and map (of the set
/// fields, last first, each value a [`Field`] whose errors it names `section.key`).
struct Reader<'s, 'a> {
    s: &'s Section<'a>,
    only: Option<&'s [&'s str]>,
    entries: Vec<(&'static str, Value)>,
}

impl<'de> de::Deserializer<'de> for Reader<'_, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.deserialize_struct("", &[], v)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        mut self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        let only = self.only;
        let fields = fields.iter().filter(|f| only.is_none_or(|o| o.contains(f)));
        self.entries = fields
            .filter_map(|f| Some((*f, self.s.value(f)?)))
            .collect();
        self.entries.reverse();
        v.visit_map(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

impl<'de> de::MapAccess<'de> for Reader<'_, '_> {
    type Error = Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, _)) = self.entries.last() else {
            return Ok(None);
        };
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let (key, value) = self.entries.pop().unwrap_or(("", Value::Null));
        seed.deserialize(Field(value))
            .map_err(|e| self.s.named(key, e))
    }
}

/// One value, read by the type its field asks for; errors say what that type expects.
struct Field(Value);

impl Field {
    fn bad<T>(&self, expected: &str) -> Result<T, Error> {
        Err(de::Error::custom(format!(
            "must be {expected}, got {}",
            describe(&self.0)
        )))
    }

    fn int(&self) -> Option<i64> {
        match &self.0 {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// A positive integer up to `max`.
    fn positive(&self, max: u64) -> Result<u64, Error> {
        match self.int() {
            Some(n) if n > 0 && n as u64 <= max => Ok(n as u64),
            _ => self.bad("a positive integer"),
        }
    }
}

impl<'de> de::Deserializer<'de> for Field {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.0.deserialize_any(v).map_err(de::Error::custom)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => v.visit_none(),
            _ => v.visit_some(self),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Bool(b) => v.visit_bool(b),
            _ => self.bad("true or false"),
        }
    }

    /// A port: 0 (any free port) to 65535.
    fn deserialize_u16<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.int().map(u16::try_from) {
            Some(Ok(n)) => v.visit_u16(n),
            _ => self.bad("an integer from 0 to 65535"),
        }
    }

    fn deserialize_u32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_u32(self.positive(u32::MAX.into())? as u32)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_u64(self.positive(u64::MAX)?)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.int() {
            Some(n) => v.visit_i64(n),
            None => self.bad("an integer"),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let x = match &self.0 {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match x {
            Some(x) if x.is_finite() && x > 0.0 => v.visit_f64(x),
            _ => self.bad("a positive number"),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => v.visit_string(s),
            _ => self.bad("a string"),
        }
    }

    /// A list of strings: entries trimmed, numbers written out.
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let Value::Sequence(items) = &self.0 else {
            return self.bad("a list of strings");
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(match item {
                Value::String(s) => s.trim().to_string(),
                Value::Number(n) => n.to_string(),
                other => {
                    let got = describe(other);
                    let text = format!("must be a list of strings, got an entry {got}");
                    return Err(de::Error::custom(text));
                }
            });
        }
        v.visit_seq(de::value::SeqDeserializer::new(out.into_iter()))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        match &self.0 {
            Value::String(s) if variants.contains(&s.as_str()) => {
                v.visit_enum(s.as_str().into_deserializer())
            }
            _ => match variants.split_last() {
                Some((last, rest)) if !rest.is_empty() => {
                    self.bad(&format!("{} or {last}", rest.join(", ")))
                }
                _ => self.bad(&variants.concat()),
            },
        }
    }

    forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u128 f32 char str bytes byte_buf unit unit_struct newtype_struct tuple
        tuple_struct map struct identifier ignored_any
    }
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

/// Resolve a path setting: `$VAR` (whole value) or a leading `$VAR/…`, `~`/`~/…`, then relative
/// to the workflow dir. Returns `None` when a referenced variable is unset or empty.
pub(crate) fn resolve_path(raw: &str, workflow_dir: &Path, env: &dyn ConfigEnv) -> Option<PathBuf> {
    let raw = raw.trim();
    let expanded: String = if let Some(rest) = raw.strip_prefix('$') {
        // `$VAR` or `$VAR/sub/dir`: expand the leading variable only.
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, tail) = rest.split_at(end);
        let val = env.var(name).filter(|v| !v.is_empty())?;
        format!("{val}{tail}")
    } else {
        raw.to_string()
    };
    let path = if expanded == "~" {
        env.home()?
    } else if let Some(rest) = expanded.strip_prefix("~/") {
        env.home()?.join(rest)
    } else {
        PathBuf::from(&expanded)
    };
    Some(normalize_lexically(&workflow_dir.join(path)))
}

/// Remove `.` and `..` components without touching the filesystem.
pub(crate) fn normalize_lexically(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
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

/// Why `h` is not usable as an `ssh` destination argument (`None`: fine). A leading `-` would be
/// read as an option; whitespace and control characters never belong in a destination.
pub(crate) fn bad_destination(h: &str) -> Option<&'static str> {
    if h.is_empty() {
        Some("not empty")
    } else if h.starts_with('-') {
        Some("not starting with '-'")
    } else if h.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("no whitespace or control characters")
    } else if h.len() > 255 {
        Some("at most 255 bytes")
    } else {
        None
    }
}

#[cfg(test)]
pub(crate) mod test_env {
    use super::*;

    /// An empty environment: no variables, no home, no `gh`.
    pub(crate) struct EmptyEnv;

    impl ConfigEnv for EmptyEnv {
        fn var(&self, _: &str) -> Option<String> {
            None
        }
        fn home(&self) -> Option<PathBuf> {
            None
        }
        fn gh_auth_token(&self) -> Option<String> {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_env::EmptyEnv;
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Demo {
        count: u32,
        port: Option<u16>,
        stall: i64,
        names: Vec<String>,
        flag: bool,
        model: Option<String>,
        secret: Option<Secret>,
    }

    struct OneVar;

    impl ConfigEnv for OneVar {
        fn var(&self, name: &str) -> Option<String> {
            (name == "SET").then(|| " from-env ".into())
        }
        fn home(&self) -> Option<PathBuf> {
            None
        }
        fn gh_auth_token(&self) -> Option<String> {
            None
        }
    }

    fn read(yaml: &str) -> (Result<Demo, ConfigError>, Vec<String>) {
        let m: Mapping = serde_yaml::from_str(yaml).unwrap();
        let fm = FrontMatter::new(&m, &OneVar, Path::new("/"));
        // `codex.model` is one of the FROM_ENV keys.
        let demo = fm.section("codex").and_then(|s| s.read::<Demo>());
        (demo, fm.unknown_keys())
    }

    #[test]
    fn values_are_read_by_their_type_and_unset_keys_keep_the_default() {
        let (d, w) = read(
            "codex: {count: ' 7 ', port: 0, stall: '-5', names: [' a ', 2], flag: true, model: $SET, secret: ~}",
        );
        let d = d.unwrap();
        assert_eq!((d.count, d.port, d.stall, d.flag), (7, Some(0), -5, true));
        assert_eq!(d.names, ["a", "2"]);
        assert_eq!(d.model.as_deref(), Some("from-env"), "trimmed");
        assert_eq!(d.secret, None, "null is unset");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(read("codex:").0.unwrap(), Demo::default());
        assert_eq!(read("codex: {model: $UNSET}").0.unwrap().model, None);
        assert_eq!(read("codex: {model: '  '}").0.unwrap().model, None);
    }

    #[test]
    fn errors_name_the_key_and_the_value_but_never_a_secret() {
        for (yaml, want) in [
            ("count: 0", "codex.count must be a positive integer, got 0"),
            (
                "count: 4294967296",
                "codex.count must be a positive integer, got 4294967296",
            ),
            (
                "port: 65536",
                "codex.port must be an integer from 0 to 65535, got 65536",
            ),
            ("stall: x", "codex.stall must be an integer, got \"x\""),
            (
                "names: [a, [b]]",
                "codex.names must be a list of strings, got an entry a list",
            ),
            (
                "names: a",
                "codex.names must be a list of strings, got \"a\"",
            ),
            (
                "flag: yes-please",
                "codex.flag must be true or false, got \"yes-please\"",
            ),
            ("model: 5", "codex.model must be a string, got 5"),
            (
                "secret: 12345",
                "codex.secret must be a string (a literal or $VAR_NAME)",
            ),
        ] {
            let e = read(&format!("codex: {{{yaml}}}")).0.unwrap_err();
            assert_eq!((e.class, e.message.as_str()), ("invalid_config", want));
        }
        let e = read("codex: [a]").0.unwrap_err();
        assert_eq!(e.message, "codex must be a map of settings, got a list");
    }

    #[test]
    fn unknown_keys_are_warned_with_a_hint_from_the_same_section() {
        let (_, w) = read("codex: {cont: 1, flag: true}\ncodx: {}\n7: x\nother: {count: 1}");
        assert_eq!(
            w,
            [
                "unknown config key `codex.cont` is ignored; did you mean `codex.count`?",
                "unknown config key `codx` is ignored; did you mean `codex`?",
                "ignoring non-string top-level key 7",
                "unknown config key `other` is ignored",
            ]
        );
        let m: Mapping = serde_yaml::from_str("tracker: {kind: x, owner: o}").unwrap();
        let fm = FrontMatter::new(&m, &EmptyEnv, Path::new("/"));
        let s = fm.section("tracker").unwrap();
        let _: Demo = s.read_keys(Some(&["flag"])).unwrap();
        assert_eq!(
            s.get::<Option<String>>("kind").unwrap().as_deref(),
            Some("x")
        );
        let w = fm.unknown_keys();
        assert_eq!(w, ["unknown config key `tracker.owner` is ignored"]);
    }
}
