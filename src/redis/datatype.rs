//! The lock's native data type: RDB save/load, AOF rewrite, digest, memory
//! usage, copy, free, and the RDB aux field that persists the token counter.
//!
//! A lock value's RDB encoding (version 2; version 1 files still load) is
//! [`crate::lock::codec`]'s.
//!
//! Aux data (before the keyspace), encoding version 1:
//!   unsigned  last fencing token issued

use std::os::raw::{c_char, c_int, c_longlong, c_void};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::boxes::{self, on_main_thread};
use super::ffi::{api, KeyName};
use super::stats::{self, Event};
use super::typeio::{guarded, RdbIo};
use super::{audit, orphans, scheduler, tokens, watchers};
use crate::lock::codec::{self, reservations};
use crate::lock::{Hold, Lock, Mode, MAX_TOKEN};

/// Records Redis's main thread and declares the module's options; called
/// from the module's init:
/// * `HANDLE_IO_ERRORS`: a truncated or corrupt value is reported to the
///   loader as an error instead of aborting the server;
/// * `HANDLE_REPL_ASYNC_LOAD`: a replica may load its master's data set
///   beside the live one (`repl-diskless-load swapdb`, async loading); the
///   module keeps the two apart (see [`super::events`]). Servers without
///   async loading ignore the flag.
pub fn init(ctx: &redis_module::Context) {
    boxes::mark_main_thread();
    let options =
        raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS | raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD;
    api!(RedisModule_SetModuleOptions(ctx.ctx, options as c_int) else ());
}

/// The type name shown by TYPE; exactly 9 characters, as Redis requires.
pub const TYPE_NAME: &str = "dlocklock";
/// Current RDB encoding version of lock values and of the aux field (the
/// aux field's layout is the same in versions 1 and 2).
pub const ENCODING_VERSION: i32 = codec::VERSION;

pub static LOCK_TYPE: RedisType = RedisType::new(
    TYPE_NAME,
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        // Without a free effort Redis counts a value as one allocation and
        // frees it at once, on the main thread, right after unlinking it.
        free_effort2: None,
        unlink2: Some(unlink),
        copy2: None,
        aux_save2: None,
    },
);

/// What `redis_module!` registers as the module's data type: creates
/// [`LOCK_TYPE`], first quieting the crate's defrag notice.
pub struct LockTypeRegistration;

/// The `data_types:` entry of the module (see [`LockTypeRegistration`]).
pub static LOCK_TYPE_REGISTRATION: LockTypeRegistration = LockTypeRegistration;

impl LockTypeRegistration {
    /// Called by the OnLoad that `redis_module!` generates, after
    /// `RedisModule_Init` and before the crate registers defrag callbacks.
    pub fn create_data_type(&self, ctx: *mut raw::RedisModuleCtx) -> Result<(), &'static str> {
        quiet_defrag_notice(ctx);
        LOCK_TYPE.create_data_type(ctx)?;
        if let Ok(raw_type) = LOCK_TYPE.raw_type.try_borrow() {
            super::ffi::set_lock_type(*raw_type);
        }
        Ok(())
    }
}

/// redis-module 2.0.8's OnLoad logs "Skip register defrag callbacks as
/// defrag callbacks is not supported on the current Redis server." at
/// warning level on every server without `RedisModule_RegisterDefragCallbacks`
/// (Redis 7.0, Valkey), although dlock registers no defrag callbacks and
/// loses nothing. The line is not dlock's and its level is fixed in the
/// crate, so where the API is missing this fills the crate's function
/// pointer with a stand-in that registers nothing (the crate calls it only
/// when defrag callbacks exist, and dlock has none) and logs the fact at
/// verbose level instead.
fn quiet_defrag_notice(ctx: *mut raw::RedisModuleCtx) {
    // SAFETY: Redis filled the API pointers in RedisModule_Init on this
    // (main) thread; nothing reads them concurrently during OnLoad.
    let missing =
        unsafe { std::ptr::addr_of!(raw::RedisModule_RegisterDefragCallbacks).read() }.is_none();
    if missing {
        // SAFETY: as above; the stand-in has the pointer's exact signature.
        unsafe { raw::RedisModule_RegisterDefragCallbacks = Some(no_defrag_callbacks) };
        redis_module::Context::new(ctx).log_verbose(
            "dlock: this server has no defrag callbacks API; dlock registers none, nothing is lost",
        );
    }
}

/// Stands in for `RedisModule_RegisterDefragCallbacks` on servers without
/// it: there is nothing to register.
unsafe extern "C" fn no_defrag_callbacks(
    _ctx: *mut raw::RedisModuleCtx,
    _start: raw::RedisModuleDefragFunc,
    _end: raw::RedisModuleDefragFunc,
) -> c_int {
    raw::REDISMODULE_OK as c_int
}

