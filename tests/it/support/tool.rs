//! External tools some tests need: the real agent CLIs, Chromium, graphql-core, systemd-analyze,
//! the `backlog` CLI, sshd. `.ci/setup-*.sh` installs each one and exports the variable naming it.
//! The tests that need one are `#[ignore = "needs …"]`, so a plain `cargo test` lists them as
//! ignored instead of passing silently; `.ci/run` runs them with `--include-ignored`, where a
//! missing tool fails the test with the command that installs it.

use std::path::PathBuf;

/// The path in `var`; panics (naming `setup`) when it is unset or does not exist.
pub fn required(var: &str, setup: &str) -> PathBuf {
    match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                p.exists() || !p.is_absolute(),
                "{var}={} does not exist; source {setup}",
                p.display()
            );
            p
        }
        None => missing(&format!("{var} is unset"), setup),
    }
}

/// Fail a test whose tool is missing.
pub fn missing(why: &str, setup: &str) -> ! {
    panic!("this test needs an external tool: {why}; source {setup} (it installs the tool and exports its variable)")
}
