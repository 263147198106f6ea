//! Workspace keys (spec §4.2, §9.5 invariant 3): the directory name derived from an issue
//! identifier, using only `[A-Za-z0-9._-]`, with a SHA-256 suffix of the original identifier
//! whenever sanitization had to change it. Distinct identifiers get distinct keys: a clean
//! identifier is its own key, a changed one carries a 128-bit hash (no crafted pair of names can
//! share a directory), and a clean identifier that already ends like a hash suffix is hashed too.
//! Identifiers are themselves unambiguous (see `tracker::github::normalize::identifier`).

use std::path::{Path, PathBuf};

/// Longest sanitized stem kept before the hash suffix (file names are limited to 255 bytes).
const MAX_STEM: usize = 120;

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-'
}

/// The workspace directory name for `identifier`.
///
/// Characters outside `[A-Za-z0-9._-]` become `_`. When that changed anything (or the result would
/// be empty, all dots, overly long, or end in `-` and 32 hex digits like a suffix) the key gets
/// `-<32 hex digits>`, the first 128 bits of SHA-256 over the original identifier's bytes. An
/// identifier that is already clean is used unchanged.
pub fn workspace_key(identifier: &str) -> String {
    let mut stem: String = identifier
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    let mut changed = stem != identifier;
    if stem.is_empty() || stem.chars().all(|c| c == '.') {
        // "", "." and ".." would name the root or its parent.
        stem = stem.replace('.', "_");
        if stem.is_empty() {
            stem.push('_');
        }
        changed = true;
    }
    if stem.len() > MAX_STEM {
        // All chars are ASCII here, so byte truncation is safe.
        stem.truncate(MAX_STEM);
        changed = true;
    }
    changed |= looks_hashed(&stem);
    if changed {
        let digest = ring::digest::digest(&ring::digest::SHA256, identifier.as_bytes());
        let hex: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{stem}-{hex}")
    } else {
        stem
    }
}

/// True when `stem` ends like a hashed key (`-` and 32 lowercase hex digits): used as is, it could
/// equal another identifier's key.
fn looks_hashed(stem: &str) -> bool {
    let b = stem.as_bytes();
    b.len() > 32
        && b[b.len() - 33] == b'-'
        && b[b.len() - 32..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// `<root>/<workspace_key(identifier)>`.
pub fn workspace_path(root: &Path, identifier: &str) -> PathBuf {
    root.join(workspace_key(identifier))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_identifiers_are_kept() {
        assert_eq!(workspace_key("acme__myrepo-123"), "acme__myrepo-123");
        assert_eq!(workspace_key("a.b_c-1"), "a.b_c-1");
    }

    #[test]
    fn sanitized_identifiers_get_a_stable_hash_suffix() {
        let a = workspace_key("acme/repo-1");
        let b = workspace_key("acme:repo-1");
        assert!(a.starts_with("acme_repo-1-"), "{a}");
        assert!(b.starts_with("acme_repo-1-"), "{b}");
        assert_ne!(a, b, "distinct identifiers that sanitize alike must differ");
        assert_eq!(a, workspace_key("acme/repo-1"), "deterministic");
        assert_eq!(a.len(), "acme_repo-1-".len() + 32);
        // The clean identifier `acme_repo-1` keeps its own key and does not collide.
        assert_eq!(workspace_key("acme_repo-1"), "acme_repo-1");
    }

    #[test]
    fn dangerous_names_never_escape() {
        for id in [
            "",
            ".",
            "..",
            "../x",
            "a/../../b",
            "/etc/passwd",
            "ü\u{0}\n",
        ] {
            let k = workspace_key(id);
            assert!(!k.is_empty());
            assert!(k.chars().all(allowed), "{k:?}");
            assert!(k != "." && k != "..", "{id:?} -> {k:?}");
            assert!(!k.contains('/'));
        }
        let long = "x".repeat(1000);
        assert!(workspace_key(&long).len() <= MAX_STEM + 33);
    }

    /// Issue 21: no two identifiers share a key, also when a clean identifier is shaped like
    /// another identifier's hashed key.
    #[test]
    fn keys_are_injective() {
        let hashed = workspace_key("a/b");
        assert_ne!(workspace_key(&hashed), hashed);
        assert!(workspace_key(&hashed).starts_with(&hashed));
        let ids = ["a_/b#1", "a/_b#1", "a___b-1", "a_b#1", "a/b#1", "A/b#1"];
        let keys: std::collections::HashSet<String> =
            ids.iter().map(|i| workspace_key(i)).collect();
        assert_eq!(keys.len(), ids.len(), "{keys:?}");
    }
}
