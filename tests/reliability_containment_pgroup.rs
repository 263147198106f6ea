//! Issue 12, containment fallback: with `BATON_CONTAINMENT=process_group` (as on a machine
//! without a manageable cgroup v2 subtree) the group is still killed when its leader exits, and a
//! turn still ends when the result line has come and the agent has exited, even if an escaped
//! `setsid` descendant holds stdout.
//!
//! A test binary of its own (not in `tests/it/`) because it forces BATON_CONTAINMENT=process_group for the whole process.

#[path = "it/support/escapes.rs"]
mod escapes;

use std::time::Duration;

use baton::host::{containment, Containment, Host, LocalHost, ProcessSpec};

#[test]
fn process_group_mode_kills_the_group_and_the_turn_still_ends() {
    // Set before the first spawn: detection runs once per process.
    std::env::set_var("BATON_CONTAINMENT", "process_group");
    assert_eq!(containment(), &Containment::ProcessGroup);
    assert_eq!(containment().to_string(), "containment=process_group");
    let dir = std::env::temp_dir();
    let in_group = escapes::marker(3);
    let escaped = escapes::marker(4);
    let sleepers = escapes::leave_setsid_sleepers(2, &escaped);
    let script = format!("for i in 1 2 3; do sleep {in_group} & done\n{sleepers}\necho started");
    let p = LocalHost.spawn(&ProcessSpec::hook(&script, &dir)).unwrap();
    assert!(p.wait_exit(Duration::from_secs(10)).is_some());
    let left_in_group = escapes::wait_sleepers(&in_group, Duration::from_secs(5), |n| n == 0);
    let escaped_alive = escapes::sleepers(&escaped).len();
    escapes::kill_sleepers(&escaped);
    escapes::kill_sleepers(&in_group);
    assert_eq!(
        left_in_group, 0,
        "group members are killed when the leader exits"
    );
    assert_eq!(
        escaped_alive, 2,
        "setsid escapes a process group (the cgroup mode contains it)"
    );
}
