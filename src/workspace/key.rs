//! Workspace keys (spec §4.2, §9.5 invariant 3): the directory name derived from an issue
//! identifier, using only `[A-Za-z0-9._-]`, with a stable 64-bit FNV-1a suffix of the original
//! identifier whenever sanitization had to change it.

use std::path::{Path, PathBuf};

use crate::workflow::loader::fnv1a64;

/// Longest sanitized stem kept before the hash suffix (file names are limited to 255 bytes).
const MAX_STEM: usize = 120;

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-'
}

/// The workspace directory name for `identifier`.
///
/// Characters outside `[A-Za-z0-9._-]` become `_`. When that changed anything (or the result would
/// be empty, all dots, or overly long) the key gets `-<16 hex digits>` of FNV-1a 64 over the
/// original identifier's bytes, so distinct identifiers that sanitize alike get distinct keys.
/// An identifier that is already clean is used unchanged.
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
    if changed {
        format!("{stem}-{:016x}", fnv1a64(identifier.as_bytes()))
    } else {
        stem
    }
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
        assert_eq!(a.len(), "acme_repo-1-".len() + 16);
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
        assert!(workspace_key(&long).len() <= MAX_STEM + 17);
    }
}
