//! A faithful fake of GitHub's GraphQL endpoint for Projects (v2), on 127.0.0.1 (tiny_http).
//!
//! It serves one board (a JSON fixture under `fixtures/boards/` or one built in code), answers
//! Baton's operations by `operationName` with GitHub's response shapes (API-NOTES §3: pageInfo
//! and opaque cursors, `null` field values, Draft/PR/REDACTED items, archived items, NOT_FOUND
//! with paths, `undefinedField` on servers without `blockedBy`, rate-limit headers and body), and
//! records every request so tests can assert request counts. Faults (401, secondary/primary rate
//! limits, 502, garbage, slow, insufficient scopes, raw) are queued and served one per request.
//! The board can be changed while the server runs (set status, close, remove, add label, …).
//!
//! Use from any test file: `mod support;` then `support::fake_github::FakeGithub::start(board)`.

use std::collections::VecDeque;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use baton::workflow::config::{OwnerType, Secret, TrackerConfig};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The token the fake accepts (as `Authorization: Bearer …`).
pub const FAKE_TOKEN: &str = "ghp_fakeTOKEN0123456789abcdefSECRET";

/// `x-ratelimit-reset` the fake reports (2100-01-01, always in the future).
pub const FAKE_RESET_EPOCH: u64 = 4_102_444_800;

/// A board fixture.
#[derive(Debug, Clone, Deserialize)]
pub struct BoardFixture {
    /// Owner login.
    pub owner: String,
    /// `organization` or `user`.
    #[serde(default = "default_owner_type")]
    pub owner_type: String,
    /// Project number.
    pub project_number: u64,
    /// Project title.
    #[serde(default)]
    pub title: String,
    /// Project fields in board order.
    pub fields: Vec<FieldFixture>,
    /// Items in board (position) order.
    #[serde(default)]
    pub items: Vec<ItemFixture>,
    /// Issues that exist but are not on this project (e.g. blockers elsewhere).
    #[serde(default)]
    pub extra_issues: Vec<IssueFixture>,
}

fn default_owner_type() -> String {
    "organization".into()
}

/// A project field.
#[derive(Debug, Clone, Deserialize)]
pub struct FieldFixture {
    /// Field name.
    pub name: String,
    /// `single_select` (default), `text`, `number`, `iteration`.
    #[serde(rename = "type", default = "default_field_type")]
    pub kind: String,
    /// Option names for single-select fields.
    #[serde(default)]
    pub options: Vec<String>,
}

fn default_field_type() -> String {
    "single_select".into()
}

/// A project item; every member is optional in a fixture (see [`ItemFixture::default`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ItemFixture {
    /// Stable item id (assigned at start when absent).
    pub id: Option<String>,
    /// `ISSUE` (default), `DRAFT_ISSUE`, `PULL_REQUEST`, `REDACTED`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Status option name (None = unset).
    pub status: Option<String>,
    /// Priority option name (None = unset).
    pub priority: Option<String>,
    /// Archived items are hidden from `items` and flagged in `projectItems`.
    pub archived: bool,
    /// The issue, for `ISSUE` items.
    pub issue: Option<IssueFixture>,
    /// A draft/PR title (unused by Baton).
    pub title: Option<String>,
}

impl Default for ItemFixture {
    /// An unarchived `ISSUE` item with nothing set.
    fn default() -> Self {
        ItemFixture {
            id: None,
            kind: "ISSUE".into(),
            status: None,
            priority: None,
            archived: false,
            issue: None,
            title: None,
        }
    }
}

impl ItemFixture {
    /// An issue item with `status` (and item id `id`, or one assigned at start).
    fn for_issue(id: Option<String>, issue: IssueFixture, status: Option<&str>) -> Self {
        ItemFixture {
            id,
            status: status.map(str::to_string),
            issue: Some(issue),
            ..ItemFixture::default()
        }
    }
}

/// An issue.
#[derive(Debug, Clone, Deserialize)]
pub struct IssueFixture {
    /// `owner/name`.
    pub repo: String,
    /// Issue number.
    pub number: u64,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// Body (GitHub sends `""` for none).
    #[serde(default)]
    pub body: String,
    /// `OPEN` or `CLOSED`.
    #[serde(default = "default_issue_state")]
    pub state: String,
    /// Label names as on GitHub.
    #[serde(default)]
    pub labels: Vec<String>,
    /// RFC 3339.
    #[serde(default = "default_time")]
    pub created_at: String,
    /// RFC 3339.
    #[serde(default = "default_time")]
    pub updated_at: String,
    /// Blockers as `owner/repo#number`.
    #[serde(default)]
    pub blocked_by: Vec<String>,
    /// Other projects this issue is on (their project ids), with a Status there.
    #[serde(default)]
    pub other_projects: Vec<String>,
    /// False once deleted (refresh then answers NOT_FOUND).
    #[serde(default = "yes")]
    pub exists: bool,
}

fn default_issue_state() -> String {
    "OPEN".into()
}
fn default_time() -> String {
    "2026-01-01T00:00:00Z".into()
}
fn yes() -> bool {
    true
}

impl IssueFixture {
    /// An open issue with defaults.
    pub fn new(repo: &str, number: u64, title: &str) -> Self {
        IssueFixture {
            repo: repo.into(),
            number,
            title: title.into(),
            body: String::new(),
            state: "OPEN".into(),
            labels: Vec::new(),
            created_at: default_time(),
            updated_at: default_time(),
            blocked_by: Vec::new(),
            other_projects: Vec::new(),
            exists: true,
        }
    }

    /// `owner/repo#number`.
    pub fn reference(&self) -> String {
        format!("{}#{}", self.repo, self.number)
    }
}

impl BoardFixture {
    /// Load a fixture file (relative paths resolve from the crate root).
    pub fn load(path: impl AsRef<Path>) -> Self {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path.as_ref());
        let text = std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("read fixture {}: {e}", p.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse fixture {}: {e}", p.display()))
    }

    /// An empty org board with Status (Todo, In Progress, In Review, Done) and Priority (P0–P2).
    pub fn empty(owner: &str, number: u64) -> Self {
        BoardFixture {
            owner: owner.into(),
            owner_type: "organization".into(),
            project_number: number,
            title: "Generated".into(),
            fields: vec![
                FieldFixture {
                    name: "Status".into(),
                    kind: "single_select".into(),
                    options: vec![
                        "Todo".into(),
                        "In Progress".into(),
                        "In Review".into(),
                        "Done".into(),
                    ],
                },
                FieldFixture {
                    name: "Priority".into(),
                    kind: "single_select".into(),
                    options: vec!["P0".into(), "P1".into(), "P2".into()],
                },
            ],
            items: Vec::new(),
            extra_issues: Vec::new(),
        }
    }

    /// Append an issue item with `status`.
    pub fn push_issue(&mut self, issue: IssueFixture, status: Option<&str>) -> &mut Self {
        self.items.push(ItemFixture::for_issue(None, issue, status));
        self
    }

