//! The GraphQL transport: one blocking POST per call (ureq 3), and the pure classification of a
//! raw HTTP reply into a parsed GraphQL envelope or a typed [`TrackerError`] (spec §11.4,
//! API-NOTES §2.8). The token is only ever put in the `Authorization` header; every message built
//! from server text is passed through [`scrub`] so it can never leak.

use crate::text::single_line;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::normalize::RateLimitRow;
use crate::tracker::{TrackerBudget, TrackerError, TrackerErrorKind};
use crate::workflow::config::Secret;

/// The largest response body Baton reads from GitHub (a 100-item page is well under 1 MiB).
pub const MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// Wait used for a secondary rate limit without a usable `retry-after` (GitHub: "at least one minute").
pub const SECONDARY_LIMIT_DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// The rate-limit headers and `retry-after` of a response (all optional: GHES may send none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseMeta {
    /// `retry-after` in seconds, when present and numeric.
    pub retry_after_secs: Option<u64>,
    /// `x-ratelimit-limit`.
    pub limit: Option<i64>,
    /// `x-ratelimit-remaining`.
    pub remaining: Option<i64>,
    /// `x-ratelimit-reset` (UTC epoch seconds).
    pub reset_epoch: Option<u64>,
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
    /// `path` (strings and indices).
    pub path: Vec<Value>,
    /// The message (server text; scrubbed before it is shown).
    pub message: String,
}

impl GraphqlError {
    /// True when `path` is exactly `["nodes", i]` (or an alias `[name, i]`); returns `i`.
    pub fn node_index(&self) -> Option<usize> {
        match self.path.as_slice() {
            [Value::String(_), Value::Number(n)] => n.as_u64().map(|i| i as usize),
            _ => None,
        }
    }

    /// The first path element, when it is a field name.
    pub fn root_field(&self) -> Option<&str> {
        self.path.first().and_then(Value::as_str)
    }

    /// True for an error that says a field or argument does not exist in the server's schema.
    pub fn is_schema_capability_error(&self) -> bool {
        matches!(
            self.code.as_deref(),
            Some("undefinedField") | Some("argumentNotAccepted")
        ) || self.message.contains("doesn't exist on type")
            || self.message.contains("doesn't accept argument")
    }
}

/// A parsed GraphQL reply: `data` (may be `Null`), the errors, and the rate-limit headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The `data` member (`Value::Null` when absent or null).
    pub data: Value,
    /// The `errors` member, parsed.
    pub errors: Vec<GraphqlError>,
    /// Rate-limit headers of the response.
    pub meta: ResponseMeta,
}

/// The budget a reply reports: its body's `rateLimit` when present, else the headers.
pub fn budget(body: Option<&RateLimitRow>, meta: &ResponseMeta) -> Option<TrackerBudget> {
    if let Some(rl) = body {
        return Some(TrackerBudget {
            remaining: rl.remaining,
            limit: rl.limit,
            reset_at: rl.reset_at.clone(),
            last_cost: rl.cost,
        });
    }
    if meta.remaining.is_none() && meta.limit.is_none() {
        return None;
    }
    Some(TrackerBudget {
        remaining: meta.remaining,
        limit: meta.limit,
        reset_at: meta
            .reset_epoch
            .map(|s| crate::timefmt::rfc3339(UNIX_EPOCH + Duration::from_secs(s))),
        last_cost: None,
    })
}

/// A reply read straight into typed rows (a clean HTTP 200 with `data` and no `errors`), or, for
/// anything else, the classified [`Reply`] (errors, degradation and odd shapes are handled there).
pub enum Page<T> {
    /// The `data` member as `T`, with the response's rate-limit headers.
    Typed(T, ResponseMeta),
    /// The classified reply.
    Raw(Reply),
}

#[derive(serde::Deserialize)]
struct Envelope<T> {
    data: Option<T>,
    errors: Option<serde::de::IgnoredAny>,
}

impl Reply {
    /// The budget reported by this reply: the body's `rateLimit` when present, else the headers.
    pub fn rate_limit(&self) -> Option<TrackerBudget> {
        let body = self
            .data
            .get("rateLimit")
            .and_then(|v| RateLimitRow::deserialize(v).ok());
        budget(body.as_ref(), &self.meta)
    }

    /// Errors other than those `tolerated` (and errors about `rateLimit`, which GHES may lack)
    /// become one `github_graphql_errors` error; INSUFFICIENT_SCOPES/FORBIDDEN become `github_auth`.
    pub fn check_errors(
        &self,
        token: &Secret,
        tolerated: impl Fn(&GraphqlError) -> bool,
    ) -> Result<(), TrackerError> {
        let fatal: Vec<&GraphqlError> = self
            .errors
            .iter()
            .filter(|e| e.root_field() != Some("rateLimit") && !tolerated(e))
            .collect();
        if fatal.is_empty() {
            return Ok(());
        }
        let auth = fatal.iter().any(|e| {
            matches!(
                e.kind.as_deref(),
                Some("INSUFFICIENT_SCOPES") | Some("FORBIDDEN")
            )
        });
        let kind = if auth {
            TrackerErrorKind::Auth
        } else {
            TrackerErrorKind::Query
        };
        Err(super::error(
            kind,
            describe_errors(&fatal.into_iter().cloned().collect::<Vec<_>>(), token),
        ))
    }
}

