//! The HTTP server over real HTTP on an ephemeral loopback port, answered by a fake main loop.

use crate::support::http as http_support;
use crate::support::prom;

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use baton::http::{spawn, HttpOptions};
use baton::ops::shared::OpsShared;
use baton::workflow::config::Secret;
use http_support::*;

fn assert_common_headers(r: &Resp) {
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
}

#[test]
fn state_returns_the_snapshot_shape() {
    let f = Fixture::start(LoopMode::Answer, None);
    let r = f.get("/api/v1/state");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_common_headers(&r);
    let v = r.json();
    assert_eq!(v["generated_at"], "2026-01-01T00:02:00Z");
    assert_eq!(v["counts"]["running"], 2);
    assert_eq!(v["counts"]["retrying"], 1);
    assert_eq!(v["counts"]["blocked"], 1);
    let run = &v["running"][0];
    for key in [
        "issue_id",
        "issue_identifier",
        "url",
        "state",
        "session_id",
        "turn_count",
        "last_event",
        "last_message",
        "started_at",
        "last_event_at",
        "tokens",
        "cost_usd",
    ] {
        assert!(run.get(key).is_some(), "running row lacks {key}: {run}");
    }
    assert_eq!(run["tokens"]["total_tokens"], 1234);
    assert_eq!(v["retrying"][0]["attempt"], 2);
    assert_eq!(v["retrying"][0]["due_at"], "2026-01-01T00:03:00Z");
    assert_eq!(v["blocked"][0]["reason"], "max_attempts reached");
    assert_eq!(v["agent_totals"]["seconds_running"], 240.5);
    assert_eq!(v["agent_totals"]["total_tokens"], 2468);
    assert_eq!(v["rate_limits"]["primary"]["used_percent"], 12);
    assert_eq!(v["tracker"]["rate_limit"]["remaining"], 4990);
    assert_eq!(
        v["tracker"]["last_successful_poll_at"],
        "2026-01-01T00:01:30Z"
    );
}

#[test]
fn issue_detail_and_unknown_issue() {
    let f = Fixture::start(LoopMode::Answer, None);
    let r = f.get("/api/v1/acme__app-1");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_common_headers(&r);
    let v = r.json();
    assert_eq!(v["status"], "running");
    assert_eq!(v["workspace"], "/srv/baton/acme__app-1");
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["running"]["turn_count"], 2);
    assert!(v["retry"].is_null());
    assert_eq!(v["recent_events"].as_array().unwrap().len(), 2);
    assert_eq!(v["recent_events"][1]["event"], "notification");

    f.get("/api/v1/acme__app-999")
        .assert_error(404, "issue_not_found");
    // Implausible identifiers are refused without bothering the main loop.
    f.get("/api/v1/..%2F..%2Fetc%2Fpasswd")
        .assert_error(404, "issue_not_found");
    f.get("/api/v1/%ff").assert_error(404, "issue_not_found");
    let asked = f.fake.issue_queries.lock().unwrap().clone();
    assert_eq!(asked, vec!["acme__app-1", "acme__app-999"]);
}

#[test]
fn unknown_routes_404_and_wrong_methods_405_with_allow() {
    let f = Fixture::start(LoopMode::Answer, None);
    let r = f.get("/nope");
    r.assert_error(404, "not_found");
    assert_common_headers(&r);
    f.get("/api/v1/").assert_error(404, "not_found");
    f.get("/api/v2/state").assert_error(404, "not_found");

    for (method, path, allow) in [
        ("DELETE", "/api/v1/state", "GET, HEAD"),
        ("POST", "/api/v1/state", "GET, HEAD"),
        ("GET", "/api/v1/refresh", "POST"),
        ("PUT", "/api/v1/refresh", "POST"),
        ("GET", "/api/v1/webhooks/github", "POST"),
        ("POST", "/", "GET, HEAD"),
        ("POST", "/issues/acme__app-1", "GET, HEAD"),
        ("PATCH", "/api/v1/acme__app-1", "GET, HEAD"),
    ] {
        let r = request(f.addr, method, path, &[], b"");
        r.assert_error(405, "method_not_allowed");
        assert_eq!(r.header("Allow"), Some(allow), "{method} {path}");
    }
    assert_eq!(f.fake.refresh_count(), 0);
}

