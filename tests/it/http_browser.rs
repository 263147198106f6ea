//! The dashboard in a real browser: headless Chromium loads `/` (and an issue page) from a
//! server on an ephemeral loopback port and dumps the DOM after scripts ran. Asserts rows are
//! present, the page's own script ran (so JavaScript was on), and nothing from a title ran.
//!
//! Chromium: `$BATON_CHROMIUM`, else `chromium`/`chromium-browser`/`google-chrome` on PATH.
//! Without one the test skips with a reason, except under `CI=true`, where it fails.

use crate::support::http as http_support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_support::*;

fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BATON_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in [
            "chromium",
            "chromium-browser",
            "google-chrome",
            "google-chrome-stable",
        ] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Chromium (the tests calling this are ignored unless run with `--include-ignored`).
fn chromium_or_skip(_test: &str) -> Option<PathBuf> {
    Some(find_chromium().unwrap_or_else(|| {
        crate::support::tool::missing("no Chromium found (BATON_CHROMIUM)", ".ci/setup-http.sh")
    }))
}

/// Run headless Chromium with `--dump-dom` on `url`; bounded wait, killed on timeout.
fn dump_dom(chromium: &Path, url: &str) -> String {
    let profile = std::env::temp_dir().join(format!(
        "baton-chromium-{}-{}",
        std::process::id(),
        url.len()
    ));
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
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let dom = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        status.success() && !dom.is_empty(),
        "chromium failed ({status}); stderr:\n{err}"
    );
    dom
}

#[test]
#[ignore = "needs headless Chromium (BATON_CHROMIUM, .ci/setup-http.sh)"]
fn dashboard_renders_rows_in_chromium_without_running_title_scripts() {
    let Some(chromium) = chromium_or_skip("dashboard_renders_rows_in_chromium") else {
        return;
    };
    let f = Fixture::start(LoopMode::Answer, None);
    let dom = dump_dom(&chromium, &format!("http://{}/", f.addr));

    // Our own (hash-allowed) script ran, so JavaScript was enabled…
    assert!(
        dom.contains("data-js=\"on\""),
        "page script did not run:\n{dom}"
    );
    // …yet nothing from the titles ran or became markup.
    assert!(
        dom.contains("<title>Baton</title>"),
        "title changed:\n{dom}"
    );
    assert!(!dom.contains("PWNED"), "title script executed:\n{dom}");
    assert!(
        !dom.contains("data-injected"),
        "onerror handler executed:\n{dom}"
    );
    assert!(!dom.contains("<img"), "title became an element:\n{dom}");
    assert!(dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));

    // Rows of every section.
    for (class, id) in [
        ("running-row", "acme__app-1"),
        ("running-row", "acme__app-2"),
        ("retry-row", "acme__app-3"),
        ("blocked-row", "acme__app-4"),
    ] {
        assert!(
            dom.contains(&format!("<tr class=\"{class}\" data-issue=\"{id}\">")),
            "missing {class} {id}:\n{dom}"
        );
    }
    assert!(dom.contains("href=\"https://github.com/acme/app/issues/1\""));
    assert!(!dom.contains("javascript:"), "unsafe URL became a link");
    assert!(dom.contains("max_attempts reached"));
    // The countdown script rewrote the retry cell (61 s → "1m 0xs" or less).
    assert!(
        dom.contains("data-due-ms=\"61000\">1m 0") || dom.contains("data-due-ms=\"61000\">59s")
    );
}

#[test]
#[ignore = "needs headless Chromium (BATON_CHROMIUM, .ci/setup-http.sh)"]
fn issue_page_renders_events_in_chromium() {
    let Some(chromium) = chromium_or_skip("issue_page_renders_events_in_chromium") else {
        return;
    };
    let f = Fixture::start(LoopMode::Answer, None);
    let dom = dump_dom(&chromium, &format!("http://{}/issues/acme__app-1", f.addr));
    assert!(
        dom.contains("data-js=\"on\""),
        "page script did not run:\n{dom}"
    );
    assert_eq!(dom.matches("<tr class=\"event\">").count(), 2, "{dom}");
    assert!(dom.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!dom.contains("<img"));
    assert!(dom.contains("<title>Baton · acme__app-1</title>"), "{dom}");
}
