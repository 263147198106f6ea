//! Stopping the agent groups a previous Baton left running. A pid may have been reused across a
//! restart, so a recorded agent is its process-group id (= its leader's pid) **and** the leader's
//! start time (`/proc/<pid>/stat` field 22), and must belong to this user. One check does it,
//! [`STOP_SCRIPT`], run by the host that owns the group (never a local signal for a remote one).

use std::time::Duration;

/// How long one check may take (TERM, 3 s, KILL, 1 s, and the `/proc` scans) before it is
/// killed and its outcome is unknown.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(15);

/// The start time (`/proc/<pid>/stat` field 22, clock ticks since boot) of `pid`, or `None` if
/// there is no such process or the file cannot be parsed.
pub fn leader_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
/// itself contain spaces and `)`, so fields are counted after the **last** `)` (which starts at
/// field 3).
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

/// What an orphan check found and did (the names [`STOP_SCRIPT`] prints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrphanOutcome {
    /// pgid 0, 1 or out of range, or no recorded start time: nothing signalled.
    InvalidPgid,
    /// No process (but zombies) in the group: nothing to do.
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
    /// The leader belongs to another user: left alone.
    NotPermitted,
}

const OUTCOMES: [(OrphanOutcome, &str); 8] = [
    (OrphanOutcome::InvalidPgid, "invalid_pgid"),
    (OrphanOutcome::NotRunning, "not_running"),
    (OrphanOutcome::StartTimeMismatch, "start_time_mismatch"),
    (OrphanOutcome::LeaderGone, "leader_gone"),
    (OrphanOutcome::Terminated, "terminated"),
    (OrphanOutcome::Killed, "killed"),
    (OrphanOutcome::Survived, "survived"),
    (OrphanOutcome::NotPermitted, "not_permitted"),
];

impl OrphanOutcome {
    /// True if this check stopped the group (log `event=orphan_stopped`).
    pub fn stopped(self) -> bool {
        matches!(self, OrphanOutcome::Terminated | OrphanOutcome::Killed)
    }

    /// snake_case name, as logged.
    pub fn as_str(self) -> &'static str {
        let found = OUTCOMES.iter().find(|(o, _)| *o == self);
        found.map_or("", |o| o.1)
    }
}

/// Stop the recorded group `pgid` (leader started at `start`) by running [`STOP_SCRIPT`] with
/// `run` (`sh` with the arguments `-c <script> baton <pgid> <start>` on the owning host; `Err`
/// when the host could not run it). Nothing runs for a pgid never an agent's or no start time.
pub(crate) fn stop_with(
    pgid: u32,
    start: u64,
    run: impl FnOnce(&[&str]) -> Result<String, String>,
) -> Result<OrphanOutcome, String> {
    if pgid <= 1 || i32::try_from(pgid).is_err() || start == 0 {
        return Ok(OrphanOutcome::InvalidPgid);
    }
    let (p, s) = (pgid.to_string(), start.to_string());
    let out = run(&["-c", STOP_SCRIPT, "baton", &p, &s])?;
    let out = out.trim();
    OUTCOMES
        .iter()
        .find(|(_, name)| *name == out)
        .map(|o| o.0)
        .ok_or_else(|| format!("unexpected orphan check output {out:?}"))
}

/// The check (`$1` pgid, `$2` start time; digits): the leader must exist with that start time
/// and belong to this user; then TERM to the group, up to 3 s, KILL. A group of zombies is gone.
/// Prints the outcome. `running` scans `/proc` (0.26–0.65 s with 1,600–1,900 processes) unless `kill -0`
/// answers ESRCH: then the group has no process at all, zombies included (any other answer,
/// e.g. EPERM for another user's members, scans).
pub const STOP_SCRIPT: &str = r#"p=$1; t=$2
absent() { case $(LC_ALL=C kill -0 -"$p" 2>&1) in *"No such process"*) return 0;; esac; return 1; }
running() { absent && return 1; for f in /proc/[0-9]*/stat; do read -r l < "$f" 2>/dev/null || continue; set -- ${l##*) }; [ "$3" = "$p" ] && [ "$1" != Z ] && return 0; done; return 1; }
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
        assert_eq!(parse_start_time(""), None);
        assert!(leader_start_time(std::process::id()).is_some());
    }

    #[test]
    fn impossible_groups_are_never_checked() {
        for (pgid, start) in [(1, 5), (0, 5), (u32::MAX, 5), (std::process::id(), 0)] {
            let out = stop_with(pgid, start, |_| panic!("ran a check"));
            assert_eq!(out, Ok(OrphanOutcome::InvalidPgid));
        }
        let out = stop_with(7, 9, |a| Ok(format!("{} {}\n", a[3], a[4])));
        assert_eq!(out, Err("unexpected orphan check output \"7 9\"".into()));
        for o in OUTCOMES {
            assert_eq!(stop_with(7, 9, |_| Ok(o.1.into())), Ok(o.0));
        }
    }
}
