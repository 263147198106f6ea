//! A private OpenSSH server for the SSH worker tests: `sshd -D -e -f <cfg>` on 127.0.0.1 and a free
//! port, with a temporary host key and an authorized client key, plus an `ssh_config` naming the
//! server by an alias. Baton gets that config through a wrapper `ssh` script first on `PATH`
//! (`exec ssh -F <ssh_config> "$@"`) — the documented way to give Baton a custom `ssh_config`.
//!
//! Needs `BATON_SSHD` (the sshd binary, `.ci/setup-ssh.sh`); tests using it are `#[ignore]`d.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The sshd binary from `BATON_SSHD`.
pub fn sshd_bin() -> PathBuf {
    crate::support::tool::required("BATON_SSHD", ".ci/setup-ssh.sh")
}

/// A client-side directory: keys, `ssh_config`, `known_hosts` and `bin/ssh` (the wrapper).
pub struct SshClient {
    /// The directory (deleted on drop by the owner's tempdir).
    pub dir: PathBuf,
    /// `bin/` holding the wrapper `ssh`; put it first on `PATH`.
    pub bin: PathBuf,
    /// The client's private key.
    pub key: PathBuf,
}

impl SshClient {
    /// Keys and an empty config in `dir`.
    pub fn new(dir: &Path) -> SshClient {
        fs::create_dir_all(dir.join("bin")).unwrap();
        let key = dir.join("id_ed25519");
        keygen(&key);
        let cfg = dir.join("ssh_config");
        fs::write(&cfg, "").unwrap();
        fs::write(dir.join("known_hosts"), "").unwrap();
        // `bin/ssh` for PATH; `ssh-connect-3s` for `Lab::host` (ssh keeps an option's first value).
        for (name, opts) in [("bin/ssh", ""), ("ssh-connect-3s", "-o ConnectTimeout=3 ")] {
            let script = format!(
                "#!/bin/sh\nexec /usr/bin/ssh {opts}-F '{}' \"$@\"\n",
                cfg.display()
            );
            fs::write(dir.join(name), script).unwrap();
            fs::set_permissions(dir.join(name), fs::Permissions::from_mode(0o755)).unwrap();
        }
        SshClient {
            dir: dir.to_path_buf(),
            bin: dir.join("bin"),
            key,
        }
    }

    /// `PATH` with the wrapper first.
    pub fn path_env(&self) -> String {
        format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// Add a `Host <alias>` entry for `port` (also when nothing listens there) and trust `host_pub`.
    pub fn add_host(&self, alias: &str, port: u16, host_pub: Option<&str>) {
        let mut cfg = fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("ssh_config"))
            .unwrap();
        writeln!(
            cfg,
            "Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n",
            user = whoami(),
            key = self.key.display(),
            kh = self.dir.join("known_hosts").display(),
        )
        .unwrap();
        if let Some(pubkey) = host_pub {
            let mut kh = fs::OpenOptions::new()
                .append(true)
                .open(self.dir.join("known_hosts"))
                .unwrap();
            writeln!(kh, "[127.0.0.1]:{port} {}", pubkey.trim()).unwrap();
        }
    }
}

/// A running private sshd.
pub struct Sshd {
    /// The listening port.
    pub port: u16,
    /// Its directory (config, host key, authorized keys, log).
    pub dir: PathBuf,
    /// The host public key line.
    pub host_pub: String,
    child: Option<Child>,
}

impl Sshd {
    /// Start an sshd in `dir` accepting `client`'s key; `set_env` lands in every session's
    /// environment (sshd `SetEnv`), e.g. a per-host marker; `config` lines come first (sshd keeps
    /// the first value of a keyword), e.g. `MaxSessions 10` for a stock server.
    pub fn start(dir: &Path, client: &SshClient, set_env: &[(&str, &str)], config: &str) -> Sshd {
        Sshd::start_in(dir, client, set_env, config, false)
    }

    /// [`Sshd::start`]; with `pid_namespace` the server runs in a PID namespace of its own
    /// (`unshare`), so its sessions' pids and process groups are not this machine's: another
    /// host, as far as process ids go. Killing it ends every process in the namespace.
    pub fn start_in(
        dir: &Path,
        client: &SshClient,
        set_env: &[(&str, &str)],
        config: &str,
        pid_namespace: bool,
    ) -> Sshd {
        fs::create_dir_all(dir).unwrap();
        let _ = fs::create_dir_all("/run/sshd");
        let host_key = dir.join("host_ed25519");
        keygen(&host_key);
        let host_pub = fs::read_to_string(dir.join("host_ed25519.pub")).unwrap();
        let auth = dir.join("authorized_keys");
        fs::copy(client.key.with_extension("pub"), &auth).unwrap();
        let port = free_port();
        let mut cfg = format!(
            "{config}Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile {pid}\nAuthorizedKeysFile {auth}\n\
             StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nMaxSessions 100\nMaxStartups 100\n\
             LogLevel ERROR\n",
            hk = host_key.display(),
            pid = dir.join("sshd.pid").display(),
            auth = auth.display(),
        );
        if !set_env.is_empty() {
            let vars: Vec<String> = set_env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            cfg.push_str(&format!("SetEnv {}\n", vars.join(" ")));
        }
        let cfg_path = dir.join("sshd_config");
        fs::write(&cfg_path, cfg).unwrap();
        let log = fs::File::create(dir.join("sshd.log")).unwrap();
        let mut cmd = if pid_namespace {
            let mut c = Command::new("unshare");
            c.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
                .arg(sshd_bin());
            c
        } else {
            Command::new(sshd_bin())
        };
        let child = cmd
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "sshd did not listen: {}",
                fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Sshd {
            port,
            dir: dir.to_path_buf(),
            host_pub,
            child: Some(child),
        }
    }

