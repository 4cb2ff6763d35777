//! Command registration and the `extern "C"` entry points Redis calls.
//!
//! Each entry point borrows argv without copying, runs the command inside
//! `catch_unwind` (a panic unwinding into Redis would abort the server), and
//! turns a returned error into its error reply.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;

use redis_module::raw;

use super::command_info;
use super::ffi::{self, api, Argv, Ctx};
use crate::commands::CommandError;
use crate::commands::{acquire, fair, info, release, renew, setstate, CommandResult};
use crate::commands::{awaits, countdown, latch, latchstate, macquire, stats, watch};

type Handler = fn(Ctx, &Argv<'_>) -> CommandResult;

/// One command as registered with Redis.
struct CommandSpec {
    name: &'static CStr,
    flags: &'static CStr,
    /// Its ACL categories where the server has them (Redis 7.2+, Valkey),
    /// the ones a Redis user expects from its flags: `write` or `read`,
    /// `fast` (for the `fast` flag) or `slow`, and `blocking` for a command
    /// that can block its client. The module's own category ([`CATEGORY`])
    /// is added to every command where the server allows it.
    acl: &'static CStr,
    entry: raw::RedisModuleCmdFunc,
}

/// The ACL category of every DLOCK command, where the server lets modules
/// add categories (Redis 7.4+, Valkey 8+): `+@dlock` grants the module.
const CATEGORY: &CStr = c"dlock";

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
    ($entry:ident => creates $handler:path) => {
        extern "C" fn $entry(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            dispatch(ctx, argv, argc, |ctx, args| {
                refuse_over_maxmemory(ctx)?;
                $handler(ctx, args)
            })
        }
    };
}

/// The commands that create state (ACQUIRE, FAIR, MACQUIRE, LATCH) are
/// refused with `OOM` while memory is over `maxmemory`, in Redis's words.
/// The module refuses them itself instead of flagging them `deny-oom`:
/// Redis refuses a `deny-oom` command before the module sees it, so the
/// module could not count the refusals (`dlock_oom_refusals`). Redis has
/// run its eviction before the command either way, so the same commands
/// are refused at the same moments; only inside `MULTI` the refusal is
/// the command's error in `EXEC`'s reply, not an aborted transaction.
fn refuse_over_maxmemory(ctx: Ctx) -> CommandResult {
    if ctx.over_maxmemory() && !ctx.is_replicated_or_loading() {
        return Err(CommandError::OutOfMemory);
    }
    Ok(())
}

entry_point!(acquire_entry => creates acquire::run);
entry_point!(fair_entry => creates fair::run);
entry_point!(release_entry => release::run);
entry_point!(renew_entry => renew::run);
entry_point!(info_entry => info::run);
entry_point!(setstate_entry => setstate::run);
entry_point!(latch_entry => creates latch::run);
entry_point!(countdown_entry => countdown::run);
entry_point!(await_entry => awaits::run);
entry_point!(latchstate_entry => latchstate::run);
entry_point!(watch_entry => watch::run);
entry_point!(stats_entry => stats::run);

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
    dispatch(ctx, argv, argc, |ctx, args| {
        refuse_over_maxmemory(ctx)?;
        macquire::run(ctx, args)
    })
}

/// Every DLOCK command. The writers that create state are refused over
/// `maxmemory` (see [`refuse_over_maxmemory`]);
/// RELEASE and RENEW only free or extend what the caller holds, so, like
/// `DEL` and `PEXPIRE`, memory pressure never refuses them (a holder must
/// be able to give its lock back, and the next waiter to get it). INFO is
/// `readonly fast`. All take their key at position 1, so Cluster routes them and replicas
/// refuse the writers with READONLY.
const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"dlock.acquire",
        flags: c"write",
        acl: c"write slow blocking",
        entry: Some(acquire_entry),
    },
    CommandSpec {
        name: c"dlock.fair",
        flags: c"write",
        acl: c"write slow",
        entry: Some(fair_entry),
    },
    CommandSpec {
        name: c"dlock.release",
        flags: c"write",
        acl: c"write slow",
        entry: Some(release_entry),
    },
    CommandSpec {
        name: c"dlock.renew",
        flags: c"write",
        acl: c"write slow",
        entry: Some(renew_entry),
    },
    CommandSpec {
        name: c"dlock.info",
        flags: c"readonly fast",
        acl: c"read fast",
        entry: Some(info_entry),
    },
    CommandSpec {
        name: c"dlock.setstate",
        flags: c"write deny-oom",
        acl: c"write slow",
        entry: Some(setstate_entry),
    },
];

