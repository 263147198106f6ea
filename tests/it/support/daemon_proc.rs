//! A `baton` daemon child process for process-level tests: captured stderr, the HTTP API on an
//! ephemeral port, signals, bounded waits. Waits are bounded polls, never fixed sleeps.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Poll `f` every 20 ms until it returns `Some`, or panic after `limit` with `what` and `log()`.
pub fn wait_until<T>(
    what: &str,
    limit: Duration,
    log: impl Fn() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if start.elapsed() >= limit {
            panic!(
                "timed out after {limit:?} waiting for {what}; log:\n{}",
                log()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `run …` lines an agent stand-in appended to `log` (one per invocation).
pub fn logged_runs(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("run "))
        .map(str::to_string)
        .collect()
}

/// Collect `child`'s piped stderr into a shared string on a reader thread (ends at EOF).
pub fn capture_stderr(child: &mut Child) -> Arc<Mutex<String>> {
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let log = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = stderr.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    log
}

/// A running `baton` with captured stderr; killed on drop.
pub struct DaemonProc {
    child: Option<Child>,
    log: Arc<Mutex<String>>,
}

/// The built `baton` without the caller's token, log filter or journald stream.
pub fn bare_baton() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
    c.env_remove("GITHUB_TOKEN")
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM");
    c
}

/// The `baton` command for `workflow` with a private `HOME` and the given environment.
pub fn baton_command(workflow: &Path, home: &Path, envs: &[(&str, String)]) -> Command {
    let mut cmd = bare_baton();
    cmd.arg("--port")
        .arg("0")
        .arg("--log-level")
        .arg("debug")
        .arg(workflow)
        .env_remove("STATE_DIRECTORY")
        .env_remove("XDG_STATE_HOME")
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

impl DaemonProc {
    /// Start `baton` (see [`baton_command`]).
    pub fn start(workflow: &Path, home: &Path, envs: &[(&str, String)]) -> DaemonProc {
        DaemonProc::spawn(baton_command(workflow, home, envs))
    }

    /// Start a prepared [`baton_command`] (e.g. with resource limits set for the child).
    pub fn spawn(mut cmd: Command) -> DaemonProc {
        let mut child = cmd.spawn().expect("spawn baton");
        let log = capture_stderr(&mut child);
        DaemonProc {
            child: Some(child),
            log,
        }
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Everything logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Wait for `f`, panicking with the log on timeout.
    pub fn wait<T>(&self, what: &str, limit: Duration, f: impl FnMut() -> Option<T>) -> T {
        wait_until(what, limit, || self.log(), f)
    }

    /// Wait until the log contains `needle`.
    pub fn wait_log(&self, needle: &str, limit: Duration) {
        self.wait(needle, limit, || self.log().contains(needle).then_some(()));
    }

    fn addr(&self) -> String {
        self.wait("the HTTP listening line", Duration::from_secs(30), || {
            let log = self.log();
            let i = log.find("http server listening addr=")?;
            let rest = &log[i + "http server listening addr=".len()..];
            Some(rest.split_whitespace().next()?.to_string())
        })
    }

    /// `GET path` on the daemon's API: (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path)
    }

    /// `POST path` with an empty body: (status, body).
    pub fn post(&self, path: &str) -> (u16, String) {
        self.request("POST", path)
    }

    /// One request on a fresh connection: (status, body); status 0 when there was no answer.
    pub fn request(&self, method: &str, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(self.addr()).expect("connect to baton");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).unwrap();
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
        let status = raw
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
        (status, body.unwrap_or_default())
    }

    /// `GET /api/v1/state` as JSON (`Null` when it is not: e.g. the daemon is stopping).
    pub fn state(&self) -> Value {
        serde_json::from_str(&self.get("/api/v1/state").1).unwrap_or(Value::Null)
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Send `sig` to the daemon process only.
    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }

    /// SIGTERM, then wait (bounded) for the exit status.
    pub fn terminate(mut self, limit: Duration) -> ExitStatus {
        self.stop_with(libc::SIGTERM, limit)
    }

    /// Send `sig` and wait (bounded) for the exit status.
    pub fn stop_with(&mut self, sig: i32, limit: Duration) -> ExitStatus {
        self.signal(sig);
        let mut child = self.child.take().unwrap();
        wait_until(
            "baton to exit",
            limit,
            || self.log(),
            || child.try_wait().unwrap(),
        )
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
