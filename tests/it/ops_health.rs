//! `/livez` and `/readyz` decisions on a virtual clock, and the liveness probe against a
//! responsive and a wedged "main loop".

use std::time::{Duration, Instant};

use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::support::clock::ManualClock;
use baton::agent::AgentRunner;
use baton::http::routes::{handle, App, ControlClient, Incoming, Route};
use baton::model::Issue;
use baton::ops::sdnotify::Notifier;
use baton::ops::shared::{
    is_transient_class, ready_window, readyz, HealthFacts, NotLive, NotReady, OpsShared, READY_JSON,
};
use baton::runtime::daemon::{DaemonOps, RunnerFactory, TrackerFactory, TRACKER_JOB_BOUND_MS};
use baton::status::ControlRequest;
use baton::tracker::{Tracker, TrackerBudget, TrackerError};
use baton::workflow::config::ServiceConfig;
use crossbeam_channel::{unbounded, Sender};

use crate::support::stand_ins::{
    daemon_options_with, minimal_workflow, run_with, spawn_daemon, NoRunner, TestEnv,
};
use crate::support::tempdir::TempDir;

const SEC: Duration = Duration::from_secs(1);

/// A ready daemon: recovery done, polling every 30 s, last success at `t0`.
fn ready_at(t0: Instant) -> HealthFacts {
    HealthFacts {
        recovery_done: true,
        polling_interval: 30 * SEC,
        last_success: Some(t0),
        ..HealthFacts::default()
    }
}

#[test]
fn transient_and_non_transient_classes() {
    for class in [
        "github_auth",
        "missing_tracker_project",
        "missing_tracker_token",
        "unsupported_tracker_kind",
        "invalid_config",
    ] {
        assert!(!is_transient_class(class), "{class}");
    }
    for class in [
        "github_api_status",
        "github_api_request",
        "github_rate_limited",
        "github_graphql_errors",
        "github_unknown_payload",
        "something_new",
    ] {
        assert!(is_transient_class(class), "{class}");
    }
}

#[test]
fn window_is_three_intervals_but_at_least_a_minute() {
    assert_eq!(ready_window(5 * SEC), 60 * SEC);
    assert_eq!(ready_window(30 * SEC), 90 * SEC);
    assert_eq!(ready_window(Duration::MAX), Duration::MAX);
}

#[test]
fn ready_after_recovery_and_a_successful_poll() {
    let t0 = Instant::now();
    assert_eq!(readyz(&ready_at(t0), t0), Ok(()));
    assert_eq!(readyz(&ready_at(t0), t0 + 90 * SEC), Ok(()));
    // A clock that went backwards is not an error.
    assert_eq!(readyz(&ready_at(t0 + SEC), t0), Ok(()));
}

#[test]
fn not_ready_before_recovery_or_the_first_poll() {
    let t0 = Instant::now();
    let mut inputs = ready_at(t0);
    inputs.last_success = None;
    assert_eq!(readyz(&inputs, t0), Err(NotReady::NeverPolled));
    inputs.recovery_done = false;
    assert_eq!(readyz(&inputs, t0), Err(NotReady::Starting));
    // A failed first poll names its class, even a transient one.
    let mut first_failed = ready_at(t0);
    first_failed.last_success = None;
    first_failed.last_failure_class = Some("github_api_status");
    assert_eq!(
        readyz(&first_failed, t0),
        Err(NotReady::TrackerFailing {
            class: "github_api_status".into()
        })
    );
}

#[test]
fn a_rejected_token_flips_at_once_and_a_success_flips_back() {
    let t0 = Instant::now();
    let mut inputs = ready_at(t0);
    inputs.last_failure_class = Some("github_auth");
    let err = readyz(&inputs, t0 + SEC).unwrap_err();
    assert_eq!(
        err,
        NotReady::TrackerFailing {
            class: "github_auth".into()
        }
    );
    let body: serde_json::Value = serde_json::from_str(&err.to_json()).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "ready": false,
            "reason": "tracker_failing",
            "class": "github_auth",
            "message": "tracker failing with class github_auth",
        })
    );
    // The next poll succeeds.
    inputs.last_failure_class = None;
    inputs.last_success = Some(t0 + 31 * SEC);
    assert_eq!(readyz(&inputs, t0 + 31 * SEC), Ok(()));
}

