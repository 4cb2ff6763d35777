//! Clients blocked in `DLOCK.AWAIT`: the registry of awaiters and the Redis
//! callbacks that answer them, time them out and notice when they leave.
//!
//! Life of an awaiter: [`block`] adds its id to the latch value and blocks
//! its client (its timeout kept by the module, see [`super::timeouts`]);
//! then exactly one of these happens, and each calls
//! `RedisModule_UnblockClient` exactly once:
//! * the latch value is freed ([`answer`], from the type's free callback):
//!   1 if it opened, 0 if it went away closed (ttl, DEL, FLUSH, eviction);
//!   also 0 when a flush, RENAME, MOVE or SWAPDB takes it away;
//! * its timeout passes: the scheduler takes it out of the latch
//!   ([`time_out`]) and it is answered null;
//! * its connection closes (or CLIENT KILL): the disconnect callback takes it
//!   out of the latch;
//! * `CLIENT UNBLOCK`: Redis's timeout callback takes it out of the latch
//!   and replies null.
//!
//! Redis 7.0 runs `CLIENT UNBLOCK` before replying to clients unblocked
//! earlier in the same event-loop turn: the timeout callback then sends the
//! answer already handed to the client instead of null.
//!
//! All of this runs on Redis's main thread; the registry is a thread-local.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};

use redis_module::raw;

use super::ffi::{api, Ctx, KeyName};
use super::latches::{open_latch, LatchKey};
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
}

/// Where a blocked awaiter waits.
struct Record {
    handle: *mut raw::RedisModuleBlockedClient,
    db: i32,
    key: Box<[u8]>,
}

