//! The few operating-system calls the bench needs that std does not offer:
//! raising the open-file limit (10,000 blocked clients), pinning the load
//! generators to a core, tying child processes to the bench's life, and
//! epoll (one thread reading many sockets in the order their data arrives),
//! and a `timerfd` (how late the host wakes a thread for an exact instant).
//! Linux only, like the module's deployment target.

use std::io;
use std::os::raw::{c_int, c_ulong};
use std::time::Duration;

#[repr(C)]
struct RLimit {
    cur: u64,
    max: u64,
}

extern "C" {
    fn getrlimit(resource: c_int, rlim: *mut RLimit) -> c_int;
    fn setrlimit(resource: c_int, rlim: *const RLimit) -> c_int;
    fn prctl(option: c_int, ...) -> c_int;
    fn sched_setaffinity(pid: c_int, size: usize, mask: *const u64) -> c_int;
    fn epoll_create1(flags: c_int) -> c_int;
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut EpollEvent) -> c_int;
    fn epoll_wait(epfd: c_int, events: *mut EpollEvent, max: c_int, timeout_ms: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn timerfd_create(clock: c_int, flags: c_int) -> c_int;
    fn timerfd_settime(
        fd: c_int,
        flags: c_int,
        new: *const ITimerSpec,
        old: *mut ITimerSpec,
    ) -> c_int;
    fn read(fd: c_int, buf: *mut u8, count: usize) -> isize;
}

const RLIMIT_NOFILE: c_int = 7;
const PR_SET_PDEATHSIG: c_int = 1;
const SIGKILL: c_ulong = 9;

/// Raises the soft open-file limit towards `want` (at most the hard limit);
/// returns the soft limit now in force. Child processes inherit it.
pub fn raise_nofile(want: u64) -> u64 {
    let mut limit = RLimit { cur: 0, max: 0 };
    // SAFETY: plain libc calls with a valid pointer to a local struct.
    unsafe {
        if getrlimit(RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.cur < want {
            let raised = RLimit {
                cur: want.min(limit.max),
                max: limit.max,
            };
            if setrlimit(RLIMIT_NOFILE, &raised) == 0 {
                limit.cur = raised.cur;
            }
        }
    }
    limit.cur
}

/// Pins the calling thread (and the threads it starts later) to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut mask = [0u64; 16];
    if cpu >= mask.len() * 64 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "cpu index"));
    }
    mask[cpu / 64] |= 1 << (cpu % 64);
    // SAFETY: the mask is a valid cpu_set_t of the size given.
    let status = unsafe { sched_setaffinity(0, std::mem::size_of_val(&mask), mask.as_ptr()) };
    if status == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// For `CommandExt::pre_exec`: the child gets SIGKILL when the thread that
/// started it ends, so no redis-server outlives a crashed or killed bench.
/// Servers are therefore only started from the main thread.
pub fn die_with_parent() -> io::Result<()> {
    // SAFETY: async-signal-safe syscall wrapper, called between fork and exec.
    let status = unsafe { prctl(PR_SET_PDEATHSIG, SIGKILL, 0 as c_ulong, 0 as c_ulong) };
    if status == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `struct epoll_event`: packed on x86_64, naturally aligned elsewhere.
#[cfg_attr(target_arch = "x86_64", repr(C, packed))]
#[cfg_attr(not(target_arch = "x86_64"), repr(C))]
#[derive(Clone, Copy)]
struct EpollEvent {
    events: u32,
    data: u64,
}

const EPOLL_CLOEXEC: c_int = 0o2_000_000;
const EPOLL_CTL_ADD: c_int = 1;
const EPOLLIN: u32 = 0x001;

/// A level-triggered epoll set of sockets waited on for input, each with a
/// token of the caller's choosing. Waiting costs the same however many
/// sockets are registered, so designs with more sockets are not charged for
/// them.
pub struct Poller {
    fd: c_int,
    events: Vec<EpollEvent>,
}

impl Poller {
    pub fn new(capacity: usize) -> io::Result<Poller> {
        // SAFETY: plain syscall wrapper without pointers.
        let fd = unsafe { epoll_create1(EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poller {
            fd,
            events: vec![EpollEvent { events: 0, data: 0 }; capacity.max(1)],
        })
    }

    /// Watches `socket` for input, reported as `token`.
    pub fn add(&mut self, socket: c_int, token: u64) -> io::Result<()> {
        let mut event = EpollEvent {
            events: EPOLLIN,
            data: token,
        };
        // SAFETY: a valid pointer to a local epoll_event.
        if unsafe { epoll_ctl(self.fd, EPOLL_CTL_ADD, socket, &mut event) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout` for input on any socket; appends the tokens
    /// of the readable ones to `ready` (none when the time ran out).
    pub fn wait(&mut self, timeout: Duration, ready: &mut Vec<u64>) -> io::Result<()> {
        let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as c_int;
        loop {
            // SAFETY: `events` has room for the count given.
            let n = unsafe {
                epoll_wait(
                    self.fd,
                    self.events.as_mut_ptr(),
                    self.events.len() as c_int,
                    timeout_ms,
                )
            };
            if n >= 0 {
                ready.extend(self.events[..n as usize].iter().map(|e| e.data));
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // SAFETY: closes the epoll descriptor this value owns, once.
        unsafe {
            close(self.fd);
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct TimeSpec {
    sec: i64,
    nsec: i64,
}

#[repr(C)]
struct ITimerSpec {
    interval: TimeSpec,
    value: TimeSpec,
}

const CLOCK_REALTIME: c_int = 0;
const TFD_CLOEXEC: c_int = 0o2_000_000;
const TFD_TIMER_ABSTIME: c_int = 1;

/// Sleeps the calling thread until `at` (wall clock) on a `timerfd`, the
/// way the module's lease-expiry wake-up sleeps (`src/redis/wakeup.rs`),
/// and returns how late it woke.
pub fn sleep_until_wall(at: std::time::SystemTime) -> io::Result<Duration> {
    let since = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "instant before the epoch"))?;
    // SAFETY: plain syscall wrapper without pointers.
    let fd = unsafe { timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let spec = ITimerSpec {
        interval: TimeSpec { sec: 0, nsec: 0 },
        value: TimeSpec {
            sec: since.as_secs() as i64,
            nsec: i64::from(since.subsec_nanos()),
        },
    };
    let mut expirations = [0u8; 8];
    // SAFETY: `fd` is the timerfd made above; `spec` and `expirations` are
    // valid for the calls; the descriptor is closed once, here.
    let woke = unsafe {
        let armed = timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) == 0;
        let read = armed && read(fd, expirations.as_mut_ptr(), expirations.len()) == 8;
        let error = io::Error::last_os_error();
        close(fd);
        if read {
            Ok(())
        } else {
            Err(error)
        }
    };
    woke?;
    Ok(std::time::SystemTime::now()
        .duration_since(at)
        .unwrap_or(Duration::ZERO))
}
