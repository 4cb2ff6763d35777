//! Safe wrappers over the raw Redis module API used on the command path.
//!
//! Every function pointer in `redis_module::raw` is an `Option` that Redis
//! fills in when the module loads. All the ones used here exist since Redis
//! 6.2; a missing one would mean an incompatible server, and the wrappers
//! then do nothing rather than panic (a panic would abort the server).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_long, c_longlong, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::OnceLock;

use redis_module::raw;

use super::boxes;
use crate::commands::parser::ArgSource;
use crate::commands::CommandError;
use crate::lock::{Hold, Lock, Mode, Want};

/// Calls a Redis API function pointer, or evaluates `$missing` if the server
/// did not provide it.
macro_rules! api {
    ($name:ident ( $($arg:expr),* $(,)? ) else $missing:expr) => {{
        // SAFETY: Redis writes these pointers once, in RedisModule_Init on the
        // main thread before any callback; afterwards they are only read.
        let function = unsafe { raw::$name };
        match function {
            // SAFETY: the pointer was filled in by Redis for this API; the
            // arguments are the live handles each wrapper documents.
            Some(function) => unsafe { function($($arg),*) },
            None => $missing,
        }
    }};
}
pub(crate) use api;

/// The context of one command call (or callback) on Redis's main thread.
#[derive(Clone, Copy)]
pub struct Ctx {
    raw: *mut raw::RedisModuleCtx,
}

impl Ctx {
    /// Wraps the context pointer Redis passed to a callback.
    pub(crate) fn from_raw(raw: *mut raw::RedisModuleCtx) -> Self {
        Self { raw }
    }

    pub(crate) fn raw(self) -> *mut raw::RedisModuleCtx {
        self.raw
    }

    pub fn reply_integer(self, value: i64) {
        api!(RedisModule_ReplyWithLongLong(self.raw, value as c_longlong) else 0);
    }

    /// Replies with a non-negative quantity, clamped to the RESP integer range.
    pub fn reply_count(self, value: u64) {
        self.reply_integer(i64::try_from(value).unwrap_or(i64::MAX));
    }

    pub fn reply_ok(self) {
        api!(RedisModule_ReplyWithSimpleString(self.raw, c"OK".as_ptr()) else 0);
    }

    pub fn reply_null(self) {
        api!(RedisModule_ReplyWithNull(self.raw) else 0);
    }

    pub fn reply_array(self, len: usize) {
        api!(RedisModule_ReplyWithArray(self.raw, len as c_long) else 0);
    }

    /// A map of `pairs` field/value pairs in RESP3, a flat array in RESP2.
    pub fn reply_map(self, pairs: usize) {
        api!(RedisModule_ReplyWithMap(self.raw, pairs as c_long) else 0);
    }

    pub fn reply_bulk(self, bytes: &[u8]) {
        api!(RedisModule_ReplyWithStringBuffer(
            self.raw,
            bytes.as_ptr().cast::<c_char>(),
            bytes.len()
        ) else 0);
    }

    pub fn reply_error(self, message: &CStr) {
        api!(RedisModule_ReplyWithError(self.raw, message.as_ptr()) else 0);
    }

    pub fn reply_command_error(self, error: CommandError) {
        match error {
            CommandError::WrongArity => {
                api!(RedisModule_WrongArity(self.raw) else 0);
            }
            other => self.reply_error(other.message()),
        }
    }

    /// The `REDISMODULE_CTX_FLAGS_*` bits of this call.
    pub fn flags(self) -> u32 {
        api!(RedisModule_GetContextFlags(self.raw) else 0) as u32
    }

    /// The database selected in this context.
    pub fn selected_db(self) -> i32 {
        api!(RedisModule_GetSelectedDb(self.raw) else 0)
    }

    /// Selects database `db` in this context; false if it does not exist.
    pub fn select_db(self, db: i32) -> bool {
        api!(RedisModule_SelectDb(self.raw, db) else raw::REDISMODULE_ERR as c_int)
            == raw::REDISMODULE_OK as c_int
    }

    /// The id of the calling client (0 when there is none).
    pub fn client_id(self) -> u64 {
        api!(RedisModule_GetClientId(self.raw) else 0)
    }

