//! The GraphQL transport: one blocking POST per call (ureq 3), and the pure classification of a
//! raw HTTP reply into a parsed GraphQL envelope or a typed [`TrackerError`] (spec §11.4,
//! API-NOTES §2.8). The token is only ever put in the `Authorization` header; every message built
//! from server text is passed through [`scrub`] so it can never leak.

use crate::text::single_line;
use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Value};

use super::normalize::Data;
use super::queries::Query;
use crate::config::Secret;
use crate::tracker::{TrackerBudget, TrackerError, TrackerErrorKind};

/// The largest response body Baton reads from GitHub (a 100-item page is well under 1 MiB).
pub const MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// Wait used for a secondary rate limit without a usable `retry-after` (GitHub: "at least one minute").
pub const SECONDARY_LIMIT_DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// The longest pause any rate-limit header can impose: `retry-after` and `x-ratelimit-reset`
/// are server data, and a value years away would silence Baton for good.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(3600);

/// The rate-limit headers and `retry-after` of a response (all optional: GHES may send none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseMeta {
    pub retry_after_secs: Option<u64>,
    pub limit: Option<i64>,
    pub remaining: Option<i64>,
    /// `x-ratelimit-reset` (UTC epoch seconds).
    pub reset_epoch: Option<u64>,
}

impl ResponseMeta {
    /// Read the headers through `get` (header name → value). Unparsable values are absent;
    /// all-digit values too large for a `u64` saturate (the waits they imply are clamped later).
    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Self {
        let int = |name| get(name).and_then(|v| v.trim().parse::<i64>().ok());
        ResponseMeta {
            retry_after_secs: get("retry-after").and_then(parse_header_secs),
            limit: int("x-ratelimit-limit"),
            remaining: int("x-ratelimit-remaining"),
            reset_epoch: get("x-ratelimit-reset").and_then(parse_header_secs),
        }
    }
}

/// A non-negative integer header (`retry-after`, `x-ratelimit-reset`): `None` unless it is all
/// ASCII digits; saturates at `u64::MAX`.
pub fn parse_header_secs(v: &str) -> Option<u64> {
    let v = v.trim();
    if v.is_empty() || v.len() > 64 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.parse::<u64>().unwrap_or(u64::MAX))
}

/// `now + secs`, with the wait clamped to [`MAX_RATE_LIMIT_WAIT`] (never overflows).
pub fn clamped_wait(now: SystemTime, secs: u64) -> SystemTime {
    let wait = Duration::from_secs(secs).min(MAX_RATE_LIMIT_WAIT);
    now.checked_add(wait).unwrap_or(now)
}

/// One entry of a GraphQL `errors` array, reduced to what Baton classifies on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GraphqlError {
    /// GitHub's top-level `type` (`NOT_FOUND`, `RATE_LIMITED`, …) on execution errors.
    pub kind: Option<String>,
    /// `extensions.code` on validation errors (`undefinedField`, `argumentNotAccepted`, …).
    pub code: Option<String>,
    /// `extensions.fieldName` / `extensions.argumentName` when present.
    pub field_name: Option<String>,
    pub path: Vec<Value>,
    /// Server text; scrubbed before it is shown.
    pub message: String,
}

impl GraphqlError {
    /// `i` when `path` is exactly `["nodes", i]` (or an alias `[name, i]`).
    pub fn node_index(&self) -> Option<usize> {
        match self.path.as_slice() {
            [Value::String(_), Value::Number(n)] => n.as_u64().map(|i| i as usize),
            _ => None,
        }
    }

    pub fn root_field(&self) -> Option<&str> {
        self.path.first().and_then(Value::as_str)
    }

    /// True for an error that says a field or argument does not exist in the server's schema.
    pub fn is_schema_capability_error(&self) -> bool {
        matches!(
            self.code.as_deref(),
            Some("undefinedField" | "argumentNotAccepted")
        ) || self.message.contains("doesn't exist on type")
            || self.message.contains("doesn't accept argument")
    }
}

/// A parsed GraphQL reply: its `data` (empty when absent or null), errors and rate-limit headers.
#[derive(Debug, Default)]
pub struct Reply {
    pub data: Data,
    pub errors: Vec<GraphqlError>,
    pub meta: ResponseMeta,
}

