//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;

pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ListenAddr, Listener};
pub use pool::{ConnectionLimits, Spawn}; // BATON PATCH 5, 9
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;

mod client;
mod common;
mod connection;
mod framing; // BATON PATCH 4
mod pool; // BATON PATCH 5
mod request;
mod response;
mod test;
mod util;

/// BATON PATCH 2: read/write timeout applied to every accepted TCP connection.
pub const SOCKET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr()
    listening_addr: ListenAddr,
}

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,
}

// BATON PATCH 10: upstream's HTTPS (`Server::https`, `SslConfig`, the `ssl` module and every
// `ssl-openssl`/`ssl-rustls` branch) is removed; its features were never offered here.
impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Self::http_with_limits(addr, ConnectionLimits::default())
    }

    /// BATON PATCH 5: like [`Server::http`], with other connection limits and timeouts.
    pub fn http_with_limits<A>(
        addr: A,
        limits: ConnectionLimits,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        let listener = ConfigListenAddr::from_socket_addrs(addr)?.bind()?;
        Self::from_listener_with_limits(listener, limits)
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::from_listener(config.addr.bind()?)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        // BATON PATCH 5: the default connection limits.
        Self::from_listener_with_limits(listener, ConnectionLimits::default())
    }

    /// BATON PATCH 5: like [`Server::from_listener`], with other connection limits.
    pub fn from_listener_with_limits<L: Into<Listener>>(
        listener: L,
        limits: ConnectionLimits,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let messages = MessagesQueue::with_capacity(8);
        let sink = pool::Sink::Queue(messages.clone());
        Self::start(listener.into(), limits, messages, sink)
    }

    /// BATON PATCH 9: serves every request with `handler`, called on the connection handler
    /// threads themselves (at most `limits.max_handlers` at once) once the whole request has
    /// arrived; `recv` receives nothing. A listener that fails for good (not a transient
    /// `accept` error) panics the accept thread, for `limits.spawn` to supervise.
    pub fn from_listener_with_handler<L, F>(
        listener: L,
        limits: ConnectionLimits,
        handler: F,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        L: Into<Listener>,
        F: Fn(Request) + Send + Sync + 'static,
    {
        let sink = pool::Sink::Handler(Arc::new(handler));
        Self::start(listener.into(), limits, MessagesQueue::with_capacity(0), sink)
    }

    fn start(
        server: Listener,
        limits: ConnectionLimits,
        messages: Arc<MessagesQueue<Message>>,
        sink: pool::Sink,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        // building the "close" variable
        let close_trigger = Arc::new(AtomicBool::new(false));
        let local_addr = server.local_addr()?;
        log::debug!("Server listening on {}", local_addr);

        // creating a task where server.accept() is continuously called
        // and ClientConnection objects are pushed in the messages queue
        let inside_close_trigger = close_trigger.clone();
        // BATON PATCH 5: a bounded pool of connection handlers instead of upstream's
        // thread per connection; transient accept errors (out of file descriptors, say) no
        // longer end the accept loop, and a failed socket clone drops one connection.
        // BATON PATCH 9: what connections read ahead is bounded (16 bodies beyond heads).
        let socket_timeout = limits.socket_timeout;
        let budget = util::refined_tcp_stream::Budget::new(limits.max_body.saturating_mul(16));
        let spawn = limits.spawn;
        let pool = pool::ConnPool::new(limits, sink.clone());
        spawn(
            "tinyhttp-accept",
            Box::new(move || {
                log::debug!("Running accept thread");
                while !inside_close_trigger.load(Relaxed) {
                    let sock = match server.accept() {
                        Ok((sock, _)) => sock,
                        Err(e) if pool::accept_error_is_transient(&e) => {
                            log::warn!("Transient error accepting a client: {}", e);
                            thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                        Err(e) => {
                            log::error!("Error accepting new client: {}", e);
                            match &sink {
                                pool::Sink::Queue(messages) => messages.push(e.into()),
                                // BATON PATCH 9: a thread death the application supervises.
                                pool::Sink::Handler(_) => panic!("the HTTP listener failed: {}", e),
                            }
                            break;
                        }
                    };
                    // BATON PATCH 2: bound slow or silent clients (responses).
                    sock.set_timeouts(socket_timeout);
                    match util::RefinedTcpStream::new(sock, budget.clone()) {
                        Ok((read, write)) => pool.submit(ClientConnection::new(write, read)),
                        Err(e) => log::warn!("Cannot set up a client connection: {}", e),
                    }
                }
                pool.close();
                log::debug!("Terminating accept thread");
            }),
        )?;

        // result
        Ok(Server {
            messages,
            close: close_trigger,
            listening_addr: local_addr,
        })
    }

    /// Returns an iterator for all the incoming requests.
    ///
    /// The iterator will return `None` if the server socket is shutdown.
    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addr.clone()
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close.store(true, Relaxed);
        // Connect briefly to ourselves to unblock the accept thread
        let maybe_stream = match &self.listening_addr {
            ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
            #[cfg(unix)]
            ListenAddr::Unix(addr) => {
                // TODO: use connect_addr when its stabilized.
                let path = addr.as_pathname().unwrap();
                std::os::unix::net::UnixStream::connect(path).map(Connection::from)
            }
        };
        if let Ok(stream) = maybe_stream {
            let _ = stream.shutdown(Shutdown::Both);
        }

        #[cfg(unix)]
        if let ListenAddr::Unix(addr) = &self.listening_addr {
            if let Some(path) = addr.as_pathname() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