#[test]
fn refresh_is_202_with_the_loops_ack_and_coalesces() {
    let f = Fixture::start(LoopMode::Answer, None);
    let r = f.post("/api/v1/refresh", &[], b"");
    assert_eq!(r.status, 202, "{}", r.body);
    assert_common_headers(&r);
    let v = r.json();
    assert_eq!(v["queued"], true);
    assert_eq!(v["coalesced"], false);
    assert_eq!(v["requested_at"], "2026-01-01T00:02:00Z");
    assert_eq!(v["operations"], serde_json::json!(["poll", "reconcile"]));
    let r = f.post(
        "/api/v1/refresh",
        &[("Content-Type", "application/json")],
        b"{}",
    );
    assert_eq!(r.status, 202);
    assert_eq!(r.json()["coalesced"], true);
    assert_eq!(f.fake.refresh_count(), 2);
}

#[test]
fn silent_main_loop_gives_503_snapshot_timeout() {
    let f = Fixture::start_with(LoopMode::Silent, None, Duration::from_millis(200), 4096);
    f.get("/api/v1/state").assert_error(503, "snapshot_timeout");
    f.get("/api/v1/acme__app-1")
        .assert_error(503, "snapshot_timeout");
    f.post("/api/v1/refresh", &[], b"")
        .assert_error(503, "snapshot_timeout");
    let r = f.get("/");
    assert_eq!(r.status, 503);
    assert!(r.header("Content-Type").unwrap().starts_with("text/html"));
    assert!(r.body.contains("did not answer"));
}

#[test]
fn gone_main_loop_gives_503_unavailable() {
    let (tx, rx) = crossbeam_channel::unbounded();
    drop(rx);
    let h = spawn(HttpOptions::new("127.0.0.1", 0), tx).unwrap();
    request(h.local_addr(), "GET", "/api/v1/state", &[], b"").assert_error(503, "unavailable");
    drop(h);
}

