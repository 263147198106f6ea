//! The scheduling core (spec §7, §8): plain serializable state (`state`), pure rules (`rules`),
//! the event → decision → action function (`engine`) and the durable
//! projection and restore of the state (`restore`). Nothing in this
//! module performs I/O, spawns threads or reads a clock; `crate::runtime` does that.

pub mod budget;
pub mod engine;
pub mod gate;
pub mod hosts;
pub mod restore;
pub mod rules;
pub mod state;

pub use self::engine::{
    handle, next_deadline, Action, Event, PollSkip, WorkerOutcome, WorkerProgress,
};
pub use self::gate::{CallOutcome, Pace, Plan, RequestGate, TrackerOp};
pub use self::state::{
    Budget, IssueSpend, Millis, OrchestratorState, Orphan, ParkKind, Policy, Resume, StopReason,
    WorkerPhase,
};
