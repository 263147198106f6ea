//! The tiny_http plumbing. The vendored server's one pool of handler threads (at most 64) reads
//! each request whole before running [`handle_request`] on it, so a slow client costs a file
//! descriptor, never a thread. Its threads are supervised ([`spawn_supervised`]): one that dies
//! takes the daemon down (exit 1) and nothing is rebuilt in place; a panic inside one request's
//! handler costs that connection only.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

use crossbeam_channel::Sender;
use tiny_http::{ConnectionLimits, Header, Request, Response, Server};

use super::routes::{self, App, ControlClient, Incoming, Reply};
use super::{html, webhook, HttpOptions};
use crate::runtime::threads::spawn_supervised;
use crate::status::ControlRequest;

/// A running HTTP server. Dropping it stops accepting; requests in progress finish.
pub struct HttpHandle {
    local_addr: SocketAddr,
    _server: Server,
}

impl std::fmt::Debug for HttpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HttpHandle({})", self.local_addr)
    }
}

impl HttpHandle {
    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// Bind now (errors are returned, not logged) and start serving on background threads.
pub fn spawn(opts: HttpOptions, control: Sender<ControlRequest>) -> Result<HttpHandle, String> {
    let host = opts
        .bind
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let addr = (host, opts.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve bind host {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("bind host {host:?} resolves to no address"))?;
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot bind {addr}: {e}"))?;
    serve(listener, opts, control)
}

fn serve(
    listener: TcpListener,
    opts: HttpOptions,
    control: Sender<ControlRequest>,
) -> Result<HttpHandle, String> {
    let local_addr = listener
        .local_addr()
        .map_err(|e| format!("bound address unknown: {e}"))?;
    if local_addr.ip().is_loopback() {
        log::info!("http server listening addr={local_addr}");
    } else {
        log::warn!(
            "http server listening addr={local_addr} on a non-loopback address: the dashboard \
             and API have no authentication; anyone who can reach it can read agent output \
             and trigger refreshes"
        );
    }
    let served = Served {
        app: App {
            control: ControlClient::new(control, opts.snapshot_timeout),
            webhook_secret: opts.webhook_secret,
            ops: opts.ops,
            deliveries: webhook::Deliveries::default(),
        },
        max_body: opts.max_body_bytes,
        busy: AtomicUsize::new(0),
    };
    let limits = ConnectionLimits {
        max_body: opts.max_body_bytes,
        spawn: |name, f| spawn_supervised(name, f).map(drop),
        ..ConnectionLimits::default()
    };
    let server =
        Server::from_listener_with_handler(listener, limits, move |rq| handle_request(rq, &served))
            .map_err(|e| format!("cannot start the http server: {e}"))?;
    Ok(HttpHandle {
        local_addr,
        _server: server,
    })
}

/// Handler threads (of the pool's 64) that routes other than the probes may hold at once, so
/// that `/livez`, `/readyz` and `/metrics` always find one, whatever the others wait for (a
/// slow main loop, a client slow to take a large page). Past it: `503 busy`.
const SHARED_ROUTES_MAX: usize = 48;

/// What the handler threads share.
struct Served {
    app: App,
    max_body: usize,
    /// Requests of non-probe routes in progress.
    busy: AtomicUsize,
}

/// One of [`SHARED_ROUTES_MAX`] places, given back on drop (after the response is written).
struct Slot<'a>(&'a AtomicUsize);

impl<'a> Slot<'a> {
    fn take(busy: &'a AtomicUsize) -> Option<Slot<'a>> {
        let slot = Slot(busy);
        (busy.fetch_add(1, Ordering::SeqCst) < SHARED_ROUTES_MAX).then_some(slot)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn handle_request(mut rq: Request, served: &Served) {
    let started = Instant::now();
    let method = rq.method().as_str().to_string();
    let url: String = rq.url().chars().take(200).collect();
    let route = routes::resolve(&method, rq.url());
    let probe = matches!(&route, Ok(r) if r.is_probe());
    let slot = (!probe).then(|| Slot::take(&served.busy));
    let reply = match (route, &slot) {
        (_, Some(None)) => Reply::error(503, "busy", "too many requests in progress; retry"),
        (Err(reply), _) => reply,
        (Ok(route), _) => route_reply(&mut rq, &route, served),
    };
    log::debug!(
        "http request method={method} path={url:?} status={} elapsed_ms={}",
        reply.status,
        started.elapsed().as_millis()
    );
    respond(rq, reply);
}

fn route_reply(rq: &mut Request, route: &routes::Route, served: &Served) -> Reply {
    let body = if route.takes_body() {
        match read_body(rq, served.max_body) {
            Ok(b) => b,
            Err(reply) => return reply,
        }
    } else {
        Vec::new()
    };
    let incoming = Incoming {
        signature: header(rq, webhook::SIGNATURE_HEADER),
        github_event: header(rq, webhook::EVENT_HEADER),
        delivery: header(rq, webhook::DELIVERY_HEADER),
        body,
    };
    routes::handle(route, &served.app, &incoming, SystemTime::now())
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
    let is_html = reply.content_type == routes::HTML;
    let csp = is_html.then_some(("Content-Security-Policy", html::CONTENT_SECURITY_POLICY));
    let headers = [
        ("Content-Type", reply.content_type),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
    ];
    let allow = reply.allow.map(|allow| ("Allow", allow));
    let mut response = Response::from_data(reply.body).with_status_code(reply.status);
    let headers = headers.into_iter().chain(csp).chain(allow);
    for header in headers.filter_map(|(k, v)| Header::from_bytes(k, v).ok()) {
        response.add_header(header);
    }
    if let Err(e) = rq.respond(response) {
        log::debug!("http response not delivered error={e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Shutdown, TcpStream};
    use std::os::fd::OwnedFd;

    #[test]
    fn a_failed_listener_is_a_supervised_thread_death() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let same = TcpStream::from(OwnedFd::from(listener.try_clone().unwrap()));
        let (control, _rx) = crossbeam_channel::unbounded();
        let _handle = serve(listener, HttpOptions::new("127.0.0.1", 0), control).unwrap();
        // A listening socket shut down fails `accept` for good (EINVAL), as a broken one would.
        same.shutdown(Shutdown::Both).unwrap();
        assert!(
            crate::runtime::threads::tests::wait_fatal(
                "tinyhttp-accept",
                std::time::Duration::from_secs(10)
            ),
            "the accept thread's death must reach the daemon loop"
        );
    }
}
