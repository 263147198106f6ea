//! `/metrics` body: checked line by line with a strict Prometheus text-format 0.0.4 parser written
//! here (grammar, HELP/TYPE before samples, one group per family, no duplicate series, histogram
//! buckets), and hostile label values that must round-trip through escaping.

use crate::support::prom;

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use prom::{family, parse, parse_value, value, Family};

use baton::ops::metrics::{format_float, render, Exposition, Histogram, MetricType, CONTENT_TYPE};
use baton::ops::metrics::{MetricsSnapshot, TokenCounts};

fn parsed(m: &MetricsSnapshot) -> Vec<Family> {
    let text = render(m);
    parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A snapshot with every field set, including hostile host ids.
fn busy() -> MetricsSnapshot {
    let mut m = MetricsSnapshot {
        polls: 12,
        dispatches: 5,
        retries_scheduled: 3,
        running: 2,
        retrying: 1,
        tokens: TokenCounts {
            input_tokens: 1000,
            output_tokens: 250,
            cache_read_input_tokens: 40_000,
            cache_creation_input_tokens: 1200,
            total_tokens: 42_450,
        },
        cost_usd: 0.1 + 0.2,
        agent_turns: 9,
        rate_limit_remaining: Some(4990),
        rate_limit_limit: Some(5000),
        last_poll_points: Some(1),
        points_total: 12,
        poll_interval_seconds: 30.316,
        points_projected_per_hour: Some(2_374),
        last_successful_poll: Some(UNIX_EPOCH + Duration::from_millis(1_767_225_600_250)),
        ..MetricsSnapshot::default()
    };
    m.poll_errors.insert("github_api_status", 2);
    m.poll_errors.insert("github_auth", 1);
    m.worker_exits.insert("normal", 3);
    m.worker_exits.insert("failed", 1);
    m.parked.insert("budget_exceeded", 1);
    for s in [0.03, 0.2, 0.2, 1.7, 400.0] {
        m.poll_duration.observe(s);
    }
    m.state_write_duration
        .observe_duration(Duration::from_micros(800));
    m.host_running.insert("build-1".into(), 2);
    m.host_running.insert("local".into(), 0);
    m
}

// ---------------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------------

#[test]
fn an_empty_snapshot_is_valid_and_shows_the_build() {
    let fams = parsed(&MetricsSnapshot::default());
    assert_eq!(
        value(
            &fams,
            "baton_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert_eq!(value(&fams, "baton_polls_total", &[]), 0.0);
    assert_eq!(value(&fams, "baton_poll_duration_seconds_count", &[]), 0.0);
    // Unknown values are left out rather than shown as 0.
    for absent in [
        "baton_tracker_rate_limit_remaining",
        "baton_tracker_points_projected_per_hour",
        "baton_last_successful_poll_timestamp_seconds",
        "baton_host_running_agents",
    ] {
        assert!(fams.iter().all(|f| f.name != absent), "{absent}");
    }
    assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
}

#[test]
fn every_metric_the_issue_lists_is_there_with_its_type() {
    let fams = parsed(&busy());
    let expected = [
        ("baton_build_info", "gauge"),
        ("baton_polls_total", "counter"),
        ("baton_poll_errors_total", "counter"),
        ("baton_dispatches_total", "counter"),
        ("baton_worker_exits_total", "counter"),
        ("baton_retries_scheduled_total", "counter"),
        ("baton_parked_issues", "gauge"),
        ("baton_running_agents", "gauge"),
        ("baton_retrying_issues", "gauge"),
        ("baton_agent_tokens_total", "counter"),
        ("baton_agent_cost_usd_total", "counter"),
        ("baton_agent_turns_total", "counter"),
        ("baton_tracker_rate_limit_remaining", "gauge"),
        ("baton_tracker_rate_limit_limit", "gauge"),
        ("baton_tracker_poll_points", "gauge"),
        ("baton_tracker_points_total", "counter"),
        ("baton_tracker_poll_interval_seconds", "gauge"),
        ("baton_tracker_points_projected_per_hour", "gauge"),
        ("baton_last_successful_poll_timestamp_seconds", "gauge"),
        ("baton_poll_duration_seconds", "histogram"),
        ("baton_state_write_duration_seconds", "histogram"),
        ("baton_host_running_agents", "gauge"),
    ];
    for (name, kind) in expected {
        assert_eq!(family(&fams, name).kind, kind, "{name}");
    }
    assert_eq!(fams.len(), expected.len());
    // Counter families follow the _total convention.
    for f in fams.iter().filter(|f| f.kind == "counter") {
        assert!(f.name.ends_with("_total"), "{}", f.name);
    }
}

#[test]
fn values_come_through_exactly() {
    let fams = parsed(&busy());
    assert_eq!(value(&fams, "baton_polls_total", &[]), 12.0);
    assert_eq!(
        value(
            &fams,
            "baton_poll_errors_total",
            &[("class", "github_auth")]
        ),
        1.0
    );
    assert_eq!(
        value(&fams, "baton_worker_exits_total", &[("outcome", "failed")]),
        1.0
    );
    assert_eq!(
        value(
            &fams,
            "baton_parked_issues",
            &[("reason", "budget_exceeded")]
        ),
        1.0
    );
    assert_eq!(
        value(&fams, "baton_agent_tokens_total", &[("kind", "cache_read")]),
        40_000.0
    );
    // Floats round-trip bit for bit.
    assert_eq!(value(&fams, "baton_agent_cost_usd_total", &[]), 0.1 + 0.2);
    assert_eq!(
        value(&fams, "baton_last_successful_poll_timestamp_seconds", &[]),
        1_767_225_600.25
    );
    assert_eq!(
        value(&fams, "baton_tracker_rate_limit_remaining", &[]),
        4990.0
    );
    assert_eq!(
        value(&fams, "baton_tracker_poll_interval_seconds", &[]),
        30.316
    );
    assert_eq!(
        value(&fams, "baton_tracker_points_projected_per_hour", &[]),
        2374.0
    );
    assert_eq!(
        value(&fams, "baton_host_running_agents", &[("host", "build-1")]),
        2.0
    );
    // Histogram: 0.03 | 0.2 0.2 | 1.7 | 400 (beyond the last bound).
    let b = |le: &str| value(&fams, "baton_poll_duration_seconds_bucket", &[("le", le)]);
    assert_eq!(b("0.05"), 1.0);
    assert_eq!(b("0.25"), 3.0);
    assert_eq!(b("2.5"), 4.0);
    assert_eq!(b("120"), 4.0);
    assert_eq!(b("+Inf"), 5.0);
    assert_eq!(value(&fams, "baton_poll_duration_seconds_count", &[]), 5.0);
    assert_eq!(
        value(
            &fams,
            "baton_state_write_duration_seconds_bucket",
            &[("le", "0.001")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &fams,
            "baton_state_write_duration_seconds_bucket",
            &[("le", "0.0005")]
        ),
        0.0
    );
}

#[test]
fn counters_move_after_a_poll_a_dispatch_and_a_failure() {
    let mut m = MetricsSnapshot::default();
    let before = parsed(&m);
    let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    m.record_poll(Duration::from_millis(300), None, at);
    m.dispatches += 1;
    m.record_worker_exit("failed");
    m.record_poll(
        Duration::from_secs(2),
        Some("github_api_status"),
        at + Duration::from_secs(30),
    );
    let after = parsed(&m);
    assert_eq!(value(&before, "baton_polls_total", &[]), 0.0);
    assert_eq!(value(&after, "baton_polls_total", &[]), 2.0);
    assert_eq!(value(&after, "baton_dispatches_total", &[]), 1.0);
    assert_eq!(
        value(&after, "baton_worker_exits_total", &[("outcome", "failed")]),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "baton_poll_errors_total",
            &[("class", "github_api_status")]
        ),
        1.0
    );
    // The failed poll does not move the last success.
    assert_eq!(
        value(&after, "baton_last_successful_poll_timestamp_seconds", &[]),
        1_800_000_000.0
    );
    assert_eq!(value(&after, "baton_poll_duration_seconds_count", &[]), 2.0);
    assert_eq!(value(&after, "baton_poll_duration_seconds_sum", &[]), 2.3);
}

#[test]
fn hostile_label_values_round_trip() {
    let hostile = [
        "quote\"inside",
        "back\\slash",
        "new\nline",
        "\\\"",
        "\\n literally",
        "trailing\\",
        "ünïcødé 🚀 ✓",
        "} fake=\"1\" {",
        "",
    ];
    let mut m = MetricsSnapshot::default();
    for (i, h) in hostile.iter().enumerate() {
        m.host_running.insert(h.to_string(), i as u64);
    }
    let fams = parsed(&m);
    let f = family(&fams, "baton_host_running_agents");
    let got: BTreeMap<String, f64> = f
        .samples
        .iter()
        .map(|s| {
            assert_eq!(s.labels.len(), 1);
            (s.labels[0].1.clone(), s.value)
        })
        .collect();
    let want: BTreeMap<String, f64> = hostile
        .iter()
        .enumerate()
        .map(|(i, h)| (h.to_string(), i as f64))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn help_text_and_extra_labels_escape_through_the_writer() {
    let mut e = Exposition::default();
    e.family(
        "baton_test_seconds",
        MetricType::Histogram,
        "Line one\nline two with a \\ backslash and \"quotes\".",
    );
    static B: [f64; 2] = [0.5, 1.0];
    let mut h = Histogram::new(&B);
    h.observe(0.7);
    e.histogram("baton_test_seconds", &[("path", "a\"b\\c\nd")], &h);
    e.histogram(
        "baton_test_seconds",
        &[("path", "other")],
        &Histogram::new(&B),
    );
    let text = e.finish();
    let fams = parse(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
    assert_eq!(
        fams[0].help,
        "Line one\nline two with a \\ backslash and \"quotes\"."
    );
    assert_eq!(
        value(
            &fams,
            "baton_test_seconds_bucket",
            &[("path", "a\"b\\c\nd"), ("le", "1")]
        ),
        1.0
    );
    assert_eq!(
        value(&fams, "baton_test_seconds_count", &[("path", "other")]),
        0.0
    );
}

#[test]
fn special_floats_are_written_in_prometheus_syntax() {
    for (v, text) in [
        (f64::INFINITY, "+Inf"),
        (f64::NEG_INFINITY, "-Inf"),
        (f64::NAN, "NaN"),
        (42.0, "42"),
        (1e21, "1e21"),
        (0.000_001, "1e-6"),
    ] {
        assert_eq!(format_float(v), text);
        let back = parse_value(text).unwrap();
        assert!(back == v || (back.is_nan() && v.is_nan()), "{text}");
    }
    for v in [
        0.1,
        123.456,
        1e14 + 0.5,
        9.999e-5,
        2f64.powi(60),
        f64::MAX,
        f64::MIN_POSITIVE,
    ] {
        assert_eq!(parse_value(&format_float(v)).unwrap(), v, "{v}");
    }
}

/// The parser must be strict, or the tests above prove nothing.
#[test]
fn the_parser_rejects_malformed_expositions() {
    let head = "# HELP baton_x_total X.\n# TYPE baton_x_total counter\n";
    let hist = "# HELP baton_h H.\n# TYPE baton_h histogram\n";
    let bad = [
        "baton_x_total 1\n".to_string(),                       // no HELP/TYPE
        format!("{head}baton_x_total 1"),                      // no final newline
        format!("{head}baton_x_total 1\nbaton_x_total 2\n"),   // duplicate series
        format!("{head}baton_x_total -1\n"),                   // negative counter
        format!("{head}baton_x_total{{a=\"x\\q\"}} 1\n"),      // bad escape
        format!("{head}baton_x_total{{a=\"x}} 1\n"),           // unterminated value
        format!("{head}baton_x_total{{a=\"1\",a=\"2\"}} 1\n"), // label twice
        format!("{head}baton_x_total{{__a=\"1\"}} 1\n"),       // reserved label name
        format!("{head}baton_x_total 1 1700000000\n"),         // timestamp
        format!("{head}baton_x_total 0x10\n"),                 // hex value
        format!("{head}baton_x_total  1\n"),                   // double space
        format!("{head}\nbaton_x_total 1\n"),                  // empty line
        format!("{head}# TYPE baton_x_total gauge\n"),         // second TYPE
        format!("{head}baton_y 1\n"),                          // sample of an undeclared family
        format!("{head}# HELP baton_y Y.\n# TYPE baton_y gauge\nbaton_y 1\n{head}"), // split family
        format!("{hist}baton_h_bucket{{le=\"1\"}} 2\nbaton_h_bucket{{le=\"+Inf\"}} 1\nbaton_h_sum 1\nbaton_h_count 1\n"),
        format!("{hist}baton_h_bucket{{le=\"1\"}} 1\nbaton_h_bucket{{le=\"+Inf\"}} 2\nbaton_h_sum 1\nbaton_h_count 3\n"),
        format!("{hist}baton_h_bucket{{le=\"1\"}} 1\nbaton_h_sum 1\nbaton_h_count 1\n"),
        format!("{hist}baton_h_bucket{{le=\"2\"}} 1\nbaton_h_bucket{{le=\"1\"}} 1\nbaton_h_bucket{{le=\"+Inf\"}} 1\nbaton_h_sum 1\nbaton_h_count 1\n"),
        format!("{hist}baton_h_bucket{{le=\"+Inf\"}} 1\nbaton_h_count 1\n"),
        "# HELP other_x X.\n# TYPE other_x gauge\nother_x 1\n".to_string(),
    ];
    for text in bad {
        assert!(parse(&text).is_err(), "accepted:\n{text}");
    }
    let good = format!("{head}baton_x_total{{a=\"q\\\"\\\\\\n\"}} 1.5e3\n{hist}baton_h_bucket{{le=\"1\"}} 1\nbaton_h_bucket{{le=\"+Inf\"}} 1\nbaton_h_sum 0.5\nbaton_h_count 1\n");
    parse(&good).unwrap();
}
