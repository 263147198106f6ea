//! A strict parser for the Prometheus text exposition format 0.0.4 (grammar, HELP/TYPE before
//! samples, one group per family, no duplicate series, histogram buckets), shared by the
//! `/metrics` tests. Include with `#[path = "support/prom.rs"] mod prom;`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------------------------
// A strict parser for the text exposition format 0.0.4.
// ---------------------------------------------------------------------------------------------

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// One metric family with its metadata and samples, in order.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

/// Parse an exposition, or say which line breaks which rule.
pub fn parse(text: &str) -> Result<Vec<Family>, String> {
    if !text.ends_with('\n') {
        return Err("text must end with a newline".into());
    }
    let mut families: Vec<Family> = Vec::new();
    let mut series = BTreeSet::new();
    for (i, line) in text[..text.len() - 1].split('\n').enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", i + 1);
        parse_line(line, &mut families, &mut series).map_err(at)?;
    }
    for f in &families {
        if f.help.is_empty() {
            return Err(format!("{}: no HELP", f.name));
        }
        if f.kind.is_empty() {
            return Err(format!("{}: no TYPE", f.name));
        }
        if f.kind == "histogram" {
            check_histogram(f)?;
        }
    }
    Ok(families)
}

/// One line: a HELP or TYPE comment, or a sample of the current family.
pub fn parse_line(
    line: &str,
    families: &mut Vec<Family>,
    series: &mut BTreeSet<String>,
) -> Result<(), String> {
    if line.is_empty() || line.contains('\r') {
        return Err("empty line or carriage return".into());
    }
    if let Some(rest) = line.strip_prefix("# HELP ") {
        let (name, help) = rest.split_once(' ').ok_or("HELP without text")?;
        let f = open_family(families, name)?;
        if !f.help.is_empty() || !f.samples.is_empty() {
            return Err("second HELP, or HELP after samples".into());
        }
        f.help = unescape(help, false)?;
        if f.help.is_empty() {
            return Err("empty HELP".into());
        }
        return Ok(());
    }
    if let Some(rest) = line.strip_prefix("# TYPE ") {
        let (name, kind) = rest.split_once(' ').ok_or("TYPE without a type")?;
        if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
            return Err(format!("unknown type {kind:?}"));
        }
        let f = open_family(families, name)?;
        if !f.kind.is_empty() || !f.samples.is_empty() {
            return Err("second TYPE, or TYPE after samples".into());
        }
        f.kind = kind.to_string();
        return Ok(());
    }
    if line.starts_with('#') {
        return Err("only HELP and TYPE comments are expected".into());
    }
    let sample = parse_sample(line)?;
    let f = families.last_mut().ok_or("sample before any HELP/TYPE")?;
    if f.kind.is_empty() || f.help.is_empty() {
        return Err("sample before its family's HELP and TYPE".into());
    }
    let base = match f.kind.as_str() {
        "histogram" => ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| sample.name.strip_suffix(s))
            .ok_or("histogram sample without _bucket/_sum/_count")?,
        _ => sample.name.as_str(),
    };
    if base != f.name {
        return Err(format!("sample of another family than {}", f.name));
    }
    if f.kind == "counter" && (sample.value.is_nan() || sample.value < 0.0) {
        return Err("counter must be a non-negative number".into());
    }
    let mut sorted = sample.labels.clone();
    sorted.sort();
    if !series.insert(format!("{}{sorted:?}", sample.name)) {
        return Err("duplicate series".into());
    }
    f.samples.push(sample);
    Ok(())
}

/// The family `name`, started now if this is its first line; a family may not come back after
/// another one started.
pub fn open_family<'a>(
    families: &'a mut Vec<Family>,
    name: &str,
) -> Result<&'a mut Family, String> {
    check_name(name, true)?;
    if !name.starts_with("baton_") {
        return Err("metric without the baton_ prefix".into());
    }
    let current = families.last().is_some_and(|f| f.name == name);
    if !current {
        if families.iter().any(|f| f.name == name) {
            return Err("family split into two groups".into());
        }
        families.push(Family {
            name: name.to_string(),
            kind: String::new(),
            help: String::new(),
            samples: Vec::new(),
        });
    }
    Ok(families.last_mut().unwrap())
}

/// `name{label="value",...} value` (no timestamp: Baton never writes one).
pub fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("sample without value")?;
    let name = &line[..name_end];
    check_name(name, true)?;
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
    if value.contains(' ') {
        return Err("trailing fields (timestamps are not expected)".into());
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value: parse_value(value)?,
    })
}

