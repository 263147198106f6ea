//! Shared test support: the fake GitHub GraphQL server and helpers. Include with `mod support;`.
#![allow(dead_code)]

pub mod fake_github;