    /// Whether the command may block its client: not inside MULTI/EXEC, a
    /// script or a function, nor anywhere else Redis forbids it.
    pub fn may_block(self) -> bool {
        let forbidding = raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
            | raw::REDISMODULE_CTX_FLAGS_MULTI
            | raw::REDISMODULE_CTX_FLAGS_LUA;
        self.flags() & forbidding == 0
    }

    /// Whether this server runs in Redis Cluster mode.
    pub fn in_cluster(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }

    /// Whether this server is a master that is not loading its data: only
    /// then may timers and events change locks.
    pub fn may_act(self) -> bool {
        let flags = self.flags();
        flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
            && flags & raw::REDISMODULE_CTX_FLAGS_LOADING == 0
    }

    /// A Redis string holding `bytes`, freed when dropped.
    pub fn key_name(self, bytes: &[u8]) -> OwnedKeyName {
        let raw = api!(RedisModule_CreateString(self.raw, bytes.as_ptr().cast::<c_char>(), bytes.len()) else std::ptr::null_mut());
        OwnedKeyName {
            ctx: self.raw,
            name: KeyName { raw },
        }
    }

    /// Whether memory is over `maxmemory` now (never without `maxmemory`),
    /// as Redis judges it for its `deny-oom` commands: after the eviction
    /// it ran before this command.
    pub fn over_maxmemory(self) -> bool {
        api!(RedisModule_GetUsedMemoryRatio() else 0.0) > 1.0
    }

    /// Whether this call comes from a master's replication stream or the AOF.
    pub fn is_replicated_or_loading(self) -> bool {
        let trusted = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
        self.flags() & trusted != 0
    }

