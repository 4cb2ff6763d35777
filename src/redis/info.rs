//! The `INFO dlock` section: the event counters of [`stats`] beside what
//! the registries of blocked clients, the grace window and the token
//! counter hold now. It reads them all and nothing reads it, so it sits
//! above them: [`stats`], which every command and callback counts into,
//! imports none of them.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw;

use super::ffi::api;
use super::{awaiters, boxes, grace, multiwaiters, stats, tokens, waiters, watchers};

/// The `INFO dlock` fields.
fn fields() -> [(&'static str, u64); 16] {
    let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let [grace_remaining, grace_deferred, grace_windows] = grace::fields();
    [
        ("acquires", read(&stats::ACQUIRES)),
        ("reentries", read(&stats::REENTRIES)),
        ("releases", read(&stats::RELEASES)),
        ("renewals", read(&stats::RENEWALS)),
        ("handoffs", read(&stats::HANDOFFS)),
        ("lease_expiries", read(&stats::LEASE_EXPIRIES)),
        ("block_timeouts", read(&stats::BLOCK_TIMEOUTS)),
        ("shared_grants", read(&stats::SHARED_GRANTS)),
        ("deadlocks", read(&stats::DEADLOCKS)),
        ("blocked_clients", waiters::blocked_count() as u64),
        ("reservations", crate::lock::stored_reservations()),
        ("reservations_made", read(&stats::RESERVATIONS_MADE)),
        ("last_token", tokens::last()),
        grace_remaining,
        grace_deferred,
        grace_windows,
    ]
}

/// The latch fields of `INFO dlock`, after the lock fields.
fn latch_fields() -> [(&'static str, u64); 5] {
    let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    [
        ("latches_created", read(&stats::LATCHES_CREATED)),
        ("countdowns", read(&stats::COUNTDOWNS)),
        ("latches_opened", read(&stats::LATCHES_OPENED)),
        ("await_timeouts", read(&stats::AWAIT_TIMEOUTS)),
        ("latch_awaiters", awaiters::blocked_count() as u64),
    ]
}

/// The multi-key acquire fields of `INFO dlock`, after the latch fields.
fn multi_fields() -> [(&'static str, u64); 3] {
    let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    [
        ("multi_acquires", read(&stats::MULTI_ACQUIRES)),
        ("multi_handoffs", read(&stats::MULTI_HANDOFFS)),
        ("multi_blocked", multiwaiters::blocked_count() as u64),
    ]
}

/// The `DLOCK.WATCH` fields of `INFO dlock`, after the multi-key fields.
fn watch_fields() -> [(&'static str, u64); 2] {
    [
        ("watchers", watchers::blocked_count() as u64),
        (
            "watch_wakeups",
            watchers::WATCH_WAKEUPS.load(Ordering::Relaxed),
        ),
    ]
}

/// The gauges and counters added with the wait histogram, after the
/// `DLOCK.WATCH` fields: what is stored and held now, and grants by cause.
fn gauge_fields() -> [(&'static str, u64); 8] {
    let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    [
        ("locks", boxes::live_values(boxes::ValueKind::Lock)),
        ("latches", boxes::live_values(boxes::ValueKind::Latch)),
        ("holders", crate::lock::live_holders()),
        ("grants_immediate", read(&stats::ACQUIRES)),
        ("grants_handoff", read(&stats::GRANTS_BY_HANDOFF)),
        ("grants_after_expiry", read(&stats::GRANTS_AFTER_EXPIRY)),
        ("notowner_replies", read(&stats::NOTOWNER_REPLIES)),
        ("oom_refusals", read(&stats::OOM_REFUSALS)),
    ]
}

/// The field names of the wait histogram's buckets, one per
/// [`stats::WAIT_BUCKETS_MS`] bound and `+Inf`.
const WAIT_BUCKET_FIELDS: [&str; stats::WAIT_BUCKETS_MS.len() + 1] = [
    "wait_ms_le_1",
    "wait_ms_le_5",
    "wait_ms_le_10",
    "wait_ms_le_50",
    "wait_ms_le_250",
    "wait_ms_le_1000",
    "wait_ms_le_5000",
    "wait_ms_le_30000",
    "wait_ms_le_inf",
];

/// The wait histogram, cumulative as Prometheus expects, last.
fn wait_fields() -> [(&'static str, u64); stats::WAIT_BUCKETS_MS.len() + 3] {
    let (buckets, sum_ms, count) = stats::wait_histogram();
    let mut fields = [("", 0u64); stats::WAIT_BUCKETS_MS.len() + 3];
    for ((field, name), value) in fields.iter_mut().zip(WAIT_BUCKET_FIELDS).zip(buckets) {
        *field = (name, value);
    }
    let n = WAIT_BUCKET_FIELDS.len();
    fields[n] = ("wait_ms_sum", sum_ms);
    fields[n + 1] = ("wait_ms_count", count);
    fields
}

/// Every field of `INFO dlock` after `version`, in the order shown.
fn every_field() -> impl Iterator<Item = (&'static str, u64)> {
    fields()
        .into_iter()
        .chain(latch_fields())
        .chain(multi_fields())
        .chain(watch_fields())
        .chain(gauge_fields())
        .chain(wait_fields())
}

/// `DLOCK.STATS RESET`: zeroes every counter of `INFO dlock` (not the
/// gauges, nor `dlock_last_token`), as `CONFIG RESETSTAT` zeroes Redis's.
pub fn reset_counters() {
    stats::reset();
    grace::reset_counters();
    watchers::WATCH_WAKEUPS.store(0, Ordering::Relaxed);
}

/// Registers the `INFO dlock` section; called from the module's init.
pub fn register_info(ctx: &redis_module::Context) -> bool {
    api!(RedisModule_RegisterInfoFunc(ctx.ctx, Some(info_section)) else raw::REDISMODULE_ERR as i32)
        == raw::REDISMODULE_OK as i32
}

unsafe extern "C" fn info_section(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: i32) {
    let _ = std::panic::catch_unwind(|| {
        // The default section is named after the module: `INFO dlock`;
        // Redis prefixes each field with `dlock_`.
        api!(RedisModule_InfoAddSection(ctx, c"".as_ptr()) else 0);
        api!(RedisModule_InfoAddFieldCString(ctx, c"version".as_ptr(), crate::version::VERSION_C.as_ptr()) else 0);
        for (name, value) in every_field() {
            let mut field = [0u8; 32];
            let len = name.len().min(field.len() - 1);
            field[..len].copy_from_slice(&name.as_bytes()[..len]);
            api!(RedisModule_InfoAddFieldULongLong(ctx, field.as_ptr().cast(), value) else 0);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_field_names_follow_the_bounds() {
        for (name, bound) in WAIT_BUCKET_FIELDS.iter().zip(stats::WAIT_BUCKETS_MS) {
            assert_eq!(*name, format!("wait_ms_le_{bound}"));
        }
        assert_eq!(WAIT_BUCKET_FIELDS.last(), Some(&"wait_ms_le_inf"));
    }

    #[test]
    fn every_field_name_fits_the_buffer() {
        let names = every_field().map(|(name, _)| name);
        for name in names {
            assert!(!name.is_empty() && name.len() < 32, "{name:?}");
        }
    }
}
