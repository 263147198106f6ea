//! Shared helpers for the HTTP tests: fixture snapshots, a fake main loop answering
//! `ControlRequest`s, and a minimal raw HTTP/1.1 client (so tests see exact statuses/headers).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use baton::http::{spawn, HttpHandle, HttpOptions};
use baton::status::{
    AgentTotals, BlockedRow, ControlRequest, Counts, IssueDetail, RecentEvent, RefreshAck,
    RetryRow, RunningRow, StateSnapshot, TokenCounts, TrackerHealth,
};
use baton::tracker::TrackerBudget;
use baton::workflow::config::Secret;
use crossbeam_channel::{unbounded, Receiver, Sender};

/// A title that would change the page if it ever ran as markup.
pub const EVIL_TITLE: &str = "<script>document.title='PW'+'NED'</script><img src=x \
     onerror=\"document.body.setAttribute('data-in'+'jected','1')\">";

pub const WEBHOOK_SECRET: &str = "test-webhook-secret";

pub fn running_row(identifier: &str, title: &str, url: &str) -> RunningRow {
    RunningRow {
        issue_id: format!("I_{identifier}"),
        issue_identifier: identifier.into(),
        title: title.into(),
        url: Some(url.into()),
        state: "In Progress".into(),
        session_id: Some("sess-1-2".into()),
        turn_count: 2,
        last_event: Some("turn_completed".into()),
        last_message: Some("ran <b>cargo test</b>".into()),
        started_at: "2026-01-01T00:00:00Z".into(),
        last_event_at: Some("2026-01-01T00:01:00Z".into()),
        tokens: TokenCounts {
            input_tokens: 1000,
            output_tokens: 234,
            total_tokens: 1234,
            ..TokenCounts::default()
        },
        spend: Default::default(),
        cost_usd: Some(0.25),
        attempt: None,
        resumed: false,
        host: None,
    }
}

/// Two running rows (one with a script title, one with a `javascript:` URL), one retry, one
/// blocked issue.
pub fn fixture_state() -> StateSnapshot {
    StateSnapshot {
        generated_at: "2026-01-01T00:02:00Z".into(),
        counts: Counts {
            running: 2,
            retrying: 1,
            blocked: 1,
        },
        running: vec![
            running_row(
                "acme__app-1",
                "<script>alert(1)</script>",
                "https://github.com/acme/app/issues/1",
            ),
            running_row("acme__app-2", EVIL_TITLE, "javascript:alert(2)"),
        ],
        retrying: vec![RetryRow {
            issue_id: "I_3".into(),
            issue_identifier: "acme__app-3".into(),
            url: Some("https://github.com/acme/app/issues/3".into()),
            attempt: 2,
            due_at: "2026-01-01T00:03:00Z".into(),
            due_in_ms: 61_000,
            error: Some("agent exited with <status> 1".into()),
        }],
        blocked: vec![BlockedRow {
            issue_id: "I_4".into(),
            issue_identifier: "acme__app-4".into(),
            url: None,
            state: "Todo".into(),
            reason: "max_attempts reached".into(),
            since: "2026-01-01T00:00:30Z".into(),
        }],
        agent_totals: AgentTotals {
            tokens: TokenCounts {
                input_tokens: 2000,
                output_tokens: 468,
                total_tokens: 2468,
                ..TokenCounts::default()
            },
            seconds_running: 240.5,
            cost_usd: 0.5,
            ..AgentTotals::default()
        },
        budget: Default::default(),
        rate_limits: Some(serde_json::json!({"primary": {"used_percent": 12}})),
        tracker: TrackerHealth {
            last_successful_poll_at: Some("2026-01-01T00:01:30Z".into()),
            last_error: None,
            rate_limit: Some(TrackerBudget {
                remaining: Some(4990),
                limit: Some(5000),
                reset_at: Some("2026-01-01T01:00:00Z".into()),
                last_cost: Some(1),
            }),
            poll_interval_ms: 30_000,
            points_target_per_hour: Some(2_500),
            points_projected_per_hour: Some(240),
        },
        hosts: vec![],
    }
}

pub fn fixture_issue() -> IssueDetail {
    IssueDetail {
        issue_identifier: "acme__app-1".into(),
        issue_id: "I_acme__app-1".into(),
        status: "running".into(),
        workspace: Some("/srv/baton/acme__app-1".into()),
        attempts: 1,
        running: Some(running_row(
            "acme__app-1",
            "<script>alert(1)</script>",
            "https://github.com/acme/app/issues/1",
        )),
        retry: None,
        blocked: None,
        last_error: None,
        spend: Default::default(),
        budget: Default::default(),
        recent_events: vec![
            RecentEvent {
                at: "2026-01-01T00:00:01Z".into(),
                event: "session_started".into(),
                message: "session sess-1".into(),
            },
            RecentEvent {
                at: "2026-01-01T00:00:02Z".into(),
                event: "notification".into(),
                message: "<img src=x onerror=alert(1)>".into(),
            },
        ],
    }
}

