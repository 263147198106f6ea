//! systemd notify: exact datagrams to a bound path or abstract socket, no-ops without
//! `NOTIFY_SOCKET`, one warning for a failing socket, and `WATCHDOG_USEC`/`WATCHDOG_PID` parsing.
//!
//! A test binary of its own (not in `tests/it/`) because it installs a process-wide log capture.

#[path = "it/support/tempdir.rs"]
mod tempdir;
use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tempdir::TempDir;

use baton::ops::sdnotify::{
    parse_watchdog, status_line, summary, Notifier, STATUS_MAX_BYTES, WATCHDOG_MAX_INTERVAL,
    WATCHDOG_MIN_INTERVAL,
};

/// A fresh, unique name for this test process.
fn unique(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "baton-ops-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Read one pending datagram (the notifier sends synchronously, so it is already queued).
fn recv(sock: &UnixDatagram) -> String {
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a datagram");
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

/// Assert nothing else is queued.
fn assert_empty(sock: &UnixDatagram) {
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let err = sock.recv(&mut buf).expect_err("no further datagram");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    sock.set_nonblocking(false).unwrap();
}

/// Send the four messages and check the exact datagrams.
fn exercise(notifier: &Notifier, sock: &UnixDatagram) {
    assert!(notifier.is_enabled());
    assert!(notifier.ready());
    assert_eq!(recv(sock), "READY=1");
    assert!(notifier.status("running 2, retrying 1, parked 0; last poll 12:00:01Z"));
    assert_eq!(
        recv(sock),
        "STATUS=running 2, retrying 1, parked 0; last poll 12:00:01Z"
    );
    assert!(notifier.watchdog());
    assert_eq!(recv(sock), "WATCHDOG=1");
    assert!(notifier.stopping());
    assert_eq!(recv(sock), "STOPPING=1");
    assert_empty(sock);
}

#[test]
fn path_socket_gets_exact_datagrams() {
    let dir = TempDir::new("path");
    let path = dir.0.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let n = Notifier::from_vars(Some(path.as_os_str()), None, None, 1);
    exercise(&n, &sock);
}

#[test]
fn abstract_socket_gets_exact_datagrams() {
    let name = unique("abstract");
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    let env = format!("@{name}");
    let n = Notifier::from_vars(Some(OsStr::new(&env)), None, None, 1);
    exercise(&n, &sock);
}

#[test]
fn status_is_one_line_even_from_hostile_text() {
    let dir = TempDir::new("status");
    let path = dir.0.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let n = Notifier::from_vars(Some(path.as_os_str()), None, None, 1);
    assert!(n.status("  ok\nREADY=1\r\u{7}\u{85}tab\there  \n"));
    assert_eq!(recv(&sock), "STATUS=ok READY=1   tab here");
    let long = "é".repeat(STATUS_MAX_BYTES);
    assert!(n.status(&long));
    let got = recv(&sock);
    let text = got.strip_prefix("STATUS=").unwrap();
    assert!(text.len() <= STATUS_MAX_BYTES && text.len() >= STATUS_MAX_BYTES - 1);
    assert!(text.chars().all(|c| c == 'é'));
    assert_eq!(status_line("\n\n"), "");
}

#[test]
fn watchdog_cadence_comes_from_the_environment() {
    let dir = TempDir::new("wd");
    let path = dir.0.join("notify.sock");
    let _sock = UnixDatagram::bind(&path).unwrap();
    let n = Notifier::from_vars(
        Some(path.as_os_str()),
        Some(OsStr::new("30000000")),
        Some(OsStr::new("4242")),
        4242,
    );
    assert_eq!(n.watchdog_interval(), Some(Duration::from_secs(15)));
    // Another process's watchdog is not ours.
    let other = Notifier::from_vars(
        Some(path.as_os_str()),
        Some(OsStr::new("30000000")),
        Some(OsStr::new("1")),
        4242,
    );
    assert_eq!(other.watchdog_interval(), None);
    // No socket: no pings, so no interval either.
    let none = Notifier::from_vars(None, Some(OsStr::new("30000000")), None, 4242);
    assert_eq!(none.watchdog_interval(), None);
}

#[test]
fn without_notify_socket_everything_is_a_no_op() {
    for raw in [None, Some(OsStr::new(""))] {
        let n = Notifier::from_vars(raw, None, None, 1);
        assert!(!n.is_enabled());
        assert!(!n.ready());
        assert!(!n.status("x"));
        assert!(!n.watchdog());
        assert!(!n.stopping());
        assert_eq!(n.watchdog_interval(), None);
    }
    assert!(!Notifier::default().ready());
}

#[test]
fn unsupported_or_overlong_addresses_disable_without_panicking() {
    let long = format!("/{}", "x".repeat(200));
    let long_abstract = format!("@{}", "x".repeat(200));
    for raw in [
        "relative/path",
        "vsock:2:1234",
        long.as_str(),
        long_abstract.as_str(),
    ] {
        let n = Notifier::from_vars(Some(OsStr::new(raw)), Some(OsStr::new("1000000")), None, 1);
        assert!(!n.is_enabled(), "{raw}");
        assert!(!n.ready());
        assert_eq!(n.watchdog_interval(), None);
    }
}

/// Log records whose text mentions one of our test sockets.
static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let line = format!("{} {}", record.level(), record.args());
        if line.contains("nobody-listens.sock") {
            LOGGED.lock().unwrap().push(line);
        }
    }
    fn flush(&self) {}
}