/// Borrows the lock behind a value pointer Redis handed to a type callback.
///
/// # Safety
/// `value` must be null or a pointer produced by `Box::<Lock>::into_raw` that
/// Redis still owns.
unsafe fn lock_ref<'a>(value: *mut c_void) -> Option<&'a Lock> {
    // SAFETY: guaranteed by the caller.
    unsafe { value.cast::<Lock>().as_ref() }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || {
        // SAFETY: Redis passes a value of this type.
        if let Some(lock) = unsafe { lock_ref(value) } {
            codec::encode(lock, &mut RdbIo(rdb));
        }
    })
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        let lock = codec::decode(&mut RdbIo(rdb), encver).filter(|_| !raw::is_io_error(rdb));
        match lock {
            Some(lock) => {
                for hold in lock.holders().iter() {
                    tokens::observe_loaded(hold.token);
                }
                super::boxes::value_created(super::boxes::ValueKind::Lock);
                Box::into_raw(Box::new(lock)).cast::<c_void>()
            }
            // Null makes Redis reject the payload (RESTORE fails, a load stops
            // with an error) instead of storing a corrupt lock.
            None => std::ptr::null_mut(),
        }
    })
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guarded((), || {
        // SAFETY: Redis passes a value of this type.
        let Some(lock) = (unsafe { lock_ref(value) }) else {
            return;
        };
        // The same commands replication uses; Redis appends PEXPIREAT with
        // the key's expire after them.
        for hold in lock.holders().iter() {
            emit_hold(aof, key, hold);
        }
        for (owner, deadline_ms, want) in reservations(lock) {
            let limit = want.limit.map_or(0, u64::from) as c_longlong;
            match want.mode {
                Mode::Exclusive => api!(RedisModule_EmitAOF(
                    aof,
                    c"DLOCK.SETSTATE".as_ptr(),
                    c"scbl".as_ptr(),
                    key,
                    c"RESERVE".as_ptr(),
                    owner.as_ptr().cast::<c_char>(),
                    owner.len(),
                    deadline_ms as c_longlong,
                ) else ()),
                Mode::Shared if want.weight == 1 => api!(RedisModule_EmitAOF(
                    aof,
                    c"DLOCK.SETSTATE".as_ptr(),
                    c"scblcl".as_ptr(),
                    key,
                    c"RESERVE".as_ptr(),
                    owner.as_ptr().cast::<c_char>(),
                    owner.len(),
                    deadline_ms as c_longlong,
                    c"SHARED".as_ptr(),
                    limit,
                ) else ()),
                Mode::Shared => api!(RedisModule_EmitAOF(
                    aof,
                    c"DLOCK.SETSTATE".as_ptr(),
                    c"scblclcl".as_ptr(),
                    key,
                    c"RESERVE".as_ptr(),
                    owner.as_ptr().cast::<c_char>(),
                    owner.len(),
                    deadline_ms as c_longlong,
                    c"SHARED".as_ptr(),
                    limit,
                    c"WEIGHT".as_ptr(),
                    c_longlong::from(want.weight),
                ) else ()),
            }
        }
    })
}

