//! The GitHub Projects (v2) tracker (spec §11): project resolution with a cache, paginated item
//! reads, refresh by node id, normalization, blocker degradation and rate-limit accounting.
//!
//! Filtering contract: the tracker drops non-Issue items (drafts, pull requests, redacted),
//! archived items and items without a Status, applies the `tracker.repos` scope and the Status
//! filter, and drops CLOSED issues from candidates (closed is always terminal). Label rules
//! (`required_labels`/`excluded_labels`) and the blocker rule stay with the orchestrator's
//! eligibility check (Symphony §11.1: "the orchestrator applies required_labels … after
//! normalization"), so a refresh can observe a label being removed from a running issue.

pub(crate) mod check;
pub mod client;
pub(crate) mod config;
pub(crate) mod normalize;
pub(crate) mod project;
pub mod queries;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};

use serde::Deserialize;

use self::client::{GraphqlClient, Reply};
use self::config::OwnerType;
use self::normalize::{DropReason, IssueRow, ItemRow, ItemsOnPage, ItemsPage, OptionValue};
use self::project::{PriorityField, ProjectInfo};
use self::queries::Query;
use crate::model::{contains_name, Issue};
use crate::tracker::TrackerConfig;
use crate::tracker::{BoardRead, Tracker, TrackerBudget, TrackerError, TrackerErrorKind};

/// This tracker's `tracker.kind`.
pub(crate) const TRACKER_KIND: &str = "github_projects";

/// Ids per `nodes(ids:)` request (GitHub rejects more than 100).
pub(crate) const MAX_IDS_PER_REQUEST: usize = 100;

/// Log targets of the HTTP stack. At TRACE, `ureq_proto` hex-dumps the raw request bytes,
/// including the `Authorization: Bearer` header; the process logger MUST cap these targets at
/// DEBUG (see [`wire_log_allowed`]). DEBUG and above were checked to carry no token.
pub(crate) const WIRE_LOG_TARGETS: &[&str] = &["ureq_proto", "ureq", "rustls"];

/// False for log records that could carry the token (TRACE from [`WIRE_LOG_TARGETS`]). Use it in
/// the logger's filter, e.g. `env_logger::Builder::filter_module("ureq_proto", LevelFilter::Debug)`
/// for each target.
pub fn wire_log_allowed(target: &str, level: log::Level) -> bool {
    level != log::Level::Trace
        || !WIRE_LOG_TARGETS
            .iter()
            .any(|t| target == *t || target.starts_with(&format!("{t}::")))
}

/// Pages of one issue's `projectItems` a refresh may request: past it the refresh fails instead
/// of paging on. (A board read may request the pages `tracker.max_items` needs, see `ReadCaps`.)
pub(crate) const MAX_PAGES: usize = 200;

/// Bytes of issue text (titles, bodies, labels, URLs) one board read may keep. With the items
/// cap this bounds the memory of a read whatever the server sends (each response is itself
/// capped at [`client::MAX_RESPONSE_BYTES`] and dropped once normalized).
pub(crate) const MAX_KEPT_BYTES: usize = 48 * 1024 * 1024;

/// The stable class of a board read stopped by a cap (the pages `tracker.max_items` needs,
/// `tracker.max_items`, [`MAX_KEPT_BYTES`]).
pub const BOARD_TOO_LARGE: &str = "github_board_too_large";

/// Counts of project items that did not become issues, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DroppedCounts {
    /// Draft issues.
    pub drafts: usize,
    /// Pull requests.
    pub pull_requests: usize,
    /// Redacted items.
    pub redacted: usize,
    /// Archived items.
    pub archived: usize,
    /// Malformed issue records (logged).
    pub malformed: usize,
    /// Issues without a Status value.
    pub no_status: usize,
}

impl DroppedCounts {
    fn count(&mut self, r: DropReason) {
        match r {
            DropReason::Draft => self.drafts += 1,
            DropReason::PullRequest => self.pull_requests += 1,
            DropReason::Redacted => self.redacted += 1,
            DropReason::Archived => self.archived += 1,
            DropReason::Malformed => self.malformed += 1,
            DropReason::NoStatus => self.no_status += 1,
        }
    }
}

/// Every Issue item on the board with a Status, normalized, in board order (no repo/status
/// filter), plus what was dropped. Used by `baton check` and by the filtered reads.
#[derive(Debug, Clone, Default)]
pub struct Board {
    /// Normalized issues in project position order.
    pub issues: Vec<Issue>,
    /// Items that did not become issues.
    pub dropped: DroppedCounts,
}

/// Requests and rate-limit points spent by one tracker operation (logged at debug level).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct OpStats {
    /// HTTP requests sent.
    pub requests: u32,
    /// Sum of `rateLimit.cost` reported.
    pub cost: i64,
}

