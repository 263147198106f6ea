use ascii::AsciiString;

use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{BufWriter, ErrorKind, Read, Write};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering}; // BATON PATCH 7
use std::sync::Arc; // BATON PATCH 7
use std::time::Duration; // BATON PATCH 5

use crate::common::{HTTPVersion, Method, StatusCode};
use crate::framing::{whole_request, MAX_HEAD_BYTES}; // BATON PATCH 9
use crate::util::RefinedTcpStream;
use crate::util::Turn; // BATON PATCH 5
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::{Request, Response};

/// BATON PATCH 3: longest request or header line accepted.
const MAX_LINE_BYTES: usize = 8 * 1024;
/// BATON PATCH 3: most headers accepted in one request.
const MAX_HEADERS: usize = 100;

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: IoResult<Option<SocketAddr>>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order (BATON PATCH 9: no `BufReader`; the stream buffers what it read ahead)
    source: SequentialReaderBuilder<RefinedTcpStream>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<RefinedTcpStream>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    /// BATON PATCH 7: set when a request body was left unread (the connection then ends).
    abandoned: Arc<AtomicBool>,
}

/// BATON PATCH 5, 9: what a connection handler should do with a parked connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// A whole request (head and body) is buffered: read it now, from memory.
    Ready,
    /// Nothing arrived yet (no request in flight).
    Idle,
    /// Part of a request arrived.
    Partial,
    /// A previous request's body reader still holds the stream.
    InFlight,
    /// The client closed, or no further request may come: drop the connection.
    Closed,
}

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    WrongRequestLine,
    WrongHeader(HTTPVersion),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
}

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    pub fn new(
        write_socket: RefinedTcpStream,
        mut read_socket: RefinedTcpStream,
    ) -> ClientConnection {
        let remote_addr = read_socket.peer_addr();
        let abandoned = read_socket.abandoned();

        let mut source = SequentialReaderBuilder::new(read_socket);
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            abandoned,
        }
    }

    /// BATON PATCH 5: true once no further request may be read (`Connection: close`, HTTP/1.0,
    /// a chunked request): the connection can be dropped as soon as its last request is out.
    pub(crate) fn is_finished(&self) -> bool {
        self.no_more_requests
    }

    /// BATON PATCH 5, 9: reads what the client sent, waiting up to `wait` (at most about twice
    /// that), and says whether a whole request is buffered. A body over `max_body` is not
    /// read ahead (the application refuses it from its `Content-Length`).
    pub(crate) fn poll(&mut self, wait: Duration, max_body: usize) -> Readiness {
        let no_more_requests = self.no_more_requests;
        let stream = match self.next_header_source.turn(wait) {
            Turn::Pending => return Readiness::InFlight,
            Turn::Lost => return Readiness::Closed,
            Turn::Mine(stream) => stream,
        };
        // BATON PATCH 7: the rest of an unread body is never a request head.
        if no_more_requests || self.abandoned.load(Ordering::SeqCst) {
            return Readiness::Closed;
        }
        let mut open = true;
        if !whole_request(stream.buffered(), max_body) {
            let cap = max_body.saturating_mul(2).saturating_add(MAX_HEAD_BYTES + 1);
            open = stream.fill(wait, cap).unwrap_or(false);
        }
        match stream.buffered() {
            b if whole_request(b, max_body) => Readiness::Ready,
            _ if !open => Readiness::Closed,
            [] => Readiness::Idle,
            _ => Readiness::Partial,
        }
    }

    /// BATON PATCH 9: the request did not arrive whole in time: `408` and close.
    pub(crate) fn time_out(&mut self) {
        self.refuse(StatusCode(408), HTTPVersion(1, 1));
    }

    /// Answers a request that cannot be read with an empty response that closes the
    /// connection (BATON PATCH 4; BATON PATCH 8: never in a version this server does not
    /// speak).
    fn refuse(&mut self, status: StatusCode, version: HTTPVersion) {
        let writer = self.sink.next().unwrap();
        Response::new_empty(status)
            .with_connection_close()
            .raw_print(writer, http1_version(version), &[], false, None)
            .ok();
    }

    /// Reads the next line from self.next_header_source.
    ///
    /// Reads until `CRLF` is reached. The next read will start
    ///  at the first byte of the new line.
    fn read_next_line(&mut self) -> IoResult<AsciiString> {
        let mut buf = Vec::new();
        let mut prev_byte_was_cr = false;

        loop {
            let byte = self.next_header_source.by_ref().bytes().next();

            let byte = match byte {
                Some(b) => b?,
                None => return Err(IoError::new(ErrorKind::ConnectionAborted, "Unexpected EOF")),
            };

            if byte == b'\n' && prev_byte_was_cr {
                buf.pop(); // removing the '\r'
                return AsciiString::from_ascii(buf)
                    .map_err(|_| IoError::new(ErrorKind::InvalidInput, "Header is not in ASCII"));
            }

            prev_byte_was_cr = byte == b'\r';

            // BATON PATCH 3: a header line may not grow without bound.
            if buf.len() >= MAX_LINE_BYTES {
                return Err(IoError::new(ErrorKind::InvalidInput, "Header line too long"));
            }
            buf.push(byte);
        }
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        let (method, path, version, headers) = {
            // reading the request line
            let (method, path, version) = {
                let line = self.read_next_line().map_err(ReadError::ReadIoError)?;

                // BATON PATCH 4: no control bytes (bare CR, LF, HTAB, NUL) in a request line.
                if !crate::framing::request_line_ok(line.as_str()) {
                    return Err(ReadError::WrongRequestLine);
                }
                parse_request_line(
                    line.as_str().trim(), // TODO: remove this conversion
                )?
            };

            // getting all headers
            let headers = {
                let mut headers = Vec::new();
                loop {
                    let line = self.read_next_line().map_err(ReadError::ReadIoError)?;

                    if line.is_empty() {
                        break;
                    };
                    // BATON PATCH 3: bounded number of headers.
                    if headers.len() >= MAX_HEADERS {
                        return Err(ReadError::ReadIoError(IoError::new(
                            ErrorKind::InvalidInput,
                            "Too many headers",
                        )));
                    }
                    // BATON PATCH 4: strict header syntax (no obs-fold, no whitespace before
                    // the colon, no control bytes), instead of trimming the line.
                    headers.push(match crate::framing::parse_header_line(line.as_str()) {
                        Ok(h) => h,
                        _ => return Err(ReadError::WrongHeader(version)),
                    });
                }

                // BATON PATCH 4: refuse ambiguous framing (CL+TE, duplicate CL, TE other
                // than `chunked`) before anything reads a body.
                if crate::framing::request_framing(&headers, &version).is_err() {
                    return Err(ReadError::WrongHeader(version));
                }

                headers
            };

            (method, path, version, headers)
        };

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            false, // BATON PATCH 10: no HTTPS
            method,
            path,
            version.clone(),
            headers,
            // BATON PATCH 5: `peer_addr` fails when the client has already gone; upstream
            // panicked here (one thread per connection made that harmless).
            self.remote_addr.as_ref().ok().copied().flatten(),
            data_source,
            writer,
            Some(self.abandoned.clone()), // BATON PATCH 7
        )
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
            }
        })?;

        // return the request
        Ok(request)
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests {
            return None;
        }

        loop {
            let rq = match self.read() {
                // We don't know where the next request would start: close.
                Err(ReadError::WrongRequestLine) => {
                    self.refuse(StatusCode(400), HTTPVersion(1, 1));
                    return None;
                }
                Err(ReadError::WrongHeader(ver)) => {
                    self.refuse(StatusCode(400), ver);
                    return None;
                }
                // BATON PATCH 9: a head cut short by its deadline.
                Err(ReadError::ReadIoError(ref err)) if err.kind() == ErrorKind::TimedOut => {
                    self.time_out();
                    return None;
                }
                Err(ReadError::ExpectationFailed(ver)) => {
                    self.refuse(StatusCode(417), ver);
                    return None;
                }
                Err(ReadError::ReadIoError(_)) => return None,

                Ok(rq) => rq,
            };

            // checking HTTP version
            if *rq.http_version() > (1, 1) {
                // BATON PATCH 8: answer through the request's own writer, then close. Upstream
                // took the *next* writer while `rq` still held its own: the sequential writer
                // waited for `rq` to be dropped, which came only after the write, so every
                // `HTTP/2.0` or `HTTP/3.0` request wedged its connection thread for good.
                let mut writer = rq.into_writer();
                let response = Response::from_string(
                    "This server only supports HTTP versions 1.0 and 1.1".to_owned(),
                )
                .with_status_code(StatusCode(505))
                .with_connection_close();
                response
                    .raw_print(&mut writer, HTTPVersion(1, 1), &[], false, None)
                    .ok();
                writer.flush().ok();
                return None;
            }

            // updating the status of the connection
            let connection_header = rq
                .headers()
                .iter()
                .find(|h| h.field.equiv("Connection"))
                .map(|h| h.value.as_str());

            let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

            match lowercase {
                Some(ref val) if val.contains("close") => self.no_more_requests = true,
                Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
                Some(ref val)
                    if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
                {
                    self.no_more_requests = true
                }
                None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
                _ => (),
            };

            // BATON PATCH 4: a chunked request is the last one on its connection. The body
            // decoder is lenient and is not drained when the application leaves it unread,
            // so the bytes after it are never parsed as another request.
            if rq.headers().iter().any(|h| h.field.equiv("Transfer-Encoding")) {
                self.no_more_requests = true;
            }

            // returning the request
            return Some(rq);
        }
    }
}