    /// Opens a lock key. Fails with WRONGTYPE when the key holds another type.
    pub fn open_lock(self, name: KeyName, writable: bool) -> Result<LockKey, CommandError> {
        let mode = if writable {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        self.open_lock_mode(name, mode)
    }

    fn open_lock_mode(self, name: KeyName, mode: u32) -> Result<LockKey, CommandError> {
        let key =
            api!(RedisModule_OpenKey(self.raw, name.raw, mode as c_int) else std::ptr::null_mut());
        // Not writable (not told to the close observer, which reads the
        // value as a lock) until the key is known to be empty or a lock.
        let mut key = LockKey {
            raw: key,
            writable: false,
        };
        if key.raw.is_null() {
            // Read-only opening of a missing key returns NULL on old servers.
            return Ok(key);
        }
        let key_type = api!(RedisModule_KeyType(key.raw) else 0) as isize;
        let module_type = if key_type == raw::REDISMODULE_KEYTYPE_MODULE {
            api!(RedisModule_ModuleTypeGetType(key.raw) else std::ptr::null_mut())
        } else {
            std::ptr::null_mut()
        };
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY
            || (!module_type.is_null() && module_type == lock_type())
        {
            key.writable = mode & raw::REDISMODULE_WRITE != 0;
            Ok(key)
        } else {
            Err(CommandError::WrongType)
        }
    }

    /// Selects database `db` and opens the lock at `key` there, for code that
    /// runs outside a command (timers, events, blocked-client callbacks).
    /// `None` when the database does not exist or the key holds another
    /// type. The caller restores the selected database if it must.
    ///
    /// No client asked for the key: it is looked up as a write (Redis counts
    /// no keyspace hit or miss and publishes no `keymiss`) without touching
    /// its LRU/LFU access time, so that only lock commands change a lock
    /// key's statistics.
    pub fn open_lock_in(self, db: i32, key: &[u8]) -> Option<(LockKey, OwnedKeyName)> {
        if !self.select_db(db) {
            return None;
        }
        let name = self.key_name(key);
        let mode =
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE | raw::REDISMODULE_OPEN_KEY_NOTOUCH;
        let lock_key = self.open_lock_mode(name.name(), mode).ok()?;
        Some((lock_key, name))
    }

    /// Where the lock value at address `value` lives now: `(db, key)`,
    /// looking in database `first_db` first, then in every other one. A
    /// keyspace scan: only for a moved lock a SESSION hold depends on (a
    /// rare event whose destination the module cannot learn any cheaper).
    pub fn find_lock_value(self, value: usize, first_db: i32) -> Option<(i32, Box<[u8]>)> {
        let original = self.selected_db();
        let mut found = None;
        if self.select_db(first_db) {
            found = self.scan_for_value(value).map(|key| (first_db, key));
        }
        let mut db = 0;
        while found.is_none() {
            if db != first_db {
                if !self.select_db(db) {
                    break;
                }
                found = self.scan_for_value(value).map(|key| (db, key));
            }
            db += 1;
        }
        self.select_db(original);
        found
    }

    /// Scans the selected database for the lock value at address `value`.
    fn scan_for_value(self, value: usize) -> Option<Box<[u8]>> {
        struct Search {
            value: usize,
            found: Option<Box<[u8]>>,
        }
        unsafe extern "C" fn visit(
            _ctx: *mut raw::RedisModuleCtx,
            name: *mut raw::RedisModuleString,
            key: *mut raw::RedisModuleKey,
            data: *mut c_void,
        ) {
            // SAFETY: `data` is the `Search` passed to RedisModule_Scan below,
            // alive and not otherwise borrowed during the scan.
            let Some(search) = (unsafe { data.cast::<Search>().as_mut() }) else {
                return;
            };
            if key.is_null() || search.found.is_some() {
                return;
            }
            let here = api!(RedisModule_ModuleTypeGetValue(key) else std::ptr::null_mut());
            if here as usize == search.value {
                search.found = Some(string_bytes(name).into());
            }
        }
        let cursor = api!(RedisModule_ScanCursorCreate() else std::ptr::null_mut());
        if cursor.is_null() {
            return None;
        }
        let mut search = Search { value, found: None };
        let search_ptr: *mut Search = &mut search;
        loop {
            let more = api!(RedisModule_Scan(self.raw, cursor, Some(visit), search_ptr.cast::<c_void>()) else 0);
            // SAFETY: `search` lives on this frame; the scan callback, its
            // only other user, has returned.
            let found = unsafe { (*search_ptr).found.is_some() };
            if more == 0 || found {
                break;
            }
        }
        api!(RedisModule_ScanCursorDestroy(cursor) else ());
        search.found
    }

    // The effects below are built whenever they are called: their caller
    // (`keyspace`) skips them while nothing listens (`propagation::needed`).

    /// Propagates one owner's hold: `DLOCK.SETSTATE key HOLD|HOLDER owner
    /// exclusive token deadline [SHARED shared [WEIGHT w]]` (the weight only
    /// when it is not 1, so that unweighted holds replicate as before
    /// weights existed). `HOLD` when it is the only
    /// holder (every other hold ends), `HOLDER` beside other holders. Out of
    /// line: a caller that skips it (nothing listens) carries only the call.
    #[inline(never)]
    pub fn replicate_hold(self, name: KeyName, hold: &Hold, only_holder: bool) {
        let operation = if only_holder { c"HOLD" } else { c"HOLDER" };
        if hold.shared == 0 {
            api!(RedisModule_Replicate(
                self.raw,
                c"DLOCK.SETSTATE".as_ptr(),
                c"scblll".as_ptr(),
                name.raw,
                operation.as_ptr(),
                hold.owner.as_ptr().cast::<c_char>(),
                hold.owner.len(),
                to_long_long(hold.exclusive),
                to_long_long(hold.token),
                to_long_long(hold.deadline_ms),
            ) else 0);
        } else if hold.weight == 1 {
            api!(RedisModule_Replicate(
                self.raw,
                c"DLOCK.SETSTATE".as_ptr(),
                c"scblllcl".as_ptr(),
                name.raw,
                operation.as_ptr(),
                hold.owner.as_ptr().cast::<c_char>(),
                hold.owner.len(),
                to_long_long(hold.exclusive),
                to_long_long(hold.token),
                to_long_long(hold.deadline_ms),
                c"SHARED".as_ptr(),
                to_long_long(u64::from(hold.shared)),
            ) else 0);
        } else {
            api!(RedisModule_Replicate(
                self.raw,
                c"DLOCK.SETSTATE".as_ptr(),
                c"scblllclcl".as_ptr(),
                name.raw,
                operation.as_ptr(),
                hold.owner.as_ptr().cast::<c_char>(),
                hold.owner.len(),
                to_long_long(hold.exclusive),
                to_long_long(hold.token),
                to_long_long(hold.deadline_ms),
                c"SHARED".as_ptr(),
                to_long_long(u64::from(hold.shared)),
                c"WEIGHT".as_ptr(),
                to_long_long(u64::from(hold.weight)),
            ) else 0);
        }
    }

    /// Propagates `DLOCK.SETSTATE key DROP owner`: that owner's holds ended.
    pub fn replicate_drop(self, name: KeyName, owner: &[u8]) {
        api!(RedisModule_Replicate(
            self.raw,
            c"DLOCK.SETSTATE".as_ptr(),
            c"scb".as_ptr(),
            name.raw,
            c"DROP".as_ptr(),
            owner.as_ptr().cast::<c_char>(),
            owner.len(),
        ) else 0);
    }

    /// Propagates `DLOCK.SETSTATE key FREE`: every hold ended, the queue stays.
    pub fn replicate_free(self, name: KeyName) {
        api!(RedisModule_Replicate(
            self.raw,
            c"DLOCK.SETSTATE".as_ptr(),
            c"sc".as_ptr(),
            name.raw,
            c"FREE".as_ptr(),
        ) else 0);
    }

    /// Propagates `DLOCK.SETSTATE key RESERVE owner deadline [SHARED limit
    /// [WEIGHT w]]` (limit 0: none; the weight only when it is not 1).
    pub fn replicate_reserve(self, name: KeyName, owner: &[u8], deadline_ms: u64, want: Want) {
        match want.mode {
            Mode::Exclusive => api!(RedisModule_Replicate(
                self.raw,
                c"DLOCK.SETSTATE".as_ptr(),
                c"scbl".as_ptr(),
                name.raw,
                c"RESERVE".as_ptr(),
                owner.as_ptr().cast::<c_char>(),
                owner.len(),
                to_long_long(deadline_ms),
            ) else 0),
            Mode::Shared if want.weight == 1 => api!(RedisModule_Replicate(
                self.raw,
                c"DLOCK.SETSTATE".as_ptr(),
                c"scblcl".as_ptr(),
                name.raw,
                c"RESERVE".as_ptr(),
                owner.as_ptr().cast::<c_char>(),
                owner.len(),
                to_long_long(deadline_ms),
                c"SHARED".as_ptr(),
                to_long_long(want.limit.map_or(0, u64::from)),
            ) else 0),
            Mode::Shared => api!(RedisModule_Replicate(
                self.raw,
                c"DLOCK.SETSTATE".as_ptr(),
                c"scblclcl".as_ptr(),
                name.raw,
                c"RESERVE".as_ptr(),
                owner.as_ptr().cast::<c_char>(),
                owner.len(),
                to_long_long(deadline_ms),
                c"SHARED".as_ptr(),
                to_long_long(want.limit.map_or(0, u64::from)),
                c"WEIGHT".as_ptr(),
                to_long_long(u64::from(want.weight)),
            ) else 0),
        };
    }

    /// Propagates `DEL key` to replicas and the AOF.
    pub fn replicate_delete(self, name: KeyName) {
        api!(RedisModule_Replicate(self.raw, c"DEL".as_ptr(), c"s".as_ptr(), name.raw) else 0);
    }
}

fn to_long_long(value: u64) -> c_longlong {
    c_longlong::try_from(value).unwrap_or(c_longlong::MAX)
}

/// The registered lock type (`datatype::LOCK_TYPE`), null before it is
/// registered.
static LOCK_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// Records the lock type Redis registered; called once, from the module's
/// load, by the data type's registration.
pub fn set_lock_type(raw_type: *mut raw::RedisModuleType) {
    LOCK_TYPE.store(raw_type, Ordering::Relaxed);
}

/// The registered lock type, or null before registration.
fn lock_type() -> *mut raw::RedisModuleType {
    LOCK_TYPE.load(Ordering::Relaxed)
}

/// A key name: borrowed from a command's argv, or owned by an [`OwnedKeyName`].
#[derive(Clone, Copy)]
pub struct KeyName {
    raw: *mut raw::RedisModuleString,
}

impl KeyName {
    /// Wraps a key name Redis passed to a callback.
    pub(crate) fn from_raw(raw: *mut raw::RedisModuleString) -> Self {
        Self { raw }
    }

