//! The floor module of `make bench` (not part of dlock): `FLOOR.ACQUIRE key
//! owner ttl` and `FLOOR.RELEASE key owner` make exactly the Redis calls an
//! uncontended dlock ACQUIRE of a new key and its last RELEASE make, and
//! nothing else: open the key, store a value of a module data type, set its
//! absolute expire, reply `[token, 1, owner]`; open, compare the owner,
//! delete, reply 0. One wall-clock read per command, as dlock's.
//!
//! It answers how fast any module lock can be on this Redis: a module
//! command's dispatch (context, key handle, value object, reply calls) costs
//! Redis more than a native `SET`, whatever the module does. Scenarios 1 and
//! 2 measure it beside dlock, so that dlock's gap to `SET NX PX` splits into
//! the module API's share (floor / SET) and dlock's own code (dlock / floor).
//!
//! No persistence, no replication, no checks beyond the ones a lock needs:
//! a bench instrument, never loaded anywhere else.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_long, c_void};

use redis_module::raw;

/// Calls a Redis API function; the pointers are set by `RedisModule_Init`.
macro_rules! call {
    ($name:ident ( $($arg:expr),* $(,)? )) => {
        match raw::$name {
            Some(function) => function($($arg),*),
            None => std::process::abort(),
        }
    };
}

/// The lock value: token, deadline (ms) and an owner of at most 40 bytes.
/// The token is stored as a lock stores it, never read back.
#[allow(dead_code)]
struct Floor {
    token: u64,
    deadline_ms: u64,
    owner_len: usize,
    owner: [u8; 40],
}

static mut FLOOR_TYPE: *mut raw::RedisModuleType = std::ptr::null_mut();
static mut LAST_TOKEN: u64 = 0;

/// Freed values kept for the next lock, as dlock keeps its boxes: a lock
/// pair allocates nothing in the module.
const POOL_SIZE: usize = 32;
static mut POOL: [*mut Floor; POOL_SIZE] = [std::ptr::null_mut(); POOL_SIZE];
static mut POOLED: usize = 0;

/// A value to fill: a kept one, or a new one from Redis's allocator.
unsafe fn take_value() -> *mut Floor {
    if POOLED > 0 {
        POOLED -= 1;
        return POOL[POOLED];
    }
    call!(RedisModule_Alloc(std::mem::size_of::<Floor>())).cast::<Floor>()
}

fn now_us() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

unsafe fn bytes<'a>(string: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    let ptr = call!(RedisModule_StringPtrLen(string, &mut len));
    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
}

/// Opens key `name` for reading and writing (close it with
/// `RedisModule_CloseKey`).
unsafe fn open_for_write(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
) -> *mut raw::RedisModuleKey {
    let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
    call!(RedisModule_OpenKey(ctx, name, mode)).cast::<raw::RedisModuleKey>()
}

unsafe fn error(ctx: *mut raw::RedisModuleCtx, message: &CStr) -> c_int {
    call!(RedisModule_ReplyWithError(ctx, message.as_ptr()))
}

/// `FLOOR.ACQUIRE key owner ttl`: `[token, 1, owner]` on a new key, null
/// on an existing one.
extern "C" fn acquire(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes `argc` valid strings and a live context.
    unsafe {
        if argc != 4 {
            return call!(RedisModule_WrongArity(ctx));
        }
        let owner = bytes(*argv.add(2));
        let mut ttl: i64 = 0;
        if call!(RedisModule_StringToLongLong(*argv.add(3), &mut ttl))
            != raw::REDISMODULE_OK as c_int
            || ttl <= 0
            || owner.is_empty()
            || owner.len() > 40
        {
            return error(ctx, c"ERR bad argument");
        }
        let key = open_for_write(ctx, *argv.add(1));
        if call!(RedisModule_KeyType(key)) != raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            call!(RedisModule_CloseKey(key));
            return call!(RedisModule_ReplyWithNull(ctx));
        }
        let now = now_us();
        let token = (LAST_TOKEN + 1).max(now);
        LAST_TOKEN = token;
        let value = take_value();
        let mut stored = Floor {
            token,
            deadline_ms: now / 1_000 + ttl as u64,
            owner_len: owner.len(),
            owner: [0; 40],
        };
        stored.owner[..owner.len()].copy_from_slice(owner);
        let deadline = stored.deadline_ms as i64;
        value.write(stored);
        call!(RedisModule_ModuleTypeSetValue(
            key,
            FLOOR_TYPE,
            value.cast::<c_void>()
        ));
        call!(RedisModule_SetAbsExpire(key, deadline));
        call!(RedisModule_CloseKey(key));
        call!(RedisModule_ReplyWithArray(ctx, 3 as c_long));
        call!(RedisModule_ReplyWithLongLong(ctx, token as i64));
        call!(RedisModule_ReplyWithLongLong(ctx, 1));
        call!(RedisModule_ReplyWithStringBuffer(
            ctx,
            owner.as_ptr().cast::<c_char>(),
            owner.len()
        ))
    }
}

