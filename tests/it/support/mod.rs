//! Shared test support: the fakes (GitHub, model APIs, CLIs) and the harness pieces listed in
//! docs/testing.md. Include with `mod support;`.
#![allow(dead_code)]

pub mod agent;
pub mod backlog;
pub mod chromium;
pub mod daemon_proc;
pub mod engine_sim;
pub mod escapes;
pub mod fake_anthropic;
pub mod fake_gemini;
pub mod fake_github;
pub mod fake_openai;
pub mod fake_responses;
pub mod fuzz;
#[cfg(feature = "http")]
pub mod http;
pub mod issues;
pub mod log_capture;
pub mod procs;
pub mod prom;
pub mod real_cli;
#[cfg(feature = "ssh")]
pub mod sshd;
pub mod stand_ins;
pub mod tempdir;
pub mod tool;
