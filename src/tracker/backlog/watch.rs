//! Instant reaction to board edits: a recursive `notify` watch of the board directory whose
//! relevant events (a task file or `config.yml` created, edited, moved or deleted) are debounced
//! into one "the board changed" ping. The daemon turns the ping into the same coalesced refresh
//! that `POST /api/v1/refresh` requests; polling remains the safety net.

use std::path::{Component, Path};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{unbounded, RecvTimeoutError, Sender};
use notify::{Event, EventKind, RecursiveMode, Watcher};

/// Quiet time after the last event before the ping (an editor's save is several events).
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// Longest a steady stream of events can hold the ping back.
pub const MAX_DELAY: Duration = Duration::from_millis(250);

/// True when `event` may change what the board reads: not an access, and on a Markdown file or
/// `config.yml`/`config.yaml` outside `drafts/` (an overflow with no paths counts).
pub fn is_relevant(event: &Event, board: &Path) -> bool {
    if matches!(event.kind, EventKind::Access(_)) {
        return false;
    }
    if event.paths.is_empty() {
        return true;
    }
    event.paths.iter().any(|p| {
        let rel = p.strip_prefix(board).unwrap_or(p);
        let drafts = Component::Normal("drafts".as_ref());
        let in_drafts = rel.components().any(|c| c == drafts);
        let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let lower = name.to_ascii_lowercase();
        let relevant_name =
            lower.ends_with(".md") || lower == "config.yml" || lower == "config.yaml";
        // A folder moved or removed as a whole (`archive/`, `tasks/`) has no `.md` name.
        let is_folder = !lower.contains('.');
        !in_drafts && (relevant_name || is_folder)
    })
}

/// Watch `board` recursively: bump `changes` on every relevant event as it arrives, and send `()`
/// on `changed` (without blocking) once per debounced burst of them. Dropping the watcher stops
/// the watch and its debounce thread.
pub fn watch_board(
    board: &Path,
    changes: Arc<AtomicU64>,
    changed: Sender<()>,
) -> Result<notify::RecommendedWatcher, String> {
    let board_abs = std::path::absolute(board).unwrap_or_else(|_| board.to_path_buf());
    let (raw_tx, raw_rx) = unbounded::<()>();
    let filter_root = board_abs.clone();
    let handler = move |res: notify::Result<Event>| {
        match res {
            Ok(ev) if !is_relevant(&ev, &filter_root) => return,
            Ok(_) => {}
            Err(e) => {
                log::warn!("event=backlog_watch_error error={e:?}; polling still picks up changes")
            }
        }
        changes.fetch_add(1, Ordering::SeqCst);
        let _ = raw_tx.send(());
    };
    // Links are not followed: one symlink to `/` would otherwise add a watch per directory of
    // the host (and the reader does not follow links either).
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher = notify::RecommendedWatcher::new(handler, config)
        .map_err(|e| format!("cannot create a file watcher: {e}"))?;
    watcher
        .watch(&board_abs, RecursiveMode::Recursive)
        .map_err(|e| format!("cannot watch {}: {e}", board_abs.display()))?;
    thread::Builder::new()
        .name("backlog-watch".into())
        .spawn(move || {
            // Ends when the watcher (the only sender) is dropped.
            while raw_rx.recv().is_ok() {
                let start = std::time::Instant::now();
                loop {
                    let left = MAX_DELAY.saturating_sub(start.elapsed());
                    match raw_rx.recv_timeout(DEBOUNCE.min(left)) {
                        Ok(()) if !left.is_zero() => continue,
                        Ok(()) | Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                let _ = changed.try_send(());
            }
        })
        .map_err(|e| format!("cannot start the board watch thread: {e}"))?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind};
    use std::path::PathBuf;

    fn ev(kind: EventKind, p: &str) -> Event {
        Event::new(kind).add_path(PathBuf::from(p))
    }

    #[test]
    fn relevant_events() {
        let b = Path::new("/b");
        let m = EventKind::Modify(ModifyKind::Any);
        assert!(is_relevant(&ev(m, "/b/tasks/task-1 - X.md"), b));
        assert!(is_relevant(&ev(m, "/b/config.yml"), b));
        assert!(is_relevant(
            &ev(EventKind::Create(CreateKind::Folder), "/b/archive"),
            b
        ));
        assert!(!is_relevant(&ev(m, "/b/drafts/task-1 - X.md"), b));
        assert!(!is_relevant(&ev(m, "/b/tasks/.task-1.md.swp"), b));
        assert!(!is_relevant(
            &ev(
                EventKind::Access(notify::event::AccessKind::Any),
                "/b/tasks/t.md"
            ),
            b
        ));
        assert!(is_relevant(&Event::new(m), b));
    }

    /// The inodes every inotify watch of this process is on (`/proc/self/fdinfo`).
    fn watched_inodes() -> Vec<u64> {
        let mut out = Vec::new();
        for fd in std::fs::read_dir("/proc/self/fdinfo").unwrap().flatten() {
            let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
            for line in info.lines().filter(|l| l.starts_with("inotify wd:")) {
                let ino = line.split(" ino:").nth(1).and_then(|r| r.split(' ').next());
                out.extend(ino.and_then(|h| u64::from_str_radix(h, 16).ok()));
            }
        }
        out
    }

    #[test]
    fn a_symlink_out_of_the_board_is_not_followed() {
        use std::os::unix::fs::MetadataExt;
        let root = std::env::temp_dir().join(format!("baton-watch-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (board, outside) = (root.join("board"), root.join("outside"));
        std::fs::create_dir_all(board.join("tasks")).unwrap();
        for i in 0..20 {
            std::fs::create_dir_all(outside.join(format!("d{i}"))).unwrap();
        }
        std::os::unix::fs::symlink(&outside, board.join("tasks/link")).unwrap();
        let (tx, _rx) = crossbeam_channel::bounded(1);
        let guard = watch_board(&board, Arc::new(AtomicU64::new(0)), tx).unwrap();
        let watched = watched_inodes();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert!(
            watched.contains(&ino(&board.join("tasks"))),
            "the board is watched"
        );
        for i in 0..20 {
            let d = outside.join(format!("d{i}"));
            assert!(!watched.contains(&ino(&d)), "{} is watched", d.display());
        }
        assert!(!watched.contains(&ino(&outside)));
        drop(guard);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_task_file_edit_pings_once_per_burst_and_drafts_do_not() {
        let dir = std::env::temp_dir().join(format!("baton-board-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tasks")).unwrap();
        std::fs::create_dir_all(dir.join("drafts")).unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let changes = Arc::new(AtomicU64::new(0));
        let guard = watch_board(&dir, changes.clone(), tx).unwrap();
        std::fs::write(dir.join("drafts/task-1 - a.md"), "x").unwrap();
        assert!(
            rx.recv_timeout(Duration::from_millis(400)).is_err(),
            "drafts are ignored"
        );
        for i in 0..5 {
            std::fs::write(dir.join("tasks/task-1 - a.md"), format!("{i}")).unwrap();
        }
        rx.recv_timeout(Duration::from_secs(5))
            .expect("a ping after the edits");
        assert!(changes.load(Ordering::SeqCst) >= 1);
        assert!(
            rx.recv_timeout(Duration::from_millis(400)).is_err(),
            "one ping per burst"
        );
        drop(guard);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
