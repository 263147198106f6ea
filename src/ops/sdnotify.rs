//! systemd's notify protocol (`sd_notify(3)`) with std's `UnixDatagram`: one datagram per message
//! to `$NOTIFY_SOCKET` (a path or an `@abstract` name); a no-op without it. A failing socket is
//! logged once; the socket is non-blocking, so a wedged systemd cannot wedge the main loop.

use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use log::warn;

use super::DaemonOps;

/// Environment variables systemd sets for the main process only. [`take_systemd_env`] removes
/// them from Baton's own environment before any thread or child starts, so children never inherit
/// them and never talk to systemd in our name.
pub const CHILD_ENV_REMOVE: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// Longest `STATUS=` text sent, in bytes (longer lines are cut at a character boundary).
pub const STATUS_MAX_BYTES: usize = 512;

/// Shortest watchdog ping interval returned (a tiny `WATCHDOG_USEC` must not busy-loop).
pub const WATCHDOG_MIN_INTERVAL: Duration = Duration::from_millis(10);

/// Longest watchdog ping interval returned (a huge `WATCHDOG_USEC` must not overflow timers).
pub const WATCHDOG_MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Sends `READY=1`, `STATUS=…`, `WATCHDOG=1` and `STOPPING=1` to systemd. Built once at
/// startup by [`take_systemd_env`].
#[derive(Debug, Default)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    /// `$NOTIFY_SOCKET` as given, for the one warning.
    label: String,
    /// Half the watchdog period, when the watchdog applies to this process.
    watchdog: Option<Duration>,
    warned: AtomicBool,
}

impl Notifier {
    /// Build from `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` (tests pass their own).
    /// An empty, unsupported (e.g. `vsock:`) or unusable socket address logs one warning and
    /// yields a disabled notifier.
    pub fn from_vars(
        notify_socket: Option<&OsStr>,
        watchdog_usec: Option<&OsStr>,
        watchdog_pid: Option<&OsStr>,
        our_pid: u32,
    ) -> Self {
        let Some(raw) = notify_socket.filter(|s| !s.is_empty()) else {
            return Self::default();
        };
        let label = raw.to_string_lossy().into_owned();
        let target = open(raw.as_bytes())
            .inspect_err(|e| warn!("sd_notify disabled socket={label:?} error={e}"))
            .ok();
        let watchdog = target.as_ref().and_then(|_| {
            parse_watchdog(
                watchdog_usec.map(OsStr::as_bytes),
                watchdog_pid.map(OsStr::as_bytes),
                our_pid,
            )
        });
        Notifier {
            target,
            label,
            watchdog,
            ..Self::default()
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// How often the main loop should call [`Notifier::watchdog`]: half of `WATCHDOG_USEC`,
    /// clamped to [`WATCHDOG_MIN_INTERVAL`]..=[`WATCHDOG_MAX_INTERVAL`]. `None` when the watchdog
    /// is off, meant for another pid, or there is no socket.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    /// `READY=1`: startup is done. Each message returns whether its datagram was sent.
    pub fn ready(&self) -> bool {
        self.send("READY=1")
    }

    /// `STATUS=<line>`: a one-line summary; control characters (newlines included) become
    /// spaces and the text is cut to [`STATUS_MAX_BYTES`].
    pub fn status(&self, line: &str) -> bool {
        self.send(&format!("STATUS={}", status_line(line)))
    }

    /// Call every [`Notifier::watchdog_interval`] from the main loop.
    pub fn watchdog(&self) -> bool {
        self.send("WATCHDOG=1")
    }

    pub fn stopping(&self) -> bool {
        self.send("STOPPING=1")
    }

    /// Send one datagram; failures are logged once and otherwise ignored.
    fn send(&self, message: &str) -> bool {
        let Some((socket, addr)) = &self.target else {
            return false;
        };
        match socket.send_to_addr(message.as_bytes(), addr) {
            Ok(_) => true,
            Err(e) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    warn!(
                        "sd_notify failed; further notify errors are not logged socket={:?} error={e}",
                        self.label
                    );
                }
                false
            }
        }
    }
}