/// Writes one holder as `DLOCK.SETSTATE key HOLDER ...` (the key is new in
/// a rewritten AOF, so every holder is added beside the others).
fn emit_hold(aof: *mut raw::RedisModuleIO, key: *mut raw::RedisModuleString, hold: &Hold) {
    let owner = hold.owner.as_ptr().cast::<c_char>();
    let (exclusive, token, deadline) = (
        hold.exclusive as c_longlong,
        hold.token as c_longlong,
        hold.deadline_ms as c_longlong,
    );
    if hold.shared == 0 {
        api!(RedisModule_EmitAOF(
            aof,
            c"DLOCK.SETSTATE".as_ptr(),
            c"scblll".as_ptr(),
            key,
            c"HOLDER".as_ptr(),
            owner,
            hold.owner.len(),
            exclusive,
            token,
            deadline,
        ) else ());
    } else if hold.weight == 1 {
        api!(RedisModule_EmitAOF(
            aof,
            c"DLOCK.SETSTATE".as_ptr(),
            c"scblllcl".as_ptr(),
            key,
            c"HOLDER".as_ptr(),
            owner,
            hold.owner.len(),
            exclusive,
            token,
            deadline,
            c"SHARED".as_ptr(),
            hold.shared as c_longlong,
        ) else ());
    } else {
        api!(RedisModule_EmitAOF(
            aof,
            c"DLOCK.SETSTATE".as_ptr(),
            c"scblllclcl".as_ptr(),
            key,
            c"HOLDER".as_ptr(),
            owner,
            hold.owner.len(),
            exclusive,
            token,
            deadline,
            c"SHARED".as_ptr(),
            hold.shared as c_longlong,
            c"WEIGHT".as_ptr(),
            c_longlong::from(hold.weight),
        ) else ());
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    guarded(0, || {
        // SAFETY: Redis passes a value of this type.
        let lock = unsafe { lock_ref(value.cast_mut()) };
        std::mem::size_of::<Lock>() + lock.map_or(0, Lock::heap_bytes)
    })
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded((), || {
        // SAFETY: Redis passes a value of this type.
        let Some(lock) = (unsafe { lock_ref(value) }) else {
            return;
        };
        for hold in lock.holders().iter() {
            api!(RedisModule_DigestAddStringBuffer(md, hold.owner.as_ptr().cast::<c_char>(), hold.owner.len()) else ());
            for number in [
                hold.exclusive,
                u64::from(hold.shared),
                hold.token,
                hold.deadline_ms,
            ] {
                api!(RedisModule_DigestAddLongLong(md, number as c_longlong) else ());
            }
            // Added only when not 1: an unweighted lock digests as before.
            if hold.weight != 1 {
                api!(RedisModule_DigestAddLongLong(md, c_longlong::from(hold.weight)) else ());
            }
        }
        for (owner, deadline_ms, want) in reservations(lock) {
            api!(RedisModule_DigestAddStringBuffer(md, owner.as_ptr().cast::<c_char>(), owner.len()) else ());
            let mode = match want.mode {
                Mode::Exclusive => 0,
                Mode::Shared => 1,
            };
            for number in [deadline_ms, mode, want.limit.map_or(0, u64::from)] {
                api!(RedisModule_DigestAddLongLong(md, number as c_longlong) else ());
            }
            if want.weight != 1 {
                api!(RedisModule_DigestAddLongLong(md, c_longlong::from(want.weight)) else ());
            }
        }
        api!(RedisModule_DigestEndSequence(md) else ());
    })
}

unsafe extern "C" fn free(value: *mut c_void) {
    if value.is_null() {
        return;
    }
    super::boxes::value_freed(super::boxes::ValueKind::Lock);
    // SAFETY: every value of this type was made by Box::<Lock>::into_raw and
    // Redis calls free exactly once, when it drops the value.
    let lock = unsafe { Box::from_raw(value.cast::<Lock>()) };
    if lock.holders().is_empty()
        && lock.queue().waiter_count() == 0
        && !scheduler::may_have_departures()
    {
        // The common end of a lock (released, then deleted), on any thread:
        // nothing to do but keep the box.
        boxes::recycle(lock);
        return;
    }
    free_held(lock, value as usize);
}

/// [`free`] of a lock with holders or waiters, or while waiters may have
/// departed from unlinked values: out of line, so that the common end of a
/// lock carries only the call. It takes the box, so that the lock's drop
/// (holders, queue) is out of line too.
#[inline(never)]
#[allow(clippy::boxed_local)]
fn free_held(mut lock: Box<Lock>, value: usize) {
    if !on_main_thread() {
        // An asynchronous flush (FLUSHALL ASYNC, a replica discarding a data
        // set after a diskless load) frees on a background thread, where the
        // main thread's registries must not be touched; its waiters were
        // dealt with by the flush event, and nothing is counted but the
        // holders gauge, apart from the main thread's count.
        lock.clear_holders_off_main_thread();
        return;
    }
    // Waiters taken out when Redis unlinked the value (see `unlink`).
    let (place, mut departed) = scheduler::take_departed_waiters(value);
    if lock.holders().is_empty() && lock.queue().waiter_count() == 0 && departed.is_empty() {
        return;
    }
    let now = crate::clock::now_ms();
    // Judged from the lease's last millisecond on: Redis 8 expires a key
    // in its expire's own millisecond (see `Hold::ended_by_removal_at`).
    let lease_expired = lock.holders().all_ended_by_removal_at(now);
    departed.extend(lock.take_waiters());
    if departed.is_empty() {
        if lease_expired {
            // Redis expired the key (or it was deleted after its lease ended).
            stats::count(Event::Expire);
        }
        return;
    }
    // The key was deleted, flushed, evicted or expired under its waiters:
    // they are re-queued at the same key and the head is granted, by a timer
    // (no key may be touched while Redis is freeing one).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let groups = orphans::locate(departed, lease_expired, place);
        scheduler::adopt_orphans(groups);
    }));
}

