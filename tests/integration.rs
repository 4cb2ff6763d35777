//! The integration suites, one module per area (tests/<area>.rs), in one
//! test binary. As 30 binaries, each compiled tests/common once more and
//! linked the module, tokio and redis again: the build took longer than the
//! tests on three servers. Run one area with a filter, e.g.
//! `cargo test --release --workspace --test integration waiting::`.

#[path = "acl.rs"]
mod acl;
#[path = "async_load.rs"]
mod async_load;
#[path = "audit.rs"]
mod audit;
#[path = "bad_input.rs"]
mod bad_input;
#[path = "cluster.rs"]
mod cluster;
#[path = "commands.rs"]
mod commands;
#[path = "common/mod.rs"]
mod common;
#[path = "conventions.rs"]
mod conventions;
#[path = "crash.rs"]
mod crash;
#[path = "docs.rs"]
mod docs;
#[path = "failover.rs"]
mod failover;
#[path = "grace.rs"]
mod grace;
#[path = "info_full.rs"]
mod info_full;
#[path = "latch.rs"]
mod latch;
#[path = "layers.rs"]
mod layers;
#[path = "macquire.rs"]
mod macquire;
#[path = "make_run.rs"]
mod make_run;
#[path = "memory.rs"]
mod memory;
#[path = "netns/mod.rs"]
mod netns;
#[path = "partition.rs"]
mod partition;
#[path = "persistence.rs"]
mod persistence;
#[path = "prometheus.rs"]
mod prometheus;
#[path = "replication.rs"]
mod replication;
#[path = "shared.rs"]
mod shared;
#[path = "shared_durability.rs"]
mod shared_durability;
#[path = "sharedkit/mod.rs"]
mod sharedkit;
#[path = "stats.rs"]
mod stats;
#[path = "stress.rs"]
mod stress;
#[path = "version.rs"]
mod version;
#[path = "waiting.rs"]
mod waiting;
#[path = "waiting_durability.rs"]
mod waiting_durability;
#[path = "watch.rs"]
mod watch;
#[path = "weights.rs"]
mod weights;
