//! Blocked clients, the part every blocking command shares: a registry of
//! records by id and by Redis handle, blocking a client, answering it, and
//! the Redis callbacks that reply to it, time it out and notice when it
//! leaves. Each kind of blocked client ([`BlockedKind`]: single-key lock
//! waiters, multi-key waiters, latch awaiters) brings its record, its
//! answer, and what it does when a client leaves, times out or is replied
//! to.
//!
//! Life of a blocked client: [`block`] blocks it with no Redis timeout (the
//! caller keeps the deadline, see [`super::timeouts`]) and registers its
//! record; then exactly one of these happens, and each calls
//! `RedisModule_UnblockClient` exactly once, after taking the record out of
//! the registry (so only the first can unblock):
//! * the kind answers it ([`take`], then [`Handle::answer`]): the reply
//!   callback sends the answer ([`BlockedKind::reply`]);
//! * its timeout passes: the timer calls [`time_out`], which takes it out
//!   of its places ([`BlockedKind::leave`]), records the timeout
//!   ([`BlockedKind::timed_out`]) and answers it null
//!   ([`BlockedKind::timeout_answer`]);
//! * its connection closes (or `CLIENT KILL`, `CLIENT UNBLOCK ... ERROR`, a
//!   role change): the disconnect callback takes it out of its places;
//! * `CLIENT UNBLOCK`: Redis's timeout callback takes it out of its places,
//!   records the timeout and replies null.
//!
//! A kind may block its clients on a key instead ([`block_on_key`]), so
//! that Redis tells it ([`BlockedKind::key_ready`]) when any command adds
//! a value at that key. Redis treats such clients differently, and this
//! layer hides it: it replies to them, when the module unblocks them,
//! through the timeout callback with the private data given at blocking
//! (so [`Handle::answer`] leaves the answer in a slot there first), and it
//! releases their handle itself when they leave.
//!
//! Redis 7.0 runs `CLIENT UNBLOCK` before replying to clients unblocked
//! earlier in the same event-loop turn: the timeout callback then sends the
//! answer already handed to the client instead of null, and an answer whose
//! reply Redis drops is given to [`BlockedKind::freed`] undelivered.
//!
//! All of this runs on Redis's main thread; each kind's registry is a
//! thread-local. This layer sits on [`super::ffi`] and imports nothing else
//! of the adapter.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};
use std::thread::LocalKey;

use redis_module::raw;

use super::ffi::{api, Ctx, KeyName};
use super::timeouts::{self, Blocked};
use crate::lock::WaiterId;

/// One kind of blocked client: its record, its answer and its hooks.
pub trait BlockedKind: Sized + 'static {
    /// Where a blocked client waits, and what it asked for.
    type Record;
    /// What a client is unblocked with; its reply callback sends it.
    type Answer;
    /// The reply when replying panicked.
    const REPLY_ERROR: &'static CStr = c"ERR dlock internal error while replying to a waiter";

    /// The kind's registry (a thread-local of its own file).
    fn registry() -> &'static LocalKey<RefCell<Registry<Self>>>;

    /// How client `id` is known to the timeout table ([`timeouts`]): lock
    /// waiters, single- and multi-key, share one id space.
    fn deadline_key(id: WaiterId) -> Blocked {
        Blocked::Waiter(id)
    }

    /// Takes client `id`, just removed from the registry, out of where it
    /// waits. Its client is still blocked.
    fn leave(ctx: Ctx, id: WaiterId, record: &Self::Record);

    /// The answer to a client whose timeout passed (a null reply).
    fn timeout_answer() -> Self::Answer;

    /// Records that the client of `record` timed out (its timeout passed,
    /// or `CLIENT UNBLOCK`).
    fn timed_out(ctx: Ctx, record: &Self::Record);

    /// Sends `answer` to the client (in its reply or timeout callback).
    fn reply(ctx: Ctx, answer: &Self::Answer);

    /// Redis frees an answer it was handed (after replying, or having
    /// dropped the reply).
    fn freed(_answer: Self::Answer) {}

    /// Redis signalled `key`, which a client of this kind blocked on with
    /// [`block_on_key`], as ready: a value was added at it (by any
    /// command). The clients it concerns are answered as usual, through
    /// their handles.
    fn key_ready(_ctx: Ctx, _key: &[u8]) {}
}

/// Where the answer to a client blocked on a key waits for its timeout
/// callback. Redis replies to such a client, when the module unblocks it,
/// through the timeout callback, which it hands the private data given
/// when the client blocked (the one given to `UnblockClient` is dropped).
struct AnswerSlot<A> {
    answer: RefCell<Option<A>>,
}

