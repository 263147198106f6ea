//! The scheduling core (spec §7, §8): state, rules, the event → actions function (`engine`) and
//! the durable projection (`restore`). No I/O, threads or clocks here: `crate::runtime` does that.

pub mod budget;
pub mod engine;
pub mod gate;
#[cfg(feature = "ssh")]
pub mod hosts;
#[cfg(not(feature = "ssh"))]
#[path = "no_ssh.rs"]
pub mod hosts;
pub mod restore;
pub mod rules;
pub mod state;

pub use self::engine::{
    handle, next_deadline, Action, Event, PollSkip, WorkerOutcome, WorkerProgress,
};
pub use self::gate::{CallOutcome, Pace, TrackerOp};
pub use self::state::{
    Budget, Millis, OrchestratorState, ParkKind, Policy, Resume, StopReason, WorkerPhase,
};