/// The members a reply is classified on.
#[derive(Deserialize)]
struct Envelope<T> {
    data: Option<T>,
    errors: Option<Value>,
    message: Option<Value>,
}

impl Reply {
    /// The budget this reply reports: its body's `rateLimit` when present, else the headers.
    pub fn rate_limit(&self) -> Option<TrackerBudget> {
        let meta = &self.meta;
        let from_headers = || TrackerBudget {
            remaining: meta.remaining,
            limit: meta.limit,
            reset_at: (meta.reset_epoch)
                .and_then(|s| UNIX_EPOCH.checked_add(Duration::from_secs(s)))
                .map(crate::timefmt::rfc3339),
            last_cost: None,
        };
        let headers = meta.remaining.is_some() || meta.limit.is_some();
        (self.data.rate_limit.clone()).or_else(|| headers.then(from_headers))
    }

    /// Errors other than those `tolerated` (and errors about `rateLimit`, which GHES may lack)
    /// become one `github_graphql_errors` error; INSUFFICIENT_SCOPES/FORBIDDEN become `github_auth`.
    pub fn check_errors(
        &self,
        token: &Secret,
        tolerated: impl Fn(&GraphqlError) -> bool,
    ) -> Result<(), TrackerError> {
        let fatal: Vec<GraphqlError> = (self.errors.iter())
            .filter(|e| e.root_field() != Some("rateLimit") && !tolerated(e))
            .cloned()
            .collect();
        if fatal.is_empty() {
            return Ok(());
        }
        let auth = |e: &GraphqlError| {
            matches!(e.kind.as_deref(), Some("INSUFFICIENT_SCOPES" | "FORBIDDEN"))
        };
        let kind = match fatal.iter().any(auth) {
            true => TrackerErrorKind::Auth,
            false => TrackerErrorKind::Query,
        };
        Err(super::error(kind, describe_errors(&fatal, token)))
    }
}

/// `TYPE: message; TYPE: message` (at most 3, each truncated, scrubbed).
pub fn describe_errors(errors: &[GraphqlError], token: &Secret) -> String {
    let describe = |e: &GraphqlError| {
        let label = e.kind.as_deref().or(e.code.as_deref()).unwrap_or("ERROR");
        let label = single_line(&scrub(label, token), 60);
        let message = single_line(&scrub(&e.message, token), 300);
        format!("{label}: {message}")
    };
    let mut parts: Vec<String> = errors.iter().take(3).map(describe).collect();
    if errors.len() > 3 {
        parts.push(format!("and {} more", errors.len() - 3));
    }
    parts.join("; ")
}

/// Replace every occurrence of the token with `***`.
pub fn scrub(text: &str, token: &Secret) -> String {
    scrub_secret(text.into(), token.expose()).into_owned()
}

/// Replace every occurrence of `secret` with `***` (copying only then); secrets shorter than 4
/// bytes are left alone (they would blank out ordinary words, and no credential is that short).
fn scrub_secret<'a>(text: Cow<'a, str>, secret: &str) -> Cow<'a, str> {
    match secret.len() >= 4 && text.contains(secret) {
        true => Cow::Owned(text.replace(secret, "***")),
        false => text,
    }
}

