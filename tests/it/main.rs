//! Baton's integration tests, one crate (one binary to build and link).
//! Each module is one topic; shared helpers live in `support/`.

mod support;

mod chaos;
mod claude_parser;
mod claude_process;
mod claude_real_cli;
mod cli;
#[cfg(feature = "codex")]
mod codex_parser;
#[cfg(feature = "codex")]
mod codex_real_cli;
mod conformance_doc;
#[cfg(feature = "http")] // the real binary, observed through its HTTP API
mod conformance_e2e;
mod copilot_parser;
mod copilot_real_cli;
#[cfg(all(feature = "backlog", feature = "http"))]
mod demo;
#[cfg(feature = "http")] // the real binary, observed through its HTTP API
mod durable_daemon;
mod durable_procs;
mod durable_recover;
#[cfg(feature = "ssh")]
mod durable_ssh;
mod durable_state;
#[cfg(feature = "http")] // the real binary, observed through its HTTP API
mod e2e_daemon;
mod features;
mod fuzz_agent_parsers;
#[cfg(feature = "http")]
mod fuzz_http;
mod fuzz_tracker_classify;
mod fuzz_workflow;
#[cfg(feature = "gemini")]
mod gemini_parser;
#[cfg(feature = "gemini")]
mod gemini_real_cli;
#[cfg(feature = "http")]
mod http_api;
#[cfg(feature = "http")]
mod http_browser;
#[cfg(feature = "http")]
mod http_hardening;
#[cfg(feature = "http")]
mod ops_health;
#[cfg(feature = "http")]
mod ops_metrics;
mod ops_systemd;
mod orchestrator_core;
#[cfg(feature = "http")] // observed through control requests and the shared ops state
mod orchestrator_daemon;
mod orchestrator_gate;
mod orchestrator_pace;
mod orchestrator_recovery;
mod orchestrator_worker;
mod orchestrator_workspace;
mod reliability_cleanup;
#[cfg(feature = "http")] // the real binary, observed through its HTTP API
mod reliability_memory;
mod reliability_prompt;
#[cfg(feature = "http")] // the real binary, observed through its HTTP API
mod reliability_refresh;
#[cfg(feature = "http")] // observed through control requests
mod reliability_reload;
mod reliability_reopen;
mod reliability_startup;
mod reliability_template;
mod sandbox;
#[cfg(feature = "ssh")]
mod ssh_daemon;
#[cfg(feature = "ssh")]
mod ssh_host;
#[cfg(feature = "ssh")] // the host pool; without `ssh` every run is local
mod ssh_scheduling;
mod template;
#[cfg(feature = "backlog")]
mod tracker_backlog;
#[cfg(feature = "backlog")]
mod tracker_backlog_daemon;
mod tracker_budget;
mod tracker_check;
mod tracker_github;
mod tracker_graphql_schema;
mod workflow_config;
mod workflow_watch;
