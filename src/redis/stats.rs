//! Counters for `INFO dlock` (see [`super::info`]) and the keyspace events
//! lock changes publish.
//!
//! Events are published with the module class (`notify-keyspace-events`
//! flag `d`), e.g. `CONFIG SET notify-keyspace-events Kd` and then
//! `PSUBSCRIBE __keyspace@0__:*` shows `dlock.acquire`, `dlock.release`, ...

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw;

use super::ffi::{api, Ctx, KeyName};

/// Something that happened to a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new hold granted to a caller at once.
    Acquire,
    /// A re-entry by the holder.
    Reenter,
    /// A hold given up (RELEASE, or a SESSION connection closing).
    Release,
    Renew,
    /// A FAIR reservation made or refreshed.
    Reserve,
    /// The lock granted to a blocked waiter.
    Handoff,
    /// A lease that ran out.
    Expire,
    /// A blocked waiter whose timeout passed.
    Timeout,
    /// A new shared hold granted to a caller at once.
    AcquireShared,
    /// A shared re-entry by a holder.
    ReenterShared,
    /// A shared hold given up.
    ReleaseShared,
    /// A shared hold granted to a blocked waiter.
    HandoffShared,
    /// An upgrade refused with DEADLOCK (counted, not published).
    Deadlock,
    /// A latch created (`dlock.latch`).
    LatchCreate,
    /// A latch counted down without opening (`dlock.countdown`).
    Countdown,
    /// A latch counted down to 0: opened and deleted (`dlock.open`).
    LatchOpen,
    /// A blocked `DLOCK.AWAIT` whose timeout passed (`dlock.timeout`).
    AwaitTimeout,
    /// A DLOCK.MACQUIRE granted at once (counted; each key publishes its grant).
    MultiAcquire,
    /// A blocked DLOCK.MACQUIRE granted (counted; each key publishes its grant).
    MultiHandoff,
}

impl Event {
    /// The counter of this kind of event, and for shared grants also the
    /// counter of every grant of its kind.
    fn counters(self) -> (&'static AtomicU64, Option<&'static AtomicU64>) {
        match self {
            Event::Acquire => (&ACQUIRES, None),
            Event::Reenter => (&REENTRIES, None),
            Event::Release => (&RELEASES, None),
            Event::Renew => (&RENEWALS, None),
            Event::Reserve => (&RESERVATIONS_MADE, None),
            Event::Handoff => (&HANDOFFS, None),
            Event::Expire => (&LEASE_EXPIRIES, None),
            Event::Timeout => (&BLOCK_TIMEOUTS, None),
            Event::AcquireShared => (&SHARED_GRANTS, Some(&ACQUIRES)),
            Event::ReenterShared => (&SHARED_GRANTS, Some(&REENTRIES)),
            Event::ReleaseShared => (&RELEASES, None),
            Event::HandoffShared => (&SHARED_GRANTS, Some(&HANDOFFS)),
            Event::Deadlock => (&DEADLOCKS, None),
            Event::LatchCreate => (&LATCHES_CREATED, None),
            Event::Countdown => (&COUNTDOWNS, None),
            Event::LatchOpen => (&LATCHES_OPENED, None),
            Event::AwaitTimeout => (&AWAIT_TIMEOUTS, None),
            Event::MultiAcquire => (&MULTI_ACQUIRES, None),
            Event::MultiHandoff => (&MULTI_HANDOFFS, None),
        }
    }

    fn name(self) -> &'static CStr {
        match self {
            Event::Acquire => c"dlock.acquire",
            Event::Reenter => c"dlock.reenter",
            Event::Release => c"dlock.release",
            Event::Renew => c"dlock.renew",
            Event::Reserve => c"dlock.reserve",
            Event::Handoff => c"dlock.handoff",
            Event::Expire => c"dlock.expire",
            Event::Timeout | Event::AwaitTimeout => c"dlock.timeout",
            Event::AcquireShared => c"dlock.acquire.shared",
            Event::ReenterShared => c"dlock.reenter.shared",
            Event::ReleaseShared => c"dlock.release.shared",
            Event::HandoffShared => c"dlock.handoff.shared",
            Event::Deadlock => c"dlock.deadlock",
            Event::LatchCreate => c"dlock.latch",
            Event::Countdown => c"dlock.countdown",
            Event::LatchOpen => c"dlock.open",
            Event::MultiAcquire => c"dlock.macquire",
            Event::MultiHandoff => c"dlock.macquire.handoff",
        }
    }
}

