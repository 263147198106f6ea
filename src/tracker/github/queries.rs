//! Every GraphQL document Baton sends, compiled in from `queries/*.graphql` so the exact text is
//! reviewable and validated against GitHub's schema by `tests/tracker_graphql_schema.rs`.
//!
//! Shared selections live as named fragments in `queries/fragments/*.graphql`. Each operation
//! file is concatenated at compile time with exactly the fragment files it spreads (directly or
//! through another fragment): GraphQL rejects a document with an unused fragment
//! (NoUnusedFragments) or an undefined one, so the list per operation is exact. What goes on the
//! wire is therefore one self-contained document per operation, `Query::text`.
//!
//! The blocker-less fallbacks stay separate documents (`ProjectItemsNoDeps`, and `RefreshRunning`
//! for refreshes): servers whose schema lacks `Issue.blockedBy` (older GitHub Enterprise Server)
//! reject any document that names the field, even under `@include(if: false)`, so the fallback
//! must not contain it (nor the `ItemBlockers` fragment).

/// A named GraphQL operation (the name is sent as `operationName`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// The operation name declared in the document.
    pub name: &'static str,
    /// The operation's file name under `src/tracker/github/queries/`.
    pub file: &'static str,
    /// The fragment files under `src/tracker/github/queries/fragments/` appended to it, in order.
    pub fragments: &'static [&'static str],
    /// The assembled document exactly as sent: the operation followed by its fragments.
    pub text: &'static str,
}

/// Defines one `Query` const per entry (operation file + the fragment files appended to it, names
/// without `.graphql`) and `ALL`, the list of them.
macro_rules! queries {
    ($($konst:ident = $name:literal from $file:literal + [$($frag:literal),*];)*) => {
        $(
            #[doc = concat!("`", $name, "` from `queries/", $file, ".graphql` with its fragments.")]
            pub const $konst: Query = Query {
                name: $name,
                file: concat!($file, ".graphql"),
                fragments: &[$(concat!($frag, ".graphql")),*],
                text: concat!(
                    include_str!(concat!("queries/", $file, ".graphql")),
                    $("\n", include_str!(concat!("queries/fragments/", $frag, ".graphql")),)*
                ),
            };
        )*

        /// All operations (for schema validation).
        pub const ALL: &[Query] = &[$($konst),*];
    };
}

// Each list holds every fragment the operation spreads, directly or through another fragment.
queries! {
    RESOLVE_ORG_PROJECT = "ResolveOrgProject" from "resolve_org_project" + ["project_setup", "rate_limit"];
    RESOLVE_USER_PROJECT = "ResolveUserProject" from "resolve_user_project" + ["project_setup", "rate_limit"];
    PROJECT_ITEMS = "ProjectItems" from "project_items"
        + ["item_page", "item_blockers", "blocker_ref", "option_value", "issue_fields", "rate_limit"];
    PROJECT_ITEMS_NO_DEPS = "ProjectItemsNoDeps" from "project_items_no_deps"
        + ["item_page", "option_value", "issue_fields", "rate_limit"];
    PROJECT_ITEMS_FILTERED = "ProjectItemsFiltered" from "project_items_filtered"
        + ["item_page", "item_blockers", "blocker_ref", "option_value", "issue_fields", "rate_limit"];
    REFRESH_ISSUES = "RefreshIssues" from "refresh_issues"
        + ["refreshed_issue", "project_item_page", "blocker_ref", "item_on_project", "option_value", "issue_fields", "rate_limit"];
    REFRESH_RUNNING = "RefreshRunning" from "refresh_running"
        + ["refreshed_issue", "project_item_page", "item_on_project", "option_value", "issue_fields", "rate_limit"];
    ISSUE_PROJECT_ITEMS = "IssueProjectItems" from "issue_project_items"
        + ["project_item_page", "item_on_project", "option_value", "rate_limit"];
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The document without `#` comments (GraphQL has no `#` inside the strings we use).
    fn code(text: &str) -> String {
        text.lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn idents_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
        text.split(marker)
            .skip(1)
            .map(|rest| {
                let rest = rest.trim_start();
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect()
    }

    #[test]
    fn each_document_declares_its_operation_name_once() {
        for q in ALL {
            let code = code(q.text);
            assert_eq!(
                code.matches(&format!("query {}(", q.name)).count(),
                1,
                "{} does not declare query {} exactly once",
                q.file,
                q.name
            );
            assert_eq!(
                code.matches("query ").count(),
                1,
                "{}: one operation",
                q.name
            );
        }
    }

    #[test]
    fn each_document_defines_exactly_the_fragments_it_spreads() {
        for q in ALL {
            let code = code(q.text);
            let defined: Vec<&str> = idents_after(&code, "fragment ");
            let unique: BTreeSet<&str> = defined.iter().copied().collect();
            assert_eq!(
                unique.len(),
                defined.len(),
                "{}: fragment defined twice",
                q.name
            );
            let spread: BTreeSet<&str> = idents_after(&code, "...")
                .into_iter()
                .filter(|n| *n != "on" && !n.is_empty())
                .collect();
            assert_eq!(unique, spread, "{}: defined vs spread fragments", q.name);
        }
    }

    #[test]
    fn no_deps_documents_never_name_blocked_by() {
        for q in [PROJECT_ITEMS_NO_DEPS, REFRESH_RUNNING, ISSUE_PROJECT_ITEMS] {
            assert!(!code(q.text).contains("blockedBy"), "{}", q.name);
        }
        for q in [PROJECT_ITEMS, PROJECT_ITEMS_FILTERED, REFRESH_ISSUES] {
            assert!(code(q.text).contains("blockedBy(first: 20)"), "{}", q.name);
        }
    }
}
