//! Server and keyspace events: a closed connection releases its SESSION
//! holds; a renamed, moved or swapped lock keeps its waiters reachable; an
//! asynchronous flush hands its waiters' locks on.

use redis_module::raw;

use super::ffi::api;
use super::ffi::{Ctx, KeyName};
use super::{scheduler, waiters};

/// Subscribes to the events above; called from the module's init.
pub fn subscribe(ctx: &redis_module::Context) -> bool {
    let server_events: [(u64, raw::RedisModuleEventCallback); 4] = [
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

unsafe extern "C" fn on_role_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut std::os::raw::c_void,
) {
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
        let _ = std::panic::catch_unwind(waiters::refuse_all);
    }
}

unsafe extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut std::os::raw::c_void,
) {
    // SAFETY: for SWAPDB events Redis passes a RedisModuleSwapDbInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
        return;
    };
    let (first, second) = (info.dbnum_first, info.dbnum_second);
    let _ = std::panic::catch_unwind(|| waiters::swap_databases(first, second));
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

/// RENAME and MOVE carry a lock value, waiters included, to another key or
/// database: follow it, so that a waiter's timeout or disconnect finds it.
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
    if event != b"rename_to" && event != b"move_to" {
        return raw::REDISMODULE_OK as i32;
    }
    let _ = std::panic::catch_unwind(|| {
        let ctx = Ctx::from_raw(ctx);
        let name = KeyName::from_raw(key);
        if let Ok(lock_key) = ctx.open_lock(name, false) {
            if let Some(lock) = lock_key.lock() {
                waiters::relocate(ctx.selected_db(), name.bytes(), lock);
            }
        }
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