    /// A board of `n` open issues in `acme/app` numbered 1..=n, all in `status`.
    pub fn generated(n: u64, status: &str) -> Self {
        let mut b = BoardFixture::empty("acme", 7);
        for i in 1..=n {
            b.push_issue(
                IssueFixture::new("acme/app", i, &format!("Issue {i}")),
                Some(status),
            );
        }
        b
    }
}

impl Fault {
    /// HTTP `status` with exactly `body` and no extra headers.
    pub fn raw(status: u16, body: impl Into<String>) -> Fault {
        Fault::Raw {
            status,
            headers: vec![],
            body: body.into(),
        }
    }

    /// A secondary rate limit (HTTP 429) whose `retry-after` header is exactly `value` (huge,
    /// negative, garbage: anything a hostile server could send).
    pub fn retry_after_raw(value: &str) -> Fault {
        Fault::Raw {
            status: 429,
            headers: vec![("retry-after".into(), value.into())],
            body: r#"{"message":"You have exceeded a secondary rate limit."}"#.into(),
        }
    }

    /// A primary rate limit (HTTP 200, `RATE_LIMITED`, remaining 0) whose `x-ratelimit-reset`
    /// header is exactly `value`.
    pub fn reset_raw(value: &str) -> Fault {
        Fault::Raw {
            status: 200,
            headers: vec![
                ("x-ratelimit-limit".into(), "5000".into()),
                ("x-ratelimit-remaining".into(), "0".into()),
                ("x-ratelimit-reset".into(), value.into()),
            ],
            body: r#"{"errors":[{"type":"RATE_LIMITED","message":"API rate limit exceeded for user ID 1."}]}"#.into(),
        }
    }
}

/// A queued misbehaviour, served instead of (or before) the next answer.
#[derive(Debug, Clone)]
pub enum Fault {
    /// HTTP 401 Bad credentials, with `x-ratelimit-remaining: 0` like GitHub.
    Unauthorized,
    /// HTTP `status` (403/429) secondary rate limit, with an optional `retry-after`.
    SecondaryRateLimit {
        /// 403 or 429.
        status: u16,
        /// `retry-after` seconds.
        retry_after: Option<u64>,
    },
    /// HTTP 200 primary limit error with `type` spelled `spelling` (`RATE_LIMITED`/`RATE_LIMIT`).
    PrimaryRateLimit {
        /// The `type` value.
        spelling: &'static str,
        /// `x-ratelimit-remaining` sent.
        remaining: u64,
    },
    /// HTTP 502 with GitHub's `"data":"null"` timeout body.
    BadGateway,
    /// HTTP 200 with a non-JSON body.
    Garbage,
    /// Wait this long, then answer normally.
    Slow(Duration),
    /// HTTP 200 INSUFFICIENT_SCOPES.
    InsufficientScopes,
    /// Exactly this reply.
    Raw {
        /// HTTP status.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// Body.
        body: String,
    },
}

/// A small seeded generator (SplitMix64) for reproducible chaos.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// Random per-request faults ([`FakeGithub::set_chaos`]).
struct Chaos {
    rng: SplitMix,
    percent: u64,
    counts: std::collections::BTreeMap<&'static str, u64>,
}

/// A chaos fault: a whole reply, or a change to the normal answer.
enum ChaosFault {
    Plain(Fault),
    Mangle(Mangle),
}

/// A change to a normal answer.
#[derive(Debug, Clone, Copy)]
enum Mangle {
    /// A null at a random place (`data`, the project node, a refresh node, `projectItems`, …).
    Null(u64),
    /// 8 MB of padding in an extra member.
    Fat,
    /// One item of the page (or one refresh node's project item) left out.
    DropItem(u64),
}

impl Mangle {
    fn apply(self, data: &mut Value) {
        match self {
            Mangle::Fat => data["padding"] = json!("p".repeat(8 * 1024 * 1024)),
            Mangle::Null(k) => {
                let spots = [
                    "/data",
                    "/data/node",
                    "/data/nodes/0",
                    "/data/nodes/0/projectItems",
                    "/data/nodes/0/__typename",
                    "/data/node/items/nodes/0",
                    "/data/node/items/pageInfo",
                    "/data/nodes/0/projectItems/nodes/0/project",
                ];
                let spot = spots[(k % spots.len() as u64) as usize];
                if let Some(v) = data.pointer_mut(spot) {
                    *v = Value::Null;
                }
            }
            Mangle::DropItem(k) => {
                for spot in ["/data/node/items/nodes", "/data/nodes/0/projectItems/nodes"] {
                    if let Some(list) = data.pointer_mut(spot).and_then(Value::as_array_mut) {
                        if !list.is_empty() {
                            let i = (k % list.len() as u64) as usize;
                            list.remove(i);
                        }
                    }
                }
            }
        }
    }
}

