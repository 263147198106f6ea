//! The runtime around the pure core: the daemon main loop (`daemon`), its injected time source
//! (`clock`), worker threads running the attempt algorithm (`worker`, with the first turn of a
//! resumed session in `resume`), each reporting through its run's `mailbox`, durable state
//! (`persist`), the tracker threads that keep GitHub calls off the loop, and the between-turn
//! refresh batches (`refresh`).

pub mod clock;
pub mod daemon;
pub mod fds;
pub mod mailbox;
pub mod persist;
pub mod refresh;
pub mod resume;
pub mod threads;
pub mod worker;
