//! Clients blocked in `DLOCK.AWAIT`: the registry of awaiters and the Redis
//! callbacks that answer them, time them out and notice when they leave.
//!
//! Life of an awaiter (the blocked-client rules of [`super::blocked`]):
//! [`block`] adds its id to the latch value and blocks its client (its
//! timeout kept by the module, see [`super::timeouts`]); then exactly one
//! of these happens:
//! * the latch value is freed ([`answer`], from the type's free callback):
//!   1 if it opened, 0 if it went away closed (ttl, DEL, FLUSH, eviction);
//!   also 0 when a flush, RENAME, MOVE or SWAPDB takes it away;
//! * its timeout passes: the scheduler takes it out of the latch
//!   ([`time_out`]) and it is answered null;
//! * its connection closes (or CLIENT KILL): it is taken out of the latch;
//! * `CLIENT UNBLOCK`: it is taken out of the latch and answered null.
//!
//! All of this runs on Redis's main thread; the registry is a thread-local.

use std::cell::{Cell, RefCell};
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::LocalKey;

use super::blocked::{self, BlockedKind, Registry};
use super::ffi::{Ctx, KeyName};
use super::latches::{open_latch, LatchEnd, LatchKey};
use super::scheduler;
use super::stats::{self, Event};
use super::timeouts::Blocked;
use crate::commands::CommandError;
use crate::lock::WaiterId;

/// What an awaiter is told when its latch goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The latch opened: 1.
    Opened,
    /// The latch disappeared without opening: 0.
    Gone,
    /// The AWAIT timeout passed: null.
    TimedOut,
    /// In Redis Cluster, the latch was removed before its deadline and may
    /// live on at another node: null, so that the client may wait again.
    Removed,
}

/// Where a blocked awaiter waits.
struct Record {
    db: i32,
    key: Box<[u8]>,
}

/// Latch awaiters, as blocked clients.
struct Awaiters;

thread_local! {
    static REGISTRY: RefCell<Registry<Awaiters>> = RefCell::new(Registry::default());
    static NEXT_ID: Cell<WaiterId> = const { Cell::new(0) };
}

impl BlockedKind for Awaiters {
    type Record = Record;
    type Answer = Answer;
    const REPLY_ERROR: &'static CStr = c"ERR dlock internal error while replying to an awaiter";

    fn deadline_key(id: WaiterId) -> Blocked {
        Blocked::Awaiter(id)
    }

    fn registry() -> &'static LocalKey<RefCell<Registry<Self>>> {
        &REGISTRY
    }

    /// An awaiter leaving is taken out of its latch.
    fn leave(ctx: Ctx, id: WaiterId, record: &Record) {
        let previous_db = ctx.selected_db();
        remove_from_latch(ctx, record.db, &record.key, id);
        ctx.select_db(previous_db);
    }

    fn timeout_answer() -> Answer {
        Answer::TimedOut
    }

    fn timed_out(ctx: Ctx, record: &Record) {
        let name = ctx.key_name(&record.key);
        stats::record(ctx, Event::AwaitTimeout, name.name());
    }

    fn reply(ctx: Ctx, answer: &Answer) {
        match answer {
            Answer::Opened => ctx.reply_integer(1),
            Answer::Gone => ctx.reply_integer(0),
            Answer::TimedOut | Answer::Removed => ctx.reply_null(),
        }
    }
}

/// Runs `f` on the registry. Never call Redis inside `f`: a Redis call may
/// free a latch value, whose callback needs the registry again.
fn with_registry<T>(f: impl FnOnce(&mut Registry<Awaiters>) -> T) -> Option<T> {
    blocked::with(f)
}

/// Number of blocked awaiters.
pub fn blocked_count() -> usize {
    with_registry(|registry| registry.len()).unwrap_or(0)
}

/// Blocks the calling client on the latch in `key` for up to `timeout_ms`
/// (0: no timeout).
pub fn block(
    ctx: Ctx,
    name: KeyName,
    key: &mut LatchKey,
    timeout_ms: u64,
) -> Result<(), CommandError> {
    let id = NEXT_ID
        .try_with(|next| {
            next.set(next.get() + 1);
            next.get()
        })
        .map_err(|_| CommandError::BlockFailed)?;
    let latch = key.latch_mut().ok_or(CommandError::BlockFailed)?;
    let db = ctx.selected_db();
    let record = Record {
        db,
        key: name.bytes().into(),
    };
    // No Redis timeout: the module keeps it (see `super::timeouts`).
    if !blocked::block::<Awaiters>(ctx, id, record) {
        return Err(CommandError::BlockFailed);
    }
    latch.add_awaiter(id);
    let deadline_ms = latch.deadline_ms();
    if timeout_ms > 0 {
        let now_ms = crate::clock::now_ms();
        scheduler::time_out_at(now_ms.saturating_add(timeout_ms), Blocked::Awaiter(id));
    }
    // Redis removes an expired key when it next samples or touches it; the
    // scheduler touches it just after its deadline, so that the awaiters
    // hear of the expiry at once.
    scheduler::wake_at(deadline_ms.saturating_add(1), db, name.bytes());
    Ok(())
}