impl Chaos {
    /// Maybe a fault for the next request (hangs stay under 3 s).
    fn roll(&mut self) -> Option<ChaosFault> {
        if self.rng.below(100) >= self.percent {
            return None;
        }
        let r = &mut self.rng;
        let soon = 1 + r.below(4);
        let (name, f) = match r.below(10) {
            0 => (
                "5xx",
                ChaosFault::Plain(match r.below(3) {
                    0 => Fault::BadGateway,
                    n => Fault::raw(
                        if n == 1 { 500 } else { 503 },
                        r#"{"message":"Server Error"}"#,
                    ),
                }),
            ),
            1 => ("401", ChaosFault::Plain(Fault::Unauthorized)),
            2 => {
                // Always with a short `retry-after`: without one Baton waits a minute, which
                // would idle most of a chaos run.
                let retry_after = Some(soon);
                let status = if r.below(2) == 0 { 403 } else { 429 };
                (
                    "secondary_rate_limit",
                    ChaosFault::Plain(Fault::SecondaryRateLimit {
                        status,
                        retry_after,
                    }),
                )
            }
            3 => {
                let reset = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
                    + soon;
                let mut headers = vec![
                    ("x-ratelimit-limit".to_string(), "5000".to_string()),
                    ("x-ratelimit-remaining".to_string(), "0".to_string()),
                    ("x-ratelimit-reset".to_string(), reset.to_string()),
                ];
                if r.below(2) == 0 {
                    headers.push(("retry-after".to_string(), soon.to_string()));
                }
                let body = json!({"errors":[{"type":"RATE_LIMITED","message":"API rate limit exceeded for user ID 1234567."}]});
                (
                    "primary_rate_limit",
                    ChaosFault::Plain(Fault::Raw {
                        status: 200,
                        headers,
                        body: body.to_string(),
                    }),
                )
            }
            4 => (
                "hang",
                ChaosFault::Plain(Fault::Slow(Duration::from_millis(r.below(3000)))),
            ),
            5 => ("garbage", ChaosFault::Plain(Fault::Garbage)),
            6 | 7 => ("null", ChaosFault::Mangle(Mangle::Null(r.next_u64()))),
            8 => ("fat_page", ChaosFault::Mangle(Mangle::Fat)),
            _ => (
                "dropped_item",
                ChaosFault::Mangle(Mangle::DropItem(r.next_u64())),
            ),
        };
        *self.counts.entry(name).or_insert(0) += 1;
        Some(f)
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// `operationName` of the body.
    pub operation: String,
    /// `variables` of the body.
    pub variables: Value,
    /// The `query` text.
    pub query: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
    /// Rate-limit points GitHub would charge ([`query_cost`]), also reported as `rateLimit.cost`.
    pub cost: i64,
    /// When the request arrived.
    pub at: std::time::SystemTime,
}

struct State {
    board: BoardFixture,
    project_id: String,
    faults: VecDeque<Fault>,
    /// Served to every request while set (after the queued faults).
    sticky: Option<Fault>,
    requests: Vec<RecordedRequest>,
    supports_dependencies: bool,
    supports_items_query: bool,
    break_end_cursor: bool,
    endless_pages: Option<(usize, usize)>,
    chaos: Option<Chaos>,
    reject_auth: bool,
    remaining: i64,
    next_item: u64,
}

/// The running fake. Stops when dropped.
pub struct FakeGithub {
    port: u16,
    state: Arc<Mutex<State>>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn option_id(name: &str) -> String {
    // FNV-1a, 8 hex chars like GitHub's option ids.
    let mut h: u32 = 0x811c9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    format!("{h:08x}")
}

/// The fake's node id for an issue `owner/repo#n`.
pub fn issue_node_id(reference: &str) -> String {
    format!("I_kwDO{}", b64(reference.as_bytes()).trim_end_matches('='))
}

impl FakeGithub {
    /// Serve `board` on 127.0.0.1 (ephemeral port).
    pub fn start(mut board: BoardFixture) -> Self {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind fake GitHub"));
        let port = server.server_addr().to_ip().expect("ip listener").port();
        let mut next_item = 1u64;
        for it in &mut board.items {
            if it.id.is_none() {
                it.id = Some(format!("PVTI_lADOAAABc84AAAAAzg{next_item:06}"));
                next_item += 1;
            }
        }
        let project_id = format!(
            "PVT_kwDO{}",
            b64(format!("{}#{}", board.owner, board.project_number).as_bytes())
                .trim_end_matches('=')
        );
        let state = Arc::new(Mutex::new(State {
            board,
            project_id,
            faults: VecDeque::new(),
            sticky: None,
            requests: Vec::new(),
            supports_dependencies: true,
            supports_items_query: true,
            break_end_cursor: false,
            endless_pages: None,
            chaos: None,
            reject_auth: false,
            remaining: 5000,
            next_item,
        }));
        let (srv, st) = (server.clone(), state.clone());
        let thread = std::thread::spawn(move || {
            while let Ok(req) = srv.recv() {
                let st = st.clone();
                std::thread::spawn(move || handle(req, &st));
            }
        });
        FakeGithub {
            port,
            state,
            server,
            thread: Some(thread),
        }
    }

    /// Load `fixtures/boards/<name>` and serve it.
    pub fn from_fixture(rel_path: &str) -> Self {
        Self::start(BoardFixture::load(rel_path))
    }

    /// `http://127.0.0.1:<port>/graphql`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/graphql", self.port)
    }

    /// The tracker configuration the GitHub tests start from: this fake with its token, the
    /// organization `acme`'s project 7, fields `Status` and `Priority`, active `Todo` and
    /// `In Progress`, terminal `Done`, 50 items a page, no server-side filter, a 5 s timeout.
    pub fn tracker_config(&self) -> TrackerConfig {
        TrackerConfig {
            kind: Some("github_projects".into()),
            endpoint: self.endpoint(),
            token: Some(Secret::new(FAKE_TOKEN)),
            owner: Some("acme".into()),
            owner_type: OwnerType::Organization,
            project_number: Some(7),
            status_field: "Status".into(),
            priority_field: Some("Priority".into()),
            repos: vec![],
            required_labels: vec![],
            excluded_labels: vec![],
            active_states: vec!["Todo".into(), "In Progress".into()],
            terminal_states: vec!["Done".into()],
            page_size: 50,
            server_side_filter: false,
            timeout_ms: 5000,
            ..TrackerConfig::default()
        }
    }

    /// The project's node id.
    pub fn project_id(&self) -> String {
        lock(&self.state).project_id.clone()
    }

    /// All requests so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// Number of requests so far.
    pub fn request_count(&self) -> usize {
        lock(&self.state).requests.len()
    }

    /// Rate-limit points of all requests so far (GitHub's rule, see [`query_cost`]).
    pub fn points(&self) -> i64 {
        lock(&self.state).requests.iter().map(|r| r.cost).sum()
    }

    /// The requests recorded so far, forgetting them (the benchmark server's log).
    pub fn take_requests(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut lock(&self.state).requests)
    }

    /// Forget recorded requests.
    pub fn clear_requests(&self) {
        lock(&self.state).requests.clear();
    }

    /// Operation names of the requests so far.
    pub fn operations(&self) -> Vec<String> {
        lock(&self.state)
            .requests
            .iter()
            .map(|r| r.operation.clone())
            .collect()
    }

    /// Queue a fault for the next request.
    pub fn push_fault(&self, f: Fault) {
        lock(&self.state).faults.push_back(f);
    }

    /// Serve `f` to every request from now on (`None`: answer normally again).
    pub fn set_sticky_fault(&self, f: Option<Fault>) {
        lock(&self.state).sticky = f;
    }

    /// Behave like a server whose schema lacks `Issue.blockedBy` (older GHES).
    pub fn set_supports_dependencies(&self, v: bool) {
        lock(&self.state).supports_dependencies = v;
    }

    /// Behave like a server whose `items` has no `query:` argument.
    pub fn set_supports_items_query(&self, v: bool) {
        lock(&self.state).supports_items_query = v;
    }

    /// While `true`, answer every request with 401 Bad credentials (a revoked token).
    pub fn set_reject_auth(&self, v: bool) {
        lock(&self.state).reject_auth = v;
    }

    /// Answer `hasNextPage: true` with `endCursor: null` (a pagination integrity fault).
    pub fn set_break_end_cursor(&self, v: bool) {
        lock(&self.state).break_end_cursor = v;
    }

    /// Serve board reads that never end: every items page holds `items` Todo issues (distinct
    /// ids) whose bodies are `body_bytes` long, with `hasNextPage: true` and a fresh cursor
    /// (the unbounded-memory attack). `None` serves the board again.
    pub fn set_endless_pages(&self, pages: Option<(usize, usize)>) {
        lock(&self.state).endless_pages = pages;
    }

    fn with_item<R>(&self, reference: &str, f: impl FnOnce(&mut ItemFixture) -> R) -> R {
        let mut st = lock(&self.state);
        let it = st
            .board
            .items
            .iter_mut()
            .find(|i| i.issue.as_ref().map(IssueFixture::reference).as_deref() == Some(reference))
            .unwrap_or_else(|| panic!("no item for {reference}"));
        f(it)
    }

