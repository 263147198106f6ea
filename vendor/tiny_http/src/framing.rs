//! BATON PATCH 4: strict request-head syntax and message framing (RFC 9112 §2.2, §5, §6).
//!
//! Upstream trimmed every header line (hiding obs-fold continuations), kept a bare LF or other
//! control bytes inside values, let `Transfer-Encoding` silently win over `Content-Length`,
//! took the first of several `Content-Length`s, ignored an unparsable one (reading the body as
//! the next request) and applied chunked decoding to any `Transfer-Encoding` value. Each of
//! these lets a front proxy and this server disagree on where a request ends (request
//! smuggling). Here every such head is refused; the caller answers 400 and closes.

use ascii::AsciiString;

use crate::common::{HTTPVersion, Header, HeaderField};

/// How the body of a request is delimited, once the head has been validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Neither `Content-Length` nor `Transfer-Encoding`: no body.
    Empty,
    /// Exactly one valid `Content-Length`.
    Length(usize),
    /// `Transfer-Encoding: chunked` alone (HTTP/1.1 only).
    Chunked,
}

/// RFC 9110 `tchar`: the bytes allowed in a header name (and a method).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Control bytes other than HTAB (including DEL): never valid in a request line or value.
fn is_ctl(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

/// True if a request line carries no control byte (HTAB included: a request line is
/// separated by single spaces only).
pub(crate) fn request_line_ok(line: &str) -> bool {
    !line.bytes().any(|b| is_ctl(b) || b == b'\t')
}

/// Parses one header line strictly: `token ":" OWS value OWS`.
///
/// Refused: a line starting with whitespace (obs-fold or leading junk), whitespace or any
/// non-token byte in the name (`Transfer-Encoding : chunked`), control bytes in the value
/// (a bare CR or LF that another parser would take as a line end), and HTAB around the value
/// of a framing header (`Transfer-Encoding:\tchunked`), a classic obfuscation.
pub(crate) fn parse_header_line(line: &str) -> Result<Header, ()> {
    let colon = line.find(':').ok_or(())?;
    let (name, rest) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.bytes().all(is_tchar) {
        return Err(());
    }
    let value = rest.trim_matches(|c| c == ' ' || c == '\t');
    if value.bytes().any(is_ctl) {
        return Err(());
    }
    let framing_header = name.eq_ignore_ascii_case("Content-Length")
        || name.eq_ignore_ascii_case("Transfer-Encoding");
    if framing_header && rest.contains('\t') {
        return Err(());
    }
    Ok(Header {
        field: HeaderField::from_bytes(name).map_err(|_| ())?,
        value: AsciiString::from_ascii(value).map_err(|_| ())?,
    })
}

/// Decides the framing of a request, refusing every ambiguous combination: both
/// `Content-Length` and `Transfer-Encoding`; more than one of either (even if equal); a
/// `Content-Length` that is not plain digits or overflows; a `Transfer-Encoding` other than
/// exactly `chunked` (case-insensitive; no lists such as `chunked, identity`); and any
/// `Transfer-Encoding` on HTTP/1.0 (RFC 9112 §6.1: its framing is faulty).
pub(crate) fn request_framing(headers: &[Header], version: &HTTPVersion) -> Result<Framing, ()> {
    let lengths: Vec<&Header> = headers
        .iter()
        .filter(|h| h.field.equiv("Content-Length"))
        .collect();
    let codings: Vec<&Header> = headers
        .iter()
        .filter(|h| h.field.equiv("Transfer-Encoding"))
        .collect();
    match (lengths.as_slice(), codings.as_slice()) {
        ([], []) => Ok(Framing::Empty),
        ([length], []) => {
            let digits = length.value.as_str();
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(());
            }
            digits.parse::<usize>().map(Framing::Length).map_err(|_| ())
        }
        ([], [coding]) => {
            let chunked = coding.value.as_str().eq_ignore_ascii_case("chunked");
            if chunked && *version >= HTTPVersion(1, 1) {
                Ok(Framing::Chunked)
            } else {
                Err(())
            }
        }
        _ => Err(()),
    }
}

/// BATON PATCH 9: the longest request head read ahead; a longer one is handed to the parser as
/// it is (which refuses it: a line over 8 KiB or more than 100 headers).
pub(crate) const MAX_HEAD_BYTES: usize = 32 * 1024;

/// BATON PATCH 9: whether `buf` starts with a whole request: its head and the body its framing
/// delimits. A `Content-Length` over `max_body` is not waited for (the application refuses it
/// unread), nor a chunked body past twice that; a head the strict parser refuses counts as
/// whole, so that it is answered at once.
pub(crate) fn whole_request(buf: &[u8], max_body: usize) -> bool {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return buf.len() >= MAX_HEAD_BYTES;
    };
    let mut lines = buf[..end + 2].split(|&b| b == b'\n');
    let version = match lines.next() {
        Some(line) if line.ends_with(b" HTTP/1.0\r") => HTTPVersion(1, 0),
        _ => HTTPVersion(1, 1),
    };
    let headers: Result<Vec<Header>, ()> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let l = l.strip_suffix(b"\r").ok_or(())?;
            parse_header_line(std::str::from_utf8(l).map_err(drop)?)
        })
        .collect();
    let body = &buf[end + 4..];
    match headers.and_then(|h| request_framing(&h, &version)) {
        Ok(Framing::Length(n)) => n > max_body || body.len() >= n,
        Ok(Framing::Chunked) => body.len() > max_body.saturating_mul(2) || chunked_done(body),
        Ok(Framing::Empty) | Err(()) => true,
    }
}

