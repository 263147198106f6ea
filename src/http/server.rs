//! The tiny_http plumbing: one acceptor thread that owns the `tiny_http::Server` (and rebuilds
//! it with backoff when its request stream fails), and a few worker threads that read capped
//! bodies, call [`routes::handle`] and write responses with constant headers only.
//!
//! Both kinds of thread run under [`spawn_supervised`] (the daemon's one policy: a panic that
//! escapes a thread is logged and takes the daemon down with exit 1, so systemd restarts it). A
//! panic inside one request's handler is caught around that request alone and answered by
//! dropping it: a hostile request must not be able to restart the daemon.

use std::io::Read;
use std::net::{SocketAddr, ToSocketAddrs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use tiny_http::{Header, Request, Response, Server, StatusCode};

use super::routes::{self, App, ContentKind, ControlClient, Dispatch, Incoming, Reply};
use super::{html, webhook, HttpOptions};
use crate::runtime::threads::spawn_supervised;
use crate::status::ControlRequest;

/// Unit tests only: the acceptor panics on the next request (a thread death to supervise).
#[cfg(test)]
static PANIC_IN_ACCEPTOR: AtomicBool = AtomicBool::new(false);

/// Worker threads answering requests (a slow snapshot or slow client occupies one).
const WORKERS: usize = 4;
/// Requests waiting for a worker before new ones get 503 `busy`.
const QUEUE: usize = 32;
/// First and largest pause before rebuilding a failed server.
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A running HTTP server. Dropping it shuts the server down.
#[derive(Debug)]
pub struct HttpHandle {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    shutdown: AtomicBool,
    /// The server the acceptor is currently reading from (swapped on rebuild).
    current: Mutex<Option<Arc<Server>>>,
    /// Wakes the acceptor from a backoff pause.
    wake: Sender<()>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("shutdown", &self.shutdown)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn current(&self) -> MutexGuard<'_, Option<Arc<Server>>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl HttpHandle {
    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop accepting requests and wait for the acceptor thread. Workers finish the request
    /// they are on (bounded by the snapshot timeout) and exit on their own.
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Make the current server's request stream end with an error, as a failed `accept()`
    /// would; the acceptor must log it and rebuild the server on the same address.
    #[doc(hidden)]
    pub fn break_request_stream_for_test(&self) {
        if let Some(server) = self.shared.current().as_ref() {
            server.unblock();
        }
    }

    fn stop(&mut self) {
        {
            let current = self.shared.current();
            self.shared.shutdown.store(true, Ordering::SeqCst);
            if let Some(server) = current.as_ref() {
                server.unblock();
            }
        }
        let _ = self.shared.wake.try_send(());
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

impl Drop for HttpHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Bind now (errors are returned, not logged) and start serving on background threads.
pub fn spawn(opts: HttpOptions, control: Sender<ControlRequest>) -> Result<HttpHandle, String> {
    let addr = resolve_bind(&opts.bind, opts.port)?;
    let server = Server::http(addr).map_err(|e| format!("cannot bind {addr}: {e}"))?;
    let local_addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| "bound address is not an IP socket".to_string())?;
    if local_addr.ip().is_loopback() {
        log::info!("http server listening addr={local_addr}");
    } else {
        log::warn!(
            "http server listening addr={local_addr} on a non-loopback address: the dashboard \
             and API have no authentication; anyone who can reach it can read agent output \
             and trigger refreshes"
        );
    }

    let app = Arc::new(App {
        control: ControlClient::new(control, opts.snapshot_timeout),
        webhook_secret: opts.webhook_secret.clone(),
        ops: Arc::clone(&opts.ops),
    });
    let (job_tx, job_rx) = bounded::<Request>(QUEUE);
    for i in 0..WORKERS {
        let rx = job_rx.clone();
        let app = Arc::clone(&app);
        let max = opts.max_body_bytes;
        spawn_supervised(&format!("http-worker-{i}"), move || {
            worker_loop(rx, app, max)
        })
        .map_err(|e| format!("cannot start http worker: {e}"))?;
    }

    let (wake_tx, wake_rx) = bounded(1);
    let shared = Arc::new(Shared {
        shutdown: AtomicBool::new(false),
        current: Mutex::new(None),
        wake: wake_tx,
    });
    let acceptor = {
        let shared = Arc::clone(&shared);
        spawn_supervised("http-accept", move || {
            accept_loop(Arc::new(server), local_addr, shared, job_tx, wake_rx)
        })
        .map_err(|e| format!("cannot start http acceptor: {e}"))?
    };
    Ok(HttpHandle {
        local_addr,
        shared,
        acceptor: Some(acceptor),
    })
}

fn resolve_bind(host: &str, port: u16) -> Result<SocketAddr, String> {
    let host = host.trim().trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve bind host {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("bind host {host:?} resolves to no address"))
}

fn accept_loop(
    first: Arc<Server>,
    addr: SocketAddr,
    shared: Arc<Shared>,
    jobs: Sender<Request>,
    wake: Receiver<()>,
) {
    let mut next = Some(first);
    let mut backoff = BACKOFF_START;
    loop {
        let server = match next.take() {
            Some(s) => s,
            None => match Server::http(addr) {
                Ok(s) => {
                    log::info!("http server rebuilt addr={addr}");
                    Arc::new(s)
                }
                Err(e) => {
                    log::warn!(
                        "http server rebind failed addr={addr} error={e} retry_in_ms={}",
                        backoff.as_millis()
                    );
                    if pause(&wake, &shared, &mut backoff) {
                        return;
                    }
                    continue;
                }
            },
        };
        {
            let mut current = shared.current();
            if shared.shutdown.load(Ordering::SeqCst) {
                return;
            }
            *current = Some(Arc::clone(&server));
        }
        let failure = loop {
            match server.recv() {
                Ok(rq) => {
                    #[cfg(test)]
                    if PANIC_IN_ACCEPTOR.swap(false, Ordering::SeqCst) {
                        panic!("injected panic in the http acceptor");
                    }
                    backoff = BACKOFF_START;
                    dispatch(rq, &jobs);
                }
                Err(e) => break e,
            }
        };
        *shared.current() = None;
        drop(server);
        if shared.shutdown.load(Ordering::SeqCst) {
            log::info!("http server stopped addr={addr}");
            return;
        }
        log::error!(
            "http server request stream failed addr={addr} error={failure} rebuild_in_ms={}",
            backoff.as_millis()
        );
        if pause(&wake, &shared, &mut backoff) {
            return;
        }
    }
}

/// Sleep up to `*backoff`, then double it (capped) for the next failure; true when shutdown was
/// requested meanwhile.
fn pause(wake: &Receiver<()>, shared: &Shared, backoff: &mut Duration) -> bool {
    let _ = wake.recv_timeout(*backoff);
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    shared.shutdown.load(Ordering::SeqCst)
}

fn dispatch(rq: Request, jobs: &Sender<Request>) {
    match jobs.try_send(rq) {
        Ok(()) => {}
        Err(TrySendError::Full(rq)) | Err(TrySendError::Disconnected(rq)) => {
            log::warn!("http server busy; rejecting request");
            respond(
                rq,
                Reply::error(503, "busy", "too many requests in flight; retry shortly"),
            );
        }
    }
}

fn worker_loop(jobs: Receiver<Request>, app: Arc<App>, max_body: usize) {
    for rq in jobs.iter() {
        // A panic (ours or tiny_http's) costs one request, never the worker.
        if catch_unwind(AssertUnwindSafe(|| handle_request(rq, &app, max_body))).is_err() {
            log::error!("http request handler panicked");
        }
    }
}

fn handle_request(mut rq: Request, app: &App, max_body: usize) {
    let started = Instant::now();
    let method = rq.method().as_str().to_string();
    let url: String = rq.url().chars().take(200).collect();
    let reply = match routes::resolve(&method, rq.url()) {
        Dispatch::NotFound => Reply::not_found(),
        Dispatch::MethodNotAllowed(allow) => Reply::method_not_allowed(allow),
        Dispatch::Route(route) => {
            let body = if route.takes_body() {
                match read_body(&mut rq, max_body) {
                    Ok(b) => b,
                    Err(reply) => {
                        log_request(&method, &url, reply.status, started);
                        respond(rq, reply);
                        return;
                    }
                }
            } else {
                Vec::new()
            };
            let incoming = Incoming {
                signature: header(&rq, webhook::SIGNATURE_HEADER),
                github_event: header(&rq, webhook::EVENT_HEADER),
                body,
            };
            routes::handle(&route, app, &incoming, SystemTime::now())
        }
    };
    log_request(&method, &url, reply.status, started);
    respond(rq, reply);
}

fn log_request(method: &str, url: &str, status: u16, started: Instant) {
    log::debug!(
        "http request method={method} path={url:?} status={status} elapsed_ms={}",
        started.elapsed().as_millis()
    );
}

/// Read at most `max + 1` bytes; a declared or actual size over `max` is a 413.
fn read_body(rq: &mut Request, max: usize) -> Result<Vec<u8>, Reply> {
    if rq.body_length().is_some_and(|n| n > max) {
        return Err(Reply::payload_too_large(max));
    }
    let mut body = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    match rq.as_reader().take(limit).read_to_end(&mut body) {
        Ok(_) if body.len() > max => Err(Reply::payload_too_large(max)),
        Ok(_) => Ok(body),
        Err(e) => {
            log::debug!("http request body unreadable error={e}");
            Err(Reply::error(
                400,
                "bad_request",
                "could not read the request body",
            ))
        }
    }
}

fn header(rq: &Request, name: &'static str) -> Option<String> {
    rq.headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str().to_string())
}

/// Write `reply` with constant headers only (no request data ever reaches a header).
fn respond(rq: Request, reply: Reply) {
    let content_type: &'static str = match reply.kind {
        ContentKind::Json => "application/json",
        ContentKind::Html => "text/html; charset=utf-8",
        ContentKind::Metrics => crate::ops::exposition::CONTENT_TYPE,
    };
    let mut headers: Vec<(&'static str, &'static str)> = vec![
        ("Content-Type", content_type),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
    ];
    if reply.kind == ContentKind::Html {
        headers.push(("Content-Security-Policy", html::content_security_policy()));
    }
    if let Some(allow) = reply.allow {
        headers.push(("Allow", allow));
    }
    let headers = headers
        .into_iter()
        .filter_map(|(k, v)| Header::from_bytes(k.as_bytes(), v.as_bytes()).ok())
        .collect();
    let len = reply.body.len();
    let response = Response::new(
        StatusCode(reply.status),
        headers,
        std::io::Cursor::new(reply.body.into_bytes()),
        Some(len),
        None,
    );
    if let Err(e) = rq.respond(response) {
        log::debug!("http response not delivered error={e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_panicking_acceptor_is_reported_on_the_fatal_channel() {
        let (control, _rx) = crossbeam_channel::unbounded();
        let handle = spawn(HttpOptions::new("127.0.0.1", 0), control).unwrap();
        PANIC_IN_ACCEPTOR.store(true, Ordering::SeqCst);
        let mut conn = std::net::TcpStream::connect(handle.local_addr()).unwrap();
        let _ = conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            crate::runtime::threads::wait_fatal("http-accept", Duration::from_secs(10)),
            "the acceptor's death must reach the daemon loop"
        );
    }
}
