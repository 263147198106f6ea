//! Prompt templates: strict variables/filters, Liquid gap-fillers, file positions, untrusted text.

use crate::support::tempdir::TempDir;
use baton::model::{BlockerRef, Issue};
use baton::workflow::template::{sample_issue, PromptTemplate, TemplateError};

fn issue() -> Issue {
    Issue {
        id: "I_1".into(),
        item_id: "PVTI_1".into(),
        identifier: "acme__app-7".into(),
        number: 7,
        repository: "acme/app".into(),
        title: "Fix login".into(),
        description: Some("Users cannot log in.".into()),
        priority: Some(2),
        state: "In Progress".into(),
        branch_name: None,
        url: Some("https://github.com/acme/app/issues/7".into()),
        labels: vec!["bug".into(), "auth".into()],
        blocked_by: vec![
            BlockerRef {
                id: "I_2".into(),
                identifier: "acme__app-5".into(),
                state: "Done".into(),
                terminal: true,
            },
            BlockerRef {
                id: "I_3".into(),
                identifier: "acme__app-6".into(),
                state: "Todo".into(),
                terminal: false,
            },
        ],
        closed: false,
        created_at: Some("2025-01-01T00:00:00Z".into()),
        updated_at: None,
        truncated: vec![],
    }
}

/// Compile (first line 1), validate, render for `issue()`.
fn render(src: &str, attempt: Option<u32>) -> Result<String, TemplateError> {
    let t = PromptTemplate::compile(src, 1)?;
    t.validate()?;
    t.render(&issue(), attempt)
}

fn ok(src: &str) -> String {
    render(src, None).unwrap_or_else(|e| panic!("{src:?}: {e}"))
}

fn err(src: &str) -> TemplateError {
    match render(src, None) {
        Ok(out) => panic!("{src:?} rendered {out:?}, expected an error"),
        Err(e) => e,
    }
}

#[test]
fn every_issue_field_is_available() {
    let out = ok("{{ issue.id }}|{{ issue.item_id }}|{{ issue.identifier }}|{{ issue.number }}|\
                  {{ issue.repository }}|{{ issue.title }}|{{ issue.description }}|{{ issue.priority }}|\
                  {{ issue.state }}|{{ issue.branch_name }}|{{ issue.url }}|{{ issue.labels }}|\
                  {{ issue.created_at }}|{{ issue.updated_at }}|{{ issue.closed }}");
    assert_eq!(
        out,
        "I_1|PVTI_1|acme__app-7|7|acme/app|Fix login|Users cannot log in.|2|In Progress||\
         https://github.com/acme/app/issues/7|bug, auth|2025-01-01T00:00:00Z||false"
    );
}

#[test]
fn lists_render_joined_and_iterate() {
    assert_eq!(ok("Labels: {{ issue.labels }}"), "Labels: bug, auth");
    let out = ok("{% for b in issue.blocked_by %}{{ b.identifier }}={{ b.state }}/{{ b.id }}/{{ b.terminal }};{% endfor %}");
    assert_eq!(out, "acme__app-5=Done/I_2/true;acme__app-6=Todo/I_3/false;");
    let out = ok("{% for l in issue.labels %}{% if loop.first %}[{% endif %}{{ l }}{% if not loop.last %} {% endif %}{% endfor %}]");
    assert_eq!(out, "[bug auth]");
    // An empty list prints nothing.
    let t = PromptTemplate::compile("<{{ issue.labels }}>", 1).unwrap();
    let mut i = issue();
    i.labels.clear();
    assert_eq!(t.render(&i, None).unwrap(), "<>");
}

#[test]
fn maps_cannot_be_printed() {
    let e = err("{{ issue.blocked_by }}");
    assert_eq!(e.class, "template_render_error");
    assert!(e.message.contains("line 1 column 4"), "{e}");
    assert!(e.message.contains("cannot print a map"), "{e}");
    assert!(err("{{ issue }}").message.contains("cannot print a map"));
}

#[test]
fn null_renders_empty_and_attempt_is_always_defined() {
    let src = "[{{ attempt }}]{% if attempt %}retry {{ attempt }}{% else %}first run{% endif %}";
    assert_eq!(render(src, None).unwrap(), "[]first run");
    assert_eq!(render(src, Some(1)).unwrap(), "[1]retry 1");
    assert_eq!(render(src, Some(3)).unwrap(), "[3]retry 3");
    assert_eq!(ok("[{{ issue.branch_name }}]"), "[]");
}