/// A blocked client's handle, out of the registry: it must be answered
/// (unblocked) once.
pub struct Handle<K: BlockedKind> {
    raw: *mut raw::RedisModuleBlockedClient,
    /// The answer slot of a client blocked on a key ([`block_on_key`]);
    /// null for a client blocked with [`block`].
    slot: *mut AnswerSlot<K::Answer>,
    kind: PhantomData<K>,
}

impl<K: BlockedKind> Handle<K> {
    /// Unblocks the client with the answer its reply callback (its timeout
    /// callback, if it blocked on a key) sends.
    pub fn answer(self, answer: K::Answer) {
        if !self.slot.is_null() {
            self.answer_on_key(answer);
            return;
        }
        let reply = Box::into_raw(Box::new(answer)).cast::<c_void>();
        let status =
            api!(RedisModule_UnblockClient(self.raw, reply) else raw::REDISMODULE_ERR as c_int);
        if status != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis did not take the reply; we still own it.
            drop(unsafe { Box::from_raw(reply.cast::<K::Answer>()) });
        }
    }

    /// [`Handle::answer`] for a client blocked on a key: the answer goes
    /// into its slot, then `UnblockClient` has Redis run the timeout
    /// callback, which sends it (at once on Redis 7.x and Valkey, in the
    /// same event-loop turn on Redis 8).
    fn answer_on_key(self, answer: K::Answer) {
        // SAFETY: the slot lives until free_slot::<K>, which Redis calls
        // only after the client is unblocked; a handle out of the registry
        // has not been unblocked yet (every other way out takes the client
        // out of the registry first).
        let slot = unsafe { &*self.slot };
        // Only the timeout callback borrows the slot, and never while the
        // client is still in the registry; were it borrowed, the client is
        // still unblocked (answered null) rather than left waiting.
        match slot.answer.try_borrow_mut() {
            Ok(mut held) => *held = Some(answer),
            Err(_) => K::freed(answer),
        }
        let status = api!(RedisModule_UnblockClient(self.raw, std::ptr::null_mut())
            else raw::REDISMODULE_ERR as c_int);
        if status != raw::REDISMODULE_OK as c_int {
            if let Some(answer) = slot.answer.take() {
                K::freed(answer);
            }
        }
    }
}

/// A blocked client's registry entry.
struct Entry<K: BlockedKind> {
    handle: *mut raw::RedisModuleBlockedClient,
    /// See [`Handle::slot`].
    slot: *mut AnswerSlot<K::Answer>,
    record: K::Record,
}

/// The blocked clients of one kind, by id and by Redis handle.
pub struct Registry<K: BlockedKind> {
    records: HashMap<WaiterId, Entry<K>>,
    by_handle: HashMap<usize, WaiterId>,
}

impl<K: BlockedKind> Default for Registry<K> {
    fn default() -> Self {
        Self {
            records: HashMap::new(),
            by_handle: HashMap::new(),
        }
    }
}

impl<K: BlockedKind> Registry<K> {
    /// Number of blocked clients.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether client `id` is still blocked and waiting.
    pub fn contains(&self, id: WaiterId) -> bool {
        self.records.contains_key(&id)
    }

    pub fn get(&self, id: WaiterId) -> Option<&K::Record> {
        self.records.get(&id).map(|entry| &entry.record)
    }

    pub fn get_mut(&mut self, id: WaiterId) -> Option<&mut K::Record> {
        self.records.get_mut(&id).map(|entry| &mut entry.record)
    }

    /// Every blocked client, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (WaiterId, &K::Record)> {
        self.records.iter().map(|(id, entry)| (*id, &entry.record))
    }

    fn remove(&mut self, id: WaiterId) -> Option<(Handle<K>, K::Record)> {
        let entry = self.records.remove(&id)?;
        // Its wait ends here, whatever ends it: no timeout is due any more.
        timeouts::remove(K::deadline_key(id));
        self.by_handle.remove(&(entry.handle as usize));
        let handle = Handle {
            raw: entry.handle,
            slot: entry.slot,
            kind: PhantomData,
        };
        Some((handle, entry.record))
    }
}

/// Runs `f` on kind `K`'s registry. Never call Redis inside `f`: a Redis
/// call may free a value whose callback needs the registry again.
pub fn with<K: BlockedKind, T>(f: impl FnOnce(&mut Registry<K>) -> T) -> Option<T> {
    K::registry()
        .try_with(|registry| registry.try_borrow_mut().ok().map(|mut r| f(&mut r)))
        .ok()
        .flatten()
}

