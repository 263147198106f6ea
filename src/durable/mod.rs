//! Durable state (issue 11): what survives a restart, a crash or a reboot.
//!
//! A standalone layer the daemon drives; it knows nothing about the core's types.
//!
//! * [`schema`]: the versioned `state.json` document ([`StoredState`]), one [`StoredIssue`] per
//!   known issue, with the running agent's process group and session for recovery.
//! * [`store`]: the state directory ([`StateDir`]): mode 0700, crash-safe writes (temp file, fsync,
//!   rename, fsync of the directory), corrupt files moved aside, newer schema versions refused.
//! * [`lock`]: one instance per state directory (`flock` on `<dir>/lock` holding our pid) and a
//!   probe for `baton check` that does not take the lock.
//! * [`write_policy`]: when to write (only on change, at most one write per 100 ms, a forced final
//!   write, back-off after a failure); pure and driven by a caller-supplied clock.
//! * [`saver`]: an optional writer thread, so the fsyncs do not block the main loop.
//! * [`procs`]: process identity (`/proc/<pid>/stat` start time) and stopping an orphaned agent
//!   process group without ever signalling a reused pid.
//! * [`recover`](mod@recover): the pure startup plan from a stored state and the wall clock.
//!
//! Daemon startup order: [`StateDir::open`] → [`StateDir::lock`] → [`StateDir::load`] →
//! [`recover::recover`] → [`procs::stop_orphan_group`] for each planned orphan → first poll.
//! After each core step: project the core state into issues → [`StateWriter::offer`] →
//! [`StateWriter::write_if_due`] (or [`StateWriter::take_due`] → [`BackgroundSaver::submit`],
//! report → [`StateWriter::finish`]); on shutdown [`StateWriter::flush`].

pub mod lock;
pub mod procs;
pub mod recover;
pub mod saver;
pub mod schema;
pub mod store;
pub mod write_policy;

pub use lock::{lock_holder, LockHolder, StateLock};
pub use procs::{group_alive, group_running, leader_start_time, stop_orphan_group, OrphanOutcome};
pub use recover::{
    recover, OrphanToStop, RecoveredCounts, RecoveredParked, RecoveredRetry, RecoveryPlan,
    ResumeInfo,
};
pub use saver::{BackgroundSaver, SaveReport};
pub use schema::{
    StateSummary, StoredIssue, StoredParked, StoredRetry, StoredRetryKind, StoredRun, StoredState,
    StoredTotals, SCHEMA_VERSION,
};
pub use store::{Loaded, StateDir, StoreError};
pub use write_policy::{StateWriter, WriteOutcome, WritePolicy};