    /// The listener's pid.
    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// Kill the listener and every sshd process below it (the sessions) with SIGKILL: the
    /// connection drops; the sessions' commands are left to Baton's remote watcher.
    pub fn kill_hard(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let root = child.id() as i32;
        let sessions: Vec<i32> = descendants(root)
            .into_iter()
            .filter(|p| {
                comm(*p).as_deref() == Some("sshd") || comm(*p).as_deref() == Some("sshd-session")
            })
            .collect();
        unsafe { libc::kill(root, libc::SIGKILL) };
        for p in sessions {
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        let _ = child.wait();
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.kill_hard();
    }
}

/// The current user's name.
pub fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn keygen(path: &Path) {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "baton-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `/proc/<pid>/comm`.
pub fn comm(pid: i32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The parent of `pid`.
fn ppid(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Every live process below `root`.
pub fn descendants(root: i32) -> Vec<i32> {
    let all: Vec<i32> = fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut out = vec![];
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for c in all.iter().copied().filter(|c| ppid(*c) == Some(p)) {
            out.push(c);
            frontier.push(c);
        }
    }
    out
}

pub use super::tempdir::TempDir;

/// One client and `n` servers (aliases `h1`, `h2`, …; each session has `BATON_TEST_HOST=<alias>`).
pub struct Lab {
    /// Scratch space: `client/`, `sshd-<alias>/`, `ctl/` (multiplexing sockets).
    pub tmp: TempDir,
    /// The client side.
    pub client: SshClient,
    /// The servers, in alias order.
    pub servers: Vec<Sshd>,
}

impl Lab {
    /// Start `n` servers; `extra_env` is added to every server's `SetEnv`.
    pub fn start(tag: &str, n: usize, extra_env: &[(&str, &str)]) -> Lab {
        Lab::start_with(tag, n, extra_env, "")
    }

    /// [`Lab::start`] with `config` lines first in every server's `sshd_config`.
    pub fn start_with(tag: &str, n: usize, extra_env: &[(&str, &str)], config: &str) -> Lab {
        Lab::start_in(tag, n, extra_env, config, false)
    }

    /// [`Lab::start_with`], each server in a PID namespace of its own when `pid_namespace` (see
    /// [`Sshd::start_in`]).
    pub fn start_in(
        tag: &str,
        n: usize,
        extra_env: &[(&str, &str)],
        config: &str,
        pid_namespace: bool,
    ) -> Lab {
        let tmp = TempDir::new(tag);
        let client = SshClient::new(&tmp.join("client"));
        fs::create_dir_all(tmp.join("ctl")).unwrap();
        fs::set_permissions(tmp.join("ctl"), fs::Permissions::from_mode(0o700)).unwrap();
        let mut servers = Vec::new();
        // Sessions get a private HOME (unless given): the login shells must not run the real
        // user's rc files.
        let home = tmp.join("home");
        fs::create_dir_all(&home).unwrap();
        let home = home.display().to_string();
        for i in 1..=n {
            let alias = format!("h{i}");
            let mut env = vec![("BATON_TEST_HOST", alias.as_str())];
            if !extra_env.iter().any(|(k, _)| *k == "HOME") {
                env.push(("HOME", home.as_str()));
            }
            env.extend_from_slice(extra_env);
            let dir = tmp.join(format!("sshd-{alias}"));
            let s = Sshd::start_in(&dir, &client, &env, config, pid_namespace);
            client.add_host(&alias, s.port, Some(&s.host_pub));
            servers.push(s);
        }
        Lab {
            tmp,
            client,
            servers,
        }
    }

    /// The wrapper `ssh` (adds `-F <ssh_config>`).
    pub fn ssh_program(&self) -> PathBuf {
        self.client.bin.join("ssh")
    }

    /// Established TCP connections to server `i`'s port (the server side of each).
    pub fn connections(&self, i: usize) -> usize {
        let port = format!(":{:04X}", self.servers[i].port);
        let tcp = fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        tcp.lines()
            .skip(1)
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].ends_with(&port) && f[3] == "01"
            })
            .count()
    }

    /// A host for `alias` using the lab's client and a private socket directory.
    pub fn host(&self, alias: &str) -> baton::host::SshHost {
        baton::host::SshHost::new(alias, &self.tmp.join("ctl"))
            .with_ssh_program(self.client.dir.join("ssh-connect-3s"))
    }
}