/// The GitHub Projects v2 implementation of [`Tracker`].
pub struct GithubTracker {
    cfg: TrackerConfig,
    owner: String,
    number: u64,
    client: GraphqlClient,
    project: Mutex<Option<Arc<ProjectInfo>>>,
    /// Cleared when the server's schema lacks `Issue.blockedBy` (blockers degrade to `[]`).
    deps_supported: AtomicBool,
    /// Cleared when the server rejects `items(query:)`.
    filter_supported: AtomicBool,
    rate: Mutex<Option<TrackerBudget>>,
    /// The cut lists last logged per issue id (`event=issue_fields_truncated` once, not per poll).
    truncated_logged: Mutex<HashMap<String, Vec<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl std::fmt::Debug for GithubTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubTracker")
            .field("endpoint", &self.client.endpoint_shown())
            .field("owner", &self.owner)
            .field("number", &self.number)
            .finish_non_exhaustive()
    }
}

impl GithubTracker {
    /// Build a tracker from config. Fails with `unsupported_tracker_kind`,
    /// `missing_tracker_token` or `missing_tracker_project` before any request.
    pub fn new(cfg: &TrackerConfig) -> Result<Self, TrackerError> {
        if cfg.kind.as_deref() != Some(TRACKER_KIND) {
            return Err(TrackerError::new(
                TrackerErrorKind::UnsupportedTrackerKind,
                crate::tracker::config::kind_message(cfg.kind.as_deref()),
            ));
        }
        let config::Required {
            token,
            owner,
            number,
        } = config::required(cfg).map_err(|mut errs| errs.remove(0))?;
        if let Some(w) = config::cleartext_warning(&cfg.endpoint) {
            log::warn!("event=tracker_endpoint_cleartext {w}");
        }
        let client = GraphqlClient::new(
            &cfg.endpoint,
            token,
            Duration::from_millis(cfg.timeout_ms.max(1)),
        );
        Ok(GithubTracker {
            cfg: cfg.clone(),
            owner,
            number,
            client,
            project: Mutex::new(None),
            deps_supported: AtomicBool::new(true),
            filter_supported: AtomicBool::new(true),
            rate: Mutex::new(None),
            truncated_logged: Mutex::new(HashMap::new()),
        })
    }

    /// The cached project, resolving it first when needed (1 request).
    pub(crate) fn project(&self) -> Result<Arc<ProjectInfo>, TrackerError> {
        if let Some(p) = lock(&self.project).clone() {
            return Ok(p);
        }
        let mut stats = OpStats::default();
        let res = self.resolve_project(&mut stats);
        self.log_stats("resolve_project", &stats);
        match res {
            Ok(p) => {
                let p = Arc::new(p);
                *lock(&self.project) = Some(p.clone());
                Ok(p)
            }
            Err(e) => {
                *lock(&self.project) = None;
                Err(e)
            }
        }
    }

    /// True when blockers are read (false after an older server rejected `Issue.blockedBy`).
    pub fn dependencies_supported(&self) -> bool {
        self.deps_supported.load(Ordering::Relaxed)
    }

    fn resolve_project(&self, stats: &mut OpStats) -> Result<ProjectInfo, TrackerError> {
        let q = match self.cfg.owner_type {
            OwnerType::Organization => &queries::RESOLVE_ORG_PROJECT,
            OwnerType::User => &queries::RESOLVE_USER_PROJECT,
        };
        let vars = json!({
            "owner": self.owner,
            "number": self.number,
            "statusField": self.cfg.status_field,
            "priorityField": self.cfg.priority_field.clone().unwrap_or_default(),
            "withPriority": self.cfg.priority_field.is_some(),
        });
        let reply = self.request(q, vars, stats)?;
        let p = project::parse_project(
            &reply,
            &self.owner,
            self.cfg.owner_type,
            self.number,
            &self.cfg.status_field,
            self.cfg.priority_field.as_deref(),
            self.client.token(),
        )?;
        if let PriorityField::Unusable(why) = &p.priority {
            log::warn!("tracker_priority_field_unusable reason={why:?}");
        }
        log::debug!(
            "tracker_project_resolved project_id={} status_options={}",
            p.id,
            p.status.options.len()
        );
        Ok(p)
    }

    fn request(&self, q: &Query, vars: Value, stats: &mut OpStats) -> Result<Reply, TrackerError> {
        stats.requests += 1;
        let reply = self.client.post(q.name, q.text, vars)?;
        if let Some(rl) = reply.rate_limit() {
            self.note_budget(rl, stats);
        }
        Ok(reply)
    }

    /// Keep the budget a reply reported and count its cost (for the log and the pacing).
    fn note_budget(&self, rl: TrackerBudget, stats: &mut OpStats) {
        let cost = rl.last_cost.unwrap_or(0);
        stats.cost = stats.cost.saturating_add(cost);
        crate::tracker::spend_points(cost);
        *lock(&self.rate) = Some(rl);
    }

    fn log_stats(&self, op: &str, stats: &OpStats) {
        let rl = lock(&self.rate).clone();
        let remaining = rl
            .as_ref()
            .and_then(|r| r.remaining)
            .map_or("unknown".to_string(), |r| r.to_string());
        let reset = rl
            .and_then(|r| r.reset_at)
            .unwrap_or_else(|| "unknown".into());
        log::debug!(
            "tracker_requests op={op} requests={} cost={} remaining={remaining} reset_at={reset}",
            stats.requests,
            stats.cost
        );
    }

