//! Wall-clock time, the clock Redis itself uses for key expiry.

use std::time::{SystemTime, UNIX_EPOCH};

fn since_epoch() -> std::time::Duration {
    // A clock before 1970 is a broken host; treat it as the epoch rather than panic.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// Microseconds since the Unix epoch: the floor of every new fencing token.
pub fn now_us() -> u64 {
    since_epoch().as_micros() as u64
}