#[test]
fn oversized_bodies_are_rejected_with_413() {
    let f = Fixture::start_with(
        LoopMode::Answer,
        Some(WEBHOOK_SECRET),
        Duration::from_secs(5),
        2048,
    );
    // Declared too large.
    let big = vec![b'x'; 5000];
    f.post("/api/v1/refresh", &[], &big)
        .assert_error(413, "payload_too_large");
    // Chunked with no declared length: read at most cap + 1 bytes.
    let mut chunked = Vec::new();
    for _ in 0..3 {
        chunked.extend_from_slice(b"400\r\n");
        chunked.extend_from_slice(&[b'y'; 0x400]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    f.post(
        "/api/v1/webhooks/github",
        &[("Transfer-Encoding", "chunked")],
        &chunked,
    )
    .assert_error(413, "payload_too_large");
    assert_eq!(f.fake.refresh_count(), 0);
    // Exactly at the cap is fine.
    let ok = vec![b' '; 2048];
    assert_eq!(f.post("/api/v1/refresh", &[], &ok).status, 202);
    assert_eq!(f.fake.refresh_count(), 1);
}

#[test]
fn webhook_requires_a_valid_signature() {
    let f = Fixture::start(LoopMode::Answer, Some(WEBHOOK_SECRET));
    let body = br#"{"action":"edited","projects_v2_item":{"id":1}}"#;
    let good = sign(&Secret::new(WEBHOOK_SECRET), body);
    let bad = sign(&Secret::new("wrong"), body);
    let event = ("X-GitHub-Event", "projects_v2_item");

    f.post("/api/v1/webhooks/github", &[event], body)
        .assert_error(401, "invalid_signature");
    f.post(
        "/api/v1/webhooks/github",
        &[event, ("X-Hub-Signature-256", bad.as_str())],
        body,
    )
    .assert_error(401, "invalid_signature");
    f.post(
        "/api/v1/webhooks/github",
        &[event, ("X-Hub-Signature-256", "sha256=nothex")],
        body,
    )
    .assert_error(401, "invalid_signature");
    // A valid signature over a different body.
    f.post(
        "/api/v1/webhooks/github",
        &[event, ("X-Hub-Signature-256", good.as_str())],
        b"{}",
    )
    .assert_error(401, "invalid_signature");
    assert_eq!(f.fake.refresh_count(), 0);

    let r = f.post(
        "/api/v1/webhooks/github",
        &[event, ("X-Hub-Signature-256", good.as_str())],
        body,
    );
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()["queued"], true);
    assert_eq!(
        r.json()["operations"],
        serde_json::json!(["poll", "reconcile"])
    );
    assert_eq!(f.fake.refresh_count(), 1);

    let ping = br#"{"zen":"Keep it logically awesome."}"#;
    let ping_sig = sign(&Secret::new(WEBHOOK_SECRET), ping);
    let r = f.post(
        "/api/v1/webhooks/github",
        &[
            ("X-GitHub-Event", "ping"),
            ("X-Hub-Signature-256", ping_sig.as_str()),
        ],
        ping,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["event"], "ping");

    let r = f.post(
        "/api/v1/webhooks/github",
        &[
            ("X-GitHub-Event", "star"),
            ("X-Hub-Signature-256", ping_sig.as_str()),
        ],
        ping,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["ignored"], true);
    assert_eq!(f.fake.refresh_count(), 1, "ping/other events queue nothing");
}

/// Issue 21 item 10: a delivery GitHub sends twice (same `X-GitHub-Delivery`) queues one
/// refresh; a failed one is not remembered, and an unsigned one cannot poison the memory.
#[test]
fn webhook_deliveries_with_the_same_delivery_id_are_deduplicated() {
    let f = Fixture::start(LoopMode::Answer, Some(WEBHOOK_SECRET));
    let body = br#"{"action":"edited","projects_v2_item":{"id":1}}"#;
    let sig = sign(&Secret::new(WEBHOOK_SECRET), body);
    let deliver = |id: &str, sig: &str| {
        f.post(
            "/api/v1/webhooks/github",
            &[
                ("X-GitHub-Event", "projects_v2_item"),
                ("X-GitHub-Delivery", id),
                ("X-Hub-Signature-256", sig),
            ],
            body,
        )
    };
    // An unsigned delivery is refused and not remembered.
    deliver("d-1", "sha256=00").assert_error(401, "invalid_signature");
    let r = deliver("d-1", &sig);
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(f.fake.refresh_count(), 1);
    let r = deliver("d-1", &sig);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["duplicate"], true);
    assert_eq!(r.json()["queued"], false);
    assert_eq!(f.fake.refresh_count(), 1, "the redelivery queued nothing");
    assert_eq!(deliver("d-2", &sig).status, 202);
    assert_eq!(f.fake.refresh_count(), 2);
    // No id, or one too long to be GitHub's: processed every time.
    for id in ["", &"x".repeat(65), &"x".repeat(65)] {
        assert_eq!(deliver(id, &sig).status, 202);
    }
    assert_eq!(f.fake.refresh_count(), 5);
}

#[test]
fn webhook_without_configured_secret_is_404() {
    let f = Fixture::start(LoopMode::Answer, None);
    let body = b"{}";
    let sig = sign(&Secret::new("anything"), body);
    f.post(
        "/api/v1/webhooks/github",
        &[
            ("X-GitHub-Event", "projects_v2_item"),
            ("X-Hub-Signature-256", sig.as_str()),
        ],
        body,
    )
    .assert_error(404, "webhook_disabled");
    assert_eq!(f.fake.refresh_count(), 0);
}