/// Whether this server runs in Redis Cluster mode (`cluster-enabled` cannot
/// change while it runs). Read where Redis frees a value, with no context.
static IN_CLUSTER: AtomicBool = AtomicBool::new(false);

/// Has the latch data type answer its awaiters through this registry;
/// called once from the module's init.
pub fn init(ctx: &redis_module::Context) {
    IN_CLUSTER.store(Ctx::from_raw(ctx.ctx).in_cluster(), Ordering::Relaxed);
    super::latches::set_awaiter_answer(answer_latch_gone);
}

/// A latch value is going away: its awaiters are answered 1 if it had
/// opened, 0 if it closed. In Redis Cluster, a latch removed before its
/// deadline may have moved to another node (MIGRATE during resharding
/// deletes it here exactly as DEL does), where it lives on: its awaiters
/// are answered null, as for a timeout, and may wait again, following
/// MOVED. (Lock waiters get null there for the same reason.)
fn answer_latch_gone(ids: Vec<WaiterId>, end: LatchEnd) {
    let reply = match end {
        LatchEnd::Opened => Answer::Opened,
        LatchEnd::Removed if IN_CLUSTER.load(Ordering::Relaxed) => Answer::Removed,
        LatchEnd::Expired | LatchEnd::Removed => Answer::Gone,
    };
    answer(ids, reply);
}

/// Answers these awaiters (their latch value is going away).
pub fn answer(ids: impl IntoIterator<Item = WaiterId>, answer: Answer) {
    for id in ids {
        if let Some((handle, _)) = blocked::take::<Awaiters>(id) {
            handle.answer(answer);
        }
    }
}

/// A flush of database `db` (-1: all) starts: its latches disappear, so
/// their awaiters are answered 0 now (an asynchronous flush frees the
/// values on another thread, where the registry is out of reach).
pub fn flush_database(db: i32) {
    let ids: Vec<WaiterId> = with_registry(|registry| {
        registry
            .iter()
            .filter(|(_, record)| db == -1 || record.db == db)
            .map(|(id, _)| id)
            .collect()
    })
    .unwrap_or_default();
    answer(ids, Answer::Gone);
}

/// SWAPDB of `first` and `second`: the latches their awaiters wait for now
/// live under the other database: they are answered 0.
pub fn databases_swapped(ctx: Ctx, first: i32, second: i32) {
    let moved: Vec<(WaiterId, i32, Box<[u8]>)> = with_registry(|registry| {
        registry
            .iter()
            .filter(|(_, record)| record.db == first || record.db == second)
            .map(|(id, record)| (id, record.db, record.key.clone()))
            .collect()
    })
    .unwrap_or_default();
    if moved.is_empty() {
        return;
    }
    let previous_db = ctx.selected_db();
    for (id, db, key) in &moved {
        let now_in = if *db == first { second } else { first };
        remove_from_latch(ctx, now_in, key, *id);
    }
    ctx.select_db(previous_db);
    answer(moved.into_iter().map(|(id, ..)| id), Answer::Gone);
}

/// Takes awaiter `id` out of the latch at `db`/`key`, if it is there. The
/// key is opened read-only: an awaiter leaving is no change to the data
/// (nothing to replicate, no WATCH to invalidate).
fn remove_from_latch(ctx: Ctx, db: i32, key: &[u8], id: WaiterId) {
    if !ctx.select_db(db) {
        return;
    }
    let name = ctx.key_name(key);
    if let Ok(mut latch_key) = open_latch(ctx, name.name(), false) {
        if let Some(latch) = latch_key.latch_mut() {
            latch.remove_awaiter(id);
        }
    }
}

/// Awaiter `id`'s timeout passed (the scheduler's timer): it leaves its
/// latch and is answered null.
pub fn time_out(ctx: Ctx, id: WaiterId) {
    blocked::time_out::<Awaiters>(ctx, id);
}
