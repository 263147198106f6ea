//! The runtime around the pure core: the main loop and its threads, the workers running the
//! attempt algorithm, and durable state (ARCHITECTURE.md, "Threads", "The main loop").

pub mod clock;
pub mod daemon;
pub mod fds;
pub mod mailbox;
pub mod persist;
pub mod refresh;
pub mod resume;
pub mod threads;
pub mod worker;
