//! The daemon's side of durable state: the state directory locked and `state.json` read before
//! anything else runs ([`acquire`]); the projection written after loop steps on the writer thread;
//! frozen when shutdown begins (the runs shutdown stops stay recorded as interrupted, so the next
//! start resumes them), written once more when it completes.

use std::time::SystemTime;

use crossbeam_channel::{unbounded, Receiver};
use log::{error, info, log, warn, Level};

use crate::durable::{
    check_private, create_private, BackgroundSaver, SaveReport, StateDir, StateWriter, StoreError,
    WriteOutcome, LOCK_LOST,
};
use crate::orchestrator::restore::{self, check_summary, to_json, ParseError};
use crate::orchestrator::{Action, Millis, OrchestratorState, Policy};
use crate::timefmt::unix_millis;
use crate::workflow::config::ServiceConfig;

/// At most one projection of the engine state per this many ms (the loop steps far more often
/// during agent output bursts).
const PROJECT_EVERY_MS: Millis = 100;

/// The locked state directory and what it held at startup.
#[derive(Debug)]
pub struct StateHandle {
    dir: StateDir,
    stored: OrchestratorState,
}

/// Check the workspace root (a local one: created 0700 when missing, refused as
/// `workspace_root_unsafe` when someone else could change it), open and lock `state.dir`
/// (`state_dir_unsafe`, `state_locked`) and read `state.json`: a corrupt file is moved aside and
/// the state starts empty; a newer version is `state_version_unsupported`. Run before
/// anything else at startup.
pub fn acquire(cfg: &ServiceConfig) -> Result<StateHandle, StoreError> {
    if cfg.worker.ssh_hosts.is_empty() {
        let root = &cfg.workspace_root;
        if !root.exists() {
            create_private(root).map_err(|e| StoreError::io("create workspace root", root, e))?;
        }
        check_private("workspace_root_unsafe", root)?;
    }
    let dir = StateDir::open(&cfg.state_dir, true)?;
    dir.lock()?;
    if dir.readable_by_others() {
        warn!(
            "event=state_dir_permissions state_dir={}; others may read it (session ids, workspace paths), consider chmod 700",
            dir.path().display()
        );
    }
    if cfg.state_dir_is_default {
        move_legacy(cfg, &dir)?;
    }
    let stored = read(&dir)?;
    Ok(StateHandle { dir, stored })
}

/// Bring a state file from the old default location (`<workspace.root>/.baton`) over once, if
/// that directory passes the same checks and no older Baton still holds it.
fn move_legacy(cfg: &ServiceConfig, dir: &StateDir) -> Result<(), StoreError> {
    let legacy = cfg.workspace_root.join(".baton");
    if !legacy.join(crate::durable::store::STATE_FILE).exists() || dir.state_file().exists() {
        return Ok(());
    }
    let old = match StateDir::open(&legacy, false) {
        Ok(d) => d,
        Err(e) => {
            warn!("event=state_legacy_ignored error={e}");
            return Ok(());
        }
    };
    if old.old_lock_held() {
        return Err(StoreError::locked(&legacy, None));
    }
    if let Ok(Some(bytes)) = old.read_state() {
        dir.save(&bytes)?;
        let moved = old.move_aside("moved", unix_millis(SystemTime::now()))?;
        info!(
            "event=state_moved from={} to={}",
            moved.display(),
            dir.state_file().display()
        );
    }
    Ok(())
}

fn read(dir: &StateDir) -> Result<OrchestratorState, StoreError> {
    let problem = match dir.read_state() {
        Ok(None) => return Ok(OrchestratorState::default()),
        Ok(Some(bytes)) => match parse(dir, &bytes)? {
            Ok(s) => return Ok(s),
            Err(problem) => problem,
        },
        Err(problem) => problem,
    };
    let moved = dir.move_aside("corrupt", unix_millis(SystemTime::now()))?;
    error!(
        "event=state_corrupt file={} moved_to={} error={problem:?}; starting with an empty state",
        dir.state_file().display(),
        moved.display()
    );
    Ok(OrchestratorState::default())
}

/// `state.json`'s bytes parsed: `Ok(Err(problem))` when corrupt, `Err` when a newer Baton wrote
/// them.
fn parse(dir: &StateDir, bytes: &[u8]) -> Result<Result<OrchestratorState, String>, StoreError> {
    match restore::parse(bytes) {
        Ok(s) => Ok(Ok(s)),
        Err(ParseError::Corrupt(problem)) => Ok(Err(problem)),
        Err(ParseError::Newer(found)) => {
            let (path, newest) = (dir.state_file(), restore::VERSION);
            let message = format!(
                "{} has version {found}; this Baton reads up to {newest}",
                path.display()
            );
            Err(StoreError::new("state_version_unsupported", message))
        }
    }
}

/// Durable state of the running daemon.
pub(crate) struct Persist {
    dir: StateDir,
    writer: StateWriter,
    saver: Option<BackgroundSaver>,
    /// Finished background writes (the main loop selects on it).
    pub(crate) reports: Receiver<SaveReport>,
    projected_at: Option<Millis>,
    /// The state may have changed since the last projection.
    stale: bool,
    /// Shutdown began: the projection no longer changes.
    frozen: bool,
}

