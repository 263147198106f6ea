//! Every GraphQL document Baton sends, compiled in from `queries/*.graphql` so the exact text is
//! reviewable and validated against GitHub's schema by `tests/tracker_graphql_schema.rs`.

/// A named GraphQL operation (the name is sent as `operationName`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// The operation name declared in the document.
    pub name: &'static str,
    /// The file name under `src/tracker/github/queries/`.
    pub file: &'static str,
    /// The document text.
    pub text: &'static str,
}

macro_rules! query {
    ($konst:ident, $name:literal, $file:literal) => {
        #[doc = concat!("`", $name, "` from `queries/", $file, "`.")]
        pub const $konst: Query = Query {
            name: $name,
            file: $file,
            text: include_str!(concat!("queries/", $file)),
        };
    };
}

query!(
    RESOLVE_ORG_PROJECT,
    "ResolveOrgProject",
    "resolve_org_project.graphql"
);
query!(
    RESOLVE_USER_PROJECT,
    "ResolveUserProject",
    "resolve_user_project.graphql"
);
query!(PROJECT_ITEMS, "ProjectItems", "project_items.graphql");
query!(
    PROJECT_ITEMS_NO_DEPS,
    "ProjectItemsNoDeps",
    "project_items_no_deps.graphql"
);
query!(
    PROJECT_ITEMS_FILTERED,
    "ProjectItemsFiltered",
    "project_items_filtered.graphql"
);
query!(REFRESH_ISSUES, "RefreshIssues", "refresh_issues.graphql");
query!(
    REFRESH_ISSUES_NO_DEPS,
    "RefreshIssuesNoDeps",
    "refresh_issues_no_deps.graphql"
);

/// All documents (for schema validation).
pub const ALL: &[Query] = &[
    RESOLVE_ORG_PROJECT,
    RESOLVE_USER_PROJECT,
    PROJECT_ITEMS,
    PROJECT_ITEMS_NO_DEPS,
    PROJECT_ITEMS_FILTERED,
    REFRESH_ISSUES,
    REFRESH_ISSUES_NO_DEPS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_document_declares_its_operation_name() {
        for q in ALL {
            assert!(
                q.text.contains(&format!("query {}(", q.name)),
                "{} does not declare query {}",
                q.file,
                q.name
            );
        }
    }
}