#[test]
fn elsif_works_like_liquid() {
    let src = "{% if attempt | eq: 1 %}one{% elsif attempt | eq: 2 %}two{%- elsif attempt -%} many {% else %}none{% endif %}";
    assert_eq!(render(src, None).unwrap(), "none");
    assert_eq!(render(src, Some(1)).unwrap(), "one");
    assert_eq!(render(src, Some(2)).unwrap(), "two");
    assert_eq!(render(src, Some(5)).unwrap(), "many ");
    // upon's own spelling still works, and `elsif` in plain text or strings is left alone.
    assert_eq!(
        ok("elsif {% if false %}a{% else if true %}{{ \"elsif\" }}{% endif %}"),
        "elsif elsif"
    );
}

#[test]
fn filter_eq_ne_and_or() {
    assert_eq!(ok("{{ issue.state | eq: \"In Progress\" }}"), "true");
    assert_eq!(ok("{{ issue.state | eq: \"in progress\" }}"), "false");
    assert_eq!(
        ok("{{ issue.priority | eq: 2 }} {{ issue.priority | eq: 2.0 }}"),
        "true true"
    );
    assert_eq!(ok("{{ issue.state | ne: \"Todo\" }}"), "true");
    assert_eq!(ok("{{ attempt | eq: attempt }}"), "true");
    assert_eq!(
        ok("{{ issue.closed | and: true }} {{ true | and: issue.title }}"),
        "false true"
    );
    assert_eq!(
        ok("{{ issue.closed | or: issue.labels }} {{ false | or: attempt }}"),
        "true false"
    );
    assert_eq!(
        ok("{% if issue.state | eq: \"In Progress\" | and: issue.description %}yes{% endif %}"),
        "yes"
    );
}

#[test]
fn filter_contains() {
    assert_eq!(ok("{{ issue.labels | contains: \"bug\" }}"), "true");
    assert_eq!(ok("{{ issue.labels | contains: \"Bug\" }}"), "false");
    assert_eq!(ok("{{ issue.title | contains: \"login\" }}"), "true");
    assert_eq!(ok("{{ issue.branch_name | contains: \"x\" }}"), "false");
    assert_eq!(
        ok("{% for b in issue.blocked_by %}{{ b | contains: \"state\" }}{% endfor %}"),
        "truetrue"
    );
    let e = err("{{ issue.number | contains: \"7\" }}");
    assert!(
        e.message
            .contains("filter `contains` needs a string, list or map"),
        "{e}"
    );
    assert!(e.message.starts_with("line 1 column "), "{e}");
}

#[test]
fn filter_default() {
    assert_eq!(ok("{{ issue.branch_name | default: \"main\" }}"), "main");
    assert_eq!(ok("{{ issue.title | default: \"untitled\" }}"), "Fix login");
    assert_eq!(ok("{{ attempt | default: 0 }}"), "0");
    assert_eq!(ok("{{ issue.closed | default: \"open\" }}"), "open");
    assert_eq!(render("{{ attempt | default: 0 }}", Some(2)).unwrap(), "2");
}

#[test]
fn filter_join_upcase_downcase_size_plus() {
    assert_eq!(ok("{{ issue.labels | join: \" + \" }}"), "bug + auth");
    assert_eq!(
        ok("{{ issue.title | upcase }} {{ issue.state | downcase }}"),
        "FIX LOGIN in progress"
    );
    assert_eq!(ok("[{{ issue.branch_name | upcase }}]"), "[]");
    assert_eq!(
        ok("{{ issue.labels | size }} {{ issue.blocked_by | size }} {{ issue.title | size }} {{ issue.branch_name | size }}"),
        "2 2 9 0"
    );
    assert_eq!(
        ok("{{ issue.number | plus: 1 }} {{ attempt | plus: 1 }} {{ 1 | plus: 0.5 }}"),
        "8 1 1.5"
    );
    assert_eq!(render("{{ attempt | plus: 1 }}", Some(2)).unwrap(), "3");
    assert!(err("{{ issue.title | plus: 1 }}")
        .message
        .contains("filter `plus` needs numbers"));
    assert!(err("{{ 9223372036854775807 | plus: 1 }}")
        .message
        .contains("overflow"));
    assert!(err("{{ issue.number | upcase }}")
        .message
        .contains("filter `upcase` needs a string"));
    assert!(err("{{ issue.number | size }}")
        .message
        .contains("filter `size` needs"));
    let e = err("{{ issue.labels | join }}");
    assert!(e.message.contains("wrong number of arguments"), "{e}");
}

