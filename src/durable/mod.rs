//! Durable state, the files: where `state.json` lives and how it is written. What it holds and
//! how a restart uses it is the core's business (`orchestrator::restore`: a serde view of the
//! engine state, and one pure restore function); this layer only moves bytes.
//!
//! * [`store`]: the state directory ([`StateDir`]): Baton's own (ownership and permission
//!   checks up the path), locked with `flock` on the directory itself, every file opened with
//!   `O_NOFOLLOW` and written by rename with fsync; corrupt files moved aside.
//! * [`write_policy`]: when to write (only on change, at most one write per 100 ms, a forced final
//!   write, back-off after a failure); pure and driven by a caller-supplied clock.
//! * [`saver`]: the writer thread, so the fsyncs do not block the main loop.

pub mod saver;
pub mod store;
pub mod write_policy;

pub use saver::{BackgroundSaver, SaveReport};
pub use store::{check_private, unsafe_reason, StateDir, StoreError};
pub use write_policy::{StateWriter, WriteOutcome};