    fn with_issue<R>(&self, reference: &str, f: impl FnOnce(&mut IssueFixture) -> R) -> R {
        let mut st = lock(&self.state);
        let st = &mut *st;
        let issue = st
            .board
            .items
            .iter_mut()
            .filter_map(|i| i.issue.as_mut())
            .chain(st.board.extra_issues.iter_mut())
            .find(|i| i.reference() == reference)
            .unwrap_or_else(|| panic!("no issue {reference}"));
        f(issue)
    }

    /// Set the Status of the item for `owner/repo#n` (None = unset).
    pub fn set_status(&self, reference: &str, status: Option<&str>) {
        self.with_item(reference, |it| it.status = status.map(str::to_string));
    }

    /// Set the priority option of the item for `owner/repo#n`.
    pub fn set_priority(&self, reference: &str, priority: Option<&str>) {
        self.with_item(reference, |it| it.priority = priority.map(str::to_string));
    }

    /// Archive the item for `owner/repo#n`.
    pub fn archive_item(&self, reference: &str) {
        self.with_item(reference, |it| it.archived = true);
    }

    /// Inject a random fault into `percent` % of the requests (see [`ChaosFault`]), drawn from
    /// a generator seeded with `seed` (the same seed draws the same sequence). `percent = 0`
    /// turns it off.
    pub fn set_chaos(&self, seed: u64, percent: u64) {
        lock(&self.state).chaos = (percent > 0).then(|| Chaos {
            rng: SplitMix(seed),
            percent,
            counts: std::collections::BTreeMap::new(),
        });
    }

    /// How many of each chaos fault were served so far.
    pub fn chaos_counts(&self) -> std::collections::BTreeMap<&'static str, u64> {
        lock(&self.state)
            .chaos
            .as_ref()
            .map(|c| c.counts.clone())
            .unwrap_or_default()
    }

    /// Reopen the issue `owner/repo#n`.
    pub fn reopen_issue(&self, reference: &str) {
        self.with_issue(reference, |i| i.state = "OPEN".into());
    }

    /// Close the issue `owner/repo#n` (its Status is unchanged).
    pub fn close_issue(&self, reference: &str) {
        self.with_issue(reference, |i| i.state = "CLOSED".into());
    }

    /// Add a label to `owner/repo#n`.
    pub fn add_label(&self, reference: &str, label: &str) {
        self.with_issue(reference, |i| i.labels.push(label.into()));
    }

    /// Remove a label from `owner/repo#n`.
    pub fn remove_label(&self, reference: &str, label: &str) {
        self.with_issue(reference, |i| i.labels.retain(|l| l != label));
    }

    /// Delete the issue (refresh answers NOT_FOUND; its item disappears from the board).
    pub fn delete_issue(&self, reference: &str) {
        let mut st = lock(&self.state);
        st.board.items.retain(|i| {
            i.issue.as_ref().map(IssueFixture::reference).as_deref() != Some(reference)
        });
        st.board.extra_issues.retain(|i| i.reference() != reference);
    }

    /// Remove the item from the project; the issue still exists (moved to `extra_issues`).
    pub fn remove_item(&self, reference: &str) {
        let mut st = lock(&self.state);
        if let Some(pos) = st.board.items.iter().position(|i| {
            i.issue.as_ref().map(IssueFixture::reference).as_deref() == Some(reference)
        }) {
            let it = st.board.items.remove(pos);
            if let Some(issue) = it.issue {
                st.board.extra_issues.push(issue);
            }
        }
    }

    /// Add an issue item at the end of the board.
    pub fn add_issue(&self, issue: IssueFixture, status: Option<&str>) {
        let mut st = lock(&self.state);
        let id = format!("PVTI_lADOAAABc84AAAAAzg{:06}", st.next_item);
        st.next_item += 1;
        st.board
            .items
            .push(ItemFixture::for_issue(Some(id), issue, status));
    }
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

fn rate_headers(remaining: i64) -> Vec<(String, String)> {
    vec![
        ("x-ratelimit-limit".into(), "5000".into()),
        ("x-ratelimit-remaining".into(), remaining.to_string()),
        ("x-ratelimit-used".into(), (5000 - remaining).to_string()),
        ("x-ratelimit-reset".into(), FAKE_RESET_EPOCH.to_string()),
        ("x-ratelimit-resource".into(), "graphql".into()),
    ]
}

fn handle(mut req: tiny_http::Request, st: &Arc<Mutex<State>>) {
    let header = |name: &'static str| {
        req.headers()
            .iter()
            .find(|h| h.field.equiv(name))
            .map(|h| h.value.as_str().to_string())
    };
    let authorization = header("Authorization");
    let user_agent = header("User-Agent");
    let method = req.method().as_str().to_string();
    let mut body = String::new();
    let _ = req
        .as_reader()
        .take(4 * 1024 * 1024)
        .read_to_string(&mut body);
    let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let operation = parsed["operationName"].as_str().unwrap_or("").to_string();
    let query = parsed["query"].as_str().unwrap_or("").to_string();
    let variables = parsed.get("variables").cloned().unwrap_or(Value::Null);
    let cost = query_cost(&query, &variables);

    let fault = {
        let mut s = lock(st);
        s.requests.push(RecordedRequest {
            method: method.clone(),
            operation: operation.clone(),
            variables: variables.clone(),
            query: query.clone(),
            authorization: authorization.clone(),
            user_agent: user_agent.clone(),
            cost,
            at: std::time::SystemTime::now(),
        });
        if s.reject_auth {
            (Some(Fault::Unauthorized), None)
        } else if let Some(f) = s.faults.pop_front() {
            (Some(f), None)
        } else {
            match s.chaos.as_mut().and_then(Chaos::roll) {
                Some(ChaosFault::Plain(f)) => (Some(f), None),
                Some(ChaosFault::Mangle(m)) => (None, Some(m)),
                None => (s.sticky.clone(), None),
            }
        }
    };
    let (fault, mangle) = fault;
    if let Some(Fault::Slow(d)) = &fault {
        std::thread::sleep(*d);
    }
    let answer = match fault {
        Some(
            f @ (Fault::Unauthorized
            | Fault::SecondaryRateLimit { .. }
            | Fault::PrimaryRateLimit { .. }
            | Fault::BadGateway
            | Fault::Garbage
            | Fault::InsufficientScopes
            | Fault::Raw { .. }),
        ) => fault_answer(f),
        _ => {
            if method != "POST" {
                Answer { status: 404, headers: vec![], body: r#"{"message":"Not Found","documentation_url":"https://docs.github.com/graphql"}"#.into() }
            } else if authorization.as_deref() != Some(&format!("Bearer {FAKE_TOKEN}")) {
                fault_answer(Fault::Unauthorized)
            } else if user_agent.as_deref().unwrap_or("").is_empty() {
                Answer { status: 403, headers: vec![], body: r#"{"message":"Request forbidden by administrative rules. Please make sure your request has a User-Agent header"}"#.into() }
            } else {
                let mut s = lock(st);
                s.remaining -= 1;
                let remaining = s.remaining;
                let mut data = answer_operation(&s, &operation, &query, &variables);
                if let Some(m) = mangle {
                    m.apply(&mut data);
                }
                if let Some(rl) = data
                    .pointer_mut("/data/rateLimit")
                    .filter(|v| v.is_object())
                {
                    rl["cost"] = json!(cost);
                }
                Answer {
                    status: 200,
                    headers: rate_headers(remaining),
                    body: data.to_string(),
                }
            }
        }
    };
    let mut resp = tiny_http::Response::from_string(answer.body).with_status_code(answer.status);
    let mut headers = vec![
        (
            "content-type".to_string(),
            "application/json; charset=utf-8".to_string(),
        ),
        (
            "x-github-request-id".to_string(),
            "0402:25A1:11044F5:2F2D8B9:61E465B9".to_string(),
        ),
    ];
    headers.extend(answer.headers);
    for (k, v) in headers {
        if let Ok(h) = tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()) {
            resp.add_header(h);
        }
    }
    let _ = req.respond(resp);
}

