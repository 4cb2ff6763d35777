//! Async Rust client for dlock, the Redis module of
//! native distributed-lock commands.
//!
//! It turns dlock's commands into guards: a [`Guard`] holds a lock (or a
//! read or write hold, a semaphore permit, several keys at once) while it
//! lives, a watchdog renews its lease in the background, [`Guard::lost`]
//! tells when the lock was lost anyway, and [`Guard::token`] gives the
//! fencing token to pass to the protected resource. Dropping a guard
//! releases it.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn pay_order(_order: u32, _token: u64) {}
//! # async fn work() {}
//! # async fn demo() -> dlock_client::Result<()> {
//! let dlock = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
//! let guard = dlock
//!     .lock("orders:42")
//!     .lease(Duration::from_secs(30)) // default 30 s
//!     .wait(Duration::from_secs(10))  // default: do not wait
//!     .acquire()
//!     .await?;                        // Err(Error::Busy) when not granted in time
//! pay_order(42, guard.token()).await; // fencing token for the resource
//! tokio::select! {
//!     _ = work() => {}
//!     _ = guard.lost() => { /* stop: the lock is gone */ }
//! }
//! guard.release().await?;             // or drop it: released in the background
//! # Ok(()) }
//! ```
//!
//! Every primitive of dlock has an entry point on [`Client`]:
//! [`lock`](Client::lock), [`read_lock`](Client::read_lock) /
//! [`write_lock`](Client::write_lock), [`semaphore`](Client::semaphore),
//! [`multi_lock`](Client::multi_lock) and [`latch`](Client::latch);
//! [`election`](Client::election) builds leader election on the lock.
//! docs/clients.md in the repository describes the rules (when a lock counts
//! as lost, cancellation, replicas).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod cluster;
mod conn;
mod election;
mod error;
mod latch;
mod lock;
mod watchdog;

pub use client::{Client, Config};
pub use election::{
    election_owner, election_value, Election, Leader, Leadership, Observer, DEFAULT_WATCH_TIMEOUT,
    MAX_VALUE_LEN, OWNER_SEPARATOR,
};
pub use error::{Error, Result};
pub use latch::{Latch, LatchWait};
pub use lock::{Guard, LockBuilder, DEFAULT_LEASE};

/// The `redis` crate this client is built on, for
/// [`Client::from_redis`] and [`Client::from_cluster`].
///
/// ```no_run
/// let redis = dlock_client::redis::Client::open("redis://127.0.0.1:6379/").unwrap();
/// # let _ = redis;
/// ```
pub use redis;
