//! The opt-in audit channel (`dlock.audit-channel`): when set, every lock
//! event is also published as one line of text on that pub/sub channel
//! ([`crate::lock::audit`] has the format). Empty (the default) turns it off,
//! and off costs one relaxed atomic load per event.
//!
//! In Redis Cluster the message goes to the shard channel of the key's slot
//! (`SPUBLISH`, `RedisModule_PublishMessageShard`) where the server has it,
//! else to the plain channel (`PUBLISH`, which a cluster broadcasts).

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};

use redis_module::configuration::{ConfigurationContext, ConfigurationValue};
use redis_module::{raw, RedisError, RedisString};

use super::ffi::{api, Ctx};
use crate::lock::audit;

/// The value of `dlock.audit-channel`.
pub struct AuditChannel {
    on: AtomicBool,
    channel: Mutex<Vec<u8>>,
}

/// `dlock.audit-channel`.
pub static AUDIT_CHANNEL: AuditChannel = AuditChannel {
    on: AtomicBool::new(false),
    channel: Mutex::new(Vec::new()),
};

impl AuditChannel {
    fn channel(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.channel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ConfigurationValue<RedisString> for AuditChannel {
    fn get(&self, _ctx: &ConfigurationContext) -> RedisString {
        RedisString::create_from_slice(std::ptr::null_mut(), &self.channel())
    }

    fn set(&self, _ctx: &ConfigurationContext, value: RedisString) -> Result<(), RedisError> {
        let bytes = value.as_slice();
        if bytes.contains(&b'{') || bytes.contains(&b'}') {
            // The cluster channel appends a hash tag of its own.
            return Err(RedisError::Str(
                "the audit channel name must not contain { or }",
            ));
        }
        let mut channel = self.channel();
        channel.clear();
        channel.extend_from_slice(bytes);
        self.on.store(!channel.is_empty(), Ordering::Relaxed);
        Ok(())
    }
}

/// Whether events are audited (the only cost when they are not).
pub fn is_on() -> bool {
    AUDIT_CHANNEL.on.load(Ordering::Relaxed)
}

/// What an event says about the hold it concerns.
#[derive(Clone, Copy, Debug)]
pub struct Fact<'a> {
    pub owner: &'a [u8],
    /// The hold's fencing token; 0 for a waiter that never held the lock.
    pub token: u64,
    /// The hold count after the event (0 once the hold ended).
    pub holds: u64,
}

static SLOT_TAGS: OnceLock<Vec<u32>> = OnceLock::new();

/// Publishes one event of the lock at `key` in database `db`, if auditing
/// is on.
pub fn publish(ctx: Ctx, event: &str, db: i32, key: &[u8], fact: Fact<'_>) {
    if !is_on() {
        return;
    }
    let mut message = Vec::with_capacity(96 + key.len() + fact.owner.len());
    audit::format_message(
        &mut message,
        event,
        crate::clock::now_ms(),
        i64::from(db),
        key,
        fact.owner,
        fact.token,
        fact.holds,
    );
    let base = AUDIT_CHANNEL.channel().clone();
    if base.is_empty() {
        return;
    }
    let message = ctx.key_name(&message);
    // SAFETY: reading a function pointer Redis filled in at load time.
    let has_shard_api = unsafe {
        std::ptr::addr_of!(raw::RedisModule_PublishMessageShard)
            .read()
            .is_some()
    };
    if ctx.in_cluster() && has_shard_api {
        let tags = SLOT_TAGS.get_or_init(audit::slot_tags);
        let channel = audit::shard_channel(&base, key, &|slot| {
            tags.get(usize::from(slot)).copied().unwrap_or(0)
        });
        let channel = ctx.key_name(&channel);
        api!(RedisModule_PublishMessageShard(ctx.raw(), channel.name().raw_string(), message.name().raw_string()) else 0);
    } else {
        let channel = ctx.key_name(&base);
        api!(RedisModule_PublishMessage(ctx.raw(), channel.name().raw_string(), message.name().raw_string()) else 0);
    }
}

/// A context of the module's own for publishing where Redis passes none
/// (a value being unlinked); made once at load time.
static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the detached context; called from the module's init.
pub fn init(ctx: &redis_module::Context) {
    let detached =
        api!(RedisModule_GetDetachedThreadSafeContext(ctx.ctx) else std::ptr::null_mut());
    DETACHED.store(detached, Ordering::Relaxed);
}

/// Publishes `expire` for holds whose leases ended, of a value Redis is
/// taking off `key` in `db` (only called while auditing is on, on the main
/// thread).
pub fn publish_ended<'a>(db: i32, key: &[u8], ended: impl Iterator<Item = &'a crate::lock::Hold>) {
    let detached = DETACHED.load(Ordering::Relaxed);
    if detached.is_null() {
        return;
    }
    let ctx = Ctx::from_raw(detached);
    for hold in ended {
        let fact = Fact {
            owner: &hold.owner,
            token: hold.token,
            holds: hold.total(),
        };
        publish(ctx, "expire", db, key, fact);
    }
}
