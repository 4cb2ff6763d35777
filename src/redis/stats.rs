//! Counters for `INFO dlock` (see [`super::info`]) and the keyspace events
//! lock changes publish.
//!
//! Events are published with the module class (`notify-keyspace-events`
//! flag `d`), e.g. `CONFIG SET notify-keyspace-events Kd` and then
//! `PSUBSCRIBE __keyspace@0__:*` shows `dlock.acquire`, `dlock.release`, ...

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