/// Build the [`DaemonOps`] of a `baton` run (a notifier from the environment, fresh shared
/// metrics) and scrub the systemd variables from the process environment.
///
/// Call it first thing in the daemon, **before any thread is spawned**: `std::env::remove_var`
/// is only sound while no other thread may read or write the environment concurrently (libc's
/// `getenv`/`setenv` are not synchronized; Rust 2024 marks `remove_var` `unsafe` for this
/// reason). At that point `main` has parsed arguments and set up logging, neither of which
/// starts a thread; signal handlers, the watcher, HTTP, tracker and worker threads all come
/// later. Every child process is spawned later too, so none can inherit the variables.
pub fn take_systemd_env() -> DaemonOps {
    let [socket, usec, pid] = CHILD_ENV_REMOVE.map(std::env::var_os);
    let (socket, usec, pid) = (socket.as_deref(), usec.as_deref(), pid.as_deref());
    let notifier = Notifier::from_vars(socket, usec, pid, std::process::id());
    for name in CHILD_ENV_REMOVE {
        std::env::remove_var(name);
    }
    DaemonOps {
        notifier: Arc::new(notifier),
        #[cfg(feature = "http")]
        shared: Default::default(),
    }
}

/// When the main loop pings the watchdog next. Driven by the caller's clock, so tests can use a
/// virtual one; the loop wakes up by [`WatchdogPacer::deadline`] and pings when
/// [`WatchdogPacer::due`] says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogPacer {
    every: Duration,
    next: Instant,
}

impl WatchdogPacer {
    /// A pacer whose first ping is due at `now`.
    pub fn new(every: Duration, now: Instant) -> Self {
        WatchdogPacer { every, next: now }
    }

    /// The main loop's latest wake-up.
    pub fn deadline(&self) -> Instant {
        self.next
    }

    /// Whether a ping is due at `now`; if so, the next one is scheduled `every` after `now`.
    pub fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now.checked_add(self.every).unwrap_or(now);
        true
    }
}

/// An unbound, non-blocking datagram socket and `$NOTIFY_SOCKET` resolved.
fn open(raw: &[u8]) -> std::io::Result<(UnixDatagram, SocketAddr)> {
    let addr = match raw.split_first() {
        Some((b'@', name)) => SocketAddr::from_abstract_name(name)?,
        Some((b'/', _)) => SocketAddr::from_pathname(OsStr::from_bytes(raw))?,
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "NOTIFY_SOCKET must be an absolute path or an @abstract name",
            ))
        }
    };
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    Ok((socket, addr))
}

/// Half the watchdog period from `WATCHDOG_USEC`, if the watchdog is meant for `our_pid`
/// (`WATCHDOG_PID` unset or equal). `0`, garbage and "infinity" (`u64::MAX`, or more digits
/// than a `u64` holds) disable it; the result is clamped to
/// [`WATCHDOG_MIN_INTERVAL`]..=[`WATCHDOG_MAX_INTERVAL`]. Never panics.
pub fn parse_watchdog(
    watchdog_usec: Option<&[u8]>,
    watchdog_pid: Option<&[u8]>,
    our_pid: u32,
) -> Option<Duration> {
    if watchdog_pid.is_some_and(|pid| parse_digits(pid) != Some(u64::from(our_pid))) {
        return None;
    }
    let usec = parse_digits(watchdog_usec?)?;
    if usec == 0 || usec == u64::MAX {
        return None;
    }
    let half = Duration::from_micros(usec / 2);
    Some(half.clamp(WATCHDOG_MIN_INTERVAL, WATCHDOG_MAX_INTERVAL))
}

/// A non-empty ASCII decimal number that fits a `u64` (no sign, no spaces).
fn parse_digits(bytes: &[u8]) -> Option<u64> {
    let digits = std::str::from_utf8(bytes).ok()?;
    digits
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| digits.parse().ok())?
}

/// The `STATUS=` summary: `running 2, retrying 1, parked 0; last poll 2026-01-01T12:00:00Z`
/// (`last poll never` before the first one; `last poll unknown` for a clock outside 1970..=9999,
/// which RFC 3339 formatting cannot show).
pub fn summary(running: u64, retrying: u64, parked: u64, last_poll: Option<SystemTime>) -> String {
    const YEAR_10000: u64 = 253_402_300_800;
    let formattable = |t: &SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .is_ok_and(|d| d.as_secs() < YEAR_10000)
    };
    let last = match last_poll {
        None => "never".to_string(),
        Some(t) if formattable(&t) => crate::timefmt::rfc3339(t),
        Some(_) => "unknown".to_string(),
    };
    format!("running {running}, retrying {retrying}, parked {parked}; last poll {last}")
}

/// One line of status text: control characters become spaces, the ends are trimmed, and the
/// text is cut to [`STATUS_MAX_BYTES`] at a character boundary.
pub fn status_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(STATUS_MAX_BYTES));
    for c in text.trim().chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > STATUS_MAX_BYTES {
            break;
        }
        out.push(c);
    }
    out.trim_end().to_string()
}