/// `TYPE: message; TYPE: message` (at most 3, each truncated, scrubbed).
pub fn describe_errors(errors: &[GraphqlError], token: &Secret) -> String {
    let mut parts: Vec<String> = errors
        .iter()
        .take(3)
        .map(|e| {
            let label = e.kind.as_deref().or(e.code.as_deref()).unwrap_or("ERROR");
            format!("{label}: {}", single_line(&scrub(&e.message, token), 300))
        })
        .collect();
    if errors.len() > 3 {
        parts.push(format!("and {} more", errors.len() - 3));
    }
    parts.join("; ")
}

/// Replace every occurrence of the token (and of its `Bearer` form) with `***`.
pub fn scrub(text: &str, token: &Secret) -> String {
    let t = token.expose();
    if t.len() < 4 {
        // A very short "token" would blank out ordinary words; such a token is rejected anyway.
        return text.to_string();
    }
    text.replace(t, "***")
}

/// Classify a raw HTTP reply (pure; `now` injected for the retry times).
///
/// Order matters: 401 is checked before any rate-limit header (GitHub sends
/// `x-ratelimit-remaining: 0` with "Bad credentials"), and a 200 is parsed for `errors[].type`
/// `RATE_LIMITED`/`RATE_LIMIT` before the caller sees it.
pub fn classify_response(
    status: u16,
    meta: &ResponseMeta,
    body: &str,
    token: &Secret,
    now: SystemTime,
) -> Result<Reply, TrackerError> {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let rest_message = parsed
        .as_ref()
        .and_then(|v| v.get("message"))
        .and_then(Value::as_str)
        .map(|m| single_line(&scrub(m, token), 300));
    if status != 200 {
        return Err(classify_failure(
            status,
            meta,
            parsed.as_ref(),
            rest_message,
            body.len(),
            token,
            now,
        ));
    }
    let Some(Value::Object(obj)) = parsed else {
        return Err(super::error(
            TrackerErrorKind::Payload,
            format!(
                "GitHub answered HTTP 200 with a body that is not a JSON object ({} bytes)",
                body.len()
            ),
        ));
    };
    let root = Value::Object(obj);
    let errors = parse_errors(&root);
    if errors.iter().any(|e| {
        matches!(e.kind.as_deref(), Some("RATE_LIMITED") | Some("RATE_LIMIT"))
            || e.code.as_deref() == Some("graphql_rate_limit")
    }) {
        let at = meta
            .reset_epoch
            .map(|r| reset_time(r, now))
            .unwrap_or(now + SECONDARY_LIMIT_DEFAULT_WAIT);
        return Err(rate_limited(
            format!("primary rate limit: {}", describe_errors(&errors, token)),
            at,
        ));
    }
    let data = match root.get("data") {
        None | Some(Value::Null) => Value::Null,
        Some(d @ Value::Object(_)) => d.clone(),
        Some(_) => {
            return Err(super::error(
                TrackerErrorKind::Payload,
                "GitHub answered with a `data` member that is not an object",
            ))
        }
    };
    if data.is_null() && errors.is_empty() {
        return Err(super::error(
            TrackerErrorKind::Payload,
            "GitHub answered HTTP 200 without `data` or `errors`",
        ));
    }
    Ok(Reply {
        data,
        errors,
        meta: meta.clone(),
    })
}

/// The error for a non-200 reply: auth, rate limit (primary or secondary) or status.
fn classify_failure(
    status: u16,
    meta: &ResponseMeta,
    parsed: Option<&Value>,
    rest_message: Option<String>,
    body_len: usize,
    token: &Secret,
    now: SystemTime,
) -> TrackerError {
    let shown = rest_message
        .clone()
        .unwrap_or_else(|| format!("{body_len} byte body"));
    if status == 401 {
        return super::error(
            TrackerErrorKind::Auth,
            format!(
                "GitHub rejected the token (HTTP 401: {shown}); check tracker.token (scopes: read:project and repository read)"
            ),
        );
    }
    if status == 403 || status == 429 {
        let lower = rest_message.as_deref().unwrap_or("").to_lowercase();
        let secondary = lower.contains("secondary rate limit") || lower.contains("abuse detection");
        if secondary || meta.retry_after_secs.is_some() || status == 429 {
            let wait = meta
                .retry_after_secs
                .map(Duration::from_secs)
                .unwrap_or(SECONDARY_LIMIT_DEFAULT_WAIT);
            return rate_limited(
                format!("secondary rate limit (HTTP {status}: {shown})"),
                now + wait,
            );
        }
        if meta.remaining == Some(0) {
            if let Some(reset) = meta.reset_epoch {
                return rate_limited(
                    format!("primary rate limit (HTTP {status}: {shown})"),
                    reset_time(reset, now),
                );
            }
        }
        return super::error(
            TrackerErrorKind::Auth,
            format!("GitHub refused the request (HTTP 403: {shown})"),
        );
    }
    // 502/504 bodies may be GraphQL-ish (`{"data":"null","errors":[...]}`).
    let detail = rest_message.or_else(|| {
        parsed
            .map(|v| describe_errors(&parse_errors(v), token))
            .filter(|s| !s.is_empty())
    });
    super::error(
        TrackerErrorKind::Status,
        match detail {
            Some(d) => format!("GitHub answered HTTP {status}: {d}"),
            None => format!("GitHub answered HTTP {status} ({body_len} byte body)"),
        },
    )
}

