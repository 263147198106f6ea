//! A hand-written writer for the Prometheus text exposition format 0.0.4 (`# HELP` and `# TYPE`
//! once per family, before its samples in one group), and a fixed-bucket [`Histogram`]. The
//! tests read every exposition with a strict parser (`tests/it/support/prom.rs`).

use std::fmt::Write as _;
use std::time::Duration;

use crate::text;

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

    /// A whole family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: MetricType, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
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
