//! GitHub Projects v2 tracker against the fake GitHub (spec §17.3).

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton::model::Issue;
use baton::tracker::github::GithubTracker;
use baton::tracker::{Tracker, TrackerError, TrackerErrorKind};
use baton::workflow::config::{OwnerType, TrackerConfig};
use serde_json::json;
use support::fake_github::{
    issue_node_id, BoardFixture, FakeGithub, Fault, IssueFixture, FAKE_TOKEN,
};

fn acme() -> FakeGithub {
    FakeGithub::from_fixture("fixtures/boards/acme.json")
}

/// A change to [`FakeGithub::tracker_config`].
type Edit = fn(&mut TrackerConfig);

/// A tracker for `fake` with [`FakeGithub::tracker_config`].
fn tracker(fake: &FakeGithub) -> GithubTracker {
    tracker_with(fake, |_| {})
}

/// A tracker for `fake` with [`FakeGithub::tracker_config`] changed by `edit`.
fn tracker_with(fake: &FakeGithub, edit: impl FnOnce(&mut TrackerConfig)) -> GithubTracker {
    let mut c = fake.tracker_config();
    edit(&mut c);
    GithubTracker::new(&c).unwrap()
}

/// A tracker for `fake` that has resolved its project.
fn validated(fake: &FakeGithub) -> GithubTracker {
    let t = tracker(fake);
    t.validate().unwrap();
    t
}

/// A tracker for `fake` (validated), `acme/app#1`'s node id, and that id alone as a list.
fn validated_with_issue_1(fake: &FakeGithub) -> (GithubTracker, String, Vec<String>) {
    let id = issue_node_id("acme/app#1");
    (validated(fake), id.clone(), vec![id])
}

/// A board of `n` issues all in `status`, and a tracker reading it 100 items a page.
fn generated_100_a_page(n: u64, status: &str) -> (FakeGithub, GithubTracker) {
    let fake = FakeGithub::start(BoardFixture::generated(n, status));
    let t = tracker_with(&fake, |c| c.page_size = 100);
    (fake, t)
}

fn idents(v: &[Issue]) -> Vec<&str> {
    v.iter().map(|i| i.identifier.as_str()).collect()
}

fn find<'a>(v: &'a [Issue], ident: &str) -> &'a Issue {
    v.iter()
        .find(|i| i.identifier == ident)
        .unwrap_or_else(|| panic!("{ident} missing"))
}

#[test]
fn resolves_org_project_once_and_sends_auth_and_user_agent() {
    let fake = acme();
    let t = validated(&fake);
    t.validate().unwrap();
    t.fetch_candidate_issues().unwrap();
    t.fetch_candidate_issues().unwrap();
    assert_eq!(
        fake.operations(),
        vec!["ResolveOrgProject", "ProjectItems", "ProjectItems"],
        "the project is resolved once and cached"
    );
    let req = &fake.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(
        req.authorization.as_deref(),
        Some(format!("Bearer {FAKE_TOKEN}").as_str())
    );
    assert!(req.user_agent.as_deref().unwrap().starts_with("baton/"));
    assert_eq!(req.variables["owner"], "acme");
    assert_eq!(req.variables["number"], 7);
    // reset_cache (WORKFLOW reload) forces a new resolution.
    t.reset_cache();
    t.validate().unwrap();
    assert_eq!(fake.operations().last().unwrap(), "ResolveOrgProject");
}

#[test]
fn owner_type_user_uses_user_lookup() {
    let mut board = BoardFixture::load("fixtures/boards/acme.json");
    board.owner_type = "user".into();
    let fake = FakeGithub::start(board);
    let t = tracker_with(&fake, |c| c.owner_type = OwnerType::User);
    t.validate().unwrap();
    assert_eq!(fake.operations(), vec!["ResolveUserProject"]);
    assert!(fake.requests()[0].query.contains("user(login: $owner)"));

    // The same board looked up as an organization does not resolve; the error names the owner.
    let t = tracker_with(&fake, |c| c.owner_type = OwnerType::Organization);
    let e = t.validate().unwrap_err();
    assert_eq!(e.kind, TrackerErrorKind::MissingTrackerProject);
    assert!(e.message.contains("organization \"acme\""), "{e}");
}

#[test]
fn validation_errors_name_owner_number_and_field() {
    let fake = acme();
    // A missing project (owner, number) or status field, each named in the message.
    let cases: [(Edit, &str, &str); 2] = [
        (|c| c.project_number = Some(42), "#42", "acme"),
        (|c| c.status_field = "Stage".into(), "\"Stage\"", "#7"),
    ];
    for (edit, a, b) in cases {
        let e = tracker_with(&fake, edit).validate().unwrap_err();
        assert_eq!(e.kind, TrackerErrorKind::MissingTrackerProject);
        assert!(e.message.contains(a) && e.message.contains(b), "{e}");
    }

    let estimate = |c: &mut TrackerConfig| c.status_field = "Estimate".into();
    let e = tracker_with(&fake, estimate).validate().unwrap_err();
    assert!(e.message.contains("not a single-select"), "{e}");

    // A failed validation is not cached: the next call asks again.
    fake.clear_requests();
    let t = tracker_with(&fake, estimate);
    assert!(t.validate().is_err());
    assert!(t.validate().is_err());
    assert_eq!(fake.request_count(), 2);
}

#[test]
fn constructor_rejects_bad_config_without_requests() {
    use TrackerErrorKind::{MissingTrackerProject, MissingTrackerToken, UnsupportedTrackerKind};
    let fake = acme();
    let cases: [(Edit, TrackerErrorKind); 5] = [
        (|c| c.kind = Some("linear".into()), UnsupportedTrackerKind),
        (|c| c.kind = None, UnsupportedTrackerKind),
        (|c| c.token = None, MissingTrackerToken),
        (|c| c.owner = None, MissingTrackerProject),
        (|c| c.project_number = None, MissingTrackerProject),
    ];
    for (edit, kind) in cases {
        let mut c = fake.tracker_config();
        edit(&mut c);
        assert_eq!(GithubTracker::new(&c).unwrap_err().kind, kind);
    }
    assert_eq!(fake.request_count(), 0);
}