/// The count-down latch's commands. COUNTDOWN may only lower memory use and
/// opens latches, so it is not `deny-oom` (as RELEASE); AWAIT only reads (and blocks), so
/// it also runs on replicas, where a replicated opening answers it.
const LATCH_COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"dlock.latch",
        flags: c"write",
        acl: c"write slow",
        entry: Some(latch_entry),
    },
    CommandSpec {
        name: c"dlock.countdown",
        flags: c"write",
        acl: c"write slow",
        entry: Some(countdown_entry),
    },
    CommandSpec {
        name: c"dlock.await",
        flags: c"readonly",
        acl: c"read slow blocking",
        entry: Some(await_entry),
    },
    CommandSpec {
        name: c"dlock.latchstate",
        flags: c"write deny-oom",
        acl: c"write slow",
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
    acl: c"read slow blocking",
    entry: Some(watch_entry),
}];

/// Commands whose keys follow a `numkeys` argument. They are created with
/// no legacy key range; their key spec (by numkeys, see [`command_info`])
/// makes Redis find their keys, check their slots in Cluster (CROSSSLOT),
/// and flag them `movablekeys`.
const MULTI_KEY_COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: c"dlock.macquire",
    flags: c"write getkeys-api",
    acl: c"write slow blocking",
    entry: Some(macquire_entry),
}];

/// Commands without keys. `DLOCK.STATS` is flagged as `CONFIG RESETSTAT`
/// is (`admin noscript loading stale`), and is in Redis's `@admin @slow
/// @dangerous` categories as that one.
const KEYLESS_COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: c"dlock.stats",
    flags: c"admin deny-script allow-loading allow-stale",
    acl: c"admin slow dangerous",
    entry: Some(stats_entry),
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
        match outcome {
            Ok(Err(CommandError::NotOwner)) => super::stats::count_notowner(),
            Ok(Err(CommandError::OutOfMemory)) => super::stats::count_oom_refusal(),
            _ => {}
        }
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
pub fn register_commands(module: &redis_module::Context) -> Result<(), &'static CStr> {
    let ctx = module.ctx;
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
    for command in MULTI_KEY_COMMANDS.iter().chain(KEYLESS_COMMANDS) {
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
    for info in command_info::KEYLESS_COMMAND_INFO {
        if !command_info::register_keyless(ctx, info) {
            return Err(info.name);
        }
    }
    set_acl_categories(module)
}

/// Puts every command in its ACL categories, and all in [`CATEGORY`], as
/// far as the server allows; on a server without either API (Redis 7.0,
/// 7.2 for [`CATEGORY`]) the commands load without them, as before.
fn set_acl_categories(module: &redis_module::Context) -> Result<(), &'static CStr> {
    let ctx = module.ctx;
    if !ffi::offers_command_acl_categories() {
        module.log_notice(
            "dlock: this server has no RedisModule_SetCommandACLCategories (Redis before 7.2): \
             the commands carry no ACL categories",
        );
        return Ok(());
    }
    let in_category = match ffi::add_acl_category(ctx, CATEGORY) {
        Some(true) => true,
        Some(false) => return Err(CATEGORY),
        None => {
            module.log_notice(
                "dlock: this server has no RedisModule_AddACLCategory (Redis before 7.4, \
                 Valkey before 8): no @dlock category",
            );
            false
        }
    };
    for command in COMMANDS
        .iter()
        .chain(LATCH_COMMANDS)
        .chain(MULTI_KEY_COMMANDS)
        .chain(WATCH_COMMANDS)
        .chain(KEYLESS_COMMANDS)
    {
        let categories = if in_category {
            let mut both = command.acl.to_bytes().to_vec();
            both.push(b' ');
            both.extend_from_slice(CATEGORY.to_bytes());
            CString::new(both).map_err(|_| command.name)?
        } else {
            CString::from(command.acl)
        };
        if ffi::set_command_acl_categories(ctx, command.name, &categories) != Some(true) {
            return Err(command.name);
        }
    }
    Ok(())
}