    pub(crate) fn raw_string(self) -> *mut raw::RedisModuleString {
        self.raw
    }

    /// The name's bytes (valid while the name is).
    pub fn bytes(&self) -> &[u8] {
        string_bytes(self.raw)
    }
}

/// A key name created by the module, freed on drop.
pub struct OwnedKeyName {
    ctx: *mut raw::RedisModuleCtx,
    name: KeyName,
}

impl OwnedKeyName {
    pub fn name(&self) -> KeyName {
        self.name
    }
}

impl Drop for OwnedKeyName {
    fn drop(&mut self) {
        if !self.name.raw.is_null() {
            api!(RedisModule_FreeString(self.ctx, self.name.raw) else ());
        }
    }
}

/// A command's arguments, borrowed from Redis for the duration of the call.
pub struct Argv<'a> {
    argv: &'a [*mut raw::RedisModuleString],
}

impl<'a> Argv<'a> {
    /// Wraps the argv Redis passed to a command.
    ///
    /// # Safety
    /// `argv` must point to `argc` valid strings that outlive `'a`.
    pub(crate) unsafe fn from_raw(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Self {
        let len = usize::try_from(argc).unwrap_or(0);
        let argv = if argv.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: guaranteed by the caller.
            unsafe { std::slice::from_raw_parts(argv, len) }
        };
        Self { argv }
    }