#[test]
fn dashboard_renders_rows_and_escapes_titles() {
    let f = Fixture::start(LoopMode::Answer, None);
    let r = f.get("/");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    assert_common_headers(&r);
    let csp = r.header("Content-Security-Policy").expect("CSP");
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'sha256-"));
    let b = &r.body;
    assert!(b.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{b}");
    assert!(!b.contains("<script>alert(1)"));
    assert!(!b.contains("<img"));
    assert!(
        !b.contains("javascript:"),
        "unsafe URL must not become a link"
    );
    assert!(b.contains("href=\"https://github.com/acme/app/issues/1\""));
    for id in ["acme__app-1", "acme__app-2", "acme__app-3", "acme__app-4"] {
        assert!(b.contains(&format!("data-issue=\"{id}\"")), "row {id}");
    }
    assert!(b.contains("max_attempts reached"));
    assert!(b.contains("agent exited with &lt;status&gt; 1"));
    assert!(b.contains("data-due-ms=\"61000\""), "retry countdown");
    assert!(b.contains("4990 of 5000 left"));
    assert!(b.contains("http-equiv=\"refresh\""));

    let head = request(f.addr, "HEAD", "/", &[], b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
}

#[test]
fn issue_page_shows_recent_events_escaped() {
    let f = Fixture::start(LoopMode::Answer, None);
    let r = f.get("/issues/acme__app-1");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("Content-Type").unwrap().starts_with("text/html"));
    assert!(r.body.contains("class=\"event\""));
    assert!(r.body.contains("session_started"));
    assert!(r.body.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!r.body.contains("<img"));
    assert!(r.body.contains("/srv/baton/acme__app-1"));

    let r = f.get("/issues/acme__app-999");
    assert_eq!(r.status, 404);
    assert!(r.header("Content-Type").unwrap().starts_with("text/html"));
    let r = f.get("/issues/%3Cscript%3Ex");
    assert_eq!(r.status, 404);
    assert!(!r.body.contains("<script>x"));
}

#[test]
fn bind_failure_is_reported_and_shutdown_releases_the_port() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (tx, _rx) = crossbeam_channel::unbounded();
    let err = spawn(HttpOptions::new("127.0.0.1", port), tx.clone()).unwrap_err();
    assert!(err.contains("cannot bind"), "{err}");
    drop(taken);

    let h = spawn(HttpOptions::new("127.0.0.1", 0), tx).unwrap();
    let addr = h.local_addr();
    assert!(addr.ip().is_loopback());
    drop(h);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "listener still open after shutdown"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn garbage_requests_do_not_kill_the_server() {
    let f = Fixture::start(LoopMode::Answer, None);
    let _ = send_raw(f.addr, b"\x00\x01\x02 garbage\r\n\r\n", b"");
    let _ = send_raw(f.addr, b"GET / HTTP/1.1\r\nExpect: nonsense\r\n\r\n", b"");
    let _ = send_raw(
        f.addr,
        b"POST /api/v1/refresh HTTP/1.1\r\nContent-Length: 99999999999999\r\nConnection: close\r\n\r\n",
        b"",
    );
    // Huge declared bodies on a GET route used to abort the process (tiny_http drained them
    // into a buffer of the declared size; see vendor/tiny_http/BATON-PATCHES.md).
    let r = parse_response(&send_raw(
        f.addr,
        b"GET /api/v1/state HTTP/1.1\r\nContent-Length: 18446744073709551615\r\nConnection: close\r\n\r\n",
        b"",
    ));
    assert_eq!(r.status, 200);
    // An endless header line is cut off instead of buffered.
    let mut long = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
    long.extend(vec![b'a'; 256 * 1024]);
    let _ = send_raw(f.addr, &long, b"");
    assert_eq!(f.get("/api/v1/state").status, 200);
}

/// A server on an ephemeral port reading `ops`, with a fake loop in `mode`.
fn ops_server(ops: &Arc<OpsShared>, mode: LoopMode) -> (baton::http::HttpHandle, FakeLoop) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let fake = FakeLoop::start(rx, mode);
    let opts = HttpOptions {
        ops: Arc::clone(ops),
        ..HttpOptions::new("127.0.0.1", 0)
    };
    (spawn(opts, tx).unwrap(), fake)
}

#[test]
fn metrics_is_a_strict_exposition_of_the_shared_snapshot() {
    let ops = Arc::new(OpsShared::default());
    let (h, _fake) = ops_server(&ops, LoopMode::Silent);
    let addr = h.local_addr();
    let r = request(addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r
        .header("Content-Type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    assert_common_headers(&r);
    let fams = prom::parse(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.body));
    assert_eq!(prom::value(&fams, "baton_polls_total", &[]), 0.0);
    // The loop is silent (wedged): /metrics still answers from the shared snapshot.
    ops.record_poll(
        Duration::from_millis(120),
        Some("github_auth"),
        Some(2),
        SystemTime::now(),
        Instant::now(),
    );
    ops.update_metrics(|m| m.dispatches += 1);
    let r = request(addr, "GET", "/metrics", &[], b"");
    let fams = prom::parse(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.body));
    assert_eq!(prom::value(&fams, "baton_polls_total", &[]), 1.0);
    assert_eq!(prom::value(&fams, "baton_dispatches_total", &[]), 1.0);
    assert_eq!(
        prom::value(
            &fams,
            "baton_poll_errors_total",
            &[("class", "github_auth")]
        ),
        1.0
    );
    assert_eq!(prom::value(&fams, "baton_tracker_poll_points", &[]), 2.0);
    let r = request(addr, "POST", "/metrics", &[], b"");
    assert_eq!(r.status, 405);
    drop(h);
}

