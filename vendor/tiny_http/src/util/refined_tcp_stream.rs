use std::io::Result as IoResult;
use std::io::{Error as IoError, ErrorKind, Read, Write}; // BATON PATCH 6
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering}; // BATON PATCH 7
use std::sync::{Arc, Mutex}; // BATON PATCH 6
use std::time::{Duration, Instant}; // BATON PATCH 6

use crate::connection::Connection;
#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
use crate::ssl::SslStream;

pub(crate) enum Stream {
    Http(Connection),
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    Https(SslStream),
}

impl Clone for Stream {
    fn clone(&self) -> Self {
        match self {
            Stream::Http(tcp_stream) => Stream::Http(tcp_stream.try_clone().unwrap()),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => Stream::Https(ssl_stream.clone()),
        }
    }
}

impl From<Connection> for Stream {
    fn from(tcp_stream: Connection) -> Self {
        Stream::Http(tcp_stream)
    }
}

impl Stream {
    fn secure(&self) -> bool {
        match self {
            Stream::Http(_) => false,
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => true,
        }
    }

    fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.peer_addr(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.peer_addr(),
        }
    }

    /// BATON PATCH 6: set the socket's read timeout (TLS streams keep theirs).
    fn set_read_timeout(&self, timeout: Duration) -> IoResult<()> {
        match self {
            Stream::Http(conn) => conn.set_read_timeout(timeout),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => Ok(()),
        }
    }

    /// BATON PATCH 6: `Some(true)` if bytes are waiting, `Some(false)` at end of stream,
    /// `None` if nothing arrived within the current read timeout.
    fn peek_readable(&self) -> IoResult<Option<bool>> {
        let peeked = match self {
            Stream::Http(conn) => conn.peek_one(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => return Ok(Some(true)),
        };
        match peeked {
            Ok(n) => Ok(Some(n > 0)),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn shutdown(&mut self, how: Shutdown) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.shutdown(how),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.shutdown(how),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.read(buf),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.write(buf),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.write(buf),
        }
    }

    fn flush(&mut self) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.flush(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.flush(),
        }
    }
}

/// BATON PATCH 6: a deadline for reading a whole request head, shared by a connection's
/// `ClientConnection` and the read half of its stream. While it is set, every read of the
/// socket waits at most until the deadline (so trickling one byte a second cannot stretch
/// it), and fails with `TimedOut` once it has passed. Cleared, reads use `base` again.
///
/// BATON PATCH 7: it also records that a request body was left unread (`abandon`); from
/// then on the stream reads as ended, so the connection closes instead of parsing the rest
/// of that body as the next request.
#[derive(Debug)]
pub(crate) struct HeadDeadline {
    deadline: Mutex<Option<Instant>>,
    base: Duration,
    abandoned: AtomicBool,
}

impl HeadDeadline {
    /// BATON PATCH 7: no further request may be read from this connection.
    pub(crate) fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
    }

    /// BATON PATCH 7: true once a request body was left unread.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// Sets (`Some`) or clears (`None`) the deadline.
    pub(crate) fn set(&self, deadline: Option<Instant>) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = deadline;
    }

    fn get(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct RefinedTcpStream {
    stream: Stream,
    close_read: bool,
    close_write: bool,
    /// BATON PATCH 6: the request-head deadline; `timeout` is the read timeout last set on
    /// the socket when it differs from the deadline's `base`.
    head: Arc<HeadDeadline>,
    timeout: Option<Duration>,
}

impl RefinedTcpStream {
    /// BATON PATCH 5: fallible (cloning a socket needs a file descriptor; upstream panicked
    /// when the process ran out of them). `base_timeout` is the socket's read timeout.
    pub(crate) fn new<S>(
        stream: S,
        base_timeout: Duration,
    ) -> IoResult<(RefinedTcpStream, RefinedTcpStream)>
    where
        S: Into<Stream>,
    {
        let stream: Stream = stream.into();

        let read = match &stream {
            Stream::Http(conn) => Stream::Http(conn.try_clone()?),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => stream.clone(),
        };
        let write = stream;
        let head = Arc::new(HeadDeadline {
            deadline: Mutex::new(None),
            base: base_timeout,
            abandoned: AtomicBool::new(false),
        });

        let read = RefinedTcpStream {
            stream: read,
            close_read: true,
            close_write: false,
            head: head.clone(),
            timeout: None,
        };

        let write = RefinedTcpStream {
            stream: write,
            close_read: false,
            close_write: true,
            head,
            timeout: None,
        };

        Ok((read, write))
    }

    /// BATON PATCH 6: the request-head deadline shared with the other half.
    pub(crate) fn head_deadline(&self) -> Arc<HeadDeadline> {
        self.head.clone()
    }

    /// BATON PATCH 5: waits up to `wait` for the client to send something, without consuming
    /// it. `Ok(Some(true))`: bytes are waiting; `Ok(Some(false))`: the client closed;
    /// `Ok(None)`: nothing yet. Only call while no request body is being read.
    pub(crate) fn poll_readable(&mut self, wait: Duration) -> IoResult<Option<bool>> {
        self.set_timeout(wait)?;
        self.stream.peek_readable()
    }

    /// Sets the socket's read timeout unless it is already `wait`.
    fn set_timeout(&mut self, wait: Duration) -> IoResult<()> {
        let current = self.timeout.unwrap_or(self.head.base);
        if current != wait {
            self.stream.set_read_timeout(wait)?;
        }
        self.timeout = Some(wait).filter(|w| *w != self.head.base);
        Ok(())
    }

    /// BATON PATCH 6: applies the head deadline (or restores the base timeout) before a read.
    fn prepare_read(&mut self) -> IoResult<Option<Instant>> {
        match self.head.get() {
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(IoError::new(ErrorKind::TimedOut, "request head deadline"));
                }
                // Never zero: `set_read_timeout` refuses a zero duration.
                let wait = (deadline - now).min(self.head.base).max(Duration::from_millis(1));
                self.set_timeout(wait)?;
                Ok(Some(deadline))
            }
            None => {
                self.set_timeout(self.head.base)?;
                Ok(None)
            }
        }
    }

    /// Returns true if this struct wraps around a secure connection.
    #[inline]
    pub(crate) fn secure(&self) -> bool {
        self.stream.secure()
    }

    pub(crate) fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        self.stream.peer_addr()
    }
}

impl Drop for RefinedTcpStream {
    fn drop(&mut self) {
        if self.close_read {
            self.stream.shutdown(Shutdown::Read).ok();
        }

        if self.close_write {
            self.stream.shutdown(Shutdown::Write).ok();
        }
    }
}

impl Read for RefinedTcpStream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        // BATON PATCH 7: an unread body ended the connection.
        if self.head.is_abandoned() {
            return Ok(0);
        }
        // BATON PATCH 6: bounded by the request-head deadline while one is set.
        let deadline = self.prepare_read()?;
        match self.stream.read(buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock && deadline.is_some() => {
                Err(IoError::new(ErrorKind::TimedOut, "request head deadline"))
            }
            other => other,
        }
    }
}

impl Write for RefinedTcpStream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.stream.flush()
    }
}
