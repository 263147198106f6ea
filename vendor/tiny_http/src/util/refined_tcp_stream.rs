//! BATON PATCH 10: the TLS variant is gone, so the stream is a plain [`Connection`].

use std::io::Result as IoResult;
use std::io::{Error as IoError, ErrorKind, Read, Write}; // BATON PATCH 9
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering}; // BATON PATCH 7, 9
use std::sync::Arc; // BATON PATCH 7
use std::time::Duration; // BATON PATCH 9

use crate::connection::Connection;
use crate::framing::MAX_HEAD_BYTES; // BATON PATCH 9

/// BATON PATCH 9: the bytes all connections hold read ahead, and their bound. Each connection
/// may buffer [`MAX_HEAD_BYTES`] (a request head) regardless; beyond that, only while the
/// total is under `limit`, so many half-sent bodies cannot pile up unbounded memory.
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
    stream: Connection,
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
    pub(crate) fn new(
        stream: Connection,
        budget: Arc<Budget>,
    ) -> IoResult<(RefinedTcpStream, RefinedTcpStream)> {
        let read = stream.try_clone()?;
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
