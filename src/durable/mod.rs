//! Durable state, the files: where `state.json` lives and how it is written ([`store`]: the
//! state directory; [`write_policy`]: when to write, and the writer thread). What it holds and how
//! a restart uses it is the core's business (`orchestrator::restore`).

pub mod store;
pub mod write_policy;

pub use store::{check_private, create_private, unsafe_reason, StateDir, StoreError, LOCK_LOST};
pub use write_policy::{BackgroundSaver, SaveReport, StateWriter, WriteOutcome};