#[test]
fn a_failing_socket_is_logged_once_and_never_stops_anything() {
    static CAPTURE: Capture = Capture;
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Trace);
    let dir = TempDir::new("gone");
    let path = dir.0.join("nobody-listens.sock");
    let n = Notifier::from_vars(Some(path.as_os_str()), None, None, 1);
    assert!(n.is_enabled());
    for _ in 0..3 {
        assert!(!n.ready());
        assert!(!n.watchdog());
        assert!(!n.status("still here"));
        assert!(!n.stopping());
    }
    let needle = path.to_string_lossy().to_string();
    let logged: Vec<String> = LOGGED
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(&needle))
        .cloned()
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].starts_with("WARN sd_notify failed"), "{logged:?}");
}

#[test]
fn watchdog_usec_parsing_saturates_and_rejects_garbage() {
    let p = |usec: &str, pid: Option<&str>, ours: u32| {
        parse_watchdog(Some(usec.as_bytes()), pid.map(str::as_bytes), ours)
    };
    assert_eq!(p("20000000", None, 7), Some(Duration::from_secs(10)));
    assert_eq!(p("20000000", Some("7"), 7), Some(Duration::from_secs(10)));
    assert_eq!(p("20000000", Some("8"), 7), None);
    assert_eq!(p("20000000", Some("seven"), 7), None);
    assert_eq!(p("20000000", Some(""), 7), None);
    assert_eq!(p("20000000", Some("99999999999999999999999"), 7), None);
    // Off, garbage, signs and whitespace.
    for bad in [
        "0",
        "",
        " 20000000",
        "20000000 ",
        "+20",
        "-20",
        "2e7",
        "20s",
        "0x10",
        "١٢",
    ] {
        assert_eq!(p(bad, None, 7), None, "{bad:?}");
    }
    // Infinity and values beyond u64 saturate to infinity: no watchdog, no overflow.
    assert_eq!(p(&u64::MAX.to_string(), None, 7), None);
    assert_eq!(p("99999999999999999999999999999999", None, 7), None);
    // Huge but finite, and tiny, values are clamped.
    assert_eq!(
        p(&(u64::MAX - 1).to_string(), None, 7),
        Some(WATCHDOG_MAX_INTERVAL)
    );
    assert_eq!(p("1", None, 7), Some(WATCHDOG_MIN_INTERVAL));
    assert_eq!(parse_watchdog(None, None, 7), None);
    assert_eq!(parse_watchdog(None, Some(b"7"), 7), None);
    // Non-UTF-8 bytes never panic.
    assert_eq!(parse_watchdog(Some(b"\xff\xfe"), Some(b"\xff"), 7), None);
}

