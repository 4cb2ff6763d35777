//! Whether lock changes need to be propagated at all.
//!
//! Every change is propagated as an explicit `DLOCK.SETSTATE`/`DEL` effect
//! (see [`super::keyspace`]). Building that command (`RedisModule_Replicate`:
//! a command lookup and one string object per argument) is half the cost of
//! an acquire. Redis itself builds nothing when nobody listens: it writes
//! the replication stream only while the AOF is on, a replica is attached or
//! the replication backlog exists (`shouldPropagate`). The module skips its
//! effects under exactly those conditions, read from `INFO replication` and
//! the context flags, and re-reads them after every event that can change
//! them:
//!
//! * a fork: every full sync of a replica and every AOF rewrite (also the
//!   one that turns the AOF on) forks, and the data a replica or a new AOF
//!   gets from before the fork is the fork's snapshot, so a change skipped
//!   before it is never missing after it;
//! * a replica or master link change, a role change, the end of loading, a
//!   configuration change.
//!
//! A replica that reconnects with a partial resync needs the backlog, which
//! exists from its first full sync on: while it exists, nothing is skipped.

use std::os::raw::c_char;
use std::sync::atomic::{AtomicU8, Ordering};

use redis_module::raw;

use super::ffi::{api, Ctx};

const UNKNOWN: u8 = 0;
const QUIET: u8 = 1;
const NEEDED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether changes made in `ctx` must be propagated.
pub fn needed(ctx: Ctx) -> bool {
    match STATE.load(Ordering::Relaxed) {
        QUIET => false,
        NEEDED => true,
        _ => {
            let needed = listeners(ctx);
            STATE.store(if needed { NEEDED } else { QUIET }, Ordering::Relaxed);
            needed
        }
    }
}

/// Something happened that may add a listener: look again at the next change.
pub fn reconsider() {
    STATE.store(UNKNOWN, Ordering::Relaxed);
}

/// AOF on, not a plain master, a replica attached, or a backlog to feed.
fn listeners(ctx: Ctx) -> bool {
    let flags = ctx.flags();
    if flags & raw::REDISMODULE_CTX_FLAGS_AOF != 0 || flags & raw::REDISMODULE_CTX_FLAGS_MASTER == 0
    {
        return true;
    }
    let info = api!(RedisModule_GetServerInfo(ctx.raw(), c"replication".as_ptr()) else std::ptr::null_mut());
    if info.is_null() {
        return true;
    }
    let field = |name: &std::ffi::CStr| -> Option<i64> {
        let mut error: i32 = 0;
        let value = api!(RedisModule_ServerInfoGetFieldSigned(info, name.as_ptr() as *const c_char, &mut error) else 0);
        (error == 0).then_some(value)
    };
    let replicas = field(c"connected_slaves");
    let backlog = field(c"repl_backlog_active");
    api!(RedisModule_FreeServerInfo(ctx.raw(), info) else ());
    // Unreadable fields count as listeners.
    replicas != Some(0) || backlog != Some(0)
}