    /// The argument at `index` as a key name.
    pub fn key(&self, index: usize) -> Option<KeyName> {
        self.argv.get(index).map(|&raw| KeyName { raw })
    }
}

impl<'a> ArgSource<'a> for &Argv<'a> {
    fn count(&self) -> usize {
        self.argv.len()
    }

    fn bytes(&self, index: usize) -> &'a [u8] {
        match self.argv.get(index) {
            Some(&string) => string_bytes(string),
            None => &[],
        }
    }
}

/// The bytes of a Redis string that outlives `'a`.
fn string_bytes<'a>(string: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len: usize = 0;
    let ptr = api!(RedisModule_StringPtrLen(string, &mut len) else std::ptr::null());
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: Redis returns a pointer to `len` bytes owned by the string,
    // which lives as long as the argv it came from.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// An open key known to be empty or to hold a lock. Closed on drop.
pub struct LockKey {
    raw: *mut raw::RedisModuleKey,
    /// Opened for writing: its closing may end a change of the lock (see
    /// [`observe_closes`]).
    writable: bool,
}

impl LockKey {
    /// The lock stored in the key, if any.
    pub fn lock(&self) -> Option<&Lock> {
        self.value().map(|value| {
            // SAFETY: open_lock verified the key holds our type, whose values
            // are always `Box<Lock>` pointers; the key is open while `self` lives.
            unsafe { &*value }
        })
    }

    /// The lock stored in the key, mutably.
    pub fn lock_mut(&mut self) -> Option<&mut Lock> {
        self.value().map(|value| {
            // SAFETY: as in `lock`; `&mut self` makes this the only borrow.
            unsafe { &mut *value }
        })
    }

    fn value(&self) -> Option<*mut Lock> {
        if self.raw.is_null() {
            return None;
        }
        let value = api!(RedisModule_ModuleTypeGetValue(self.raw) else std::ptr::null_mut());
        (!value.is_null()).then_some(value.cast::<Lock>())
    }

    /// Stores `lock` as the key's value, replacing any value it had.
    pub fn insert(&mut self, lock: Lock) -> Result<&mut Lock, CommandError> {
        if self.raw.is_null() {
            return Err(CommandError::StoreFailed);
        }
        let value = Box::into_raw(boxes::boxed_lock(lock));
        let status = api!(RedisModule_ModuleTypeSetValue(self.raw, lock_type(), value.cast::<c_void>()) else raw::REDISMODULE_ERR as c_int);
        if status != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis did not take the value; we still own the box.
            drop(unsafe { Box::from_raw(value) });
            return Err(CommandError::StoreFailed);
        }
        super::boxes::value_created(super::boxes::ValueKind::Lock);
        // SAFETY: Redis now owns the box and keeps it alive while the key exists.
        Ok(unsafe { &mut *value })
    }

    /// Sets the key to expire at `deadline_ms` (absolute, ms since the epoch).
    pub fn set_deadline(&mut self, deadline_ms: u64) {
        if self.raw.is_null() {
            return;
        }
        let when = i64::try_from(deadline_ms).unwrap_or(i64::MAX);
        api!(RedisModule_SetAbsExpire(self.raw, when) else 0);
    }

    /// Removes the key's expire.
    pub fn remove_expire(&mut self) {
        if self.raw.is_null() {
            return;
        }
        api!(RedisModule_SetExpire(self.raw, raw::REDISMODULE_NO_EXPIRE as i64) else 0);
    }

    /// Deletes the key (and frees the lock through the type's free callback).
    pub fn delete(&mut self) {
        if self.raw.is_null() {
            return;
        }
        api!(RedisModule_DeleteKey(self.raw) else 0);
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        if self.writable && CLOSES_OBSERVED.load(Ordering::Relaxed) {
            self.tell_observer();
        }
        api!(RedisModule_CloseKey(self.raw) else ());
    }
}

