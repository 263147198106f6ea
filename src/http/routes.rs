//! Routing and request handling, independent of tiny_http: [`resolve`] maps a method and URL to
//! a [`Route`] (or a 404/405), [`handle`] turns a route plus request data into a [`Reply`].
//! Orchestrator state is only ever obtained through [`ControlClient`], which asks the main loop
//! over a channel and gives up after a timeout; `/metrics` and `/readyz` read the
//! [`OpsShared`] the loop publishes instead.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{bounded, Sender};
use serde::Serialize;
use serde_json::json;

use crate::http::{html, webhook};
use crate::ops::metrics::{render, CONTENT_TYPE as METRICS};
use crate::ops::shared::NotLive::{self, Gone, Timeout};
use crate::ops::shared::{OpsShared, LIVEZ_DEADLINE, READY_JSON};
use crate::status::ControlRequest;
use crate::status::IssueDetail;
use crate::workflow::config::Secret;

/// Longest identifier accepted in a URL (bytes).
pub const MAX_IDENTIFIER_LEN: usize = 200;

/// A known route; identifiers are percent-decoded but not yet validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Dashboard,
    IssuePage(String),
    State,
    IssueApi(String),
    Refresh,
    GithubWebhook,
    Metrics,
    Livez,
    Readyz,
}

impl Route {
    /// The methods this route answers, as sent in `Allow`.
    pub fn allow(&self) -> &'static str {
        match self {
            Route::Refresh | Route::GithubWebhook => "POST",
            _ => "GET, HEAD",
        }
    }

    /// `/livez`, `/readyz` and `/metrics`: kept answerable under any load of other routes.
    pub fn is_probe(&self) -> bool {
        matches!(self, Route::Metrics | Route::Livez | Route::Readyz)
    }

    /// Whether the handler needs the request body (read capped by the server).
    pub fn takes_body(&self) -> bool {
        matches!(self, Route::Refresh | Route::GithubWebhook)
    }
}

/// Map a request method and URL (path plus optional query) to a route, or to the `404` or the
/// `405` (with its `Allow`) to send.
pub fn resolve(method: &str, url: &str) -> Result<Route, Reply> {
    let path = url.split(['?', '#']).next().unwrap_or("");
    let route = match path {
        "/" => Some(Route::Dashboard),
        "/metrics" => Some(Route::Metrics),
        "/livez" => Some(Route::Livez),
        "/readyz" => Some(Route::Readyz),
        "/api/v1/state" => Some(Route::State),
        "/api/v1/refresh" => Some(Route::Refresh),
        "/api/v1/webhooks/github" => Some(Route::GithubWebhook),
        _ => match (path.strip_prefix("/issues/"), path.strip_prefix("/api/v1/")) {
            (Some(rest), _) => single_segment(rest).map(Route::IssuePage),
            (_, Some(rest)) => single_segment(rest).map(Route::IssueApi),
            _ => None,
        },
    };
    let route = route.ok_or_else(|| Reply::error(404, "not_found", "no such route"))?;
    let allow = route.allow();
    if allow.split(", ").any(|m| m == method) {
        return Ok(route);
    }
    let message = format!("this route accepts {allow}");
    Err(Reply {
        allow: Some(allow),
        ..Reply::error(405, "method_not_allowed", &message)
    })
}

/// A non-empty path segment without `/`, percent-decoded (invalid encodings are kept verbatim
/// and later fail identifier validation).
fn single_segment(s: &str) -> Option<String> {
    let decoded = || percent_decode(s).unwrap_or_else(|| s.to_string());
    (!s.is_empty() && !s.contains('/')).then(decoded)
}

fn percent_decode(s: &str) -> Option<String> {
    let mut parts = s.split('%');
    let mut out = parts.next().unwrap_or("").as_bytes().to_vec();
    for part in parts {
        out.push(u8::from_str_radix(part.get(..2)?, 16).ok()?);
        out.extend_from_slice(&part.as_bytes()[2..]);
    }
    String::from_utf8(out).ok()
}

