//! Wall-clock time, the clock Redis itself uses for key expiry.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    now_us() / 1_000
}

/// Microseconds since the Unix epoch: the floor of every new fencing token.
/// Read once per command (see docs/design.md, "Hot path").
#[inline]
pub fn now_us() -> u64 {
    crate::redis::realtime::now_us().unwrap_or_else(now_us_from_std)
}

/// The time of the running command, in µs since the Unix epoch: the time
/// the server read as the command started, where it offers it to modules
/// (Redis 7.2 and later, Valkey), which spares the command a clock read and
/// puts its leases and tokens on the very instant Redis judges key expiry
/// by; the wall clock ([`now_us`]) on Redis 7.0. A command's time is never
/// before its request arrived, so a lease started there still covers the
/// client's whole ttl from its send. Only for code a command runs (its
/// handler): outside a command the cached time is that of the event loop's
/// last wake-up, which a timer or callback must not start a lease at.
#[inline]
pub fn command_now_us() -> u64 {
    crate::redis::realtime::command_us().unwrap_or_else(now_us)
}

/// The clock could not be read directly: ask std. A clock before 1970 is a
/// broken host; treat it as the epoch rather than panic. Out of line: the
/// commands' path never comes here.
#[cold]
#[inline(never)]
fn now_us_from_std() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}
