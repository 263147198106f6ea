//! Logging to stderr (spec §13.1–13.2): `key=value` messages; RFC 3339 UTC timestamps, or — when
//! `JOURNAL_STREAM` is set (running under systemd) — sd-daemon priority prefixes `<3>`/`<4>`/`<6>`/`<7>`
//! and no timestamps (journald adds its own). A failing stderr write never crashes the daemon.

use std::io::Write;
use std::time::SystemTime;

use log::Level;

/// Format one log line (without the trailing newline): `2026-11-29T19:17:17.123Z INFO  baton::x:
/// message`, or `<6>baton::x: message` for `journald`. Control characters inside the message
/// are escaped so one event is one line and no terminal escape sequence (ESC from a
/// server-supplied name, say) reaches the reader.
fn format_line(journald: bool, level: Level, target: &str, msg: &str, now: SystemTime) -> String {
    let msg = escape_controls(msg);
    if !journald {
        let at = crate::timefmt::rfc3339_millis(now);
        return format!("{at} {:<5} {target}: {msg}", level.as_str());
    }
    let priority = match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    };
    format!("<{priority}>{target}: {msg}")
}

/// `\n`, `\r`, `\t` and `\xNN`/`\u{NN}` for every other C0/C1 control character and DEL.
fn escape_controls(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// False for records that must never be written: notify's own debug/trace output (its lines about
/// writes to the log file would make more writes: a feedback loop).
fn record_allowed(target: &str, level: Level) -> bool {
    let notify = target == "notify" || target.starts_with("notify::");
    !(notify && level > Level::Info)
}

/// Install the global logger. `RUST_LOG` is honoured; `level` (from `--log-level`) wins over it.
/// Default: `info`. Safe to call more than once (later calls are ignored).
pub fn init(level: Option<log::LevelFilter>) {
    let journald = std::env::var_os("JOURNAL_STREAM").is_some_and(|v| !v.is_empty());
    let mut builder = env_logger::Builder::new();
    builder.filter_level(log::LevelFilter::Info);
    // Only the filter: `parse_env` would also read RUST_LOG_STYLE.
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    if let Some(l) = level {
        // `--log-level` sets Baton's own level and wins over RUST_LOG; dependencies stay at
        // most at info (their debug output is wire noise; use RUST_LOG=ureq=debug to see it).
        builder.filter_level(l.min(log::LevelFilter::Info));
        builder.filter_module("baton", l);
    }
    // ureq's protocol layer hex-dumps raw requests (Authorization header included) at TRACE:
    // the formatter below drops every TRACE record of those targets, whatever RUST_LOG says.
    // env_logger's stderr target ignores write errors (closed stderr, EPIPE, full disk).
    builder.format(move |buf, record| {
        if !crate::tracker::wire_log_allowed(record.target(), record.level())
            || !record_allowed(record.target(), record.level())
        {
            return Ok(());
        }
        let line = format_line(
            journald,
            record.level(),
            record.target(),
            &crate::runlog::with_run_fields(&record.args().to_string()),
            SystemTime::now(),
        );
        writeln!(buf, "{line}")
    });
    let _ = builder.try_init();
    install_panic_hook();
}

/// Route panic messages through the logger (one escaped line with the thread name, location and
/// message) instead of raw stderr. Part of [`init`].
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let location = info.location().map_or_else(
            || "unknown".to_string(),
            |l| format!("{}:{}", l.file(), l.line()),
        );
        let name = thread.name().unwrap_or("unnamed");
        log::error!("{}", panic_line(name, &location, info.payload()));
    }));
}

/// The logged text of a panic: thread, location and the message (quoted, escaped).
fn panic_line(thread: &str, location: &str, payload: &(dyn std::any::Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    format!("panic thread={thread} location={location} message={message:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn panic_lines_name_the_thread_and_escape_the_message() {
        let p: Box<dyn std::any::Any + Send> = Box::new(String::from("boom\n\u{1b}[31m"));
        assert_eq!(
            panic_line("tracker-poll", "src/x.rs:1", p.as_ref()),
            "panic thread=tracker-poll location=src/x.rs:1 message=\"boom\\n\\u{1b}[31m\""
        );
        let p: Box<dyn std::any::Any + Send> = Box::new(7u8);
        assert!(panic_line("t", "l", p.as_ref()).ends_with("\"non-string panic payload\""));
    }

    #[test]
    fn journald_lines_have_priorities_and_no_timestamp() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            format_line(true, Level::Error, "baton", "boom", t),
            "<3>baton: boom"
        );
        for (level, want) in [
            (Level::Warn, "<4>b: m"),
            (Level::Info, "<6>b: m"),
            (Level::Debug, "<7>b: m"),
        ] {
            assert_eq!(format_line(true, level, "b", "m", t), want);
        }
    }

    #[test]
    fn timestamped_lines_are_rfc3339_utc() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(
            format_line(false, Level::Info, "baton", "issue_id=I_1 ok", t),
            "2023-11-14T22:13:20.123Z INFO  baton: issue_id=I_1 ok"
        );
    }

    #[test]
    fn embedded_newlines_cannot_forge_lines() {
        let t = UNIX_EPOCH;
        let line = format_line(true, Level::Info, "b", "title=x\n<3>forged", t);
        assert!(!line.contains('\n'));
        assert!(line.ends_with("title=x\\n<3>forged"));
    }

    #[test]
    fn control_characters_are_escaped() {
        let line = format_line(
            true,
            Level::Info,
            "b",
            "name=\u{1b}[31mred\t\0\u{7f}\u{9b}ok é",
            UNIX_EPOCH,
        );
        assert_eq!(line, "<6>b: name=\\x1b[31mred\\t\\x00\\x7f\\u{9b}ok é");
        assert!(!line.chars().any(char::is_control));
    }

    #[test]
    fn notify_debug_and_trace_are_dropped() {
        assert!(!record_allowed("notify::inotify", Level::Trace));
        assert!(!record_allowed("notify", Level::Debug));
        assert!(record_allowed("notify", Level::Warn));
        assert!(record_allowed("notifyish", Level::Trace));
        assert!(record_allowed("baton::workflow::watch", Level::Trace));
    }
}
