//! Hot reload of WORKFLOW.md (spec §6.2): watch the *parent directory* (editors save by renaming
//! over the file, which kills a watch on the file itself) and ping the main loop, which debounces,
//! re-reads and compares a content hash; a per-tick `stat` is the safety net.

use std::path::Path;

use crossbeam_channel::{bounded, Receiver};
use notify::{Event, EventKind, RecursiveMode, Watcher};

/// Start watching `workflow_path`'s parent directory. Returns the watcher (drop it to stop
/// watching) and a receiver of undebounced pings (coalesced: at most one is pending at a time).
pub fn watch_workflow(
    workflow_path: &Path,
) -> Result<(notify::RecommendedWatcher, Receiver<()>), String> {
    let abs = super::loader::workflow_dir(workflow_path);
    let file_name = workflow_path
        .file_name()
        .ok_or_else(|| format!("{} has no file name", workflow_path.display()))?
        .to_os_string();
    let (tx, rx) = bounded(1);
    // Our own reads (access events) never count, nor events on other files in the directory;
    // rescans (overflow) carry no paths: "maybe changed".
    let relevant = move |ev: &Event| {
        !matches!(ev.kind, EventKind::Access(_))
            && (ev.paths.is_empty() || ev.paths.iter().any(|p| p.file_name() == Some(&*file_name)))
    };
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| match res {
        Ok(ev) if relevant(&ev) => {
            // Full means a ping is already pending; that one covers this change too.
            let _ = tx.try_send(());
        }
        Ok(_) => {}
        Err(e) => {
            log::warn!("event=workflow_watch_error error={e:?}; the poll-tick stat check still detects changes");
            let _ = tx.try_send(());
        }
    })
    .map_err(|e| format!("cannot create a file watcher: {e}"))?;
    watcher
        .watch(&abs, RecursiveMode::NonRecursive)
        .map_err(|e| format!("cannot watch {}: {e}", abs.display()))?;
    Ok((watcher, rx))
}

/// A cheap fingerprint of the file for the per-tick safety-net check: (mtime, length); the mtime
/// is the epoch on platforms that cannot report it. `None` when the file cannot be stat'ed.
pub fn stat_fingerprint(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let md = std::fs::metadata(path).ok()?;
    Some((md.modified().unwrap_or(std::time::UNIX_EPOCH), md.len()))
}