pub(super) static ACQUIRES: AtomicU64 = AtomicU64::new(0);
pub(super) static REENTRIES: AtomicU64 = AtomicU64::new(0);
pub(super) static RELEASES: AtomicU64 = AtomicU64::new(0);
pub(super) static RENEWALS: AtomicU64 = AtomicU64::new(0);
pub(super) static RESERVATIONS_MADE: AtomicU64 = AtomicU64::new(0);
pub(super) static HANDOFFS: AtomicU64 = AtomicU64::new(0);
pub(super) static LEASE_EXPIRIES: AtomicU64 = AtomicU64::new(0);
pub(super) static BLOCK_TIMEOUTS: AtomicU64 = AtomicU64::new(0);
pub(super) static SHARED_GRANTS: AtomicU64 = AtomicU64::new(0);
pub(super) static DEADLOCKS: AtomicU64 = AtomicU64::new(0);
pub(super) static LATCHES_CREATED: AtomicU64 = AtomicU64::new(0);
pub(super) static COUNTDOWNS: AtomicU64 = AtomicU64::new(0);
pub(super) static LATCHES_OPENED: AtomicU64 = AtomicU64::new(0);
pub(super) static AWAIT_TIMEOUTS: AtomicU64 = AtomicU64::new(0);
pub(super) static MULTI_ACQUIRES: AtomicU64 = AtomicU64::new(0);
pub(super) static MULTI_HANDOFFS: AtomicU64 = AtomicU64::new(0);
/// New holds granted to a blocked waiter after a release (or any end of a
/// hold but its lease running out).
pub(super) static GRANTS_BY_HANDOFF: AtomicU64 = AtomicU64::new(0);
/// New holds granted to a blocked waiter because a holder's lease ran out.
pub(super) static GRANTS_AFTER_EXPIRY: AtomicU64 = AtomicU64::new(0);
/// `NOTOWNER` replies: a holder that found its hold gone.
pub(super) static NOTOWNER_REPLIES: AtomicU64 = AtomicU64::new(0);
/// Commands refused with `OOM`.
pub(super) static OOM_REFUSALS: AtomicU64 = AtomicU64::new(0);

/// The upper bounds (ms) of the wait histogram's buckets, `+Inf` aside:
/// `dlock_wait_ms_le_<bound>`. Fixed, so that Prometheus sees the same
/// series for ever.
pub const WAIT_BUCKETS_MS: [u64; 8] = [1, 5, 10, 50, 250, 1_000, 5_000, 30_000];

/// Waits that ended in each bucket (not cumulative here: one add per
/// wait; `INFO` adds them up), the last one above every bound.
pub(super) static WAIT_BUCKETS: [AtomicU64; WAIT_BUCKETS_MS.len() + 1] =
    [const { AtomicU64::new(0) }; WAIT_BUCKETS_MS.len() + 1];
/// The waits added up, in µs (shown in ms).
pub(super) static WAIT_SUM_US: AtomicU64 = AtomicU64::new(0);

/// A blocked `DLOCK.ACQUIRE` was granted or timed out after waiting
/// `waited_us`: counted in the wait histogram. A few compares and two
/// adds; no allocation.
pub fn record_wait(waited_us: u64) {
    let mut bucket = WAIT_BUCKETS_MS.len();
    for (index, bound_ms) in WAIT_BUCKETS_MS.iter().enumerate() {
        if waited_us <= bound_ms * 1_000 {
            bucket = index;
            break;
        }
    }
    if let Some(counter) = WAIT_BUCKETS.get(bucket) {
        increment(counter);
    }
    WAIT_SUM_US.store(
        WAIT_SUM_US.load(Ordering::Relaxed).wrapping_add(waited_us),
        Ordering::Relaxed,
    );
}

/// The wait histogram as `INFO` shows it: the cumulative count at or
/// below each bound (`+Inf` last), the sum in ms, the count.
pub fn wait_histogram() -> ([u64; WAIT_BUCKETS_MS.len() + 1], u64, u64) {
    let mut cumulative = [0u64; WAIT_BUCKETS_MS.len() + 1];
    let mut running = 0u64;
    for (slot, counter) in cumulative.iter_mut().zip(WAIT_BUCKETS.iter()) {
        running = running.wrapping_add(counter.load(Ordering::Relaxed));
        *slot = running;
    }
    let sum_ms = WAIT_SUM_US.load(Ordering::Relaxed) / 1_000;
    // The count is the +Inf bucket, as Prometheus requires of `_count`.
    (cumulative, sum_ms, running)
}

/// A hand-off (`Event::Handoff`, `Event::HandoffShared`: a new hold for a
/// blocked waiter) counted by its cause: the end of a lease
/// (`after_expiry`) or any other end of a hold (a release, a session
/// closed, a deleted key).
pub fn count_grant_cause(event: Event, after_expiry: bool) {
    if matches!(event, Event::Handoff | Event::HandoffShared) {
        increment(if after_expiry {
            &GRANTS_AFTER_EXPIRY
        } else {
            &GRANTS_BY_HANDOFF
        });
    }
}

thread_local! {
    /// Set when waiters of a lock value that Redis removed after its lease
    /// ended are queued again: the settle that grants them next counts its
    /// hand-offs as after an expiry.
    static ORPHANS_OF_EXPIRED_LEASE: Cell<bool> = const { Cell::new(false) };
}

