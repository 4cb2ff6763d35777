//! Command metadata for COMMAND DOCS / COMMAND INFO / redis-cli hints and
//! precise key specs (read-only for DLOCK.INFO, read-write for the writers),
//! registered with `RedisModule_SetCommandInfo` (Redis 7.0+), which copies
//! everything it is given.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::raw;

use super::ffi::api;

/// One argument after the key.
struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    optional: bool,
    summary: &'static CStr,
}

/// The metadata of one command.
pub struct Info {
    pub name: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
    arity: c_int,
    key_flags: u32,
    args: &'static [Arg],
}

const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;

const OWNER: Arg = Arg {
    name: c"owner",
    kind: STRING,
    token: None,
    optional: false,
    summary: c"1 to 512 bytes naming the holder, or * for a server-generated UUID",
};
/// The owner of RELEASE and RENEW, where `*` is a literal owner.
const HELD_OWNER: Arg = Arg {
    summary:
        c"1 to 512 bytes naming the holder (compared byte for byte; * is a literal owner here)",
    ..OWNER
};
const TTL: Arg = Arg {
    name: c"ttl",
    kind: INTEGER,
    token: None,
    optional: false,
    summary: c"lease in milliseconds",
};
const BLOCK: Arg = Arg {
    name: c"timeout",
    kind: INTEGER,
    token: Some(c"BLOCK"),
    optional: true,
    summary: c"wait in the queue up to this many milliseconds (0: forever)",
};
const SHARED: Arg = Arg {
    name: c"shared",
    kind: TOKEN,
    token: Some(c"SHARED"),
    optional: true,
    summary: c"a shared hold (read lock, semaphore permit) instead of an exclusive one",
};
const LIMIT: Arg = Arg {
    name: c"limit",
    kind: INTEGER,
    token: Some(c"LIMIT"),
    optional: true,
    summary: c"with SHARED: at most this many permits held shared (each owner's weight, 1 without WEIGHT), the caller's included",
};
const WEIGHT: Arg = Arg {
    name: c"weight",
    kind: INTEGER,
    token: Some(c"WEIGHT"),
    optional: true,
    summary: c"with SHARED and LIMIT: the permits this owner takes (1 to the LIMIT)",
};
const FULL: Arg = Arg {
    name: c"full",
    kind: TOKEN,
    token: Some(c"FULL"),
    optional: true,
    summary:
        c"also each queue entry's kind, mode, wait, deadline and client, and each holder's detail",
};
const SESSION: Arg = Arg {
    name: c"session",
    kind: TOKEN,
    token: Some(c"SESSION"),
    optional: true,
    summary: c"release the lock when this connection closes",
};
// Redis allows one of INSERT, UPDATE, DELETE per key spec; every writer may
// create, change and delete the key, so all declare UPDATE.
const RW_UPDATE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE;
const RW_ACCESS: u32 = RW_UPDATE | raw::REDISMODULE_CMD_KEY_ACCESS;

pub const COMMAND_INFO: &[Info] = &[
    Info {
        name: c"dlock.acquire",
        summary: c"Acquires a lock, exclusive or shared: a new hold with a fresh fencing token, or a re-entry; optionally waits in the lock's FIFO queue.",
        complexity: c"O(log N) where N is the number of queued clients and holders",
        arity: -4,
        key_flags: RW_ACCESS,
        args: &[OWNER, TTL, SHARED, LIMIT, WEIGHT, BLOCK, SESSION],
    },
    Info {
        name: c"dlock.fair",
        summary: c"Acquires a lock, or keeps the caller's place in the queue as a reservation.",
        complexity: c"O(log N) where N is the number of queued clients and holders",
        arity: -4,
        key_flags: RW_ACCESS,
        args: &[OWNER, TTL, SHARED, LIMIT, WEIGHT, BLOCK, SESSION],
    },
    Info {
        name: c"dlock.release",
        summary: c"Gives up one hold (exclusive, or shared with SHARED); the queue's head, then its following compatible shared waiters, are granted.",
        complexity: c"O(log N + K log N) where N is the number of queued clients and holders and K the waiters granted",
        arity: -3,
        key_flags: RW_UPDATE,
        args: &[HELD_OWNER, SHARED],
    },
    Info {
        name: c"dlock.renew",
        summary: c"Resets the lease of the owner's hold (either mode).",
        complexity: c"O(log N) where N is the number of holders",
        arity: 4,
        key_flags: RW_UPDATE,
        args: &[HELD_OWNER, TTL],
    },
    Info {
        name: c"dlock.info",
        summary: c"Returns the exclusive holder, the queue, and every holder with its counts, token and lease.",
        complexity: c"O(N) where N is the number of queued clients and holders",
        arity: -2,
        key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        args: &[FULL],
    },
    Info {
        name: c"dlock.setstate",
        summary: c"Internal: the replicated effect of a lock change (refused from clients).",
        complexity: c"O(log N)",
        arity: -3,
        key_flags: RW_UPDATE,
        args: &[],
    },
];