    /// Page through every non-archived item and normalize the Issues (no repo/status filter).
    /// With `filter_states` and `tracker.server_side_filter`, the pages are narrowed server-side.
    pub fn fetch_board(&self, filter_states: Option<&[String]>) -> Result<Board, TrackerError> {
        self.read_filtered(filter_states, &|_| true)
    }

    /// [`GithubTracker::fetch_board`] keeping only the issues `keep` accepts (logged as one op).
    fn read_filtered(
        &self,
        filter_states: Option<&[String]>,
        keep: &dyn Fn(&Issue) -> bool,
    ) -> Result<Board, TrackerError> {
        let mut stats = OpStats::default();
        let res = self.fetch_board_inner(filter_states, keep, &mut stats);
        self.log_stats("fetch_board", &stats);
        res
    }

    /// The paging loop. Each page is normalized as it arrives and then dropped: only the issues
    /// `keep` accepts and, for blocker resolution, the Status of every issue seen are retained.
    fn fetch_board_inner(
        &self,
        filter_states: Option<&[String]>,
        keep: &dyn Fn(&Issue) -> bool,
        stats: &mut OpStats,
    ) -> Result<Board, TrackerError> {
        let project = self.project()?;
        let mut acc = BoardAcc::default();
        let mut cursor: Option<String> = None;
        let mut seen_cursors: HashSet<String> = HashSet::new();
        let mut pages = 0usize;
        let mut caps = ReadCaps::new(&self.cfg);
        loop {
            let filter = match filter_states {
                Some(states)
                    if self.cfg.server_side_filter
                        && self.filter_supported.load(Ordering::Relaxed) =>
                {
                    Some(server_filter(&self.cfg.status_field, states))
                }
                _ => None,
            };
            let reply =
                self.request_items(&project, filter.as_deref(), cursor.as_deref(), stats)?;
            match self.degrade_on_capability_error(&reply.errors, filter.is_some()) {
                Degraded::No => {}
                Degraded::Dependencies => continue,
                Degraded::Filter => {
                    acc = BoardAcc::default();
                    cursor = None;
                    seen_cursors.clear();
                    pages = 0;
                    caps = ReadCaps::new(&self.cfg);
                    continue;
                }
            }
            let (rows, has_next, end) = self.page_rows(reply)?;
            pages += 1;
            let next = next_cursor(has_next, end, pages)?;
            caps.add_items(rows.len())?;
            for row in &rows {
                let kept = self.add_item(&project, row.as_ref().ok(), keep, &mut acc);
                caps.add_kept(kept)?;
            }
            drop(rows);
            let Some(end) = next else { break };
            if !seen_cursors.insert(end.clone()) {
                return Err(error(
                    TrackerErrorKind::Payload,
                    format!("pagination does not advance (page {pages}, repeated cursor)"),
                ));
            }
            caps.next_page(pages)?;
            cursor = Some(end);
        }
        Ok(self.finish_board(acc))
    }

    /// The error for a project id that no longer resolves; drops the cache so the next
    /// validation re-resolves it.
    fn project_gone(&self) -> TrackerError {
        self.reset_cache();
        TrackerError::new(
            TrackerErrorKind::MissingTrackerProject,
            format!(
                "project #{} of {:?} no longer resolves (deleted, or no longer visible to the token)",
                self.number, self.owner
            ),
        )
    }

    /// A page's rows (each item read on its own: a malformed one becomes `Err(())`, logged,
    /// counted and dropped), `hasNextPage` and `endCursor`.
    fn page_rows(&self, reply: Reply<ItemsPage>) -> Result<PageRows, TrackerError> {
        // Per-item execution errors (e.g. FORBIDDEN content) leave that item's content null;
        // the item is then dropped as redacted. Anything else fails the read.
        reply.check_errors(self.client.token(), |e| {
            e.kind.as_deref() != Some("NOT_FOUND")
                && e.path.len() > 3
                && e.path.get(2).and_then(Value::as_str) == Some("nodes")
        })?;
        let Some(node) = reply.data.node else {
            return Err(self.project_gone());
        };
        let info = node.items.page_info;
        let rows = node.items.nodes.iter().map(|raw| {
            serde_json::from_str::<ItemRow>(raw.get()).map_err(|e| {
                #[derive(Deserialize)]
                struct Id {
                    id: Option<String>,
                }
                let id = serde_json::from_str::<Id>(raw.get())
                    .ok()
                    .and_then(|i| i.id);
                log::warn!(
                    "tracker_item_skipped item_id={} reason={:?}",
                    id.as_deref()
                        .map_or(String::new(), |i| crate::text::single_line(i, 80)),
                    crate::text::single_line(&e.to_string(), 200)
                );
            })
        });
        Ok((rows.collect(), info.has_next_page, info.end_cursor))
    }