#[test]
fn unknown_variable_fails_with_its_name_and_file_position() {
    let t = PromptTemplate::compile("Hello\n  {{ issue.titel }}\n", 10).unwrap();
    let e = t.validate().unwrap_err();
    assert_eq!(e.class, "template_render_error");
    assert!(
        e.message
            .starts_with("line 11 column 6: unknown variable `issue.titel`"),
        "{e}"
    );
    assert!(e.message.contains("issue fields: id, item_id"), "{e}");

    let e = err("{{ isue.title }}");
    assert!(e.message.contains("unknown variable `isue.title`"), "{e}");
    let e = err("{% for b in issue.blocked_by %}{{ b.identifer }}{% endfor %}");
    assert!(e.message.contains("unknown variable `b.identifer`"), "{e}");
    let e = err("{{ issue.title.length }}");
    assert!(e.message.contains("`issue.title.length`"), "{e}");
}

#[test]
fn unknown_filter_fails_with_its_name() {
    let e = err("ok\n{{ issue.title | shout }}");
    assert_eq!(e.class, "template_render_error");
    assert!(
        e.message
            .starts_with("line 2 column 18: unknown filter `shout`"),
        "{e}"
    );
    let e = err("{% if issue.title | shout %}x{% endif %}");
    assert!(e.message.contains("unknown filter `shout`"), "{e}");
}

#[test]
fn strictness_in_a_branch_only_reached_on_retries_is_caught_at_load() {
    let src = "Work on it.\n{% if attempt %}\nRetry: {{ issue.previous_error }}\n{% endif %}";
    let t = PromptTemplate::compile(src, 5).unwrap();
    // The first run alone would not notice.
    assert!(t.render(&issue(), None).is_ok());
    let e = t.validate().unwrap_err();
    assert!(
        e.message
            .starts_with("line 7 column 11: unknown variable `issue.previous_error`"),
        "{e}"
    );
    let src = "{% if attempt %}{{ attempt | shout }}{% endif %}";
    let e = PromptTemplate::compile(src, 1)
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(e.message.contains("unknown filter `shout`"), "{e}");
}

#[test]
fn parse_errors_have_file_positions() {
    let e = PromptTemplate::compile("line one\n{% if issue.title %}\nno end", 3).unwrap_err();
    assert_eq!(e.class, "template_parse_error");
    assert!(e.message.starts_with("line 4 column "), "{e}");
    let e = PromptTemplate::compile("a\nb {{ issue.title", 1).unwrap_err();
    assert_eq!(e.class, "template_parse_error");
    assert!(
        e.message
            .starts_with("line 2 column 3: invalid template syntax: `{{` is never closed"),
        "{e}"
    );
    let e = PromptTemplate::compile("a {% if x %}\n{# note", 1).unwrap_err();
    assert!(
        e.message
            .starts_with("line 2 column 1: invalid template syntax: `{#` is never closed"),
        "{e}"
    );
    let e = PromptTemplate::compile("{% unless x %}{% endunless %}", 1).unwrap_err();
    assert!(e.message.starts_with("line 1 column 4"), "{e}");
    // Liquid comparison operators are not upon syntax.
    let e = PromptTemplate::compile("{% if attempt == 1 %}x{% endif %}", 1).unwrap_err();
    assert_eq!(e.class, "template_parse_error");
    assert!(e.message.starts_with("line 1 column 15"), "{e}");
}

#[test]
fn positions_count_characters_and_survive_elsif_rewrites() {
    // Multibyte text before the error; columns are characters in the file.
    let e = err("héllo — 世界 {{ issue.titel }}");
    assert!(e.message.starts_with("line 1 column 15:"), "{e}");
    // After an `elsif` on the same line (rewritten 2 bytes longer), still the file's column.
    let e = err("{% if false %}{% elsif true %}{{ issue.nope }}{% endif %}");
    assert!(e.message.starts_with("line 1 column 34:"), "{e}");
    let e = PromptTemplate::compile("{% if a %}{% elsif b %}{{ x %}", 1).unwrap_err();
    assert!(e.message.starts_with("line 1 column 29:"), "{e}");
    // An error in the elsif tag itself points at `elsif`.
    let e = PromptTemplate::compile("ü\n{% if a %}\n  {%   elsif %}{% endif %}", 1).unwrap_err();
    assert!(e.message.starts_with("line 3 column "), "{e}");
    // Lots of multibyte text then an error at the very end.
    let src = format!("{}\n{{{{ issue.zzz }}}}", "日本語".repeat(200));
    let e = err(&src);
    assert!(e.message.starts_with("line 2 column 4:"), "{e}");
}

