//! Baton's metrics without a registry: a plain [`MetricsSnapshot`] and [`render`] for the
//! `GET /metrics` body. To add a metric: a field, then one family in [`render`] (ARCHITECTURE.md,
//! "Operations"). Below it, a hand-written writer for the Prometheus text exposition format
//! 0.0.4 (`# HELP` and `# TYPE` once per family, before its samples in one group) and a
//! fixed-bucket [`Histogram`]; the tests read every exposition with a strict parser
//! (`tests/it/support/prom.rs`).

pub use crate::orchestrator::state::TokenCounts;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::text;
use MetricType::{Counter, Gauge};

/// Bucket upper bounds (seconds) of `baton_poll_duration_seconds`: a board read is
/// one or more GraphQL round trips.
pub const POLL_DURATION_BUCKETS: [f64; 11] =
    [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

/// Bucket upper bounds (seconds) of `baton_state_write_duration_seconds`: one atomic
/// write-and-rename of the state file.
pub const STATE_WRITE_DURATION_BUCKETS: [f64; 11] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Every value `GET /metrics` shows, as plain data; [`render`] names the family of each field.
///
/// **Cardinality rule:** map keys become label values, so they must come from bounded sets:
/// error classes (`TrackerErrorKind::as_str`), worker outcomes, park reason *classes* (such as
/// `budget_exceeded`, never the message), and host ids from the configuration. The
/// `&'static str` keys enforce this for everything but hosts. Never use issue identifiers.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    pub polls: u64,
    /// Failed polls by error class.
    pub poll_errors: BTreeMap<&'static str, u64>,
    pub dispatches: u64,
    /// Worker exits by outcome, e.g. `normal`, `failed`, `cancelled`.
    pub worker_exits: BTreeMap<&'static str, u64>,
    pub retries_scheduled: u64,
    /// Issues parked now, by reason class.
    pub parked: BTreeMap<&'static str, u64>,
    pub running: u64,
    pub retrying: u64,
    pub tokens: TokenCounts,
    /// Agent-reported cost in US dollars.
    pub cost_usd: f64,
    pub agent_turns: u64,
    /// The tracker's rate-limit budget left and its size, when known.
    pub rate_limit_remaining: Option<u64>,
    pub rate_limit_limit: Option<u64>,
    /// Rate-limit points used by the last poll, when known.
    pub last_poll_points: Option<u64>,
    /// Rate-limit points used by all polls and fetch batches.
    pub points_total: u64,
    /// The poll interval in force, stretched to the budget.
    pub poll_interval_seconds: f64,
    /// Points per hour the budget plan projects, when known.
    pub points_projected_per_hour: Option<u64>,
    pub last_successful_poll: Option<SystemTime>,
    pub poll_duration: Histogram,
    pub state_write_duration: Histogram,
    /// Agents running now per SSH host id; empty without SSH hosts.
    pub host_running: BTreeMap<String, u64>,
}

impl Default for MetricsSnapshot {
    fn default() -> Self {
        MetricsSnapshot {
            polls: 0,
            poll_errors: BTreeMap::new(),
            dispatches: 0,
            worker_exits: BTreeMap::new(),
            retries_scheduled: 0,
            parked: BTreeMap::new(),
            running: 0,
            retrying: 0,
            tokens: TokenCounts::default(),
            cost_usd: 0.0,
            agent_turns: 0,
            rate_limit_remaining: None,
            rate_limit_limit: None,
            last_poll_points: None,
            points_total: 0,
            poll_interval_seconds: 0.0,
            points_projected_per_hour: None,
            last_successful_poll: None,
            poll_duration: Histogram::new(&POLL_DURATION_BUCKETS),
            state_write_duration: Histogram::new(&STATE_WRITE_DURATION_BUCKETS),
            host_running: BTreeMap::new(),
        }
    }
}

impl MetricsSnapshot {
    /// Count one finished poll: its duration, and its error class if it failed.
    pub fn record_poll(
        &mut self,
        took: Duration,
        error_class: Option<&'static str>,
        at: SystemTime,
    ) {
        self.polls = self.polls.saturating_add(1);
        self.poll_duration.observe_duration(took);
        match error_class {
            Some(class) => bump(&mut self.poll_errors, class),
            None => self.last_successful_poll = Some(at),
        }
    }

    pub fn record_worker_exit(&mut self, outcome: &'static str) {
        bump(&mut self.worker_exits, outcome);
    }
}

/// Add one to `map[key]`, saturating.
pub(crate) fn bump(map: &mut BTreeMap<&'static str, u64>, key: &'static str) {
    let n = map.entry(key).or_insert(0);
    *n = n.saturating_add(1);
}

/// An unlabelled family: name, type, help and its value (`None`: not known, left out).
type Single = (&'static str, MetricType, &'static str, Option<f64>);

