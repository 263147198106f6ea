//! `baton check`'s SSH worker host lines (a Baton built with `ssh`).

use super::{quoted, truncate, Report, ServiceConfig};

/// One line per SSH worker host: reachable, `workspace.root` writable, agent CLI version.
pub(super) fn check_hosts(r: &mut Report<'_>, cfg: &ServiceConfig) {
    if cfg.worker.ssh_hosts.is_empty() {
        return;
    }
    let pool = crate::host::HostPool::new();
    pool.configure(&cfg.worker);
    let command = &cfg.agent_cli().command;
    for h in &cfg.worker.ssh_hosts {
        match crate::host::ssh::probe_host(&pool.ssh(h), &cfg.workspace_root, command) {
            Ok(v) => r.ok(format!(
                "host {h}: reachable, {} writable, agent {}",
                cfg.workspace_root.display(),
                quoted(&v)
            )),
            Err(e) => r.fail(format!("host {h}: {}", truncate(&e, 200))),
        }
        if let Some(Err(e)) = cfg.agent_sandbox().map(|sb| sb.check(pool.ssh(h).as_ref())) {
            r.fail(e);
        }
    }
}
