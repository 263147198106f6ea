//! [`Loose`]: a JSON value reduced to what the stream parsers read, for typed
//! `#[derive(Deserialize)]` views of agent lines that never fail on an unexpected field type and
//! never copy big text. Strings without escapes are borrowed from the line; escaped strings keep
//! at most [`LOOSE_STR_MAX`] bytes; numbers, arrays and objects are skipped without allocating.

use std::borrow::Cow;
use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Most bytes an escaped string keeps (a summary shows at most a few hundred characters).
pub(crate) const LOOSE_STR_MAX: usize = 64 * 1024;

/// A string, a boolean, or anything else (skipped); missing fields are [`Loose::Other`].
#[derive(Debug, Default, PartialEq)]
pub(crate) enum Loose<'a> {
    /// A string (bounded when it had to be unescaped).
    Str(Cow<'a, str>),
    /// A boolean.
    Bool(bool),
    /// Null, a number, an array, an object, or missing.
    #[default]
    Other,
}

impl Loose<'_> {
    /// The string, when it is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Loose::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The boolean, when it is one.
    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Loose::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Loose<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor(std::marker::PhantomData))
    }
}

struct LooseVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for LooseVisitor<'a> {
    type Value = Loose<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        let mut end = v.len().min(LOOSE_STR_MAX);
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        Ok(Loose::Str(Cow::Owned(v[..end].to_owned())))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Loose::Bool(v))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Loose::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Loose::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Loose::Other)
    }
}

/// A derived struct read from a JSON *object* only. (serde_json also fills a derived struct from
/// an array, by position; a `serde_json::Value` reader would not see any field in one.)
#[derive(Debug)]
pub(crate) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

struct ObjectVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = Object<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        T::deserialize(MapAccessDeserializer::new(a)).map(Object)
    }
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
        c: Loose<'a>,
    }

    #[test]
    fn strings_borrow_or_stay_bounded_and_other_types_never_fail() {
        let v: View = serde_json::from_str(r#"{"a":"plain","b":true,"c":[1,{"x":2}],"d":9}"#)
            .expect("parses");
        assert!(matches!(v.a, Loose::Str(Cow::Borrowed("plain"))));
        assert_eq!(v.b.as_bool(), Some(true));
        assert_eq!(v.c, Loose::Other);
        let big = format!(
            r#"{{"a":"\n{}","b":null,"c":1.5}}"#,
            "é".repeat(LOOSE_STR_MAX)
        );
        let v: View = serde_json::from_str(&big).expect("parses");
        let s = v.a.as_str().expect("a string");
        assert!(
            s.len() <= LOOSE_STR_MAX && s.starts_with("\né"),
            "{}",
            s.len()
        );
        assert_eq!((v.b, v.c), (Loose::Other, Loose::Other));
        let v: Object<View> = serde_json::from_str(r#"{"a":"x"}"#).expect("an object");
        assert_eq!(v.0.a.as_str(), Some("x"));
        assert!(
            serde_json::from_str::<View>(r#"["x"]"#).is_ok(),
            "serde fills by position"
        );
        assert!(serde_json::from_str::<Object<View>>(r#"["x"]"#).is_err());
    }
}
