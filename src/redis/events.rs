//! Server and keyspace events: a closed connection releases its SESSION
//! holds; a renamed, moved or swapped lock keeps its waiters reachable; an
//! asynchronous flush hands its waiters' locks on.

use redis_module::raw;

use super::ffi::api;
use super::ffi::{Ctx, KeyName};
use super::{awaiters, propagation, scheduler, waiters};

/// Subscribes to the events above; called from the module's init.
pub fn subscribe(ctx: &redis_module::Context) -> bool {
    let server_events: [(u64, raw::RedisModuleEventCallback); 9] = [
        (raw::REDISMODULE_EVENT_FORK_CHILD, Some(on_listener_change)),
        (
            raw::REDISMODULE_EVENT_REPLICA_CHANGE,
            Some(on_listener_change),
        ),
        (
            raw::REDISMODULE_EVENT_MASTER_LINK_CHANGE,
            Some(on_listener_change),
        ),
        (raw::REDISMODULE_EVENT_LOADING, Some(on_listener_change)),
        (raw::REDISMODULE_EVENT_CONFIG, Some(on_listener_change)),
        (raw::REDISMODULE_EVENT_CLIENT_CHANGE, Some(on_client_change)),
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            Some(on_role_change),
        ),
        (raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb)),
        (raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flush)),
    ];
    for (id, callback) in server_events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        let status = api!(RedisModule_SubscribeToServerEvent(ctx.ctx, event, callback) else raw::REDISMODULE_ERR as i32);
        if status != raw::REDISMODULE_OK as i32 {
            return false;
        }
    }
    api!(RedisModule_SubscribeToKeyspaceEvents(ctx.ctx, raw::REDISMODULE_NOTIFY_GENERIC, Some(on_keyspace_event)) else raw::REDISMODULE_ERR as i32)
        == raw::REDISMODULE_OK as i32
}

/// Anything that may start or stop the replication stream (see
/// [`propagation`]): a fork, a replica or master link change, loading, a
/// configuration change.
unsafe extern "C" fn on_listener_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut std::os::raw::c_void,
) {
    propagation::reconsider();
}

unsafe extern "C" fn on_role_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut std::os::raw::c_void,
) {
    propagation::reconsider();
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
        let _ = std::panic::catch_unwind(waiters::refuse_all);
    }
}

unsafe extern "C" fn on_swapdb(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut std::os::raw::c_void,
) {
    // SAFETY: for SWAPDB events Redis passes a RedisModuleSwapDbInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
        return;
    };
    let (first, second) = (info.dbnum_first, info.dbnum_second);
    let ctx = Ctx::from_raw(ctx);
    let _ = std::panic::catch_unwind(|| {
        scheduler::swap_session_databases(first, second);
        // Waiters asked for a key in their database; its value now lives in
        // the other one. They are answered null (and retry), never granted a
        // lock that is no longer under the name they asked for.
        let moved = waiters::in_databases(first, second);
        let previous_db = ctx.selected_db();
        for (id, db, key, seq) in &moved {
            let now_in = if *db == first { second } else { first };
            if let Some((mut lock_key, _name)) = ctx.open_lock_in(now_in, key, false) {
                if let Some(lock) = lock_key.lock_mut() {
                    lock.remove_waiter(*seq, *id);
                }
            }
        }
        ctx.select_db(previous_db);
        waiters::refuse_ids(moved.into_iter().map(|(id, ..)| id));
        awaiters::databases_swapped(ctx, first, second);
    });
}

unsafe extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut std::os::raw::c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_START {
        return;
    }
    // SAFETY: for FLUSHDB events Redis passes a RedisModuleFlushInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
        return;
    };
    flush_awaiters(info);
    if info.sync != 0 {
        // A synchronous flush frees each value on this thread, and the
        // value's free callback re-queues its waiters.
        return;
    }
    // An asynchronous flush frees the values on a background thread, where
    // the registry is out of reach: re-queue the waiters from it now.
    let db = info.dbnum;
    let _ = std::panic::catch_unwind(|| {
        scheduler::adopt_orphans(waiters::orphan_database(db));
    });
}

/// A flush (either kind) answers the awaiters of its latches 0 before it
/// starts; see [`awaiters::flush_database`].
fn flush_awaiters(info: &raw::RedisModuleFlushInfo) {
    let db = info.dbnum;
    let _ = std::panic::catch_unwind(|| awaiters::flush_database(db));
}

thread_local! {
    /// The source of a RENAME or MOVE in progress (its `*_from` event comes
    /// just before its `*_to` event).
    static MOVING_FROM: std::cell::RefCell<Option<(i32, Box<[u8]>)>> =
        const { std::cell::RefCell::new(None) };
}

/// RENAME and MOVE carry a lock value to another name or database. Its
/// waiters asked for the old name: they are answered null (and retry)
/// rather than granted a lock under a name they did not ask for. A SESSION
/// hold keeps following its connection.
unsafe extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: std::os::raw::c_int,
    event: *const std::os::raw::c_char,
    key: *mut raw::RedisModuleString,
) -> std::os::raw::c_int {
    if event.is_null() {
        return raw::REDISMODULE_OK as i32;
    }
    // SAFETY: Redis passes a NUL-terminated event name.
    let event = unsafe { std::ffi::CStr::from_ptr(event) }.to_bytes();
    let arriving = match event {
        b"rename_from" | b"move_from" => false,
        b"rename_to" | b"move_to" => true,
        _ => return raw::REDISMODULE_OK as i32,
    };
    let _ = std::panic::catch_unwind(|| {
        let ctx = Ctx::from_raw(ctx);
        let name = KeyName::from_raw(key);
        let here = (ctx.selected_db(), Box::<[u8]>::from(name.bytes()));
        if !arriving {
            let _ = MOVING_FROM.try_with(|from| from.replace(Some(here)));
            return;
        }
        let from = MOVING_FROM
            .try_with(|from| from.borrow_mut().take())
            .ok()
            .flatten();
        let Ok(mut lock_key) = ctx.open_lock(name, false) else {
            awaiters::latch_moved(ctx, name);
            return;
        };
        let Some(lock) = lock_key.lock_mut() else {
            return;
        };
        if let Some((from_db, from_key)) = from {
            scheduler::move_session_place((from_db, &from_key), (here.0, &here.1));
        }
        let departed = lock.take_waiters();
        waiters::refuse(departed);
    });
    raw::REDISMODULE_OK as i32
}
unsafe extern "C" fn on_client_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut std::os::raw::c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED {
        return;
    }
    // SAFETY: for client-change events Redis passes a RedisModuleClientInfo
    // (version 1, as subscribed) that lives for the duration of the call.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleClientInfo>().as_ref() }) else {
        return;
    };
    let client = info.id;
    let _ = std::panic::catch_unwind(|| scheduler::client_closed(client));
}