    /// Request one page of project items (with blockers unless the server lacks them).
    fn request_items(
        &self,
        project: &ProjectInfo,
        filter: Option<&str>,
        cursor: Option<&str>,
        stats: &mut OpStats,
    ) -> Result<Reply<ItemsPage>, TrackerError> {
        let deps = self.deps_supported.load(Ordering::Relaxed);
        let q = match (filter, deps) {
            (Some(_), true) => &queries::PROJECT_ITEMS_FILTERED,
            (_, true) => &queries::PROJECT_ITEMS,
            (_, false) => &queries::PROJECT_ITEMS_NO_DEPS,
        };
        let mut vars = json!({
            "projectId": project.id,
            "first": self.cfg.page_size.clamp(1, 100),
            "after": cursor,
        });
        self.field_vars(project, &mut vars);
        if let Some(f) = filter {
            vars["query"] = json!(f);
        }
        stats.requests += 1;
        let reply = self.client.post::<ItemsPage>(q.name, q.text, vars)?;
        if let Some(rl) = client::budget(reply.data.rate_limit.as_ref(), &reply.meta) {
            self.note_budget(rl, stats);
        }
        Ok(reply)
    }

    /// Add the status/priority field variables every item query takes.
    fn field_vars(&self, project: &ProjectInfo, vars: &mut Value) {
        vars["statusField"] = json!(self.cfg.status_field);
        vars["priorityField"] = json!(self.cfg.priority_field.clone().unwrap_or_default());
        vars["withPriority"] = json!(matches!(project.priority, PriorityField::Resolved(_)));
    }

    /// Turn off what the server's schema rejects (blockers, then the server-side filter), so the
    /// caller retries without it.
    fn degrade_on_capability_error(
        &self,
        errors: &[client::GraphqlError],
        filtered: bool,
    ) -> Degraded {
        let Some(e) = errors.iter().find(|e| e.is_schema_capability_error()) else {
            return Degraded::No;
        };
        let deps = self.deps_supported.load(Ordering::Relaxed);
        if deps && is_about_blockers(e) {
            self.disable_dependencies();
            return Degraded::Dependencies;
        }
        if filtered && !is_about_blockers(e) {
            log::warn!("tracker_server_side_filter_unavailable reason=\"the server rejects items(query:)\" effect=\"filtering client-side only\"");
            self.filter_supported.store(false, Ordering::Relaxed);
            return Degraded::Filter;
        }
        Degraded::No
    }

    fn disable_dependencies(&self) {
        log::warn!("tracker_dependencies_unavailable reason=\"the server's schema has no Issue.blockedBy\" effect=\"blocked_by is [] from now on\"");
        self.deps_supported.store(false, Ordering::Relaxed);
    }

    /// Normalize one item of a page into `acc` (kept issue, dropped count, Status by id).
    fn add_item(
        &self,
        project: &ProjectInfo,
        item: Option<&ItemRow>,
        keep: &dyn Fn(&Issue) -> bool,
        acc: &mut BoardAcc,
    ) -> usize {
        let deps = self.deps_supported.load(Ordering::Relaxed);
        let Some(item) = item else {
            acc.board.dropped.count(DropReason::Malformed);
            return 0;
        };
        match self.normalize_item(project, item) {
            Ok((content, mut issue)) => {
                if deps {
                    acc.status_by_id
                        .insert(issue.id.clone(), issue.state.clone());
                }
                if !keep(&issue) {
                    return 0;
                }
                self.note_truncated(&issue);
                if deps {
                    // Blockers first resolve to OPEN/CLOSED; `finish_board` swaps in the Status
                    // of those seen anywhere on the board.
                    issue.blocked_by = normalize::normalize_blockers(
                        content.blocker_nodes(),
                        &self.cfg.terminal_states,
                        |_| None,
                    );
                }
                let bytes = kept_bytes(&issue);
                acc.board.issues.push(issue);
                bytes
            }
            Err(reason) => {
                acc.board.dropped.count(reason);
                0
            }
        }
    }

    /// Resolve blockers against the Status of every Issue on this board.
    /// Why not ask GitHub: a nested `blockedBy { projectItems { fieldValueByName } }` per item
    /// multiplies the page cost by ~10 (100 items x 20 blockers x 10 project items), while the
    /// poll already reads every non-archived item of the board. Blockers off the board (or
    /// archived) fall back to OPEN/CLOSED as the spec allows.
    fn finish_board(&self, acc: BoardAcc) -> Board {
        let BoardAcc {
            mut board,
            status_by_id,
        } = acc;
        let deps = self.deps_supported.load(Ordering::Relaxed);
        for issue in &mut board.issues {
            if !deps {
                issue.blocked_by.clear();
                continue;
            }
            for b in &mut issue.blocked_by {
                if let Some(status) = status_by_id.get(&b.id) {
                    let closed = b.terminal && b.state == "CLOSED";
                    b.terminal = closed || contains_name(&self.cfg.terminal_states, status);
                    b.state = status.clone();
                }
            }
        }
        board
    }

