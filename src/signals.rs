//! SIGINT/SIGTERM → a channel message, via a self-pipe (the only async-signal-safe work in the handler
//! is one `write(2)`). The main loop `select!`s on the receiver and shuts down cleanly.

use std::sync::atomic::{AtomicI32, Ordering};

use crossbeam_channel::{bounded, Receiver, TrySendError};

static PIPE_WRITE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_sig: libc::c_int) {
    let fd = PIPE_WRITE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = [1u8];
        // SAFETY: write(2) is async-signal-safe; the fd stays open for the process lifetime.
        unsafe {
            libc::write(fd, b.as_ptr().cast(), 1);
        }
    }
}

/// Install SIGINT and SIGTERM handlers and return a receiver that gets one message per signal.
/// Call once per process.
pub(crate) fn shutdown_channel() -> std::io::Result<Receiver<()>> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: plain pipe2(2) call with a valid 2-element array; close-on-exec so agents never
    // inherit the descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    PIPE_WRITE_FD.store(fds[1], Ordering::SeqCst);
    let (tx, rx) = bounded(4);
    let read_fd = fds[0];
    crate::runtime::threads::spawn_supervised("baton-signals", move || loop {
        let mut b = [0u8; 1];
        // SAFETY: blocking read into a 1-byte buffer from our own pipe.
        let n = unsafe { libc::read(read_fd, b.as_mut_ptr().cast(), 1) };
        let stop = match n {
            1 => matches!(tx.try_send(()), Err(TrySendError::Disconnected(()))),
            0 => true,
            _ => std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted,
        };
        if stop {
            return;
        }
    })?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing a handler that only performs an async-signal-safe write(2).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(rx)
}
