//! Issue 12, failure 12: a hostile prompt template cannot wedge a render. Loop nesting is
//! bounded at compile time, the context's lists are capped, and the output is bounded.

use std::time::{Duration, Instant};

use baton::model::Issue;
use baton::workflow::template::{sample_issue, PromptTemplate, MAX_FOR_NESTING, MAX_RENDER_BYTES};

#[test]
fn nested_loops_producing_2_pow_24_iterations_are_rejected_quickly() {
    // 6 nested loops over the 16-field issue map: 16^6 = 2^24 iterations.
    let mut src = String::new();
    for n in 0..6 {
        src.push_str(&format!("{{% for k{n}, v{n} in issue %}}"));
    }
    for _ in 0..6 {
        src.push_str("{% endfor %}");
    }
    let started = Instant::now();
    let err = PromptTemplate::compile(&src, 5).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(err.class, "template_parse_error");
    assert!(
        err.message
            .contains(&format!("nested deeper than {MAX_FOR_NESTING}")),
        "{err}"
    );
    assert!(
        err.message.contains("line 5"),
        "positioned in WORKFLOW.md: {err}"
    );
}

#[test]
fn allowed_nesting_over_huge_lists_stays_bounded() {
    let mut issue = sample_issue();
    issue.labels = (0..100_000).map(|i| format!("l{i}")).collect();
    let t = PromptTemplate::compile(
        "{% for a in issue.labels %}{% for b in issue.labels %}{% for c in issue.labels %}{% endfor %}{% endfor %}{% endfor %}done",
        1,
    )
    .expect("three levels are allowed");
    let started = Instant::now();
    assert_eq!(t.render(&issue, None).unwrap(), "done");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "capped lists bound the iterations: {:?}",
        started.elapsed()
    );
}

#[test]
fn output_is_bounded_with_a_clear_error() {
    let issue = Issue {
        description: Some("x".repeat(64 * 1024)),
        labels: (0..64).map(|i| format!("l{i}")).collect(),
        ..sample_issue()
    };
    let t = PromptTemplate::compile(
        "{% for a in issue.labels %}{% for b in issue.labels %}{{ issue.description }}{% endfor %}{% endfor %}",
        1,
    )
    .unwrap();
    let err = t.render(&issue, None).unwrap_err();
    assert_eq!(err.class, "template_render_error");
    assert!(
        err.message
            .contains(&format!("exceeds {MAX_RENDER_BYTES} bytes")),
        "{err}"
    );
}
