//! Short helper commands Baton runs on this machine for itself (today `gh auth token`): no
//! shell, stdin closed, a deadline, and on timeout the whole process group is killed. Here
//! because nothing outside `host/` signals process groups.

/// Run `program args…` (no shell, stdin closed, stderr discarded, own process group) and return
/// its stdout (at most 64 KiB) when it exits successfully within `timeout`; a hung program is
/// killed with its group and yields `None`.
pub(crate) fn command_output(
    program: &str,
    args: &[&str],
    timeout: std::time::Duration,
) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    let reader = std::thread::Builder::new()
        .name("gh-auth-token".into())
        .spawn(move || {
            let mut buf = Vec::new();
            let _ = (&mut stdout).take(64 * 1024).read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    let out = reader.ok().and_then(|_| rx.recv_timeout(timeout).ok());
    if out.is_none() {
        log::warn!(
            "`{program}` did not answer within {} ms; killed",
            timeout.as_millis()
        );
        // SAFETY: plain syscall on the group of a child we have not reaped yet.
        unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
    }
    let status = child.wait().ok()?;
    out.filter(|_| status.success())
}

#[cfg(test)]
mod tests {
    use super::command_output;
    use std::time::{Duration, Instant};

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
}