#[test]
fn a_rejected_reload_is_not_ready_until_a_reload_succeeds() {
    let t0 = Instant::now();
    let mut inputs = ready_at(t0);
    let why = "/srv/WORKFLOW.md: missing_tracker_token: tracker.token is missing";
    inputs.reload_error = Some(why.to_string());
    let err = readyz(&inputs, t0).unwrap_err();
    assert_eq!(json(&err)["reason"], "reload_failed");
    let body: serde_json::Value = serde_json::from_str(&err.to_json()).unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("previous config is in force") && message.contains(why),
        "{message}"
    );
    inputs.reload_error = None;
    assert_eq!(readyz(&inputs, t0), Ok(()));
}

#[test]
fn transient_failures_flip_only_after_the_window() {
    let t0 = Instant::now();
    let mut inputs = ready_at(t0);
    for class in [
        "github_api_status",
        "github_rate_limited",
        "github_api_request",
    ] {
        inputs.last_failure_class = Some(class);
        assert_eq!(readyz(&inputs, t0 + 90 * SEC), Ok(()), "{class}");
        assert_eq!(
            readyz(&inputs, t0 + 91 * SEC),
            Err(NotReady::TrackerFailing {
                class: class.into()
            })
        );
    }
}

#[test]
fn polls_that_stop_happening_flip_after_the_window() {
    let t0 = Instant::now();
    let inputs = ready_at(t0);
    let err = readyz(&inputs, t0 + 100 * SEC).unwrap_err();
    assert_eq!(err, NotReady::Stale { seconds: 100 });
    assert_eq!(json(&err)["reason"], "poll_stale");
    assert_eq!(json(&err)["message"], "no successful poll for 100 s");
}

/// The `/readyz` 503 body of `e`.
fn json(e: &NotReady) -> serde_json::Value {
    serde_json::from_str(&e.to_json()).unwrap()
}

#[test]
fn shutting_down_wins() {
    let t0 = Instant::now();
    let mut inputs = ready_at(t0);
    inputs.shutting_down = true;
    inputs.last_failure_class = Some("github_auth");
    let err = readyz(&inputs, t0).unwrap_err();
    assert_eq!(err, NotReady::ShuttingDown);
    let body: serde_json::Value = serde_json::from_str(&err.to_json()).unwrap();
    assert_eq!(body["reason"], "shutting_down");
    assert_eq!(body["message"], "shutting down");
    assert!(body.get("class").is_none());
    assert_eq!(json(&NotReady::NeverPolled)["message"], "never polled");
    let ok: serde_json::Value = serde_json::from_str(READY_JSON).unwrap();
    assert_eq!(ok["ready"], true);
}

/// An injected blocking control request: the loop says it entered, then hangs until released.
type Wedge = (Sender<()>, crossbeam_channel::Receiver<()>);

/// A stand-in main loop: answers liveness requests unless `wedged` receives a blocking
/// control request first.
fn spawn_loop() -> (Sender<ControlRequest>, Sender<Wedge>) {
    let (control_tx, control_rx) = unbounded::<ControlRequest>();
    let (wedge_tx, wedge_rx) = unbounded::<Wedge>();
    std::thread::spawn(move || loop {
        crossbeam_channel::select! {
            recv(control_rx) -> request => match request {
                Ok(ControlRequest::Ping(reply)) => { let _ = reply.send(()); }
                Ok(_) => {}
                Err(_) => return,
            },
            recv(wedge_rx) -> wedge => if let Ok((entered, block)) = wedge {
                let _ = entered.send(());
                let _ = block.recv();
            },
        }
    });
    (control_tx, wedge_tx)
}

#[test]
fn probe_sees_a_live_loop_then_a_wedged_one_then_a_gone_one() {
    let (control, wedge) = spawn_loop();
    let client = ControlClient::new(control.clone(), 5 * SEC);
    assert_eq!(client.ping(), Ok(()));
    let (release, block) = unbounded::<()>();
    let (entered_tx, entered) = unbounded::<()>();
    wedge.send((entered_tx, block)).unwrap();
    // The loop is inside the wedge before the probe (select! may pick either ready channel).
    entered.recv_timeout(5 * SEC).unwrap();
    assert_eq!(client.ping(), Err(NotLive::Timeout));
    drop(release);
    // Released: it answers again (the stale request from the timed-out probe is harmless).
    assert_eq!(client.ping(), Ok(()));
    let (closed, _) = unbounded();
    assert_eq!(ControlClient::new(closed, SEC).ping(), Err(NotLive::Gone));
    // A loop that drops the request without answering is gone, not slow.
    let (dropping, requests) = unbounded::<ControlRequest>();
    std::thread::spawn(move || requests.iter().for_each(drop));
    assert_eq!(ControlClient::new(dropping, SEC).ping(), Err(NotLive::Gone));
}

