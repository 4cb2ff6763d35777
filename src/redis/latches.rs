//! The latch's native data type (`dlocklatc`): opening latch keys, the type
//! callbacks (RDB, AOF rewrite, digest, memory usage, copy, free) and the
//! replicated effects of latch changes.
//!
//! A latch value is a `Box<Latch>`; its RDB encoding is
//! [`crate::lock::latch`]'s. The key's Redis expire is the latch's deadline,
//! so Redis itself ends it (and propagates the `DEL`).
//!
//! Whenever Redis frees a latch value on the main thread, its awaiters are
//! answered: 1 if the latch opened (its count is 0), 0 if it disappeared
//! closed (ttl, DEL, FLUSH, eviction, a full sync); in Redis Cluster, a
//! latch deleted before its deadline may have moved to another node, and
//! its awaiters are answered null instead (see `super::awaiters`).

use std::os::raw::{c_int, c_longlong, c_void};
use std::sync::OnceLock;

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::ffi::{api, Ctx, KeyName};
use super::typeio::{guarded, RdbIo};
use crate::commands::CommandError;
use crate::lock::latch::{self, Latch};
use crate::lock::WaiterId;

/// The type name shown by TYPE; exactly 9 characters, as Redis requires.
pub const LATCH_TYPE_NAME: &str = "dlocklatc";
/// Current RDB encoding version of latch values.
pub const LATCH_ENCODING_VERSION: i32 = 1;

pub static LATCH_TYPE: RedisType = RedisType::new(
    LATCH_TYPE_NAME,
    LATCH_ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink),
        copy2: None,
        aux_save2: None,
    },
);

/// How a latch value that Redis takes away ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatchEnd {
    /// Its count had reached 0.
    Opened,
    /// Closed, at or after its deadline: its ttl ended it.
    Expired,
    /// Closed, before its deadline: deleted, overwritten, evicted, renamed,
    /// or (in Redis Cluster) migrated to another node.
    Removed,
}

/// Answers the awaiters of a latch value Redis takes away. Set once at load
/// by [`super::awaiters::init`]: the registry of blocked awaiters sits above
/// this data type, which does not import it.
static ANSWER_AWAITERS: OnceLock<fn(Vec<WaiterId>, LatchEnd)> = OnceLock::new();

/// Sets what answers the awaiters of a latch value going away; called once
/// from the module's init.
pub fn set_awaiter_answer(answer: fn(Vec<WaiterId>, LatchEnd)) {
    let _ = ANSWER_AWAITERS.set(answer);
}

/// Answers the awaiters of `latch`, which Redis is taking away.
fn answer_awaiters(latch: &mut Latch) {
    if let Some(answer) = ANSWER_AWAITERS.get() {
        let end = if latch.is_open() {
            LatchEnd::Opened
        } else if crate::clock::now_ms() >= latch.deadline_ms() {
            LatchEnd::Expired
        } else {
            LatchEnd::Removed
        };
        answer(latch.take_awaiters(), end);
    }
}

/// The registered latch type, or null before registration.
fn latch_type() -> *mut raw::RedisModuleType {
    LATCH_TYPE
        .raw_type
        .try_borrow()
        .map(|raw_type| *raw_type)
        .unwrap_or(std::ptr::null_mut())
}

/// Opens a latch key. Fails with WRONGTYPE when the key holds another type.
pub fn open_latch(ctx: Ctx, name: KeyName, writable: bool) -> Result<LatchKey, CommandError> {
    let mode = if writable {
        raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
    } else {
        raw::REDISMODULE_READ
    };
    let key = api!(RedisModule_OpenKey(ctx.raw(), name.raw_string(), mode as c_int) else std::ptr::null_mut());
    let key = LatchKey { raw: key };
    if key.raw.is_null() {
        // Read-only opening of a missing key returns NULL.
        return Ok(key);
    }
    let key_type = api!(RedisModule_KeyType(key.raw) else 0) as isize;
    if key_type == raw::REDISMODULE_KEYTYPE_EMPTY {
        return Ok(key);
    }
    let module_type = api!(RedisModule_ModuleTypeGetType(key.raw) else std::ptr::null_mut());
    if key_type == raw::REDISMODULE_KEYTYPE_MODULE && module_type == latch_type() {
        Ok(key)
    } else {
        Err(CommandError::WrongType)
    }
}