/// How the fake main loop behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum LoopMode {
    /// Answer every request from the fixtures.
    Answer,
    /// Take requests but never answer (keeps reply senders alive).
    Silent,
}

/// A fake main loop on its own thread.
pub struct FakeLoop {
    pub refreshes: Arc<AtomicUsize>,
    pub issue_queries: Arc<Mutex<Vec<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeLoop {
    /// Start answering on `rx`; refreshes coalesce until [`FakeLoop`] sees a tick (never, here):
    /// the first ack is `coalesced: false`, later ones `true`.
    pub fn start(rx: Receiver<ControlRequest>, mode: LoopMode) -> FakeLoop {
        let refreshes = Arc::new(AtomicUsize::new(0));
        let issue_queries = Arc::new(Mutex::new(Vec::new()));
        let (r, q) = (Arc::clone(&refreshes), Arc::clone(&issue_queries));
        let thread = std::thread::spawn(move || {
            let mut issues: HashMap<String, IssueDetail> = HashMap::new();
            let detail = fixture_issue();
            issues.insert(detail.issue_identifier.clone(), detail);
            let mut parked = Vec::new();
            for req in rx.iter() {
                if mode == LoopMode::Silent {
                    parked.push(req);
                    continue;
                }
                match req {
                    ControlRequest::State(reply) => {
                        let _ = reply.send(fixture_state());
                    }
                    ControlRequest::Issue(identifier, reply) => {
                        q.lock().unwrap().push(identifier.clone());
                        let _ = reply.send(issues.get(&identifier).cloned());
                    }
                    ControlRequest::Refresh(reply) => {
                        let n = r.fetch_add(1, Ordering::SeqCst);
                        let _ = reply.send(RefreshAck {
                            queued: true,
                            coalesced: n > 0,
                            requested_at: "2026-01-01T00:02:00Z".into(),
                            operations: vec!["poll".into(), "reconcile".into()],
                            deferred_until: None,
                        });
                    }
                    ControlRequest::Ping(reply) => {
                        let _ = reply.send(());
                    }
                }
            }
        });
        FakeLoop {
            refreshes,
            issue_queries,
            thread: Some(thread),
        }
    }

    pub fn refresh_count(&self) -> usize {
        self.refreshes.load(Ordering::SeqCst)
    }
}

/// A server on an ephemeral loopback port wired to a fake loop.
pub struct Fixture {
    pub handle: Option<HttpHandle>,
    pub addr: SocketAddr,
    pub fake: FakeLoop,
    tx: Option<Sender<ControlRequest>>,
}

impl Fixture {
    pub fn start(mode: LoopMode, secret: Option<&str>) -> Fixture {
        Self::start_with(mode, secret, Duration::from_secs(5), 4096)
    }

    pub fn start_with(
        mode: LoopMode,
        secret: Option<&str>,
        snapshot_timeout: Duration,
        max_body_bytes: usize,
    ) -> Fixture {
        let (tx, rx) = unbounded();
        let fake = FakeLoop::start(rx, mode);
        let opts = HttpOptions {
            webhook_secret: secret.map(Secret::new),
            snapshot_timeout,
            max_body_bytes,
            ..HttpOptions::new("127.0.0.1", 0)
        };
        let handle = spawn(opts, tx.clone()).expect("bind ephemeral port");
        let addr = handle.local_addr();
        Fixture {
            handle: Some(handle),
            addr,
            fake,
            tx: Some(tx),
        }
    }

    pub fn get(&self, path: &str) -> Resp {
        request(self.addr, "GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        request(self.addr, "POST", path, headers, body)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            drop(h);
        }
        self.tx.take();
        // The fake loop exits once every sender (ours and the server's) is gone; don't wait
        // for HTTP workers that may still hold one.
        self.fake.thread.take();
    }
}

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// Assert the `{"error":{"code":…,"message":…}}` envelope with `code`.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(self.header("Content-Type"), Some("application/json"));
        let v = self.json();
        assert_eq!(v["error"]["code"], code, "{}", self.body);
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{}",
            self.body
        );
    }
}

/// Send one request with `Connection: close` and read the whole response (bounded by a
/// read timeout).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("Transfer-Encoding") && v == &"chunked");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !chunked
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("Content-Length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let raw = send_raw(addr, head.as_bytes(), body);
    parse_response(&raw)
}

/// GET with a short read timeout; `None` when no complete response arrives.
pub fn try_get(addr: SocketAddr, path: &str) -> Option<Resp> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.contains("\r\n\r\n").then(|| parse_response(&out))
}

pub fn send_raw(addr: SocketAddr, head: &[u8], body: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may cut the request off (limits); ignore write errors, judge the reply.
    let _ = s.write_all(head);
    // The server may answer (413) before reading everything; ignore write errors then.
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

pub fn parse_response(raw: &[u8]) -> Resp {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {text:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Resp {
        status,
        headers,
        body: body.to_string(),
    }
}

/// The `X-Hub-Signature-256` value GitHub would send for `body` (`sha256=<hex>`).
pub fn sign(secret: &Secret, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.expose().as_bytes());
    let hex: String = (ring::hmac::sign(&key, body).as_ref().iter())
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}
