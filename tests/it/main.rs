//! Baton's integration tests, one crate (one binary to build and link).
//! Each module is one topic; shared helpers live in `support/`.

mod support;

mod claude_parser;
mod claude_process;
mod claude_real_cli;
mod cli;
mod copilot_parser;
mod copilot_real_cli;
mod demo;
mod durable_daemon;
mod durable_procs;
mod durable_recover;
mod durable_state;
mod e2e_daemon;
mod fuzz_agent_parsers;
mod fuzz_http;
mod fuzz_tracker_classify;
mod fuzz_workflow;
mod http_api;
mod http_browser;
mod http_hardening;
mod ops_health;
mod ops_metrics;
mod ops_systemd;
mod orchestrator_core;
mod orchestrator_daemon;
mod orchestrator_gate;
mod orchestrator_recovery;
mod orchestrator_worker;
mod orchestrator_workspace;
mod reliability_cleanup;
mod reliability_prompt;
mod reliability_reload;
mod reliability_reopen;
mod reliability_startup;
mod reliability_template;
mod template;
mod tracker_backlog;
mod tracker_backlog_daemon;
mod tracker_budget;
mod tracker_check;
mod tracker_github;
mod tracker_graphql_schema;
mod workflow_config;
mod workflow_watch;
