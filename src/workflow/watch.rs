//! Hot reload of WORKFLOW.md (spec §6.2). PLACEHOLDER: being implemented.
