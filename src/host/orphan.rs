//! Process identity and orphan stopping: the agent groups a previous Baton left running.
//!
//! A pid alone does not name a process across a restart: it may have been reused. A recorded
//! agent is identified by its process-group id (= its leader's pid) **and** the leader's start
//! time, `/proc/<pid>/stat` field 22 (clock ticks since boot), which a reused pid does not share,
//! and it must belong to this user. A group is only ever signalled on the host that owns it:
//! [`stop_local`] here, the same checks in [`STOP_SCRIPT`] over SSH.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::thread;
use std::time::{Duration, Instant};

/// How often the group is polled while waiting for it to vanish.
const POLL: Duration = Duration::from_millis(20);
/// How long to wait for the group to vanish after SIGKILL (a reaper may lag behind).
const AFTER_KILL: Duration = Duration::from_secs(2);
/// Grace between SIGTERM and SIGKILL.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(3);

/// The start time (`/proc/<pid>/stat` field 22, clock ticks since boot) of `pid`, or `None` if
/// there is no such process or the file cannot be parsed.
pub fn leader_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
/// itself contain spaces and `)`, so fields are counted after the **last** `)`.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    stat_field(stat, 22)?.parse().ok()
}

/// Field `n` (1-based, `n >= 3`) of a `/proc/<pid>/stat` line, counted after the last `)`.
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state).
    rest.split_ascii_whitespace().nth(n.checked_sub(3)?)
}

/// True if a process that is not a zombie is in group `pgid` (a scan of `/proc`). Zombies
/// still count for [`group_alive`] until their parent (for orphans: init) reaps them, which
/// may lag; they run nothing, so a group of zombies is stopped. False for pgid 0 and 1.
pub fn group_running(pgid: u32) -> bool {
    if signalable(pgid).is_none() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true; // cannot tell: assume alive
    };
    let pgid = pgid.to_string();
    entries.filter_map(Result::ok).any(|e| {
        let name = e.file_name();
        let is_pid = name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
                stat_field(&stat, 5) == Some(pgid.as_str()) && stat_field(&stat, 3) != Some("Z")
            })
    })
}

/// A pgid we may signal: a group never has id 0 or 1 (init), and it must fit a `pid_t`.
fn signalable(pgid: u32) -> Option<libc::pid_t> {
    libc::pid_t::try_from(pgid).ok().filter(|&p| p > 1)
}

/// `kill(-pgid, sig)`; `Ok` if at least one member was signalled.
fn kill_group(pgid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) with a negative pid (> 1 checked by callers) signals that process group.
    if unsafe { libc::kill(-pgid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// True while any process (zombies included) is in process group `pgid`. A group we may not
/// signal (EPERM) still exists. Always false for pgid 0 and 1.
pub fn group_alive(pgid: u32) -> bool {
    let Some(p) = signalable(pgid) else {
        return false;
    };
    match kill_group(p, 0) {
        Ok(()) => true,
        Err(e) => e.raw_os_error() != Some(libc::ESRCH),
    }
}

/// What an orphan stop found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrphanOutcome {
    /// pgid 0, 1 or out of range, or no recorded start time: nothing signalled.
    InvalidPgid,
    /// No process in the group: nothing to do.
    NotRunning,
    /// The leader pid exists but started at another time: a reused pid, left alone.
    StartTimeMismatch,
    /// The leader is gone but members of a group with that id remain. Whether that group is the
    /// recorded one cannot be proven, so it is left alone.
    LeaderGone,
    /// The group vanished after SIGTERM.
    Terminated,
    /// The group outlived the grace period and was SIGKILLed; it vanished.
    Killed,
    /// The group was still present after SIGKILL (e.g. a member in uninterruptible sleep).
    Survived,
    /// The leader belongs to another user (or signalling it was refused): left alone.
    NotPermitted,
}

impl OrphanOutcome {
    /// True if this call stopped the group (log `event=orphan_stopped`).
    pub fn stopped(self) -> bool {
        matches!(self, OrphanOutcome::Terminated | OrphanOutcome::Killed)
    }

    /// snake_case name, as logged and as the remote script prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            OrphanOutcome::InvalidPgid => "invalid_pgid",
            OrphanOutcome::NotRunning => "not_running",
            OrphanOutcome::StartTimeMismatch => "start_time_mismatch",
            OrphanOutcome::LeaderGone => "leader_gone",
            OrphanOutcome::Terminated => "terminated",
            OrphanOutcome::Killed => "killed",
            OrphanOutcome::Survived => "survived",
            OrphanOutcome::NotPermitted => "not_permitted",
        }
    }

    /// The outcome named `s` (what [`STOP_SCRIPT`] prints).
    pub fn parse(s: &str) -> Option<Self> {
        use OrphanOutcome::*;
        [
            InvalidPgid,
            NotRunning,
            StartTimeMismatch,
            LeaderGone,
            Terminated,
            Killed,
            Survived,
            NotPermitted,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

/// Stop a recorded agent process group on this machine: only if the leader (pid == `pgid`)
/// exists, belongs to this user **and** started at `expected_start_time`. Sends SIGTERM to the
/// group, waits up to `grace` for it to vanish, then SIGKILL. Blocks for at most `grace` + 2 s.
pub fn stop_local(pgid: u32, expected_start_time: u64, grace: Duration) -> OrphanOutcome {
    let Some(p) = signalable(pgid).filter(|_| expected_start_time > 0) else {
        return OrphanOutcome::InvalidPgid;
    };
    match leader_start_time(pgid) {
        Some(t) if t == expected_start_time => {}
        Some(_) => return OrphanOutcome::StartTimeMismatch,
        None if group_alive(pgid) => return OrphanOutcome::LeaderGone,
        None => return OrphanOutcome::NotRunning,
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if std::fs::metadata(format!("/proc/{pgid}")).map_or(true, |m| m.uid() != me) {
        return OrphanOutcome::NotPermitted;
    }
    if !group_running(pgid) {
        return OrphanOutcome::NotRunning; // only zombies left: nothing to stop
    }
    match kill_group(p, libc::SIGTERM) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => return OrphanOutcome::NotPermitted,
        Err(_) => return OrphanOutcome::NotRunning,
    }
    if wait_gone(pgid, grace) {
        return OrphanOutcome::Terminated;
    }
    match kill_group(p, libc::SIGKILL) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return OrphanOutcome::Terminated,
        Err(_) => return OrphanOutcome::NotPermitted,
    }
    if wait_gone(pgid, AFTER_KILL) {
        OrphanOutcome::Killed
    } else {
        OrphanOutcome::Survived
    }
}

/// Poll until the group has no process left but zombies (true) or `limit` passed (false).
fn wait_gone(pgid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !group_alive(pgid) || !group_running(pgid) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        thread::sleep(POLL.min(deadline - now));
    }
}