#[test]
fn a_listener_that_never_reads_cannot_block_the_sender() {
    let dir = TempDir::new("full");
    let path = dir.0.join("notify.sock");
    let _sock = UnixDatagram::bind(&path).unwrap();
    let n = Notifier::from_vars(Some(path.as_os_str()), None, None, 1);
    // The queue fills up; then sends fail (non-blocking) instead of wedging the caller.
    let sent = (0..1_000_000).take_while(|_| n.watchdog()).count();
    assert!(sent > 0 && sent < 1_000_000, "sent {sent}");
    assert!(!n.watchdog());
}

#[test]
fn status_summary_names_counts_and_last_poll() {
    use std::time::UNIX_EPOCH;
    let at = UNIX_EPOCH + Duration::from_secs(1_767_268_800);
    assert_eq!(
        summary(2, 1, 0, Some(at)),
        "running 2, retrying 1, parked 0; last poll 2026-01-01T12:00:00Z"
    );
    assert_eq!(
        summary(0, 0, 3, None),
        "running 0, retrying 0, parked 3; last poll never"
    );
    // Clocks RFC 3339 cannot show never panic.
    let before = UNIX_EPOCH - Duration::from_secs(1);
    let far = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
    for t in [before, far] {
        assert!(summary(0, 0, 0, Some(t)).ends_with("last poll unknown"));
    }
}

#[test]
fn watchdog_pings_follow_the_pacer_and_stop_while_the_loop_is_wedged() {
    use baton::ops::sdnotify::WatchdogPacer;
    use std::time::Instant;
    let dir = TempDir::new("pace");
    let path = dir.0.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let n = Notifier::from_vars(
        Some(path.as_os_str()),
        Some(OsStr::new("30000000")),
        None,
        1,
    );
    let every = n.watchdog_interval().unwrap();
    let t0 = Instant::now();
    let mut pacer = WatchdogPacer::new(every, t0);
    // A stand-in main loop woken every second of virtual time, wedged from 60 s to 120 s.
    let mut pinged_at = Vec::new();
    for s in 0..=180u64 {
        let now = t0 + Duration::from_secs(s);
        let wedged = (60..120).contains(&s);
        if !wedged && pacer.due(now) {
            assert!(n.watchdog());
            assert_eq!(recv(&sock), "WATCHDOG=1");
            pinged_at.push(s);
        }
        assert!(pacer.deadline() <= now + every);
    }
    assert_eq!(pinged_at, [0, 15, 30, 45, 120, 135, 150, 165, 180]);
    assert_empty(&sock);
}

// ------------------------------------------------------------------ the real main loop

#[path = "it/support/clock.rs"]
mod clock;
#[path = "it/support/stand_ins.rs"]
mod stand_ins;

#[cfg(feature = "http")]
mod wedge {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    use std::sync::Condvar;

    use super::clock::ManualClock;
    use baton::http::routes::ControlClient;
    use baton::ops::shared::{NotLive, OpsShared};
    use baton::runtime::clock::Clock;
    use baton::runtime::daemon::DaemonOps;
    use crossbeam_channel::Receiver;

    use super::stand_ins::{
        daemon_options, minimal_workflow, run_with, spawn_daemon, StubTracker, TestEnv,
    };

    /// The daemon's clock, able to wedge the main loop: while wedged, the loop blocks in
    /// `timer` (called once per turn, right before its `select!`), as a loop stuck in a slow
    /// call would. The daemon itself has no test hook for this.
    struct WedgeClock {
        inner: ManualClock,
        /// (wedged, the loop is blocked)
        state: Mutex<(bool, bool)>,
        changed: Condvar,
    }