    fn normalize_item<'a>(
        &self,
        project: &ProjectInfo,
        item: &'a ItemRow,
    ) -> Result<(&'a IssueRow, Issue), DropReason> {
        let item_id = item.id.as_deref().unwrap_or("");
        if item.is_archived == Some(true) {
            return Err(DropReason::Archived);
        }
        let content = item.content.as_ref();
        let typename = content.and_then(|c| c.typename.as_deref());
        let content = match (item.kind.as_deref(), typename, content) {
            (_, Some("DraftIssue"), _) | (Some("DRAFT_ISSUE"), _, _) => {
                return Err(DropReason::Draft)
            }
            (_, Some("PullRequest"), _) | (Some("PULL_REQUEST"), _, _) => {
                return Err(DropReason::PullRequest)
            }
            (_, Some("Issue"), Some(c)) => c,
            (Some("REDACTED"), _, _) | (_, None, _) | (_, _, None) => {
                return Err(DropReason::Redacted)
            }
            (_, Some(other), _) => {
                log::warn!("tracker_item_skipped item_id={item_id} reason=\"unexpected content type {other}\"");
                return Err(DropReason::Malformed);
            }
        };
        let Some(status) = normalize::option_row(item.status.as_ref()) else {
            return Err(DropReason::NoStatus);
        };
        let priority = self.priority_of(project, normalize::option_row(item.priority.as_ref()));
        match normalize::normalize_issue(content, item_id, &status.name, priority) {
            Ok(issue) => Ok((content, issue)),
            Err(why) => {
                log::warn!(
                    "tracker_item_skipped item_id={item_id} reason={:?}",
                    crate::text::single_line(&why, 200)
                );
                Err(DropReason::Malformed)
            }
        }
    }

    /// Log `event=issue_fields_truncated` when the lists cut on `issue` change.
    fn note_truncated(&self, issue: &Issue) {
        let mut logged = lock(&self.truncated_logged);
        let before = logged.get(&issue.id).map_or(&[][..], Vec::as_slice);
        if before == issue.truncated.as_slice() {
            return;
        }
        if issue.truncated.is_empty() {
            logged.remove(&issue.id);
            return;
        }
        log::warn!(
            "event=issue_fields_truncated issue_id={} issue_identifier={} lists={} effect=\"not dispatched while a label or blocker rule depends on them\"",
            issue.id,
            issue.identifier,
            issue.truncated.join(",")
        );
        if logged.len() >= 10_000 {
            logged.clear();
        }
        logged.insert(issue.id.clone(), issue.truncated.clone());
    }

    fn priority_of(&self, project: &ProjectInfo, v: Option<OptionValue>) -> Option<u32> {
        let v = v?;
        match &project.priority {
            PriorityField::Resolved(f) => f.position(v.option_id.as_deref(), Some(&v.name)),
            _ => None,
        }
    }

    fn in_repo_scope(&self, issue: &Issue) -> bool {
        self.cfg.repos.is_empty() || contains_name(&self.cfg.repos, &issue.repository)
    }

    /// Refresh `ids` (deduplicated, blank ones dropped) 100 per request; `shallow` uses
    /// `RefreshRunning` (no blockers).
    fn refresh_ids(
        &self,
        op: &str,
        ids: &[String],
        shallow: bool,
    ) -> Result<Vec<Issue>, TrackerError> {
        let mut unique: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for id in ids {
            let id = id.trim();
            if !id.is_empty() && seen.insert(id.to_string()) {
                unique.push(id.to_string());
            }
        }
        if unique.is_empty() {
            return Ok(Vec::new());
        }
        let project = self.project()?;
        let mut stats = OpStats::default();
        let mut out = Vec::new();
        let mut res = Ok(());
        for chunk in unique.chunks(MAX_IDS_PER_REQUEST) {
            res = self.refresh_chunk(&project, chunk, shallow, &mut stats, &mut out);
            if res.is_err() {
                break;
            }
        }
        self.log_stats(op, &stats);
        res.map(|_| out)
    }

    fn refresh_chunk(
        &self,
        project: &ProjectInfo,
        ids: &[String],
        shallow: bool,
        stats: &mut OpStats,
        out: &mut Vec<Issue>,
    ) -> Result<(), TrackerError> {
        let reply = loop {
            let deps = self.deps_supported.load(Ordering::Relaxed);
            // Without blockers (shallow, or a server without them) the refresh is RefreshRunning.
            let q = if deps && !shallow {
                &queries::REFRESH_ISSUES
            } else {
                &queries::REFRESH_RUNNING
            };
            let mut vars = json!({ "ids": ids });
            self.field_vars(project, &mut vars);
            let reply = self.request(q, vars, stats)?;
            let deps_error = reply
                .errors
                .iter()
                .any(|e| e.is_schema_capability_error() && is_about_blockers(e));
            if deps && deps_error && !shallow {
                self.disable_dependencies();
                continue;
            }
            break reply;
        };
        let gone: HashSet<usize> = reply
            .errors
            .iter()
            .filter(|e| e.kind.as_deref() == Some("NOT_FOUND") && e.root_field() == Some("nodes"))
            .filter_map(|e| e.node_index())
            .collect();
        reply.check_errors(self.client.token(), |e| {
            e.kind.as_deref() == Some("NOT_FOUND")
                && e.root_field() == Some("nodes")
                && e.node_index().is_some()
        })?;
        let nodes = reply
            .data
            .get("nodes")
            .and_then(Value::as_array)
            .ok_or_else(|| unknown("refresh reply without a nodes list"))?;
        if nodes.len() != ids.len() {
            return Err(unknown(&format!(
                "refresh asked for {} ids and got {} nodes",
                ids.len(),
                nodes.len()
            )));
        }
        for (i, (id, node)) in ids.iter().zip(nodes).enumerate() {
            let found = self.refreshed_issue(project, id, node, gone.contains(&i), stats)?;
            if let Some(mut issue) = found {
                if shallow {
                    issue.blocked_by.clear();
                }
                out.push(issue);
            }
        }
        Ok(())
    }

    /// The issue's item on our project (archived ones ignored): looked up on the refresh's first
    /// page of `projectItems`, then on the following pages while GitHub reports `hasNextPage`,
    /// so an issue on more than 100 projects is still found. `Ok(None)` only when every page was
    /// read and none holds our item; a page that cannot be read is an error.
    fn item_on_our_project(
        &self,
        project: &ProjectInfo,
        id: &str,
        node: &Value,
        stats: &mut OpStats,
    ) -> Result<Option<Value>, TrackerError> {
        let unreadable = |why: String| {
            error(
                TrackerErrorKind::Payload,
                format!("refresh of issue {id}: {why}"),
            )
        };
        let mut next = match normalize::project_items_page(node, &project.id) {
            Ok(ItemsOnPage::Ours(item)) => return Ok(Some(item.clone())),
            Ok(ItemsOnPage::NotHere(next)) => next,
            Err(why) => return Err(unreadable(why)),
        };
        let mut pages = 1usize;
        while let Some(after) = next {
            pages += 1;
            if pages > MAX_PAGES {
                return Err(error(
                    TrackerErrorKind::Pagination,
                    format!("projectItems of issue {id} do not stop paging"),
                ));
            }
            let mut vars = json!({ "id": id, "after": after });
            self.field_vars(project, &mut vars);
            let reply = self.request(&queries::ISSUE_PROJECT_ITEMS, vars, stats)?;
            reply.check_errors(self.client.token(), |_| false)?;
            let issue = reply.data.get("node").unwrap_or(&Value::Null);
            if issue.get("__typename").and_then(Value::as_str) != Some("Issue") {
                return Err(unreadable(format!(
                    "projectItems page {pages} has no Issue node"
                )));
            }
            next = match normalize::project_items_page(issue, &project.id) {
                Ok(ItemsOnPage::Ours(item)) => return Ok(Some(item.clone())),
                Ok(ItemsOnPage::NotHere(n)) => n,
                Err(why) => return Err(unreadable(why)),
            };
            if next.as_deref() == Some(after.as_str()) {
                return Err(error(
                    TrackerErrorKind::Pagination,
                    format!("projectItems of issue {id} repeat cursor {after:?}"),
                ));
            }
        }
        Ok(None)
    }

    /// One node of a refresh reply as an issue. `None` (logged) only on proof that the id no
    /// longer resolves to an issue on the project in scope: GitHub reported it NOT_FOUND
    /// (`gone`), it is another type of node, every page of its project items was read without
    /// our project's item, its item has no Status, or it is outside `tracker.repos`. A reply
    /// that cannot be read (a null node without NOT_FOUND, no `__typename`, a malformed
    /// `projectItems`) is a `github_unknown_payload` error: the worker is kept.
    fn refreshed_issue(
        &self,
        project: &ProjectInfo,
        id: &str,
        node: &Value,
        gone: bool,
        stats: &mut OpStats,
    ) -> Result<Option<Issue>, TrackerError> {
        let unreadable = |why: &str| {
            error(
                TrackerErrorKind::Payload,
                format!("refresh of issue {id}: {why}"),
            )
        };
        if node.is_null() {
            if gone {
                log::debug!("tracker_issue_gone issue_id={id}");
                return Ok(None);
            }
            return Err(unreadable("null node without NOT_FOUND"));
        }
        match node.get("__typename").and_then(Value::as_str) {
            Some("Issue") => {}
            Some(other) => {
                let other = crate::text::single_line(other, 80);
                log::warn!(
                    "tracker_issue_gone issue_id={id} reason=\"id is a {other}, not an Issue\""
                );
                return Ok(None);
            }
            None => return Err(unreadable("node without __typename")),
        }
        let Some(item) = self.item_on_our_project(project, id, node, stats)? else {
            log::debug!("tracker_issue_left_project issue_id={id}");
            return Ok(None);
        };
        let Some(status_value) = item.get("status") else {
            return Err(unreadable("project item without a status member"));
        };
        let Some(status) = normalize::option_value(Some(status_value)) else {
            log::debug!("tracker_issue_left_project issue_id={id} reason=\"no Status value\"");
            return Ok(None);
        };
        let item_id = item.get("id").and_then(Value::as_str).unwrap_or("");
        let priority = self.priority_of(project, normalize::option_value(item.get("priority")));
        let mut issue = normalize::normalize_issue_value(node, item_id, &status.name, priority)
            .map_err(|why| {
                let why = crate::text::single_line(&why, 200);
                error(
                    TrackerErrorKind::Payload,
                    format!("refresh of issue {id}: {why}"),
                )
            })?;
        self.note_truncated(&issue);
        if !self.in_repo_scope(&issue) {
            log::debug!("tracker_issue_out_of_scope issue_id={id} reason=\"tracker.repos\"");
            return Ok(None);
        }
        if self.deps_supported.load(Ordering::Relaxed) {
            let blockers = node
                .get("blockedBy")
                .and_then(|b| b.get("nodes"))
                .and_then(Value::as_array);
            issue.blocked_by = normalize::normalize_blockers(
                blockers.into_iter().flatten(),
                &self.cfg.terminal_states,
                |b| {
                    normalize::item_on_project(b, &project.id)
                        .and_then(|it| normalize::option_value(it.get("status")))
                        .map(|v| v.name)
                },
            );
        }
        Ok(Some(issue))
    }
}

