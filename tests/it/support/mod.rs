//! Shared test support: the fake GitHub GraphQL server and helpers. Include with `mod support;`.
#![allow(dead_code)]

pub mod backlog;
pub mod config_env;
pub mod daemon_proc;
pub mod escapes;
pub mod fake_anthropic;
pub mod fake_github;
pub mod fake_openai;
pub mod fuzz;
pub mod http;
pub mod issues;
pub mod log_capture;
pub mod procs;
pub mod prom;
pub mod sshd;
pub mod tool;
