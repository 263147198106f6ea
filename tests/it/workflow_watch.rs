//! Spec §6.2: the real watcher (notify on the parent directory) notices in-place writes and
//! editor-style rename saves, and ignores other files. Bounded waits; no fixed sleeps.

use crate::support::tempdir::TempDir;
use std::time::Duration;

use baton::workflow::watch::{stat_fingerprint, watch_workflow};

const WAIT: Duration = Duration::from_secs(10);

fn drain(rx: &crossbeam_channel::Receiver<()>) {
    while rx.recv_timeout(Duration::from_millis(300)).is_ok() {}
}

#[test]
fn detects_in_place_write_and_rename_save() {
    let d = TempDir::new("rename");
    let p = d.join("WORKFLOW.md");
    std::fs::write(&p, "v1").unwrap();
    let (_w, rx) = watch_workflow(&p).unwrap();

    std::fs::write(&p, "v2").unwrap();
    rx.recv_timeout(WAIT).expect("in-place write noticed");
    drain(&rx);

    // Editor-style save: write a temp file, rename it over the original. A watch on the file
    // itself would die here; the directory watch keeps working.
    let tmp = d.join(".WORKFLOW.md.swp");
    std::fs::write(&tmp, "v3").unwrap();
    std::fs::rename(&tmp, &p).unwrap();
    rx.recv_timeout(WAIT).expect("rename save noticed");
    drain(&rx);

    // And again after the rename (the watch survived).
    std::fs::write(&p, "v4").unwrap();
    rx.recv_timeout(WAIT).expect("write after rename noticed");
}

#[test]
fn ignores_other_files_and_reads() {
    let d = TempDir::new("other");
    let p = d.join("WORKFLOW.md");
    std::fs::write(&p, "v1").unwrap();
    let (_w, rx) = watch_workflow(&p).unwrap();
    drain(&rx);
    std::fs::write(d.join("notes.txt"), "x").unwrap();
    let _ = std::fs::read(&p).unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(700)).is_err(),
        "no ping for unrelated files or reads"
    );
}

#[test]
fn stat_fingerprint_changes_with_content_length() {
    let d = TempDir::new("stat");
    let p = d.join("WORKFLOW.md");
    std::fs::write(&p, "a").unwrap();
    let a = stat_fingerprint(&p).unwrap();
    std::fs::write(&p, "abc").unwrap();
    assert_ne!(stat_fingerprint(&p).unwrap(), a);
    assert!(stat_fingerprint(&d.join("missing")).is_none());
}
