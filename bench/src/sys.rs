//! The few operating-system calls the bench needs that std does not offer:
//! raising the open-file limit (10,000 blocked clients), pinning the load
//! generators to a core, and tying child processes to the bench's life.
//! Linux only, like the module's deployment target.

use std::io;
use std::os::raw::{c_int, c_ulong};

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