/// BATON PATCH 8: the version to answer in: the request's, but at most HTTP/1.1 (a reply to
/// an `HTTP/2.0` request line must not claim HTTP/2 framing).
fn http1_version(ver: HTTPVersion) -> HTTPVersion {
    if ver > (1, 1) {
        HTTPVersion(1, 1)
    } else {
        ver
    }
}

/// Parses a "HTTP/1.1" string.
fn parse_http_version(version: &str) -> Result<HTTPVersion, ReadError> {
    let (major, minor) = match version {
        "HTTP/0.9" => (0, 9),
        "HTTP/1.0" => (1, 0),
        "HTTP/1.1" => (1, 1),
        "HTTP/2.0" => (2, 0),
        "HTTP/3.0" => (3, 0),
        _ => return Err(ReadError::WrongRequestLine),
    };

    Ok(HTTPVersion(major, minor))
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
fn parse_request_line(line: &str) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(' ');

    let method = parts.next().and_then(|w| w.parse().ok());
    let path = parts.next().map(ToOwned::to_owned);
    let version = parts.next().and_then(|w| parse_http_version(w).ok());
    // BATON PATCH 4: exactly three parts.
    if parts.next().is_some() {
        return Err(ReadError::WrongRequestLine);
    }

    method
        .and_then(|method| Some((method, path?, version?)))
        .ok_or(ReadError::WrongRequestLine)
}

#[cfg(test)]
mod test {
    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line("GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line("GET /hello").is_err());
        assert!(super::parse_request_line("qsd qsd qsd").is_err());
    }
}