/// `FLOOR.RELEASE key owner`: 0 when the owner's live lock was deleted, -1
/// otherwise.
extern "C" fn release(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: as in `acquire`; the value of a key of FLOOR_TYPE is a Floor.
    unsafe {
        if argc != 3 {
            return call!(RedisModule_WrongArity(ctx));
        }
        let owner = bytes(*argv.add(2));
        let key = open_for_write(ctx, *argv.add(1));
        if call!(RedisModule_ModuleTypeGetType(key)) != FLOOR_TYPE {
            call!(RedisModule_CloseKey(key));
            return call!(RedisModule_ReplyWithLongLong(ctx, -1));
        }
        let value = &*call!(RedisModule_ModuleTypeGetValue(key)).cast::<Floor>();
        let live = now_us() / 1_000 <= value.deadline_ms;
        if !live || value.owner[..value.owner_len] != *owner {
            call!(RedisModule_CloseKey(key));
            return call!(RedisModule_ReplyWithLongLong(ctx, -1));
        }
        call!(RedisModule_DeleteKey(key));
        call!(RedisModule_CloseKey(key));
        call!(RedisModule_ReplyWithLongLong(ctx, 0))
    }
}

/// `FLOOR.INFO key`: null (the bench's readiness probe asks DLOCK.INFO of
/// a server with dlock; this answers the same question for the floor).
extern "C" fn info(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: a live context.
    unsafe { call!(RedisModule_ReplyWithNull(ctx)) }
}

extern "C" fn free_value(value: *mut c_void) {
    // SAFETY: every value of FLOOR_TYPE came from `take_value`; the pool
    // is only touched on the main thread.
    unsafe {
        if POOLED < POOL_SIZE {
            POOL[POOLED] = value.cast::<Floor>();
            POOLED += 1;
        } else {
            call!(RedisModule_Free(value));
        }
    }
}

extern "C" fn rdb_load(_io: *mut raw::RedisModuleIO, _encver: c_int) -> *mut c_void {
    std::ptr::null_mut()
}

extern "C" fn rdb_save(_io: *mut raw::RedisModuleIO, _value: *mut c_void) {}

/// # Safety
/// Called by Redis once, on the main thread, when the module is loaded.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let err = raw::REDISMODULE_ERR as c_int;
    if raw::Export_RedisModule_Init(
        ctx,
        c"floor".as_ptr(),
        1,
        raw::REDISMODULE_APIVER_1 as c_int,
    ) == err
    {
        return err;
    }
    let mut methods: raw::RedisModuleTypeMethods = std::mem::zeroed();
    methods.version = raw::REDISMODULE_TYPE_METHOD_VERSION as u64;
    methods.rdb_load = Some(rdb_load);
    methods.rdb_save = Some(rdb_save);
    methods.free = Some(free_value);
    FLOOR_TYPE = call!(RedisModule_CreateDataType(
        ctx,
        c"dlockflor".as_ptr(),
        1,
        &mut methods
    ));
    if FLOOR_TYPE.is_null() {
        return err;
    }
    type Command =
        extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;
    let commands: [(&CStr, Command, &CStr); 3] = [
        (c"floor.acquire", acquire, c"write deny-oom"),
        (c"floor.release", release, c"write deny-oom"),
        (c"floor.info", info, c"readonly fast"),
    ];
    for (name, handler, flags) in commands {
        let status = call!(RedisModule_CreateCommand(
            ctx,
            name.as_ptr(),
            Some(handler),
            flags.as_ptr(),
            1,
            1,
            1
        ));
        if status == err {
            return err;
        }
    }
    raw::REDISMODULE_OK as c_int
}
