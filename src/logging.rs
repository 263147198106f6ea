//! Logging to stderr (spec §13.1–13.2): `key=value` messages; RFC 3339 UTC timestamps, or — when
//! `JOURNAL_STREAM` is set (running under systemd) — sd-daemon priority prefixes `<3>`/`<4>`/`<6>`/`<7>`
//! and no timestamps (journald adds its own). A failing stderr write never crashes the daemon.

use std::io::{self, Write};
use std::time::SystemTime;

use log::Level;

/// Log line style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogStyle {
    /// `2026-11-29T19:17:17.123Z INFO  baton::x: message`.
    Timestamped,
    /// `<6>baton::x: message` for journald.
    Journald,
}

impl LogStyle {
    /// Journald style when `JOURNAL_STREAM` is set and non-empty.
    pub(crate) fn from_env() -> Self {
        match std::env::var_os("JOURNAL_STREAM") {
            Some(v) if !v.is_empty() => LogStyle::Journald,
            _ => LogStyle::Timestamped,
        }
    }
}

/// The sd-daemon priority for a log level (`<3>` err, `<4>` warning, `<6>` info, `<7>` debug).
pub(crate) fn sd_priority(level: Level) -> &'static str {
    match level {
        Level::Error => "<3>",
        Level::Warn => "<4>",
        Level::Info => "<6>",
        Level::Debug | Level::Trace => "<7>",
    }
}

/// Format one log line (without the trailing newline). Newlines inside the message are escaped so
/// one event is one line (agent and issue text may contain them).
pub(crate) fn format_line(
    style: LogStyle,
    level: Level,
    target: &str,
    msg: &str,
    now: SystemTime,
) -> String {
    let msg = escape_newlines(msg);
    match style {
        LogStyle::Journald => format!("{}{target}: {msg}", sd_priority(level)),
        LogStyle::Timestamped => format!(
            "{} {:<5} {target}: {msg}",
            crate::timefmt::rfc3339_millis(now),
            level.as_str()
        ),
    }
}

fn escape_newlines(s: &str) -> String {
    if !s.contains(['\n', '\r']) {
        return s.to_string();
    }
    s.replace('\r', "\\r").replace('\n', "\\n")
}

/// A writer that swallows write errors (closed stderr, EPIPE, full disk): logging must never take the
/// daemon down.
struct ForgivingStderr;

impl Write for ForgivingStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// Install the global logger. `RUST_LOG` is honoured; `level` (from `--log-level`) wins over it.
/// Default: `info`. Safe to call more than once (later calls are ignored).
pub fn init(level: Option<log::LevelFilter>) {
    let style = LogStyle::from_env();
    let mut builder = env_logger::Builder::new();
    builder.filter_level(log::LevelFilter::Info);
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
    builder.target(env_logger::Target::Pipe(Box::new(ForgivingStderr)));
    builder.format(move |buf, record| {
        if !crate::tracker::wire_log_allowed(record.target(), record.level()) {
            return Ok(());
        }
        let line = format_line(
            style,
            record.level(),
            record.target(),
            &record.args().to_string(),
            SystemTime::now(),
        );
        // Errors here are swallowed by ForgivingStderr; never propagate a panic.
        let _ = writeln!(buf, "{line}");
        Ok(())
    });
    let _ = builder.try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn journald_lines_have_priorities_and_no_timestamp() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            format_line(LogStyle::Journald, Level::Error, "baton", "boom", t),
            "<3>baton: boom"
        );
        for (level, want) in [
            (Level::Warn, "<4>b: m"),
            (Level::Info, "<6>b: m"),
            (Level::Debug, "<7>b: m"),
        ] {
            assert_eq!(format_line(LogStyle::Journald, level, "b", "m", t), want);
        }
    }

    #[test]
    fn timestamped_lines_are_rfc3339_utc() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(
            format_line(
                LogStyle::Timestamped,
                Level::Info,
                "baton",
                "issue_id=I_1 ok",
                t
            ),
            "2023-11-14T22:13:20.123Z INFO  baton: issue_id=I_1 ok"
        );
    }

    #[test]
    fn embedded_newlines_cannot_forge_lines() {
        let t = UNIX_EPOCH;
        let line = format_line(
            LogStyle::Journald,
            Level::Info,
            "b",
            "title=x\n<3>forged",
            t,
        );
        assert!(!line.contains('\n'));
        assert!(line.ends_with("title=x\\n<3>forged"));
    }
}