#[test]
fn issue_text_is_data_never_template_syntax() {
    let mut i = issue();
    i.title = "{{ attempt }} {% if true %}pwn{% endif %} {{".into();
    i.description = Some("}} %} {# {{ issue.id }} \u{0} \u{202e} 🙂".into());
    i.labels = vec!["{{ label }}".into()];
    let t = PromptTemplate::compile(
        "T={{ issue.title }} D={{ issue.description }} L={{ issue.labels }}",
        1,
    )
    .unwrap();
    assert_eq!(
        t.render(&i, Some(1)).unwrap(),
        "T={{ attempt }} {% if true %}pwn{% endif %} {{ D=}} %} {# {{ issue.id }} \u{0} \u{202e} 🙂 L={{ label }}"
    );
}

#[test]
fn hostile_issue_values_never_panic() {
    let t = PromptTemplate::compile(
        "{{ issue.title | upcase }}{{ issue.title | size }}{{ issue.number | plus: 1 }}\
         {{ issue.labels | join: \",\" }}{{ issue.title | contains: \"x\" }}",
        1,
    )
    .unwrap();
    let mut i = issue();
    i.number = u64::MAX;
    i.title = "ß\u{0}\u{FFFF}".repeat(1000);
    i.labels = vec![String::new(); 1000];
    i.priority = Some(u32::MAX);
    let e = t.render(&i, Some(u32::MAX)).unwrap_err();
    assert!(e.message.contains("overflow"), "{e}");
    i.number = 1;
    assert!(t.render(&i, Some(u32::MAX)).is_ok());
}

#[test]
fn validate_uses_a_fully_populated_issue() {
    let s = sample_issue();
    assert!(s.description.is_some() && s.priority.is_some() && s.branch_name.is_some());
    assert!(s.url.is_some() && s.created_at.is_some() && s.updated_at.is_some());
    assert!(!s.labels.is_empty() && !s.blocked_by.is_empty());
    // Templates that index into lists validate because the sample lists are non-empty.
    let t = PromptTemplate::compile(
        "{{ issue.labels.0 }} {{ issue.blocked_by.0.identifier }}",
        1,
    )
    .unwrap();
    t.validate().unwrap();
}

#[test]
fn realistic_symphony_style_template() {
    let src = r#"You are working on GitHub issue {{ issue.identifier }} in {{ issue.repository }}.

{% if attempt %}
This is retry attempt #{{ attempt }}. Resume from the current workspace state instead of starting over.
{% endif %}

Issue context:
Identifier: {{ issue.identifier }}
Title: {{ issue.title }}
Current status: {{ issue.state }}
Labels: {{ issue.labels }}
URL: {{ issue.url | default: "(none)" }}
Priority: {{ issue.priority | default: "unset" }}

Description:
{% if issue.description %}
{{ issue.description }}
{% else %}
No description provided.
{% endif %}
{% if issue.blocked_by | size %}
Blocked by:
{% for b in issue.blocked_by %}- {{ b.identifier }} ({{ b.state }}{% if b.terminal %}, done{% endif %})
{% endfor %}{% endif %}
{% if issue.labels | contains: "bug" %}Write a failing test first.{% elsif issue.state | eq: "Todo" %}Move the issue to In Progress.{% else %}Carry on.{% endif %}"#;
    let t = PromptTemplate::compile(src, 12).unwrap();
    t.validate().unwrap();
    let first = t.render(&issue(), None).unwrap();
    assert!(first.starts_with("You are working on GitHub issue acme__app-7 in acme/app.\n"));
    assert!(!first.contains("retry attempt"));
    assert!(first.contains("Labels: bug, auth\n"));
    assert!(first.contains("Priority: 2\n"));
    assert!(first.contains("\nUsers cannot log in.\n"));
    assert!(first.contains("- acme__app-5 (Done, done)\n- acme__app-6 (Todo)\n"));
    assert!(first.ends_with("Write a failing test first."));
    let mut i = issue();
    i.labels.clear();
    i.description = None;
    i.state = "Todo".into();
    let retry = t.render(&i, Some(2)).unwrap();
    assert!(retry.contains("This is retry attempt #2."));
    assert!(retry.contains("No description provided."));
    assert!(retry.contains("Labels: \n"));
    assert!(retry.ends_with("Move the issue to In Progress."));
}