/// Replace the userinfo (`user:password@`) of every URL in `text` with `***@`, so an endpoint
/// such as `https://user:TOKEN@host/graphql` never reaches a log line or an error.
pub fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => out.push_str(&format!("***{}", &authority[at..])),
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The credential parts of an endpoint's userinfo (user and password, percent-decoded too), to
/// scrub wherever they appear on their own (a transport error, an echoed body).
fn endpoint_secrets(endpoint: &str) -> Vec<String> {
    // Without userinfo every part is empty, and dropped below.
    let tail = endpoint.split_once("://").map_or("", |(_, tail)| tail);
    let authority = &tail[..tail.find(['/', '?', '#']).unwrap_or(tail.len())];
    let userinfo = authority.rfind('@').map_or("", |at| &authority[..at]);
    let mut out = vec![userinfo.to_string()];
    for part in userinfo.split(':') {
        out.push(part.to_string());
        out.push(percent_decode(part));
    }
    out.retain(|s| s.len() >= 4);
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// Lossy `%XX` decoding (invalid escapes are kept as they are).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Classify a raw HTTP reply and read its `data` (pure; `now` injected).
///
/// Order matters: 401 is checked before any rate-limit header (GitHub sends
/// `x-ratelimit-remaining: 0` with "Bad credentials"), and a 200 is checked for `errors[].type`
/// `RATE_LIMITED`/`RATE_LIMIT` before its `data` is used. A `data` member that does not fit is a
/// `github_unknown_payload` error (after the errors were classified).
pub fn classify_response(
    status: u16,
    meta: &ResponseMeta,
    body: &str,
    token: &Secret,
    now: SystemTime,
) -> Result<Reply, TrackerError> {
    // The token echoed anywhere in the reply (a data field, an error's `type`) is scrubbed
    // before anything is parsed, so no field can carry it into a log line or an issue.
    let body = &*scrub_secret(body.into(), token.expose());
    let (data, errors, message) = match serde_json::from_str::<Envelope<Data>>(body) {
        Ok(env) => (Ok(env.data), env.errors, env.message),
        Err(e) => {
            // Still classified on its errors and message when `data` does not fit.
            let loose = serde_json::from_str::<Envelope<IgnoredAny>>(body).ok();
            let (errors, message) = loose.map_or((None, None), |env| (env.errors, env.message));
            (Err(e), errors, message)
        }
    };
    let mut reply = Reply {
        data: Data::default(),
        errors: parse_errors(errors.as_ref()),
        meta: meta.clone(),
    };
    let rest_message = message.as_ref().and_then(Value::as_str);
    let rest_message = rest_message.map(|m| single_line(&scrub(m, token), 300));
    if status != 200 {
        let failure = classify_failure(status, &reply, rest_message, body.len(), token, now);
        return Err(failure);
    }
    if reply.errors.iter().any(|e| {
        matches!(e.kind.as_deref(), Some("RATE_LIMITED" | "RATE_LIMIT"))
            || e.code.as_deref() == Some("graphql_rate_limit")
    }) {
        let default = || clamped_wait(now, SECONDARY_LIMIT_DEFAULT_WAIT.as_secs());
        let at = meta
            .reset_epoch
            .map_or_else(default, |r| reset_time(r, now));
        let errors = describe_errors(&reply.errors, token);
        return Err(rate_limited(format!("primary rate limit: {errors}"), at));
    }
    let data = match data {
        Ok(data) => data,
        // Errors explain a `data` that does not fit better than its shape does.
        Err(e) => {
            reply.check_errors(token, |_| false)?;
            let e = single_line(&e.to_string(), 200);
            let what = match body.trim_start().starts_with('{') {
                true => format!("a `data` member Baton cannot read: {e}"),
                false => format!("a body that is not a JSON object ({} bytes)", body.len()),
            };
            let what = format!("GitHub answered HTTP 200 with {what}");
            return Err(super::unknown(what));
        }
    };
    if data.is_none() && reply.errors.is_empty() {
        let what = "GitHub answered HTTP 200 without `data` or `errors`";
        return Err(super::unknown(what));
    }
    reply.data = data.unwrap_or_default();
    Ok(reply)
}

/// The error for a non-200 reply: auth, rate limit (primary or secondary) or status, showing the
/// REST message, else the body's size.
fn classify_failure(
    status: u16,
    reply: &Reply,
    rest_message: Option<String>,
    body_len: usize,
    token: &Secret,
    now: SystemTime,
) -> TrackerError {
    let meta = &reply.meta;
    let shown = (rest_message.clone()).unwrap_or_else(|| format!("{body_len} byte body"));
    if status == 401 {
        let message = format!("GitHub rejected the token (HTTP 401: {shown}); check tracker.token (scopes: read:project and repository read)");
        return super::error(TrackerErrorKind::Auth, message);
    }
    if status == 403 || status == 429 {
        let lower = rest_message.as_deref().unwrap_or("").to_lowercase();
        let secondary = lower.contains("secondary rate limit") || lower.contains("abuse detection");
        let (which, at) = match (meta.remaining, meta.reset_epoch) {
            _ if secondary || meta.retry_after_secs.is_some() || status == 429 => {
                let default = SECONDARY_LIMIT_DEFAULT_WAIT.as_secs();
                let wait = meta.retry_after_secs.unwrap_or(default);
                ("secondary", clamped_wait(now, wait))
            }
            (Some(0), Some(reset)) => ("primary", reset_time(reset, now)),
            _ => {
                let message = format!("GitHub refused the request (HTTP 403: {shown})");
                return super::error(TrackerErrorKind::Auth, message);
            }
        };
        return rate_limited(format!("{which} rate limit (HTTP {status}: {shown})"), at);
    }
    // 502/504 bodies may be GraphQL-ish (`{"data":"null","errors":[...]}`).
    let errors = describe_errors(&reply.errors, token);
    let message = match rest_message.or_else(|| Some(errors).filter(|s| !s.is_empty())) {
        Some(d) => format!("GitHub answered HTTP {status}: {d}"),
        None => format!("GitHub answered HTTP {status} ({shown})"),
    };
    super::error(TrackerErrorKind::Status, message)
}

fn rate_limited(message: String, at: SystemTime) -> TrackerError {
    let message = format!("{message}; retry after {}", crate::timefmt::rfc3339(at));
    TrackerError {
        retry_at: Some(at),
        ..super::error(TrackerErrorKind::RateLimited, message)
    }
}

/// `x-ratelimit-reset` + 1 s, never in the past and never more than [`MAX_RATE_LIMIT_WAIT`]
/// ahead (a reset far in the future is server garbage, not a reason to stop for years).
fn reset_time(reset_epoch: u64, now: SystemTime) -> SystemTime {
    let latest = clamped_wait(now, u64::MAX);
    match UNIX_EPOCH.checked_add(Duration::from_secs(reset_epoch.saturating_add(1))) {
        Some(at) => at.clamp(now, latest),
        None => latest,
    }
}

/// Parse the `errors` member (absent or malformed entries are tolerated: a message-less entry
/// still counts).
pub fn parse_errors(errors: Option<&Value>) -> Vec<GraphqlError> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let list = errors.and_then(Value::as_array).into_iter().flatten();
    list.take(1000)
        .map(|e| {
            let ext = e.get("extensions");
            let field = ext.and_then(|x| x.get("fieldName").or_else(|| x.get("argumentName")));
            GraphqlError {
                kind: text(e.get("type")),
                code: text(ext.and_then(|x| x.get("code")).or_else(|| e.get("code"))),
                field_name: text(field),
                path: (e.get("path").and_then(Value::as_array).cloned()).unwrap_or_default(),
                message: text(e.get("message")).unwrap_or_else(|| "(no message)".into()),
            }
        })
        .collect()
}

