//! BATON PATCH 5, 9: a bounded pool of connection handlers, replacing upstream's
//! one-thread-per-connection `TaskPool` (10,000 idle connections made 6,130 threads).
//!
//! Accepted connections are *parked* in one queue. At most `max_handlers` threads take turns
//! on them: a handler waits a short slice for what the client sends next (or for a request in
//! flight to release the stream), reads it ahead into the connection's buffer, and puts the
//! connection back until a whole request (head and body) is there. Only then is the request
//! parsed, from memory, and handed on: to the application's threads calling `recv`, or, with
//! [`crate::Server::from_listener_with_handler`], to the application's handler on the same
//! thread (one pool). So an idle or trickling client costs a file descriptor and its buffered
//! bytes, never a thread. A request must arrive whole within `request_timeout` of the accept
//! (or of the previous request finishing), otherwise it is answered `408` and closed. Past
//! `max_connections`, a new connection evicts the longest-idle parked one, so a flood of idle
//! connections cannot lock out a real client.

use std::collections::VecDeque;
use std::io::{Error as IoError, ErrorKind};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::client::{ClientConnection, Readiness};
use crate::util::MessagesQueue;
use crate::{Message, Request};

/// How long a handler waits on one parked connection before moving on to the next.
const POLL_SLICE: Duration = Duration::from_millis(50);
/// A handler with nothing to do for this long exits (the pool grows back on demand).
const HANDLER_IDLE_EXIT: Duration = Duration::from_secs(10);

/// BATON PATCH 9: starts the server's threads (named `tinyhttp-accept` and `tinyhttp-conn`),
/// so that an application can supervise them like its own.
pub type Spawn = fn(&'static str, Box<dyn FnOnce() + Send>) -> std::io::Result<()>;

fn spawn_thread(name: &'static str, f: Box<dyn FnOnce() + Send>) -> std::io::Result<()> {
    thread::Builder::new().name(name.into()).spawn(f).map(drop)
}

/// BATON PATCH 5, 9: bounds on connections, requests and the threads serving them.
///
/// `Server::http` and `Server::new` use [`ConnectionLimits::default`];
/// `Server::http_with_limits` takes other values (e.g. short timeouts in tests).
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Most connection handler threads (default 64); with a handler, they also run it.
    pub max_handlers: usize,
    /// Most open connections held (default 256, two file descriptors each). A new connection
    /// past this evicts the longest-idle one, or is closed at once if none is idle.
    pub max_connections: usize,
    /// Time for a whole request (head and body), counted from the accept or from the end of
    /// the previous request on the connection (default 10 s): idle keep-alive connections
    /// and slow clients are closed after it.
    pub request_timeout: Duration,
    /// Write timeout of each socket for responses (default 30 s, [`crate::SOCKET_TIMEOUT`]).
    pub socket_timeout: Duration,
    /// Largest body read ahead (default 16 MiB). A longer `Content-Length` is handed on
    /// unread (its body reads fail; the application should refuse it by its length). All
    /// connections together hold at most 16 such bodies beyond their heads.
    pub max_body: usize,
    /// How the server starts its threads (default: plain named threads).
    pub spawn: Spawn,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_handlers: 64,
            max_connections: 256,
            request_timeout: Duration::from_secs(10),
            socket_timeout: crate::SOCKET_TIMEOUT,
            max_body: 16 << 20,
            spawn: spawn_thread,
        }
    }
}

/// BATON PATCH 9: where whole requests go.
#[derive(Clone)]
pub(crate) enum Sink {
    /// To the application's threads calling `Server::recv`.
    Queue(Arc<MessagesQueue<Message>>),
    /// To the application's handler, called on the connection handler's thread.
    Handler(Arc<dyn Fn(Request) + Send + Sync>),
}

/// A connection waiting for its next request (or for its request in flight to finish).
struct Parked {
    conn: ClientConnection,
    /// When the connection became idle (accept, or the end of its previous request); `None`
    /// while a request is in flight. The request deadline is `idle_since + request_timeout`.
    idle_since: Option<Instant>,
}

struct State {
    queue: VecDeque<Parked>,
    /// Connections parked or in a handler's hands.
    held: usize,
    handlers: usize,
    idle_handlers: usize,
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    wakeup: Condvar,
    limits: ConnectionLimits,
    sink: Sink,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The pool; `close` (or dropping it) stops the handlers.
pub(crate) struct ConnPool {
    shared: Arc<Shared>,
}

impl ConnPool {
    /// An empty pool delivering requests to `sink`; handlers start on demand.
    pub(crate) fn new(limits: ConnectionLimits, sink: Sink) -> Self {
        let limits = ConnectionLimits {
            max_handlers: limits.max_handlers.max(1),
            max_connections: limits.max_connections.max(1),
            ..limits
        };
        ConnPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    held: 0,
                    handlers: 0,
                    idle_handlers: 0,
                    closed: false,
                }),
                wakeup: Condvar::new(),
                limits,
                sink,
            }),
        }
    }

    /// Parks a newly accepted connection, evicting the longest-idle one when full.
    pub(crate) fn submit(&self, conn: ClientConnection) {
        let evicted;
        {
            let mut st = self.shared.lock();
            if st.closed {
                return;
            }
            evicted = if st.held >= self.shared.limits.max_connections {
                match evict_longest_idle(&mut st.queue) {
                    Some(old) => Some(old),
                    None => {
                        drop(st);
                        log::debug!("connection limit reached; closing a new connection");
                        return; // `conn` dropped: closed at once
                    }
                }
            } else {
                st.held += 1;
                None
            };
            // At the front: a new client has likely sent its request already; one that waits
            // behind hundreds of idle connections would see them polled first.
            st.queue.push_front(Parked {
                conn,
                idle_since: Some(Instant::now()),
            });
            if st.idle_handlers == 0 && st.handlers < self.shared.limits.max_handlers {
                match spawn_handler(self.shared.clone()) {
                    Ok(()) => st.handlers += 1,
                    Err(e) => log::error!("cannot start a connection handler: {}", e),
                }
            }
            self.shared.wakeup.notify_one();
        }
        drop(evicted); // closed outside the lock
    }

    /// Stops the handlers and closes the parked connections.
    pub(crate) fn close(&self) {
        let parked = {
            let mut st = self.shared.lock();
            st.closed = true;
            std::mem::take(&mut st.queue)
        };
        self.shared.wakeup.notify_all();
        // May wait for requests still in flight to release their stream, as upstream did.
        drop(parked);
    }
}

