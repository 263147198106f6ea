//! Containment with cgroup v2 where Baton can manage a subtree (docs/security.md): every local
//! process runs in its own child cgroup `baton-<baton pid>-<label>-<n>`, joined by a shim before
//! the program is exec'd, so every descendant starts inside; once the leader has exited,
//! `cgroup.kill` ends everything left. `BATON_CONTAINMENT=process_group` forces process groups.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How processes are contained: one child cgroup per process under Baton's own cgroup (this
/// directory), or process groups only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    Cgroup(PathBuf),
    ProcessGroup,
}

impl std::fmt::Display for Containment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Containment::Cgroup(dir) => write!(f, "containment=cgroup cgroup={}", dir.display()),
            Containment::ProcessGroup => f.write_str("containment=process_group"),
        }
    }
}

/// The containment of this process (detected on first use).
pub fn containment() -> &'static Containment {
    static MODE: OnceLock<Containment> = OnceLock::new();
    MODE.get_or_init(|| {
        let forced = std::env::var("BATON_CONTAINMENT").is_ok_and(|v| v == "process_group");
        let Some(dir) = (!forced).then(detect).flatten() else {
            return Containment::ProcessGroup;
        };
        sweep_stale(&dir);
        Containment::Cgroup(dir)
    })
}

/// Baton's cgroup directory when it is cgroup v2, writable and supports `cgroup.kill`.
fn detect() -> Option<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = cgroup2_mount(&mountinfo)?;
    let dir = mount.join(rel.trim_start_matches('/'));
    let probe = dir.join(format!("baton-probe-{}", std::process::id()));
    fs::create_dir(&probe).ok()?;
    // A child moves itself from Baton's cgroup into the probe's sibling: both `cgroup.procs`
    // must be writable (cgroup v2 checks the common ancestor too). Opening writes nothing.
    let open = |d: &Path| OpenOptions::new().write(true).open(d.join("cgroup.procs"));
    let ok = probe.join("cgroup.kill").exists()
        && Path::new("/bin/sh").exists()
        && open(&probe).is_ok()
        && open(&dir).is_ok();
    let _ = fs::remove_dir(&probe);
    ok.then_some(dir)
}

/// The mount point of the cgroup2 hierarchy in `/proc/self/mountinfo` text.
pub(crate) fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mount = pre.split_whitespace().nth(4).map(PathBuf::from);
        mount.filter(|_| post.split_whitespace().next() == Some("cgroup2"))
    })
}

/// Kill and remove child cgroups a crashed Baton left behind (their Baton pid is gone).
fn sweep_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let rest = name.strip_prefix("baton-").unwrap_or_default();
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            drop(ProcCgroup { dir: e.path() });
        }
    }
}

/// `sh -c JOIN baton-cgroup <cgroup.procs> <program> <args…>`: the shim moves itself into the
/// cgroup, then execs the program, which therefore starts inside it. A failed write leaves the
/// program in Baton's cgroup (group containment still applies); it never fails the spawn.
const JOIN: &str = r#"{ echo 0 >"$1"; } 2>/dev/null; shift; exec "$@""#;

/// At most this many cgroups (the process's own and those an agent nested below it) are visited
/// when one is removed.
const MAX_NESTED: usize = 1024;

/// One process's child cgroup. Dropping it kills what is left in it, waits (bounded) until it is
/// empty and removes it with the cgroups an agent nested below it, so a cgroup (or what runs in
/// it) never leaks, e.g. when a spawn or a supervisor thread failed.
#[derive(Debug)]
pub(crate) struct ProcCgroup {
    dir: PathBuf,
}

impl ProcCgroup {
    /// Create `<base>/baton-<pid>-<label>-<n>` for a process labelled `label`; `None` in
    /// process-group mode.
    pub(crate) fn create(label: &str) -> Option<ProcCgroup> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let Containment::Cgroup(base) = containment() else {
            return None;
        };
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("baton-{}-{label}-{n}", std::process::id()));
        if let Err(e) = fs::create_dir(&dir) {
            log::warn!("cannot create a cgroup; using the process group only error={e}");
            return None;
        }
        Some(ProcCgroup { dir })
    }

    /// A command running `program` inside this cgroup: the `/bin/sh` shim [`JOIN`] joins it and
    /// execs `program`. No `pre_exec` hook, so std spawns with `posix_spawn` (a vfork) instead of
    /// forking Baton with all its threads and mappings: the cost stays flat in the number of
    /// running agents.
    pub(crate) fn command(&self, program: &Path) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", JOIN, "baton-cgroup"]);
        c.arg(self.dir.join("cgroup.procs")).arg(program);
        c
    }

    /// Kill every process in the cgroup and in the cgroups nested below it (`cgroup.kill`).
    pub(crate) fn kill(&self) {
        let path = self.dir.join("cgroup.kill");
        if let Ok(mut f) = OpenOptions::new().write(true).open(path) {
            let _ = f.write_all(b"1");
        }
    }
}

impl Drop for ProcCgroup {
    fn drop(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let mut budget = MAX_NESTED;
            match remove_tree(&self.dir, &mut budget) {
                Ok(()) => return,
                Err(e) if Instant::now() >= deadline => {
                    let dir = self.dir.display();
                    log::warn!("cannot remove cgroup cgroup={dir} error={e}");
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

/// Remove the cgroup `dir` and every cgroup nested below it, deepest first (a cgroup with a child
/// cannot be removed), visiting at most `budget` more cgroups; a missing one is fine.
fn remove_tree(dir: &Path, budget: &mut usize) -> io::Result<()> {
    *budget = budget
        .checked_sub(1)
        .ok_or_else(|| io::Error::other(format!("more than {MAX_NESTED} nested cgroups")))?;
    let entries = match fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path(), budget)?;
        }
    }
    match fs::remove_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount() {
        let info = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                    30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";
        assert_eq!(
            cgroup2_mount(info),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            cgroup2_mount("30 25 0:26 / /x rw - cgroup cgroup rw\n"),
            None
        );
    }
}