const LATCH_TTL: Arg = Arg {
    name: c"ttl",
    kind: INTEGER,
    token: None,
    optional: false,
    summary: c"the latch ends (closed) after this many milliseconds",
};

pub const LATCH_COMMAND_INFO: &[Info] = &[
    Info {
        name: c"dlock.latch",
        summary: c"Creates a count-down latch unless the key exists (then changes nothing).",
        complexity: c"O(1)",
        arity: 4,
        key_flags: raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT,
        args: &[
            Arg {
                name: c"count",
                kind: INTEGER,
                token: None,
                optional: false,
                summary: c"1 to 2^53-1: how many count-downs open the latch",
            },
            LATCH_TTL,
        ],
    },
    Info {
        name: c"dlock.countdown",
        summary: c"Lowers a latch's count; at 0 the latch opens, answering every awaiter, and is deleted.",
        complexity: c"O(1), O(N) when it opens, where N is the number of awaiters",
        arity: -2,
        key_flags: RW_UPDATE,
        args: &[Arg {
            name: c"n",
            kind: INTEGER,
            token: None,
            optional: true,
            summary: c"how much to count down (default 1)",
        }],
    },
    Info {
        name: c"dlock.await",
        summary: c"Waits until a latch opens (1), disappears closed (0) or the timeout passes (null).",
        complexity: c"O(log N) where N is the number of awaiters",
        arity: 3,
        key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        args: &[Arg {
            name: c"timeout",
            kind: INTEGER,
            token: None,
            optional: false,
            summary: c"wait up to this many milliseconds (0: forever)",
        }],
    },
    Info {
        name: c"dlock.latchstate",
        summary: c"Internal: the replicated effect of a latch change (refused from clients).",
        complexity: c"O(1), O(N) when it opens, where N is the number of awaiters",
        arity: -3,
        key_flags: RW_UPDATE,
        args: &[],
    },
];

/// Commands without keys.
pub const KEYLESS_COMMAND_INFO: &[Info] = &[Info {
    name: c"dlock.stats",
    summary: c"RESET zeroes the counters and the wait histogram of INFO dlock (not its gauges), as CONFIG RESETSTAT does Redis's; HELP lists the subcommands.",
    complexity: c"O(1)",
    arity: -2,
    key_flags: 0,
    args: &[Arg {
        name: c"subcommand",
        kind: STRING,
        token: None,
        optional: false,
        summary: c"RESET or HELP",
    }],
}];

pub const WATCH_COMMAND_INFO: &[Info] = &[Info {
    name: c"dlock.watch",
    summary: c"Waits until a lock's newest fencing token differs from the one given, then returns the newest token, its owner and pttl ([0, nil, -1] when free); null when the timeout passes.",
    complexity: c"O(N) where N is the number of holders; O(N + W) for the change that answers W watchers",
    arity: 4,
    key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    args: &[
        Arg {
            name: c"token",
            kind: INTEGER,
            token: None,
            optional: false,
            summary: c"the newest fencing token the caller knows (0: it knows the lock as free)",
        },
        Arg {
            name: c"timeout",
            kind: INTEGER,
            token: None,
            optional: false,
            summary: c"wait up to this many milliseconds (0: forever)",
        },
    ],
}];

