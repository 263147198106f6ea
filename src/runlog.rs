//! One logging context per run (spec §13.1): while a thread has entered a [`RunLog`], every line it
//! logs carries `issue_id=` and `issue_identifier=`; the formatter (`logging`) appends whichever
//! of the two a message does not name itself, so no line of a run (worker, agent adapter, hooks,
//! session resume) can forget them. The worker thread enters its run's context for its whole life.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::Arc;

thread_local! {
    static RUN: RefCell<Option<RunLog>> = const { RefCell::new(None) };
}

/// The issue a thread works for (see the module docs).
#[derive(Debug, Clone)]
pub struct RunLog(Arc<[(&'static str, String); 2]>);

/// Leaves the entered [`RunLog`] (restoring the one before) when dropped.
#[derive(Debug)]
pub struct RunLogScope(Option<RunLog>);

impl RunLog {
    /// The context of `issue_id` / `issue_identifier` (values quoted when they need it).
    pub fn new(issue_id: &str, issue_identifier: &str) -> Self {
        let v = |s: &str| {
            if !s.is_empty() && s.chars().all(|c| c.is_ascii_graphic() && c != '"') {
                s.to_string()
            } else {
                format!("{s:?}")
            }
        };
        RunLog(Arc::new([
            ("issue_id=", v(issue_id)),
            ("issue_identifier=", v(issue_identifier)),
        ]))
    }

    /// Enter the context on this thread until the returned scope drops.
    pub fn enter(self) -> RunLogScope {
        RunLogScope(RUN.with(|r| r.replace(Some(self))))
    }
}

impl Drop for RunLogScope {
    fn drop(&mut self) {
        let before = self.0.take();
        let _ = RUN.try_with(|r| *r.borrow_mut() = before);
    }
}

/// `msg` plus the fields of the thread's [`RunLog`] that it does not name yet.
pub(crate) fn with_run_fields(msg: &str) -> Cow<'_, str> {
    let Some(ctx) = RUN.try_with(|r| r.borrow().clone()).ok().flatten() else {
        return Cow::Borrowed(msg);
    };
    let has = |key: &str| {
        msg.match_indices(key)
            .any(|(i, _)| i == 0 || msg.as_bytes()[i - 1] == b' ')
    };
    let mut out = Cow::Borrowed(msg);
    for (key, value) in ctx.0.iter() {
        if !has(key) {
            let _ = write!(out.to_mut(), " {key}{value}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_a_run_carry_both_issue_fields_once() {
        assert_eq!(with_run_fields("no run"), "no run");
        let _scope = RunLog::new("I_1", "acme__repo-1").enter();
        assert_eq!(
            with_run_fields("claude turn started issue_identifier=acme__repo-1 turn=1"),
            "claude turn started issue_identifier=acme__repo-1 turn=1 issue_id=I_1"
        );
        assert_eq!(
            with_run_fields("hook failed issue_id=I_1 issue_identifier=acme__repo-1"),
            "hook failed issue_id=I_1 issue_identifier=acme__repo-1"
        );
        {
            let _inner = RunLog::new("odd id", "x").enter();
            assert_eq!(
                with_run_fields("m"),
                "m issue_id=\"odd id\" issue_identifier=x"
            );
        }
        assert_eq!(
            with_run_fields("m"),
            "m issue_id=I_1 issue_identifier=acme__repo-1",
            "the outer context is back"
        );
    }
}
