//! WORKFLOW.md: loading (`loader`), typed config (`config`), prompt templates (`template`) and
//! hot reload (`watch`).

pub mod config;
pub mod loader;
pub mod template;
pub mod watch;
