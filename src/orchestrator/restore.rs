//! Durable state, the core's side (pure): `state.json` is a serde view of the engine state
//! ([`to_json`]), [`parse`] reads it back entry by entry (a bad entry is dropped alone; schema 1
//! is upgraded once), [`restore`] turns it into a fresh engine state plus the startup actions.
//! Times are Unix-epoch milliseconds: a due time means the same moment after a restart.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use log::warn;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::agent::TokenUsage;
use crate::workspace::{workspace_key, workspace_path};

use super::budget::{add_cost, MAX_COST_USD};
use super::engine::Action;
use super::state::{
    BlockedEntry, IssueSpend, Millis, OrchestratorState, Orphan, ParkKind, Policy, Resume,
    RetryEntry, RetryKind, RunningEntry, Totals,
};

/// The `state.json` version this build writes and the newest it reads (1 is upgraded).
pub const VERSION: u64 = 2;
/// Error text of the retry that resumes an interrupted run.
pub const INTERRUPTED: &str = "interrupted: the previous Baton process stopped while the agent ran";
/// Most entries read per map; the rest of a bigger (hostile) file is dropped with a warning.
const MAX_ENTRIES: usize = 10_000;
/// Most hosts recorded for one issue's workspace copies (one per configured host; more is a
/// hostile file).
const MAX_WORKSPACE_HOSTS: usize = 256;

/// What `state.json` holds: borrowed from the engine state, nothing copied.
#[derive(Serialize)]
struct View<'a> {
    version: u64,
    running: &'a BTreeMap<String, RunningEntry>,
    retry_attempts: &'a BTreeMap<String, RetryEntry>,
    blocked: &'a BTreeMap<String, BlockedEntry>,
    runs_since_active: &'a BTreeMap<String, u32>,
    spend: &'a BTreeMap<String, IssueSpend>,
    agent_totals: &'a Totals,
    orphans: &'a BTreeMap<String, Orphan>,
    workspace_hosts: &'a BTreeMap<String, Vec<String>>,
}

/// The `state.json` bytes of `s`.
pub fn to_json(s: &OrchestratorState) -> Result<Vec<u8>, String> {
    serde_json::to_vec(&View {
        version: VERSION,
        running: &s.running,
        retry_attempts: &s.retry_attempts,
        blocked: &s.blocked,
        runs_since_active: &s.runs_since_active,
        spend: &s.spend,
        agent_totals: &s.agent_totals,
        orphans: &s.orphans,
        workspace_hosts: &s.workspace_hosts,
    })
    .map_err(|e| format!("serialize state: {e}"))
}

/// Why a whole file cannot be used: written by a newer Baton (leave it alone), or not a state
/// document at all (move it aside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    Newer(u64),
    Corrupt(String),
}

/// Read a `state.json` into the durable part of an engine state. Every entry is read and checked
/// on its own: one that fails is dropped with `event=state_entry_dropped` naming the issue and
/// the field, the rest is kept.
pub fn parse(bytes: &[u8]) -> Result<OrchestratorState, ParseError> {
    let mut doc: Map<String, Value> =
        serde_json::from_slice(bytes).map_err(|e| ParseError::Corrupt(e.to_string()))?;
    let version = ["version", "schema_version"]
        .iter()
        .find_map(|k| doc.get(*k).and_then(Value::as_u64));
    let mut s = OrchestratorState::default();
    match version {
        Some(VERSION) => {
            s.running = entries(&mut doc, "running");
            s.retry_attempts = entries(&mut doc, "retry_attempts");
            s.blocked = entries(&mut doc, "blocked");
            s.runs_since_active = entries(&mut doc, "runs_since_active");
            s.spend = entries(&mut doc, "spend");
            s.orphans = entries(&mut doc, "orphans");
            s.workspace_hosts = entries(&mut doc, "workspace_hosts");
            s.agent_totals = doc
                .remove("agent_totals")
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
        }
        Some(1) => upgrade_v1(doc.remove("issues"), &mut s),
        Some(v) if v > VERSION => return Err(ParseError::Newer(v)),
        _ => return Err(ParseError::Corrupt("no known version".into())),
    }
    Ok(s)
}

/// The result of checking an entry: `Err(field)` drops it.
type Check = Result<(), &'static str>;

/// An entry of one of the maps, checked (and made safe) after it was read.
trait Entry: DeserializeOwned {
    fn check(&mut self, _id: &str) -> Check {
        Ok(())
    }
}

fn entries<T: Entry>(doc: &mut Map<String, Value>, key: &str) -> BTreeMap<String, T> {
    let Some(Value::Object(map)) = doc.remove(key) else {
        return BTreeMap::new();
    };
    if map.len() > MAX_ENTRIES {
        warn!(
            "event=state_entry_dropped map={key} entries={} kept={MAX_ENTRIES}; the file is larger than any Baton writes",
            map.len()
        );
    }
    let kept = map.into_iter().take(MAX_ENTRIES);
    kept.filter_map(|(id, v)| entry(key, &id, v).map(|t| (id, t)))
        .collect()
}