fn rate_limited(message: String, at: SystemTime) -> TrackerError {
    let message = format!("{message}; retry after {}", crate::timefmt::rfc3339(at));
    TrackerError {
        retry_at: Some(at),
        ..super::error(TrackerErrorKind::RateLimited, message)
    }
}

/// `x-ratelimit-reset` + 1 s, never in the past.
fn reset_time(reset_epoch: u64, now: SystemTime) -> SystemTime {
    let at = UNIX_EPOCH + Duration::from_secs(reset_epoch.saturating_add(1));
    at.max(now)
}

/// Parse `errors` (absent or malformed entries are tolerated: a message-less entry still counts).
pub fn parse_errors(root: &Value) -> Vec<GraphqlError> {
    let Some(list) = root.get("errors").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .take(1000)
        .map(|e| {
            let ext = e.get("extensions");
            GraphqlError {
                kind: e.get("type").and_then(Value::as_str).map(str::to_string),
                code: ext
                    .and_then(|x| x.get("code"))
                    .or_else(|| e.get("code"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                field_name: ext
                    .and_then(|x| x.get("fieldName").or_else(|| x.get("argumentName")))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                path: e
                    .get("path")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                message: e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("(no message)")
                    .to_string(),
            }
        })
        .collect()
}

/// The blocking GraphQL client (one `ureq::Agent`, connection reuse, no redirects).
pub struct GraphqlClient {
    agent: ureq::Agent,
    endpoint: String,
    token: Secret,
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
        }
    }

    /// The token (for scrubbing messages).
    pub fn token(&self) -> &Secret {
        &self.token
    }

    /// POST one operation and classify the reply.
    pub fn post(
        &self,
        operation: &str,
        query: &str,
        variables: Value,
    ) -> Result<Reply, TrackerError> {
        let (status, meta, bytes) = self.send(operation, query, variables)?;
        let text = String::from_utf8_lossy(&bytes);
        classify_response(status, &meta, &text, &self.token, SystemTime::now())
    }

    /// POST one operation; a clean success is deserialized straight into `T` (no `Value` tree),
    /// anything else is classified like [`GraphqlClient::post`].
    pub fn post_typed<T: DeserializeOwned>(
        &self,
        operation: &str,
        query: &str,
        variables: Value,
    ) -> Result<Page<T>, TrackerError> {
        let (status, meta, bytes) = self.send(operation, query, variables)?;
        if status == 200 {
            if let Ok(Envelope {
                data: Some(data),
                errors: None,
            }) = serde_json::from_slice::<Envelope<T>>(&bytes)
            {
                return Ok(Page::Typed(data, meta));
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        classify_response(status, &meta, &text, &self.token, SystemTime::now()).map(Page::Raw)
    }

    /// Send one operation: the status, rate-limit headers and body (at most
    /// [`MAX_RESPONSE_BYTES`]).
    fn send(
        &self,
        operation: &str,
        query: &str,
        variables: Value,
    ) -> Result<(u16, ResponseMeta, Vec<u8>), TrackerError> {
        let body = json!({"query": query, "variables": variables, "operationName": operation});
        let body = serde_json::to_string(&body).unwrap_or_default();
        let sent = self
            .agent
            .post(&self.endpoint)
            .header("Authorization", &format!("Bearer {}", self.token.expose()))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .send(body.as_str());
        let mut resp = sent.map_err(|e| self.transport_error(operation, &e))?;
        let status = resp.status().as_u16();
        let headers = resp.headers();
        let num = |name: &str| -> Option<i64> {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        let meta = ResponseMeta {
            retry_after_secs: num("retry-after").and_then(|n| u64::try_from(n).ok()),
            limit: num("x-ratelimit-limit"),
            remaining: num("x-ratelimit-remaining"),
            reset_epoch: num("x-ratelimit-reset").and_then(|n| u64::try_from(n).ok()),
        };
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport_error(operation, &e))?;
        Ok((status, meta, bytes))
    }

    fn transport_error(&self, operation: &str, e: &ureq::Error) -> TrackerError {
        let what = match e {
            ureq::Error::Timeout(_) => "timed out".to_string(),
            ureq::Error::BodyExceedsLimit(_) => {
                format!("response body exceeds {MAX_RESPONSE_BYTES} bytes")
            }
            other => scrub(&other.to_string(), &self.token),
        };
        super::error(
            TrackerErrorKind::Transport,
            format!("request {operation} to {} failed: {what}", self.endpoint),
        )
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
}