/// A tracker whose board read reports that it started, then blocks until released (a FIFO in a
/// Backlog.md board, a connection that never answers).
struct BlockingBoard {
    entered: Sender<()>,
    release: crossbeam_channel::Receiver<()>,
}

impl Tracker for BlockingBoard {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        let _ = self.entered.send(());
        let _ = self.release.recv();
        Ok(Vec::new())
    }
    fn fetch_issues_by_states(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(Vec::new())
    }
    fn fetch_issue_states_by_ids(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(Vec::new())
    }
    fn validate(&self) -> Result<(), TrackerError> {
        Ok(())
    }
    fn reset_cache(&self) {}
    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }
}

/// Wait (bounded, real time: the watchdog is wall-clock by design) until `f` holds.
fn until(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < 10 * SEC, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_tracker_thread_stuck_on_one_job_fails_liveness_and_stops_the_watchdog() {
    // Issue 21, item 4: a read that never returns must get Baton restarted.
    let dir = TempDir::new("stuck-tracker");
    let wf = dir.join("WORKFLOW.md");
    std::fs::write(&wf, minimal_workflow(&dir)).unwrap();
    let sock = UnixDatagram::bind(dir.join("notify.sock")).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let pings = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let sink = Arc::clone(&pings);
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while Arc::strong_count(&sink) > 1 {
            if let Ok(n) = sock.recv(&mut buf) {
                if &buf[..n] == b"WATCHDOG=1" {
                    sink.lock().unwrap().push(Instant::now());
                }
            }
        }
    });
    let pings_since = |t: Instant| pings.lock().unwrap().iter().filter(|p| **p > t).count();
    // WATCHDOG_USEC = 100 ms: a ping every 50 ms.
    let notifier = Notifier::from_vars(
        Some(dir.join("notify.sock").as_os_str()),
        Some(std::ffi::OsStr::new("100000")),
        None,
        std::process::id(),
    );
    let (entered_tx, entered) = unbounded();
    let (release, release_rx) = unbounded::<()>();
    let board = Arc::new(BlockingBoard {
        entered: entered_tx,
        release: release_rx,
    });
    let factories: (TrackerFactory, RunnerFactory) = (
        Box::new(move |_: &ServiceConfig| Ok(Arc::clone(&board) as Arc<dyn Tracker>)),
        Box::new(|_: &ServiceConfig| Arc::new(NoRunner) as Arc<dyn AgentRunner>),
    );
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (opts, inputs) =
        daemon_options_with(&wf, Arc::new(TestEnv::none()), factories, clock.clone());
    let shared = Arc::new(OpsShared::default());
    let ops = DaemonOps {
        shared: Arc::clone(&shared),
        notifier: Arc::new(notifier),
    };
    let exited = spawn_daemon(move || run_with(opts, ops, None));
    let app = App {
        control: ControlClient::new(inputs.control.clone(), 2 * SEC),
        webhook_secret: None,
        ops: Arc::clone(&shared),
        deliveries: Default::default(),
    };
    let livez = || handle(&Route::Livez, &app, &Incoming::default(), SystemTime::now());
    entered
        .recv_timeout(10 * SEC)
        .expect("the first board read");
    until("pings while the read is young", || {
        pings_since(Instant::now() - SEC) >= 2
    });
    assert_eq!(livez().status, 200);

    clock.advance(TRACKER_JOB_BOUND_MS);
    until("the stuck thread noticed", || {
        shared.health().stuck_thread.is_some()
    });
    assert_eq!(shared.health().stuck_thread, Some("tracker-poll"));
    let reply = livez();
    assert_eq!(reply.status, 503, "{}", reply.body);
    let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(body["reason"], "tracker_stuck");
    assert_eq!(body["thread"], "tracker-poll");
    let quiet_from = Instant::now();
    std::thread::sleep(Duration::from_millis(400)); // eight ping intervals
    assert_eq!(
        pings_since(quiet_from),
        0,
        "no WATCHDOG=1 while a tracker thread is stuck"
    );

    // The read returns: liveness and the pings come back.
    drop(release);
    until("the thread recovered", || {
        shared.health().stuck_thread.is_none()
    });
    let back = Instant::now();
    until("pings again", || pings_since(back) >= 2);
    assert_eq!(livez().status, 200);
    inputs.shutdown.send(()).unwrap();
    assert_eq!(exited.recv_timeout(10 * SEC).unwrap(), Ok(()));
}