/// Whether `id` looks like an identifier Baton can know (`[A-Za-z0-9._-]`, bounded length).
pub fn is_plausible_identifier(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_IDENTIFIER_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

pub const JSON: &str = "application/json";
/// The `Content-Type` of HTML replies (which also get the `Content-Security-Policy`).
pub const HTML: &str = "text/html; charset=utf-8";

/// A response before it is put on the wire; headers are chosen by the server from constants.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// `Allow` header value for 405 replies.
    pub allow: Option<&'static str>,
}

impl Reply {
    pub fn new(status: u16, content_type: &'static str, body: String) -> Reply {
        Reply {
            status,
            content_type,
            body,
            allow: None,
        }
    }

    pub fn json<T: Serialize>(status: u16, value: &T) -> Reply {
        let body = serde_json::to_string(value).unwrap_or_else(|_| {
            r#"{"error":{"code":"internal","message":"serialization failed"}}"#.into()
        });
        Reply::new(status, JSON, body)
    }

    /// The JSON error envelope `{"error":{"code":…,"message":…}}`.
    pub fn error(status: u16, code: &str, message: &str) -> Reply {
        Reply::json(
            status,
            &json!({"error": {"code": code, "message": message}}),
        )
    }

    /// A small HTML error page, for the HTML routes.
    pub fn page(status: u16, title: &str, text: &str) -> Reply {
        Reply::new(status, HTML, html::render_error_page(title, text))
    }

    pub fn payload_too_large(max: usize) -> Reply {
        let message = format!("request body exceeds {max} bytes");
        Reply::error(413, "payload_too_large", &message)
    }
}

/// Asks the main loop for snapshots and refreshes; never touches orchestrator state itself.
#[derive(Debug, Clone)]
pub struct ControlClient {
    tx: Sender<ControlRequest>,
    timeout: Duration,
}

impl ControlClient {
    /// Send requests on `tx`, waiting at most `timeout` for each answer (send included).
    pub fn new(tx: Sender<ControlRequest>, timeout: Duration) -> Self {
        ControlClient { tx, timeout }
    }

    /// Send a request and wait for its answer, both within `timeout` in total; `Gone` when the
    /// loop's channel is closed or it dropped the reply.
    fn ask<T>(
        &self,
        timeout: Duration,
        make: impl FnOnce(Sender<T>) -> ControlRequest,
    ) -> Result<T, NotLive> {
        let deadline = Instant::now() + timeout;
        // Capacity 1: a late answer never blocks the main loop, even after we gave up.
        let (reply_tx, reply_rx) = bounded(1);
        let sent = self.tx.send_timeout(make(reply_tx), timeout);
        let answer = sent.map_err(|e| e.is_timeout()).and_then(|()| {
            let left = deadline.saturating_duration_since(Instant::now());
            reply_rx.recv_timeout(left).map_err(|e| e.is_timeout())
        });
        answer.map_err(|timeout| if timeout { Timeout } else { Gone })
    }

    /// One issue; `Ok(None)` when the main loop does not know it (or `id` is implausible: the
    /// loop is not asked).
    fn issue(&self, id: &str) -> Result<Option<IssueDetail>, NotLive> {
        if !is_plausible_identifier(id) {
            return Ok(None);
        }
        self.ask(self.timeout, |reply| {
            ControlRequest::Issue(id.into(), reply)
        })
    }

    /// Liveness: the main loop answers a ping within [`LIVEZ_DEADLINE`] (whatever the snapshot
    /// timeout is).
    pub fn ping(&self) -> Result<(), NotLive> {
        self.ask(LIVEZ_DEADLINE, ControlRequest::Ping)
    }

    /// The 503 for a question the main loop did not answer, as JSON or as an HTML page.
    fn unanswered(&self, e: NotLive, page: bool) -> Reply {
        let (code, message, retry) = match e {
            Timeout => (
                "snapshot_timeout",
                format!(
                    "the orchestrator did not answer within {} ms",
                    self.timeout.as_millis()
                ),
                "; this page retries on its own",
            ),
            Gone => (
                "unavailable",
                "the orchestrator is not accepting requests".to_string(),
                "",
            ),
        };
        if !page {
            return Reply::error(503, code, &message);
        }
        let text = format!("The{}{retry}.", &message[3..]);
        Reply::page(503, "Snapshot unavailable", &text)
    }
}