/// Labels up to and including `}`; returns the rest of the line.
pub fn parse_labels<'a>(
    mut s: &'a str,
    out: &mut Vec<(String, String)>,
) -> Result<&'a str, String> {
    if let Some(rest) = s.strip_prefix('}') {
        return Err(format!("empty label set before {rest:?}"));
    }
    loop {
        let eq = s.find('=').ok_or("label without =")?;
        let name = &s[..eq];
        check_name(name, false)?;
        if out.iter().any(|(n, _)| n == name) {
            return Err(format!("label {name} twice"));
        }
        s = s[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let (raw, rest) = split_quoted(s)?;
        out.push((name.to_string(), unescape(raw, true)?));
        if let Some(rest) = rest.strip_prefix('}') {
            return Ok(rest);
        }
        s = rest
            .strip_prefix(',')
            .ok_or("expected , or } after a label")?;
    }
}

/// Split at the closing unescaped `"`: (raw escaped content, rest after the quote).
pub fn split_quoted(s: &str) -> Result<(&str, &str), String> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '"') => return Ok((&s[..i], &s[i + 1..])),
            _ => {}
        }
    }
    Err("unterminated label value".into())
}

/// Undo escaping: `\\` and `\n` everywhere, `\"` only in label values; nothing else.
pub fn unescape(s: &str, label: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '"' && label {
            return Err("raw quote in label value".into());
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if label => out.push('"'),
            other => return Err(format!("bad escape \\{other:?}")),
        }
    }
    Ok(out)
}

/// `NaN`, `+Inf`, `-Inf` or a decimal float (Go `ParseFloat` syntax without hex or `_`).
pub fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => return Ok(f64::NAN),
        "+Inf" => return Ok(f64::INFINITY),
        "-Inf" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((a, b)) => {
            (digits(a) || a.is_empty()) && (digits(b) || b.is_empty()) && mantissa != "."
        }
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    if !mantissa_ok || !exponent_ok {
        return Err(format!("bad value {s:?}"));
    }
    s.parse::<f64>()
        .map_err(|e| format!("bad value {s:?}: {e}"))
}

/// Metric names `[a-zA-Z_:][a-zA-Z0-9_:]*`; label names `[a-zA-Z_][a-zA-Z0-9_]*`, not `__…`.
pub fn check_name(name: &str, metric: bool) -> Result<(), String> {
    let extra = |c: char| metric && c == ':';
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || extra(c));
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || extra(c));
    if !first_ok || !rest_ok || (!metric && name.starts_with("__")) {
        return Err(format!("bad name {name:?}"));
    }
    Ok(())
}

/// Per label set (without `le`): ascending `le`, non-decreasing counts, a final `+Inf` equal to
/// `_count`, and one `_sum`.
pub fn check_histogram(f: &Family) -> Result<(), String> {
    #[derive(Default)]
    struct Series {
        buckets: Vec<(f64, f64)>,
        sum: Option<f64>,
        count: Option<f64>,
    }
    let mut by_labels: BTreeMap<Vec<(String, String)>, Series> = BTreeMap::new();
    for s in &f.samples {
        let mut labels: Vec<_> = s
            .labels
            .iter()
            .filter(|(n, _)| n != "le")
            .cloned()
            .collect();
        labels.sort();
        let le = s.labels.iter().find(|(n, _)| n == "le");
        let entry = by_labels.entry(labels).or_default();
        let suffix = &s.name[f.name.len()..];
        match (suffix, le) {
            ("_bucket", Some((_, le))) => entry.buckets.push((parse_value(le)?, s.value)),
            ("_sum", None) => entry.sum = Some(s.value),
            ("_count", None) => entry.count = Some(s.value),
            _ => return Err(format!("{}: le on the wrong sample", s.name)),
        }
    }
    for (labels, s) in by_labels {
        let err = |m: &str| Err(format!("{} {labels:?}: {m}", f.name));
        if s.buckets.windows(2).any(|w| w[0].0 >= w[1].0) {
            return err("le not strictly ascending");
        }
        if s.buckets.windows(2).any(|w| w[0].1 > w[1].1) {
            return err("bucket counts decrease");
        }
        let Some(&(last_le, last_count)) = s.buckets.last() else {
            return err("no buckets");
        };
        if last_le != f64::INFINITY {
            return err("last bucket is not +Inf");
        }
        if s.count != Some(last_count) {
            return err("+Inf bucket differs from _count");
        }
        if s.sum.is_none() {
            return err("no _sum");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Helpers over parsed families.
// ---------------------------------------------------------------------------------------------

pub fn family<'a>(fams: &'a [Family], name: &str) -> &'a Family {
    fams.iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no family {name}"))
}

/// The value of the sample `name` with exactly `labels`; panics when there is none.
pub fn value(fams: &[Family], name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(fams, name, labels).unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
}

/// The value of the sample `name` with exactly `labels`, if there is one.
pub fn sample(fams: &[Family], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: Vec<(String, String)> = labels
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    fams.iter()
        .flat_map(|f| &f.samples)
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}
