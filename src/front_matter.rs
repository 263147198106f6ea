//! The one front-matter splitter (WORKFLOW.md and Backlog.md task files) and the bounds every
//! untrusted YAML document passes before the YAML parser sees it.
//!
//! Why the bounds: the YAML scanner keeps one entry per open flow collection (`[`, `{`) and
//! revisits all of them for every token, so its cost is nesting depth × tokens. A 195 KB task file
//! of nested flow collections cost 47 CPU-seconds per board read. [`check_yaml`] refuses, without
//! parsing: more than [`MAX_YAML_BYTES`]; `[`/`{` nested deeper than [`MAX_FLOW_DEPTH`]; and, as
//! the bound that holds whatever quoting hides from that count, more `[`/`{` than
//! `MAX_FLOW_COST / bytes` (which caps depth × tokens at about 70 ms of parsing).

/// The largest YAML document (front matter or `config.yml`) Baton parses.
pub const MAX_YAML_BYTES: usize = 256 * 1024;

/// The deepest nesting of flow collections accepted (real files nest one or two).
pub const MAX_FLOW_DEPTH: usize = 64;

/// Flow openers × bytes: an upper bound of the scanner's depth × tokens work.
const MAX_FLOW_COST: usize = 1 << 26;

/// A document split at its front matter fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrontMatter<'a> {
    /// The YAML between the fences (empty when there is none).
    pub yaml: &'a str,
    /// Everything after the closing fence (the whole text when there is no front matter).
    pub body: &'a str,
    /// The 1-based line of the text where `body` starts.
    pub body_line: usize,
}

/// Split `---\n<yaml>\n---\n<body>` (LF or CRLF, a leading BOM and trailing blanks on a fence
/// ignored). `Ok(None)` when the first line is not a fence; `Err(())` when no line closes it.
#[allow(clippy::result_unit_err)]
pub fn split(text: &str) -> Result<Option<FrontMatter<'_>>, ()> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let is_fence = |l: &str| l.trim_end() == "---";
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next().filter(|l| is_fence(l)) else {
        return Ok(None);
    };
    let start = first.len();
    let mut offset = start;
    for (i, line) in lines.enumerate() {
        if is_fence(line) {
            return Ok(Some(FrontMatter {
                yaml: &text[start..offset],
                body: &text[offset + line.len()..],
                body_line: i + 3,
            }));
        }
        offset += line.len();
    }
    Err(())
}

/// Refuse YAML whose parsing cost is not bounded (see the module doc); the message says which
/// bound and where.
pub fn check_yaml(yaml: &str) -> Result<(), String> {
    if yaml.len() > MAX_YAML_BYTES {
        return Err(format!(
            "{} bytes of YAML, over the {} KiB limit",
            yaml.len(),
            MAX_YAML_BYTES / 1024
        ));
    }
    let (mut depth, mut openers, mut line) = (0usize, 0usize, 1usize);
    for b in yaml.bytes() {
        match b {
            b'\n' => line += 1,
            b'[' | b'{' => {
                depth += 1;
                openers += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(format!(
                        "`[`/`{{` nested deeper than {MAX_FLOW_DEPTH} (line {line} of the YAML)"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if openers.saturating_mul(yaml.len()) > MAX_FLOW_COST {
        return Err(format!(
            "{openers} `[`/`{{` in {} bytes of YAML: too many flow collections to parse in bounded time",
            yaml.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lf_crlf_bom_and_reports_the_body_line() {
        let fm = |yaml, body, body_line| {
            Ok(Some(FrontMatter {
                yaml,
                body,
                body_line,
            }))
        };
        assert_eq!(
            split("---\nid: A-1\n---\nbody\n"),
            fm("id: A-1\n", "body\n", 4)
        );
        assert_eq!(
            split("\u{feff}---\r\nid: A-1\r\n--- \r\nbody"),
            fm("id: A-1\r\n", "body", 4)
        );
        assert_eq!(split("---\n---\n"), fm("", "", 3));
        assert_eq!(split("---\n---"), fm("", "", 3));
        assert_eq!(split("id: A-1\n---\n"), Ok(None));
        assert_eq!(split(""), Ok(None));
        assert_eq!(split("---\nid: A-1\n"), Err(()));
    }

    #[test]
    fn yaml_bounds() {
        assert!(check_yaml("a: [b, {c: [d]}]\nhook: |\n  [ -f x ] && echo ${X}\n").is_ok());
        let deep = format!("a: {}{}", "[".repeat(65), "]".repeat(65));
        let e = check_yaml(&deep).unwrap_err();
        assert!(e.contains("nested deeper than 64 (line 1"), "{e}");
        // Closers hidden in quotes do not make deep nesting cheap: the opener count bounds it.
        let quoted = format!("a: {}", "[ \"]\" ".repeat(20_000));
        let e = check_yaml(&quoted).unwrap_err();
        assert!(e.contains("too many flow collections"), "{e}");
        let big = "a: b\n".repeat(MAX_YAML_BYTES / 5 + 1);
        assert!(check_yaml(&big)
            .unwrap_err()
            .contains("over the 256 KiB limit"));
    }
}
