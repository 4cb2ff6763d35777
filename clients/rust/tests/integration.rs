//! The Rust client's suites, one module per area, in one test binary (see
//! tests/integration.rs at the root of the repository).

#[path = "cluster.rs"]
mod cluster;
#[path = "../../../tests/common/mod.rs"]
mod common;
#[path = "conformance.rs"]
mod conformance;
#[path = "election.rs"]
mod election;
#[path = "lock.rs"]
mod lock;
#[path = "primitives.rs"]
mod primitives;
#[path = "snippets.rs"]
mod snippets;
#[path = "stall.rs"]
mod stall;
#[path = "support/mod.rs"]
mod support;
#[path = "tls.rs"]
mod tls;