#[test]
fn candidates_filter_status_repos_closed_and_drop_non_issues() {
    let fake = acme();
    let t = tracker_with(&fake, |c| {
        c.repos = vec!["acme/app".into(), "ACME/lib".into()]
    });
    let got = t.fetch_candidate_issues().unwrap();
    // Board order; #7 closed, #9 other repo, #11 Done, #12 no Status, #13 archived, #14 In Review,
    // the draft, the PR and the redacted item are all absent. Labels stay for the orchestrator.
    assert_eq!(
        idents(&got),
        vec![
            "acme__app-1",
            "acme__app-2",
            "acme__lib-3",
            "acme__app-4",
            "acme__app-6",
            "acme__app-8",
            "acme__app-10"
        ]
    );
    let two = find(&got, "acme__app-2");
    assert_eq!(two.labels, vec!["baton", "bug"]);
    assert_eq!(two.priority, Some(1));
    assert_eq!(two.repository, "acme/app");
    assert_eq!(two.number, 2);
    assert_eq!(two.id, issue_node_id("acme/app#2"));
    assert!(two.item_id.starts_with("PVTI_"));
    assert_eq!(
        two.url.as_deref(),
        Some("https://github.com/acme/app/issues/2")
    );
    assert_eq!(two.created_at.as_deref(), Some("2026-01-03T10:00:00Z"));
    assert_eq!(find(&got, "acme__app-1").priority, Some(2));
    assert_eq!(
        find(&got, "acme__app-1").description.as_deref(),
        Some("Uploads fail on flaky networks.")
    );
    assert_eq!(find(&got, "acme__lib-3").priority, None);
    assert_eq!(find(&got, "acme__lib-3").state, "In Progress");
    assert!(got.iter().all(|i| !i.closed));
}

#[test]
fn board_counts_dropped_items() {
    let fake = acme();
    let t = tracker(&fake);
    let board = t.fetch_board(None).unwrap();
    let d = &board.dropped;
    assert_eq!(
        (
            d.drafts,
            d.pull_requests,
            d.redacted,
            d.no_status,
            d.malformed
        ),
        (1, 1, 1, 1, 0)
    );
    assert!(
        board.issues.iter().all(|i| i.identifier != "acme__app-13"),
        "archived items are hidden"
    );
}

#[test]
fn blockers_resolve_status_on_project_else_open_closed() {
    let fake = acme();
    let t = tracker(&fake);
    let got = t.fetch_candidate_issues().unwrap();
    let four = &find(&got, "acme__app-4").blocked_by;
    assert_eq!(four.len(), 1);
    assert_eq!(
        (
            four[0].identifier.as_str(),
            four[0].state.as_str(),
            four[0].terminal
        ),
        ("acme__lib-3", "In Progress", false)
    );
    assert_eq!(four[0].id, issue_node_id("acme/lib#3"));
    let six: Vec<(&str, &str, bool)> = find(&got, "acme__app-6")
        .blocked_by
        .iter()
        .map(|b| (b.identifier.as_str(), b.state.as_str(), b.terminal))
        .collect();
    assert_eq!(
        six,
        vec![
            ("acme__lib-9", "CLOSED", true),
            ("acme__app-11", "Done", true)
        ]
    );

    // Refresh reads blockers through their own project items.
    let r = t
        .fetch_issue_states_by_ids(&[issue_node_id("acme/app#4")])
        .unwrap();
    assert_eq!(r[0].blocked_by[0].state, "In Progress");
    fake.set_status("acme/lib#3", Some("Done"));
    let r = t
        .fetch_issue_states_by_ids(&[issue_node_id("acme/app#4")])
        .unwrap();
    assert_eq!(
        (
            r[0].blocked_by[0].state.as_str(),
            r[0].blocked_by[0].terminal
        ),
        ("Done", true)
    );
}

#[test]
fn blockers_degrade_to_empty_when_schema_lacks_them_and_stop_asking() {
    let fake = acme();
    fake.set_supports_dependencies(false);
    let t = tracker(&fake);
    let got = t.fetch_candidate_issues().unwrap();
    assert!(got.iter().all(|i| i.blocked_by.is_empty()));
    assert_eq!(find(&got, "acme__app-4").identifier, "acme__app-4");
    t.fetch_candidate_issues().unwrap();
    t.fetch_issue_states_by_ids(&[issue_node_id("acme/app#4")])
        .unwrap();
    assert_eq!(
        fake.operations(),
        vec![
            "ResolveOrgProject",
            "ProjectItems",
            "ProjectItemsNoDeps",
            "ProjectItemsNoDeps",
            "RefreshRunning"
        ]
    );
    assert!(!t.dependencies_supported());
}

#[test]
fn other_validation_errors_are_errors_not_degradation() {
    let fake = acme();
    let t = validated(&fake);
    fake.push_fault(Fault::raw(200, json!({"errors":[{"extensions":{"code":"undefinedField","typeName":"Issue","fieldName":"frobnicate"},"message":"Field 'frobnicate' doesn't exist on type 'Issue'"}]}).to_string()));
    let e = t.fetch_candidate_issues().unwrap_err();
    assert_eq!(e.kind, TrackerErrorKind::Query);
    assert_eq!(e.class, "github_graphql_errors");
    assert!(t.dependencies_supported());
}

