//! dlock: native distributed-lock commands for Redis.
//!
//! * [`lock`]: the pure lock state machine (no Redis);
//! * [`commands`]: one file per command and the shared argument parser;
//! * [`redis`]: the data type, entry points and replication, and all `unsafe`.

pub mod clock;
pub mod commands;
pub mod lock;
pub mod redis;
pub mod version;

/// Module registration. Unit tests and the fuzz targets run without a
/// server, so the module (and Redis's allocator, which aborts when used
/// outside Redis) is compiled only into the real library.
#[cfg(all(not(test), feature = "module"))]
mod module {
    use crate::commands::fair::FAIR_RESERVATION_MS;
    use crate::redis::audit::AUDIT_CHANNEL;
    use crate::redis::datatype::{self, LOCK_TYPE_REGISTRATION};
    use crate::redis::grace::{self, GRACE_MS, MAX_LEASE_MS};
    use crate::redis::latches::LATCH_TYPE;
    use crate::redis::{events, info, registry, upkeep};
    use redis_module::configuration::ConfigurationFlags;
    use redis_module::{redis_module, Context, RedisString, Status};

    fn initialize(ctx: &Context, _args: &[RedisString]) -> Status {
        datatype::init(ctx);
        crate::redis::audit::init(ctx);
        upkeep::init(ctx);
        crate::redis::awaiters::init(ctx);
        crate::redis::watchers::init();
        grace::init(ctx);
        if let Err(name) = registry::register_commands(ctx) {
            ctx.log_warning(&format!("dlock: failed to register {name:?}"));
            return Status::Err;
        }
        if !info::register_info(ctx) {
            ctx.log_warning("dlock: failed to register the INFO section");
            return Status::Err;
        }
        if !events::subscribe(ctx) {
            ctx.log_warning("dlock: failed to subscribe to client events");
            return Status::Err;
        }
        Status::Ok
    }

    redis_module! {
        name: "dlock",
        version: crate::version::MODULE_VERSION,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [LOCK_TYPE_REGISTRATION, LATCH_TYPE],
        init: initialize,
        configurations: [
            i64: [
                ["fair-reservation-ms", &FAIR_RESERVATION_MS, 5_000, 1, (1 << 53) - 1, ConfigurationFlags::DEFAULT, None],
                // Registered (so applied at startup) max-lease-ms first: grace-ms is checked against it.
                ["max-lease-ms", &MAX_LEASE_MS, 0, 0, (1 << 53) - 1, ConfigurationFlags::DEFAULT, None],
                ["grace-ms", &GRACE_MS, 0, 0, (1 << 53) - 1, ConfigurationFlags::DEFAULT, None],
            ],
            string: [
                ["audit-channel", &AUDIT_CHANNEL, "", ConfigurationFlags::DEFAULT, None],
            ],
            bool: [],
            enum: [],
            module_args_as_configuration: true,
        ]
    }
}
