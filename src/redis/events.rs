//! Server events: a closed connection releases its SESSION holds; a
//! swapped lock keeps its waiters reachable; an asynchronous flush hands its
//! waiters' locks on; a replica's load beside the live data set stays apart
//! from it. (RENAME and MOVE reach the data type's unlink callback.)

use redis_module::raw;

use super::ffi::api;
use super::ffi::Ctx;
use super::{awaiters, grace, orphans, propagation, scheduler, tokens, waiters, watchers};

/// Subscribes to the events above; called from the module's init.
pub fn subscribe(ctx: &redis_module::Context) -> bool {
    let server_events: [(u64, raw::RedisModuleEventCallback); 10] = [
        (raw::REDISMODULE_EVENT_FORK_CHILD, Some(on_listener_change)),
        (
            raw::REDISMODULE_EVENT_REPLICA_CHANGE,
            Some(on_listener_change),
        ),
        (
            raw::REDISMODULE_EVENT_MASTER_LINK_CHANGE,
            Some(on_listener_change),
        ),
        (raw::REDISMODULE_EVENT_LOADING, Some(on_loading)),
        (raw::REDISMODULE_EVENT_CONFIG, Some(on_listener_change)),
        (raw::REDISMODULE_EVENT_CLIENT_CHANGE, Some(on_client_change)),
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            Some(on_role_change),
        ),
        (raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb)),
        (raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flush)),
        (raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD, Some(on_async_load)),
    ];
    // No keyspace-event subscription: Redis would call into the module for
    // every DEL and EXPIRE of any key. RENAME and MOVE of a lock reach the
    // data type's unlink callback instead (see `datatype::unlink`).
    for (id, callback) in server_events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        let status = api!(RedisModule_SubscribeToServerEvent(ctx.ctx, event, callback) else raw::REDISMODULE_ERR as i32);
        if status != raw::REDISMODULE_OK as i32 {
            return false;
        }
    }
    true
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
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut std::os::raw::c_void,
) {
    propagation::reconsider();
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
        let _ = std::panic::catch_unwind(orphans::refuse_all);
    }
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
        let ctx = Ctx::from_raw(ctx);
        let _ = std::panic::catch_unwind(|| grace::open(ctx, "promoted to master"));
    }
}

/// Loading data (RDB, AOF, a full sync) may start or stop the replication
/// stream; its end opens a grace window.
unsafe extern "C" fn on_loading(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut std::os::raw::c_void,
) {
    propagation::reconsider();
    if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED {
        let ctx = Ctx::from_raw(ctx);
        let _ = std::panic::catch_unwind(|| grace::open(ctx, "data loaded"));
        // A replica's full sync loads its keys without a callback per key.
        let _ = std::panic::catch_unwind(|| watchers::recheck_all(ctx));
    }
}

/// A replica loading its master's data set beside the live one (diskless
/// `swapdb` loading; with async loading it keeps serving the old locks
/// meanwhile). Lock values live in the keyspace and follow their data set;
/// what lives outside it is kept apart:
/// * tokens read from the loading data set are set aside until it replaces
///   the live one, and dropped if the load is aborted;
/// * on completion the old data set is discarded (freed on a background
///   thread, where its values cannot reach the registries): waiters, due
///   keys, orphans and SESSION places of the old data set are forgotten
///   and any waiter is answered null, as on a role change.
unsafe extern "C" fn on_async_load(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut std::os::raw::c_void,
) {
    let _ = std::panic::catch_unwind(|| match subevent {
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_STARTED => tokens::begin_aside(),
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_ABORTED => tokens::discard_aside(),
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED => {
            tokens::adopt_aside();
            orphans::refuse_all();
            scheduler::forget_keyspace();
            watchers::recheck_all(Ctx::from_raw(ctx));
        }
        _ => {}
    });
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
            if let Some((mut lock_key, _name)) = ctx.open_lock_in(now_in, key) {
                if let Some(lock) = lock_key.lock_mut() {
                    lock.remove_waiter(*seq, *id);
                }
            }
        }
        ctx.select_db(previous_db);
        orphans::refuse_ids(moved.into_iter().map(|(id, ..)| id));
        awaiters::databases_swapped(ctx, first, second);
        watchers::recheck_databases(ctx, first, second);
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
        scheduler::adopt_orphans(orphans::orphan_database(db));
    });
}

/// A flush (either kind) answers the awaiters of its latches 0 before it
/// starts, and the watchers of its locks `[0, nil, -1]`; see
/// [`awaiters::flush_database`] and [`watchers::flush_database`].
fn flush_awaiters(info: &raw::RedisModuleFlushInfo) {
    let db = info.dbnum;
    let _ = std::panic::catch_unwind(|| awaiters::flush_database(db));
    let _ = std::panic::catch_unwind(|| watchers::flush_database(db));
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
