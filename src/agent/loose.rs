//! Reading untrusted agent JSON: bounded one-line summaries, and lenient typed views for
//! `#[derive(Deserialize)]` structs, where a field of an unexpected type never fails the line, big
//! text is never copied, and numbers are read the way budgets need them. [`Loose`] is a string, a
//! boolean, an object read as `T` or an array; [`Num`] a number. Strings without escapes are
//! borrowed from the line, escaped ones keep at most [`LOOSE_STR_MAX`] bytes; everything a view
//! does not name is skipped without allocating.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::text::truncate_chars;

/// Longest event summary (characters; Copilot's are longer).
pub const SUMMARY_MAX: usize = 200;

/// `v[key]` as a string, when it is one.
pub(crate) fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The tool-call arguments a summary names, in the order it prefers them.
#[derive(Default, serde::Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
pub(crate) struct Input<'a> {
    command: Loose<'a>,
    file_path: Loose<'a>,
    path: Loose<'a>,
    pattern: Loose<'a>,
    url: Loose<'a>,
    description: Loose<'a>,
    prompt: Loose<'a>,
}

impl Input<'_> {
    /// The most telling argument of a tool call (its command, path, pattern, URL…), as one
    /// bounded line; empty when there is none.
    pub(crate) fn detail(&self) -> String {
        let keys = [&self.command, &self.file_path, &self.path, &self.pattern];
        let more = [&self.url, &self.description, &self.prompt];
        first_detail(keys.into_iter().chain(more).map(|v| v.as_str()))
    }
}

/// [`Input::detail`] of an already parsed value (Copilot, Gemini).
pub(crate) fn tool_input_detail(input: &Value) -> String {
    let input = Loose::<Input>::deserialize(input).unwrap_or_default();
    input.as_obj().map(Input::detail).unwrap_or_default()
}

/// The first present value of a tool call's telling arguments, as one bounded line.
pub(crate) fn first_detail<'s>(values: impl IntoIterator<Item = Option<&'s str>>) -> String {
    let first = values.into_iter().flatten().next();
    first.map_or(String::new(), |s| one_line(s, 120))
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

/// Most bytes an escaped string keeps (a summary shows at most a few hundred characters).
pub(crate) const LOOSE_STR_MAX: usize = 64 * 1024;
/// Largest token count taken from an agent (2^53: exact in every JSON reader and in a float metric).
pub(crate) const MAX_COUNT: u64 = 1 << 53;
/// Largest cost in USD taken from an agent: any number of such values still adds up to a finite sum.
pub(crate) const MAX_COST_USD: f64 = 1e9;

/// A string, a boolean, an object read as `T` or an array of `E` (give elements a lenient type
/// such as `Loose`); anything else, and a missing field, is [`Loose::Other`]. With the default
/// `IgnoredAny` (a zero-sized type) an unwanted object or array is skipped without allocating.
#[derive(Debug, Default, PartialEq)]
pub(crate) enum Loose<'a, T = IgnoredAny, E = IgnoredAny> {
    /// Bounded when it had to be unescaped.
    Str(Cow<'a, str>),
    Bool(bool),
    Obj(T),
    Arr(Vec<E>),
    /// Null, a number, or missing.
    #[default]
    Other,
}

/// An array of `E` (see [`Loose`]).
pub(crate) type List<'a, E> = Loose<'a, IgnoredAny, E>;

impl<T, E> Loose<'_, T, E> {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Loose::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Loose::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub(crate) fn as_obj(&self) -> Option<&T> {
        match self {
            Loose::Obj(t) => Some(t),
            _ => None,
        }
    }

    pub(crate) fn as_arr(&self) -> Option<&[E]> {
        match self {
            Loose::Arr(v) => Some(v),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a, T: Deserialize<'de>, E: Deserialize<'de>> Deserialize<'de> for Loose<'a, T, E> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor(PhantomData))
    }
}

struct LooseVisitor<'a, T, E>(PhantomData<(&'a (), T, E)>);

impl<'de: 'a, 'a, T: Deserialize<'de>, E: Deserialize<'de>> Visitor<'de>
    for LooseVisitor<'a, T, E>
{
    type Value = Loose<'a, T, E>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<X>(self, v: &'de str) -> Result<Self::Value, X> {
        Ok(Loose::Str(Cow::Borrowed(v)))
    }

    fn visit_str<X>(self, v: &str) -> Result<Self::Value, X> {
        let mut end = v.len().min(LOOSE_STR_MAX);
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        Ok(Loose::Str(Cow::Owned(v[..end].to_owned())))
    }

    fn visit_bool<X>(self, v: bool) -> Result<Self::Value, X> {
        Ok(Loose::Bool(v))
    }

    fn visit_i64<X>(self, _: i64) -> Result<Self::Value, X> {
        Ok(Loose::Other)
    }

    fn visit_u64<X>(self, _: u64) -> Result<Self::Value, X> {
        Ok(Loose::Other)
    }

    fn visit_f64<X>(self, _: f64) -> Result<Self::Value, X> {
        Ok(Loose::Other)
    }

    fn visit_unit<X>(self) -> Result<Self::Value, X> {
        Ok(Loose::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::new();
        while let Some(e) = a.next_element()? {
            v.push(e);
        }
        Ok(Loose::Arr(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        T::deserialize(MapAccessDeserializer::new(a)).map(Loose::Obj)
    }
}

/// A number an agent reported, kept as its JSON text so that no value fails the line (serde_json
/// rejects `1e400` as a number); read it with the methods, which accept integers, floats and
/// numeric strings and never return a negative, NaN or infinite figure.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Num<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Num<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<&'a RawValue>::deserialize(d).map(Num)
    }
}