/// A board read in progress: the kept issues and the Status of every issue seen so far.
#[derive(Default)]
struct BoardAcc {
    board: Board,
    status_by_id: HashMap<String, String>,
}

/// The bounds of one board read: pages, items received and bytes of issue text kept.
struct ReadCaps {
    max_pages: usize,
    page_size: u64,
    max_items: u64,
    items: u64,
    kept_bytes: usize,
}

impl ReadCaps {
    /// The pages `tracker.max_items` needs at `tracker.page_size`: a server that sends short
    /// pages with fresh cursors forever costs no more requests than a full board.
    fn new(cfg: &TrackerConfig) -> Self {
        let per_page = u64::from(cfg.page_size.clamp(1, 100));
        let needed = usize::try_from(cfg.max_items.div_ceil(per_page)).unwrap_or(usize::MAX);
        ReadCaps {
            max_pages: needed.max(1),
            page_size: per_page,
            max_items: cfg.max_items,
            items: 0,
            kept_bytes: 0,
        }
    }

    /// Count a page's items; past `tracker.max_items` the read fails.
    fn add_items(&mut self, n: usize) -> Result<(), TrackerError> {
        self.items = self.items.saturating_add(n as u64);
        if self.items > self.max_items {
            return Err(too_large(format!(
                "the board has more than tracker.max_items = {} items; raise tracker.max_items or archive items",
                self.max_items
            )));
        }
        Ok(())
    }

