//! Generated-input tests for WORKFLOW.md (issue 12): the loader, the config parser and the prompt
//! templates. Real workflows (WORKFLOW.example.md, fixtures/workflows/*.md) are mutated byte-wise
//! and structurally (the YAML front matter re-typed member by member) and loaded; every outcome
//! is `Ok` or a typed error, never a panic, and a loaded template renders (or fails typed) within
//! a bounded time and size. Seeded: see tests/it/support/fuzz.rs.

use crate::support::fuzz;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton::workflow::config::ConfigEnv;
use baton::workflow::loader::{load_workflow, split_workflow};
use baton::workflow::template::{sample_issue, PromptTemplate};
use serde_json::Value;

const CASES: usize = 10_000;
/// A render of a mutated real template must finish within this (debug build).
const RENDER_LIMIT: Duration = Duration::from_secs(2);

struct Env;

impl ConfigEnv for Env {
    fn var(&self, name: &str) -> Option<String> {
        (name == "GITHUB_TOKEN").then(|| "ghp_fuzz_token_value".to_string())
    }
    fn home(&self) -> Option<PathBuf> {
        Some(PathBuf::from("/home/fuzz"))
    }
    fn gh_auth_token(&self) -> Option<String> {
        None
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = fuzz::corpus_files("fixtures/workflows", |n| n.ends_with(".md"))
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    out.push(std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/WORKFLOW.example.md")).unwrap());
    out
}

/// Re-type random members of the front matter (YAML → JSON value → mutate → YAML).
fn mutate_front_matter(rng: &mut fuzz::Rng, text: &str) -> Option<String> {
    let rest = text.strip_prefix("---\n")?;
    let end = rest.find("\n---")?;
    let (yaml, tail) = rest.split_at(end);
    let mut v: Value = serde_yaml::from_str(yaml).ok()?;
    for _ in 0..1 + rng.below(3) {
        fuzz::mutate_json(rng, &mut v, 0);
    }
    let yaml = serde_yaml::to_string(&v).ok()?;
    Some(format!("---\n{yaml}{tail}"))
}

fn check_render(t: &PromptTemplate, attempt: Option<u32>) {
    let start = Instant::now();
    if let Ok(out) = t.render(&sample_issue(), attempt) {
        assert!(
            out.len() < 16 * 1024 * 1024,
            "render produced {} bytes",
            out.len()
        );
    }
    assert!(
        start.elapsed() < RENDER_LIMIT,
        "render took {:?}",
        start.elapsed()
    );
}

#[test]
fn workflow_loader_and_templates_never_panic_on_generated_files() {
    let corpus = corpus();
    // A memory-backed directory when there is one: 10,000 file writes on a busy disk dominate.
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("baton-fuzz-workflow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("WORKFLOW.md");
    let (mut ok, mut err) = (0usize, 0usize);
    fuzz::run("workflow_loader", CASES, |rng, _| {
        let base = rng.pick(&corpus).clone();
        let text = String::from_utf8_lossy(&base).into_owned();
        let bytes = match rng.below(3) {
            0 => mutate_front_matter(rng, &text)
                .map(String::into_bytes)
                .unwrap_or_else(|| fuzz::mutate(rng, &base, &corpus)),
            _ => fuzz::mutate(rng, &base, &corpus),
        };
        let _ = split_workflow(&path, &String::from_utf8_lossy(&bytes));
        std::fs::write(&path, &bytes).unwrap();
        match load_workflow(&path, &Env) {
            Ok(wf) => {
                ok += 1;
                check_render(&wf.template, rng.one_in(2).then(|| rng.below(5) as u32));
            }
            Err(e) => {
                err += 1;
                let _ = e.to_string();
            }
        }
    });
    println!("workflow_loader: {ok} loaded, {err} typed errors");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn prompt_templates_compile_and_render_bounded() {
    let corpus = corpus();
    let bodies: Vec<String> = corpus
        .iter()
        .filter_map(|b| {
            let t = String::from_utf8_lossy(b).into_owned();
            let rest = t.strip_prefix("---\n")?;
            Some(rest[rest.find("\n---")? + 4..].to_string())
        })
        .collect();
    let raw: Vec<Vec<u8>> = bodies.iter().map(|b| b.as_bytes().to_vec()).collect();
    fuzz::run("prompt_templates", CASES, |rng, _| {
        let base = rng.pick(&bodies).clone();
        let src = fuzz::mutate_str(rng, &base, &raw);
        match PromptTemplate::compile(&src, 1 + rng.below(100)) {
            Ok(t) => {
                let _ = t.validate();
                check_render(&t, rng.one_in(2).then(|| rng.next_u64() as u32));
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    });
}
