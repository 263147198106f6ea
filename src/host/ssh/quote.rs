//! Building the one remote command line `ssh` hands to the remote login shell. Every word is
//! single-quoted, so the remote shell parses nothing but quoting: issue text, paths and
//! environment values reach the remote program byte for byte.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// Join `words` into one POSIX shell command line, each word quoted as `'…'` with each `'`
/// written as `'\''`: one word whatever it contains (`$(…)`, backquotes, quotes, newlines,
/// globs; NUL excepted: no argument can carry NUL).
pub fn shell_join<I, S>(words: I) -> OsString
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut out = Vec::new();
    for w in words {
        if !out.is_empty() {
            out.push(b' ');
        }
        out.push(b'\'');
        for &b in w.as_ref().as_bytes() {
            match b {
                b'\'' => out.extend_from_slice(b"'\\''"),
                _ => out.push(b),
            }
        }
        out.push(b'\'');
    }
    OsString::from_vec(out)
}

/// True for a portable environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_env_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && !b[0].is_ascii_digit()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// What `sh -c 'printf "%s\n" <quoted>'` prints for `word`.
    fn round_trip(word: &str) -> String {
        let mut script = OsString::from("printf '%s' ");
        script.push(shell_join([word]));
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env_clear()
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn hostile_words_survive_a_shell_unchanged() {
        for w in [
            "",
            "plain",
            "it's",
            "'",
            "''",
            "$(touch /tmp/baton-pwned)",
            "`id`",
            "a\nb\n",
            "\"double\" $HOME ${PATH} \\ \\' *?[a] ~ ; | & > <",
            "'; rm -rf / #",
            "-n",
        ] {
            assert_eq!(round_trip(w), w, "word {w:?}");
        }
    }

    #[test]
    fn join_is_one_word_each() {
        let line = shell_join(["printf", "%s|", "a b", "c'd", "$(x)"]);
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|c'd|$(x)|");
    }

    #[test]
    fn env_names() {
        assert!(is_env_name(OsStr::new("BATON_ISSUE_ID")));
        assert!(is_env_name(OsStr::new("_x1")));
        assert!(!is_env_name(OsStr::new("1X")));
        assert!(!is_env_name(OsStr::new("A=B")));
        assert!(!is_env_name(OsStr::new("")));
        assert!(!is_env_name(OsStr::new("A B")));
    }
}
