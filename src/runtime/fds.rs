//! File descriptors (issue 25): every local agent holds about [`FDS_PER_AGENT`] descriptors (its
//! stdout and stderr pipes and a pidfd; one more over SSH). Baton raises its soft `RLIMIT_NOFILE`,
//! caps `agent.max_concurrent_agents` at what the limit allows with [`FD_RESERVE`] kept free, and
//! retries a spawn that failed for lack of descriptors without counting an attempt.

use std::io;

/// Descriptors kept free for the HTTP server (up to 64 connections), state writes, the log, the
/// watchers and the tracker's connections.
pub const FD_RESERVE: u64 = 128;
/// Descriptors one running agent is counted for.
pub const FDS_PER_AGENT: u64 = 4;

/// The `RLIMIT_NOFILE` pair `(soft, hard)`: `open` and `pipe` are held to the soft limit, which
/// may be raised up to the hard one.
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((l.rlim_cur, l.rlim_max))
}

/// Raise the soft limit to the hard one (the kernel's `fs.nr_open` when the hard limit is
/// unlimited); returns the limits before and after.
pub fn raise_nofile_limit() -> io::Result<((u64, u64), (u64, u64))> {
    let (soft, hard) = nofile_limit()?;
    let mut target = hard;
    if target == libc::RLIM_INFINITY {
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open").ok();
        target = nr_open.and_then(|s| s.trim().parse().ok()).unwrap_or(soft);
    }
    if target > soft {
        let l = libc::rlimit {
            rlim_cur: target,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads one rlimit struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(((soft, hard), nofile_limit()?))
}

pub fn open_fds() -> io::Result<u64> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count() as u64)
}

/// How many agents fit in `soft` descriptors with `open` in use and [`FD_RESERVE`] kept free.
pub fn agents_allowed(soft: u64, open: u64) -> u64 {
    soft.saturating_sub(open).saturating_sub(FD_RESERVE) / FDS_PER_AGENT
}

/// The agents the current limit allows (`None` when the limit cannot be read).
pub fn agents_allowed_now() -> Option<u64> {
    Some(agents_allowed(nofile_limit().ok()?.0, open_fds().ok()?))
}

/// `Err` (a `spawn_resource_exhausted` message) while fewer than [`FD_RESERVE`] descriptors are
/// free: a run does not start spawning then.
pub fn check_reserve() -> Result<(), String> {
    let (Ok((soft, _)), Ok(open)) = (nofile_limit(), open_fds()) else {
        return Ok(());
    };
    if soft.saturating_sub(open) >= FD_RESERVE {
        return Ok(());
    }
    Err(format!(
        "spawn_resource_exhausted: {open} of {soft} file descriptors in use; {FD_RESERVE} are \
         kept free for the API, state writes and the log"
    ))
}

/// Whether an error says a spawn ran out of descriptors or processes: a reserve check, or
/// `EMFILE`, `ENFILE` or `EAGAIN` as Rust prints them (`(os error N)`).
pub fn is_resource_exhausted(msg: &str) -> bool {
    msg.contains("spawn_resource_exhausted")
        || [libc::EMFILE, libc::ENFILE, libc::EAGAIN]
            .iter()
            .any(|n| msg.contains(&format!("(os error {n})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_kept_before_agents_are_counted() {
        assert_eq!(agents_allowed(1024, 24), (1024 - 24 - 128) / 4);
        assert_eq!(agents_allowed(65_536, 30), 16_344);
        assert_eq!(agents_allowed(100, 30), 0, "no room at all");
        assert_eq!(agents_allowed(0, u64::MAX), 0);
    }

    #[test]
    fn descriptor_and_process_exhaustion_is_recognised() {
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        assert!(is_resource_exhausted(&format!("could not start: {emfile}")));
        let eagain = io::Error::from_raw_os_error(libc::EAGAIN);
        assert!(is_resource_exhausted(&format!("spawn: {eagain}")));
        let enoent = io::Error::from_raw_os_error(libc::ENOENT);
        assert!(!is_resource_exhausted(&format!(
            "could not start: {enoent}"
        )));
        assert!(is_resource_exhausted(
            "spawn_resource_exhausted: 1000 of 1024 file descriptors in use"
        ));
    }

    #[test]
    fn the_limits_are_read_and_the_soft_one_never_exceeds_the_hard_one() {
        let (soft, hard) = nofile_limit().unwrap();
        assert!(soft <= hard);
        assert!(open_fds().unwrap() >= 3);
    }
}