    /// Count the bytes of a kept issue; past [`MAX_KEPT_BYTES`] the read fails.
    fn add_kept(&mut self, bytes: usize) -> Result<(), TrackerError> {
        self.kept_bytes = self.kept_bytes.saturating_add(bytes);
        if self.kept_bytes > MAX_KEPT_BYTES {
            return Err(too_large(format!(
                "the board's issues hold more than {} MiB of text",
                MAX_KEPT_BYTES / (1024 * 1024)
            )));
        }
        Ok(())
    }

    /// Allow the page after page `done`, unless that is past the page cap.
    fn next_page(&self, done: usize) -> Result<(), TrackerError> {
        if done >= self.max_pages {
            return Err(too_large(format!(
                "the board read reached {done} pages, all that tracker.max_items = {} needs at {} items a page, and has more; raise tracker.max_items or archive items",
                self.max_items, self.page_size
            )));
        }
        Ok(())
    }
}

/// A board read stopped by a cap (class [`BOARD_TOO_LARGE`]).
fn too_large(message: String) -> TrackerError {
    TrackerError::with_class(TrackerErrorKind::Pagination, BOARD_TOO_LARGE, message)
}

/// The bytes of issue text `issue` holds (what a board read keeps per issue).
fn kept_bytes(issue: &Issue) -> usize {
    let labels: usize = issue.labels.iter().map(String::len).sum();
    let blockers: usize = issue
        .blocked_by
        .iter()
        .map(|b| b.id.len() + b.identifier.len() + b.state.len())
        .sum();
    [
        issue.id.len(),
        issue.item_id.len(),
        issue.identifier.len(),
        issue.repository.len(),
        issue.title.len(),
        issue.description.as_ref().map_or(0, String::len),
        issue.state.len(),
        issue.url.as_ref().map_or(0, String::len),
        labels,
        blockers,
    ]
    .iter()
    .fold(0usize, |a, b| a.saturating_add(*b))
}

/// What [`GithubTracker::degrade_on_capability_error`] turned off.
enum Degraded {
    /// Nothing: the reply is to be read as is.
    No,
    /// Blockers (retry the page without them).
    Dependencies,
    /// The server-side filter (restart paging without it).
    Filter,
}

/// True for a schema error about `Issue.blockedBy`.
fn is_about_blockers(e: &client::GraphqlError) -> bool {
    e.field_name.as_deref() == Some("blockedBy") || e.message.contains("blockedBy")
}

/// One page's items (`Err(())`: malformed, already logged), `hasNextPage` and `endCursor`.
type PageRows = (Vec<Result<ItemRow, ()>>, Option<bool>, Option<String>);

/// The cursor of the next page (`None` on the last one) from a page's `pageInfo`.
fn next_cursor(
    has_next: Option<bool>,
    end: Option<String>,
    page: usize,
) -> Result<Option<String>, TrackerError> {
    match has_next.ok_or_else(|| unknown("pageInfo without hasNextPage"))? {
        false => Ok(None),
        true => end.filter(|c| !c.is_empty()).map(Some).ok_or_else(|| {
            error(
                TrackerErrorKind::Pagination,
                format!("page {page} reports hasNextPage without an endCursor"),
            )
        }),
    }
}

