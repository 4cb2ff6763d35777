//! How many lock and latch values keys hold now: the `dlock_locks` and
//! `dlock_latches` gauges of `INFO dlock`.
//!
//! Each is added to where a value is made for a key (a command storing a
//! new value, RDB load and RESTORE, COPY) and taken from in the type's
//! `free`, which Redis calls for every value it drops: DEL, expiry,
//! eviction, an overwrite, a flush, a replica discarding its data set.
//! RENAME, MOVE and SWAPDB move values without either. `free` may run on a
//! background thread (`FLUSHALL ASYNC`), hence atomic adds.
//!
//! A bottom layer: it imports nothing of the adapter, so that the FFI
//! wrappers (which store new values) can count.

use std::sync::atomic::{AtomicI64, Ordering};

static LIVE_LOCKS: AtomicI64 = AtomicI64::new(0);
static LIVE_LATCHES: AtomicI64 = AtomicI64::new(0);

/// The kind of a module value.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Lock,
    Latch,
}

fn gauge(kind: Kind) -> &'static AtomicI64 {
    match kind {
        Kind::Lock => &LIVE_LOCKS,
        Kind::Latch => &LIVE_LATCHES,
    }
}

/// A value of `kind` was made for a key.
#[inline]
pub fn created(kind: Kind) {
    gauge(kind).fetch_add(1, Ordering::Relaxed);
}

/// Redis freed a value of `kind` (any thread).
#[inline]
pub fn freed(kind: Kind) {
    gauge(kind).fetch_sub(1, Ordering::Relaxed);
}

/// Values of `kind` in keys now (never below zero).
pub fn live(kind: Kind) -> u64 {
    gauge(kind).load(Ordering::Relaxed).max(0) as u64
}