impl Persist {
    /// Restore the engine state (with `policy`, at `now`) from what [`acquire`] read, log the
    /// summary and start the writer thread. The startup actions (orphan stops) are the caller's
    /// to run.
    pub(crate) fn start(
        h: StateHandle,
        policy: Policy,
        now: Millis,
    ) -> (Persist, OrchestratorState, Vec<Action>) {
        let (state, actions) = restore::restore(h.stored, policy, now);
        info!(
            "event=state_recovered state_dir={} {}",
            h.dir.path().display(),
            restore::summary(&state)
        );
        let (tx, reports) = unbounded();
        let saver = BackgroundSaver::spawn(h.dir.clone(), tx);
        if let Err(e) = &saver {
            warn!("cannot start the state writer thread; writing on the main loop error={e}");
        }
        let persist = Persist {
            dir: h.dir,
            writer: StateWriter::default(),
            saver: saver.ok(),
            reports,
            projected_at: None,
            stale: true,
            frozen: false,
        };
        (persist, state, actions)
    }

    /// Shutdown begins: project the state as it is now, and never again.
    pub(crate) fn freeze(&mut self, state: &OrchestratorState, now: Millis) {
        if !self.frozen {
            self.project_now(state, now);
            self.frozen = true;
        }
    }

    /// After a loop step: project the state (at most every [`PROJECT_EVERY_MS`]), offer it, and
    /// hand a due write to the writer thread.
    pub(crate) fn after_step(&mut self, state: &OrchestratorState, now: Millis) {
        if !self.frozen {
            self.stale = true;
            if self.projection_due().is_none_or(|t| t <= now) {
                self.project_now(state, now);
            }
        }
        let unsent = match (&self.saver, self.writer.take_due(now)) {
            (Some(s), Some(bytes)) => s.submit(bytes).err(),
            (_, due) => due,
        };
        if let Some(bytes) = unsent {
            let result = self.dir.save(&bytes);
            let outcome = self.writer.finish(bytes, result, now);
            self.log(outcome);
        }
    }

    fn projection_due(&self) -> Option<Millis> {
        Some(self.projected_at?.saturating_add(PROJECT_EVERY_MS))
    }

    fn project_now(&mut self, state: &OrchestratorState, now: Millis) {
        match to_json(state) {
            Ok(bytes) => _ = self.writer.offer(bytes, now),
            Err(e) => error!("event=state_write_failed error={e}; keeping the last written state"),
        }
        self.projected_at = Some(now);
        self.stale = false;
    }

    /// A background write finished; `Some(error)` when the state directory was taken away
    /// (the daemon must stop: another instance may be using its path).
    pub(crate) fn finished(&mut self, report: SaveReport, now: Millis) -> Option<String> {
        let outcome = self.writer.finish(report.bytes, report.result, now);
        self.log(outcome)
    }

    fn log(&self, outcome: WriteOutcome) -> Option<String> {
        let file = self.dir.state_file();
        match outcome {
            WriteOutcome::Written { recovered: true } => {
                info!("event=state_write_recovered file={}", file.display())
            }
            WriteOutcome::Failed { error: e, .. } if e.name() == LOCK_LOST => {
                error!("event=state_lock_lost error={e}; shutting down");
                return Some(e.to_string());
            }
            WriteOutcome::Failed { error, first } => {
                let level = if first { Level::Error } else { Level::Warn };
                log!(
                    level,
                    "event=state_write_failed file={} error={error}; keeping the in-memory state, retrying later",
                    file.display()
                );
            }
            _ => {}
        }
        None
    }

    /// When the next projection or coalesced write is due (a main-loop deadline).
    pub(crate) fn next_due(&self) -> Option<Millis> {
        let project = self.projection_due().filter(|_| self.stale && !self.frozen);
        project.into_iter().chain(self.writer.next_due()).min()
    }

    /// Final write before shutdown completes: stop the writer thread, settle its last report,
    /// write what is pending on this thread.
    pub(crate) fn shutdown(&mut self, now: Millis) {
        if let Some(s) = self.saver.take() {
            s.stop();
        }
        while let Ok(r) = self.reports.try_recv() {
            self.finished(r, now);
        }
        let outcome = self.writer.flush(&self.dir, now);
        self.log(outcome);
    }
}

/// `baton check`'s state lines, `(tag, text)` with tag `ok`/`warn`/`fail`: where the state
/// directory is, whether it is safe, whether a daemon holds its lock, and a summary of
/// `state.json`. Reads only: no lock is taken and nothing is created or moved.
pub fn check_lines(cfg: &ServiceConfig) -> Vec<(&'static str, String)> {
    let (path, shown) = (&cfg.state_dir, cfg.state_dir.display());
    if !path.exists() {
        let missing = format!("state dir {shown} does not exist yet (created at the first start)");
        return vec![("ok", missing)];
    }
    let dir = match StateDir::open(path, false) {
        Ok(d) => d,
        Err(e) => return vec![("fail", e.to_string())],
    };
    let holder = match dir.lock_holder() {
        Some(Some(pid)) => format!("a daemon holds the lock (pid {pid})"),
        Some(None) => "a daemon holds the lock (pid unknown)".into(),
        None => "no daemon holds the lock".into(),
    };
    let file = dir.state_file();
    let stored = match dir.read_state() {
        Ok(None) => ("ok", "stored state: none yet".to_string()),
        Err(e) => ("warn", format!("stored state {}: {e}", file.display())),
        Ok(Some(bytes)) => match parse(&dir, &bytes) {
            Ok(Ok(s)) => ("ok", format!("stored state: {}", check_summary(&s))),
            Err(e) => ("fail", e.to_string()),
            Ok(Err(e)) => (
                "warn",
                format!(
                    "stored state {} is unreadable ({e}); the daemon will move it aside and start fresh",
                    file.display()
                ),
            ),
        },
    };
    vec![("ok", format!("state dir {shown}: {holder}")), stored]
}
