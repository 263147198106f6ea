//! The state directory: Baton's own (ownership checks, no symlink ever followed), the instance
//! lock, crash-safe writes, write coalescing on disk, and the (ignored) write benchmark driven by
//! `scripts/bench/state_write.sh`.

use crate::support::issues::issue as board_issue;
use crate::support::tempdir::TempDir;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton::durable::{
    unsafe_reason, BackgroundSaver, StateDir, StateWriter, StoreError, WriteOutcome,
};
use baton::orchestrator::restore::to_json;
use baton::orchestrator::state::{OrchestratorState, RetryEntry, RetryKind};

/// The `state.json` bytes of a state with `n` queued retries (every retry field set), the first
/// value varying with `v`.
fn bytes(n: u64, v: u32) -> Vec<u8> {
    let mut s = OrchestratorState::default();
    for k in 1..=n {
        let i = board_issue(k, "Todo");
        let ws = PathBuf::from(format!("/var/lib/baton/workspaces/{}", i.identifier));
        s.queue_retry(RetryEntry {
            issue_id: i.id.clone(),
            identifier: i.identifier.clone(),
            url: i.url.clone(),
            attempt: 2,
            due_at: 1_796_000_000_000,
            error: Some("agent exited with status 1: turn failed after tool error".into()),
            kind: RetryKind::Failure,
            workspace_path: ws,
            ..RetryEntry::default()
        });
        s.runs_since_active.insert(i.id.clone(), v);
    }
    to_json(&s).unwrap()
}