impl Drop for ConnPool {
    fn drop(&mut self) {
        self.close();
    }
}

/// Removes the parked connection idle for longest (none while a request is in flight).
fn evict_longest_idle(queue: &mut VecDeque<Parked>) -> Option<Parked> {
    let oldest = queue
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.idle_since.map(|t| (t, i)))
        .min()?;
    queue.remove(oldest.1)
}

fn spawn_handler(shared: Arc<Shared>) -> std::io::Result<()> {
    let spawn = shared.limits.spawn;
    spawn("tinyhttp-conn", Box::new(move || handler_loop(&shared)))
}

/// One handler thread: take a parked connection, serve or re-park it, repeat.
fn handler_loop(shared: &Shared) {
    while let Some(parked) = next_parked(shared) {
        // A panic (in request parsing, say) costs this connection, never the handler.
        let kept = catch_unwind(AssertUnwindSafe(|| serve(shared, parked))).unwrap_or_else(|_| {
            log::error!("connection handler panicked; connection closed");
            None
        });
        let mut st = shared.lock();
        match kept {
            Some(parked) if !st.closed => {
                st.queue.push_back(parked);
                shared.wakeup.notify_one();
            }
            other => {
                st.held = st.held.saturating_sub(1);
                drop(st);
                drop(other); // closed outside the lock
            }
        }
    }
}

/// Waits for a parked connection; `None` when the pool closed or the handler idled out
/// (the handler count is already decremented then).
fn next_parked(shared: &Shared) -> Option<Parked> {
    let mut st = shared.lock();
    loop {
        if st.closed {
            st.handlers -= 1;
            return None;
        }
        if let Some(parked) = st.queue.pop_front() {
            return Some(parked);
        }
        st.idle_handlers += 1;
        let (guard, waited) = shared
            .wakeup
            .wait_timeout(st, HANDLER_IDLE_EXIT)
            .unwrap_or_else(|e| e.into_inner());
        st = guard;
        st.idle_handlers -= 1;
        if waited.timed_out() && st.queue.is_empty() {
            st.handlers -= 1;
            return None;
        }
    }
}

/// Gives one parked connection a slice of attention. Returns it to park again, or `None`
/// to close it.
fn serve(shared: &Shared, mut parked: Parked) -> Option<Parked> {
    match parked.conn.poll(POLL_SLICE, shared.limits.max_body) {
        Readiness::Closed => None,
        Readiness::InFlight => Some(Parked {
            idle_since: None,
            ..parked
        }),
        Readiness::Idle | Readiness::Partial if in_time(shared, &mut parked) => Some(parked),
        Readiness::Idle => None,
        Readiness::Partial => {
            parked.conn.time_out();
            None
        }
        Readiness::Ready => {
            let request = parked.conn.next()?; // None: answered (400, 408, ...) or gone; close
            match &shared.sink {
                Sink::Queue(messages) => messages.push(request.into()),
                Sink::Handler(handle) => handle(request),
            }
            // The last request: dropping the connection now closes the socket once the
            // application is done with the request, without a handler watching it.
            (!parked.conn.is_finished()).then_some(Parked {
                idle_since: None,
                ..parked
            })
        }
    }
}

/// Whether the connection's request deadline is still ahead (its idle time starts now if
/// it was in flight).
fn in_time(shared: &Shared, parked: &mut Parked) -> bool {
    let since = *parked.idle_since.get_or_insert_with(Instant::now);
    since.elapsed() < shared.limits.request_timeout
}

/// Accept errors that say "try again later" rather than "the listener is broken": running
/// out of file descriptors or memory, or a client that left before `accept` returned.
pub(crate) fn accept_error_is_transient(e: &IoError) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    const ENOBUFS: i32 = 105; // Linux numbering
    matches!(
        e.kind(),
        ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionReset
            | ErrorKind::Interrupted
            | ErrorKind::WouldBlock
            | ErrorKind::TimedOut
            | ErrorKind::OutOfMemory
    ) || (cfg!(unix) && matches!(e.raw_os_error(), Some(ENFILE | EMFILE)))
        || (cfg!(target_os = "linux") && e.raw_os_error() == Some(ENOBUFS))
}
