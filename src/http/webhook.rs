//! GitHub webhook signatures: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`,
//! verified in constant time (`ring::hmac::verify`), and the memory of recent delivery ids.
//! The body itself is never parsed.

use std::collections::VecDeque;
use std::sync::Mutex;

use ring::hmac;

use crate::workflow::config::Secret;

pub(crate) const SIGNATURE_HEADER: &str = "X-Hub-Signature-256";
pub(crate) const EVENT_HEADER: &str = "X-GitHub-Event";
/// The delivery's id (a GUID), the same on a redelivery.
pub(crate) const DELIVERY_HEADER: &str = "X-GitHub-Delivery";

/// The ids of the last accepted deliveries, so that one delivery sent twice (GitHub retries,
/// a redelivery, a proxy replaying) queues one refresh. Bounded: the oldest id is forgotten.
#[derive(Debug, Default)]
pub struct Deliveries(Mutex<VecDeque<String>>);

impl Deliveries {
    pub const REMEMBERED: usize = 1024;

    /// Whether `id` was remembered; ids that are not plausibly GitHub's (a 36-byte GUID),
    /// empty or over 64 bytes, count as never seen and are never remembered.
    pub(crate) fn seen(&self, id: &str) -> bool {
        plausible(id) && self.lock().iter().any(|d| d == id)
    }

    pub(crate) fn remember(&self, id: &str) {
        if !plausible(id) {
            return;
        }
        let mut ids = self.lock();
        if ids.len() >= Self::REMEMBERED {
            ids.pop_front();
        }
        ids.push_back(id.to_string());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn plausible(id: &str) -> bool {
    (1..=64).contains(&id.len())
}

/// Why a delivery's signature was rejected (the message is safe to return to the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SignatureError {
    Missing,
    Malformed,
    Mismatch,
}

impl SignatureError {
    pub fn message(self) -> &'static str {
        match self {
            SignatureError::Missing => "missing X-Hub-Signature-256 header",
            SignatureError::Malformed => "X-Hub-Signature-256 must be sha256=<64 hex digits>",
            SignatureError::Mismatch => "X-Hub-Signature-256 does not match the body",
        }
    }
}

/// Check `header` (the raw `X-Hub-Signature-256` value) against the HMAC-SHA256 of `body`.
pub(crate) fn verify_signature(
    secret: &Secret,
    body: &[u8],
    header: Option<&str>,
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?.trim();
    let hex = header.strip_prefix("sha256=");
    let tag = hex
        .and_then(decode_hex_32)
        .ok_or(SignatureError::Malformed)?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.expose().as_bytes());
    hmac::verify(&key, body, &tag).map_err(|_| SignatureError::Mismatch)
}

/// 64 hex digits (either case) as 32 bytes; anything else is `None`.
fn decode_hex_32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &Secret, body: &[u8]) -> String {
        let key = hmac::Key::new(hmac::HMAC_SHA256, secret.expose().as_bytes());
        let hex: String = (hmac::sign(&key, body).as_ref().iter())
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("sha256={hex}")
    }

    #[test]
    fn matches_githubs_documented_example() {
        // From GitHub's "Validating webhook deliveries" documentation.
        let secret = Secret::new("It's a Secret to Everybody");
        let sig = sign(&secret, b"Hello, World!");
        assert_eq!(
            sig,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        assert_eq!(
            verify_signature(&secret, b"Hello, World!", Some(&sig)),
            Ok(())
        );
        let upper = sig.replace("sha256=", "").to_uppercase();
        assert_eq!(
            verify_signature(&secret, b"Hello, World!", Some(&format!("sha256={upper}"))),
            Ok(())
        );
    }

    #[test]
    fn delivery_ids_are_remembered_up_to_a_bound() {
        let d = Deliveries::default();
        d.remember("first");
        for i in 1..Deliveries::REMEMBERED {
            d.remember(&format!("id-{i}"));
        }
        assert!(d.seen("first") && d.seen("id-1"));
        d.remember("one-more");
        assert!(!d.seen("first"), "the oldest is forgotten");
        assert!(d.seen("id-1") && d.seen("one-more"));
        assert_eq!(d.lock().len(), Deliveries::REMEMBERED);
        for implausible in [String::new(), "a".repeat(65)] {
            d.remember(&implausible);
            assert!(!d.seen(&implausible));
        }
        assert!(d.seen("one-more"), "nothing was evicted for them");
    }

    #[test]
    fn rejects_missing_malformed_and_wrong_signatures() {
        let secret = Secret::new("s3cret");
        let body = br#"{"action":"edited"}"#;
        assert_eq!(
            verify_signature(&secret, body, None),
            Err(SignatureError::Missing)
        );
        for bad in [
            "",
            "sha1=abc",
            "sha256=",
            "sha256=zz",
            &"sha256=".repeat(20),
        ] {
            assert_eq!(
                verify_signature(&secret, body, Some(bad)),
                Err(SignatureError::Malformed),
                "{bad:?}"
            );
        }
        let other = sign(&Secret::new("other"), body);
        assert_eq!(
            verify_signature(&secret, body, Some(&other)),
            Err(SignatureError::Mismatch)
        );
        let good = sign(&secret, body);
        assert_eq!(
            verify_signature(&secret, b"tampered", Some(&good)),
            Err(SignatureError::Mismatch)
        );
        // Non-ASCII garbage of the right length must not panic.
        let weird = format!("sha256={}", "é".repeat(32));
        assert_eq!(
            verify_signature(&secret, body, Some(&weird)),
            Err(SignatureError::Malformed)
        );
    }
}