/// The blocking GraphQL client (one `ureq::Agent`, connection reuse, no redirects).
pub struct GraphqlClient {
    agent: ureq::Agent,
    endpoint: String,
    token: Secret,
    /// Credentials found in the endpoint's userinfo, scrubbed from everything shown.
    endpoint_secrets: Vec<String>,
}

impl GraphqlClient {
    /// Build a client with the given per-request timeout.
    pub fn new(endpoint: &str, token: Secret, timeout: Duration) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            // Never follow a redirect: it could carry the Authorization header elsewhere.
            .max_redirects(0)
            .max_redirects_will_error(false)
            .user_agent(concat!("baton/", env!("CARGO_PKG_VERSION")))
            .build();
        GraphqlClient {
            agent: ureq::Agent::new_with_config(config),
            endpoint: endpoint.to_string(),
            token,
            endpoint_secrets: endpoint_secrets(endpoint),
        }
    }

    pub fn token(&self) -> &Secret {
        &self.token
    }

    /// POST one operation and classify the reply. The body is read up to [`MAX_RESPONSE_BYTES`].
    pub fn post(&self, q: &Query, variables: Value) -> Result<Reply, TrackerError> {
        let (operation, query) = (q.name, q.text);
        let body = json!({"query": query, "variables": variables, "operationName": operation});
        let sent = self
            .agent
            .post(&self.endpoint)
            .header("Authorization", &format!("Bearer {}", self.token.expose()))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .send(body.to_string().as_str());
        let mut resp = sent.map_err(|e| self.transport_error(operation, &e))?;
        let status = resp.status().as_u16();
        let headers = resp.headers();
        let meta = ResponseMeta::from_headers(|name| headers.get(name)?.to_str().ok());
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport_error(operation, &e))?;
        // Scrub before parsing: a credential echoed back inside a data field (a title, an
        // error message) then cannot reach an issue, a warning or an error.
        let text = self.scrub_all(String::from_utf8_lossy(&bytes));
        classify_response(status, &meta, &text, &self.token, SystemTime::now())
    }

    /// Scrub the token and the endpoint's credentials from `text`.
    pub(crate) fn scrub_all<'a>(&self, text: Cow<'a, str>) -> Cow<'a, str> {
        let out = scrub_secret(text, self.token.expose());
        (self.endpoint_secrets.iter()).fold(out, |out, secret| scrub_secret(out, secret))
    }

    /// The endpoint as it may be shown (userinfo replaced by `***`).
    pub fn endpoint_shown(&self) -> String {
        redact_userinfo(&self.endpoint)
    }

    fn transport_error(&self, operation: &str, e: &ureq::Error) -> TrackerError {
        let what = match e {
            ureq::Error::Timeout(_) => "timed out".to_string(),
            ureq::Error::BodyExceedsLimit(_) => {
                format!("response body exceeds {MAX_RESPONSE_BYTES} bytes")
            }
            other => redact_userinfo(&self.scrub_all(other.to_string().into())),
        };
        let shown = self.endpoint_shown();
        let message = format!("request {operation} to {shown} failed: {what}");
        super::error(TrackerErrorKind::Transport, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok() -> Secret {
        Secret::new("ghp_SECRETSECRET")
    }
    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_785_000_000)
    }

    #[test]
    fn bad_credentials_is_auth_not_rate_limit() {
        let meta = ResponseMeta {
            remaining: Some(0),
            limit: Some(0),
            reset_epoch: Some(1_785_003_600),
            ..Default::default()
        };
        let body = r#"{"message":"Bad credentials","documentation_url":"https://docs.github.com/graphql"}"#;
        let e = classify_response(401, &meta, body, &tok(), now()).unwrap_err();
        assert_eq!(e.kind, TrackerErrorKind::Auth);
        assert!(e.retry_at.is_none());
        assert!(e.message.contains("Bad credentials"));
    }

    #[test]
    fn secondary_limit_uses_retry_after_else_sixty_seconds() {
        let body = r#"{"message":"You have exceeded a secondary rate limit. Please wait.","documentation_url":"x"}"#;
        let meta = ResponseMeta {
            retry_after_secs: Some(120),
            ..Default::default()
        };
        let e = classify_response(403, &meta, body, &tok(), now()).unwrap_err();
        assert_eq!(e.kind, TrackerErrorKind::RateLimited);
        assert_eq!(e.retry_at, Some(now() + Duration::from_secs(120)));
        let e = classify_response(403, &ResponseMeta::default(), body, &tok(), now()).unwrap_err();
        assert_eq!(e.retry_at, Some(now() + Duration::from_secs(60)));
        let e =
            classify_response(429, &ResponseMeta::default(), "garbage", &tok(), now()).unwrap_err();
        assert_eq!(e.kind, TrackerErrorKind::RateLimited);
    }

    #[test]
    fn plain_403_is_auth() {
        let body = r#"{"message":"Resource not accessible by integration"}"#;
        let e = classify_response(403, &ResponseMeta::default(), body, &tok(), now()).unwrap_err();
        assert_eq!(e.kind, TrackerErrorKind::Auth);
    }

    #[test]
    fn primary_limit_both_spellings_wait_for_reset() {
        let meta = ResponseMeta {
            remaining: Some(1),
            reset_epoch: Some(1_785_000_500),
            ..Default::default()
        };
        for body in [
            r#"{"errors":[{"type":"RATE_LIMITED","message":"API rate limit exceeded for user ID 1."}]}"#,
            r#"{"errors":[{"type":"RATE_LIMIT","code":"graphql_rate_limit","message":"API rate limit already exceeded for user ID 1."}]}"#,
        ] {
            let e = classify_response(200, &meta, body, &tok(), now()).unwrap_err();
            assert_eq!(e.kind, TrackerErrorKind::RateLimited);
            assert_eq!(
                e.retry_at,
                Some(UNIX_EPOCH + Duration::from_secs(1_785_000_501))
            );
        }
    }

    #[test]
    fn gateway_timeout_with_string_null_data_is_status_error() {
        let body = r#"{"data":"null","errors":[{"message":"Something went wrong while executing your query."}]}"#;
        let e = classify_response(502, &ResponseMeta::default(), body, &tok(), now()).unwrap_err();
        assert_eq!(e.kind, TrackerErrorKind::Status);
        assert!(e.message.contains("502"));
    }

    #[test]
    fn garbage_and_non_object_bodies_are_unknown_payload() {
        for body in [
            "<html>oops</html>",
            "[1,2]",
            "\"x\"",
            "",
            r#"{"data":"null"}"#,
            "{}",
        ] {
            let e =
                classify_response(200, &ResponseMeta::default(), body, &tok(), now()).unwrap_err();
            assert_eq!(e.kind, TrackerErrorKind::Payload, "{body}");
        }
    }

    #[test]
    fn token_is_scrubbed_from_server_text() {
        let body = r#"{"message":"Bad credentials ghp_SECRETSECRET"}"#;
        let e = classify_response(401, &ResponseMeta::default(), body, &tok(), now()).unwrap_err();
        assert!(!e.to_string().contains("ghp_SECRETSECRET"));
        let body = r#"{"errors":[{"type":"NOT_FOUND","message":"ghp_SECRETSECRET"}]}"#;
        let r = classify_response(200, &ResponseMeta::default(), body, &tok(), now()).unwrap();
        let e = r.check_errors(&tok(), |_| false).unwrap_err();
        assert!(!e.message.contains("ghp_SECRETSECRET"));
    }

    #[test]
    fn node_index_and_capability_errors() {
        let body = r#"{"data":{"nodes":[null]},"errors":[{"type":"NOT_FOUND","path":["nodes",0],"message":"gone"},{"path":["rateLimit"],"message":"x"}]}"#;
        let r = classify_response(200, &ResponseMeta::default(), body, &tok(), now()).unwrap();
        assert_eq!(r.errors[0].node_index(), Some(0));
        r.check_errors(&tok(), |e| e.node_index().is_some())
            .unwrap();
        let body = r#"{"errors":[{"extensions":{"code":"undefinedField","typeName":"Issue","fieldName":"blockedBy"},"message":"Field 'blockedBy' doesn't exist on type 'Issue'"}]}"#;
        let r = classify_response(200, &ResponseMeta::default(), body, &tok(), now()).unwrap();
        assert!(r.errors[0].is_schema_capability_error());
        assert_eq!(r.errors[0].field_name.as_deref(), Some("blockedBy"));
    }

    #[test]
    fn rate_limit_from_body_or_headers() {
        let body = r#"{"data":{"rateLimit":{"limit":5000,"cost":2,"remaining":4990,"resetAt":"2026-07-24T14:30:18Z"}}}"#;
        let r = classify_response(200, &ResponseMeta::default(), body, &tok(), now()).unwrap();
        let rl = r.rate_limit().unwrap();
        assert_eq!((rl.remaining, rl.last_cost), (Some(4990), Some(2)));
        let body = r#"{"data":{"rateLimit":null}}"#;
        let r = classify_response(200, &ResponseMeta::default(), body, &tok(), now()).unwrap();
        assert_eq!(r.rate_limit(), None);
    }

    /// Failures 1–3 of issue 12: huge, negative, garbage and overflowing header values.
    #[test]
    fn hostile_rate_limit_headers_saturate_and_never_panic() {
        let limit = now() + MAX_RATE_LIMIT_WAIT;
        let values = [
            "300000000000",
            "18446744073709551615",
            "18446744073709551616",
            "9223372036854775807",
            "-1",
            "-300000000000",
            "garbage",
            "",
            " 42 ",
            "1e9",
        ];
        for v in values {
            let meta = ResponseMeta::from_headers(|name| match name {
                "retry-after" | "x-ratelimit-reset" | "x-ratelimit-remaining" => Some(v),
                _ => None,
            });
            for status in [200, 403, 429, 401, 502] {
                for body in [
                    r#"{"message":"You have exceeded a secondary rate limit"}"#,
                    r#"{"errors":[{"type":"RATE_LIMITED","message":"x"}]}"#,
                    "{}",
                ] {
                    let r = classify_response(status, &meta, body, &tok(), now());
                    if let Err(e) = &r {
                        let _ = e.to_string();
                        if let Some(at) = e.retry_at {
                            assert!(at >= now() && at <= limit, "{v} {status}: {at:?}");
                        }
                    }
                    if let Ok(reply) = r {
                        let _ = reply.rate_limit();
                    }
                }
            }
        }
        let huge = ResponseMeta {
            retry_after_secs: Some(u64::MAX),
            reset_epoch: Some(u64::MAX),
            remaining: Some(0),
            ..Default::default()
        };
        let e = classify_response(429, &huge, "", &tok(), now()).unwrap_err();
        assert_eq!(e.retry_at, Some(limit));
        let e = classify_response(
            200,
            &huge,
            r#"{"errors":[{"type":"RATE_LIMITED","message":"x"}]}"#,
            &tok(),
            now(),
        )
        .unwrap_err();
        assert_eq!(e.retry_at, Some(limit), "far reset clamps to now + 1 h");
        let r = Reply {
            meta: ResponseMeta {
                limit: Some(1),
                reset_epoch: Some(u64::MAX),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(r.rate_limit().is_some());
    }

    #[test]
    fn header_numbers_parse_strictly() {
        assert_eq!(parse_header_secs("120"), Some(120));
        assert_eq!(parse_header_secs(" 7 "), Some(7));
        assert_eq!(parse_header_secs("99999999999999999999999"), Some(u64::MAX));
        assert_eq!(parse_header_secs("-5"), None);
        assert_eq!(parse_header_secs("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        let meta = ResponseMeta::from_headers(|h| (h != "x-ratelimit-limit").then_some("-3"));
        assert_eq!((meta.remaining, meta.limit), (Some(-3), None));
    }

    #[test]
    fn endpoint_userinfo_is_redacted_and_scrubbed() {
        let shown = redact_userinfo(
            "request to https://bob:hunter2TOKEN@ghe.example/api/graphql failed: x://a@b c",
        );
        assert_eq!(
            shown,
            "request to https://***@ghe.example/api/graphql failed: x://***@b c"
        );
        assert_eq!(redact_userinfo("no url here"), "no url here");
        assert_eq!(
            redact_userinfo("https://host/p?u=a@b"),
            "https://host/p?u=a@b"
        );
        let c = GraphqlClient::new(
            "https://bob:hunter2%21TOKEN@127.0.0.1:1/graphql",
            tok(),
            Duration::from_secs(1),
        );
        assert_eq!(c.endpoint_shown(), "https://***@127.0.0.1:1/graphql");
        let echoed =
            c.scrub_all("title hunter2!TOKEN and hunter2%21TOKEN and ghp_SECRETSECRET".into());
        assert!(!echoed.contains("hunter2"), "{echoed}");
        assert!(!echoed.contains("SECRETSECRET"), "{echoed}");
    }

    #[test]
    fn transport_errors_never_show_endpoint_credentials() {
        // Port 1 on loopback refuses at once.
        let c = GraphqlClient::new(
            "http://bob:hunter2TOKEN@127.0.0.1:1/graphql",
            tok(),
            Duration::from_secs(2),
        );
        let q = Query {
            name: "Op",
            file: "",
            fragments: &[],
            text: "query{x}",
        };
        let e = c.post(&q, Value::Null).unwrap_err();
        assert_eq!(e.kind, TrackerErrorKind::Transport);
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("hunter2TOKEN"), "{shown}");
        assert!(!shown.contains("bob:"), "{shown}");
        assert!(shown.contains("127.0.0.1"), "{shown}");
    }
}