pub const MULTI_KEY_COMMAND_INFO: &[Info] = &[Info {
    name: c"dlock.macquire",
    summary: c"Acquires a lock on every key in one atomic step, or nothing; optionally waits in every key's queue at once.",
    complexity: c"O(K log N) where K is the number of keys and N the number of queued clients",
    arity: -5,
    key_flags: RW_ACCESS,
    args: &[
        OWNER,
        TTL,
        SHARED,
        LIMIT,
        WEIGHT,
        BLOCK,
        SESSION,
    ],
}];

/// How a command names its keys.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyLayout {
    /// One key, at position 1.
    Single,
    /// `numkeys` at position 1, then that many keys.
    Numkeys,
    /// No key.
    Keyless,
}

/// Registers the metadata of `info`'s command (created already): one key
/// at position 1.
pub fn register(ctx: *mut raw::RedisModuleCtx, info: &Info) -> bool {
    register_with(ctx, info, KeyLayout::Single)
}

/// Registers the metadata of `info`'s command (created already): `numkeys`
/// at position 1, then the keys.
pub fn register_numkeys(ctx: *mut raw::RedisModuleCtx, info: &Info) -> bool {
    register_with(ctx, info, KeyLayout::Numkeys)
}

/// Registers the metadata of `info`'s command (created already): no key,
/// its arguments from position 1.
pub fn register_keyless(ctx: *mut raw::RedisModuleCtx, info: &Info) -> bool {
    register_with(ctx, info, KeyLayout::Keyless)
}

fn register_with(ctx: *mut raw::RedisModuleCtx, info: &Info, layout: KeyLayout) -> bool {
    let command = api!(RedisModule_GetCommand(ctx, info.name.as_ptr()) else std::ptr::null_mut());
    if command.is_null() {
        return false;
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: all-zero is the terminator (and the "absent" value of every
    // optional field) of these plain C structs.
    let zero_spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    let mut key_spec = zero_spec;
    key_spec.flags = u64::from(info.key_flags);
    key_spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    key_spec.bs.index.pos = 1;
    match layout {
        KeyLayout::Single => {
            key_spec.find_keys_type =
                raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
            key_spec.fk.range.lastkey = 0;
            key_spec.fk.range.keystep = 1;
            key_spec.fk.range.limit = 0;
        }
        KeyLayout::Numkeys => {
            key_spec.find_keys_type =
                raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
            key_spec.fk.keynum.keynumidx = 0;
            key_spec.fk.keynum.firstkey = 1;
            key_spec.fk.keynum.keystep = 1;
        }
        KeyLayout::Keyless => key_spec = zero_spec,
    }
    let mut key_specs = [key_spec, zero_spec];

    // SAFETY: as above.
    let zero_arg: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
    let mut args = Vec::with_capacity(info.args.len() + 3);
    if layout == KeyLayout::Numkeys {
        let mut numkeys = zero_arg;
        numkeys.name = c"numkeys".as_ptr();
        numkeys.type_ = INTEGER;
        numkeys.key_spec_index = -1;
        numkeys.summary = c"how many keys follow: 1 to 1024".as_ptr();
        args.push(numkeys);
    }
    if layout != KeyLayout::Keyless {
        let mut key_arg = zero_arg;
        key_arg.name = c"key".as_ptr();
        key_arg.type_ = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
        key_arg.key_spec_index = 0;
        if layout == KeyLayout::Numkeys {
            key_arg.flags = raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
        }
        args.push(key_arg);
    }
    for arg in info.args {
        let mut raw_arg = zero_arg;
        raw_arg.name = arg.name.as_ptr();
        raw_arg.type_ = arg.kind;
        raw_arg.key_spec_index = -1;
        raw_arg.token = arg.token.map_or(std::ptr::null(), CStr::as_ptr);
        raw_arg.summary = arg.summary.as_ptr();
        if arg.optional {
            raw_arg.flags = raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
        }
        args.push(raw_arg);
    }
    args.push(zero_arg);

    let command_info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: info.summary.as_ptr(),
        complexity: info.complexity.as_ptr(),
        since: crate::version::VERSION_C.as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: info.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: if info.args.is_empty() {
            std::ptr::null_mut()
        } else {
            args.as_mut_ptr()
        },
    };
    api!(RedisModule_SetCommandInfo(command, &command_info) else raw::REDISMODULE_ERR as c_int)
        == raw::REDISMODULE_OK as c_int
}