fn fault_answer(f: Fault) -> Answer {
    match f {
        Fault::Unauthorized => Answer {
            status: 401,
            headers: vec![
                ("x-ratelimit-limit".into(), "0".into()),
                ("x-ratelimit-remaining".into(), "0".into()),
                ("x-ratelimit-reset".into(), (FAKE_RESET_EPOCH + 3600).to_string()),
                ("x-ratelimit-resource".into(), "graphql".into()),
            ],
            body: r#"{"message":"Bad credentials","documentation_url":"https://docs.github.com/graphql"}"#.into(),
        },
        Fault::SecondaryRateLimit { status, retry_after } => Answer {
            status,
            headers: retry_after.map(|s| ("retry-after".to_string(), s.to_string())).into_iter().collect(),
            body: r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID 0402:25A1:11044F5:2F2D8B9:61E465B9.","documentation_url":"https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}"#.into(),
        },
        Fault::PrimaryRateLimit { spelling, remaining } => {
            let mut headers = rate_headers(remaining as i64);
            headers.retain(|(k, _)| k != "x-ratelimit-remaining");
            headers.push(("x-ratelimit-remaining".into(), remaining.to_string()));
            let body = if spelling == "RATE_LIMIT" {
                json!({"errors":[{"type":"RATE_LIMIT","code":"graphql_rate_limit","message":"API rate limit already exceeded for user ID 1234567."}]})
            } else {
                json!({"errors":[{"type": spelling,"message":"API rate limit exceeded for user ID 1234567."}]})
            };
            Answer { status: 200, headers, body: body.to_string() }
        }
        Fault::BadGateway => Answer {
            status: 502,
            headers: vec![],
            body: r#"{"data":"null","errors":[{"message":"Something went wrong while executing your query. This may be the result of a timeout, or it could be a GitHub bug. Please include `8FF2:721B:31D84D5:6EF58BD:5BCF3079` when reporting this issue."}]}"#.into(),
        },
        Fault::Garbage => Answer { status: 200, headers: rate_headers(4000), body: "<html><body>Unicorn!</body></html>".into() },
        Fault::InsufficientScopes => Answer {
            status: 200,
            headers: rate_headers(4000),
            body: r#"{"errors":[{"type":"INSUFFICIENT_SCOPES","locations":[{"line":3,"column":5}],"message":"Your token has not been granted the required scopes to execute this query. The 'projectV2' field requires one of the following scopes: ['read:project'], but your token has only been granted the: ['repo'] scopes. Please modify your token's scopes at: https://github.com/settings/tokens."}]}"#.into(),
        },
        Fault::Raw { status, headers, body } => Answer { status, headers, body },
        Fault::Slow(_) => unreachable!(),
    }
}

/// The points GitHub charges for `query` (API-NOTES §2.3): over every connection, the requests
/// needed to fill it assuming `first` is reached (one per parent object: the product of the
/// `first`s above it, `nodes(ids:)` counting its ids), summed, divided by 100, rounded, at least 1.
/// Fragments are expanded; `first: $var` is read from `vars`.
pub fn query_cost(query: &str, vars: &Value) -> i64 {
    let toks = gql_tokens(query);
    let mut fragments: std::collections::HashMap<String, std::ops::Range<usize>> =
        std::collections::HashMap::new();
    let mut op: Option<std::ops::Range<usize>> = None;
    let mut i = 0;
    while i < toks.len() {
        let is_frag = toks[i] == "fragment";
        if is_frag || toks[i] == "query" {
            let name = toks.get(i + 1).cloned().unwrap_or_default();
            let open = (i..toks.len())
                .find(|&j| toks[j] == "{")
                .unwrap_or(toks.len());
            let close = matching_brace(&toks, open);
            if is_frag {
                fragments.insert(name, open + 1..close);
            } else {
                op = Some(open + 1..close);
            }
            i = close + 1;
        } else {
            i += 1;
        }
    }
    let mut requests = 0f64;
    if let Some(r) = op {
        selection_cost(&toks, r, 1.0, &fragments, vars, &mut requests, 0);
    }
    ((requests / 100.0).round() as i64).max(1)
}

fn gql_tokens(q: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = q.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            c if c.is_whitespace() || c == ',' => {}
            '.' => {
                while chars.peek() == Some(&'.') {
                    chars.next();
                }
                out.push("...".into());
            }
            '"' => {
                let mut sv = String::from("\"");
                for c in chars.by_ref() {
                    sv.push(c);
                    if c == '"' {
                        break;
                    }
                }
                out.push(sv);
            }
            c if c.is_alphanumeric() || c == '_' || c == '$' => {
                let mut w = c.to_string();
                while let Some(&n) = chars.peek() {
                    if n.is_alphanumeric() || n == '_' {
                        w.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push(w);
            }
            other => out.push(other.to_string()),
        }
    }
    out
}

/// The index of the `}` closing the `{` at `open` (`toks.len()` when unbalanced).
fn matching_brace(toks: &[String], open: usize) -> usize {
    matching(toks, open, "{", "}")
}

/// The index of the `)` closing the `(` at `open` (`toks.len()` when unbalanced).
fn matching_paren(toks: &[String], open: usize) -> usize {
    matching(toks, open, "(", ")")
}