fn entry<T: Entry>(map: &str, id: &str, v: Value) -> Option<T> {
    let read = match serde_json::from_value::<T>(v.clone()) {
        Ok(mut t) if text_ok(id) => t.check(id).map(|()| t).map_err(str::to_string),
        Ok(_) => Err("issue id".to_string()),
        Err(e) => Err(format!("{} ({e})", bad_field::<T>(&v))),
    };
    read.inspect_err(|field| {
        let id: String = id.chars().take(100).collect();
        warn!("event=state_entry_dropped map={map} issue_id={id:?} field={field}");
    })
    .ok()
}

/// The field whose removal makes `v` readable as a `T` (serde's own errors do not name it).
fn bad_field<T: DeserializeOwned>(v: &Value) -> String {
    let Value::Object(m) = v else {
        return "(not an object)".into();
    };
    let found = m.keys().find(|k| {
        let mut rest = m.clone();
        rest.remove(*k);
        serde_json::from_value::<T>(Value::Object(rest)).is_ok()
    });
    found.cloned().unwrap_or_else(|| "?".into())
}

fn need(ok: bool, field: &'static str) -> Check {
    ok.then_some(()).ok_or(field)
}

/// Ids and identifiers: non-empty, bounded, no control characters.
fn text_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && !s.chars().any(char::is_control)
}

/// A recorded workspace: empty (unknown), or an absolute path without `..` whose last part is
/// the issue's workspace key, so a file can never point a removal elsewhere.
fn path_ok(p: &Path, identifier: &str) -> bool {
    p.as_os_str().is_empty()
        || (p.is_absolute()
            && !p.components().any(|c| c == Component::ParentDir)
            && p.file_name().and_then(|n| n.to_str()) == Some(&workspace_key(identifier)))
}

fn host_ok(h: Option<&str>) -> bool {
    h.is_none_or(|h| crate::config::bad_destination(h).is_none())
}

/// An entry's identifier (named `field`), workspace and host.
fn check_common(field: &'static str, ident: &str, path: &Path, host: Option<&str>) -> Check {
    need(text_ok(ident), field)?;
    need(path_ok(path, ident), "workspace_path")?;
    need(host_ok(host), "host")
}

/// Whether a stored agent session may be resumed: 1–128 of `[A-Za-z0-9._-]`, not starting with
/// `-` (never read as a flag). A malformed one is logged; the run itself stays.
fn session_kept(id: &str, field: &str, s: &str) -> bool {
    let kept = (1..=128).contains(&s.len())
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !kept {
        warn!("event=state_entry_dropped issue_id={id:?} field={field}; not resumed");
    }
    kept
}

impl Entry for RunningEntry {
    fn check(&mut self, id: &str) -> Check {
        self.issue.id = id.to_string();
        let (ident, host) = (&self.issue.identifier, self.host.as_deref());
        check_common("issue.identifier", ident, &self.workspace_path, host)?;
        let session = self.agent_session.take();
        self.agent_session = session.filter(|s| session_kept(id, "agent_session", s));
        self.agent_pid = self.agent_pid.filter(|p| (2..=i32::MAX as u32).contains(p));
        self.cost_usd = self.cost_usd.map(|c| c.clamp(0.0, MAX_COST_USD));
        Ok(())
    }
}

impl Entry for RetryEntry {
    fn check(&mut self, id: &str) -> Check {
        self.issue_id = id.to_string();
        let host = self.host.as_deref();
        check_common("identifier", &self.identifier, &self.workspace_path, host)?;
        let resume = self.resume.take();
        self.resume = resume.filter(|r| session_kept(id, "resume.session", &r.session));
        Ok(())
    }
}

impl Entry for BlockedEntry {
    fn check(&mut self, id: &str) -> Check {
        self.issue_id = id.to_string();
        check_common("identifier", &self.identifier, &self.workspace_path, None)
    }
}

impl Entry for Orphan {
    fn check(&mut self, _: &str) -> Check {
        need(text_ok(&self.identifier), "identifier")?;
        need(self.pgid > 1, "pgid")?;
        need(host_ok(self.host.as_deref()), "host")
    }
}

impl Entry for IssueSpend {}
impl Entry for u32 {}

/// An issue's workspace hosts: 1 to [`MAX_WORKSPACE_HOSTS`] valid destinations, each once.
impl Entry for Vec<String> {
    fn check(&mut self, _: &str) -> Check {
        let mut seen = std::collections::BTreeSet::new();
        let unique = self.iter().all(|h| seen.insert(h.as_str()));
        let valid = self.iter().all(|h| host_ok(Some(h)));
        let sized = (1..=MAX_WORKSPACE_HOSTS).contains(&self.len());
        need(unique && valid && sized, "host")
    }
}