/// Whether the chunked body at the start of `b` has ended (a malformed one counts as ended:
/// the decoder reports it).
fn chunked_done(mut b: &[u8]) -> bool {
    loop {
        let Some(eol) = find(b, b"\r\n") else {
            return false;
        };
        let size = std::str::from_utf8(&b[..eol]).ok().and_then(|line| {
            let size = line.split(';').next()?.trim();
            usize::from_str_radix(size, 16).ok()
        });
        b = &b[eol + 2..];
        match size.map(|s| s.checked_add(2)) {
            Some(Some(2)) => return b.starts_with(b"\r\n") || find(b, b"\r\n\r\n").is_some(),
            Some(Some(n)) if n <= b.len() => b = &b[n..],
            Some(Some(_)) => return false,
            None | Some(None) => return true,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing(lines: &[&str], version: HTTPVersion) -> Result<Framing, ()> {
        let headers: Result<Vec<Header>, ()> = lines.iter().map(|l| parse_header_line(l)).collect();
        request_framing(&headers?, &version)
    }

    fn v11(lines: &[&str]) -> Result<Framing, ()> {
        framing(lines, HTTPVersion(1, 1))
    }

    #[test]
    fn plain_framings_are_accepted() {
        assert_eq!(v11(&["Host: x"]), Ok(Framing::Empty));
        assert_eq!(v11(&["Content-Length: 12"]), Ok(Framing::Length(12)));
        assert_eq!(v11(&["content-length:0"]), Ok(Framing::Length(0)));
        assert_eq!(v11(&["Transfer-Encoding: chunked"]), Ok(Framing::Chunked));
        assert_eq!(v11(&["transfer-encoding: CHUNKED "]), Ok(Framing::Chunked));
        // OWS around an ordinary value may be a tab.
        assert!(parse_header_line("X-Thing:\tv").is_ok());
    }

    #[test]
    fn ambiguous_framings_are_refused() {
        let bad: &[&[&str]] = &[
            &["Content-Length: 5", "Transfer-Encoding: chunked"],
            &["Transfer-Encoding: chunked", "Content-Length: 5"],
            &["Content-Length: 5", "Content-Length: 5"],
            &["Content-Length: 5, 5"],
            &["Content-Length: +5"],
            &["Content-Length: 0x5"],
            &["Content-Length: 5 5"],
            &["Content-Length: "],
            &["Content-Length: 99999999999999999999999999"],
            &["Transfer-Encoding: chunked, identity"],
            &["Transfer-Encoding: identity"],
            &["Transfer-Encoding: xchunked"],
            &["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"],
            &["Transfer-Encoding : chunked"],
            &["Transfer-Encoding:\tchunked"],
            &["Transfer-Encoding: chunked\t"],
            &[" Transfer-Encoding: chunked"],
            &["Transfer-Encoding: \u{b}chunked"],
            &["X: a\nTransfer-Encoding: chunked"],
            &["X: a\rb"],
            &["Bad Name: v"],
            &[": v"],
            &["no colon"],
        ];
        for lines in bad {
            assert_eq!(v11(lines), Err(()), "{lines:?}");
        }
        assert_eq!(
            framing(&["Transfer-Encoding: chunked"], HTTPVersion(1, 0)),
            Err(())
        );
    }

    #[test]
    fn a_request_is_whole_once_its_framed_body_is_there() {
        let whole = |s: &str| whole_request(s.as_bytes(), 10);
        assert!(!whole("GET / HTTP/1.1\r\nHost: x\r\n"));
        assert!(whole("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(!whole("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcd"));
        assert!(whole("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde"));
        // Over the body cap: handed over at once, to be refused unread.
        assert!(whole("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n"));
        let chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(!whole(&format!("{chunked}3\r\nabc\r\n")));
        assert!(!whole(&format!("{chunked}3;x=1\r\nabc\r\n0\r\n")));
        assert!(whole(&format!("{chunked}3;x=1\r\nabc\r\n0\r\n\r\n")));
        assert!(whole(&format!("{chunked}3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n")));
        assert!(whole(&format!("{chunked}zz\r\n")), "malformed: the decoder says so");
        assert!(whole(&format!("{chunked}{}\r\n", "f".repeat(40))), "overflow");
        // Heads the parser refuses are answered at once, whatever they announce.
        assert!(whole("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"));
        assert!(whole("POST / HTTP/1.1\r\nX: a\nTransfer-Encoding: chunked\r\n\r\n"));
        assert!(whole("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"));
        assert!(!whole_request(&[b'a'; MAX_HEAD_BYTES - 1], 10));
        assert!(whole_request(&[b'a'; MAX_HEAD_BYTES], 10));
    }

    #[test]
    fn request_lines_with_control_bytes_are_refused() {
        assert!(request_line_ok("GET / HTTP/1.1"));
        assert!(!request_line_ok("GET /\t HTTP/1.1"));
        assert!(!request_line_ok("GET /\n HTTP/1.1"));
    }
}
