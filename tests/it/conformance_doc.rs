//! docs/conformance.md stays true to the code: every test and source file a status row names
//! exists, every row has a known status, and the counts line at the top matches the rows.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

const STATUSES: [&str; 6] = [
    "tested",
    "implemented, untested",
    "partial",
    "missing",
    "documented choice",
    "n/a",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The (status, evidence) cells of every status row (tables of four columns).
fn rows() -> Vec<(String, String)> {
    let doc = fs::read_to_string(root().join("docs/conformance.md")).unwrap();
    doc.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.strip_prefix('|')?.strip_suffix('|')?.split('|').collect();
            let first = cells[0].trim();
            (cells.len() == 4 && first != "§" && !first.starts_with("--"))
                .then(|| (cells[2].trim().to_string(), cells[3].trim().to_string()))
        })
        .collect()
}

/// The files a test path `a::b::name` may be defined in.
fn candidates(path: &str) -> Vec<PathBuf> {
    let parts: Vec<&str> = path.split("::").collect();
    let (dirs, _) = parts.split_at(parts.len() - 1);
    if let Some(bin) = dirs[0].strip_prefix("tests/") {
        return vec![root().join(format!("tests/{bin}.rs"))];
    }
    let unit = dirs.contains(&"tests");
    if !unit && root().join(format!("tests/it/{}.rs", dirs[0])).exists() {
        if dirs.get(1) == Some(&"conformance") {
            let dir = fs::read_dir(root().join("tests/it/conformance")).unwrap();
            return dir.map(|e| e.unwrap().path()).collect();
        }
        return vec![root().join(format!("tests/it/{}.rs", dirs[0]))];
    }
    // Unit tests: `a::b::tests::name` is defined in `src/a/b.rs` (or `src/a/b/mod.rs`).
    let module: Vec<&str> = dirs.iter().copied().filter(|d| *d != "tests").collect();
    let module = module.join("/");
    vec![
        root().join(format!("src/{module}.rs")),
        root().join(format!("src/{module}/mod.rs")),
    ]
}

fn is_test_path(s: &str) -> bool {
    s.contains("::")
        && s.split("::").all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '/')
        })
}

#[test]
fn every_named_test_and_file_exists() {
    let mut broken = Vec::new();
    for (_, evidence) in rows() {
        for token in evidence.split('`').skip(1).step_by(2) {
            if token.starts_with("src/") || token.starts_with("contrib/") {
                if !root().join(token).exists() {
                    broken.push(token.to_string());
                }
            } else if is_test_path(token) {
                let name = token.rsplit("::").next().unwrap();
                let defined = candidates(token).iter().any(|f| {
                    fs::read_to_string(f).is_ok_and(|s| s.contains(&format!("fn {name}(")))
                });
                if !defined {
                    broken.push(token.to_string());
                }
            }
        }
    }
    assert!(broken.is_empty(), "not found: {broken:#?}");
}

#[test]
fn every_row_has_a_status_and_the_counts_line_matches() {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let rows = rows();
    for (status, _) in &rows {
        let known = STATUSES.iter().find(|s| *s == status);
        *counts
            .entry(known.unwrap_or_else(|| panic!("unknown status {status:?}")))
            .or_default() += 1;
    }
    let n = |s: &str| counts.get(s).copied().unwrap_or(0);
    let want = format!(
        "**Counts: {} statements: {} tested, {} implemented but untested, {} partial, {} missing, {} documented choices, {} not applicable.**",
        rows.len(),
        n("tested"),
        n("implemented, untested"),
        n("partial"),
        n("missing"),
        n("documented choice"),
        n("n/a"),
    );
    let doc = fs::read_to_string(root().join("docs/conformance.md")).unwrap();
    let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&want), "the counts line should read: {want}");
}

#[test]
fn a_test_whose_tool_is_missing_fails_instead_of_passing() {
    // Baton §17.8: a skipped test reports as skipped (`#[ignore = "needs …"]`), and a profile that is
    // switched on (`--include-ignored`) fails without its tool, naming the script that installs it.
    let r = std::panic::catch_unwind(|| {
        crate::support::tool::required("BATON_CONFORMANCE_NO_SUCH_TOOL", ".ci/setup-x.sh")
    });
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert!(
        msg.contains("BATON_CONFORMANCE_NO_SUCH_TOOL is unset") && msg.contains(".ci/setup-x.sh"),
        "{msg}"
    );
}
