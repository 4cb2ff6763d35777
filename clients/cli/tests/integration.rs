//! The CLI's suites, one module per area, in one test binary (see
//! tests/integration.rs at the root of the repository).

#[path = "cli.rs"]
mod cli;
#[path = "../../../tests/common/mod.rs"]
mod common;
#[path = "docs.rs"]
mod docs;
#[path = "support/mod.rs"]
mod support;