/// Put a stored state into a fresh engine state with `policy` at `now`: retries keep their due
/// times (a past one is due now), parked issues, counts, spend and totals come back; a run that
/// was running becomes a continuation due at once that keeps its attempt (an interruption is not
/// a failure) and resumes its session. Its old agent group becomes an orphan that holds the issue
/// until its host says it is stopped (or `worker.orphan_grace_ms` passes): the returned
/// `StopOrphan` actions ask each host (never another one) to stop its own groups.
pub fn restore(
    stored: OrchestratorState,
    policy: Policy,
    now: Millis,
) -> (OrchestratorState, Vec<Action>) {
    let mut s = OrchestratorState::new(policy, now);
    let give_up_at = now.saturating_add(s.policy.orphan_grace_ms);
    s.runs_since_active = stored.runs_since_active;
    s.spend = stored.spend;
    s.agent_totals = stored.agent_totals;
    s.orphans = stored.orphans;
    // No host that is no longer configured is ever contacted (placement, cleanup).
    s.workspace_hosts = stored.workspace_hosts;
    s.workspace_hosts.retain(|_, hs| {
        hs.retain(|h| s.policy.ssh_hosts.contains(h));
        !hs.is_empty()
    });
    for (id, e) in stored.running {
        let ident = e.issue.identifier.clone();
        if let Some(pgid) = e.agent_pid {
            let orphan = Orphan {
                identifier: ident.clone(),
                host: e.host.clone(),
                pgid,
                leader_start: e.leader_start.unwrap_or(0),
                give_up_at,
                checking: false,
            };
            s.orphans.insert(id.clone(), orphan);
        }
        // Its re-dispatch counts the run again.
        if let Some(n) = s.runs_since_active.get_mut(&id) {
            *n = n.saturating_sub(1);
        }
        s.queue_retry(RetryEntry {
            workspace_path: known_path(&s, e.workspace_path, &ident),
            issue_id: id,
            identifier: ident,
            url: e.issue.url,
            attempt: e.attempt.unwrap_or(1).max(1),
            due_at: now,
            error: Some(INTERRUPTED.to_string()),
            kind: RetryKind::Continuation,
            host: e.host,
            resume: e.agent_session.map(|session| Resume {
                agent: e.agent,
                session,
                tokens: e.tokens,
                cost_usd: e.cost_usd,
            }),
            ..RetryEntry::default()
        });
    }
    let parked = stored.blocked.into_iter();
    s.blocked
        .extend(parked.filter(|(id, _)| !s.claimed.contains(id)));
    for (id, mut r) in stored.retry_attempts {
        if s.claimed.contains(&id) || s.blocked.contains_key(&id) {
            continue;
        }
        r.workspace_path = known_path(&s, r.workspace_path, &r.identifier);
        s.queue_retry(r);
    }
    let mut actions = Vec::new();
    for (id, o) in s.orphans.iter_mut() {
        // A host no longer configured is never contacted: the issue waits out the grace.
        if o.host.iter().all(|h| s.policy.ssh_hosts.contains(h)) {
            actions.push(super::engine::check_orphan(id, o));
        }
    }
    (s, actions)
}

/// The recorded workspace, or the one the current root gives (a file that did not record it).
fn known_path(s: &OrchestratorState, p: PathBuf, identifier: &str) -> PathBuf {
    if p.as_os_str().is_empty() {
        workspace_path(&s.policy.workspace_root, identifier)
    } else {
        p
    }
}

/// `key=value` fields of the startup summary (`event=state_recovered`).
pub fn summary(s: &OrchestratorState) -> String {
    let resumed = s.retry_attempts.values().filter(|r| r.resume.is_some());
    format!(
        "restored_retries={} parked_issues={} resumed_sessions={} orphans={}",
        s.retry_attempts.len(),
        s.blocked.len(),
        resumed.count(),
        s.orphans.len()
    )
}

/// `baton check`'s summary of a stored state: `issues= retries= parked= running= sessions=`.
pub fn check_summary(s: &OrchestratorState) -> String {
    let mut ids: std::collections::BTreeSet<&String> = s.running.keys().collect();
    ids.extend(s.retry_attempts.keys().chain(s.blocked.keys()));
    ids.extend(s.runs_since_active.keys().chain(s.spend.keys()));
    let running = s.running.values().filter(|e| e.agent_session.is_some());
    let retrying = s.retry_attempts.values().filter(|r| r.resume.is_some());
    let sessions = running.count() + retrying.count();
    format!(
        "issues={} retries={} parked={} running={} sessions={sessions}",
        ids.len(),
        s.retry_attempts.len(),
        s.blocked.len(),
        s.running.len()
    )
}

