//! The grace window in the server (the rule itself is in
//! [`crate::lock::grace`]): the two configs that bound leases and size the
//! window, the window's state on the monotonic clock, its timer, and the
//! log lines, keyspace events and INFO fields that show it.
//!
//! A window opens when the module loads (server start), when loading data
//! ends (RDB, AOF, a full sync), and when the server becomes master
//! (REPLICAOF NO ONE, Sentinel, Cluster failover). It lasts `dlock.grace-ms`
//! from that moment, measured on the monotonic clock: a stepped wall clock
//! neither shortens nor stretches it, and a promoted replica's window starts
//! at its own promotion. While it is open the commands defer new holds (see
//! `acquire.rs`), and `settle` neither hands a lock on nor looks at it again
//! before the window closes; every lock with waiters is therefore settled
//! by the scheduler's timer when it closes, and its queue served in FIFO
//! order, each grant replicated as an effect like any hand-off.

use std::ffi::CStr;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use redis_module::configuration::{ConfigurationContext, ConfigurationValue};
use redis_module::{raw, RedisError};

use super::ffi::{api, Ctx};
use crate::commands::CommandError;
use crate::lock::grace::Window;

/// A millisecond config of the window, validated against the other one.
pub struct WindowConfig {
    value: AtomicI64,
    /// Whether this is `dlock.grace-ms` (otherwise `dlock.max-lease-ms`).
    is_grace: bool,
}

/// `dlock.max-lease-ms`: the longest lease ACQUIRE, FAIR and RENEW accept
/// (0: no bound). A bound on leases is what makes a grace window finite.
pub static MAX_LEASE_MS: WindowConfig = WindowConfig {
    value: AtomicI64::new(0),
    is_grace: false,
};

/// `dlock.grace-ms`: how long no new hold is granted after the server
/// starts or becomes master (0: no window). At most `dlock.max-lease-ms`,
/// and 0 while that is 0. Redis applies module configs in the order they
/// are registered, max-lease-ms first, so both can be given at startup in
/// any order.
pub static GRACE_MS: WindowConfig = WindowConfig {
    value: AtomicI64::new(0),
    is_grace: true,
};

impl WindowConfig {
    fn get_ms(&self) -> u64 {
        u64::try_from(self.value.load(Ordering::Relaxed)).unwrap_or(0)
    }
}

impl ConfigurationValue<i64> for WindowConfig {
    fn get(&self, _ctx: &ConfigurationContext) -> i64 {
        self.value.load(Ordering::Relaxed)
    }

    fn set(&self, _ctx: &ConfigurationContext, value: i64) -> Result<(), RedisError> {
        let valid = if self.is_grace {
            let max_lease = MAX_LEASE_MS.value.load(Ordering::Relaxed);
            value == 0 || (max_lease > 0 && value <= max_lease)
        } else {
            let grace = GRACE_MS.value.load(Ordering::Relaxed);
            if value == 0 {
                grace == 0
            } else {
                value >= grace
            }
        };
        if !valid {
            return Err(RedisError::Str(if self.is_grace {
                "dlock.grace-ms must be at most dlock.max-lease-ms, and 0 while dlock.max-lease-ms is 0 (no bound on leases)"
            } else {
                "dlock.max-lease-ms must be at least dlock.grace-ms, and can be 0 (no bound) only while dlock.grace-ms is 0"
            }));
        }
        self.value.store(value, Ordering::Relaxed);
        Ok(())
    }
}

/// ACQUIRE, FAIR and RENEW: a ttl above `dlock.max-lease-ms` is refused.
pub fn check_lease(ttl_ms: u64) -> Result<(), CommandError> {
    let limit = MAX_LEASE_MS.get_ms();
    if limit > 0 && ttl_ms > limit {
        return Err(CommandError::LeaseTooLong);
    }
    Ok(())
}

/// The monotonic clock of windows, in µs since the module loaded.
fn monotonic_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let elapsed = EPOCH.get_or_init(Instant::now).elapsed();
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// When the last window opened (monotonic µs + 1; 0: never).
static OPENED_AT: AtomicU64 = AtomicU64::new(0);
/// Requests for a new hold the window deferred.
static DEFERRED: AtomicU64 = AtomicU64::new(0);
/// Windows opened (with `dlock.grace-ms` above 0).
static WINDOWS: AtomicU64 = AtomicU64::new(0);
/// A window was announced (log line, event) and its end not yet.
static ANNOUNCED: AtomicBool = AtomicBool::new(false);
/// The window opened at startup is announced by the first timer (the
/// configs are applied after the module's init).
static STARTUP_PENDING: AtomicBool = AtomicBool::new(false);
/// The id of the armed window timer (0: none).
static TIMER: AtomicU64 = AtomicU64::new(0);
static TIMER_CONTEXT: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Microseconds left in the current window (0: closed or off).
#[inline]
fn remaining_us() -> u64 {
    match GRACE_MS.get_ms() {
        0 => 0,
        grace_ms => remaining_us_of(grace_ms),
    }
}

/// [`remaining_us`] with windows on: out of line, so that the commands'
/// path (windows off, the default) carries only the config load.
#[inline(never)]
fn remaining_us_of(grace_ms: u64) -> u64 {
    let opened = OPENED_AT.load(Ordering::Relaxed);
    if opened == 0 {
        return 0;
    }
    let ends = (opened - 1).saturating_add(grace_ms.saturating_mul(1_000));
    ends.saturating_sub(monotonic_us())
}