/// For the audit channel: the holds of a value Redis takes off its key
/// after their leases ended (Redis expiring the key, or a DEL after the
/// lease) are published as `expire`.
fn publish_ended_leases(ctx: *mut raw::RedisModuleKeyOptCtx, lock: &Lock) {
    let now = crate::clock::now_ms();
    if !lock
        .holders()
        .iter()
        .any(|hold| hold.ended_by_removal_at(now))
    {
        return;
    }
    let key = api!(RedisModule_GetKeyNameFromOptCtx(ctx) else std::ptr::null());
    if key.is_null() {
        return;
    }
    let db = api!(RedisModule_GetDbIdFromOptCtx(ctx) else 0);
    let name = KeyName::from_raw(key.cast_mut());
    let ended = lock
        .holders()
        .iter()
        .filter(|hold| hold.ended_by_removal_at(now));
    audit::publish_ended(db, name.bytes(), ended);
}

/// Redis took the value off its key: deleted (DEL, UNLINK, expiry,
/// eviction, overwrite; `free` follows at once) or moved (RENAME, MOVE;
/// nothing follows). Most locks have neither waiters nor a SESSION hold and
/// cost two reads here. Otherwise the waiters leave the value now, so that
/// a moved lock never grants them a name they did not ask for, and the
/// scheduler learns which of the two it was (see `scheduler::depart`).
/// This replaces a keyspace-event subscription, which made Redis call into
/// the module for every DEL and EXPIRE of any key.
unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    // SAFETY: Redis passes a value of this type, still alive.
    let Some(lock) = (unsafe { lock_ref(value.cast_mut()) }) else {
        return;
    };
    if watchers::any() {
        tell_watchers(ctx);
    }
    // The common end of a lock (its last hold released, then the key
    // deleted): nothing to publish, nobody depends on the place. Read
    // before the guarded part, which stays out of line.
    if lock.holders().is_empty() && lock.queue().waiter_count() == 0 && !audit::is_on() {
        return;
    }
    // SAFETY: as above.
    unsafe { unlink_held(ctx, value) }
}

/// The value leaves its key: its watchers (`DLOCK.WATCH`) learn that the
/// key has no holder now. Out of line: only while clients watch.
#[cold]
#[inline(never)]
fn tell_watchers(ctx: *mut raw::RedisModuleKeyOptCtx) {
    guarded((), || {
        if !on_main_thread() {
            return;
        }
        let key = api!(RedisModule_GetKeyNameFromOptCtx(ctx) else std::ptr::null());
        if key.is_null() {
            return;
        }
        let db = api!(RedisModule_GetDbIdFromOptCtx(ctx) else -1);
        let name = KeyName::from_raw(key.cast_mut());
        watchers::key_removed(db, name.bytes());
    })
}

/// [`unlink`] of a value with holders or waiters, or with the audit
/// channel on.
///
/// # Safety
/// As [`unlink`]: `value` is a live value of this type.
#[inline(never)]
unsafe fn unlink_held(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guarded((), || {
        // SAFETY: Redis passes a value of this type, still alive; it is ours
        // to change (Redis only moves or frees it).
        let Some(lock) = (unsafe { value.cast_mut().cast::<Lock>().as_mut() }) else {
            return;
        };
        if !on_main_thread() {
            return;
        }
        if audit::is_on() {
            publish_ended_leases(ctx, lock);
        }
        let has_session = lock.holders().iter().any(|hold| hold.session.is_some());
        if lock.queue().waiter_count() == 0 && !has_session {
            return;
        }
        let sessions = lock
            .holders()
            .iter()
            .filter_map(|hold| hold.session.map(std::num::NonZeroU64::get))
            .collect();
        let db = api!(RedisModule_GetDbIdFromOptCtx(ctx) else 0);
        let name = api!(RedisModule_GetKeyNameFromOptCtx(ctx) else std::ptr::null());
        let name = KeyName::from_raw(name.cast_mut());
        scheduler::depart(
            value as usize,
            db,
            name.bytes(),
            lock.take_waiters(),
            sessions,
        );
    })
}

unsafe extern "C" fn copy(
    _from_key: *mut raw::RedisModuleString,
    _to_key: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: Redis passes a value of this type.
        match unsafe { lock_ref(value.cast_mut()) } {
            // A copy has no waiters (they wait on the original) and no SESSION tie.
            Some(lock) => {
                super::boxes::value_created(super::boxes::ValueKind::Lock);
                Box::into_raw(Box::new(lock.persistent_copy())).cast::<c_void>()
            }
            None => std::ptr::null_mut(),
        }
    })
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    guarded((), || {
        if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            raw::save_unsigned(rdb, tokens::last());
        }
    })
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    guarded(raw::REDISMODULE_ERR as c_int, || {
        if !(1..=ENCODING_VERSION).contains(&encver)
            || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int
        {
            return raw::REDISMODULE_ERR as c_int;
        }
        match raw::load_unsigned(rdb) {
            Ok(last) if last <= MAX_TOKEN => {
                tokens::observe_loaded(last);
                raw::REDISMODULE_OK as c_int
            }
            _ => raw::REDISMODULE_ERR as c_int,
        }
    })
}