/// [`stop_local`] as a remote `sh` script (`$1` pgid, `$2` start time; both digits, checked by
/// the caller): the same checks on the remote `/proc`, then TERM, 3 s, KILL; a group of zombies
/// is gone. Prints the outcome.
pub const STOP_SCRIPT: &str = r#"p=$1; t=$2
running() { for f in /proc/[0-9]*/stat; do read -r l < "$f" 2>/dev/null || continue; set -- ${l##*) }; [ "$3" = "$p" ] && [ "$1" != Z ] && return 0; done; return 1; }
s=$(cat "/proc/$p/stat" 2>/dev/null) || { running && echo leader_gone || echo not_running; exit 0; }
set -- ${s##*) }
[ "${20}" = "$t" ] || { echo start_time_mismatch; exit 0; }
[ -O "/proc/$p" ] || { echo not_permitted; exit 0; }
running || { echo not_running; exit 0; }
kill -TERM -"$p" 2>/dev/null || { echo not_running; exit 0; }
i=0; while running && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done
running || { echo terminated; exit 0; }
kill -KILL -"$p" 2>/dev/null; sleep 1
running && echo survived || echo killed
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22_after_the_last_paren() {
        let tail = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21";
        assert_eq!(
            parse_start_time(&format!("12 (sleep) {tail}")),
            Some(424242)
        );
        assert_eq!(
            parse_start_time(&format!("12 (a) b) (c ) {tail}")),
            Some(424242)
        );
        assert_eq!(parse_start_time("12 (x) S 1 2"), None);
        assert_eq!(parse_start_time("garbage"), None);
        assert_eq!(stat_field(&format!("1 (x) {tail}"), 3), Some("S"));
        assert_eq!(stat_field(&format!("1 (x) {tail}"), 5), Some("2"));
        assert_eq!(stat_field("1 (x) S", 2), None);
        assert_eq!(parse_start_time(""), None);
    }

    #[test]
    fn own_start_time_is_readable_and_init_is_never_signalled() {
        assert!(leader_start_time(std::process::id()).is_some());
        for (pgid, start) in [(1, 5), (0, 5), (u32::MAX, 5), (std::process::id(), 0)] {
            assert_eq!(
                stop_local(pgid, start, Duration::ZERO),
                OrphanOutcome::InvalidPgid
            );
        }
        assert!(!group_alive(1));
        assert!(!group_alive(0));
        for o in ["killed", "not_running", "survived"] {
            assert_eq!(OrphanOutcome::parse(o).map(|o| o.as_str()), Some(o));
        }
        assert_eq!(OrphanOutcome::parse("x"), None);
    }
}
