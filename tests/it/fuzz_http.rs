//! Generated-input tests for the HTTP request path (issue 12): `routes::resolve` with random
//! methods, paths and queries, and raw generated request bytes (mutated real requests, framing
//! tricks, noise) against a live server on the vendored tiny_http. Every reply is a valid HTTP
//! status line or a closed connection, never a panic or a hang. Seeded: tests/it/support/fuzz.rs.

use crate::support::fuzz;
use crate::support::http as http_support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use baton::http::routes::{is_plausible_identifier, resolve};
use baton::workflow::config::Secret;
use http_support::sign;
use http_support::{Fixture, LoopMode};

const CASES: usize = 10_000;
const SECRET: &str = "fuzz-webhook-secret";

const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT", "get", "", " ",
    "GET ", "G\0T", "POST\r\n",
];

const PATHS: &[&str] = &[
    "/",
    "/api/v1/state",
    "/api/v1/refresh",
    "/api/v1/webhooks/github",
    "/api/v1/acme__app-1",
    "/issues/acme__app-1",
    "/issues/",
    "/api/v1/",
    "/api/v1/%2e%2e",
    "/issues/%00",
    "/issues/a%2Fb",
    "//",
    "/api//v1/state",
    "*",
    "http://x/api/v1/state",
    "/issues/acme__app-1/extra",
    "",
    "/%",
    "/%zz",
    "/api/v1/state?x=1#f",
    "/issues/🦀",
    "/api/v1/acme__app-99999999999999999999",
];

#[test]
fn routes_resolve_never_panics() {
    let raw: Vec<Vec<u8>> = PATHS.iter().map(|p| p.as_bytes().to_vec()).collect();
    fuzz::run("routes_resolve", CASES, |rng, _| {
        let method = if rng.one_in(4) {
            let m = *rng.pick(METHODS);
            fuzz::mutate_str(rng, m, &[])
        } else {
            rng.pick(METHODS).to_string()
        };
        let path = *rng.pick(PATHS);
        let mut url = match rng.below(3) {
            0 => path.to_string(),
            1 => fuzz::mutate_str(rng, path, &raw),
            _ => {
                let n = rng.below(64);
                String::from_utf8_lossy(&rng.bytes(n)).into_owned()
            }
        };
        if rng.one_in(3) {
            url.push('?');
            url.push_str(&fuzz::mutate_str(rng, "a=1&b=%ff&c", &raw));
        }
        match resolve(&method, &url) {
            Ok(r) => {
                let _ = (r.allow(), r.takes_body());
            }
            Err(reply) if reply.status == 405 => assert!(!reply.allow.unwrap_or("").is_empty()),
            Err(reply) => assert_eq!(reply.status, 404),
        }
        let _ = is_plausible_identifier(&url);
    });
}

/// Well-formed requests the generator mutates: plain GETs, a refresh, signed webhooks, framing
/// edge cases (chunked, both CL and TE, duplicate CL, keep-alive pipelining).
fn seeds(addr: SocketAddr) -> Vec<Vec<u8>> {
    let body = br#"{"action":"edited"}"#;
    let sig = sign(&Secret::new(SECRET), body);
    let mut hook = format!(
        "POST /api/v1/webhooks/github HTTP/1.1\r\nHost: {addr}\r\nX-GitHub-Event: projects_v2_item\r\nX-Hub-Signature-256: {sig}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    hook.extend_from_slice(body);
    vec![
        format!("GET /api/v1/state HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes(),
        format!("HEAD / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").into_bytes(),
        b"GET /issues/acme__app-1 HTTP/1.0\r\n\r\n".to_vec(),
        format!("POST /api/v1/refresh HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 2\r\n\r\n{{}}").into_bytes(),
        hook,
        format!("POST /api/v1/refresh HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n").into_bytes(),
        b"POST /api/v1/refresh HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /api/v1/state HTTP/1.1\r\n\r\n".to_vec(),
        b"POST /api/v1/refresh HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".to_vec(),
        b"GET /api/v1/state HTTP/1.1\r\nHost: x\r\n\r\nGET /api/v1/acme__app-1 HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        b"GET /api/v1/state HTTP/2.0\r\nHost: x\r\n\r\n".to_vec(),
    ]
}

/// Send `bytes`, half-close, and read until the server closes (bounded).
fn exchange(addr: SocketAddr, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => Ok(out),
        // A reset after the server refused the request is a closed connection.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(out),
        Err(e) => Err(format!("read: {e} after {} bytes", out.len())),
    }
}

/// Every reply in `out` (pipelined replies included) must start with a valid status line.
fn check_reply(out: &[u8], sent: &[u8]) {
    if out.is_empty() {
        return; // closed without a reply
    }
    let text = String::from_utf8_lossy(out);
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let status = parts.next().unwrap_or("");
    assert!(
        version.starts_with("HTTP/1.")
            && status.len() == 3
            && status.parse::<u16>().is_ok_and(|s| (100..600).contains(&s)),
        "bad reply {:?} to {:?}",
        &text[..text.len().min(200)],
        String::from_utf8_lossy(sent)
    );
}

#[test]
fn raw_requests_get_a_valid_status_or_a_closed_connection() {
    let fx = Fixture::start(LoopMode::Answer, Some(SECRET));
    let corpus = seeds(fx.addr);
    let addr = fx.addr;
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    fuzz::run("http_raw_requests", CASES, |rng, _| {
        let bytes = match rng.below(5) {
            0 => rng.pick(&corpus).clone(),
            1 => {
                let n = rng.below(300);
                rng.bytes(n)
            }
            _ => {
                let base = rng.pick(&corpus).clone();
                fuzz::mutate(rng, &base, &corpus)
            }
        };
        match exchange(addr, &bytes) {
            Ok(out) => {
                check_reply(&out, &bytes);
                let status = String::from_utf8_lossy(&out[..out.len().min(12)]).into_owned();
                *statuses
                    .entry(status.get(9..12).unwrap_or("closed").to_string())
                    .or_default() += 1;
            }
            Err(e) => panic!(
                "{e}: the server hung on {:?}",
                String::from_utf8_lossy(&bytes)
            ),
        }
    });
    println!("http_raw_requests replies: {statuses:?}");
    // Still serving after all that.
    let out = exchange(
        addr,
        format!("GET /api/v1/state HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
}

/// Regression (found by the generator above): an `HTTP/2.0` or `HTTP/3.0` request line wedged
/// its connection thread forever (vendor/tiny_http BATON PATCH 8). More such requests than the
/// connection pool holds must each get a `505` at once, and the server must still answer.
#[test]
fn http2_request_lines_get_505_and_never_wedge_the_server() {
    let fx = Fixture::start(LoopMode::Answer, None);
    for i in 0..100 {
        let version = if i % 2 == 0 { "HTTP/2.0" } else { "HTTP/3.0" };
        let req = format!("GET /api/v1/state {version}\r\nHost: x\r\n\r\n");
        let started = std::time::Instant::now();
        let out = exchange(fx.addr, req.as_bytes()).expect("a reply, not a hang");
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 505 "), "{text}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    let out = exchange(fx.addr, b"GET /api/v1/state HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
}
