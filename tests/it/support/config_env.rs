//! A fixed [`ConfigEnv`] for loading workflows in tests: one variable, an optional home, and
//! never a `gh auth token`.

use std::path::PathBuf;

use baton::workflow::config::ConfigEnv;

use super::fake_github::FAKE_TOKEN;

/// An environment holding only `name=value`, with `home` for `~`.
pub struct FixedEnv {
    name: &'static str,
    value: String,
    home: Option<PathBuf>,
}

impl FixedEnv {
    /// Only `name=value`, with `home`.
    pub fn new(name: &'static str, value: &str, home: Option<PathBuf>) -> FixedEnv {
        FixedEnv {
            name,
            value: value.to_string(),
            home,
        }
    }

    /// Only `name`, holding the fake GitHub's token ([`FAKE_TOKEN`]); no home.
    pub fn github_token(name: &'static str) -> FixedEnv {
        FixedEnv::new(name, FAKE_TOKEN, None)
    }
}

impl ConfigEnv for FixedEnv {
    fn var(&self, name: &str) -> Option<String> {
        (name == self.name).then(|| self.value.clone())
    }
    fn home(&self) -> Option<PathBuf> {
        self.home.clone()
    }
    fn gh_auth_token(&self) -> Option<String> {
        None
    }
}
