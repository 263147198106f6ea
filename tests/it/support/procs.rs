//! Process liveness checks for tests that assert "no process left behind".
//!
//! A killed process whose parent already exited is re-parented to init (or the nearest
//! subreaper) and stays a zombie until that process reaps it; on some hosts (sandboxes whose PID 1
//! does not reap) that can take arbitrarily long. A zombie runs nothing and holds no resources but
//! its table slot, so these helpers count zombies as gone.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// The state letter from `/proc/<pid>/stat` (`R`, `S`, `Z`, …), `None` when the pid is gone.
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: the state follows the last ')'.
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// True while `pid` exists and is not a zombie (`Z`) or dead (`X`).
pub fn pid_alive(pid: i32) -> bool {
    matches!(proc_state(pid), Some(s) if s != 'Z' && s != 'X')
}

/// Pids of live (non-zombie) processes whose process group is `pgid`.
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(rest) = stat.rsplit(')').next() else {
                return false;
            };
            // Fields after the name: state ppid pgrp ...
            let mut f = rest.split_whitespace();
            let state = f.next().unwrap_or("Z");
            let _ppid = f.next();
            let pgrp: i32 = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            pgrp == pgid && state != "Z" && state != "X"
        })
        .collect()
}

/// Wait (bounded) until `pid` is gone or a zombie; true when it is.
pub fn wait_pid_gone(pid: i32, limit: Duration) -> bool {
    let start = Instant::now();
    while pid_alive(pid) {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Wait (bounded) until no live process is left in group `pgid`; true when none is.
pub fn wait_group_gone(pgid: i32, limit: Duration) -> bool {
    let start = Instant::now();
    while !live_group_members(pgid).is_empty() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Live (non-zombie) processes whose command line contains `needle`.
pub fn processes_matching(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .filter(|p| *p != me)
                .filter(|p| {
                    let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                    let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                    let state =
                        std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                    let zombie = state
                        .rsplit(')')
                        .next()
                        .and_then(|r| r.trim_start().chars().next())
                        == Some('Z');
                    cmd.contains(needle) && !zombie
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Wait (bounded) until no live process matches `needle`.
pub fn wait_none_matching(needle: &str, limit: Duration) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let left = processes_matching(needle);
        if left.is_empty() || start.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
