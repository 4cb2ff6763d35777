//! Server events: a closed connection releases its SESSION holds.

use redis_module::raw;

use super::ffi::api;
use super::scheduler;

/// Subscribes to client disconnections; called from the module's init.
pub fn subscribe(ctx: &redis_module::Context) -> bool {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CLIENT_CHANGE,
        dataver: 1,
    };
    api!(RedisModule_SubscribeToServerEvent(ctx.ctx, event, Some(on_client_change)) else raw::REDISMODULE_ERR as i32)
        == raw::REDISMODULE_OK as i32
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
