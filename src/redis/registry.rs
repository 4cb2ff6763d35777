//! Command registration and the `extern "C"` entry points Redis calls.
//!
//! Each entry point borrows argv without copying, runs the command inside
//! `catch_unwind` (a panic unwinding into Redis would abort the server), and
//! turns a returned error into its error reply.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::raw;

use super::command_info;
use super::ffi::{api, Argv, Ctx};
use crate::commands::{acquire, fair, info, release, renew, setstate, CommandResult};
use crate::commands::{awaits, countdown, latch, latchstate, macquire, watch};

type Handler = fn(Ctx, &Argv<'_>) -> CommandResult;

/// One command as registered with Redis.
struct CommandSpec {
    name: &'static CStr,
    flags: &'static CStr,
    entry: raw::RedisModuleCmdFunc,
}

/// Defines an `extern "C"` entry point that dispatches to a handler.
macro_rules! entry_point {
    ($entry:ident => $handler:path) => {
        extern "C" fn $entry(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            dispatch(ctx, argv, argc, $handler)
        }
    };
}

entry_point!(acquire_entry => acquire::run);
entry_point!(fair_entry => fair::run);
entry_point!(release_entry => release::run);
entry_point!(renew_entry => renew::run);
entry_point!(info_entry => info::run);
entry_point!(setstate_entry => setstate::run);
entry_point!(latch_entry => latch::run);
entry_point!(countdown_entry => countdown::run);
entry_point!(await_entry => awaits::run);
entry_point!(latchstate_entry => latchstate::run);
entry_point!(watch_entry => watch::run);

/// DLOCK.MACQUIRE also answers Redis's key-position requests
/// (`getkeys-api`): Redis 7.0 routes Cluster commands by the legacy key
/// range or this callback, not by key specs, so CROSSSLOT needs it.
extern "C" fn macquire_entry(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    if api!(RedisModule_IsKeysPositionRequest(ctx) else 0) != 0 {
        // SAFETY: Redis passes `argc` valid strings that live for the whole call.
        let args = unsafe { Argv::from_raw(argv, argc) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for position in macquire::key_positions(&args) {
                let position = c_int::try_from(position).unwrap_or(0);
                api!(RedisModule_KeyAtPos(ctx, position) else ());
            }
        }));
        return raw::REDISMODULE_OK as c_int;
    }
    dispatch(ctx, argv, argc, macquire::run)
}

/// Every DLOCK command. Writers are `write deny-oom`; INFO is `readonly fast`.
/// All take their key at position 1, so Cluster routes them and replicas
/// refuse the writers with READONLY.
const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"dlock.acquire",
        flags: c"write deny-oom",
        entry: Some(acquire_entry),
    },
    CommandSpec {
        name: c"dlock.fair",
        flags: c"write deny-oom",
        entry: Some(fair_entry),
    },
    CommandSpec {
        name: c"dlock.release",
        flags: c"write deny-oom",
        entry: Some(release_entry),
    },
    CommandSpec {
        name: c"dlock.renew",
        flags: c"write deny-oom",
        entry: Some(renew_entry),
    },
    CommandSpec {
        name: c"dlock.info",
        flags: c"readonly fast",
        entry: Some(info_entry),
    },
    CommandSpec {
        name: c"dlock.setstate",
        flags: c"write deny-oom",
        entry: Some(setstate_entry),
    },
];

/// The count-down latch's commands. COUNTDOWN may only lower memory use and
/// opens latches, so it is not `deny-oom`; AWAIT only reads (and blocks), so
/// it also runs on replicas, where a replicated opening answers it.
const LATCH_COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"dlock.latch",
        flags: c"write deny-oom",
        entry: Some(latch_entry),
    },
    CommandSpec {
        name: c"dlock.countdown",
        flags: c"write",
        entry: Some(countdown_entry),
    },
    CommandSpec {
        name: c"dlock.await",
        flags: c"readonly",
        entry: Some(await_entry),
    },
    CommandSpec {
        name: c"dlock.latchstate",
        flags: c"write deny-oom",
        entry: Some(latchstate_entry),
    },
];

/// Commands that wait for a change of a lock without changing it. WATCH
/// only reads and may block, as XREAD does: `readonly blocking`, never
/// `deny-oom`, and runs on replicas, where a replicated change
/// answers it; nothing of it is propagated.
const WATCH_COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: c"dlock.watch",
    flags: c"readonly blocking",
    entry: Some(watch_entry),
}];

/// Commands whose keys follow a `numkeys` argument. They are created with
/// no legacy key range; their key spec (by numkeys, see [`command_info`])
/// makes Redis find their keys, check their slots in Cluster (CROSSSLOT),
/// and flag them `movablekeys`.
const MULTI_KEY_COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: c"dlock.macquire",
    flags: c"write deny-oom getkeys-api",
    entry: Some(macquire_entry),
}];

fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let ctx = Ctx::from_raw(ctx);
    // SAFETY: Redis passes `argc` valid strings that live for the whole call.
    let args = unsafe { Argv::from_raw(argv, argc) };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(ctx, &args)));
    if !matches!(outcome, Ok(Ok(()))) {
        reply_failure(ctx, outcome);
    }
    raw::REDISMODULE_OK as c_int
}

/// The reply of a command that failed (an error) or panicked. Out of line:
/// every entry point carries only the call.
#[cold]
#[inline(never)]
fn reply_failure(ctx: Ctx, outcome: std::thread::Result<CommandResult>) {
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => ctx.reply_command_error(error),
        Err(_) => ctx.reply_error(c"ERR dlock internal error: the command panicked and changed nothing it could undo; see the server log"),
    }
}

/// Registers every command; called from the module's OnLoad.
pub fn register_commands(ctx: &redis_module::Context) -> Result<(), &'static CStr> {
    let ctx = ctx.ctx;
    for command in COMMANDS.iter().chain(LATCH_COMMANDS).chain(WATCH_COMMANDS) {
        let status = api!(RedisModule_CreateCommand(
            ctx,
            command.name.as_ptr(),
            command.entry,
            command.flags.as_ptr(),
            1,
            1,
            1,
        ) else raw::REDISMODULE_ERR as c_int);
        if status != raw::REDISMODULE_OK as c_int {
            return Err(command.name);
        }
    }
    for command in MULTI_KEY_COMMANDS {
        let status = api!(RedisModule_CreateCommand(
            ctx,
            command.name.as_ptr(),
            command.entry,
            command.flags.as_ptr(),
            0,
            0,
            0,
        ) else raw::REDISMODULE_ERR as c_int);
        if status != raw::REDISMODULE_OK as c_int {
            return Err(command.name);
        }
    }
    for info in command_info::COMMAND_INFO
        .iter()
        .chain(command_info::LATCH_COMMAND_INFO)
        .chain(command_info::WATCH_COMMAND_INFO)
    {
        if !command_info::register(ctx, info) {
            return Err(info.name);
        }
    }
    for info in command_info::MULTI_KEY_COMMAND_INFO {
        if !command_info::register_numkeys(ctx, info) {
            return Err(info.name);
        }
    }
    Ok(())
}
