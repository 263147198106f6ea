//! Helpers for the containment tests: a script that leaves `setsid`'d grandchildren behind
//! (holding stdout), and a /proc scan for them by a unique `sleep` argument.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

/// A unique `sleep` duration argument (`600.<n>`) to find the grandchildren by.
pub fn marker(tag: u32) -> String {
    format!("600.{}{tag}", std::process::id())
}

/// Shell text starting `n` `setsid sleep <marker>` grandchildren that keep stdout open, and
/// waiting until all of them run in their own session (so they escaped before the leader exits).
pub fn leave_setsid_sleepers(n: u32, marker: &str) -> String {
    format!(
        "for i in $(seq {n}); do setsid sleep {marker} & done\n\
         while [ \"$(pgrep -f -x 'sleep {marker}' | wc -l)\" -lt {n} ]; do sleep 0.01; done"
    )
}

/// Live (non-zombie) processes whose command line is `sleep <marker>`.
pub fn sleepers(marker: &str) -> Vec<i32> {
    let needle = format!("sleep\0{marker}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = state
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with(['Z', 'X']));
            String::from_utf8_lossy(&cmd).starts_with(&needle) && !zombie
        })
        .collect()
}

/// Wait (bounded) until `want(count)` holds for the sleepers; returns the last count.
pub fn wait_sleepers(marker: &str, limit: Duration, want: impl Fn(usize) -> bool) -> usize {
    let start = Instant::now();
    loop {
        let n = sleepers(marker).len();
        if want(n) || start.elapsed() > limit {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kill the sleepers (cleanup in process-group mode, where they escape).
pub fn kill_sleepers(marker: &str) {
    for pid in sleepers(marker) {
        // SAFETY: plain kill(2) of a test-spawned process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// A fake `claude` that starts `n` setsid'd sleepers (holding stdout), prints an init and a
/// success result line and exits 0. Written to `dir`; returns the command.
pub fn fake_claude_with_sleepers(dir: &Path, n: u32, marker: &str) -> String {
    let script = dir.join("fake-claude-escapes.sh");
    let body = format!(
        "#!/bin/sh\n{}\n\
         echo '{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s-1\",\"model\":\"fake\"}}'\n\
         echo '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"ok\",\"session_id\":\"s-1\"}}'\n\
         exit 0\n",
        leave_setsid_sleepers(n, marker)
    );
    std::fs::write(&script, body).unwrap();
    format!("sh '{}'", script.display())
}
