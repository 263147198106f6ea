//! The GitHub Projects (v2) tracker (spec §11): project resolution with a cache, paginated item
//! reads, refresh by node id, normalization, blocker degradation and rate-limit accounting.
//!
//! Filtering contract: the tracker drops non-Issue items (drafts, pull requests, redacted),
//! archived items and items without a Status, applies the `tracker.repos` scope and the Status
//! filter, and drops CLOSED issues from candidates (closed is always terminal). Label rules
//! (`required_labels`/`excluded_labels`) and the blocker rule stay with the orchestrator's
//! eligibility check (Symphony §11.1: "the orchestrator applies required_labels … after
//! normalization"), so a refresh can observe a label being removed from a running issue.

pub mod client;
pub(crate) mod config;
pub(crate) mod normalize;
pub mod queries;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use self::client::{GraphqlClient, GraphqlError, Reply};
use self::config::OwnerType;
use self::normalize::{ItemRow, ItemsOnPage, NodeRow, PriorityField, ProjectInfo};
use self::queries::Query;
use crate::model::{contains_name, Issue};
use crate::text::single_line;
use crate::tracker::TrackerErrorKind;
use crate::tracker::{BoardRead, Tracker, TrackerBudget, TrackerConfig, TrackerError};

/// This tracker's `tracker.kind`.
pub(crate) const TRACKER_KIND: &str = "github_projects";

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
/// of paging on. (A board read may request the pages `tracker.max_items` needs, see `next_page`.)
pub(crate) const MAX_PAGES: usize = 200;

/// Bytes of issue text (titles, bodies, labels, URLs) one board read may keep. With the items
/// cap this bounds the memory of a read whatever the server sends (each response is itself
/// capped at [`client::MAX_RESPONSE_BYTES`] and dropped once normalized).
pub(crate) const MAX_KEPT_BYTES: usize = 48 * 1024 * 1024;

/// The stable class of a board read stopped by a cap (the pages `tracker.max_items` needs,
/// `tracker.max_items`, [`MAX_KEPT_BYTES`]).
pub const BOARD_TOO_LARGE: &str = "github_board_too_large";

/// Counts of project items that did not become issues, by reason (`baton check` shows them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DroppedCounts {
    pub drafts: usize,
    pub pull_requests: usize,
    pub redacted: usize,
    pub archived: usize,
    /// Malformed issue records (logged).
    pub malformed: usize,
    pub no_status: usize,
}

/// Why a project item did not become an issue: the count of [`DroppedCounts`] it adds to.
type DropReason = fn(&mut DroppedCounts) -> &mut usize;

/// Every Issue item on the board with a Status, normalized, in board order (no repo/status
/// filter), plus what was dropped. Used by `baton check` and by the filtered reads.
#[derive(Debug, Clone, Default)]
pub struct Board {
    pub issues: Vec<Issue>,
    pub dropped: DroppedCounts,
}