fn matching(toks: &[String], open: usize, opener: &str, closer: &str) -> usize {
    let mut depth = 0i32;
    for (j, t) in toks.iter().enumerate().skip(open) {
        if t == opener {
            depth += 1;
        } else if t == closer {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    toks.len()
}

/// Walk one selection set (`range` inside its braces) with `mult` parent objects.
fn selection_cost(
    toks: &[String],
    range: std::ops::Range<usize>,
    mult: f64,
    fragments: &std::collections::HashMap<String, std::ops::Range<usize>>,
    vars: &Value,
    requests: &mut f64,
    depth: usize,
) {
    if depth > 32 {
        return;
    }
    let mut i = range.start;
    while i < range.end {
        let t = toks[i].as_str();
        if t == "..." {
            if toks.get(i + 1).map(String::as_str) == Some("on") {
                let open = i + 3;
                let close = matching_brace(toks, open);
                selection_cost(
                    toks,
                    open + 1..close,
                    mult,
                    fragments,
                    vars,
                    requests,
                    depth + 1,
                );
                i = close + 1;
            } else {
                let name = toks.get(i + 1).cloned().unwrap_or_default();
                if let Some(r) = fragments.get(&name) {
                    selection_cost(toks, r.clone(), mult, fragments, vars, requests, depth + 1);
                }
                i += 2;
            }
            continue;
        }
        if t == "@" {
            // Directive: skip its name and arguments.
            i += 2;
            if toks.get(i).map(String::as_str) == Some("(") {
                i = matching_paren(toks, i) + 1;
            }
            continue;
        }
        // A field, possibly aliased.
        if toks.get(i + 1).map(String::as_str) == Some(":") {
            i += 2;
            continue;
        }
        i += 1;
        let mut child = mult;
        if toks.get(i).map(String::as_str) == Some("(") {
            let close = matching_paren(toks, i);
            let mut j = i + 1;
            while j + 2 <= close {
                let (arg, val) = (toks[j].as_str(), toks[j + 2].as_str());
                let n = if let Some(var) = val.strip_prefix('$') {
                    match &vars[var] {
                        Value::Array(a) => Some(a.len() as f64),
                        v => v.as_f64(),
                    }
                } else {
                    val.parse::<f64>().ok()
                };
                match (arg, n) {
                    ("first" | "last", Some(n)) => {
                        *requests += mult;
                        child = mult * n;
                    }
                    ("ids", Some(n)) => child = mult * n,
                    _ => {}
                }
                j += 3;
            }
            i = close + 1;
        }
        while toks.get(i).map(String::as_str) == Some("@") {
            i += 2;
            if toks.get(i).map(String::as_str) == Some("(") {
                i = matching_paren(toks, i) + 1;
            }
        }
        if toks.get(i).map(String::as_str) == Some("{") {
            let close = matching_brace(toks, i);
            selection_cost(
                toks,
                i + 1..close,
                child,
                fragments,
                vars,
                requests,
                depth + 1,
            );
            i = close + 1;
        }
    }
}

fn rate_limit_body(s: &State, cost: i64) -> Value {
    json!({"limit":5000,"cost":cost,"remaining":s.remaining,"used":5000 - s.remaining,"resetAt":"2100-01-01T00:00:00Z","nodeCount":100})
}

fn not_found(path: Value, message: String) -> Value {
    json!({"type":"NOT_FOUND","path":path,"locations":[{"line":2,"column":3}],"message":message})
}

fn answer_operation(s: &State, op: &str, query: &str, vars: &Value) -> Value {
    if query.contains("blockedBy(") && !s.supports_dependencies {
        return json!({"errors":[{"path":["query","node","... on ProjectV2","items","nodes","content","... on Issue","blockedBy"],"extensions":{"code":"undefinedField","typeName":"Issue","fieldName":"blockedBy"},"locations":[{"line":30,"column":15}],"message":"Field 'blockedBy' doesn't exist on type 'Issue'"}]});
    }
    if query.contains("query: $query") && !s.supports_items_query {
        return json!({"errors":[{"path":["query","node","... on ProjectV2","items","query"],"extensions":{"code":"argumentNotAccepted","name":"items","typeName":"Field","argumentName":"query"},"locations":[{"line":18,"column":7}],"message":"Field 'items' doesn't accept argument 'query'"}]});
    }
    match op {
        "ResolveOrgProject" | "ResolveUserProject" => resolve_project(s, query, vars),
        "ProjectItems" | "ProjectItemsNoDeps" | "ProjectItemsFiltered" => {
            items_page(s, vars, query.contains("blockedBy("))
        }
        "RefreshIssues" | "RefreshRunning" => refresh(s, query, vars, query.contains("blockedBy(")),
        "IssueProjectItems" => issue_project_items(s, query, vars),
        _ => json!({"errors":[{"message":format!("fake GitHub: unknown operation {op:?}")}]}),
    }
}

fn resolve_project(s: &State, query: &str, vars: &Value) -> Value {
    let b = &s.board;
    let asked_org = query.contains("organization(login:");
    let kind_ok = asked_org == (b.owner_type == "organization");
    let login = vars["owner"].as_str().unwrap_or("");
    let rl = rate_limit_body(s, 1);
    if !kind_ok || !login.eq_ignore_ascii_case(&b.owner) {
        let msg = if asked_org {
            format!("Could not resolve to an Organization with the login of '{login}'.")
        } else {
            format!("Could not resolve to a User with the login of '{login}'.")
        };
        return json!({"data":{"owner":null,"rateLimit":rl},"errors":[not_found(json!(["owner"]), msg)]});
    }
    let number = vars["number"].as_u64().unwrap_or(0);
    if number != b.project_number {
        return json!({"data":{"owner":{"projectV2":null},"rateLimit":rl},"errors":[not_found(json!(["owner","projectV2"]), format!("Could not resolve to a ProjectV2 with the number {number}."))]});
    }
    let field = |name: &str| -> Value {
        match b.fields.iter().find(|f| f.name == name) {
            None => Value::Null,
            Some(f) if f.kind == "single_select" => json!({
                "__typename":"ProjectV2SingleSelectField",
                "id": format!("PVTSSF_lADO{}", option_id(&f.name)),
                "name": f.name,
                "options": f.options.iter().map(|o| json!({"id":option_id(o),"name":o})).collect::<Vec<_>>(),
            }),
            Some(f) if f.kind == "iteration" => json!({"__typename":"ProjectV2IterationField"}),
            Some(_) => json!({"__typename":"ProjectV2Field"}),
        }
    };
    let url = format!(
        "https://github.com/orgs/{}/projects/{}",
        b.owner, b.project_number
    );
    let mut project = json!({"id": s.project_id, "number": b.project_number, "title": b.title,
        "url": url, "closed": false, "statusField": field(vars["statusField"].as_str().unwrap_or(""))});
    if vars["withPriority"].as_bool() == Some(true) {
        project["priorityField"] = field(vars["priorityField"].as_str().unwrap_or(""));
    }
    json!({"data":{"owner":{"projectV2":project},"rateLimit":rl}})
}

fn field_value(s: &State, field_name: &str, value: &Option<String>) -> Value {
    let Some(v) = value else { return Value::Null };
    match s.board.fields.iter().find(|f| f.name == field_name) {
        None => Value::Null,
        Some(f) if f.kind == "single_select" => {
            json!({"__typename":"ProjectV2ItemFieldSingleSelectValue","name":v,"optionId":option_id(v)})
        }
        Some(_) => json!({"__typename":"ProjectV2ItemFieldTextValue"}),
    }
}

fn find_issue<'a>(
    s: &'a State,
    reference: &str,
) -> Option<(&'a IssueFixture, Option<&'a ItemFixture>)> {
    for it in &s.board.items {
        if let Some(i) = &it.issue {
            if i.reference() == reference && i.exists {
                return Some((i, Some(it)));
            }
        }
    }
    s.board
        .extra_issues
        .iter()
        .find(|i| i.reference() == reference && i.exists)
        .map(|i| (i, None))
}

fn issue_json(s: &State, i: &IssueFixture) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("__typename".into(), json!("Issue"));
    m.insert("id".into(), json!(issue_node_id(&i.reference())));
    m.insert("number".into(), json!(i.number));
    m.insert("title".into(), json!(i.title));
    m.insert("body".into(), json!(i.body));
    m.insert(
        "url".into(),
        json!(format!("https://github.com/{}/issues/{}", i.repo, i.number)),
    );
    m.insert("state".into(), json!(i.state));
    m.insert("createdAt".into(), json!(i.created_at));
    m.insert("updatedAt".into(), json!(i.updated_at));
    let labels: Vec<Value> = i.labels.iter().map(|l| json!({"name": l})).collect();
    m.insert("labels".into(), first_page(labels, LABELS_FIRST));
    m.insert("repository".into(), json!({"nameWithOwner": i.repo}));
    let _ = s;
    m
}

