//! The server-wide fencing-token counter (see [`crate::lock::TokenCounter`]).
//!
//! Only Redis's main thread issues tokens; the atomic is there so that a
//! static needs no `unsafe`, and so that a forked child saving the RDB reads a
//! plain value. Load-then-store is not a race on a single thread.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock;
use crate::lock::TokenCounter;

static LAST_TOKEN: AtomicU64 = AtomicU64::new(0);

/// Issues a new token: above every token issued or observed, and not below the
/// wall clock in microseconds.
pub fn issue() -> u64 {
    let mut counter = TokenCounter::starting_at(LAST_TOKEN.load(Ordering::Relaxed));
    let token = counter.issue(clock::now_us());
    LAST_TOKEN.store(counter.last(), Ordering::Relaxed);
    token
}

/// Records a token that came from a master, the AOF or an RDB file.
pub fn observe(token: u64) {
    let mut counter = TokenCounter::starting_at(LAST_TOKEN.load(Ordering::Relaxed));
    counter.observe(token);
    LAST_TOKEN.store(counter.last(), Ordering::Relaxed);
}

/// The highest token issued or observed.
pub fn last() -> u64 {
    LAST_TOKEN.load(Ordering::Relaxed)
}
