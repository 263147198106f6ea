//! The `baton` binary: parse the command line, then hand over to `baton::app`.

fn main() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    no_malloc_thread_caches();
    let code = baton::app::main_with_args(std::env::args_os().skip(1));
    std::process::exit(code);
}

/// The glibc tunable that turns off the per-thread caches of freed blocks (tcache).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TUNABLES: &str = "glibc.malloc.tcache_count=0";

/// Run with glibc's per-thread caches off. Baton runs two threads per agent, and each thread's
/// cache keeps the blocks it freed: at 1,000 agents they held about 40 MiB (RSS 109 MiB with
/// them, 65 MiB without; docs/performance.md). glibc reads tunables only when a program starts,
/// so Baton starts itself once more with [`TUNABLES`] in `GLIBC_TUNABLES` (same pid, same
/// arguments), then drops the variable so that agents and hooks do not inherit it. An operator's
/// own `GLIBC_TUNABLES` wins (no restart); so does a failed `exec` (glibc's defaults).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn no_malloc_thread_caches() {
    use std::os::unix::process::CommandExt;
    match std::env::var_os("GLIBC_TUNABLES") {
        // Still one thread here, so changing the environment races with nothing.
        Some(v) if v == TUNABLES => std::env::remove_var("GLIBC_TUNABLES"),
        Some(_) => {}
        // SAFETY: getauxval only reads the auxiliary vector. A secure-execution program (file
        // capabilities, setuid) has GLIBC_TUNABLES stripped by the loader: restarting would loop.
        None if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 => {}
        None => {
            let mut args = std::env::args_os();
            let arg0 = args.next().unwrap_or_default();
            // The resolved path, not `/proc/self/exe`, keeps the process name `baton` (`ps`,
            // `pgrep`, journald's `_COMM`). Started through the dynamic loader (`ld-linux…
            // baton`), the running file is the loader: no restart.
            let Ok(exe) = std::env::current_exe() else {
                return;
            };
            if exe.file_name() == std::path::Path::new(&arg0).file_name() {
                let _failed = std::process::Command::new(exe)
                    .arg0(arg0)
                    .args(args)
                    .env("GLIBC_TUNABLES", TUNABLES)
                    .exec();
            }
        }
    }
}