#[derive(Default)]
struct Registry {
    next_id: WaiterId,
    records: HashMap<WaiterId, Record>,
    by_handle: HashMap<usize, WaiterId>,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

/// Runs `f` on the registry. Never call Redis inside `f`: a Redis call may
/// free a latch value, whose callback needs the registry again.
fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> Option<T> {
    REGISTRY
        .try_with(|registry| registry.try_borrow_mut().ok().map(|mut r| f(&mut r)))
        .ok()
        .flatten()
}

/// Number of blocked awaiters.
pub fn blocked_count() -> usize {
    with_registry(|registry| registry.records.len()).unwrap_or(0)
}

/// Blocks the calling client on the latch in `key` for up to `timeout_ms`
/// (0: no timeout).
pub fn block(
    ctx: Ctx,
    name: KeyName,
    key: &mut LatchKey,
    timeout_ms: u64,
) -> Result<(), CommandError> {
    let id = with_registry(|registry| {
        registry.next_id += 1;
        registry.next_id
    })
    .ok_or(CommandError::BlockFailed)?;
    let latch = key.latch_mut().ok_or(CommandError::BlockFailed)?;
    // No Redis timeout: the module keeps it (see `super::timeouts`).
    let handle = api!(RedisModule_BlockClient(
        ctx.raw(),
        Some(reply_callback),
        Some(timeout_callback),
        Some(free_answer),
        0
    ) else std::ptr::null_mut());
    if handle.is_null() {
        return Err(CommandError::BlockFailed);
    }
    latch.add_awaiter(id);
    let deadline_ms = latch.deadline_ms();
    api!(RedisModule_SetDisconnectCallback(handle, Some(disconnect_callback)) else ());
    let db = ctx.selected_db();
    let record = Record {
        handle,
        db,
        key: name.bytes().into(),
    };
    with_registry(|registry| {
        registry.by_handle.insert(handle as usize, id);
        registry.records.insert(id, record);
    });
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

/// Answers these awaiters (their latch value is going away).
pub fn answer(ids: impl IntoIterator<Item = WaiterId>, answer: Answer) {
    for id in ids {
        unblock(id, answer);
    }
}

fn unblock(id: WaiterId, answer: Answer) {
    let Some(handle) = with_registry(|registry| {
        let record = registry.records.remove(&id)?;
        registry.by_handle.remove(&(record.handle as usize));
        Some(record.handle)
    })
    .flatten() else {
        return;
    };
    unblock_handle(handle, answer);
}

fn unblock_handle(handle: *mut raw::RedisModuleBlockedClient, answer: Answer) {
    let reply = Box::into_raw(Box::new(answer)).cast::<c_void>();
    let status = api!(RedisModule_UnblockClient(handle, reply) else raw::REDISMODULE_ERR as c_int);
    if status != raw::REDISMODULE_OK as c_int {
        // SAFETY: Redis did not take the reply; we still own it.
        drop(unsafe { Box::from_raw(reply.cast::<Answer>()) });
    }
}

/// A flush of database `db` (-1: all) starts: its latches disappear, so
/// their awaiters are answered 0 now (an asynchronous flush frees the
/// values on another thread, where the registry is out of reach).
pub fn flush_database(db: i32) {
    let ids: Vec<WaiterId> = with_registry(|registry| {
        registry
            .records
            .iter()
            .filter(|(_, record)| db == -1 || record.db == db)
            .map(|(id, _)| *id)
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
            .records
            .iter()
            .filter(|(_, record)| record.db == first || record.db == second)
            .map(|(id, record)| (*id, record.db, record.key.clone()))
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

/// An awaiter left (disconnect, `CLIENT UNBLOCK`): takes it out of its
/// latch and releases Redis's handle. `None` if it was no longer waiting.
fn depart(ctx: Ctx, handle: *mut raw::RedisModuleBlockedClient) -> Option<Box<[u8]>> {
    let id =
        with_registry(|registry| registry.by_handle.get(&(handle as usize)).copied()).flatten()?;
    let record = leave(ctx, id)?;
    api!(RedisModule_UnblockClient(handle, std::ptr::null_mut()) else 0);
    Some(record.key)
}

/// Takes awaiter `id` out of the registry and out of its latch. Its client
/// is still blocked.
fn leave(ctx: Ctx, id: WaiterId) -> Option<Record> {
    let record = with_registry(|registry| {
        let record = registry.records.remove(&id)?;
        registry.by_handle.remove(&(record.handle as usize));
        Some(record)
    })
    .flatten()?;
    let previous_db = ctx.selected_db();
    remove_from_latch(ctx, record.db, &record.key, id);
    ctx.select_db(previous_db);
    Some(record)
}

/// Awaiter `id`'s timeout passed (the scheduler's timer): it leaves its
/// latch and is answered null.
pub fn time_out(ctx: Ctx, id: WaiterId) {
    if let Some(record) = leave(ctx, id) {
        let name = ctx.key_name(&record.key);
        stats::record(ctx, Event::AwaitTimeout, name.name());
        unblock_handle(record.handle, Answer::TimedOut);
    }
}

fn reply_answer(ctx: Ctx, answer: Answer) {
    match answer {
        Answer::Opened => ctx.reply_integer(1),
        Answer::Gone => ctx.reply_integer(0),
        Answer::TimedOut => ctx.reply_null(),
    }
}

/// The answer handed to `UnblockClient`, if any.
fn handed_answer(ctx: Ctx) -> Option<Answer> {
    let data = api!(RedisModule_GetBlockedClientPrivateData(ctx.raw()) else std::ptr::null_mut());
    // SAFETY: the only private data we hand to UnblockClient is a
    // Box<Answer>, which Redis keeps until free_answer runs.
    unsafe { data.cast::<Answer>().as_ref() }.copied()
}

extern "C" fn reply_callback(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx::from_raw(ctx);
    let replied = std::panic::catch_unwind(|| match handed_answer(ctx) {
        Some(answer) => reply_answer(ctx, answer),
        None => ctx.reply_null(),
    });
    if replied.is_err() {
        ctx.reply_error(c"ERR dlock internal error while replying to an awaiter");
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn timeout_callback(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx::from_raw(ctx);
    let replied = std::panic::catch_unwind(|| {
        if let Some(answer) = handed_answer(ctx) {
            // Answered in this same event-loop turn, before the timeout ran.
            reply_answer(ctx, answer);
            return;
        }
        let handle = api!(RedisModule_GetBlockedClientHandle(ctx.raw()) else std::ptr::null_mut());
        if let Some(key) = (!handle.is_null()).then(|| depart(ctx, handle)).flatten() {
            let name = ctx.key_name(&key);
            stats::record(ctx, Event::AwaitTimeout, name.name());
        }
        ctx.reply_null();
    });
    if replied.is_err() {
        ctx.reply_null();
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn disconnect_callback(
    ctx: *mut raw::RedisModuleCtx,
    handle: *mut raw::RedisModuleBlockedClient,
) {
    let ctx = Ctx::from_raw(ctx);
    let _ = std::panic::catch_unwind(|| depart(ctx, handle));
}

extern "C" fn free_answer(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: see `handed_answer`; Redis calls this once per handed box.
        drop(unsafe { Box::from_raw(data.cast::<Answer>()) });
    }
}