/// The `GET /metrics` body. Families with no known value (rate limits before the first poll,
/// per-host gauges without SSH hosts) are left out.
pub fn render(m: &MetricsSnapshot) -> String {
    let mut e = Exposition::default();
    e.family("baton_build_info", Gauge, "Build information; always 1.");
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    e.sample("baton_build_info", &version, 1.0);
    let n = |v: u64| Some(v as f64);
    let work: [Single; 7] = [
        ("baton_polls_total", Counter, "Tracker polls.", n(m.polls)),
        (
            "baton_dispatches_total",
            Counter,
            "Agent workers dispatched.",
            n(m.dispatches),
        ),
        (
            "baton_retries_scheduled_total",
            Counter,
            "Retries scheduled.",
            n(m.retries_scheduled),
        ),
        (
            "baton_running_agents",
            Gauge,
            "Agents running now.",
            n(m.running),
        ),
        (
            "baton_retrying_issues",
            Gauge,
            "Issues waiting for a retry.",
            n(m.retrying),
        ),
        (
            "baton_agent_cost_usd_total",
            Counter,
            "Agent-reported cost in US dollars.",
            Some(m.cost_usd),
        ),
        (
            "baton_agent_turns_total",
            Counter,
            "Agent turns.",
            n(m.agent_turns),
        ),
    ];
    singles(&mut e, &work);
    render_labelled(&mut e, m);
    render_tracker(&mut e, m);
    e.finish()
}

/// The tracker's budget, points and last success (each only when known), and the histograms.
fn render_tracker(e: &mut Exposition, m: &MetricsSnapshot) {
    let n = |v: u64| Some(v as f64);
    let last_success = m.last_successful_poll.map(|at| {
        at.duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    });
    let opt = |v: Option<u64>| v.map(|v| v as f64);
    let tracker: [Single; 7] = [
        (
            "baton_tracker_rate_limit_remaining",
            Gauge,
            "Tracker rate-limit points left in the current window.",
            opt(m.rate_limit_remaining),
        ),
        (
            "baton_tracker_rate_limit_limit",
            Gauge,
            "Tracker rate-limit points per window.",
            opt(m.rate_limit_limit),
        ),
        (
            "baton_tracker_poll_points",
            Gauge,
            "Tracker rate-limit points used by the last poll.",
            opt(m.last_poll_points),
        ),
        (
            "baton_tracker_points_projected_per_hour",
            Gauge,
            "Tracker rate-limit points per hour the budget plan projects.",
            opt(m.points_projected_per_hour),
        ),
        (
            "baton_tracker_points_total",
            Counter,
            "Tracker rate-limit points used by all polls and fetch batches.",
            n(m.points_total),
        ),
        (
            "baton_tracker_poll_interval_seconds",
            Gauge,
            "The tracker poll interval in force (polling.interval_ms, stretched to the budget).",
            Some(m.poll_interval_seconds),
        ),
        (
            "baton_last_successful_poll_timestamp_seconds",
            Gauge,
            "When the last tracker poll succeeded, in unix seconds.",
            last_success,
        ),
    ];
    singles(e, &tracker);
    for (name, help, h) in [
        (
            "baton_poll_duration_seconds",
            "Tracker poll duration in seconds.",
            &m.poll_duration,
        ),
        (
            "baton_state_write_duration_seconds",
            "State file write duration in seconds.",
            &m.state_write_duration,
        ),
    ] {
        e.family(name, MetricType::Histogram, help);
        e.histogram(name, &[], h);
    }
}

fn singles(e: &mut Exposition, families: &[Single]) {
    for &(name, kind, help, value) in families {
        if let Some(v) = value {
            e.family(name, kind, help);
            e.sample(name, &[], v);
        }
    }
}

/// The families with one label each; every label value comes from a bounded set.
fn render_labelled(e: &mut Exposition, m: &MetricsSnapshot) {
    let pairs = |map: &BTreeMap<&'static str, u64>| -> Vec<(&str, u64)> {
        map.iter().map(|(k, v)| (*k, *v)).collect()
    };
    let t = m.tokens;
    let tokens = vec![
        ("input", t.input_tokens),
        ("output", t.output_tokens),
        ("cache_read", t.cache_read_input_tokens),
        ("cache_creation", t.cache_creation_input_tokens),
    ];
    let hosts = m.host_running.iter().map(|(k, v)| (k.as_str(), *v));
    let labelled = [
        (
            "baton_poll_errors_total",
            Counter,
            "Failed tracker polls by error class.",
            "class",
            pairs(&m.poll_errors),
        ),
        (
            "baton_worker_exits_total",
            Counter,
            "Agent worker exits by outcome.",
            "outcome",
            pairs(&m.worker_exits),
        ),
        (
            "baton_parked_issues",
            Gauge,
            "Issues parked now, by reason.",
            "reason",
            pairs(&m.parked),
        ),
        (
            "baton_agent_tokens_total",
            Counter,
            "Agent tokens by kind (cache reads and writes separate).",
            "kind",
            tokens,
        ),
        (
            "baton_host_running_agents",
            Gauge,
            "Agents running now per SSH host.",
            "host",
            hosts.collect(),
        ),
    ];
    for (name, kind, help, label, values) in labelled {
        // Without SSH hosts the per-host family is left out entirely.
        if label == "host" && values.is_empty() {
            continue;
        }
        e.family(name, kind, help);
        for (value, n) in values {
            e.sample(name, &[(label, value)], n as f64);
        }
    }
}

