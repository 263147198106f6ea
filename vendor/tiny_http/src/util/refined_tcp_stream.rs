use std::io::Result as IoResult;
use std::io::{Error as IoError, ErrorKind, Read, Write}; // BATON PATCH 9
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering}; // BATON PATCH 7, 9
use std::sync::Arc; // BATON PATCH 7
use std::time::Duration; // BATON PATCH 9

use crate::framing::MAX_HEAD_BYTES; // BATON PATCH 9

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

    /// BATON PATCH 9: set the socket's read timeout (TLS streams keep theirs).
    fn set_read_timeout(&self, timeout: Duration) -> IoResult<()> {
        match self {
            Stream::Http(conn) => conn.set_read_timeout(timeout),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => Ok(()),
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

/// BATON PATCH 9: the bytes all connections hold read ahead, and their bound. Each connection
/// may buffer `free_per_connection` bytes (a request head) regardless; beyond that, only while
/// the total is under `limit`, so many half-sent bodies cannot pile up unbounded memory.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicUsize,
    limit: usize,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget {
            used: AtomicUsize::new(0),
            limit,
        })
    }
}

/// BATON PATCH 9: the most one read of the socket takes.
const READ_CHUNK: usize = 16 * 1024;

pub struct RefinedTcpStream {
    stream: Stream,
    close_read: bool,
    close_write: bool,
    /// BATON PATCH 7: set once a request body was left unread; the stream then reads as ended,
    /// so the rest of that body is never parsed as the next request.
    abandoned: Arc<AtomicBool>,
    /// BATON PATCH 9: what [`RefinedTcpStream::fill`] read ahead (`buf[pos..]` not consumed
    /// yet). The read half reads only from here: a request is parsed, and its body read, from
    /// memory, so no application thread ever waits on a slow client.
    buf: Vec<u8>,
    pos: usize,
    budget: Arc<Budget>,
    /// The read timeout last set on the socket.
    timeout: Option<Duration>,
}

impl RefinedTcpStream {
    /// BATON PATCH 5: fallible (cloning a socket needs a file descriptor; upstream panicked
    /// when the process ran out of them). BATON PATCH 9: `budget` bounds what all connections
    /// read ahead.
    pub(crate) fn new<S>(
        stream: S,
        budget: Arc<Budget>,
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
        let abandoned = Arc::new(AtomicBool::new(false));
        let half = |stream, close_read| RefinedTcpStream {
            stream,
            close_read,
            close_write: !close_read,
            abandoned: abandoned.clone(),
            buf: Vec::new(),
            pos: 0,
            budget: budget.clone(),
            timeout: None,
        };
        let read = half(read, true);
        let write = half(stream, false);
        Ok((read, write))
    }

    /// BATON PATCH 7: the flag that ends the connection when a body is left unread.
    pub(crate) fn abandoned(&self) -> Arc<AtomicBool> {
        self.abandoned.clone()
    }

    /// BATON PATCH 9: the bytes read ahead and not consumed yet.
    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// BATON PATCH 9: reads what the client has sent, waiting at most `wait` for it, until at
    /// most `cap` bytes are buffered (fewer when the budget is spent). Returns `false` once the
    /// client has closed its side.
    pub(crate) fn fill(&mut self, wait: Duration, cap: usize) -> IoResult<bool> {
        self.compact();
        if self.timeout != Some(wait) {
            self.stream.set_read_timeout(wait)?;
            self.timeout = Some(wait);
        }
        loop {
            let have = self.buf.len();
            let spare = self.budget.limit.saturating_sub(self.budget.used.load(Ordering::SeqCst));
            let allow = cap
                .saturating_sub(have)
                .min(spare.max(MAX_HEAD_BYTES.saturating_sub(have)))
                .min(READ_CHUNK);
            if allow == 0 {
                return Ok(true);
            }
            self.buf.resize(have + allow, 0);
            let read = self.stream.read(&mut self.buf[have..]);
            let n = *read.as_ref().unwrap_or(&0);
            self.buf.truncate(have + n);
            self.budget.used.fetch_add(n, Ordering::SeqCst);
            match read {
                Ok(0) => return Ok(false),
                Ok(n) if n == allow => continue, // more may be waiting
                Ok(_) => return Ok(true),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(true)
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Drops the consumed bytes (and the memory of an emptied buffer).
    fn compact(&mut self) {
        self.budget.used.fetch_sub(self.pos, Ordering::SeqCst);
        if self.pos == self.buf.len() {
            self.buf = Vec::new();
        } else {
            self.buf.drain(..self.pos);
        }
        self.pos = 0;
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
        // BATON PATCH 9: return the buffered bytes to the budget.
        self.budget.used.fetch_sub(self.buf.len(), Ordering::SeqCst);

        if self.close_read {
            self.stream.shutdown(Shutdown::Read).ok();
        }

        if self.close_write {
            self.stream.shutdown(Shutdown::Write).ok();
        }
    }
}

impl Read for RefinedTcpStream {
    /// BATON PATCH 9: from the read-ahead buffer only; past its end, `TimedOut` (the request
    /// was not whole by its deadline). BATON PATCH 7: nothing once a body was left unread.
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        if self.abandoned.load(Ordering::SeqCst) {
            return Ok(0);
        }
        let rest = &self.buf[self.pos..];
        if rest.is_empty() && !buf.is_empty() {
            return Err(IoError::new(ErrorKind::TimedOut, "request incomplete"));
        }
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
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