/// An open key known to be empty or to hold a latch. Closed on drop.
pub struct LatchKey {
    raw: *mut raw::RedisModuleKey,
}

impl LatchKey {
    /// The latch stored in the key, if any.
    pub fn latch(&self) -> Option<&Latch> {
        // SAFETY: open_latch verified the key holds our type, whose values
        // are always `Box<Latch>` pointers; the key is open while `self` lives.
        self.value().map(|value| unsafe { &*value })
    }

    /// The latch stored in the key, mutably.
    pub fn latch_mut(&mut self) -> Option<&mut Latch> {
        // SAFETY: as in `latch`; `&mut self` makes this the only borrow.
        self.value().map(|value| unsafe { &mut *value })
    }

    fn value(&self) -> Option<*mut Latch> {
        if self.raw.is_null() {
            return None;
        }
        let value = api!(RedisModule_ModuleTypeGetValue(self.raw) else std::ptr::null_mut());
        (!value.is_null()).then_some(value.cast::<Latch>())
    }

    /// Stores `latch` as the key's value and sets the key to expire at its
    /// deadline.
    pub fn insert(&mut self, latch: Latch) -> Result<&mut Latch, CommandError> {
        if self.raw.is_null() {
            return Err(CommandError::StoreFailed);
        }
        let deadline_ms = latch.deadline_ms();
        let value = Box::into_raw(Box::new(latch));
        let status = api!(RedisModule_ModuleTypeSetValue(self.raw, latch_type(), value.cast::<c_void>()) else raw::REDISMODULE_ERR as c_int);
        if status != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis did not take the value; we still own the box.
            drop(unsafe { Box::from_raw(value) });
            return Err(CommandError::StoreFailed);
        }
        super::boxes::value_created(super::boxes::ValueKind::Latch);
        self.set_deadline(deadline_ms);
        // SAFETY: Redis now owns the box and keeps it alive while the key exists.
        Ok(unsafe { &mut *value })
    }

    /// Sets the key to expire at `deadline_ms` (absolute).
    pub fn set_deadline(&mut self, deadline_ms: u64) {
        if self.raw.is_null() {
            return;
        }
        let when = i64::try_from(deadline_ms).unwrap_or(i64::MAX);
        api!(RedisModule_SetAbsExpire(self.raw, when) else 0);
    }

    /// Deletes the key; the free callback answers the awaiters.
    pub fn delete(&mut self) {
        if self.raw.is_null() {
            return;
        }
        api!(RedisModule_DeleteKey(self.raw) else 0);
    }
}

impl Drop for LatchKey {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            api!(RedisModule_CloseKey(self.raw) else ());
        }
    }
}

/// Propagates `DLOCK.LATCHSTATE key SET count deadline`.
pub fn replicate_set(ctx: Ctx, name: KeyName, latch: &Latch) {
    if !super::propagation::needed(ctx) {
        return;
    }
    api!(RedisModule_Replicate(
        ctx.raw(),
        c"DLOCK.LATCHSTATE".as_ptr(),
        c"scll".as_ptr(),
        name.raw_string(),
        c"SET".as_ptr(),
        to_long_long(latch.count()),
        to_long_long(latch.deadline_ms()),
    ) else 0);
}

/// Propagates `DLOCK.LATCHSTATE key OPEN`: the latch opened and is gone.
pub fn replicate_open(ctx: Ctx, name: KeyName) {
    if !super::propagation::needed(ctx) {
        return;
    }
    api!(RedisModule_Replicate(
        ctx.raw(),
        c"DLOCK.LATCHSTATE".as_ptr(),
        c"sc".as_ptr(),
        name.raw_string(),
        c"OPEN".as_ptr(),
    ) else 0);
}

fn to_long_long(value: u64) -> c_longlong {
    c_longlong::try_from(value).unwrap_or(c_longlong::MAX)
}