#[test]
fn readyz_follows_the_shared_health_facts() {
    let ops = Arc::new(OpsShared::default());
    let (h, _fake) = ops_server(&ops, LoopMode::Silent);
    let addr = h.local_addr();
    let r = request(addr, "GET", "/readyz", &[], b"");
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["reason"], "starting");
    ops.update_health(|f| {
        f.recovery_done = true;
        f.polling_interval = Duration::from_secs(30);
    });
    assert_eq!(
        request(addr, "GET", "/readyz", &[], b"").json()["reason"],
        "never_polled"
    );
    let ok = |class| {
        ops.record_poll(
            Duration::ZERO,
            class,
            None,
            SystemTime::now(),
            Instant::now(),
        )
    };
    ok(None);
    let r = request(addr, "GET", "/readyz", &[], b"");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["ready"], true);
    ok(Some("github_api_status"));
    assert_eq!(
        request(addr, "GET", "/readyz", &[], b"").status,
        200,
        "a transient failure does not flip readiness"
    );
    ok(Some("github_auth"));
    let r = request(addr, "GET", "/readyz", &[], b"");
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["reason"], "tracker_failing");
    assert_eq!(r.json()["class"], "github_auth");
    ok(None);
    ops.update_health(|f| f.shutting_down = true);
    assert_eq!(
        request(addr, "GET", "/readyz", &[], b"").json()["reason"],
        "shutting_down"
    );
    drop(h);
}

#[test]
fn livez_asks_the_main_loop_and_gives_up_after_two_seconds() {
    let ops = Arc::new(OpsShared::default());
    let (h, _fake) = ops_server(&ops, LoopMode::Answer);
    let r = request(h.local_addr(), "GET", "/livez", &[], b"");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["live"], true);
    drop(h);
    let (h, _fake) = ops_server(&ops, LoopMode::Silent);
    let started = Instant::now();
    let r = request(h.local_addr(), "GET", "/livez", &[], b"");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["reason"], "main_loop_timeout");
    assert!(started.elapsed() >= Duration::from_millis(1900));
    drop(h);
}

/// Issue 21 item 6: whatever the other routes wait for (here a silent main loop), the probes
/// find a handler thread. Of 60 requests waiting for the loop, 48 hold a thread each and the
/// other 12 are answered `503 busy` at once; `/metrics`, `/readyz` and `/livez` still answer
/// while the 48 wait.
#[test]
fn probes_answer_while_other_routes_fill_the_pool() {
    let (tx, rx) = crossbeam_channel::unbounded();
    let _fake = FakeLoop::start(rx, LoopMode::Silent);
    let opts = HttpOptions {
        snapshot_timeout: Duration::from_secs(6),
        ..HttpOptions::new("127.0.0.1", 0)
    };
    let h = spawn(opts, tx).unwrap();
    let addr = h.local_addr();
    let (done_tx, done) = crossbeam_channel::unbounded();
    for _ in 0..60 {
        let done_tx = done_tx.clone();
        std::thread::spawn(move || {
            let _ = done_tx.send(request(addr, "GET", "/api/v1/state", &[], b""));
        });
    }
    for _ in 0..12 {
        let r = done
            .recv_timeout(Duration::from_secs(5))
            .expect("12 turned away");
        r.assert_error(503, "busy");
    }
    let r = request(addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = request(addr, "GET", "/readyz", &[], b"");
    assert_eq!(r.json()["reason"], "starting", "{}", r.body);
    let r = request(addr, "GET", "/livez", &[], b"");
    assert_eq!(r.json()["reason"], "main_loop_timeout", "{}", r.body);
    assert!(
        done.is_empty(),
        "the probes answered while the 48 still waited"
    );
    for _ in 0..48 {
        let r = done.recv_timeout(Duration::from_secs(10)).unwrap();
        r.assert_error(503, "snapshot_timeout");
    }
    drop(h);
}