fn blocker_json(
    s: &State,
    reference: &str,
    with_project_items: bool,
    status_field: &str,
) -> Option<Value> {
    let (b, item) = find_issue(s, reference)?;
    let mut m = Map::new();
    m.insert("id".into(), json!(issue_node_id(reference)));
    m.insert("number".into(), json!(b.number));
    m.insert("state".into(), json!(b.state));
    m.insert("repository".into(), json!({"nameWithOwner": b.repo}));
    if with_project_items {
        m.insert(
            "projectItems".into(),
            project_items_json(
                s,
                b,
                item,
                status_field,
                None,
                PageArgs {
                    first: 10,
                    start: 0,
                },
            ),
        );
    }
    Some(Value::Object(m))
}

/// `i`'s `blockedBy` connection: the blockers that exist (see [`blocker_json`]).
fn blocked_by_json(
    s: &State,
    i: &IssueFixture,
    with_project_items: bool,
    status_field: &str,
) -> Value {
    let blockers: Vec<Value> = i
        .blocked_by
        .iter()
        .filter_map(|r| blocker_json(s, r, with_project_items, status_field))
        .collect();
    first_page(blockers, BLOCKERS_FIRST)
}

/// `first` of the `labels` and `blockedBy` connections in Baton's documents.
const LABELS_FIRST: usize = 50;
const BLOCKERS_FIRST: usize = 20;

/// The first page of a connection over `nodes`, as GitHub serves it: at most `first` nodes and a
/// `pageInfo` saying whether more follow.
fn first_page(mut nodes: Vec<Value>, first: usize) -> Value {
    let more = nodes.len() > first;
    nodes.truncate(first);
    let end = if nodes.is_empty() {
        Value::Null
    } else {
        json!(cursor(nodes.len() - 1))
    };
    json!({"pageInfo": {"hasNextPage": more, "endCursor": end}, "nodes": nodes})
}

/// `first`/`after` of an issue's `projectItems` connection.
#[derive(Debug, Clone, Copy)]
struct PageArgs {
    first: usize,
    start: usize,
}

impl PageArgs {
    /// `first` as written in the document's `projectItems(first: N` (Baton's documents use a
    /// literal; the largest one is the issue's own, blockers' are smaller), and the position after
    /// the `after` cursor.
    fn for_project_items(query: &str, after: Option<&str>) -> PageArgs {
        let first = query
            .split("projectItems(first: ")
            .skip(1)
            .filter_map(|rest| {
                let end = rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                rest[..end].parse::<usize>().ok()
            })
            .max()
            .unwrap_or(100);
        let start = after
            .and_then(|c| (0..100_000).find(|i| cursor(*i) == c))
            .map_or(0, |i| i + 1);
        PageArgs { first, start }
    }
}

fn project_items_json(
    s: &State,
    i: &IssueFixture,
    item: Option<&ItemFixture>,
    status_field: &str,
    priority_field: Option<&str>,
    page: PageArgs,
) -> Value {
    let mut nodes = Vec::new();
    for other in &i.other_projects {
        nodes.push(json!({"id":"PVTI_other","isArchived":false,"project":{"id":other},"status":{"__typename":"ProjectV2ItemFieldSingleSelectValue","name":"Todo","optionId":"f75ad846"}}));
    }
    if let Some(it) = item {
        let mut m = Map::new();
        m.insert("id".into(), json!(it.id));
        m.insert("isArchived".into(), json!(it.archived));
        m.insert("project".into(), json!({"id": s.project_id}));
        m.insert("status".into(), field_value(s, status_field, &it.status));
        if let Some(pf) = priority_field {
            m.insert("priority".into(), field_value(s, pf, &it.priority));
        }
        nodes.push(Value::Object(m));
    }
    let total = nodes.len();
    let nodes: Vec<Value> = nodes
        .into_iter()
        .skip(page.start)
        .take(page.first)
        .collect();
    let has_next = page.start + nodes.len() < total;
    let end = (!nodes.is_empty()).then(|| cursor(page.start + nodes.len() - 1));
    json!({"pageInfo":{"hasNextPage":has_next,"endCursor":end},"nodes": nodes})
}

fn cursor(index: usize) -> String {
    b64(format!("cursor:v2:{index}").as_bytes())
}

fn matches_filter(status: &Option<String>, filter: &str) -> bool {
    // Minimal `is:issue <field>:"A","B"` support (what Baton sends).
    let Some(spec) = filter
        .split_whitespace()
        .find(|t| t.contains(':') && !t.starts_with("is:"))
    else {
        return true;
    };
    let rest = filter[filter.find(spec).unwrap_or(0)..]
        .split_once(':')
        .map(|x| x.1)
        .unwrap_or("");
    let wanted: Vec<String> = rest
        .split(',')
        .map(|v| v.trim().trim_matches('"').to_lowercase())
        .collect();
    status
        .as_ref()
        .is_some_and(|s| wanted.contains(&s.to_lowercase()))
}

/// The Status field's name (default `Status`) and, when `withPriority`, the priority field's.
fn field_names(vars: &Value) -> (&str, Option<&str>) {
    let status_field = vars["statusField"].as_str().unwrap_or("Status");
    let priority_field = (vars["withPriority"].as_bool() == Some(true))
        .then(|| vars["priorityField"].as_str().unwrap_or(""));
    (status_field, priority_field)
}

/// The existing issue whose node id is `id`, with its item when it is on the board.
fn issue_by_node_id<'a>(
    s: &'a State,
    id: &str,
) -> Option<(&'a IssueFixture, Option<&'a ItemFixture>)> {
    s.board
        .items
        .iter()
        .filter_map(|it| it.issue.as_ref().map(|i| (i, Some(it))))
        .chain(s.board.extra_issues.iter().map(|i| (i, None)))
        .find(|(i, _)| i.exists && issue_node_id(&i.reference()) == id)
}