/// Blocks the calling client with no Redis timeout (the caller keeps it)
/// and registers it as `id` with `record`. False if Redis refused to block
/// it (nothing is registered).
pub fn block<K: BlockedKind>(ctx: Ctx, id: WaiterId, record: K::Record) -> bool {
    let handle = api!(RedisModule_BlockClient(
        ctx.raw(),
        Some(reply_callback::<K>),
        Some(timeout_callback::<K>),
        Some(free_answer::<K>),
        0
    ) else std::ptr::null_mut());
    if handle.is_null() {
        return false;
    }
    api!(RedisModule_SetDisconnectCallback(handle, Some(disconnect_callback::<K>)) else ());
    with::<K, _>(|registry| {
        registry.by_handle.insert(handle as usize, id);
        registry.records.insert(
            id,
            Entry {
                handle,
                slot: std::ptr::null_mut(),
                record,
            },
        );
    });
    true
}

/// Blocks the calling client on `key`, with no Redis timeout (the caller
/// keeps it), and registers it as `id` with `record`. Redis then calls
/// [`BlockedKind::key_ready`] whenever a value is added at `key`, by any
/// command: what a keyspace-event subscription would tell, at no cost to
/// the commands on other keys. False if Redis refused to block it
/// (nothing is registered).
pub fn block_on_key<K: BlockedKind>(
    ctx: Ctx,
    key: KeyName,
    id: WaiterId,
    record: K::Record,
) -> bool {
    let slot = Box::into_raw(Box::new(AnswerSlot::<K::Answer> {
        answer: RefCell::new(None),
    }));
    let mut keys = [key.raw_string()];
    let handle = api!(RedisModule_BlockClientOnKeys(
        ctx.raw(),
        Some(key_ready_callback::<K>),
        Some(keyed_timeout_callback::<K>),
        Some(free_slot::<K>),
        0,
        keys.as_mut_ptr(),
        1,
        slot.cast::<c_void>()
    ) else std::ptr::null_mut());
    if handle.is_null() {
        // SAFETY: Redis did not take the slot; we still own it.
        drop(unsafe { Box::from_raw(slot) });
        return false;
    }
    api!(RedisModule_SetDisconnectCallback(handle, Some(disconnect_callback::<K>)) else ());
    with::<K, _>(|registry| {
        registry.by_handle.insert(handle as usize, id);
        registry.records.insert(
            id,
            Entry {
                handle,
                slot,
                record,
            },
        );
    });
    true
}

/// Takes client `id` out of the registry, to be answered: its handle (to
/// [`Handle::answer`] once) and its record. None if it no longer waits.
pub fn take<K: BlockedKind>(id: WaiterId) -> Option<(Handle<K>, K::Record)> {
    with::<K, _>(|registry| registry.remove(id)).flatten()
}

/// Client `id`'s timeout passed (the scheduler's timer): it leaves where
/// it waits, the timeout is recorded and it is answered null
/// ([`BlockedKind::timeout_answer`]). False if `id` is no client of this
/// kind.
pub fn time_out<K: BlockedKind>(ctx: Ctx, id: WaiterId) -> bool {
    let Some((handle, record)) = leave::<K>(ctx, id) else {
        return false;
    };
    K::timed_out(ctx, &record);
    handle.answer(K::timeout_answer());
    true
}

/// Takes client `id` out of the registry and out of where it waits. Its
/// client is still blocked.
fn leave<K: BlockedKind>(ctx: Ctx, id: WaiterId) -> Option<(Handle<K>, K::Record)> {
    let (handle, record) = take::<K>(id)?;
    K::leave(ctx, id, &record);
    Some((handle, record))
}

/// A client left (disconnect, `CLIENT UNBLOCK`): takes it out of where it
/// waits and releases Redis's handle. Its record, or None if it was no
/// longer waiting.
fn depart<K: BlockedKind>(
    ctx: Ctx,
    handle: *mut raw::RedisModuleBlockedClient,
) -> Option<K::Record> {
    let id =
        with::<K, _>(|registry| registry.by_handle.get(&(handle as usize)).copied()).flatten()?;
    let (handle, record) = leave::<K>(ctx, id)?;
    // Redis releases the handle of a client blocked on a key itself when
    // it leaves (and would run its timeout callback again if asked to).
    if handle.slot.is_null() {
        api!(RedisModule_UnblockClient(handle.raw, std::ptr::null_mut()) else 0);
    }
    Some(record)
}

