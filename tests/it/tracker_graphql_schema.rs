//! Every GraphQL document Baton sends validates against GitHub's public schema.
//!
//! The documents are validated as assembled by `queries.rs` (operation + its fragment files),
//! written to `$CARGO_TARGET_TMPDIR/graphql-documents/<OperationName>.graphql`.
//!
//! Uses `scripts/validate_graphql.py` (graphql-core; installed by `.ci/setup-tracker.sh`). The
//! schema is looked up at `../shared/github-graphql/schema.graphql` (CI clones the repo next to
//! `shared/`) and `/work/shared/github-graphql/schema.graphql`, or `$BATON_GITHUB_SCHEMA`. Outside
//! CI a missing schema or validator skips with a printed reason; with `CI=true` it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use baton::tracker::github::queries::ALL;

/// The validator or the schema is missing (the test is ignored unless run with
/// `--include-ignored`).
fn skip_or_fail(reason: &str) -> ! {
    crate::support::tool::missing(reason, ".ci/setup-tracker.sh")
}

fn schema_path() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(p) = std::env::var("BATON_GITHUB_SCHEMA") {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(root.join("../shared/github-graphql/schema.graphql"));
    candidates.push(PathBuf::from("/work/shared/github-graphql/schema.graphql"));
    candidates.into_iter().find(|p| p.is_file())
}

/// GitHub's schema and a Python with graphql-core (`$BATON_PYTHON`, else `python3`); fails the
/// test naming what is missing.
fn schema_and_python() -> (PathBuf, String) {
    let Some(schema) = schema_path() else {
        skip_or_fail("GitHub schema not found (../shared/github-graphql/schema.graphql)");
    };
    let python = std::env::var("BATON_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import graphql"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        skip_or_fail(&format!(
            "{python} with graphql-core is not available (run .ci/setup-tracker.sh)"
        ));
    }
    (schema, python)
}

/// Run `scripts/validate_graphql.py <schema> <documents…>`.
fn validate(python: &str, schema: &Path, documents: &[PathBuf]) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    Command::new(python)
        .arg(root.join("scripts/validate_graphql.py"))
        .arg(schema)
        .args(documents)
        .output()
        .expect("run validate_graphql.py")
}

#[test]
#[ignore = "needs python3 with graphql-core and GitHub's schema (BATON_PYTHON, .ci/setup-tracker.sh)"]
fn every_query_validates_against_github_schema() {
    let (schema, python) = schema_and_python();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("src/tracker/github/queries");
    // Every operation file and every fragment file on disk is used, and vice versa.
    let mut registered: Vec<String> = ALL.iter().map(|q| q.file.to_string()).collect();
    registered.sort();
    assert_eq!(
        graphql_files(&dir),
        registered,
        "queries::ALL and the .graphql files differ"
    );
    let mut used: Vec<String> = ALL
        .iter()
        .flat_map(|q| q.fragments.iter().map(|f| f.to_string()))
        .collect();
    used.sort();
    used.dedup();
    assert_eq!(
        graphql_files(&dir.join("fragments")),
        used,
        "fragment files and the fragments the operations use differ"
    );

    // Validate the assembled documents exactly as sent, one file per operation.
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("graphql-documents");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut paths = Vec::new();
    for q in ALL {
        let path = out_dir.join(format!("{}.graphql", q.name));
        std::fs::write(&path, q.text).unwrap();
        paths.push(path);
    }
    let out = validate(&python, &schema, &paths);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "GraphQL validation failed:\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        ALL.len(),
        "{stdout}"
    );
}

/// The `.graphql` file names directly in `dir`, sorted.
fn graphql_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".graphql"))
        .collect();
    names.sort();
    names
}

#[test]
#[ignore = "needs python3 with graphql-core and GitHub's schema (BATON_PYTHON, .ci/setup-tracker.sh)"]
fn validator_rejects_an_invalid_document() {
    // Guard against a validator that accepts everything.
    let (schema, python) = schema_and_python();
    let bad = std::env::temp_dir().join(format!("baton-bad-{}.graphql", std::process::id()));
    std::fs::write(&bad, "query Bad { viewer { login noSuchField } }").unwrap();
    let out = validate(&python, &schema, std::slice::from_ref(&bad));
    let _ = std::fs::remove_file(&bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("noSuchField"));
}
