//! Server-rendered, self-contained HTML for the dashboard (`/`) and the per-issue page
//! (`/issues/<identifier>`). Every value that came from the tracker or an agent goes through
//! [`escape`]; links to issues are emitted only for `http`/`https` URLs ([`safe_link`]).
//!
//! The pages reload themselves with a meta refresh; one constant inline script ticks the retry
//! countdowns between reloads. The `Content-Security-Policy` ([`CONTENT_SECURITY_POLICY`]) allows
//! exactly that script by its SHA-256 hash, so even a missed escape could not run injected code.

use crate::text::truncate_chars;
use std::fmt::Write as _;
use std::time::SystemTime;

use crate::status::{
    BlockedRow, Budget, HostRow, IssueDetail, RetryRow, RunningRow, StateSnapshot, TrackerHealth,
};
use crate::timefmt;

/// Seconds between automatic reloads of the dashboard and issue pages.
pub const REFRESH_SECONDS: u32 = 5;

/// Longest agent message shown in a dashboard cell (characters); the issue page shows more.
const CELL_MESSAGE_CHARS: usize = 200;
/// Longest event message shown on the issue page (characters).
const EVENT_MESSAGE_CHARS: usize = 2000;

/// The only script on any page: ticks `[data-due-ms]` countdowns and marks the page as live.
const COUNTDOWN_SCRIPT: &str = "(function(){var t0=Date.now();\
document.documentElement.setAttribute('data-js','on');\
function fmt(ms){var s=Math.max(0,Math.ceil(ms/1000));var m=Math.floor(s/60);s%=60;\
return m>0?m+'m '+(s<10?'0':'')+s+'s':s+'s';}\
function tick(){var els=document.querySelectorAll('[data-due-ms]');\
for(var i=0;i<els.length;i++){var d=parseInt(els[i].getAttribute('data-due-ms'),10);\
if(!isNaN(d)){els[i].textContent=fmt(d-(Date.now()-t0));}}}\
tick();setInterval(tick,1000);})();";

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3em .5em;\
border-bottom:1px solid #ddd;vertical-align:top}th{background:#f4f4f4}\
.muted{color:#777}.err{color:#a00}.num{text-align:right;font-variant-numeric:tabular-nums}\
pre{background:#f7f7f7;padding:.5em;overflow:auto;white-space:pre-wrap;word-break:break-word}\
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:600}dd{margin:0}";

/// HTML-escape text for element content and double- or single-quoted attribute values.
pub fn escape(s: &str) -> String {
    crate::text::replace_chars(s, |c| match c {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '"' => Some("&quot;"),
        '\'' => Some("&#39;"),
        _ => None,
    })
}

/// `url` when it is an absolute `http://` or `https://` URL without whitespace or control
/// characters; `None` otherwise (e.g. `javascript:`, `data:`, relative URLs), so it is shown as
/// text instead of a link.
pub fn safe_link(url: &str) -> Option<&str> {
    let lower_prefix: String = url.chars().take(8).collect::<String>().to_ascii_lowercase();
    let scheme_ok = lower_prefix.starts_with("https://") || lower_prefix.starts_with("http://");
    let chars_ok = !url.chars().any(|c| c.is_whitespace() || c.is_control());
    (scheme_ok && chars_ok && url.len() > "http://".len()).then_some(url)
}

/// The `Content-Security-Policy` for HTML responses: nothing external, inline styles, and only
/// the countdown script, by its SHA-256 (a unit test recomputes it).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; \
    script-src 'sha256-RyVx7ZeUt2C1FRtAU4zlI9Zb4meZ8CfnCv6aE0xW9gw='; img-src 'none'; \
    base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Percent-encode an identifier for use as a path segment (`/issues/<identifier>`).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A whole page: `body` between the common head (title, style, reload) and the countdown script.
fn page(title: &str, body: impl FnOnce(&mut String)) -> String {
    let mut h = String::with_capacity(8 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>{}</title><style>{STYLE}</style></head><body>",
        escape(title)
    );
    body(&mut h);
    let _ = write!(h, "<script>{COUNTDOWN_SCRIPT}</script></body></html>");
    h
}

fn muted(text: &str) -> String {
    format!("<span class=\"muted\">{text}</span>")
}

/// One `<dt>label</dt><dd>value</dd>` of a facts list (`value` already escaped).
fn fact(h: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = write!(h, "<dt>{label}</dt><dd>{value}</dd>");
}

fn error_or_none(e: Option<&str>) -> String {
    e.map_or_else(
        || muted("none"),
        |e| format!("<span class=\"err\">{}</span>", escape(e)),
    )
}

/// The dashboard for `snap` as seen at `now` (ages and countdowns).
pub fn render_dashboard(snap: &StateSnapshot, now: SystemTime) -> String {
    page("Baton", |h| {
        let _ = write!(
            h,
            "<h1>Baton</h1><p class=\"muted\">Snapshot {} · {} running · {} retrying · {} blocked \
             · reloads every {REFRESH_SECONDS}s · <a href=\"/api/v1/state\">JSON</a></p>",
            escape(&snap.generated_at),
            snap.counts.running,
            snap.counts.retrying,
            snap.counts.blocked,
        );
        table_section(
            h,
            ("running", "Running", "No running agents."),
            "running-table",
            "<th>Issue</th><th>Title</th><th>State</th>\
             <th class=\"num\">Turns</th><th>Age</th><th>Last event</th>\
             <th class=\"num\">Tokens</th><th class=\"num\">Cost</th>",
            &snap.running,
            |h, row| running_row(h, row, now),
        );
        if !snap.hosts.is_empty() {
            table_section(
                h,
                ("hosts", "Worker hosts", ""),
                "hosts-table",
                "<th>Host</th><th class=\"num\">Running</th><th class=\"num\">Cap</th>\
                 <th>Health</th>",
                &snap.hosts,
                host_row,
            );
        }
        table_section(
            h,
            ("retrying", "Retry queue", "No retries queued."),
            "retry-table",
            "<th>Issue</th><th class=\"num\">Attempt</th>\
             <th>Due in</th><th>Due at</th><th>Error</th>",
            &snap.retrying,
            retry_row,
        );
        table_section(
            h,
            ("blocked", "Blocked", "No blocked issues."),
            "blocked-table",
            "<th>Issue</th><th>State</th><th>Reason</th><th>Since</th>",
            &snap.blocked,
            |h, row| blocked_row(h, row, now),
        );
        let (t, n) = (&snap.agent_totals, thousands);
        let runtime = duration_text(t.seconds_running.max(0.0) as u64);
        let tk = &t.tokens;
        h.push_str("<h2 id=\"totals\">Totals</h2><dl>");
        fact(h, "Input tokens", n(tk.input_tokens));
        fact(h, "Output tokens", n(tk.output_tokens));
        fact(h, "Cache read tokens", n(tk.cache_read_input_tokens));
        fact(h, "Cache write tokens", n(tk.cache_creation_input_tokens));
        fact(h, "Total tokens", n(tk.total_tokens));
        fact(h, "Turns", n(t.turns));
        fact(h, "Agent runtime", runtime);
        fact(h, "Cost", cost_text(Some(t.cost_usd)));
        budget_limits(h, &snap.budget);
        h.push_str("</dl>");
        tracker_section(h, &snap.tracker, now);
        h.push_str("<h2 id=\"rate-limits\">Agent rate limits</h2>");
        match &snap.rate_limits {
            Some(v) if !v.is_null() => {
                let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
                let _ = write!(h, "<pre>{}</pre>", escape(&pretty));
            }
            _ => h.push_str("<p class=\"muted\">None reported.</p>"),
        }
    })
}

fn tracker_section(h: &mut String, tr: &TrackerHealth, now: SystemTime) {
    let last_poll = tr.last_successful_poll_at.as_ref().map_or_else(
        || muted("never"),
        |at| format!("{} ({})", escape(at), ago_text(at, now)),
    );
    let last_error = error_or_none(tr.last_error.as_deref());
    let budget = tr.rate_limit.as_ref().map_or_else(
        || muted("unknown"),
        |rl| {
            let num = |n: Option<i64>| n.map_or_else(|| "?".into(), |v| v.to_string());
            let mut s = format!("{} of {} left", num(rl.remaining), num(rl.limit));
            if let Some(reset) = &rl.reset_at {
                let _ = write!(s, ", resets {}", escape(reset));
            }
            if let Some(cost) = rl.last_cost {
                let _ = write!(s, ", last request cost {cost}");
            }
            s
        },
    );
    let _ = write!(
        h,
        "<h2 id=\"tracker\">Tracker</h2><dl><dt>Last successful poll</dt><dd>{last_poll}</dd>\
         <dt>Last poll error</dt><dd>{last_error}</dd><dt>Request budget</dt><dd>{budget}</dd>\
         </dl>"
    );
}

/// One dashboard section: a heading (`id`, title, text shown when empty), then a table of
/// `rows` with the given header cells.
fn table_section<T>(
    h: &mut String,
    (id, title, empty): (&str, &str, &str),
    table_id: &str,
    head: &str,
    rows: &[T],
    mut row: impl FnMut(&mut String, &T),
) {
    let _ = write!(h, "<h2 id=\"{id}\">{title}</h2>");
    if rows.is_empty() {
        let _ = write!(h, "<p class=\"muted\">{empty}</p>");
        return;
    }
    let _ = write!(
        h,
        "<table id=\"{table_id}\"><thead><tr>{head}</tr></thead><tbody>"
    );
    for r in rows {
        row(h, r);
    }
    h.push_str("</tbody></table>");
}

/// The per-issue page for `detail` as seen at `now`.
pub fn render_issue_page(d: &IssueDetail, now: SystemTime) -> String {
    page(&format!("Baton · {}", d.issue_identifier), |h| {
        let url = d
            .running
            .as_ref()
            .and_then(|r| r.url.as_deref())
            .or_else(|| d.retry.as_ref().and_then(|r| r.url.as_deref()))
            .or_else(|| d.blocked.as_ref().and_then(|r| r.url.as_deref()));
        let _ = write!(
            h,
            "<p><a href=\"/\">← Dashboard</a> · <a href=\"/api/v1/{}\">JSON</a></p><h1>{}</h1>",
            path_segment(&d.issue_identifier),
            issue_link(&d.issue_identifier, url),
        );
        issue_facts(h, d, now);
        // Newest first reads best on a page that reloads itself.
        let events: Vec<_> = d.recent_events.iter().rev().collect();
        table_section(
            h,
            ("events", "Recent events", "No events recorded."),
            "events-table",
            "<th>At</th><th>Event</th><th>Message</th>",
            &events,
            |h, ev| {
                let _ = write!(
                    h,
                    "<tr class=\"event\"><td>{}</td><td>{}</td><td>{}</td></tr>",
                    escape(&ev.at),
                    escape(&ev.event),
                    escape(&truncate_chars(&ev.message, EVENT_MESSAGE_CHARS)),
                );
            },
        );
    })
}

/// The issue page's title and facts: status, workspace, attempts, spend, budget, why blocked.
fn issue_facts(h: &mut String, d: &IssueDetail, now: SystemTime) {
    if let Some(r) = &d.running {
        let _ = write!(h, "<p id=\"issue-title\">{}</p>", escape(&r.title));
    }
    h.push_str("<dl><dt>Status</dt>");
    let _ = write!(h, "<dd id=\"issue-status\">{}</dd>", escape(&d.status));
    fact(h, "Issue id", escape(&d.issue_id));
    let workspace = d.workspace.as_deref().map_or_else(|| muted("none"), escape);
    fact(h, "Workspace", workspace);
    fact(h, "Attempts", d.attempts);
    fact(h, "Last error", error_or_none(d.last_error.as_deref()));
    if let Some(r) = &d.running {
        let session = escape(r.session_id.as_deref().unwrap_or("—"));
        let resumed = match r.resumed {
            true => " (resumed after restart)",
            false => "",
        };
        fact(h, "State", escape(&r.state));
        fact(h, "Session", format!("{session}{resumed}"));
        fact(h, "Turns", r.turn_count);
        fact(h, "Running for", age_text(&r.started_at, now));
        let (tk, n) = (&r.tokens, thousands);
        let (i, o, t) = (n(tk.input_tokens), n(tk.output_tokens), n(tk.total_tokens));
        fact(h, "Tokens", format!("{i} in · {o} out · {t} total"));
        fact(h, "Cost", cost_text(r.cost_usd));
    }
    if let Some(r) = &d.retry {
        fact(h, "Retry attempt", r.attempt);
        fact(h, "Retry due in", countdown(r.due_in_ms));
    }
    let sp = &d.spend;
    let _ = write!(
        h,
        "<dt>Spent (all runs)</dt><dd id=\"issue-spend\">{} · {} tokens ({} in · {} out · \
         {} cache read · {} cache write) · {} turns</dd>",
        cost_text(Some(sp.cost_usd)),
        thousands(sp.tokens.total_tokens),
        thousands(sp.tokens.input_tokens),
        thousands(sp.tokens.output_tokens),
        thousands(sp.tokens.cache_read_input_tokens),
        thousands(sp.tokens.cache_creation_input_tokens),
        sp.turns,
    );
    budget_limits(h, &d.budget);
    if let Some(b) = &d.blocked {
        let reason = escape(&b.reason);
        let _ = write!(h, "<dt>Blocked because</dt><dd class=\"err\">{reason}</dd>");
        fact(h, "Blocked since", escape(&b.since));
    }
    h.push_str("</dl>");
}

/// A small HTML error page (unknown issue, snapshot timeout) for the HTML routes.
pub fn render_error_page(title: &str, message: &str) -> String {
    page("Baton", |h| {
        let _ = write!(
            h,
            "<p><a href=\"/\">← Dashboard</a></p><h1>{}</h1><p class=\"err\">{}</p>",
            escape(title),
            escape(message)
        );
    })
}

fn host_row(h: &mut String, r: &HostRow) {
    let health = if r.up {
        "up".to_string()
    } else {
        format!(
            "<b>down</b> {} <span class=\"muted\">next probe {}</span>",
            escape(r.error.as_deref().unwrap_or("")),
            escape(r.next_probe_at.as_deref().unwrap_or("—"))
        )
    };
    let _ = write!(
        h,
        "<tr class=\"host-row\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
         <td>{health}</td></tr>",
        escape(&r.host),
        r.running,
        r.cap.map_or("—".to_string(), |c| c.to_string()),
    );
}

/// The opening of a row about one issue: its link, and a link to its page.
fn issue_cells(class: &str, identifier: &str, url: Option<&str>) -> String {
    format!(
        "<tr class=\"{class}\" data-issue=\"{}\"><td>{} <a class=\"muted\" \
         href=\"/issues/{}\">details</a></td>",
        escape(identifier),
        issue_link(identifier, url),
        path_segment(identifier)
    )
}

fn running_row(h: &mut String, r: &RunningRow, now: SystemTime) {
    let last = match &r.last_event {
        Some(ev) => {
            let mut s = format!("<b>{}</b>", escape(ev));
            if let Some(at) = &r.last_event_at {
                let _ = write!(s, " {}", muted(&ago_text(at, now)));
            }
            if let Some(msg) = r.last_message.as_deref().filter(|m| !m.is_empty()) {
                let msg = escape(&truncate_chars(msg, CELL_MESSAGE_CHARS));
                let _ = write!(s, "<br>{msg}");
            }
            s
        }
        None => muted("—"),
    };
    // The Status cell: resumed after a restart, on which host.
    let mut state = escape(&r.state);
    if r.resumed {
        state.push_str(
            " <span class=\"muted resumed\" title=\"resumed its agent session after a restart\">\
             resumed</span>",
        );
    }
    if let Some(host) = &r.host {
        let _ = write!(
            state,
            " <span class=\"muted host\">on {}</span>",
            escape(host)
        );
    }
    let _ = write!(
        h,
        "{cells}<td class=\"title\">{title}</td><td>{state}</td>\
         <td class=\"num\">{turns}</td><td>{age}</td><td>{last}</td>\
         <td class=\"num\" title=\"{input} in / {output} out\">{total}</td>\
         <td class=\"num\">{cost}</td></tr>",
        cells = issue_cells("running-row", &r.issue_identifier, r.url.as_deref()),
        title = escape(&r.title),
        turns = r.turn_count,
        age = age_text(&r.started_at, now),
        input = thousands(r.tokens.input_tokens),
        output = thousands(r.tokens.output_tokens),
        total = thousands(r.tokens.total_tokens),
        cost = cost_text(r.cost_usd),
    );
}

fn retry_row(h: &mut String, r: &RetryRow) {
    let _ = write!(
        h,
        "{cells}<td class=\"num\">{attempt}</td><td>{due}</td>\
         <td>{due_at}</td><td class=\"err\">{error}</td></tr>",
        cells = issue_cells("retry-row", &r.issue_identifier, r.url.as_deref()),
        attempt = r.attempt,
        due = countdown(r.due_in_ms),
        due_at = escape(&r.due_at),
        error = escape(r.error.as_deref().unwrap_or("")),
    );
}

fn blocked_row(h: &mut String, b: &BlockedRow, now: SystemTime) {
    let _ = write!(
        h,
        "{cells}<td>{state}</td><td class=\"err\">{reason}</td>\
         <td>{since} <span class=\"muted\">({ago})</span></td></tr>",
        cells = issue_cells("blocked-row", &b.issue_identifier, b.url.as_deref()),
        state = escape(&b.state),
        reason = escape(&b.reason),
        since = escape(&b.since),
        ago = ago_text(&b.since, now),
    );
}

/// The identifier, linked to the issue URL only when that URL is http(s).
fn issue_link(identifier: &str, url: Option<&str>) -> String {
    match url.and_then(safe_link) {
        Some(u) => format!(
            "<a class=\"issue-link\" href=\"{}\" rel=\"noopener noreferrer\">{}</a>",
            escape(u),
            escape(identifier)
        ),
        None => format!("<span class=\"issue-id\">{}</span>", escape(identifier)),
    }
}

fn countdown(due_in_ms: u64) -> String {
    format!(
        "<span class=\"countdown\" data-due-ms=\"{due_in_ms}\">{}</span>",
        duration_text(due_in_ms.div_ceil(1000))
    )
}

/// The time from `at` to `now` (none before `at`), when `at` parses.
fn elapsed(at: &str, now: SystemTime) -> Option<String> {
    let t = timefmt::parse_rfc3339(at)?;
    Some(duration_text(
        now.duration_since(t).map_or(0, |d| d.as_secs()),
    ))
}

fn age_text(started_at: &str, now: SystemTime) -> String {
    elapsed(started_at, now).unwrap_or_else(|| muted("?"))
}

fn ago_text(at: &str, now: SystemTime) -> String {
    elapsed(at, now).map_or_else(|| escape(at), |d| format!("{d} ago"))
}

/// `42s`, `3m 05s`, `2h 07m`, `3d 04h`.
fn duration_text(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h:02}h")
    } else if h > 0 {
        format!("{h}h {m:02}m")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn budget_limits(h: &mut String, b: &Budget) {
    let mut parts = Vec::new();
    if let Some(c) = b.max_cost_usd_per_issue {
        parts.push(format!("{} (cost)", cost_text(Some(c))));
    }
    if let Some(t) = b.max_tokens_per_issue {
        parts.push(format!("{} tokens", thousands(t)));
    }
    if let Some(t) = b.max_turns_per_issue {
        parts.push(format!("{t} turns"));
    }
    let text = if parts.is_empty() {
        muted("unlimited")
    } else {
        escape(&parts.join(" · "))
    };
    let _ = write!(h, "<dt>Budget per issue</dt><dd id=\"budget\">{text}</dd>");
}

fn cost_text(cost: Option<f64>) -> String {
    match cost {
        Some(c) if c.is_finite() => format!("${c:.4}"),
        _ => "—".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::status::{Counts, RecentEvent, TokenCounts};

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_100)
    }

    fn running(title: &str, url: Option<&str>) -> RunningRow {
        RunningRow {
            issue_id: "I_1".into(),
            issue_identifier: "acme__app-1".into(),
            title: title.into(),
            url: url.map(String::from),
            state: "In Progress".into(),
            session_id: Some("s-1".into()),
            turn_count: 3,
            last_event: Some("turn_completed".into()),
            last_message: Some("did <b>things</b>".into()),
            started_at: "2023-11-14T22:13:20Z".into(),
            last_event_at: Some("2023-11-14T22:14:20Z".into()),
            tokens: TokenCounts {
                input_tokens: 1200,
                output_tokens: 34,
                total_tokens: 1234,
                ..TokenCounts::default()
            },
            spend: Default::default(),
            cost_usd: Some(0.5),
            attempt: None,
            resumed: false,
            host: None,
        }
    }

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

    #[test]
    fn links_only_http_and_https() {
        assert_eq!(
            safe_link("https://github.com/a/b/issues/1"),
            Some("https://github.com/a/b/issues/1")
        );
        assert!(safe_link("HTTP://example.com/x").is_some());
        for bad in [
            "javascript:alert(1)",
            "JaVaScRiPt:alert(1)",
            " https://x",
            "data:text/html,hi",
            "//evil.example",
            "/relative",
            "https://x y",
            "https://x\n",
            "http://",
        ] {
            assert_eq!(safe_link(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn dashboard_shows_each_runs_host_and_the_hosts_load_cap_and_health() {
        let snap = StateSnapshot {
            running: vec![RunningRow {
                host: Some("build-<1>".into()),
                ..running("t", None)
            }],
            hosts: vec![
                HostRow {
                    host: "build-<1>".into(),
                    running: 1,
                    cap: Some(2),
                    up: true,
                    error: None,
                    next_probe_at: None,
                },
                HostRow {
                    host: "build-2".into(),
                    running: 0,
                    cap: Some(2),
                    up: false,
                    error: Some("host_unavailable: <refused>".into()),
                    next_probe_at: Some("2023-11-14T22:16:00Z".into()),
                },
            ],
            ..Default::default()
        };
        let html = render_dashboard(&snap, now());
        assert!(
            html.contains("<h2 id=\"hosts\">Worker hosts</h2>"),
            "{html}"
        );
        assert!(html.contains("on build-&lt;1&gt;"), "the run's host");
        assert!(html.contains(
            "<td>build-&lt;1&gt;</td><td class=\"num\">1</td><td class=\"num\">2</td><td>up</td>"
        ));
        assert!(html.contains("<b>down</b> host_unavailable: &lt;refused&gt;"));
        assert!(!html.contains("<refused>"));
        let local = render_dashboard(&StateSnapshot::default(), now());
        assert!(
            !local.contains("Worker hosts"),
            "no section without SSH hosts"
        );
    }

    #[test]
    fn dashboard_escapes_titles_and_refuses_javascript_links() {
        let snap = StateSnapshot {
            generated_at: "2023-11-14T22:15:00Z".into(),
            counts: Counts {
                running: 2,
                retrying: 0,
                blocked: 0,
            },
            running: vec![
                running(
                    "<script>alert(1)</script>",
                    Some("https://github.com/acme/app/issues/1"),
                ),
                RunningRow {
                    issue_identifier: "acme__app-2".into(),
                    ..running("x\" onmouseover=\"alert(2)", Some("javascript:alert(3)"))
                },
            ],
            ..Default::default()
        };
        let html = render_dashboard(&snap, now());
        assert!(!html.contains("<script>alert(1)"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!html.contains("javascript:"));
        assert!(html.contains("x&quot; onmouseover=&quot;alert(2)"));
        assert!(html.contains("href=\"https://github.com/acme/app/issues/1\""));
        assert!(html.contains("<span class=\"issue-id\">acme__app-2</span>"));
        assert!(html.contains("did &lt;b&gt;things&lt;/b&gt;"));
        assert!(html.contains(">1,234<"));
        assert!(html.contains(">1m 40s<"), "age from started_at");
        // The only script on the page is the constant countdown script.
        assert_eq!(html.matches("<script>").count(), 1);
    }

    #[test]
    fn issue_page_lists_events_newest_first_and_escaped() {
        let d = IssueDetail {
            issue_identifier: "acme__app-1".into(),
            issue_id: "I_1".into(),
            status: "running".into(),
            workspace: Some("/w/acme__app-1".into()),
            attempts: 1,
            running: Some(running("t", None)),
            retry: None,
            blocked: None,
            last_error: None,
            spend: Default::default(),
            budget: Default::default(),
            recent_events: vec![
                RecentEvent {
                    at: "2023-11-14T22:13:21Z".into(),
                    event: "session_started".into(),
                    message: "first".into(),
                },
                RecentEvent {
                    at: "2023-11-14T22:13:22Z".into(),
                    event: "notification".into(),
                    message: "<img src=x onerror=alert(1)>".into(),
                },
            ],
        };
        let html = render_issue_page(&d, now());
        let second = html.find("&lt;img src=x onerror=alert(1)&gt;").unwrap();
        let first = html.find(">first<").unwrap();
        assert!(second < first, "newest first");
        assert!(!html.contains("<img"));
    }

    #[test]
    fn helpers_format_and_truncate_safely() {
        let durations = [
            (5, "5s"),
            (185, "3m 05s"),
            (7_500, "2h 05m"),
            (90_000, "1d 01h"),
        ];
        for (secs, text) in durations {
            assert_eq!(duration_text(secs), text);
        }
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(truncate_chars("ééé", 2), "éé…");
        assert_eq!(truncate_chars("ab", 2), "ab");
        assert_eq!(path_segment("acme__app-1"), "acme__app-1");
        assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"f"), "Zg==");
    }

    #[test]
    fn the_csp_allows_exactly_the_countdown_script() {
        let digest = ring::digest::digest(&ring::digest::SHA256, COUNTDOWN_SCRIPT.as_bytes());
        let want = format!("script-src 'sha256-{}';", base64(digest.as_ref()));
        assert!(
            CONTENT_SECURITY_POLICY.contains(&want),
            "{CONTENT_SECURITY_POLICY}"
        );
    }

    fn base64(bytes: &[u8]) -> String {
        const TABLE: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let n = (chunk.iter().enumerate())
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..4 {
                let c = TABLE[(n >> (18 - 6 * i) & 63) as usize];
                out.push(if i <= chunk.len() { char::from(c) } else { '=' });
            }
        }
        out
    }
}
