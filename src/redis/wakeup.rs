//! A wake-up at an exact instant, for lease ends with waiters queued.
//!
//! Redis runs module timers from its event loop, which sleeps (epoll) in
//! whole milliseconds rounded up: a module timer fires up to a millisecond
//! after the instant it was asked for, and a timer re-armed from inside a
//! timer callback waits at least another millisecond (Redis reschedules its
//! timer event 1 ms ahead when the next module timer is not yet due). A
//! lease that ends with a waiter queued would hand the lock on 1 to 3 ms
//! after its end, against a tenth of that for a release.
//!
//! On Linux the module also arms a `timerfd` for the same instant, on the
//! realtime clock leases are counted in, watched by the event loop
//! (`RedisModule_EventLoopAdd`): the event loop wakes on it to the
//! microsecond, and its callback (a file event, outside the timer callback)
//! re-arms the module timer for "now", which Redis runs in the same turn of
//! the event loop, with a context that may open keys and replicate. The
//! millisecond timer stays armed as the fallback: where the `timerfd` is
//! missing, the hand-off is only later.

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use redis_module::raw;

use super::ffi::api;

/// The timerfd, or -1 when there is none.
static TIMER_FD: AtomicI32 = AtomicI32::new(-1);

/// The function the event loop calls when the instant has come.
static ON_DUE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Creates the timerfd and has the event loop watch it; `on_due` runs on
/// the main thread when an instant set with [`wake_at_us`] has come.
/// Called once from the module's init; without it, [`wake_at_us`] does
/// nothing.
pub fn init(on_due: fn()) {
    // SAFETY: plain system call; the flags are valid for timerfd_create.
    let fd = unsafe {
        libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
    };
    if fd < 0 {
        return;
    }
    let _ = ON_DUE.set(on_due);
    let status = api!(RedisModule_EventLoopAdd(
        fd,
        raw::REDISMODULE_EVENTLOOP_READABLE as c_int,
        Some(on_readable),
        std::ptr::null_mut()
    ) else raw::REDISMODULE_ERR as c_int);
    if status != raw::REDISMODULE_OK as c_int {
        // SAFETY: `fd` is the descriptor created above, used nowhere else.
        unsafe { libc::close(fd) };
        return;
    }
    TIMER_FD.store(fd, Ordering::Relaxed);
}

/// Wakes the event loop at `at_us` (µs since the epoch, realtime clock),
/// replacing any instant set before.
pub fn wake_at_us(at_us: u64) {
    let fd = TIMER_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // A zero it_value disarms a timerfd: an instant at the epoch is "now".
    let at_us = at_us.max(1);
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: libc::time_t::try_from(at_us / 1_000_000).unwrap_or(libc::time_t::MAX),
            tv_nsec: ((at_us % 1_000_000) * 1_000) as libc::c_long,
        },
    };
    // SAFETY: `fd` is our timerfd; `spec` is a valid itimerspec on this
    // frame and the old value is not asked for.
    unsafe {
        libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut());
    }
}

unsafe extern "C" fn on_readable(fd: c_int, _data: *mut c_void, _mask: c_int) {
    let mut expirations = [0u8; 8];
    // SAFETY: reading 8 bytes into an 8-byte buffer from our non-blocking
    // timerfd; this only clears its readiness.
    unsafe {
        libc::read(
            fd,
            expirations.as_mut_ptr().cast::<c_void>(),
            expirations.len(),
        )
    };
    if let Some(on_due) = ON_DUE.get() {
        let _ = std::panic::catch_unwind(on_due);
    }
}