/// One issue of a schema-1 file (Baton before "one state"), read once and upgraded.
#[derive(Deserialize, Default)]
#[serde(default)]
struct V1Issue {
    id: String,
    identifier: String,
    attempt: u32,
    runs: u32,
    /// `due_at`, `attempt`, `error` and `kind`, as today.
    retry: Option<RetryEntry>,
    parked: Option<V1Parked>,
    totals: V1Totals,
    agent: Option<String>,
    session_id: Option<String>,
    workspace: Option<PathBuf>,
    host: Option<String>,
    running: Option<V1Run>,
}

/// `reason`, `state`, `fingerprint` and `since` as today; `kind` may be missing.
#[derive(Deserialize, Default)]
#[serde(default)]
struct V1Parked {
    #[serde(flatten)]
    entry: BlockedEntry,
    kind: Option<ParkKind>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct V1Totals {
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_creation_tokens: u64,
    /// Missing: nothing spent; `null` (a non-finite spend) reads as the maximum.
    #[serde(deserialize_with = "super::state::stored_cost")]
    cost_usd: f64,
    turns: u32,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct V1Run {
    pgid: u32,
    leader_start_time: u64,
    started_at: u64,
    agent: String,
    session_id: Option<String>,
}

/// Schema 1 → the engine's maps; every upgraded entry then goes through the same checks as a
/// current one. A remote run's recorded start time was read on this machine, so it is dropped
/// (its group is then never signalled, only checked for being gone).
fn upgrade_v1(issues: Option<Value>, s: &mut OrchestratorState) {
    let Some(Value::Array(issues)) = issues else {
        return;
    };
    for v in issues.into_iter().take(MAX_ENTRIES) {
        match serde_json::from_value::<V1Issue>(v) {
            Ok(i) => upgrade_issue(i, s),
            Err(e) => warn!("event=state_entry_dropped map=issues field=? ({e})"),
        }
    }
}

/// One schema-1 issue into the engine's maps: its spend (and its part of the service totals),
/// its run count, and its run, park or retry.
fn upgrade_issue(i: V1Issue, s: &mut OrchestratorState) {
    let (id, t) = (i.id, &i.totals);
    let usage = TokenUsage {
        input_tokens: t.input_tokens,
        output_tokens: t.output_tokens,
        cache_read_input_tokens: t.cache_read_tokens,
        cache_creation_input_tokens: t.cache_creation_tokens,
    };
    if usage != TokenUsage::default() || t.cost_usd > 0.0 || t.turns > 0 {
        let mut spend = IssueSpend {
            cost_usd: t.cost_usd,
            turns: t.turns,
            ..IssueSpend::default()
        };
        spend.tokens.add(&usage);
        let all = &mut s.agent_totals;
        all.tokens.add(&usage);
        all.cost_usd = add_cost(all.cost_usd, t.cost_usd);
        all.turns = all.turns.saturating_add(u64::from(t.turns));
        s.spend.insert(id.clone(), spend);
    }
    let host = i.host.filter(|h| h != "local");
    let workspace_path = i.workspace.unwrap_or_default();
    if i.runs > 0 {
        s.runs_since_active.insert(id.clone(), i.runs);
    }
    if let Some(run) = i.running {
        let agent = Some(run.agent).filter(|a| !a.is_empty()).or(i.agent);
        let agent = match agent.as_deref() {
            Some("claude") => "claude_code".to_string(),
            _ => agent.unwrap_or_default(),
        };
        let mut e = RunningEntry {
            workspace_path,
            attempt: (i.attempt > 0).then_some(i.attempt),
            started_at: run.started_at,
            agent,
            agent_session: run.session_id.or(i.session_id),
            agent_pid: Some(run.pgid),
            leader_start: host.is_none().then_some(run.leader_start_time),
            host,
            ..RunningEntry::default()
        };
        e.issue.identifier = i.identifier;
        if e.check(&id).is_ok() {
            s.running.insert(id, e);
        }
    } else if let Some(p) = i.parked {
        let kind = p.kind.unwrap_or(match p.entry.reason.as_str() {
            r if r.starts_with("max_attempts") => ParkKind::MaxAttempts,
            r if r.starts_with("budget") => ParkKind::BudgetExceeded,
            _ => ParkKind::MaxRuns,
        });
        let mut b = p.entry;
        (b.identifier, b.kind, b.workspace_path) = (i.identifier, kind, workspace_path);
        if b.check(&id).is_ok() {
            s.blocked.insert(id, b);
        }
    } else if let Some(mut e) = i.retry {
        (e.identifier, e.workspace_path, e.host) = (i.identifier, workspace_path, host);
        if e.check(&id).is_ok() {
            s.retry_attempts.insert(id, e);
        }
    }
}