    impl WedgeClock {
        fn set(&self, wedged: bool) {
            self.state.lock().unwrap().0 = wedged;
            self.changed.notify_all();
        }

        fn stuck(&self) -> bool {
            self.state.lock().unwrap().1
        }
    }

    impl Clock for WedgeClock {
        fn now(&self) -> u64 {
            self.inner.now()
        }

        fn timer(&self, deadline: Option<u64>) -> Receiver<Instant> {
            let mut st = self.state.lock().unwrap();
            while st.0 {
                st.1 = true;
                st = self.changed.wait(st).unwrap();
            }
            st.1 = false;
            drop(st);
            self.inner.timer(deadline)
        }
    }

    /// Collect datagrams with arrival times on a background thread.
    fn listen(sock: UnixDatagram) -> Arc<Mutex<Vec<(Instant, String)>>> {
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&got);
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            loop {
                if let Ok(n) = sock.recv(&mut buf) {
                    let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                    sink.lock().unwrap().push((Instant::now(), m));
                }
            }
        });
        got
    }

    fn pings(got: &Mutex<Vec<(Instant, String)>>, after: Instant) -> usize {
        got.lock()
            .unwrap()
            .iter()
            .filter(|(at, m)| *at > after && m == "WATCHDOG=1")
            .count()
    }

    /// Wait (bounded, real time: the watchdog is wall-clock by design) until `f` holds.
    fn until(what: &str, f: impl Fn() -> bool) {
        let start = Instant::now();
        while !f() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timed out: {what}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_wedged_main_loop_stops_the_watchdog_pings_until_it_recovers() {
        let dir = TempDir::new("wedge");
        let wf = dir.0.join("WORKFLOW.md");
        std::fs::write(&wf, minimal_workflow(&dir.0)).unwrap();
        let path = dir.0.join("notify.sock");
        let got = listen(UnixDatagram::bind(&path).unwrap());
        // WATCHDOG_USEC = 100 ms: a ping every 50 ms.
        let notifier = Notifier::from_vars(
            Some(path.as_os_str()),
            Some(OsStr::new("100000")),
            None,
            std::process::id(),
        );
        let shared = Arc::new(OpsShared::default());
        let clock = Arc::new(WedgeClock {
            inner: ManualClock::new(1_700_000_000_000),
            state: Mutex::new((false, false)),
            changed: Condvar::new(),
        });
        let env = Arc::new(TestEnv::none());
        let (opts, inputs) = daemon_options(&wf, env, StubTracker::empty(), clock.clone());
        let ops = DaemonOps {
            shared: Arc::clone(&shared),
            notifier: Arc::new(notifier),
        };
        let exited = spawn_daemon(move || run_with(opts, ops, None));
        let control = inputs.control.clone();
        let t0 = Instant::now();
        until("READY=1 and pings", || {
            got.lock().unwrap().iter().any(|(_, m)| m == "READY=1") && pings(&got, t0) >= 3
        });
        assert!(shared.health().recovery_done);
        let live = || ControlClient::new(control.clone(), Duration::from_secs(2)).ping();
        assert_eq!(live(), Ok(()));

        // Wedge the loop; once it is stuck a ping goes unanswered, and the pings stop.
        clock.set(true);
        until("the loop is stuck", || clock.stuck());
        assert_eq!(live(), Err(NotLive::Timeout));
        let wedged_at = Instant::now();
        std::thread::sleep(Duration::from_millis(500)); // ten ping intervals
        assert_eq!(
            pings(&got, wedged_at),
            0,
            "no WATCHDOG=1 from a wedged loop"
        );

        // Un-wedge: the pings resume.
        clock.set(false);
        let back = Instant::now();
        until("pings again", || pings(&got, back) >= 3);
        assert_eq!(live(), Ok(()));
        inputs.shutdown.send(()).unwrap();
        let result = exited.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(result, Ok(()));
        until("STOPPING=1", || {
            got.lock().unwrap().iter().any(|(_, m)| m == "STOPPING=1")
        });
    }
}