/// The answer handed to `UnblockClient`, if any.
fn handed_answer<'a, K: BlockedKind>(ctx: Ctx) -> Option<&'a K::Answer> {
    let data = api!(RedisModule_GetBlockedClientPrivateData(ctx.raw()) else std::ptr::null_mut());
    // SAFETY: the only private data handed to UnblockClient for a client
    // blocked with K's callbacks is a Box<K::Answer> (`Handle::answer`),
    // which Redis keeps until free_answer::<K> runs.
    unsafe { data.cast::<K::Answer>().as_ref() }
}

extern "C" fn reply_callback<K: BlockedKind>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx::from_raw(ctx);
    let replied = std::panic::catch_unwind(|| match handed_answer::<K>(ctx) {
        Some(answer) => K::reply(ctx, answer),
        None => ctx.reply_null(),
    });
    if replied.is_err() {
        ctx.reply_error(K::REPLY_ERROR);
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn timeout_callback<K: BlockedKind>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // An answer handed in this same event-loop turn, before the timeout ran.
    reply_answer_or_time_out::<K>(ctx, |ctx| {
        handed_answer::<K>(ctx).map(|answer| K::reply(ctx, answer))
    })
}

/// What both timeout callbacks do: send the answer the module already gave
/// the client, if `send_answer` finds one (`Some`); else Redis timed the
/// client out (`CLIENT UNBLOCK`): it leaves where it waits, the timeout is
/// recorded and it is answered null.
fn reply_answer_or_time_out<K: BlockedKind>(
    ctx: *mut raw::RedisModuleCtx,
    send_answer: impl FnOnce(Ctx) -> Option<()>,
) -> c_int {
    let ctx = Ctx::from_raw(ctx);
    let replied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if send_answer(ctx).is_some() {
            return;
        }
        let handle = api!(RedisModule_GetBlockedClientHandle(ctx.raw()) else std::ptr::null_mut());
        if let Some(record) = (!handle.is_null())
            .then(|| depart::<K>(ctx, handle))
            .flatten()
        {
            K::timed_out(ctx, &record);
        }
        ctx.reply_null();
    }));
    if replied.is_err() {
        ctx.reply_null();
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn disconnect_callback<K: BlockedKind>(
    ctx: *mut raw::RedisModuleCtx,
    handle: *mut raw::RedisModuleBlockedClient,
) {
    let ctx = Ctx::from_raw(ctx);
    let _ = std::panic::catch_unwind(|| depart::<K>(ctx, handle));
}

extern "C" fn free_answer<K: BlockedKind>(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: see `handed_answer`; Redis calls this once per handed box.
    let answer = unsafe { Box::from_raw(data.cast::<K::Answer>()) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| K::freed(*answer)));
}

/// The reply callback of a client blocked on a key: Redis calls it when a
/// value is added at the key. It never replies itself: the clients the
/// change concerns, this one included, are answered through their
/// handles, so Redis is told that this call served no one.
extern "C" fn key_ready_callback<K: BlockedKind>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx::from_raw(ctx);
    let key = api!(RedisModule_GetBlockedClientReadyKey(ctx.raw()) else std::ptr::null_mut());
    if !key.is_null() {
        let key = KeyName::from_raw(key);
        let _ = std::panic::catch_unwind(|| K::key_ready(ctx, key.bytes()));
    }
    raw::REDISMODULE_ERR as c_int
}

/// The timeout callback of a client blocked on a key: it sends the answer
/// in the slot ([`Handle::answer_on_key`]); with none, `CLIENT UNBLOCK`
/// timed the client out.
extern "C" fn keyed_timeout_callback<K: BlockedKind>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    reply_answer_or_time_out::<K>(ctx, |ctx| {
        let data =
            api!(RedisModule_GetBlockedClientPrivateData(ctx.raw()) else std::ptr::null_mut());
        // SAFETY: the private data of a client blocked with these callbacks
        // is its AnswerSlot (`block_on_key`), which Redis keeps until
        // free_slot::<K> runs, after this callback.
        let slot = unsafe { data.cast::<AnswerSlot<K::Answer>>().as_ref() }?;
        let held = slot.answer.try_borrow().ok()?;
        held.as_ref().map(|answer| K::reply(ctx, answer))
    })
}

extern "C" fn free_slot<K: BlockedKind>(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: see `keyed_timeout_callback`; Redis calls this once, when it
    // frees the blocked client.
    let slot = unsafe { Box::from_raw(data.cast::<AnswerSlot<K::Answer>>()) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Some(answer) = slot.answer.into_inner() {
            K::freed(answer);
        }
    }));
}