/// Write the pending projection if it is due at `now` (`None`: nothing due), as the daemon's
/// persistence does without its writer thread.
fn write_if_due(w: &mut StateWriter, dir: &StateDir, now: u64) -> Option<WriteOutcome> {
    let bytes = w.take_due(now)?;
    let result = dir.save(&bytes);
    Some(w.finish(bytes, result, now))
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn open_creates_a_private_dir_and_save_read_round_trips() {
    let t = TempDir::unborn("roundtrip");
    let dir = StateDir::open(t.0.join("nested/state"), true).unwrap();
    assert_eq!(mode(dir.path()), 0o700);
    assert_eq!(mode(&t.0), 0o700, "missing parents are created private too");
    assert!(!dir.readable_by_others());
    assert_eq!(dir.read_state().unwrap(), None);

    let b = bytes(30, 1);
    dir.save(&b).unwrap();
    assert_eq!(mode(&dir.state_file()), 0o600);
    assert_eq!(dir.read_state().unwrap(), Some(b));
    assert_eq!(
        names(dir.path()),
        ["state.json"],
        "no temp file left behind"
    );

    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let reopened = StateDir::open(dir.path(), false).unwrap();
    assert!(reopened.readable_by_others(), "kept, reported");
}

#[test]
fn second_locker_gets_state_locked_with_the_holder_pid() {
    let t = TempDir::unborn("lock");
    let dir = StateDir::open(&t.0, true).unwrap();
    assert_eq!(dir.lock_holder(), None);
    dir.lock().unwrap();
    let pid = std::process::id();
    assert_eq!(
        fs::read_to_string(t.join("pid")).unwrap(),
        format!("{pid}\n")
    );

    // flock locks belong to the open file description: a second open conflicts in-process.
    let other = StateDir::open(&t.0, false).unwrap();
    let err = other.lock().unwrap_err();
    assert_eq!(err.name(), "state_locked");
    assert_eq!(
        err.to_string(),
        format!("state_locked: {} is in use by pid {pid}", t.0.display())
    );
    assert_eq!(other.lock_holder(), Some(Some(pid)));

    drop(dir);
    assert_eq!(other.lock_holder(), None, "released on drop");
    other.lock().unwrap();
    let probe = StateDir::open(&t.0, false).unwrap();
    assert!(probe.lock_holder().is_some());
    assert!(
        other.lock_holder().is_none(),
        "the probe did not take the lock"
    );
}

#[test]
fn unreadable_files_are_reported_and_moved_aside_without_overwriting() {
    let t = TempDir::unborn("aside");
    let dir = StateDir::open(&t.0, true).unwrap();
    fs::write(dir.state_file(), "x").unwrap();
    assert_eq!(
        dir.move_aside("corrupt", 1_000).unwrap(),
        t.join("state.json.corrupt-1000")
    );
    fs::write(dir.state_file(), "y").unwrap();
    assert_eq!(
        dir.move_aside("corrupt", 1_000).unwrap(),
        t.join("state.json.corrupt-1000-1"),
        "the earlier copy is not overwritten"
    );
    assert_eq!(
        fs::read_to_string(t.join("state.json.corrupt-1000")).unwrap(),
        "x"
    );
    // A FIFO is never opened blocking; a directory is not a file.
    let fifo = std::ffi::CString::new(dir.state_file().to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert_eq!(dir.read_state().unwrap_err(), "not a regular file");
}

#[test]
fn planted_symlinks_in_the_state_dir_are_never_followed() {
    let t = TempDir::new("planted");
    let victim = t.join("victim");
    fs::write(&victim, "precious").unwrap();
    let d = t.join("state");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
    for name in ["state.json", ".state.json.tmp", "pid"] {
        symlink(&victim, d.join(name)).unwrap();
    }
    let dir = StateDir::open(&d, false).unwrap();
    assert!(dir.read_state().unwrap_err().starts_with("cannot open"));
    dir.move_aside("corrupt", 7).unwrap();
    dir.lock().unwrap();
    dir.save(b"{}").unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    for name in ["state.json", "pid"] {
        assert!(
            fs::symlink_metadata(d.join(name)).unwrap().is_file(),
            "{name}"
        );
    }
    assert!(fs::symlink_metadata(d.join("state.json.corrupt-7"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn directories_others_can_change_are_refused() {
    let t = TempDir::new("unsafe");
    let open = t.join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let why = unsafe_reason(&open).unwrap();
    assert!(why.contains("writable by group or others"), "{why}");
    // A private directory below a world-writable (not sticky) one.
    let inner = open.join("state");
    fs::create_dir(&inner).unwrap();
    fs::set_permissions(&inner, fs::Permissions::from_mode(0o700)).unwrap();
    let why = unsafe_reason(&inner).unwrap();
    assert!(why.contains(open.to_str().unwrap()), "{why}");
    let err = StateDir::open(&inner, false).unwrap_err();
    assert_eq!(err.name(), "state_dir_unsafe");
    assert!(err
        .to_string()
        .starts_with(&format!("state_dir_unsafe: {}: ", inner.display())));
    // /tmp itself (root-owned, sticky) is a fine parent.
    assert_eq!(unsafe_reason(&t.0), None);
    // A symlink named as the state dir counts as its target.
    let link = t.join("link");
    symlink(&inner, &link).unwrap();
    assert!(unsafe_reason(&link).is_some());
}

/// Make `dir` unwritable. Root ignores directory permissions, so as root the directory is
/// replaced by a regular file instead (every write below it then fails).
fn make_unwritable(dir: &Path) -> impl FnOnce() {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o500)).unwrap();
    let probe = dir.join("probe");
    if fs::write(&probe, b"").is_err() {
        let dir = dir.to_path_buf();
        return Box::new(move || {
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap()
        }) as Box<dyn FnOnce()>;
    }
    let _ = fs::remove_file(&probe);
    let moved = dir.with_extension("away");
    fs::rename(dir, &moved).unwrap();
    fs::write(dir, b"not a directory").unwrap();
    let dir = dir.to_path_buf();
    Box::new(move || {
        fs::remove_file(&dir).unwrap();
        fs::rename(&moved, &dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    })
}

#[test]
fn unwritable_dir_fails_the_write_keeps_the_state_and_retries_later() {
    let t = TempDir::unborn("readonly");
    let dir = StateDir::open(&t.0, true).unwrap();
    let mut w = StateWriter::new(100, 1_000);
    assert!(w.offer(bytes(1, 1), 0));
    assert!(matches!(
        write_if_due(&mut w, &dir, 0),
        Some(WriteOutcome::Written { recovered: false })
    ));

    let restore = make_unwritable(&t.0);
    assert!(dir.save(&bytes(2, 1)).is_err(), "save returns an error");
    assert!(w.offer(bytes(2, 1), 500));
    match write_if_due(&mut w, &dir, 500) {
        Some(WriteOutcome::Failed { error, first }) => {
            assert!(first);
            assert!(
                ["state_io", "state_lock_lost"].contains(&error.name()),
                "{error}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(w.next_due(), Some(1_500), "retried after the back-off");
    assert!(write_if_due(&mut w, &dir, 1_499).is_none(), "not due yet");
    assert!(matches!(
        write_if_due(&mut w, &dir, 1_500),
        Some(WriteOutcome::Failed { first: false, .. })
    ));
    restore();

    assert!(matches!(
        write_if_due(&mut w, &dir, 2_500),
        Some(WriteOutcome::Written { recovered: true })
    ));
    assert_eq!(dir.read_state().unwrap(), Some(bytes(2, 1)));
}

#[test]
fn writer_writes_only_changes_and_flushes_on_shutdown() {
    let t = TempDir::unborn("writer");
    let dir = StateDir::open(&t.0, true).unwrap();
    let mut w = StateWriter::new(100, 5_000);
    assert!(w.offer(bytes(1, 1), 0));
    assert!(matches!(
        write_if_due(&mut w, &dir, 0),
        Some(WriteOutcome::Written { .. })
    ));
    assert!(!w.offer(bytes(1, 1), 5), "same as on disk");
    assert_eq!(w.next_due(), None, "clean");

    assert!(w.offer(bytes(1, 3), 20));
    assert!(!w.offer(bytes(1, 3), 30), "already pending");
    assert_eq!(w.next_due(), Some(100));
    assert!(write_if_due(&mut w, &dir, 50).is_none(), "not due yet");
    assert!(matches!(w.flush(&dir, 60), WriteOutcome::Written { .. }));
    assert_eq!(dir.read_state().unwrap(), Some(bytes(1, 3)));
    assert!(matches!(w.flush(&dir, 70), WriteOutcome::Clean));

    assert!(w.offer(bytes(1, 4), 80));
    assert!(!w.offer(bytes(1, 3), 90), "changed back to what is on disk");
    assert_eq!(w.next_due(), None);
}

/// Figures for issue 11: time per save of 1,000 known issues, with and without fsync, and the
/// file size. Run with `scripts/bench/state_write.sh` (release build).
#[test]
#[ignore = "benchmark: run scripts/bench/state_write.sh"]
fn bench_state_write_1000_issues() {
    let t = TempDir::unborn("bench");
    let dir = match std::env::var_os("BATON_BENCH_DIR") {
        Some(d) => StateDir::open(
            PathBuf::from(d).join(format!("bench-{}", std::process::id())),
            true,
        )
        .unwrap(),
        None => StateDir::open(&t.0, true).unwrap(),
    };
    let state = bytes(1_000, 1);
    let rounds = 200;
    let report = |label: &str, save: &dyn Fn(&[u8])| {
        save(&state); // warm up
        let mut times: Vec<f64> = (0..rounds)
            .map(|_| {
                let t0 = Instant::now();
                save(&state);
                t0.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(|a, b| a.total_cmp(b));
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        println!(
            "{label}: mean {mean:.3} ms, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({rounds} writes)",
            times[rounds / 2],
            times[rounds * 99 / 100],
            times[rounds - 1]
        );
    };
    report("save with fsync   ", &|s| dir.save(s).unwrap());
    // The same temp file and rename without the fsyncs: atomic but not durable.
    report("save without fsync", &|s| {
        fs::write(dir.path().join(".state.json.tmp"), s).unwrap();
        fs::rename(dir.path().join(".state.json.tmp"), dir.state_file()).unwrap();
    });
    let t0 = Instant::now();
    let loaded = dir.read_state().unwrap().unwrap();
    println!(
        "read              : {:.3} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(loaded, state);
    println!(
        "file size         : {} bytes for 1000 queued retries",
        state.len()
    );
    if std::env::var_os("BATON_BENCH_DIR").is_some() {
        let _ = fs::remove_dir_all(dir.path());
    }
}

#[test]
fn background_saver_writes_off_thread_and_reports_back() {
    let t = TempDir::unborn("saver");
    let dir = StateDir::open(&t.0, true).unwrap();
    let (done_tx, done) = crossbeam_channel::unbounded();
    let saver = BackgroundSaver::spawn(dir.clone(), done_tx).unwrap();
    let mut w = StateWriter::new(100, 1_000);

    assert!(w.offer(bytes(1, 1), 0));
    let job = w.take_due(0).expect("due at once");
    assert_eq!(w.next_due(), None, "the report wakes the loop, not a timer");
    assert!(w.take_due(500).is_none(), "one write in flight at a time");
    // A change while the write is in flight stays pending, even one back to the old content.
    assert!(w.offer(bytes(1, 2), 10));
    saver.submit(job).unwrap();
    let report = done.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(report.elapsed > Duration::ZERO);
    assert!(matches!(
        w.finish(report.bytes, report.result, 20),
        WriteOutcome::Written { recovered: false }
    ));
    assert_eq!(
        w.next_due(),
        Some(120),
        "the change made in flight is due one interval later"
    );
    assert_eq!(dir.read_state().unwrap(), Some(bytes(1, 1)));

    // Shutdown: stop the thread, finish what it reported, flush on this thread.
    saver.submit(w.take_due(120).unwrap()).unwrap();
    assert!(w.offer(bytes(1, 3), 130));
    saver.stop();
    for r in done.try_iter() {
        w.finish(r.bytes, r.result, 140);
    }
    assert!(matches!(w.flush(&dir, 150), WriteOutcome::Written { .. }));
    assert_eq!(dir.read_state().unwrap(), Some(bytes(1, 3)));
}

#[test]
fn a_failed_background_write_is_retried_with_the_newest_state() {
    let mut w = StateWriter::new(100, 1_000);
    assert!(w.offer(bytes(1, 1), 0));
    let job = w.take_due(0).unwrap();
    assert!(w.offer(bytes(1, 2), 5));
    let err = StoreError::io(
        "write temp state",
        Path::new("/x"),
        std::io::Error::other("disk full"),
    );
    assert!(matches!(
        w.finish(job, Err(err), 10),
        WriteOutcome::Failed { first: true, .. }
    ));
    assert_eq!(w.next_due(), Some(1_010));
    assert_eq!(
        w.take_due(1_010).unwrap(),
        bytes(1, 2),
        "newest state, not the failed one"
    );
}

#[test]
fn a_killed_holder_releases_the_lock_and_children_do_not_inherit_it() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let t = TempDir::unborn("lock-proc");
    let dir = StateDir::open(&t.0, true).unwrap();

    // Another process group holds the directory's lock and writes its pid, as a Baton would
    // (util-linux `flock`; skipped where it is missing).
    let Ok(mut holder) = Command::new("flock")
        .args(["-w", "10"])
        .arg(&t.0)
        .args(["sh", "-c", "echo $$ > \"$0/pid\"; exec sleep 60"])
        .arg(&t.0)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
    else {
        eprintln!("skipping: no flock(1)");
        return;
    };
    let me = std::process::id();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (err, pid) = loop {
        assert!(Instant::now() < deadline, "flock(1) never took the lock");
        let written = fs::read_to_string(t.join("pid")).ok();
        let pid = written.and_then(|s| s.trim().parse::<u32>().ok());
        let probe = StateDir::open(&t.0, false).unwrap();
        match (probe.lock(), pid) {
            (Err(e), Some(pid)) if pid != me => break (e, pid),
            _ => {} // flock(1) has not taken it yet (a probe that got it drops it here)
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        err.to_string(),
        format!("state_locked: {} is in use by pid {pid}", t.0.display())
    );
    assert_eq!(dir.lock_holder(), Some(Some(pid)));
    // SIGKILL the holder's group: the kernel releases the lock.
    let pgid = i32::try_from(holder.id()).unwrap();
    // SAFETY: kill(2) on the process group we just created (pgid > 1).
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGKILL) }, 0);
    holder.wait().unwrap();
    let lock = lock_within(&t.0, Duration::from_secs(10)).expect("lock never released");

    // Our lock is close-on-exec: a child that outlives us does not keep it. (The exec'ing child
    // drops its copy a moment after spawn returns, hence the bounded poll.)
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    drop(lock);
    let again = lock_within(&t.0, Duration::from_secs(5));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        again.is_ok(),
        "a child inherited the lock: {:?}",
        again.err()
    );
}

/// Poll a fresh [`StateDir::lock`] of `path` until it succeeds or `limit` passes (the last error).
fn lock_within(path: &Path, limit: Duration) -> Result<StateDir, StoreError> {
    let deadline = Instant::now() + limit;
    loop {
        let dir = StateDir::open(path, false)?;
        match dir.lock() {
            Err(e) if Instant::now() < deadline => drop(e),
            Err(e) => return Err(e),
            Ok(()) => return Ok(dir),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_renamed_or_replaced_state_dir_is_detected_before_the_next_write() {
    let t = TempDir::new("lost");
    let path = t.join("state");
    let dir = StateDir::open(&path, true).unwrap();
    dir.lock().unwrap();
    dir.save(b"{}").unwrap();
    // Deleting or replacing files does not touch the lock.
    fs::remove_file(path.join("pid")).unwrap();
    symlink("/dev/null", path.join("lock")).unwrap();
    assert_eq!(
        StateDir::open(&path, false)
            .unwrap()
            .lock()
            .unwrap_err()
            .name(),
        "state_locked"
    );
    dir.save(b"{}").unwrap();
    // The directory itself moved away, a new one in its place: never written again.
    fs::rename(&path, t.join("moved")).unwrap();
    fs::create_dir(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
    let err = dir.save(b"{\"late\":1}").unwrap_err();
    assert_eq!(err.name(), "state_lock_lost");
    assert!(!path.join("state.json").exists());
    assert_eq!(fs::read(t.join("moved/state.json")).unwrap(), b"{}");
}