/// The `Content-Type` of a 0.0.4 exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type, as written (lowercase) on its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

/// Observations counted into fixed buckets (upper bounds in seconds, ascending, `+Inf` implied).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per-bucket (not cumulative) counts; one more than `bounds` for `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending, finite; checked in debug builds).
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(
            bounds.windows(2).all(|w| w[0] < w[1]) && bounds.iter().all(|b| b.is_finite()),
            "histogram bounds must be finite and strictly ascending"
        );
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Count one observation in seconds. NaN is ignored; negative values count as 0.
    pub fn observe(&mut self, seconds: f64) {
        if seconds.is_nan() {
            return;
        }
        let v = seconds.max(0.0);
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] = self.counts[i].saturating_add(1);
        self.count = self.count.saturating_add(1);
        self.sum += v;
    }

    pub fn observe_duration(&mut self, d: Duration) {
        self.observe(d.as_secs_f64());
    }
}

/// Builds one exposition text. Families must be written one at a time: [`Exposition::family`]
/// then that family's samples.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Start a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: MetricType, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let kind = format!("{kind:?}").to_lowercase();
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample line: `name{labels} value`; label values escape `\`, `"` and newline.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let escape = |c| match c {
            '\\' => Some("\\\\"),
            '"' => Some("\\\""),
            '\n' => Some("\\n"),
            _ => None,
        };
        self.out.push_str(name);
        for (i, (label, v)) in labels.iter().enumerate() {
            let sep = if i == 0 { '{' } else { ',' };
            let v = text::replace_chars(v, escape);
            let _ = write!(self.out, "{sep}{label}=\"{v}\"");
        }
        let close = if labels.is_empty() { "" } else { "}" };
        let _ = writeln!(self.out, "{close} {}", format_float(value));
    }

    /// The `_bucket`, `_sum` and `_count` samples of one histogram series (after
    /// [`Exposition::family`] with [`MetricType::Histogram`]).
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let (bucket, mut cumulative) = (format!("{name}_bucket"), 0u64);
        let bounds = h.bounds.iter().copied().chain([f64::INFINITY]);
        for (bound, n) in bounds.zip(&h.counts) {
            cumulative = cumulative.saturating_add(*n);
            let le = format_float(bound);
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, cumulative as f64);
        }
        self.sample(&format!("{name}_sum"), labels, h.sum);
        self.sample(&format!("{name}_count"), labels, h.count as f64);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// A sample value: `+Inf`, `-Inf`, `NaN`, an integer without exponent below 1e15, the shortest
/// round-trip decimal for ordinary magnitudes, and exponent form (`1e300`, `1.5e-7`) otherwise.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into(); // also -0.0
    }
    let abs = v.abs();
    if !(1e-4..1e15).contains(&abs) {
        return format!("{v:e}");
    }
    format!("{v}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats() {
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
        assert_eq!(format_float(-0.0), "0");
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(0.1), "0.1");
        assert_eq!(format_float(0.0025), "0.0025");
        assert_eq!(format_float(123456789.0), "123456789");
        assert_eq!(format_float(1e300), "1e300");
        assert_eq!(format_float(1.5e-7), "1.5e-7");
        assert_eq!(format_float(-2.5), "-2.5");
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        static B: [f64; 3] = [0.1, 1.0, 10.0];
        let mut h = Histogram::new(&B);
        for v in [0.05, 0.1, 0.5, 20.0, f64::NAN, -1.0] {
            h.observe(v);
        }
        let mut e = Exposition::default();
        e.histogram("h", &[], &h);
        let text = e.finish();
        let buckets: Vec<_> = text.lines().take(4).collect();
        let want = [
            "{le=\"0.1\"} 3",
            "{le=\"1\"} 4",
            "{le=\"10\"} 4",
            "{le=\"+Inf\"} 5",
        ];
        assert_eq!(buckets, want.map(|b| format!("h_bucket{b}")));
        assert!(text.ends_with("\nh_count 5\n"), "{text}");
        assert_eq!(h.count, 5);
        assert!((h.sum - 20.65).abs() < 1e-9);
    }
}