/// Borrows the latch behind a value pointer Redis handed to a type callback.
///
/// # Safety
/// `value` must be null or a pointer produced by `Box::<Latch>::into_raw`
/// that Redis still owns.
unsafe fn latch_ref<'a>(value: *mut c_void) -> Option<&'a Latch> {
    // SAFETY: guaranteed by the caller.
    unsafe { value.cast::<Latch>().as_ref() }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || {
        // SAFETY: Redis passes a value of this type.
        if let Some(latch) = unsafe { latch_ref(value) } {
            latch::encode(latch, &mut RdbIo(rdb));
        }
    })
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        if encver != LATCH_ENCODING_VERSION {
            return std::ptr::null_mut();
        }
        match latch::decode(&mut RdbIo(rdb)).filter(|_| !raw::is_io_error(rdb)) {
            Some(latch) => {
                super::boxes::value_created(super::boxes::ValueKind::Latch);
                Box::into_raw(Box::new(latch)).cast::<c_void>()
            }
            // Null makes Redis reject the payload instead of storing a corrupt latch.
            None => std::ptr::null_mut(),
        }
    })
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guarded((), || {
        // SAFETY: Redis passes a value of this type.
        let Some(latch) = (unsafe { latch_ref(value) }) else {
            return;
        };
        // The effect replication uses; Redis appends PEXPIREAT after it.
        api!(RedisModule_EmitAOF(
            aof,
            c"DLOCK.LATCHSTATE".as_ptr(),
            c"scll".as_ptr(),
            key,
            c"SET".as_ptr(),
            to_long_long(latch.count()),
            to_long_long(latch.deadline_ms()),
        ) else ());
    })
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    guarded(0, || {
        // SAFETY: Redis passes a value of this type.
        let latch = unsafe { latch_ref(value.cast_mut()) };
        std::mem::size_of::<Latch>() + latch.map_or(0, Latch::heap_bytes)
    })
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded((), || {
        // SAFETY: Redis passes a value of this type.
        let Some(latch) = (unsafe { latch_ref(value) }) else {
            return;
        };
        for number in [latch.count(), latch.deadline_ms()] {
            api!(RedisModule_DigestAddLongLong(md, to_long_long(number)) else ());
        }
        api!(RedisModule_DigestEndSequence(md) else ());
    })
}

unsafe extern "C" fn free(value: *mut c_void) {
    if value.is_null() {
        return;
    }
    super::boxes::value_freed(super::boxes::ValueKind::Latch);
    // SAFETY: every value of this type was made by Box::<Latch>::into_raw
    // and Redis calls free exactly once, when it drops the value.
    let mut latch = unsafe { Box::from_raw(value.cast::<Latch>()) };
    if latch.awaiter_count() == 0 || !super::boxes::on_main_thread() {
        // (An asynchronous flush frees on a background thread; its awaiters
        // were answered by the flush event already.)
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        answer_awaiters(&mut latch);
    }));
}

/// Redis took the latch off its key: deleted (DEL, expiry, eviction,
/// overwrite; `free` follows) or moved (RENAME, MOVE). Either way the
/// awaiters asked for a latch under this name, which is gone: they are
/// answered now (1 if it had opened, 0 otherwise). Only latch values reach
/// this callback, so other keys pay nothing for it.
unsafe extern "C" fn unlink(_ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guarded((), || {
        if !super::boxes::on_main_thread() {
            return;
        }
        // SAFETY: Redis passes a value of this type, still alive; it is ours
        // to change (Redis only moves or frees it).
        let Some(latch) = (unsafe { value.cast_mut().cast::<Latch>().as_mut() }) else {
            return;
        };
        if latch.awaiter_count() == 0 {
            return;
        }
        answer_awaiters(latch);
    })
}

unsafe extern "C" fn copy(
    _from_key: *mut raw::RedisModuleString,
    _to_key: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: Redis passes a value of this type.
        match unsafe { latch_ref(value.cast_mut()) } {
            // A copy has no awaiters: they await the original.
            Some(latch) => {
                super::boxes::value_created(super::boxes::ValueKind::Latch);
                Box::into_raw(Box::new(latch.persistent_copy())).cast::<c_void>()
            }
            None => std::ptr::null_mut(),
        }
    })
}
