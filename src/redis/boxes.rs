//! Boxes for lock values, which thread is Redis's main thread, and how
//! many lock and latch values keys hold (`dlock_locks`, `dlock_latches`).
//!
//! A lock value is allocated and freed once per ACQUIRE + RELEASE pair. The
//! box of a freed, bare lock ([`Lock::is_bare`]) is kept (at most [`SPARE_BOXES`], on the main
//! thread only) for the next new lock, which spares Redis's allocator a
//! malloc and a free (and their used-memory accounting) per lock; kept
//! boxes count in Redis's used memory like any module allocation.
//!
//! A bottom layer: it imports nothing else of the adapter, so that both the
//! FFI wrappers (which store new values) and the data type's callbacks
//! (which free them) can use it.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicI64, Ordering};

use crate::lock::Lock;

/// What the module keeps per thread (only the main thread uses it).
struct ThreadState {
    /// True on Redis's main thread (set in the module's init, which runs there).
    is_main: Cell<bool>,
    /// Boxes of freed, bare lock values, kept for the next new lock.
    #[allow(clippy::vec_box)] // the boxes themselves are what is kept
    spare: RefCell<Vec<Box<Lock>>>,
}

/// The most lock boxes kept for reuse (96 bytes each).
const SPARE_BOXES: usize = 32;

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            is_main: Cell::new(false),
            spare: RefCell::new(Vec::new()),
        }
    };
}

/// Records the calling thread as Redis's main thread; called from the
/// module's init, which runs there.
pub fn mark_main_thread() {
    THREAD.with(|thread| thread.is_main.set(true));
}

/// Whether the calling thread is Redis's main thread (values are also freed
/// on background threads: `FLUSHALL ASYNC`, lazy free).
pub fn on_main_thread() -> bool {
    THREAD
        .try_with(|thread| thread.is_main.get())
        .unwrap_or(false)
}

/// A box holding `lock`: a kept one if there is one, else a new one.
pub fn boxed_lock(lock: Lock) -> Box<Lock> {
    let spare = THREAD
        .try_with(|thread| thread.spare.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten();
    match spare {
        Some(mut boxed) => {
            // A kept box holds a bare lock, which owns nothing: overwriting
            // it needs no drop (which cost the pair about 40 instructions).
            debug_assert!(boxed.is_bare(), "the pool keeps only bare locks");
            std::mem::forget(std::mem::replace(&mut *boxed, lock));
            boxed
        }
        None => Box::new(lock),
    }
}

/// Keeps the box of a freed lock value that is bare ([`Lock::is_bare`]:
/// it held and queued nothing, or its holds ended and nobody ever queued),
/// on the main thread while fewer than [`SPARE_BOXES`] are kept; frees it
/// otherwise.
pub fn recycle(lock: Box<Lock>) {
    let _ = THREAD.try_with(move |thread| {
        if !thread.is_main.get() || !lock.is_bare() {
            return;
        }
        if let Ok(mut spare) = thread.spare.try_borrow_mut() {
            if spare.len() < SPARE_BOXES {
                spare.push(lock);
            }
        }
    });
}

// ---------------------------------------------------------------------------
// How many lock and latch values keys hold now: the `dlock_locks` and
// `dlock_latches` gauges of `INFO dlock`. Each is added to where a value is
// made for a key (a command storing a new value, RDB load and RESTORE,
// COPY) and taken from in the type's `free`, which Redis calls for every
// value it drops: DEL, expiry, eviction, an overwrite, a flush, a replica
// discarding its data set. RENAME, MOVE and SWAPDB move values without
// either. Values are made and (nearly always) freed on the main thread,
// where a load and a store suffice, as for the event counters: a locked
// read-modify-write would cost every new and freed lock for no reader's
// sake. `free` on a background thread (`FLUSHALL ASYNC`) counts apart,
// atomically. Here, at the bottom, so that the FFI wrappers (which store
// new values) can count.
// ---------------------------------------------------------------------------

static LIVE_LOCKS: AtomicI64 = AtomicI64::new(0);
static LIVE_LATCHES: AtomicI64 = AtomicI64::new(0);
static LOCKS_FREED_IN_BACKGROUND: AtomicI64 = AtomicI64::new(0);
static LATCHES_FREED_IN_BACKGROUND: AtomicI64 = AtomicI64::new(0);

/// The kind of a module value.
#[derive(Clone, Copy, Debug)]
pub enum ValueKind {
    Lock,
    Latch,
}

/// The main thread's count of `kind`, and the count freed elsewhere.
fn gauges(kind: ValueKind) -> (&'static AtomicI64, &'static AtomicI64) {
    match kind {
        ValueKind::Lock => (&LIVE_LOCKS, &LOCKS_FREED_IN_BACKGROUND),
        ValueKind::Latch => (&LIVE_LATCHES, &LATCHES_FREED_IN_BACKGROUND),
    }
}

/// A value of `kind` was made for a key (on the main thread: commands,
/// RDB load, COPY; elsewhere it is counted atomically all the same).
#[inline]
pub fn value_created(kind: ValueKind) {
    let (main, background) = gauges(kind);
    if on_main_thread() {
        main.store(main.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    } else {
        background.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Redis freed a value of `kind` (any thread).
#[inline]
pub fn value_freed(kind: ValueKind) {
    let (main, background) = gauges(kind);
    if on_main_thread() {
        main.store(main.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
    } else {
        background.fetch_add(1, Ordering::Relaxed);
    }
}

/// Values of `kind` in keys now (never below zero).
pub fn live_values(kind: ValueKind) -> u64 {
    let (main, background) = gauges(kind);
    (main.load(Ordering::Relaxed) - background.load(Ordering::Relaxed)).max(0) as u64
}
