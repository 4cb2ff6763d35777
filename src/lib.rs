//! dlock: native distributed-lock commands for Redis.
//!
//! * [`lock`]: the pure lock state machine (no Redis);
//! * [`commands`]: one file per command and the shared argument parser;
//! * [`redis`]: the data type, entry points and replication, and all `unsafe`.

pub mod clock;
pub mod commands;
pub mod lock;
pub mod redis;

/// Module registration. Unit tests run without a server, so the module (and
/// Redis's allocator, which aborts when used outside Redis) is compiled only
/// into the real library.
#[cfg(not(test))]
mod module {
    use crate::redis::datatype::LOCK_TYPE;
    use redis_module::{redis_module, Context, RedisString, Status};

    fn initialize(ctx: &Context, _args: &[RedisString]) -> Status {
        match crate::redis::registry::register_commands(ctx) {
            Ok(()) => Status::Ok,
            Err(name) => {
                ctx.log_warning(&format!("dlock: failed to register {name:?}"));
                Status::Err
            }
        }
    }

    redis_module! {
        name: "dlock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [LOCK_TYPE],
        init: initialize,
    }
}
