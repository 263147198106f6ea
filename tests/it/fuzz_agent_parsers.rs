//! Generated-input tests for the agents' stream parsers (issue 12): real transcript lines from
//! fixtures/claude/*.jsonl, fixtures/copilot/*/stdout.txt, the Codex app-server messages in
//! fixtures/codex/*/rpc-transcript.jsonl and fixtures/gemini/*/stdout.jsonl, mutated byte-wise and structurally,
//! fed to the public parsers. Every line must parse to events (or `malformed`) without a panic,
//! and the turn outcome must be computable afterwards. Seeded: see tests/it/support/fuzz.rs.

use crate::support::fuzz;

use baton::agent::claude;
use baton::agent::copilot;
use baton::agent::{ProcessEnd, TurnParser};
use serde_json::Value;

const CASES: usize = 10_000;

fn lines(files: Vec<(String, Vec<u8>)>) -> Vec<String> {
    files
        .iter()
        .flat_map(|(_, b)| {
            String::from_utf8_lossy(b)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|l| !l.trim().is_empty())
        .collect()
}

fn claude_lines() -> Vec<String> {
    lines(fuzz::corpus_files("fixtures/claude", |n| {
        n.ends_with(".jsonl")
    }))
}

fn copilot_lines() -> Vec<String> {
    case_lines("copilot", "stdout.txt")
}

/// The lines of `file` in every case directory of `fixtures/<agent>`.
fn case_lines(agent: &str, file: &str) -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(agent);
    let mut dirs: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs.iter().filter(|d| d.is_dir()) {
        let rel = format!(
            "fixtures/{agent}/{}",
            d.file_name().unwrap().to_string_lossy()
        );
        out.extend(lines(fuzz::corpus_files(&rel, |n| n == file)));
    }
    out
}

/// One generated line: a byte-mutated real line, a structurally mutated one, or raw noise.
fn generate(rng: &mut fuzz::Rng, corpus: &[String], raw: &[Vec<u8>]) -> String {
    let base = rng.pick(corpus);
    match rng.below(3) {
        0 => fuzz::mutate_str(rng, base, raw),
        1 => match serde_json::from_str::<Value>(base) {
            Ok(mut v) => {
                fuzz::mutate_json(rng, &mut v, 0);
                v.to_string()
            }
            Err(_) => fuzz::mutate_str(rng, base, raw),
        },
        _ => {
            let n = rng.below(200);
            String::from_utf8_lossy(&rng.bytes(n)).into_owned()
        }
    }
}

fn end(rng: &mut fuzz::Rng) -> ProcessEnd {
    ProcessEnd {
        exit_code: (!rng.one_in(4)).then(|| rng.below(300) as i32 - 20),
        signal: rng.one_in(5).then(|| rng.below(40) as i32),
        cancelled: rng.one_in(8),
        timed_out: rng.one_in(8),
        stderr_tail: "x\u{1b}[31m\0".repeat(rng.below(4)),
    }
}

#[test]
fn claude_stream_parser_never_panics_on_generated_lines() {
    let corpus = claude_lines();
    assert!(corpus.len() > 20, "fixtures/claude has transcripts");
    let raw: Vec<Vec<u8>> = corpus.iter().map(|l| l.as_bytes().to_vec()).collect();
    let mut parser = claude::StreamParser::new(1, None);
    fuzz::run("claude_stream_parser", CASES, |rng, i| {
        if i % 50 == 0 {
            // A fresh turn now and then (a known session id or none).
            let known = rng.one_in(2).then(|| "sess-1".to_string());
            parser = claude::StreamParser::new(1 + rng.below(5) as u32, known);
        }
        let line = generate(rng, &corpus, &raw);
        for ev in parser.parse_line(&line) {
            assert!(
                ev.summary.chars().count() <= claude::SUMMARY_MAX_CHARS + 16,
                "{line:?}"
            );
        }
        let _ = parser.session();
        if i % 50 == 49 {
            let _ = (parser.outcome(&end(rng)), parser.usage(), parser.cost());
        }
    });
}

#[test]
fn copilot_jsonl_parser_never_panics_on_generated_lines() {
    let corpus = copilot_lines();
    assert!(corpus.len() > 20, "fixtures/copilot has transcripts");
    let raw: Vec<Vec<u8>> = corpus.iter().map(|l| l.as_bytes().to_vec()).collect();
    let mut parser = copilot::StreamParser::new("s-1".into(), 1);
    fuzz::run("copilot_jsonl_parser", CASES, |rng, i| {
        if i % 50 == 0 {
            parser = copilot::StreamParser::new("s-1".into(), 1);
        }
        let line = generate(rng, &corpus, &raw);
        let _ = parser.parse_line(&line);
        if i % 50 == 49 {
            let e = end(rng);
            let _ = (
                parser.unknown_resume(&e),
                parser.outcome(&e),
                parser.usage(),
            );
        }
    });
}

#[test]
#[cfg(feature = "codex")]
fn codex_client_never_panics_on_generated_messages() {
    use baton::agent::codex::Client;
    // The server's side of the captured app-server sessions.
    let corpus: Vec<String> = case_lines("codex", "rpc-transcript.jsonl")
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["dir"] == "recv")
        .map(|v| v["msg"].to_string())
        .collect();
    assert!(
        corpus.len() > 100,
        "fixtures/codex has app-server transcripts"
    );
    let raw: Vec<Vec<u8>> = corpus.iter().map(|l| l.as_bytes().to_vec()).collect();
    let cfg = baton::workflow::config::CodexConfig {
        cli: baton::workflow::config::CliSection::new("codex app-server"),
        approval_policy: "never".into(),
        thread_sandbox: "workspace-write".into(),
        turn_sandbox_policy: None,
        read_timeout_ms: 5000,
    };
    let fresh = |rng: &mut fuzz::Rng| {
        let thread = rng.one_in(2).then(|| "t-1".to_string());
        let mut c = Client::new(&cfg, std::path::Path::new("/ws"), thread, "p", 1);
        c.started(Some(Box::new(std::io::sink())));
        c
    };
    let mut client = fresh(&mut fuzz::Rng::new(1));
    fuzz::run("codex_client", CASES, |rng, i| {
        if i % 50 == 0 {
            client = fresh(rng);
        }
        let line = generate(rng, &corpus, &raw);
        for ev in client.parse_line(&line) {
            assert!(ev.summary.chars().count() <= 201, "{line:?}");
        }
        if i % 50 == 49 {
            let _ = (client.outcome(&end(rng)), client.deadline(), client.usage());
        }
    });
}

#[test]
#[cfg(feature = "gemini")]
fn gemini_stream_parser_never_panics_on_generated_lines() {
    use baton::agent::gemini::StreamParser;
    let corpus = case_lines("gemini", "stdout.jsonl");
    assert!(corpus.len() > 100, "fixtures/gemini has transcripts");
    let raw: Vec<Vec<u8>> = corpus.iter().map(|l| l.as_bytes().to_vec()).collect();
    let mut parser = StreamParser::new("s".into(), 1);
    fuzz::run("gemini_stream_parser", CASES, |rng, i| {
        if i % 50 == 0 {
            parser = StreamParser::new("s".into(), 1);
        }
        let line = generate(rng, &corpus, &raw);
        for ev in parser.parse_line(&line) {
            assert!(ev.summary.chars().count() <= 201, "{line:?}");
        }
        if i % 50 == 49 {
            let _ = (parser.outcome(&end(rng)), parser.usage());
        }
    });
}
