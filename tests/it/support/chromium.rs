//! Headless Chromium for the tests that render Baton's pages in a real browser.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// `$BATON_CHROMIUM`, else `chromium`/`chromium-browser`/`google-chrome(-stable)` on `PATH`;
/// a missing browser fails the test with the command that installs it.
pub fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("BATON_CHROMIUM").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .flat_map(|d| names.map(|n| d.join(n)))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            super::tool::missing("no Chromium found (BATON_CHROMIUM)", ".ci/setup-http.sh")
        })
}

/// The DOM of `url` after its scripts ran (`--dump-dom`, 2 s of virtual time), rendered with a
/// fresh profile; Chromium is killed after `limit`. `Err` (with its stderr) when it failed or
/// printed nothing.
pub fn dump_dom(chromium: &Path, url: &str, limit: Duration) -> Result<String, String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let profile = std::env::temp_dir().join(format!("baton-chromium-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
    let read_all = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read_all(Box::new(child.stdout.take().unwrap()));
    let err = read_all(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (dom, err) = (out.join().unwrap(), err.join().unwrap());
    let _ = std::fs::remove_dir_all(&profile);
    match status {
        Some(st) if st.success() && !dom.is_empty() => Ok(dom),
        Some(st) => Err(format!("chromium failed ({st}); stderr:\n{err}")),
        None => Err(format!(
            "chromium did not finish within {limit:?}; stderr:\n{err}"
        )),
    }
}