impl Num<'_> {
    /// The JSON number's own text (`None` for a string or anything else).
    pub(crate) fn text(&self) -> Option<&str> {
        let raw = self.0?.get();
        raw.starts_with(|c: char| c == '-' || c.is_ascii_digit())
            .then_some(raw)
    }

    /// The value of a number or a numeric string (`±inf` when out of range); NaN is `None`.
    pub(crate) fn value(&self) -> Option<f64> {
        let text = match self.text() {
            Some(n) => Cow::Borrowed(n),
            None => serde_json::from_str::<Cow<str>>(self.0?.get()).ok()?,
        };
        text.trim().parse().ok().filter(|v: &f64| !v.is_nan())
    }

    /// A token count: 0 when absent, negative or not a number, at most [`MAX_COUNT`], fractions cut.
    pub(crate) fn count(&self) -> u64 {
        clamp_count(self.value())
    }

    /// A cost in USD, at most [`MAX_COST_USD`]; `None` when absent, negative or not a number (a
    /// made-up 0 would look like a new session to the spend accounting).
    pub(crate) fn cost(&self) -> Option<f64> {
        self.value()
            .filter(|v| *v >= 0.0)
            .map(|v| v.min(MAX_COST_USD))
    }

    /// A whole number of at most 15 digits (a status code, an exit code).
    pub(crate) fn int(&self) -> Option<i64> {
        self.value()
            .filter(|v| v.fract() == 0.0 && v.abs() < 1e15)
            .map(|v| v as i64)
    }
}

/// [`Num::count`] of a field of an already parsed line (Codex, Gemini): numbers and numeric
/// strings count.
#[cfg(any(feature = "codex", feature = "gemini"))]
pub(crate) fn count(v: Option<&Value>) -> u64 {
    clamp_count(match v {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse().ok().filter(|v: &f64| !v.is_nan()),
        _ => None,
    })
}

fn clamp_count(v: Option<f64>) -> u64 {
    v.map_or(0, |v| v.clamp(0.0, MAX_COUNT as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct View<'a> {
        #[serde(borrow, default)]
        a: Loose<'a>,
        #[serde(borrow, default)]
        b: Loose<'a>,
        #[serde(borrow, default)]
        c: Loose<'a, Inner<'a>>,
        #[serde(borrow, default)]
        l: List<'a, Loose<'a>>,
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Inner<'a> {
        #[serde(borrow, default)]
        x: Loose<'a>,
    }

    #[test]
    fn strings_borrow_or_stay_bounded_and_other_types_never_fail() {
        let v: View =
            serde_json::from_str(r#"{"a":"plain","b":true,"c":[1,{"x":2}],"d":9,"l":{}}"#)
                .expect("parses");
        assert!(matches!(v.a, Loose::Str(Cow::Borrowed("plain"))));
        assert_eq!(v.b.as_bool(), Some(true));
        assert_eq!(v.c, Loose::Arr(vec![IgnoredAny, IgnoredAny]));
        assert_eq!(v.l.as_arr(), None);
        let big = format!(
            r#"{{"a":"\n{}","b":null,"c":{{"x":"y","z":1e400}},"l":["s",2]}}"#,
            "é".repeat(LOOSE_STR_MAX)
        );
        let v: View = serde_json::from_str(&big).expect("parses");
        let s = v.a.as_str().expect("a string");
        assert!(
            s.len() <= LOOSE_STR_MAX && s.starts_with("\né"),
            "{}",
            s.len()
        );
        assert_eq!(v.b, Loose::Other);
        assert_eq!(v.c.as_obj().and_then(|i| i.x.as_str()), Some("y"));
        assert_eq!(v.l.as_arr().map(|l| l.len()), Some(2));
        let top: Loose<View> = serde_json::from_str(r#"["x"]"#).expect("an array");
        assert!(top.as_obj().is_none(), "never filled by position");
    }

    #[derive(serde::Deserialize)]
    struct N<'a> {
        #[serde(borrow)]
        n: Num<'a>,
    }

    /// `(count, cost, int, text)` of `json` read as a [`Num`].
    fn read(json: &str) -> (u64, Option<f64>, Option<i64>, Option<String>) {
        let line = format!(r#"{{"n":{json}}}"#);
        let n = serde_json::from_str::<N>(&line).expect("parses").n;
        (n.count(), n.cost(), n.int(), n.text().map(str::to_owned))
    }

    #[test]
    fn numbers_are_lenient_bounded_and_never_fail_the_line() {
        for (json, count, cost, int) in [
            ("12", 12, Some(12.0), Some(12)),
            ("12.9", 12, Some(12.9), None),
            ("\" 7 \"", 7, Some(7.0), Some(7)),
            ("\"0.25\"", 0, Some(0.25), None),
            ("-5", 0, None, Some(-5)),
            ("1e400", MAX_COUNT, Some(MAX_COST_USD), None),
            ("-1e400", 0, None, None),
            ("\"NaN\"", 0, None, None),
            ("\"inf\"", MAX_COUNT, Some(MAX_COST_USD), None),
            ("18446744073709551616", MAX_COUNT, Some(MAX_COST_USD), None),
            ("\"x\"", 0, None, None),
            ("null", 0, None, None),
            ("[1]", 0, None, None),
            ("{\"a\":1}", 0, None, None),
            ("true", 0, None, None),
        ] {
            let (c, usd, i, _) = read(json);
            assert_eq!((c, usd, i), (count, cost, int), "{json}");
        }
        assert_eq!(read("1.5e3").3.as_deref(), Some("1.5e3"));
        assert_eq!(read("999999999999999").2, Some(999_999_999_999_999));
        assert_eq!(read("1e15").2, None);
        assert_eq!(read("\"3\"").3, None);
        assert_eq!(Num::default().count(), 0);
    }

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