/// See [`ORPHANS_OF_EXPIRED_LEASE`].
pub fn note_orphans_of_expired_lease() {
    let _ = ORPHANS_OF_EXPIRED_LEASE.try_with(|flag| flag.set(true));
}

/// Whether [`note_orphans_of_expired_lease`] was called since the last
/// call; clears the note.
#[inline]
pub fn take_orphans_of_expired_lease() -> bool {
    ORPHANS_OF_EXPIRED_LEASE
        .try_with(|flag| flag.replace(false))
        .unwrap_or(false)
}

/// Counts a `NOTOWNER` reply.
pub fn count_notowner() {
    increment(&NOTOWNER_REPLIES);
}

/// Counts an `OOM` refusal.
pub fn count_oom_refusal() {
    increment(&OOM_REFUSALS);
}

/// `DLOCK.STATS RESET`: zeroes every counter and the wait histogram, as
/// `CONFIG RESETSTAT` does Redis's own; the gauges (what is held, queued,
/// stored now) and `dlock_last_token` stay.
pub fn reset() {
    for counter in [
        &ACQUIRES,
        &REENTRIES,
        &RELEASES,
        &RENEWALS,
        &RESERVATIONS_MADE,
        &HANDOFFS,
        &LEASE_EXPIRIES,
        &BLOCK_TIMEOUTS,
        &SHARED_GRANTS,
        &DEADLOCKS,
        &LATCHES_CREATED,
        &COUNTDOWNS,
        &LATCHES_OPENED,
        &AWAIT_TIMEOUTS,
        &MULTI_ACQUIRES,
        &MULTI_HANDOFFS,
        &GRANTS_BY_HANDOFF,
        &GRANTS_AFTER_EXPIRY,
        &NOTOWNER_REPLIES,
        &OOM_REFUSALS,
        &WAIT_SUM_US,
    ]
    .into_iter()
    .chain(WAIT_BUCKETS.iter())
    {
        counter.store(0, Ordering::Relaxed);
    }
}

/// Counts `event` and publishes it as a keyspace event on `name`. Nothing
/// is published (nor is Redis called) while `notify-keyspace-events` leaves
/// the module class out, the default.
pub fn record(ctx: Ctx, event: Event, name: KeyName) {
    count(event);
    let classes = api!(RedisModule_GetNotifyKeyspaceEvents() else raw::REDISMODULE_NOTIFY_ALL);
    if classes & raw::REDISMODULE_NOTIFY_MODULE == 0 {
        return;
    }
    api!(RedisModule_NotifyKeyspaceEvent(
        ctx.raw(),
        raw::REDISMODULE_NOTIFY_MODULE,
        event.name().as_ptr(),
        name.raw_string()
    ) else 0);
}

/// [`record`], and the audit channel's message (when it is on) with what
/// the event says about `fact`'s owner.
#[inline]
pub fn record_fact(ctx: Ctx, event: Event, name: KeyName, fact: super::audit::Fact<'_>) {
    record(ctx, event, name);
    if super::audit::is_on() {
        publish_fact(ctx, event, name, fact);
    }
}

/// The audit channel's message of [`record_fact`]: out of line, so that
/// the commands' path (audit off, the default) does not pass the fact.
#[cold]
#[inline(never)]
fn publish_fact(ctx: Ctx, event: Event, name: KeyName, fact: super::audit::Fact<'_>) {
    let full = event.name().to_bytes();
    let short = full.strip_prefix(b"dlock.").unwrap_or(full);
    let short = std::str::from_utf8(short).unwrap_or("unknown");
    super::audit::publish(ctx, short, ctx.selected_db(), name.bytes(), fact);
}

/// Counts `event` where no key event can be published.
///
/// Only Redis's main thread counts (commands, timers, callbacks; `free` on
/// a background thread counts nothing), so a load and a store suffice: a
/// locked read-modify-write would cost every command for no reader's sake.
pub fn count(event: Event) {
    let (counter, also) = event.counters();
    increment(counter);
    if let Some(also) = also {
        increment(also);
    }
}

fn increment(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each wait lands in the first bucket whose bound (ms) it does not
    /// pass; the buckets INFO shows are cumulative, the count is `+Inf`'s.
    #[test]
    fn waits_land_in_their_buckets() {
        let (before, sum_before, count_before) = wait_histogram();
        for waited_us in [0, 1_000, 1_001, 100_000, 250_000, 250_001, 31_000_000] {
            record_wait(waited_us);
        }
        let (after, sum_after, count_after) = wait_histogram();
        let added: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        // le_1: 0 and 1 ms; le_5: +1.001 ms; le_250: +100 and 250 ms;
        // le_1000: +250.001 ms; +Inf: +31 s.
        assert_eq!(added, vec![2, 3, 3, 3, 5, 6, 6, 6, 7]);
        assert_eq!(count_after - count_before, 7);
        assert_eq!(sum_after - sum_before, 31_602);
    }
}
