//! Short helper commands Baton runs on this machine for itself (`gh auth token`, and every `ssh`
//! client call of the SSH host that is not an agent or hook: workspace scripts, probes, signals,
//! master start and stop): no shell, a deadline, bounded output, and on timeout the whole process
//! group is killed. Here because nothing outside `host/` signals process groups.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Bytes of stdout and of stderr kept (the head) from one command.
const OUTPUT_CAP: usize = 64 * 1024;
/// Longest deadline (a day): `Instant` arithmetic must not overflow on a huge configured value.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);
/// Poll tick for the exit when the kernel has no pidfd.
const EXIT_TICK: Duration = Duration::from_millis(10);

/// Run `cmd` (stdin as the caller set it; stdout and stderr captured, the first 64 KiB of each)
/// as the leader of a new process group until it exits or `timeout` passes. One still running
/// then is killed with its group and reaped: `Err` of kind `TimedOut`. The wait ends when the
/// command exits even if a background descendant keeps its pipes open (`ssh -f`).
pub(crate) fn output_within(cmd: Command, timeout: Duration) -> io::Result<Output> {
    run_within(cmd, timeout, Stdio::piped)
}

/// [`output_within`] with stdout and stderr on `/dev/null`: for a command that leaves a daemon
/// behind (`ssh -f` starting a master), which must not inherit pipes Baton closes.
pub(crate) fn status_within(cmd: Command, timeout: Duration) -> io::Result<ExitStatus> {
    run_within(cmd, timeout, Stdio::null).map(|o| o.status)
}

fn run_within(mut cmd: Command, timeout: Duration, out: fn() -> Stdio) -> io::Result<Output> {
    cmd.stdout(out()).stderr(out()).process_group(0);
    let mut child = cmd.spawn()?;
    let timeout = timeout.min(MAX_TIMEOUT);
    let deadline = Instant::now() + timeout;
    let pidfd = super::supervisor::pidfd_open(child.id());
    let mut pipes: [Option<File>; 2] = [
        child.stdout.take().map(|p| File::from(OwnedFd::from(p))),
        child.stderr.take().map(|p| File::from(OwnedFd::from(p))),
    ];
    let mut bufs = [Vec::new(), Vec::new()];
    for p in pipes.iter().flatten() {
        set_nonblocking(p);
    }
    loop {
        if let Some(status) = child.try_wait()? {
            // What the command wrote before exiting is in the pipes; never wait for more.
            for (p, b) in pipes.iter_mut().zip(bufs.iter_mut()) {
                read_ready(p, b);
            }
            let [stdout, stderr] = bufs;
            return Ok(Output {
                status,
                stdout,
                stderr,
            });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // SAFETY: plain syscall on the group of a child that `try_wait` just found running,
            // so it is not reaped and its pid still names this group.
            unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer within {} ms", timeout.as_millis()),
            ));
        }
        let tick = if pidfd.is_some() {
            left
        } else {
            left.min(EXIT_TICK)
        };
        let raw = [
            pipes[0].as_ref().map(AsRawFd::as_raw_fd),
            pipes[1].as_ref().map(AsRawFd::as_raw_fd),
            pidfd.as_ref().map(AsRawFd::as_raw_fd),
        ];
        let mut fds = raw.map(|fd| libc::pollfd {
            fd: fd.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        });
        let ms = libc::c_int::try_from(tick.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fds` is a valid array of three pollfd; negative fds are ignored by poll.
        unsafe { libc::poll(fds.as_mut_ptr(), 3, ms) };
        for (i, (p, b)) in pipes.iter_mut().zip(bufs.iter_mut()).enumerate() {
            if fds[i].revents != 0 {
                read_ready(p, b);
            }
        }
    }
}

/// Read what `pipe` holds now (it is non-blocking) into `buf` up to [`OUTPUT_CAP`], discarding
/// the rest; close it at EOF or on an error.
fn read_ready(pipe: &mut Option<File>, buf: &mut Vec<u8>) {
    let Some(file) = pipe.as_mut() else {
        return;
    };
    let mut chunk = [0u8; 8192];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let keep = n.min(OUTPUT_CAP.saturating_sub(buf.len()));
                buf.extend_from_slice(&chunk[..keep]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(_) => break,
        }
    }
    *pipe = None;
}

fn set_nonblocking(fd: &File) {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL only change its status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// Run `program args…` (no shell, stdin closed) and return its stdout (at most 64 KiB) when it
/// exits successfully within `timeout`; a hung program is killed with its group and yields `None`.
pub(crate) fn command_output(program: &str, args: &[&str], timeout: Duration) -> Option<Vec<u8>> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    match output_within(cmd, timeout) {
        Ok(out) => out.status.success().then_some(out.stdout),
        Err(e) => {
            if e.kind() == io::ErrorKind::TimedOut {
                log::warn!("`{program}` {e}; killed");
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hung_command_is_killed_at_the_timeout() {
        let started = Instant::now();
        let out = command_output(
            "sh",
            &["-c", "sleep 600 & sleep 600"],
            Duration::from_millis(300),
        );
        assert_eq!(out, None);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn output_of_a_quick_command_is_returned() {
        let out = command_output("sh", &["-c", "echo tok"], Duration::from_secs(5));
        assert_eq!(out.as_deref(), Some(&b"tok\n"[..]));
        assert_eq!(
            command_output("sh", &["-c", "exit 1"], Duration::from_secs(5)),
            None
        );
    }

    /// Both streams are kept (bounded) and the wait ends with the exit, although a background
    /// child still holds the pipes (as `ssh -f` leaves its master).
    #[test]
    fn output_ends_with_the_exit_and_is_bounded() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "head -c 100000 /dev/zero; echo err >&2; sleep 5 & exit 3",
        ]);
        let started = Instant::now();
        let out = output_within(cmd, Duration::from_secs(20)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(4));
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout.len(), OUTPUT_CAP);
        assert_eq!(out.stderr, b"err\n");
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        let e = output_within(sleep, Duration::from_millis(100));
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}