/// Whether a window is open (one config load while `dlock.grace-ms` is 0).
#[inline]
pub fn is_open() -> bool {
    remaining_us() != 0
}

/// Milliseconds left in the current window, rounded up (0: closed).
pub fn remaining_ms() -> u64 {
    remaining_us().div_ceil(1_000)
}

/// The window as the lock logic sees it, for a command or timer at wall
/// time `now_ms` (cheap when `dlock.grace-ms` is 0).
pub fn window(now_ms: u64) -> Window {
    match remaining_ms() {
        0 => Window::Closed,
        left => Window::OpenUntil(now_ms.saturating_add(left)),
    }
}

/// Counts a request the window deferred.
pub fn count_deferred() {
    DEFERRED.fetch_add(1, Ordering::Relaxed);
}

/// The `INFO dlock` fields of the window.
pub fn fields() -> [(&'static str, u64); 3] {
    [
        ("grace_remaining_ms", remaining_ms()),
        ("grace_deferred", DEFERRED.load(Ordering::Relaxed)),
        ("grace_windows", WINDOWS.load(Ordering::Relaxed)),
    ]
}

/// `DLOCK.STATS RESET`: zeroes the grace counters (not the open window).
pub fn reset_counters() {
    DEFERRED.store(0, Ordering::Relaxed);
    WINDOWS.store(0, Ordering::Relaxed);
}

/// Opens the startup window; called from the module's init.
pub fn init(ctx: &redis_module::Context) {
    let detached =
        api!(RedisModule_GetDetachedThreadSafeContext(ctx.ctx) else std::ptr::null_mut());
    TIMER_CONTEXT.store(detached, Ordering::Relaxed);
    OPENED_AT.store(monotonic_us().saturating_add(1), Ordering::Relaxed);
    STARTUP_PENDING.store(true, Ordering::Relaxed);
    arm(0);
}

/// A window opens now: the server finished loading data, or became master.
pub fn open(ctx: Ctx, reason: &str) {
    OPENED_AT.store(monotonic_us().saturating_add(1), Ordering::Relaxed);
    STARTUP_PENDING.store(false, Ordering::Relaxed);
    announce_start(ctx, reason);
}

fn announce_start(ctx: Ctx, reason: &str) {
    let left = remaining_ms();
    // A replica grants nothing anyway: its window that counts opens when
    // it is promoted.
    if left == 0 || ctx.flags() & raw::REDISMODULE_CTX_FLAGS_MASTER == 0 {
        return;
    }
    WINDOWS.fetch_add(1, Ordering::Relaxed);
    ANNOUNCED.store(true, Ordering::Relaxed);
    log(
        ctx,
        &format!("grace window opened ({reason}): no new lock hold for {left} ms (dlock.grace-ms)"),
    );
    notify(ctx, c"dlock.grace_start");
    arm(left);
}

fn announce_end(ctx: Ctx) {
    if !ANNOUNCED.swap(false, Ordering::Relaxed) {
        return;
    }
    log(ctx, "grace window closed: new lock holds are granted again");
    notify(ctx, c"dlock.grace_end");
}

fn log(ctx: Ctx, message: &str) {
    redis_module::Context::new(ctx.raw()).log_notice(message);
}

/// The keyspace event (module class) of a window, on the key `dlock:grace`.
fn notify(ctx: Ctx, event: &CStr) {
    let name = ctx.key_name(b"dlock:grace");
    api!(RedisModule_NotifyKeyspaceEvent(
        ctx.raw(),
        raw::REDISMODULE_NOTIFY_MODULE,
        event.as_ptr(),
        name.name().raw_string()
    ) else 0);
}

/// (Re-)arms the window timer `delay_ms` from now.
fn arm(delay_ms: u64) {
    let ctx = TIMER_CONTEXT.load(Ordering::Relaxed);
    if ctx.is_null() {
        return;
    }
    let previous = TIMER.swap(0, Ordering::Relaxed);
    if previous != 0 {
        api!(RedisModule_StopTimer(ctx, previous, std::ptr::null_mut()) else 0);
    }
    let delay = i64::try_from(delay_ms).unwrap_or(i64::MAX);
    let timer =
        api!(RedisModule_CreateTimer(ctx, delay, Some(on_timer), std::ptr::null_mut()) else 0);
    TIMER.store(timer, Ordering::Relaxed);
}

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    TIMER.store(0, Ordering::Relaxed);
    let ctx = Ctx::from_raw(ctx);
    let _ = std::panic::catch_unwind(|| {
        if STARTUP_PENDING.swap(false, Ordering::Relaxed) {
            announce_start(ctx, "server started");
        } else {
            match remaining_ms() {
                // Closed (or dlock.grace-ms lowered): the locks with waiters
                // are settled by the scheduler, which was asked to look at
                // each of them no earlier than the end of the window.
                0 => announce_end(ctx),
                // dlock.grace-ms raised, or a new window: wait for its end.
                left => arm(left),
            }
        }
        if remaining_ms() == 0 {
            // Closed for good: a window opens on a start, a reload or a
            // promotion, and raising dlock.grace-ms later must not reopen
            // this one; and every ACQUIRE, FAIR and RENEW stops reading the
            // monotonic clock for it (`remaining_us` returns at once).
            OPENED_AT.store(0, Ordering::Relaxed);
        }
    });
}
