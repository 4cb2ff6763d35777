//! The server-wide fencing-token counter (see [`crate::lock::TokenCounter`]).
//!
//! Only Redis's main thread issues tokens; the atomic is there so that a
//! static needs no `unsafe`, and so that a forked child saving the RDB reads a
//! plain value. Load-then-store is not a race on a single thread.
//!
//! A replica that loads its master's data set beside the live one (diskless
//! `swapdb` loading, see [`super::events`]) sets the tokens it reads aside:
//! they count only once that data set replaces the live one, and an aborted
//! load leaves the counter as it was.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::clock;
use crate::lock::TokenCounter;

static LAST_TOKEN: AtomicU64 = AtomicU64::new(0);

/// Whether a data set is being loaded beside the live one.
static LOADING_ASIDE: AtomicBool = AtomicBool::new(false);
/// The highest token read from the data set being loaded aside.
static LAST_TOKEN_ASIDE: AtomicU64 = AtomicU64::new(0);

/// Issues a new token: above every token issued or observed, and not below the
/// wall clock in microseconds.
pub fn issue() -> u64 {
    issue_at(clock::now_us())
}

/// Issues a new token with `now_us` (the wall clock in microseconds) as its floor.
pub fn issue_at(now_us: u64) -> u64 {
    let mut counter = TokenCounter::starting_at(LAST_TOKEN.load(Ordering::Relaxed));
    let token = counter.issue(now_us);
    LAST_TOKEN.store(counter.last(), Ordering::Relaxed);
    token
}

/// Records a token that came from a master or the AOF.
pub fn observe(token: u64) {
    let mut counter = TokenCounter::starting_at(LAST_TOKEN.load(Ordering::Relaxed));
    counter.observe(token);
    LAST_TOKEN.store(counter.last(), Ordering::Relaxed);
}

/// Records a token read from an RDB payload (a file, a full sync, RESTORE):
/// set aside while a data set is loaded beside the live one.
pub fn observe_loaded(token: u64) {
    if LOADING_ASIDE.load(Ordering::Relaxed) {
        LAST_TOKEN_ASIDE.fetch_max(token, Ordering::Relaxed);
    } else {
        observe(token);
    }
}

/// A data set starts loading beside the live one.
pub fn begin_aside() {
    LAST_TOKEN_ASIDE.store(0, Ordering::Relaxed);
    LOADING_ASIDE.store(true, Ordering::Relaxed);
}

/// The data set loaded aside replaced the live one: its tokens count.
pub fn adopt_aside() {
    LOADING_ASIDE.store(false, Ordering::Relaxed);
    observe(LAST_TOKEN_ASIDE.swap(0, Ordering::Relaxed));
}

/// The load aside was aborted: its tokens leave no trace.
pub fn discard_aside() {
    LOADING_ASIDE.store(false, Ordering::Relaxed);
    LAST_TOKEN_ASIDE.store(0, Ordering::Relaxed);
}

/// The highest token issued or observed.
pub fn last() -> u64 {
    LAST_TOKEN.load(Ordering::Relaxed)
}