#[test]
fn pagination_preserves_order_over_three_pages() {
    let fake = FakeGithub::start(BoardFixture::generated(7, "Todo"));
    let t = tracker_with(&fake, |c| c.page_size = 3);
    let got = t.fetch_candidate_issues().unwrap();
    let want: Vec<String> = (1..=7).map(|n| format!("acme__app-{n}")).collect();
    assert_eq!(
        idents(&got),
        want.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let reqs = fake.requests();
    let pages: Vec<_> = reqs
        .iter()
        .filter(|r| r.operation == "ProjectItems")
        .collect();
    assert_eq!(pages.len(), 3);
    assert!(pages[0].variables["after"].is_null());
    assert_eq!(pages[0].variables["first"], 3);
    assert!(pages[1].variables["after"].is_string());
    assert_ne!(pages[1].variables["after"], pages[2].variables["after"]);
}

#[test]
fn missing_end_cursor_with_next_page_is_typed_error() {
    let fake = FakeGithub::start(BoardFixture::generated(5, "Todo"));
    fake.set_break_end_cursor(true);
    let e = tracker_with(&fake, |c| c.page_size = 2)
        .fetch_candidate_issues()
        .unwrap_err();
    assert_eq!(e.kind, TrackerErrorKind::Pagination);
    assert_eq!(e.class, "github_missing_end_cursor");
}

#[test]
fn closed_issues_are_terminal_whatever_their_status() {
    let fake = acme();
    let t = tracker(&fake);
    let done = t.fetch_issues_by_states(&["Done".into()]).unwrap();
    // #11 is Done; #7 is closed but still in Todo: terminal too.
    assert_eq!(idents(&done), vec!["acme__app-7", "acme__app-11"]);
    assert!(find(&done, "acme__app-7").closed);
    let r = t
        .fetch_issue_states_by_ids(&[issue_node_id("acme/app#7")])
        .unwrap();
    assert!(r[0].closed);
    assert_eq!(r[0].state, "Todo");
    // Closing a running issue shows up in refresh and removes it from candidates.
    fake.close_issue("acme/app#1");
    assert!(
        t.fetch_issue_states_by_ids(&[issue_node_id("acme/app#1")])
            .unwrap()[0]
            .closed
    );
    assert!(t
        .fetch_candidate_issues()
        .unwrap()
        .iter()
        .all(|i| i.identifier != "acme__app-1"));
    let by_state = t.fetch_issues_by_states(&["In Review".into()]).unwrap();
    assert_eq!(idents(&by_state), vec!["acme__app-14"]);
}

#[test]
fn refresh_by_ids_reflects_changes_and_omits_gone_issues() {
    let fake = acme();
    let t = tracker(&fake);
    let ids: Vec<String> = [
        "acme/app#1",
        "acme/app#2",
        "acme/lib#3",
        "acme/app#4",
        "acme/app#6",
    ]
    .iter()
    .map(|r| issue_node_id(r))
    .collect();
    fake.set_status("acme/app#1", Some("In Review"));
    fake.remove_label("acme/app#1", "baton");
    fake.delete_issue("acme/app#2");
    fake.remove_item("acme/lib#3");
    fake.archive_item("acme/app#4");
    fake.clear_requests();
    let got = t.fetch_issue_states_by_ids(&ids).unwrap();
    assert_eq!(idents(&got), vec!["acme__app-1", "acme__app-6"]);
    let one = find(&got, "acme__app-1");
    assert_eq!(one.state, "In Review");
    assert!(one.labels.is_empty());
    assert_eq!(one.priority, Some(2));
    assert!(one.item_id.starts_with("PVTI_"));
    assert_eq!(
        fake.operations(),
        vec!["ResolveOrgProject", "RefreshIssues"]
    );
    assert_eq!(
        fake.requests()[1].variables["ids"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

#[test]
fn refresh_picks_the_item_on_our_project() {
    let mut board = BoardFixture::empty("acme", 7);
    let mut i = IssueFixture::new("acme/app", 1, "multi");
    i.other_projects = vec!["PVT_someoneelse".into()];
    board.push_issue(i, Some("In Progress"));
    let fake = FakeGithub::start(board);
    let t = tracker(&fake);
    let got = t
        .fetch_issue_states_by_ids(&[issue_node_id("acme/app#1")])
        .unwrap();
    assert_eq!(got[0].state, "In Progress");
}

#[test]
fn refresh_failures_are_errors_not_omissions() {
    let fake = acme();
    let (t, _, ids) = validated_with_issue_1(&fake);
    // The GitHub tracker keeps its stable class names (logs, `baton check`, the API).
    for (fault, kind, class) in [
        (
            Fault::BadGateway,
            TrackerErrorKind::Status,
            "github_api_status",
        ),
        (
            Fault::SecondaryRateLimit {
                status: 403,
                retry_after: Some(30),
            },
            TrackerErrorKind::RateLimited,
            "github_rate_limited",
        ),
        (
            Fault::Garbage,
            TrackerErrorKind::Payload,
            "github_unknown_payload",
        ),
        (Fault::Unauthorized, TrackerErrorKind::Auth, "github_auth"),
    ] {
        fake.push_fault(fault);
        let e = t.fetch_issue_states_by_ids(&ids).unwrap_err();
        assert_eq!((e.kind, e.class), (kind, class));
        assert!(e.to_string().starts_with(&format!("{class}: ")), "{e}");
    }
    // A malformed record fails the refresh instead of being silently omitted.
    fake.push_fault(Fault::raw(200, json!({"data":{"nodes":[{"__typename":"Issue","id":ids[0],"title":"x","state":"OPEN","repository":{"nameWithOwner":"acme/app"},
            "projectItems":{"nodes":[{"id":"PVTI_1","isArchived":false,"project":{"id":fake.project_id()},"status":{"__typename":"ProjectV2ItemFieldSingleSelectValue","name":"Todo","optionId":"x"}}]}}]}}).to_string()));
    let e = t.fetch_issue_states_by_ids(&ids).unwrap_err();
    assert_eq!(e.kind, TrackerErrorKind::Payload);
    assert!(e.message.contains("number"), "{e}");
}

#[test]
fn more_than_100_ids_are_chunked() {
    let fake = FakeGithub::start(BoardFixture::generated(150, "In Progress"));
    let t = tracker(&fake);
    let mut ids = ids(1..=150);
    ids.push(ids[0].clone()); // duplicates are asked once
    let got = t.fetch_issue_states_by_ids(&ids).unwrap();
    assert_eq!(got.len(), 150);
    let sizes: Vec<usize> = fake
        .requests()
        .iter()
        .filter(|r| r.operation == "RefreshIssues")
        .map(|r| r.variables["ids"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, vec![100, 50]);
}

#[test]
fn empty_inputs_make_no_request() {
    let fake = acme();
    let t = tracker(&fake);
    assert!(t.fetch_issues_by_states(&[]).unwrap().is_empty());
    assert!(t.fetch_issue_states_by_ids(&[]).unwrap().is_empty());
    assert!(t
        .fetch_issue_states_by_ids(&["  ".into()])
        .unwrap()
        .is_empty());
    assert_eq!(fake.request_count(), 0);
}

#[test]
fn error_classes_map_from_faults() {
    let fake = acme();
    let t = validated(&fake);
    // The candidates read's error when `fault` is served.
    let fails = |fault: Fault| {
        fake.push_fault(fault);
        t.fetch_candidate_issues().unwrap_err()
    };
    let before = SystemTime::now();
    let e = fails(Fault::SecondaryRateLimit {
        status: 403,
        retry_after: Some(30),
    });
    assert_eq!(e.kind, TrackerErrorKind::RateLimited);
    let wait = e.retry_at.unwrap().duration_since(before).unwrap();
    assert!(
        wait >= Duration::from_secs(29) && wait <= Duration::from_secs(40),
        "{wait:?}"
    );

    let e = fails(Fault::SecondaryRateLimit {
        status: 429,
        retry_after: None,
    });
    assert_eq!(e.kind, TrackerErrorKind::RateLimited);
    assert!(e.retry_at.unwrap().duration_since(before).unwrap() >= Duration::from_secs(60));

    let e = fails(Fault::SecondaryRateLimit {
        status: 403,
        retry_after: None,
    });
    assert!(e.retry_at.unwrap().duration_since(before).unwrap() >= Duration::from_secs(60));

    for spelling in ["RATE_LIMITED", "RATE_LIMIT"] {
        for remaining in [0, 1] {
            let e = fails(Fault::PrimaryRateLimit {
                spelling,
                remaining,
            });
            assert_eq!(e.kind, TrackerErrorKind::RateLimited, "{spelling}");
            // The fake's reset (year 2100) is far away: the wait is clamped to one hour.
            let wait = e.retry_at.unwrap().duration_since(before).unwrap();
            assert!(
                wait <= Duration::from_secs(3600 + 60) && wait >= Duration::from_secs(3500),
                "{wait:?}"
            );
        }
    }

    let e = fails(Fault::Unauthorized);
    assert_eq!(e.kind, TrackerErrorKind::Auth);
    assert!(e.retry_at.is_none(), "401 is not a rate limit");

    let e = fails(Fault::InsufficientScopes);
    assert_eq!(e.kind, TrackerErrorKind::Auth);
    assert!(e.message.contains("read:project"));

    for (fault, kind) in [
        (Fault::BadGateway, TrackerErrorKind::Status),
        (Fault::raw(500, "oops"), TrackerErrorKind::Status),
        (Fault::Garbage, TrackerErrorKind::Payload),
        (
            Fault::raw(200, r#"{"data":{"node":{"items":{"nodes":"nope"}}}}"#),
            TrackerErrorKind::Payload,
        ),
        (
            Fault::raw(
                200,
                r#"{"data":null,"errors":[{"type":"SOMETHING","message":"boom"}]}"#,
            ),
            TrackerErrorKind::Query,
        ),
    ] {
        assert_eq!(fails(fault).kind, kind);
    }
    // And the tracker still works afterwards.
    assert!(!t.fetch_candidate_issues().unwrap().is_empty());
}

#[test]
fn slow_responses_and_dead_endpoints_are_transport_errors() {
    let fake = acme();
    let t = tracker_with(&fake, |c| c.timeout_ms = 300);
    t.validate().unwrap();
    fake.push_fault(Fault::Slow(Duration::from_secs(2)));
    let e = t.fetch_candidate_issues().unwrap_err();
    assert_eq!(e.kind, TrackerErrorKind::Transport);
    assert!(e.message.contains("timed out"), "{e}");

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = tracker_with(&fake, |c| {
        c.timeout_ms = 300;
        c.endpoint = format!("http://127.0.0.1:{port}/graphql");
    })
    .validate()
    .unwrap_err();
    assert_eq!(e.kind, TrackerErrorKind::Transport);
}

#[test]
fn malformed_items_are_skipped_in_list_reads() {
    let fake = acme();
    let t = validated(&fake);
    let good = json!({"__typename":"Issue","id":"I_good","number":5,"title":"ok","body":"","url":null,"state":"OPEN","createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z","labels":{"nodes":[]},"repository":{"nameWithOwner":"acme/app"},"blockedBy":{"nodes":[]}});
    let mut bad = good.clone();
    bad["number"] = json!(null);
    bad["id"] = json!("I_bad");
    let status =
        json!({"__typename":"ProjectV2ItemFieldSingleSelectValue","name":"Todo","optionId":"x"});
    fake.push_fault(Fault::raw(200, json!({"data":{"node":{"__typename":"ProjectV2","items":{"pageInfo":{"hasNextPage":false,"endCursor":"Y3Vyc29yOnYyOpLOAAXc9Q=="},"nodes":[
            {"id":"PVTI_a","type":"ISSUE","isArchived":false,"status":status,"priority":null,"content":bad},
            {"id":"PVTI_b","type":"ISSUE","isArchived":false,"status":status,"priority":{},"content":good},
            {"id":"PVTI_c","type":"ISSUE","isArchived":false,"status":{},"content":good},
            {"id":"PVTI_d","type":"ISSUE","isArchived":true,"status":status,"content":good},
            {"id":"PVTI_e","type":"DRAFT_ISSUE","isArchived":false,"status":status,"content":{}},
            "not an object"
        ]}},"rateLimit":null}}).to_string()));
    let board = t.fetch_board(None).unwrap();
    assert_eq!(idents(&board.issues), vec!["acme__app-5"]);
    assert_eq!(
        board.dropped.malformed, 2,
        "a missing number and a non-object item"
    );
    assert_eq!(board.dropped.no_status, 1);
    assert_eq!(board.dropped.archived, 1);
    assert_eq!(board.dropped.drafts, 1);
}

#[test]
fn steady_state_tick_over_100_items_costs_at_most_two_requests() {
    let (fake, t) = generated_100_a_page(100, "Todo");
    let running = ids(1..=5);
    // First tick resolves the project.
    t.validate().unwrap();
    assert_eq!(t.fetch_candidate_issues().unwrap().len(), 100);
    t.fetch_issue_states_by_ids(&running).unwrap();
    fake.clear_requests();
    // Steady state: preflight validation (cached) + reconcile + candidates.
    t.fetch_issue_states_by_ids(&running).unwrap();
    t.validate().unwrap();
    assert_eq!(t.fetch_candidate_issues().unwrap().len(), 100);
    assert_eq!(fake.operations(), vec!["RefreshIssues", "ProjectItems"]);
    let rl = t.rate_limit().unwrap();
    assert!(rl.remaining.is_some() && rl.reset_at.is_some() && rl.last_cost.is_some());
}

#[test]
fn server_side_filter_narrows_and_falls_back() {
    let filtered = |fake: &FakeGithub| tracker_with(fake, |c| c.server_side_filter = true);
    let fake = acme();
    let t = filtered(&fake);
    let got = t.fetch_candidate_issues().unwrap();
    assert!(idents(&got).contains(&"acme__app-1"));
    let req = fake
        .requests()
        .into_iter()
        .find(|r| r.operation == "ProjectItemsFiltered")
        .unwrap();
    assert_eq!(
        req.variables["query"],
        "is:issue status:\"Todo\",\"In Progress\""
    );

    let fake = acme();
    fake.set_supports_items_query(false);
    let t = filtered(&fake);
    let again = t.fetch_candidate_issues().unwrap();
    assert_eq!(idents(&again), idents(&got));
    t.fetch_candidate_issues().unwrap();
    assert_eq!(
        fake.operations(),
        vec![
            "ResolveOrgProject",
            "ProjectItemsFiltered",
            "ProjectItems",
            "ProjectItems"
        ]
    );
}

#[test]
fn priority_is_null_when_field_unset_or_unusable() {
    let fake = acme();
    // The candidates read with `tracker.priority_field = field`.
    let read = |field: Option<&str>| {
        tracker_with(&fake, |c| c.priority_field = field.map(Into::into))
            .fetch_candidate_issues()
            .unwrap()
    };
    assert!(read(None).iter().all(|i| i.priority.is_none()));
    assert_eq!(fake.requests()[1].variables["withPriority"], false);
    assert!(read(Some("Estimate")).iter().all(|i| i.priority.is_none()));
}

/// The poll's reconciliation as the daemon does it: one board read, then a shallow refresh of
/// only the running issues the read did not contain.
fn tick(t: &GithubTracker, running: &[String]) -> (Vec<Issue>, Vec<Issue>) {
    let read = t.read_board(running, &[]).unwrap();
    let (mut present, missing) =
        baton::orchestrator::rules::running_from_read(running, &read.candidates, &read.others);
    if !missing.is_empty() {
        present.extend(t.refresh_running(&missing).unwrap());
    }
    (read.candidates, present)
}

fn ids(range: std::ops::RangeInclusive<u64>) -> Vec<String> {
    range
        .map(|n| issue_node_id(&format!("acme/app#{n}")))
        .collect()
}

#[test]
fn tick_with_100_running_issues_on_a_100_item_board_is_one_request_of_2_points() {
    let (fake, t) = generated_100_a_page(100, "In Progress");
    t.validate().unwrap();
    fake.clear_requests();
    let running = ids(1..=100);
    let (candidates, refreshed) = tick(&t, &running);
    assert_eq!((candidates.len(), refreshed.len()), (100, 100));
    assert_eq!(fake.operations(), vec!["ProjectItems"]);
    assert_eq!((fake.request_count(), fake.points()), (1, 2));
}

#[test]
fn running_issues_missing_from_the_read_get_one_shallow_refresh() {
    let mut board = BoardFixture::generated(100, "In Progress");
    board.items[0].status = Some("In Review".into());
    let fake = FakeGithub::start(board);
    let t = tracker_with(&fake, |c| {
        c.page_size = 100;
        c.server_side_filter = true;
    });
    t.validate().unwrap();
    fake.archive_item("acme/app#2");
    fake.remove_item("acme/app#3");
    fake.clear_requests();
    let running = ids(1..=100);
    let (candidates, refreshed) = tick(&t, &running);
    assert_eq!(candidates.len(), 97);
    // #1 was filtered out server-side, #2 archived, #3 removed: only they are refreshed, shallow.
    assert_eq!(
        fake.operations(),
        vec!["ProjectItemsFiltered", "RefreshRunning"]
    );
    let asked = fake.requests()[1].variables["ids"].clone();
    assert_eq!(asked, json!(ids(1..=3)));
    assert!(!fake.requests()[1].query.contains("blockedBy"));
    assert_eq!((fake.request_count(), fake.points()), (2, 3));
    let one = find(&refreshed, "acme__app-1");
    assert_eq!(one.state, "In Review");
    // Archived and removed issues are not on the project any more: omitted (the engine stops them).
    assert_eq!(refreshed.len(), 98);
}

#[test]
fn shallow_refresh_of_100_ids_costs_2_points_and_the_deep_one_23() {
    let mut board = BoardFixture::generated(100, "In Progress");
    for it in &mut board.items {
        if let Some(i) = it.issue.as_mut() {
            i.blocked_by = vec!["acme/app#1".into()];
        }
    }
    let fake = FakeGithub::start(board);
    let t = validated(&fake);
    let running = ids(1..=100);
    fake.clear_requests();
    let shallow = t.refresh_running(&running).unwrap();
    assert_eq!(shallow.len(), 100);
    assert!(shallow.iter().all(|i| i.blocked_by.is_empty()));
    assert_eq!((fake.request_count(), fake.points()), (1, 2));
    fake.clear_requests();
    let deep = t.fetch_issue_states_by_ids(&running).unwrap();
    assert_eq!(deep[1].blocked_by.len(), 1);
    assert_eq!((fake.request_count(), fake.points()), (1, 23));
}

fn on_many_projects(others: usize) -> FakeGithub {
    let mut board = BoardFixture::empty("acme", 7);
    let mut i = IssueFixture::new("acme/app", 1, "popular");
    i.other_projects = (1..=others).map(|n| format!("PVT_other{n}")).collect();
    board.push_issue(i, Some("In Progress"));
    FakeGithub::start(board)
}

#[test]
fn refresh_finds_our_item_as_the_25th_project_item() {
    let fake = on_many_projects(24);
    let t = validated(&fake);
    fake.clear_requests();
    for got in [
        t.refresh_running(&ids(1..=1)).unwrap(),
        t.fetch_issue_states_by_ids(&ids(1..=1)).unwrap(),
    ] {
        assert_eq!(got.len(), 1, "found, not treated as missing");
        assert_eq!(got[0].state, "In Progress");
    }
    assert_eq!(fake.operations(), vec!["RefreshRunning", "RefreshIssues"]);
}

#[test]
fn refresh_pages_project_items_past_the_first_100() {
    let fake = on_many_projects(129);
    let t = validated(&fake);
    fake.clear_requests();
    let got = t.refresh_running(&ids(1..=1)).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].state, "In Progress");
    assert_eq!(
        fake.operations(),
        vec!["RefreshRunning", "IssueProjectItems"]
    );
    // Not on our project at all: every page is read, then the issue is omitted.
    fake.remove_item("acme/app#1");
    fake.clear_requests();
    assert!(t.refresh_running(&ids(1..=1)).unwrap().is_empty());
    assert_eq!(
        fake.operations(),
        vec!["RefreshRunning", "IssueProjectItems"]
    );
}

#[test]
fn read_board_keeps_candidates_running_ids_and_asked_states_only() {
    let mut board = BoardFixture::generated(6, "Todo");
    board.items[1].status = Some("In Review".into());
    board.items[2].status = Some("In Review".into());
    board.items[3].status = Some("Done".into());
    if let Some(i) = board.items[4].issue.as_mut() {
        i.state = "CLOSED".into();
    }
    let fake = FakeGithub::start(board);
    let t = tracker(&fake);
    let keep = ids(2..=2);
    let read = t.read_board(&keep, &[]).unwrap();
    assert_eq!(idents(&read.candidates), vec!["acme__app-1", "acme__app-6"]);
    assert_eq!(idents(&read.others), vec!["acme__app-2"]);
    let read = t.read_board(&[], &["Done".into()]).unwrap();
    assert_eq!(idents(&read.others), vec!["acme__app-4", "acme__app-5"]);
}

#[test]
fn board_pages_are_normalized_as_they_arrive_with_blockers_resolved_at_the_end() {
    // Blockers later on the board (a later page) still resolve to their Status there.
    let mut board = BoardFixture::generated(5, "Todo");
    board.items[4].status = Some("Done".into());
    if let Some(i) = board.items[0].issue.as_mut() {
        i.blocked_by = vec!["acme/app#5".into(), "acme/app#4".into()];
    }
    let fake = FakeGithub::start(board);
    let t = tracker_with(&fake, |c| c.page_size = 2);
    let got = t.fetch_candidate_issues().unwrap();
    let b = &find(&got, "acme__app-1").blocked_by;
    let states: Vec<(&str, bool)> = b.iter().map(|b| (b.state.as_str(), b.terminal)).collect();
    assert_eq!(states, vec![("Done", true), ("Todo", false)]);
}

#[test]
fn fake_charges_githubs_point_rule() {
    use baton::tracker::github::queries::{PROJECT_ITEMS, PROJECT_ITEMS_NO_DEPS, REFRESH_ISSUES};
    use support::fake_github::query_cost;
    let page = json!({"first": 100});
    assert_eq!(query_cost(PROJECT_ITEMS.text, &page), 2); // 1 + 100 labels + 100 blockedBy
    assert_eq!(query_cost(PROJECT_ITEMS_NO_DEPS.text, &page), 1);
    let hundred = json!({"ids": ids(1..=100)});
    // 100 x (labels + projectItems + blockedBy) + 100 x 20 blockers' projectItems = 2300.
    assert_eq!(query_cost(REFRESH_ISSUES.text, &hundred), 23);
}

/// Not a test: the fake GitHub as a standalone server for `scripts/bench/run.sh` (run with
/// `--ignored --exact bench_fake_github_server`; returns at once without `BENCH_ADDR_FILE`).
/// Serves `BoardFixture::generated(BENCH_ITEMS, BENCH_STATUS)`, writes its endpoint to
/// `BENCH_ADDR_FILE` and appends `<unix ms> <operation> <points>` per request to
/// `BENCH_REQUEST_LOG` until killed.
#[test]
#[ignore = "benchmark server for scripts/bench/run.sh; runs until killed"]
fn bench_fake_github_server() {
    use std::io::Write;
    let Ok(addr_file) = std::env::var("BENCH_ADDR_FILE") else {
        return;
    };
    let items: u64 = std::env::var("BENCH_ITEMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let status = std::env::var("BENCH_STATUS").unwrap_or_else(|_| "Todo".into());
    let fake = FakeGithub::start(BoardFixture::generated(items, &status));
    let log_path = std::env::var("BENCH_REQUEST_LOG").unwrap_or_else(|_| "/dev/null".into());
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .expect("open BENCH_REQUEST_LOG");
    let tmp = format!("{addr_file}.tmp");
    std::fs::write(&tmp, fake.endpoint()).unwrap();
    std::fs::rename(&tmp, &addr_file).unwrap();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        for r in fake.take_requests() {
            let ms =
                r.at.duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis();
            let _ = writeln!(log, "{ms} {} {}", r.operation, r.cost);
        }
    }
}

/// The `ProjectItems*` requests recorded so far.
fn item_pages(fake: &FakeGithub) -> usize {
    fake.operations()
        .iter()
        .filter(|o| o.starts_with("ProjectItems"))
        .count()
}

/// The `acme` fake serving endless item pages of `items` issues with `body_bytes`-long bodies.
fn endless(items: usize, body_bytes: usize) -> FakeGithub {
    let fake = acme();
    fake.set_endless_pages(Some((items, body_bytes)));
    fake
}

/// Assert that `e` is the board-too-large error and names `limit`.
fn assert_too_large(e: &TrackerError, limit: &str) {
    assert_eq!(e.class, "github_board_too_large", "{e}");
    assert!(e.message.contains(limit), "{e}");
}

/// Peak resident memory of this test process (`VmHWM`), in MiB.
fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

#[test]
fn board_read_stops_at_tracker_max_items_with_a_typed_error() {
    let fake = endless(50, 10);
    let t = tracker_with(&fake, |c| c.max_items = 1000);
    assert_too_large(
        &t.fetch_candidate_issues().unwrap_err(),
        "tracker.max_items = 1000",
    );
    // 1000 items at 50 per page: 20 pages, and no request past them.
    assert_eq!(item_pages(&fake), 20);
}

#[test]
fn endless_pagination_with_distinct_cursors_stops_at_200_pages() {
    let fake = endless(1, 10);
    let t = tracker_with(&fake, |c| c.page_size = 100);
    assert_too_large(&t.read_board(&[], &[]).unwrap_err(), "200 pages");
    assert_eq!(item_pages(&fake), 200);
}

/// Issue 21: `a_/b#1` and `a/_b#1` were both `a___b-1` and two agents ran in one workspace.
/// An owner with `_` (no GitHub login has one) keeps GitHub's `owner/repo#n` form, and the
/// workspace keys differ.
#[test]
fn hostile_repository_names_get_distinct_identifiers_and_workspaces() {
    let mut board = BoardFixture::empty("acme", 7);
    for repo in ["a_/b", "a/_b", "acme/app"] {
        board.push_issue(IssueFixture::new(repo, 1, repo), Some("Todo"));
    }
    let fake = FakeGithub::start(board);
    let issues = tracker(&fake).fetch_candidate_issues().unwrap();
    assert_eq!(idents(&issues), ["a_/b#1", "a___b-1", "acme__app-1"]);
    let keys: Vec<String> = issues
        .iter()
        .map(|i| baton::workspace::workspace_key(&i.identifier))
        .collect();
    assert_eq!(
        keys[1..],
        ["a___b-1", "acme__app-1"],
        "ordinary keys unchanged"
    );
    assert!(
        keys[0].starts_with("a__b_1-") && keys[0].len() == 7 + 32,
        "{}",
        keys[0]
    );
}

/// Issue 21: short pages with fresh cursors cost 200 requests per poll whatever
/// `tracker.max_items`; the read now stops at the pages `max_items` needs (1000 / 100 = 10).
#[test]
fn endless_pagination_stops_at_the_pages_max_items_needs() {
    let fake = endless(1, 10);
    let t = tracker_with(&fake, |c| {
        c.page_size = 100;
        c.max_items = 1000;
    });
    assert_too_large(&t.read_board(&[], &[]).unwrap_err(), "10 pages");
    assert_eq!(item_pages(&fake), 10);
}

#[test]
fn endless_fat_pages_stop_with_memory_bounded() {
    // 100 issues of 80 KB per page: 8 MB pages that never end (the 3 GB attack).
    let fake = endless(100, 80 * 1024);
    let t = tracker_with(&fake, |c| c.page_size = 100);
    assert_too_large(&t.fetch_candidate_issues().unwrap_err(), "MiB of text");
    // 48 MiB of kept text is 7 pages of 8 MB (the default 20,000 items would be 200).
    let pages = item_pages(&fake);
    assert!(pages <= 7, "{pages} pages");
    let peak = peak_rss_mib();
    assert!(peak < 512, "peak RSS {peak} MiB");
}

/// A well-formed `RefreshRunning` node for `id`, on our project in `In Progress`.
fn refreshed_node(fake: &FakeGithub, id: &str) -> serde_json::Value {
    json!({"__typename":"Issue","id":id,"number":1,"title":"t","body":"","state":"OPEN",
        "url":"https://github.com/acme/app/issues/1","createdAt":"2024-01-01T00:00:00Z",
        "updatedAt":"2024-01-01T00:00:00Z","labels":{"nodes":[]},"repository":{"nameWithOwner":"acme/app"},
        "projectItems":{"pageInfo":{"hasNextPage":false,"endCursor":"c1"},"nodes":[
            {"id":"PVTI_other","isArchived":false,"project":{"id":"PVT_other"},"status":null},
            {"id":"PVTI_1","isArchived":false,"project":{"id":fake.project_id()},
             "status":{"name":"In Progress","optionId":"47fc9ee4"}}]}})
}

/// Serve `nodes` as the next reply's `data.nodes`.
fn push_refresh_reply(fake: &FakeGithub, nodes: serde_json::Value) {
    fake.push_fault(Fault::raw(200, json!({"data":{"nodes":nodes}}).to_string()));
}

#[test]
fn malformed_refresh_replies_are_tracker_errors_never_gone() {
    let fake = acme();
    let (t, id, ids) = validated_with_issue_1(&fake);
    push_refresh_reply(&fake, json!([refreshed_node(&fake, &id)]));
    let ok = t.refresh_running(&ids).unwrap();
    assert_eq!(ok.len(), 1, "the well-formed reply is read");
    assert_eq!(ok[0].state, "In Progress");
    type Mutate = fn(&mut serde_json::Value);
    let shapes: Vec<(&str, Mutate)> = vec![
        ("null node without NOT_FOUND", |n| {
            *n = serde_json::Value::Null
        }),
        ("no __typename", |n| {
            n.as_object_mut().unwrap().remove("__typename");
        }),
        ("null __typename", |n| n["__typename"] = json!(null)),
        ("null projectItems", |n| n["projectItems"] = json!(null)),
        ("no projectItems", |n| {
            n.as_object_mut().unwrap().remove("projectItems");
        }),
        ("null projectItems.nodes", |n| {
            n["projectItems"]["nodes"] = json!(null)
        }),
        ("an item without project.id", |n| {
            n["projectItems"]["nodes"][1]["project"] = json!({})
        }),
        ("an item with a null project", |n| {
            n["projectItems"]["nodes"][0]["project"] = json!(null)
        }),
        ("an item without isArchived", |n| {
            n["projectItems"]["nodes"][1]
                .as_object_mut()
                .unwrap()
                .remove("isArchived");
        }),
        ("our item without a status member", |n| {
            n["projectItems"]["nodes"][1]
                .as_object_mut()
                .unwrap()
                .remove("status");
        }),
        ("not on this page, no pageInfo", |n| {
            n["projectItems"]["nodes"].as_array_mut().unwrap().pop();
            n["projectItems"]
                .as_object_mut()
                .unwrap()
                .remove("pageInfo");
        }),
        ("not on this page, hasNextPage without endCursor", |n| {
            n["projectItems"]["nodes"].as_array_mut().unwrap().pop();
            n["projectItems"]["pageInfo"] = json!({"hasNextPage":true,"endCursor":null});
        }),
    ];
    for (what, mutate) in shapes {
        let mut node = refreshed_node(&fake, &id);
        mutate(&mut node);
        push_refresh_reply(&fake, json!([node]));
        let e = t
            .refresh_running(&ids)
            .expect_err(&format!("{what}: read as gone"));
        assert_eq!(e.class, "github_unknown_payload", "{what}: {e}");
        push_refresh_reply(&fake, json!([node]));
        let e = t.fetch_issue_states_by_ids(&ids).expect_err(what);
        assert_eq!(e.class, "github_unknown_payload", "{what} (deep): {e}");
    }
}

#[test]
fn malformed_project_items_pages_are_errors_never_gone() {
    let fake = acme();
    let (t, id, ids) = validated_with_issue_1(&fake);
    // The first page does not hold our item and says more follow.
    let first_page = || {
        let mut n = refreshed_node(&fake, &id);
        n["projectItems"]["nodes"].as_array_mut().unwrap().pop();
        n["projectItems"]["pageInfo"] = json!({"hasNextPage":true,"endCursor":"c1"});
        n
    };
    let page = |node: serde_json::Value| Fault::raw(200, json!({"data":{"node":node}}).to_string());
    let on_page_two = |items: serde_json::Value, info: serde_json::Value| json!({"__typename":"Issue","projectItems":{"pageInfo":info,"nodes":items}});
    let last = json!({"hasNextPage":false,"endCursor":"c2"});
    // Proof: every page read, our project on none of them: gone.
    push_refresh_reply(&fake, json!([first_page()]));
    fake.push_fault(page(on_page_two(json!([]), last.clone())));
    assert!(t.refresh_running(&ids).unwrap().is_empty());
    let cases = [
        ("a null node", json!(null), "github_unknown_payload"),
        (
            "no __typename",
            json!({"projectItems":{"pageInfo":last,"nodes":[]}}),
            "github_unknown_payload",
        ),
        (
            "null projectItems",
            json!({"__typename":"Issue","projectItems":null}),
            "github_unknown_payload",
        ),
        (
            "a repeated cursor",
            on_page_two(json!([]), json!({"hasNextPage":true,"endCursor":"c1"})),
            "github_missing_end_cursor",
        ),
    ];
    for (what, second, class) in cases {
        push_refresh_reply(&fake, json!([first_page()]));
        fake.push_fault(page(second));
        let e = t
            .refresh_running(&ids)
            .expect_err(&format!("{what}: read as gone"));
        assert_eq!(e.class, class, "{what}: {e}");
    }
}

#[test]
fn well_formed_proofs_of_leaving_still_read_as_gone() {
    let fake = acme();
    let (t, id, ids) = validated_with_issue_1(&fake);
    // Another type of node, our item archived, our item without a Status value.
    let mut pr = refreshed_node(&fake, &id);
    pr["__typename"] = json!("PullRequest");
    let mut archived = refreshed_node(&fake, &id);
    archived["projectItems"]["nodes"][1]["isArchived"] = json!(true);
    let mut no_status = refreshed_node(&fake, &id);
    no_status["projectItems"]["nodes"][1]["status"] = json!(null);
    for node in [pr, archived, no_status] {
        push_refresh_reply(&fake, json!([node]));
        assert!(t.refresh_running(&ids).unwrap().is_empty());
    }
    // NOT_FOUND with a null node.
    fake.push_fault(Fault::raw(
        200,
        json!({"data":{"nodes":[null]},"errors":[{"type":"NOT_FOUND","path":["nodes",0],
            "message":"Could not resolve to a node"}]})
        .to_string(),
    ));
    assert!(t.refresh_running(&ids).unwrap().is_empty());
}