/// What the handlers need.
#[derive(Debug)]
pub struct App {
    pub control: ControlClient,
    /// `server.webhook_secret`; `None` disables the webhook route (404).
    pub webhook_secret: Option<Secret>,
    /// Metrics and readiness facts published by the main loop.
    pub ops: Arc<OpsShared>,
    /// Recently accepted webhook deliveries (a redelivery queues no second refresh).
    pub deliveries: webhook::Deliveries,
}

/// Request data a handler may look at: the webhook headers (`X-Hub-Signature-256`,
/// `X-GitHub-Event`, `X-GitHub-Delivery`) and the body (only for routes that take one; capped by
/// the server).
#[derive(Debug, Clone, Default)]
pub struct Incoming {
    pub signature: Option<String>,
    pub github_event: Option<String>,
    pub delivery: Option<String>,
    pub body: Vec<u8>,
}

/// Events that queue a refresh. `issues` is accepted too because user-owned projects have no
/// `projects_v2_item` webhook, while a repository webhook can deliver issue changes.
const REFRESH_EVENTS: &[&str] = &["projects_v2_item", "issues"];

/// Produce the reply for an accepted route. `/metrics` and `/readyz` read the shared state
/// (they answer even when the loop is wedged).
pub fn handle(route: &Route, app: &App, req: &Incoming, now: SystemTime) -> Reply {
    let c = &app.control;
    let page = matches!(route, Route::Dashboard | Route::IssuePage(_));
    match route {
        Route::State | Route::Dashboard => match c.ask(c.timeout, ControlRequest::State) {
            Ok(snap) if page => Reply::new(200, HTML, html::render_dashboard(&snap, now)),
            Ok(snap) => Reply::json(200, &snap),
            Err(e) => c.unanswered(e, page),
        },
        Route::IssueApi(id) | Route::IssuePage(id) => match c.issue(id) {
            Ok(Some(d)) if page => Reply::new(200, HTML, html::render_issue_page(&d, now)),
            Ok(Some(d)) => Reply::json(200, &d),
            Ok(None) if page => {
                let text = format!("Baton is not tracking {}.", clip(id));
                Reply::page(404, "Issue not found", &text)
            }
            Ok(None) => {
                let message = format!("issue {} is not known to Baton", clip(id));
                Reply::error(404, "issue_not_found", &message)
            }
            Err(e) => c.unanswered(e, page),
        },
        Route::Refresh => refresh_reply(app),
        Route::Metrics => Reply::new(200, METRICS, render(&app.ops.metrics())),
        Route::Readyz => match app.ops.readyz(Instant::now()) {
            Ok(()) => Reply::new(200, JSON, READY_JSON.to_string()),
            Err(why) => Reply::new(503, JSON, why.to_json()),
        },
        Route::Livez => livez_reply(app),
        Route::GithubWebhook => webhook_reply(app, req),
    }
}

/// `/livez`: not live while the tracker thread is stuck, else when the loop answers a ping.
fn livez_reply(app: &App) -> Reply {
    if let Some(thread) = app.ops.health().stuck_thread {
        let body = json!({"live": false, "reason": "tracker_stuck", "thread": thread});
        return Reply::json(503, &body);
    }
    let reason = match app.control.ping() {
        Ok(()) => return Reply::json(200, &json!({"live": true})),
        Err(Timeout) => "main_loop_timeout",
        Err(Gone) => "main_loop_gone",
    };
    Reply::json(503, &json!({"live": false, "reason": reason}))
}

/// Queue a (coalesced) poll + reconcile.
fn refresh_reply(app: &App) -> Reply {
    let c = &app.control;
    let ack = c.ask(c.timeout, ControlRequest::Refresh);
    ack.map_or_else(|e| c.unanswered(e, false), |ack| Reply::json(202, &ack))
}