#[test]
fn syntax_errors_explain_liquid_habits() {
    let cases = [
        ("{% unless x %}{% endunless %}", "line 1 column 4: invalid template syntax: unknown tag `unless`"),
        ("{% elseif x %}{% endif %}", "line 1 column 4: invalid template syntax: unknown tag `elseif`"),
        ("{% if attempt == 1 %}x{% endif %}", "line 1 column 15: invalid template syntax: unexpected character `=`; there are no comparison operators"),
        ("{% if x %}", "line 1 column 1: invalid template syntax: unclosed `if` block"),
        ("x\n{% endif %}", "line 2 column 1: invalid template syntax: unexpected `endif` block"),
        ("a }} b", "line 1 column 3: invalid template syntax: unexpected end expression; to print a literal"),
    ];
    for (src, want) in cases {
        let e = PromptTemplate::compile(src, 1).unwrap_err();
        assert_eq!(e.class, "template_parse_error");
        assert!(e.message.starts_with(want), "{src:?}: {e}");
    }
    let e = err("{% include \"x\" %}");
    assert!(e.message.contains("`include` is not supported"), "{e}");
    let e = err("{{ issue.labels.5 }}");
    assert!(e.message.contains("index out of bounds"), "{e}");
}

#[test]
fn literal_delimiters_can_be_printed_as_strings() {
    assert_eq!(ok("{{ \"{{\" }} x {{ \"}}\" }} {{ \"{%\" }}"), "{{ x }} {%");
}

struct NoEnv;
impl baton::workflow::config::ConfigEnv for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
    fn home(&self) -> Option<std::path::PathBuf> {
        None
    }
    fn gh_auth_token(&self) -> Option<String> {
        None
    }
}

#[test]
fn workflow_loader_reports_template_errors_at_file_lines() {
    let dir = TempDir::new("template-test");
    let path = dir.join("WORKFLOW.md");
    let front = "---\npolling:\n  interval_ms: 5000\n---\n\n";
    std::fs::write(&path, format!("{front}Work on {{{{ issue.title }}}}.\n\n{{% if attempt %}}{{{{ attempt | shout }}}}{{% endif %}}\n")).unwrap();
    let e = baton::workflow::loader::load_workflow(&path, &NoEnv).unwrap_err();
    assert_eq!(e.class, "template_render_error");
    assert!(
        e.message
            .starts_with("line 8 column 30: unknown filter `shout`"),
        "{e}"
    );

    std::fs::write(&path, format!("{front}Work on it.\n{{% elsif %}}\n")).unwrap();
    let e = baton::workflow::loader::load_workflow(&path, &NoEnv).unwrap_err();
    assert_eq!(e.class, "template_parse_error");
    assert!(e.message.starts_with("line 7 column "), "{e}");

    std::fs::write(&path, format!("{front}{{% if attempt %}}Retry {{{{ attempt }}}}.{{% elsif issue.closed %}}Closed.{{% endif %}}\n")).unwrap();
    let wf = baton::workflow::loader::load_workflow(&path, &NoEnv).unwrap();
    assert_eq!(wf.template.render(&issue(), Some(2)).unwrap(), "Retry 2.");
}

#[test]
fn documented_extras_work() {
    assert_eq!(ok("[{{ issue?.nothing }}]"), "[]");
    assert_eq!(ok("a  {{- issue.number -}}  b"), "a7b");
    assert_eq!(
        ok("{% with issue.labels | join: \"/\" as all %}{{ all }}{% endwith %}"),
        "bug/auth"
    );
    assert_eq!(
        ok("{% if not issue.closed %}open{% endif %}{# note #}"),
        "open"
    );
    assert_eq!(
        ok("{% for l in issue.labels %}{{ loop.index }}{% endfor %}"),
        "01"
    );
    assert_eq!(
        ok("{% if issue.labels | contains: \"bug\" | and: issue.description %}yes{% endif %}"),
        "yes"
    );
}
