//! The dashboard in a real browser: headless Chromium loads `/` (and an issue page) from a
//! server on an ephemeral loopback port and dumps the DOM after scripts ran. Asserts rows are
//! present, the page's own script ran (so JavaScript was on), and nothing from a title ran.
//!
//! Chromium: `$BATON_CHROMIUM`, else `chromium`/`chromium-browser`/`google-chrome` on PATH.
//! Without one the test skips with a reason, except under `CI=true`, where it fails.

use crate::support::http as http_support;

use std::time::Duration;

use http_support::*;

use crate::support::chromium::{chromium, dump_dom};

#[test]
#[ignore = "needs headless Chromium (BATON_CHROMIUM, .ci/setup-http.sh)"]
fn dashboard_renders_rows_in_chromium_without_running_title_scripts() {
    let chromium = chromium();
    let f = Fixture::start(LoopMode::Answer, None);
    let dom = dump_dom(
        &chromium,
        &format!("http://{}/", f.addr),
        Duration::from_secs(90),
    )
    .unwrap();

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
    let chromium = chromium();
    let f = Fixture::start(LoopMode::Answer, None);
    let dom = dump_dom(
        &chromium,
        &format!("http://{}/issues/acme__app-1", f.addr),
        Duration::from_secs(90),
    )
    .unwrap();
    assert!(
        dom.contains("data-js=\"on\""),
        "page script did not run:\n{dom}"
    );
    assert_eq!(dom.matches("<tr class=\"event\">").count(), 2, "{dom}");
    assert!(dom.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!dom.contains("<img"));
    assert!(dom.contains("<title>Baton · acme__app-1</title>"), "{dom}");
}