fn webhook_reply(app: &App, req: &Incoming) -> Reply {
    let Some(secret) = &app.webhook_secret else {
        return Reply::error(
            404,
            "webhook_disabled",
            "the webhook route is disabled: server.webhook_secret is not set",
        );
    };
    if let Err(e) = webhook::verify_signature(secret, &req.body, req.signature.as_deref()) {
        log::warn!("http webhook rejected reason={e:?}");
        return Reply::error(401, "invalid_signature", e.message());
    }
    let delivery = req.delivery.as_deref().unwrap_or("");
    if app.deliveries.seen(delivery) {
        log::info!("http webhook duplicate delivery={delivery:?}");
        return Reply::json(200, &json!({"queued": false, "duplicate": true}));
    }
    let event = req.github_event.as_deref().unwrap_or("").trim();
    let reply = if event == "ping" {
        Reply::json(200, &json!({"ok": true, "event": "ping"}))
    } else if REFRESH_EVENTS.contains(&event) {
        log::info!("http webhook accepted event={event}");
        refresh_reply(app)
    } else {
        let body = json!({"queued": false, "ignored": true, "event": clip(event)});
        Reply::json(200, &body)
    };
    if reply.status < 300 {
        app.deliveries.remember(delivery);
    }
    reply
}

/// Bound an untrusted string before echoing it back (JSON/HTML escaping happens later).
fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(r: Result<Route, Reply>) -> Result<Route, (u16, Option<&'static str>)> {
        r.map_err(|e| (e.status, e.allow))
    }

    #[test]
    fn resolves_routes_methods_and_unknown_paths() {
        assert_eq!(resolve("GET", "/"), Ok(Route::Dashboard));
        assert_eq!(resolve("HEAD", "/?x=1"), Ok(Route::Dashboard));
        assert_eq!(resolve("GET", "/api/v1/state"), Ok(Route::State));
        assert_eq!(
            resolve("GET", "/api/v1/acme__app-7"),
            Ok(Route::IssueApi("acme__app-7".into()))
        );
        assert_eq!(
            resolve("GET", "/issues/acme__app%2D7"),
            Ok(Route::IssuePage("acme__app-7".into()))
        );
        assert_eq!(resolve("POST", "/api/v1/refresh"), Ok(Route::Refresh));
        assert_eq!(
            resolve("POST", "/api/v1/webhooks/github"),
            Ok(Route::GithubWebhook)
        );
        assert_eq!(
            status(resolve("GET", "/api/v1/refresh")),
            Err((405, Some("POST")))
        );
        assert_eq!(
            status(resolve("DELETE", "/api/v1/state")),
            Err((405, Some("GET, HEAD")))
        );
        assert_eq!(status(resolve("POST", "/")), Err((405, Some("GET, HEAD"))));
        for p in [
            "/nope",
            "/api/v1/",
            "/api/v1/a/b",
            "/issues/",
            "/api/v2/state",
            "",
        ] {
            assert_eq!(status(resolve("GET", p)), Err((404, None)), "{p:?}");
        }
    }

    #[test]
    fn bad_percent_encodings_do_not_panic_and_fail_validation() {
        for p in [
            "/api/v1/%",
            "/api/v1/%zz",
            "/api/v1/%ff%fe",
            "/api/v1/%E2%82",
        ] {
            match status(resolve("GET", p)) {
                Ok(Route::IssueApi(id)) => assert!(!is_plausible_identifier(&id)),
                other => panic!("{p}: {other:?}"),
            }
        }
        assert!(is_plausible_identifier("my.org__repo-name-12"));
        assert!(!is_plausible_identifier("a b"));
        assert!(!is_plausible_identifier(
            &"a".repeat(MAX_IDENTIFIER_LEN + 1)
        ));
    }

    #[test]
    fn webhook_without_secret_is_disabled_and_never_asks_the_loop() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let app = App {
            control: ControlClient::new(tx, Duration::from_millis(10)),
            webhook_secret: None,
            ops: Arc::new(OpsShared::default()),
            deliveries: Default::default(),
        };
        let r = handle(
            &Route::GithubWebhook,
            &app,
            &Incoming::default(),
            SystemTime::now(),
        );
        assert_eq!(r.status, 404);
        assert!(r.body.contains("webhook_disabled"));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn closed_control_channel_is_unavailable() {
        let (tx, rx) = crossbeam_channel::unbounded();
        drop(rx);
        let app = App {
            control: ControlClient::new(tx, Duration::from_millis(10)),
            webhook_secret: None,
            ops: Arc::new(OpsShared::default()),
            deliveries: Default::default(),
        };
        let r = handle(&Route::State, &app, &Incoming::default(), SystemTime::now());
        assert_eq!(r.status, 503);
        assert!(r.body.contains("\"unavailable\""));
    }
}