/// Requests and rate-limit points (`rateLimit.cost`) spent by one operation, logged at debug by
/// [`GithubTracker::with_stats`]. Every request takes it, so none can go uncounted.
#[derive(Debug, Default)]
struct OpStats {
    requests: u32,
    cost: i64,
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
            let why = crate::tracker::config::kind_message(cfg.kind.as_deref());
            let kind = TrackerErrorKind::UnsupportedTrackerKind;
            return Err(TrackerError::new(kind, why));
        }
        let (token, owner, number) = config::required(cfg).map_err(|mut errs| errs.remove(0))?;
        if let Some(w) = config::cleartext_warning(&cfg.endpoint) {
            log::warn!("event=tracker_endpoint_cleartext {w}");
        }
        let timeout = Duration::from_millis(cfg.timeout_ms.max(1));
        Ok(GithubTracker {
            cfg: cfg.clone(),
            owner,
            number,
            client: GraphqlClient::new(&cfg.endpoint, token, timeout),
            project: Mutex::new(None),
            deps_supported: AtomicBool::new(true),
            filter_supported: AtomicBool::new(true),
            rate: Mutex::new(None),
            truncated_logged: Mutex::new(HashMap::new()),
        })
    }

    /// The cached project, resolving it first when needed (1 request; a failure is not cached).
    pub(crate) fn project(&self) -> Result<Arc<ProjectInfo>, TrackerError> {
        if let Some(p) = lock(&self.project).clone() {
            return Ok(p);
        }
        let res = self.with_stats("resolve_project", |s| self.resolve_project(s).map(Arc::new));
        *lock(&self.project) = res.as_ref().ok().cloned();
        res
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
        let vars = json!({ "owner": self.owner, "number": self.number });
        let reply = self.request(q, vars, None, stats)?;
        let token = self.client.token();
        let p = normalize::parse_project(&reply, &self.cfg, &self.owner, self.number, token)?;
        if let PriorityField::Unusable(why) = &p.priority {
            log::warn!("tracker_priority_field_unusable reason={why:?}");
        }
        let (id, options) = (&p.id, p.status.options.len());
        log::debug!("tracker_project_resolved project_id={id} status_options={options}");
        Ok(p)
    }

    /// POST `q` with `vars` and the field variables every query takes (`withPriority`: the
    /// priority field is configured while resolving `None`, resolved on `project` after).
    fn request(
        &self,
        q: &Query,
        mut vars: Value,
        project: Option<&ProjectInfo>,
        stats: &mut OpStats,
    ) -> Result<Reply, TrackerError> {
        let priority = self.cfg.priority_field.as_deref();
        vars["statusField"] = json!(self.cfg.status_field);
        vars["priorityField"] = json!(priority.unwrap_or_default());
        vars["withPriority"] = json!(project.map_or(priority.is_some(), |p| {
            matches!(p.priority, PriorityField::Resolved(_))
        }));
        stats.requests += 1;
        let reply = self.client.post(q, vars)?;
        if let Some(rl) = reply.rate_limit() {
            let cost = rl.last_cost.unwrap_or(0);
            stats.cost = stats.cost.saturating_add(cost);
            crate::tracker::spend_points(cost);
            *lock(&self.rate) = Some(rl);
        }
        Ok(reply)
    }

    /// Run one operation `op` and log what it spent (an operation nested in it counts apart).
    fn with_stats<T>(&self, op: &str, f: impl FnOnce(&mut OpStats) -> T) -> T {
        let mut stats = OpStats::default();
        let res = f(&mut stats);
        let OpStats { requests, cost } = stats;
        let rl = lock(&self.rate).clone().unwrap_or_default();
        let remaining: String = rl.remaining.map_or("unknown".into(), |r| r.to_string());
        let reset_at = rl.reset_at.as_deref().unwrap_or("unknown");
        log::debug!("tracker_requests op={op} requests={requests} cost={cost} remaining={remaining} reset_at={reset_at}");
        res
    }

    /// Page through every non-archived item and normalize the Issues (no repo/status filter).
    /// With `filter_states` and `tracker.server_side_filter`, the pages are narrowed server-side.
    pub fn fetch_board(&self, filter_states: Option<&[String]>) -> Result<Board, TrackerError> {
        self.with_stats("fetch_board", |s| {
            self.read_pages(filter_states, &|_| true, s)
        })
    }

    /// The paging loop. Each page is normalized as it arrives and then dropped: only the issues
    /// `keep` accepts and, for blocker resolution, the Status of every issue seen are retained.
    fn read_pages(
        &self,
        filter_states: Option<&[String]>,
        keep: &dyn Fn(&Issue) -> bool,
        stats: &mut OpStats,
    ) -> Result<Board, TrackerError> {
        let project = self.project()?;
        let filtered = self.cfg.server_side_filter && self.filter_supported.load(Ordering::Relaxed);
        let filter = filter_states
            .filter(|_| filtered)
            .map(|states| server_filter(&self.cfg.status_field, states));
        let mut acc = BoardAcc::default();
        let (mut cursor, mut seen_cursors, mut pages) = (None::<String>, HashSet::new(), 0usize);
        loop {
            let deps = self.deps_supported.load(Ordering::Relaxed);
            let q = match (&filter, deps) {
                (Some(_), true) => &queries::PROJECT_ITEMS_FILTERED,
                (_, true) => &queries::PROJECT_ITEMS,
                (_, false) => &queries::PROJECT_ITEMS_NO_DEPS,
            };
            let mut vars = json!({
                "projectId": project.id,
                "first": self.cfg.page_size.clamp(1, 100),
                "after": cursor,
            });
            if let Some(f) = &filter {
                vars["query"] = json!(f);
            }
            let reply = self.request(q, vars, Some(&project), stats)?;
            if let Some(e) = reply.errors.iter().find(|e| e.is_schema_capability_error()) {
                if deps && is_about_blockers(e) {
                    self.disable_dependencies();
                    continue; // the same page without blockers
                }
                if filter.is_some() && !is_about_blockers(e) {
                    log::warn!("tracker_server_side_filter_unavailable reason=\"the server rejects items(query:)\" effect=\"filtering client-side only\"");
                    self.filter_supported.store(false, Ordering::Relaxed);
                    return self.read_pages(filter_states, keep, stats);
                }
            }
            // Per-item execution errors (e.g. FORBIDDEN content) leave that item's content null;
            // the item is then dropped as redacted. Anything else fails the read.
            reply.check_errors(self.client.token(), |e| {
                e.kind.as_deref() != Some("NOT_FOUND")
                    && e.path.len() > 3
                    && e.path.get(2).and_then(Value::as_str) == Some("nodes")
            })?;
            let node = reply.data.node.ok_or_else(|| self.project_gone())?;
            let items = node
                .items
                .ok_or_else(|| unknown("the project node has no items"))?;
            pages += 1;
            let info = &items.page_info;
            let next = info.next().map_err(|e| match info.has_next_page {
                None => unknown(e),
                _ => error(TrackerErrorKind::Pagination, format!("page {pages} {e}")),
            })?;
            let (max, got) = (self.cfg.max_items, items.nodes.len() as u64);
            acc.items = acc.items.saturating_add(got);
            if acc.items > max {
                let why = format!("the board has more than tracker.max_items = {max} items; raise tracker.max_items or archive items");
                return Err(too_large(why));
            }
            for raw in &items.nodes {
                self.add_item(&project, raw, keep, &mut acc)?;
            }
            let Some(end) = next else { break };
            if !seen_cursors.insert(end.clone()) {
                let why = format!("pagination does not advance (page {pages}, repeated cursor)");
                return Err(unknown(why));
            }
            next_page(&self.cfg, pages)?;
            cursor = Some(end);
        }
        Ok(self.finish_board(acc))
    }

    /// The error for a project id that no longer resolves; drops the cache so the next
    /// validation re-resolves it.
    fn project_gone(&self) -> TrackerError {
        self.reset_cache();
        let (number, owner) = (self.number, &self.owner);
        let why = format!("project #{number} of {owner:?} no longer resolves (deleted, or no longer visible to the token)");
        TrackerError::new(TrackerErrorKind::MissingTrackerProject, why)
    }

    fn disable_dependencies(&self) {
        log::warn!("tracker_dependencies_unavailable reason=\"the server's schema has no Issue.blockedBy\" effect=\"blocked_by is [] from now on\"");
        self.deps_supported.store(false, Ordering::Relaxed);
    }

    /// Normalize one item of a page into `acc` (kept issue, dropped count, Status by id); fails
    /// past [`MAX_KEPT_BYTES`].
    fn add_item(
        &self,
        project: &ProjectInfo,
        raw: &RawValue,
        keep: &dyn Fn(&Issue) -> bool,
        acc: &mut BoardAcc,
    ) -> Result<(), TrackerError> {
        let deps = self.deps_supported.load(Ordering::Relaxed);
        let count = |reason: DropReason| *reason(&mut acc.board.dropped) += 1;
        let Ok((content, mut issue)) = self.normalize_item(project, raw).map_err(count) else {
            return Ok(());
        };
        if deps {
            acc.status_by_id
                .insert(issue.id.clone(), issue.state.clone());
        }
        if !keep(&issue) {
            return Ok(());
        }
        self.note_truncated(&issue);
        if deps {
            // Blockers first resolve to OPEN/CLOSED; `finish_board` swaps in the Status of
            // those seen anywhere on the board.
            let terminal = &self.cfg.terminal_states;
            issue.blocked_by = normalize::normalize_blockers(&content, terminal, None);
        }
        acc.kept_bytes = acc.kept_bytes.saturating_add(kept_bytes(&issue));
        if acc.kept_bytes > MAX_KEPT_BYTES {
            let mib = MAX_KEPT_BYTES / (1024 * 1024);
            let why = format!("the board's issues hold more than {mib} MiB of text");
            return Err(too_large(why));
        }
        acc.board.issues.push(issue);
        Ok(())
    }

    /// Resolve blockers against the Status of every Issue on this board.
    /// Why not ask GitHub: a nested `blockedBy { projectItems { fieldValueByName } }` per item
    /// multiplies the page cost by ~10 (100 items x 20 blockers x 10 project items), while the
    /// poll already reads every non-archived item of the board. Blockers off the board (or
    /// archived) fall back to OPEN/CLOSED as the spec allows.
    fn finish_board(&self, acc: BoardAcc) -> Board {
        let (mut board, status_by_id) = (acc.board, acc.status_by_id);
        if !self.deps_supported.load(Ordering::Relaxed) {
            board.issues.iter_mut().for_each(|i| i.blocked_by.clear());
        }
        for b in board.issues.iter_mut().flat_map(|i| &mut i.blocked_by) {
            if let Some(status) = status_by_id.get(&b.id) {
                let closed = b.terminal && b.state == "CLOSED";
                b.terminal = closed || contains_name(&self.cfg.terminal_states, status);
                b.state = status.clone();
            }
        }
        board
    }

    /// One item of a board page as an issue (without blockers) and its content, or why it was
    /// dropped. An item that does not fit its row is malformed (logged, dropped alone).
    fn normalize_item(
        &self,
        project: &ProjectInfo,
        raw: &RawValue,
    ) -> Result<(NodeRow, Issue), DropReason> {
        let malformed = |id: &str, why: &str| -> DropReason {
            let (id, why) = (single_line(id, 80), single_line(why, 200));
            log::warn!("tracker_item_skipped item_id={id} reason={why:?}");
            |d| &mut d.malformed
        };
        let mut item = serde_json::from_str::<ItemRow>(raw.get()).map_err(|e| {
            #[derive(serde::Deserialize)]
            struct Id {
                id: Option<String>,
            }
            let id = serde_json::from_str::<Id>(raw.get()).ok();
            let id = id.and_then(|i| i.id).unwrap_or_default();
            malformed(&id, &e.to_string())
        })?;
        if item.is_archived == Some(true) {
            return Err(|d| &mut d.archived);
        }
        let (item_id, content) = (item.id.as_deref().unwrap_or(""), item.content.take());
        let content = content.unwrap_or_default();
        let typename = content.typename.as_deref();
        let issue_item: Result<(), DropReason> = match (item.kind.as_deref(), typename) {
            (_, Some("DraftIssue")) | (Some("DRAFT_ISSUE"), _) => Err(|d| &mut d.drafts),
            (_, Some("PullRequest")) | (Some("PULL_REQUEST"), _) => Err(|d| &mut d.pull_requests),
            (_, Some("Issue")) => Ok(()),
            (Some("REDACTED"), _) | (_, None) => Err(|d| &mut d.redacted),
            (_, Some(other)) => Err(malformed(
                item_id,
                &format!("unexpected content type {other}"),
            )),
        };
        issue_item?;
        match normalize::normalize_issue(&content, &item, project) {
            Ok(Some(issue)) => Ok((content, issue)),
            Ok(None) => Err(|d| &mut d.no_status),
            Err(why) => Err(malformed(item_id, &why)),
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
        let (id, ident, lists) = (&issue.id, &issue.identifier, issue.truncated.join(","));
        log::warn!("event=issue_fields_truncated issue_id={id} issue_identifier={ident} lists={lists} effect=\"not dispatched while a label or blocker rule depends on them\"");
        if logged.len() >= 10_000 {
            logged.clear();
        }
        logged.insert(issue.id.clone(), issue.truncated.clone());
    }

    /// True when `states` names a configured terminal state (closed issues count then).
    fn names_terminal(&self, states: &[String]) -> bool {
        states
            .iter()
            .any(|s| contains_name(&self.cfg.terminal_states, s))
    }

    fn in_repo_scope(&self, issue: &Issue) -> bool {
        self.cfg.repos.is_empty() || contains_name(&self.cfg.repos, &issue.repository)
    }

    /// Refresh `ids` (deduplicated, blank ones dropped) 100 per request; `shallow` uses
    /// `RefreshRunning` (no blockers).
    fn refresh_ids(&self, ids: &[String], shallow: bool) -> Result<Vec<Issue>, TrackerError> {
        let mut seen = HashSet::new();
        let unique: Vec<String> = ids
            .iter()
            .map(|id| id.trim())
            .filter(|id| !id.is_empty() && seen.insert(*id))
            .map(str::to_string)
            .collect();
        if unique.is_empty() {
            return Ok(Vec::new());
        }
        let project = self.project()?;
        let op = if shallow {
            "refresh_running"
        } else {
            "fetch_issue_states_by_ids"
        };
        self.with_stats(op, |stats| {
            let mut out = Vec::new();
            // GitHub rejects more than 100 ids per `nodes(ids:)`.
            for chunk in unique.chunks(100) {
                self.refresh_chunk(&project, chunk, shallow, stats, &mut out)?;
            }
            Ok(out)
        })
    }

    fn refresh_chunk(
        &self,
        project: &ProjectInfo,
        ids: &[String],
        shallow: bool,
        stats: &mut OpStats,
        out: &mut Vec<Issue>,
    ) -> Result<(), TrackerError> {
        // Without blockers (shallow, or a server without them) the refresh is RefreshRunning.
        let deps = !shallow && self.deps_supported.load(Ordering::Relaxed);
        let q = [&queries::REFRESH_RUNNING, &queries::REFRESH_ISSUES][usize::from(deps)];
        let vars = json!({ "ids": ids });
        let mut reply = self.request(q, vars.clone(), Some(project), stats)?;
        let no_blockers = |e: &GraphqlError| e.is_schema_capability_error() && is_about_blockers(e);
        if deps && reply.errors.iter().any(no_blockers) {
            self.disable_dependencies();
            reply = self.request(&queries::REFRESH_RUNNING, vars, Some(project), stats)?;
        }
        let not_found = |e: &GraphqlError| {
            e.kind.as_deref() == Some("NOT_FOUND") && e.root_field() == Some("nodes")
        };
        let gone = |i| (reply.errors.iter()).any(|e| not_found(e) && e.node_index() == Some(i));
        reply.check_errors(self.client.token(), |e| {
            not_found(e) && e.node_index().is_some()
        })?;
        let nodes = (reply.data.nodes.as_ref())
            .ok_or_else(|| unknown("refresh reply without a nodes list"))?;
        let (asked, got) = (ids.len(), nodes.len());
        if asked != got {
            let why = format!("refresh asked for {asked} ids and got {got} nodes");
            return Err(unknown(why));
        }
        for (i, (id, node)) in ids.iter().zip(nodes).enumerate() {
            // A shallow refresh (`RefreshRunning`) reads no blockers: `blocked_by` stays empty.
            out.extend(self.refreshed_issue(project, id, node, gone(i), stats)?);
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
        node: &NodeRow,
        stats: &mut OpStats,
    ) -> Result<Option<ItemRow>, TrackerError> {
        let unreadable = |why: String| unknown(format!("refresh of issue {id}: {why}"));
        let stuck = |why: String| {
            let why = format!("projectItems of issue {id} {why}");
            error(TrackerErrorKind::Pagination, why)
        };
        let mut fetched: NodeRow;
        let (mut page, mut after, mut pages) = (node, None, 1);
        loop {
            let found = normalize::project_items_page(page, &project.id).map_err(unreadable)?;
            let next = match found {
                ItemsOnPage::Ours(item) => return Ok(Some(item.clone())),
                ItemsOnPage::NotHere(None) => return Ok(None),
                ItemsOnPage::NotHere(Some(next)) => next,
            };
            if after.as_ref() == Some(&next) {
                return Err(stuck(format!("repeat cursor {next:?}")));
            }
            if pages >= MAX_PAGES {
                return Err(stuck("do not stop paging".into()));
            }
            pages += 1;
            let vars = json!({ "id": id, "after": next });
            let reply = self.request(&queries::ISSUE_PROJECT_ITEMS, vars, Some(project), stats)?;
            reply.check_errors(self.client.token(), |_| false)?;
            fetched = reply.data.node.unwrap_or_default();
            if fetched.typename.as_deref() != Some("Issue") {
                let why = format!("projectItems page {pages} has no Issue node");
                return Err(unreadable(why));
            }
            page = &fetched;
            after = Some(next);
        }
    }

    /// One node of a refresh reply as an issue. `None` (logged) only on proof that the id no
    /// longer resolves to an issue on the project in scope: GitHub reported it NOT_FOUND
    /// (`gone`), it is another type of node, every page of its project items was read without
    /// our project's item, its item has no Status, or it is outside `tracker.repos`. A reply
    /// that cannot be read (a null node without NOT_FOUND, no `__typename`, a malformed record or
    /// `projectItems`) is a `github_unknown_payload` error: the worker is kept.
    fn refreshed_issue(
        &self,
        project: &ProjectInfo,
        id: &str,
        node: &RawValue,
        gone: bool,
        stats: &mut OpStats,
    ) -> Result<Option<Issue>, TrackerError> {
        let unreadable = |why: &str| {
            let why = single_line(why, 200);
            unknown(format!("refresh of issue {id}: {why}"))
        };
        let node = serde_json::from_str::<Option<NodeRow>>(node.get())
            .map_err(|e| unreadable(&format!("malformed issue record: {e}")))?;
        let Some(node) = node else {
            if gone {
                log::debug!("tracker_issue_gone issue_id={id}");
                return Ok(None);
            }
            return Err(unreadable("null node without NOT_FOUND"));
        };
        let typename = node.typename.as_deref();
        let typename = typename.ok_or_else(|| unreadable("node without __typename"))?;
        if typename != "Issue" {
            let other = single_line(typename, 80);
            log::warn!("tracker_issue_gone issue_id={id} reason=\"id is a {other}, not an Issue\"");
            return Ok(None);
        }
        let Some(item) = self.item_on_our_project(project, id, &node, stats)? else {
            log::debug!("tracker_issue_left_project issue_id={id}");
            return Ok(None);
        };
        if item.status.is_none() {
            return Err(unreadable("project item without a status member"));
        }
        let issue = normalize::normalize_issue(&node, &item, project);
        let Some(mut issue) = issue.map_err(|why| unreadable(&why))? else {
            log::debug!("tracker_issue_left_project issue_id={id} reason=\"no Status value\"");
            return Ok(None);
        };
        self.note_truncated(&issue);
        if !self.in_repo_scope(&issue) {
            log::debug!("tracker_issue_out_of_scope issue_id={id} reason=\"tracker.repos\"");
            return Ok(None);
        }
        if self.deps_supported.load(Ordering::Relaxed) {
            let terminal = &self.cfg.terminal_states;
            issue.blocked_by = normalize::normalize_blockers(&node, terminal, Some(&project.id));
        }
        Ok(Some(issue))
    }
}

/// A board read in progress: the kept issues, the Status of every issue seen so far, and what
/// the read's bounds count (items received and bytes of issue text kept).
#[derive(Default)]
struct BoardAcc {
    board: Board,
    status_by_id: HashMap<String, String>,
    items: u64,
    kept_bytes: usize,
}

/// Allow the page after page `done` unless that is past the pages `tracker.max_items` needs at
/// `tracker.page_size`: a server that sends short pages with fresh cursors forever costs no more
/// requests than a full board.
fn next_page(cfg: &TrackerConfig, done: usize) -> Result<(), TrackerError> {
    let per_page = u64::from(cfg.page_size.clamp(1, 100));
    let needed = usize::try_from(cfg.max_items.div_ceil(per_page)).unwrap_or(usize::MAX);
    if done < needed.max(1) {
        return Ok(());
    }
    Err(too_large(format!(
        "the board read reached {done} pages, all that tracker.max_items = {} needs at {per_page} items a page, and has more; raise tracker.max_items or archive items",
        cfg.max_items
    )))
}

fn too_large(message: String) -> TrackerError {
    TrackerError::with_class(TrackerErrorKind::Pagination, BOARD_TOO_LARGE, message)
}

/// The bytes of issue text `i` holds (what a board read keeps per issue).
fn kept_bytes(i: &Issue) -> usize {
    let texts = [
        &i.id,
        &i.item_id,
        &i.identifier,
        &i.repository,
        &i.title,
        &i.state,
    ];
    let optional = i.description.iter().chain(&i.url).chain(&i.labels);
    let blockers = i
        .blocked_by
        .iter()
        .flat_map(|b| [&b.id, &b.identifier, &b.state]);
    (texts.into_iter().chain(optional).chain(blockers)).fold(0, |a, t| a.saturating_add(t.len()))
}

/// True for a schema error about `Issue.blockedBy`.
fn is_about_blockers(e: &GraphqlError) -> bool {
    e.field_name.as_deref() == Some("blockedBy") || e.message.contains("blockedBy")
}

/// A reply Baton cannot read (`github_unknown_payload`).
pub(crate) fn unknown(what: impl Into<String>) -> TrackerError {
    error(TrackerErrorKind::Payload, what)
}

/// An error of this tracker, named by its stable GitHub class (logs, `baton check`, the API).
pub(crate) fn error(kind: TrackerErrorKind, message: impl Into<String>) -> TrackerError {
    use TrackerErrorKind as K;
    let class = match kind {
        K::Transport => "github_api_request",
        K::Status => "github_api_status",
        K::Auth => "github_auth",
        K::RateLimited => "github_rate_limited",
        K::Query => "github_graphql_errors",
        K::Payload => "github_unknown_payload",
        K::Pagination => "github_missing_end_cursor",
        _ => kind.as_str(), // the configuration kinds keep their shared names
    };
    TrackerError::with_class(kind, class, message)
}

/// The `items(query:)` filter for `states` in GitHub's project filter syntax (best effort; the
/// grammar is undocumented, so results are always re-filtered client-side).
fn server_filter(status_field: &str, states: &[String]) -> String {
    let field = status_field.trim().to_lowercase();
    let field: Vec<&str> = field.split_whitespace().collect();
    let values: Vec<String> = states
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| format!("\"{}\"", s.replace('"', "")))
        .collect();
    format!("is:issue {}:{}", field.join("-"), values.join(","))
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
        let wants_terminal = self.names_terminal(states);
        // Closed issues in other Statuses are needed too, so never narrow server-side then.
        let mut issues = self
            .fetch_board((!wants_terminal).then_some(states))?
            .issues;
        issues.retain(|i| {
            (contains_name(states, &i.state) || (wants_terminal && i.closed))
                && self.in_repo_scope(i)
        });
        Ok(issues)
    }

    fn fetch_issue_states_by_ids(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        self.refresh_ids(ids, false)
    }

    /// One read of the board: unfiltered when `also` states are given (closed issues in any Status
    /// are needed then), else narrowed to the active states server-side when configured. Only
    /// the candidates and the issues asked for are kept while the pages are normalized.
    fn read_board(&self, keep_ids: &[String], also: &[String]) -> Result<BoardRead, TrackerError> {
        let active = &self.cfg.active_states;
        let mut also = also.to_vec();
        also.retain(|s| !s.trim().is_empty());
        let also_terminal = self.names_terminal(&also);
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
        let board = self.with_stats("fetch_board", |s| self.read_pages(filter, &keep, s))?;
        let (candidates, others) = board.issues.into_iter().partition(|i| is_candidate(i));
        Ok(BoardRead { candidates, others })
    }

    fn refresh_running(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        self.refresh_ids(ids, true)
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