impl LockKey {
    /// Hands the key's place and lock to the close observer, before the key
    /// is closed. Out of line: observed only while clients watch.
    #[cold]
    #[inline(never)]
    fn tell_observer(&self) {
        let Some(observer) = CLOSE_OBSERVER.get() else {
            return;
        };
        let name = api!(RedisModule_GetKeyNameFromModuleKey(self.raw) else std::ptr::null());
        if name.is_null() {
            return;
        }
        let db = api!(RedisModule_GetDbIdFromModuleKey(self.raw) else -1);
        if db < 0 {
            return;
        }
        observer(db, string_bytes(name.cast_mut()), self.lock());
    }
}

/// What is told of every lock key opened for writing as it closes: its
/// database, its name and its lock (None when the key is now empty).
pub type CloseObserver = fn(i32, &[u8], Option<&Lock>);

/// Every change of a lock made by the module (a command, a replicated
/// state, a timer's hand-off or expiry, a SESSION closing) ends with the
/// lock's key, opened for writing, being closed: the one place where
/// `DLOCK.WATCH` learns of them all. Set once, from the module's init.
static CLOSE_OBSERVER: OnceLock<CloseObserver> = OnceLock::new();

/// Whether the observer is told at all: only while some client watches,
/// so that closing a key costs one load otherwise.
static CLOSES_OBSERVED: AtomicBool = AtomicBool::new(false);

/// Sets the observer of closing lock keys (once; later calls change nothing).
pub fn set_close_observer(observer: CloseObserver) {
    let _ = CLOSE_OBSERVER.set(observer);
}

/// Starts or stops telling the observer of closing lock keys.
pub fn observe_closes(on: bool) {
    CLOSES_OBSERVED.store(on, Ordering::Relaxed);
}

/// Whether the server provides an API function: Redis fills in, at load,
/// every pointer it knows and leaves the others null, so this tells which
/// server-side features exist without trusting the version INFO reports
/// (Valkey 9 reports `redis_version:7.2.4`).
macro_rules! provides {
    ($name:ident) => {{
        // SAFETY: Redis writes these pointers once, in RedisModule_Init on
        // the main thread before any callback; afterwards they are only read.
        unsafe { raw::$name }.is_some()
    }};
}

/// Creates the module's own ACL category `name` (`RedisModule_AddACLCategory`,
/// Redis 7.4+, Valkey 8+; only during the module's load). `None` where the
/// server lacks the API, else whether the server accepted the name.
pub fn add_acl_category(ctx: *mut raw::RedisModuleCtx, name: &CStr) -> Option<bool> {
    if !provides!(RedisModule_AddACLCategory) {
        return None;
    }
    let status =
        api!(RedisModule_AddACLCategory(ctx, name.as_ptr()) else raw::REDISMODULE_ERR as c_int);
    Some(status == raw::REDISMODULE_OK as c_int)
}

/// Whether the server can give module commands ACL categories
/// (`RedisModule_SetCommandACLCategories`: Redis 7.2+, Valkey).
pub fn offers_command_acl_categories() -> bool {
    provides!(RedisModule_SetCommandACLCategories)
}

/// Puts the command `name` (created already by this module) in the ACL
/// `categories`, a space-separated list (only during the module's load).
/// `None` where the server lacks the API, else whether the server accepted
/// the command and every category.
pub fn set_command_acl_categories(
    ctx: *mut raw::RedisModuleCtx,
    name: &CStr,
    categories: &CStr,
) -> Option<bool> {
    if !offers_command_acl_categories() {
        return None;
    }
    let command = api!(RedisModule_GetCommand(ctx, name.as_ptr()) else std::ptr::null_mut());
    if command.is_null() {
        return Some(false);
    }
    let status = api!(RedisModule_SetCommandACLCategories(command, categories.as_ptr()) else raw::REDISMODULE_ERR as c_int);
    Some(status == raw::REDISMODULE_OK as c_int)
}