fn unknown(what: &str) -> TrackerError {
    error(TrackerErrorKind::Payload, what)
}

/// The GitHub tracker's stable class name for an error kind (logs, `baton check`, the API).
pub(crate) fn class(kind: TrackerErrorKind) -> &'static str {
    match kind {
        TrackerErrorKind::Transport => "github_api_request",
        TrackerErrorKind::Status => "github_api_status",
        TrackerErrorKind::Auth => "github_auth",
        TrackerErrorKind::RateLimited => "github_rate_limited",
        TrackerErrorKind::Query => "github_graphql_errors",
        TrackerErrorKind::Payload => "github_unknown_payload",
        TrackerErrorKind::Pagination => "github_missing_end_cursor",
        TrackerErrorKind::UnsupportedTrackerKind
        | TrackerErrorKind::MissingTrackerToken
        | TrackerErrorKind::MissingTrackerProject => kind.as_str(),
    }
}

/// An error of this tracker, named by [`class`].
pub(crate) fn error(kind: TrackerErrorKind, message: impl Into<String>) -> TrackerError {
    TrackerError::with_class(kind, class(kind), message)
}

/// The `items(query:)` filter for `states` in GitHub's project filter syntax (best effort; the
/// grammar is undocumented, so results are always re-filtered client-side).
fn server_filter(status_field: &str, states: &[String]) -> String {
    let field: String = status_field
        .trim()
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join("-");
    let values: Vec<String> = states
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| format!("\"{}\"", s.replace('"', "")))
        .collect();
    format!("is:issue {field}:{}", values.join(","))
}

impl Tracker for GithubTracker {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        Ok(self.read_board(&[], &[])?.candidates)
    }

    /// Issues whose Status is one of `states`. When `states` names a configured terminal state,
    /// CLOSED issues are included whatever their Status (closed is always terminal).
    fn fetch_issues_by_states(&self, states: &[String]) -> Result<Vec<Issue>, TrackerError> {
        if states.iter().all(|s| s.trim().is_empty()) {
            return Ok(Vec::new());
        }
        let wants_terminal = states
            .iter()
            .any(|s| contains_name(&self.cfg.terminal_states, s));
        // Closed issues in other Statuses are needed too, so never narrow server-side then.
        let board = self.fetch_board(if wants_terminal { None } else { Some(states) })?;
        Ok(board
            .issues
            .into_iter()
            .filter(|i| {
                (contains_name(states, &i.state) || (wants_terminal && i.closed))
                    && self.in_repo_scope(i)
            })
            .collect())
    }

    fn fetch_issue_states_by_ids(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        self.refresh_ids("fetch_issue_states_by_ids", ids, false)
    }

    /// One read of the board: unfiltered when `also_states` is given (closed issues in any Status
    /// are needed then), else narrowed to the active states server-side when configured. Only
    /// the candidates and the issues asked for are kept while the pages are normalized.
    fn read_board(
        &self,
        keep_ids: &[String],
        also_states: &[String],
    ) -> Result<BoardRead, TrackerError> {
        let active = &self.cfg.active_states;
        let also: Vec<String> = also_states
            .iter()
            .filter(|s| !s.trim().is_empty())
            .cloned()
            .collect();
        let also_terminal = also
            .iter()
            .any(|s| contains_name(&self.cfg.terminal_states, s));
        let keep_ids: HashSet<&str> = keep_ids.iter().map(String::as_str).collect();
        let is_candidate = |i: &Issue| {
            contains_name(active, &i.state)
                && !contains_name(&self.cfg.terminal_states, &i.state)
                && !i.closed
        };
        let keep = |i: &Issue| {
            self.in_repo_scope(i)
                && (is_candidate(i)
                    || keep_ids.contains(i.id.as_str())
                    || contains_name(&also, &i.state)
                    || (also_terminal && i.closed))
        };
        let filter = also.is_empty().then_some(active.as_slice());
        let board = self.read_filtered(filter, &keep)?;
        let (candidates, others) = board.issues.into_iter().partition(|i| is_candidate(i));
        Ok(BoardRead { candidates, others })
    }

    fn refresh_running(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        self.refresh_ids("refresh_running", ids, true)
    }

    fn validate(&self) -> Result<(), TrackerError> {
        self.project().map(|_| ())
    }

    fn reset_cache(&self) {
        *lock(&self.project) = None;
        self.deps_supported.store(true, Ordering::Relaxed);
        self.filter_supported.store(true, Ordering::Relaxed);
    }

    fn rate_limit(&self) -> Option<TrackerBudget> {
        lock(&self.rate).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_filter_quotes_states() {
        assert_eq!(
            server_filter("Status", &["Todo".into(), "In Progress".into()]),
            "is:issue status:\"Todo\",\"In Progress\""
        );
        assert_eq!(
            server_filter("Work State", &["a\"b".into()]),
            "is:issue work-state:\"ab\""
        );
    }
}