fn items_page(s: &State, vars: &Value, wants_deps: bool) -> Value {
    if vars["projectId"].as_str() != Some(&s.project_id) {
        let id = vars["projectId"].as_str().unwrap_or("");
        return json!({"data":{"node":null,"rateLimit":rate_limit_body(s, 1)},"errors":[not_found(json!(["node"]), format!("Could not resolve to a node with the global id of '{id}'."))]});
    }
    if let Some((items, body_bytes)) = s.endless_pages {
        return endless_page(s, vars, items, body_bytes);
    }
    let first = vars["first"].as_u64().unwrap_or(0);
    if first == 0 || first > 100 {
        return json!({"errors":[{"message":format!("Requesting {first} records on the `items` connection exceeds the `first` limit of 100 records."),"locations":[{"line":4,"column":7}]}]});
    }
    let (status_field, priority_field) = field_names(vars);
    let filter = vars.get("query").and_then(Value::as_str).unwrap_or("");
    let visible: Vec<&ItemFixture> = s
        .board
        .items
        .iter()
        .filter(|i| !i.archived)
        .filter(|i| i.issue.as_ref().is_none_or(|x| x.exists))
        .filter(|i| filter.is_empty() || (i.kind == "ISSUE" && matches_filter(&i.status, filter)))
        .collect();
    let start = match vars["after"].as_str() {
        None => 0,
        Some(c) => (0..=visible.len())
            .find(|i| cursor(*i) == c)
            .map(|i| i + 1)
            .unwrap_or(visible.len()),
    };
    let page: Vec<&ItemFixture> = visible
        .iter()
        .skip(start)
        .take(first as usize)
        .copied()
        .collect();
    let has_next = start + page.len() < visible.len();
    let nodes: Vec<Value> = page
        .iter()
        .map(|it| {
            let mut m = Map::new();
            m.insert("id".into(), json!(it.id));
            m.insert("type".into(), json!(it.kind));
            m.insert("isArchived".into(), json!(it.archived));
            m.insert(
                "status".into(),
                if it.kind == "REDACTED" {
                    Value::Null
                } else {
                    field_value(s, status_field, &it.status)
                },
            );
            if let Some(pf) = priority_field {
                m.insert("priority".into(), field_value(s, pf, &it.priority));
            }
            let content = match it.kind.as_str() {
                "DRAFT_ISSUE" => json!({"__typename":"DraftIssue"}),
                "PULL_REQUEST" => json!({"__typename":"PullRequest"}),
                "REDACTED" => Value::Null,
                _ => match &it.issue {
                    None => Value::Null,
                    Some(i) => {
                        let mut c = issue_json(s, i);
                        if wants_deps {
                            c.insert(
                                "blockedBy".into(),
                                blocked_by_json(s, i, false, status_field),
                            );
                        }
                        Value::Object(c)
                    }
                },
            };
            m.insert("content".into(), content);
            Value::Object(m)
        })
        .collect();
    // An empty page (and the injected integrity fault) has a null endCursor.
    let end_cursor = if page.is_empty() || (has_next && s.break_end_cursor) {
        Value::Null
    } else {
        json!(cursor(start + page.len() - 1))
    };
    let rl_cost = ((1 + 2 * page.len() as i64) as f64 / 100.0)
        .round()
        .max(1.0) as i64;
    json!({"data":{"node":{"__typename":"ProjectV2","items":{"pageInfo":{"hasNextPage":has_next,"endCursor":end_cursor},"nodes":nodes}},"rateLimit":rate_limit_body(s, rl_cost)}})
}

/// One page of a board that never ends ([`FakeGithub::set_endless_pages`]).
fn endless_page(s: &State, vars: &Value, items: usize, body_bytes: usize) -> Value {
    let page: usize = vars["after"]
        .as_str()
        .and_then(|c| c.strip_prefix("endless:"))
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(0, |n| n + 1);
    let body = "x".repeat(body_bytes);
    let nodes: Vec<Value> = (0..items)
        .map(|k| {
            let n = page * items + k + 1;
            json!({"id": format!("PVTI_endless{n}"), "type": "ISSUE", "isArchived": false,
                   "status": {"name": "Todo", "optionId": option_id("Todo")},
                   "content": {"__typename": "Issue", "id": format!("I_endless{n}"), "number": n,
                     "title": format!("endless {n}"), "body": body,
                     "url": format!("https://github.com/acme/app/issues/{n}"), "state": "OPEN",
                     "createdAt": "2024-01-01T00:00:00Z", "updatedAt": "2024-01-01T00:00:00Z",
                     "labels": {"nodes": []}, "repository": {"nameWithOwner": "acme/app"},
                     "blockedBy": {"nodes": []}}})
        })
        .collect();
    json!({"data":{"node":{"__typename":"ProjectV2","items":{"pageInfo":{"hasNextPage":true,"endCursor":format!("endless:{page}")},"nodes":nodes}},"rateLimit":rate_limit_body(s, 1)}})
}

/// `IssueProjectItems`: one further page of an issue's `projectItems`.
fn issue_project_items(s: &State, query: &str, vars: &Value) -> Value {
    let id = vars["id"].as_str().unwrap_or("");
    let (status_field, priority_field) = field_names(vars);
    let found = issue_by_node_id(s, id);
    let rl = rate_limit_body(s, 1);
    match found {
        None => {
            json!({"data":{"node":null,"rateLimit":rl},"errors":[not_found(json!(["node"]), format!("Could not resolve to a node with the global id of '{id}'."))]})
        }
        Some((i, item)) => {
            let page = PageArgs::for_project_items(query, vars["after"].as_str());
            let items = project_items_json(s, i, item, status_field, priority_field, page);
            json!({"data":{"node":{"__typename":"Issue","projectItems":items},"rateLimit":rl}})
        }
    }
}

fn refresh(s: &State, query: &str, vars: &Value, wants_deps: bool) -> Value {
    let ids: Vec<&str> = vars["ids"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if ids.len() > 100 {
        return json!({"data":null,"errors":[{"message":format!("You may not provide more than 100 node ids; you provided {}.", ids.len()),"type":"ARGUMENT_LIMIT","path":["nodes"],"locations":[{"line":1,"column":3}]}]});
    }
    let (status_field, priority_field) = field_names(vars);
    let mut nodes = Vec::new();
    let mut errors = Vec::new();
    for (idx, id) in ids.iter().enumerate() {
        match issue_by_node_id(s, id) {
            None => {
                nodes.push(Value::Null);
                errors.push(not_found(
                    json!(["nodes", idx]),
                    format!("Could not resolve to a node with the global id of '{id}'."),
                ));
            }
            Some((i, item)) => {
                let mut m = issue_json(s, i);
                let page = PageArgs::for_project_items(query, None);
                m.insert(
                    "projectItems".into(),
                    project_items_json(s, i, item, status_field, priority_field, page),
                );
                if wants_deps {
                    m.insert(
                        "blockedBy".into(),
                        blocked_by_json(s, i, true, status_field),
                    );
                }
                nodes.push(Value::Object(m));
            }
        }
    }
    let mut out = json!({"data":{"nodes":nodes,"rateLimit":rate_limit_body(s, 1)}});
    if !errors.is_empty() {
        out["errors"] = Value::Array(errors);
    }
    out
}
