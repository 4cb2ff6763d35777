//! The wall clock, read with one `clock_gettime(CLOCK_REALTIME)` (a vDSO
//! call, no system call). [`crate::clock`] is the crate's clock; this is
//! only its unsafe part. `std::time::SystemTime` reads the same clock, but
//! its conversion to a `Duration` since the epoch (checked subtraction,
//! normalisation) cost each command more than the read itself.
//!
//! Where the server offers it (Redis 7.2 and later, Valkey), a command
//! takes its time from the server instead: the time Redis read once as the
//! command started, and uses itself for key expiry and `SET .. PX`
//! ([`command_us`]).

use super::ffi::api;
use redis_module::raw;

/// Microseconds since the Unix epoch; `None` when the clock cannot be read
/// or is before the epoch.
#[inline]
pub fn now_us() -> Option<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call's duration.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    if status != 0 {
        return None;
    }
    let seconds = u64::try_from(now.tv_sec).ok()?;
    let micros = u64::try_from(now.tv_nsec).ok()? / 1_000;
    Some(seconds.saturating_mul(1_000_000).saturating_add(micros))
}

/// The server's time of the running command, in µs since the epoch
/// (`RedisModule_CachedMicroseconds`: Redis reads the clock as a command
/// starts, or as the event loop wakes up outside one, and keeps it in
/// `server.ustime`); `None` where the server lacks the call (Redis 7.0)
/// or the time is before the epoch. Only for code that a command runs.
#[inline]
pub fn command_us() -> Option<u64> {
    let cached = api!(RedisModule_CachedMicroseconds() else 0);
    u64::try_from(cached).ok().filter(|us| *us > 0)
}
