//! Untrusted prompt text on its way into argv: a NUL byte cannot travel there at all, and one
//! argument is limited by the kernel (`MAX_ARG_STRLEN`, 128 KiB on Linux). Either would make every
//! spawn fail with the same error, so the issue would retry forever; instead the prompt is made
//! argv-safe with a logged warning.

use std::borrow::Cow;

/// Longest prompt passed as one argument (bytes): below Linux's 128 KiB `MAX_ARG_STRLEN`.
pub const MAX_PROMPT_ARG_BYTES: usize = 120 * 1024;

/// `prompt` without NUL bytes and cut (at a character boundary) to [`MAX_PROMPT_ARG_BYTES`];
/// logs a warning naming `issue_identifier` when anything changed.
pub fn argv_safe_prompt<'a>(prompt: &'a str, issue_identifier: &str) -> Cow<'a, str> {
    let nuls = prompt.bytes().filter(|&b| b == 0).count();
    if nuls == 0 && prompt.len() <= MAX_PROMPT_ARG_BYTES {
        return Cow::Borrowed(prompt);
    }
    let mut out: String = prompt.chars().filter(|&c| c != '\0').collect();
    if nuls > 0 {
        log::warn!(
            "prompt contained NUL bytes that cannot be passed to the agent; removed them issue_identifier={issue_identifier} nul_bytes={nuls}"
        );
    }
    if out.len() > MAX_PROMPT_ARG_BYTES {
        let mut cut = MAX_PROMPT_ARG_BYTES;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        log::warn!(
            "prompt longer than one command-line argument may be; truncated issue_identifier={issue_identifier} bytes={} kept_bytes={cut}",
            out.len()
        );
        out.truncate(cut);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_prompts_are_borrowed() {
        assert!(matches!(argv_safe_prompt("hi", "x"), Cow::Borrowed("hi")));
    }

    #[test]
    fn nul_is_removed_and_long_prompts_are_cut_at_a_char_boundary() {
        assert_eq!(argv_safe_prompt("a\0b\0", "x"), "ab");
        let long = "é".repeat(MAX_PROMPT_ARG_BYTES);
        let cut = argv_safe_prompt(&long, "x");
        assert!(cut.len() <= MAX_PROMPT_ARG_BYTES && cut.len() + 2 > MAX_PROMPT_ARG_BYTES);
    }
}
