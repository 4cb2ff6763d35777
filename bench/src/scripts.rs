//! The reference designs' Lua scripts, written as they are commonly deployed
//! (the re-entrant and fair locks follow Redisson's RedissonLock and
//! RedissonFairLock scripts; the read-write lock, the expiring-permit
//! semaphore and the latch follow the steps of RedissonReadLock,
//! RedissonWriteLock, RedissonPermitExpirableSemaphore and
//! RedissonCountDownLatch, written anew for this bench).

use crate::resp::Conn;
use crate::Res;

/// Compare-and-delete: the release of the `SET key owner NX PX ttl` lock.
/// KEYS: lock. ARGV: owner.
pub const COMPARE_AND_DELETE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Re-entrant lock over a hash (RedissonLock.tryLockInnerAsync): nil when
/// acquired or re-entered, else the lock's PTTL.
/// KEYS: lock. ARGV: ttl_ms, owner.
pub const REENTRANT_LOCK: &str = "\
if (redis.call('exists', KEYS[1]) == 0) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Its unlock (RedissonLock.unlockInnerAsync): nil when not the holder, 0
/// when holds remain, 1 when released (and the release is published).
/// KEYS: lock, channel. ARGV: message, ttl_ms, owner.
pub const REENTRANT_UNLOCK: &str = "\
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
    return nil; \
end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then \
    redis.call('pexpire', KEYS[1], ARGV[2]); \
    return 0; \
else \
    redis.call('del', KEYS[1]); \
    redis.call('publish', KEYS[2], ARGV[1]); \
    return 1; \
end; \
return nil;";

/// Fair lock (RedissonFairLock.tryLockInnerAsync): a list is the queue, a
/// sorted set holds each waiter's timeout. Every call drops timed-out
/// waiters from the head; a grant shifts every remaining timeout (O(n)).
/// Nil when acquired, else the expected wait in ms.
/// KEYS: lock, queue, timeouts. ARGV: ttl_ms, owner, wait_ms, now_ms.
pub const FAIR_LOCK: &str = "\
while true do \
    local firstThreadId2 = redis.call('lindex', KEYS[2], 0); \
    if firstThreadId2 == false then \
        break; \
    end; \
    local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2)); \
    if timeout <= tonumber(ARGV[4]) then \
        redis.call('zrem', KEYS[3], firstThreadId2); \
        redis.call('lpop', KEYS[2]); \
    else \
        break; \
    end; \
end; \
if (redis.call('exists', KEYS[1]) == 0) \
    and ((redis.call('exists', KEYS[2]) == 0) \
        or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then \
    redis.call('lpop', KEYS[2]); \
    redis.call('zrem', KEYS[3], ARGV[2]); \
    local keys = redis.call('zrange', KEYS[3], 0, -1); \
    for i = 1, #keys, 1 do \
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]); \
    end; \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
local timeout = redis.call('zscore', KEYS[3], ARGV[2]); \
if timeout ~= false then \
    return timeout - tonumber(ARGV[3]) - tonumber(ARGV[4]); \
end; \
local lastThreadId = redis.call('lindex', KEYS[2], -1); \
local ttl; \
if lastThreadId ~= false and lastThreadId ~= ARGV[2] then \
    ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]); \
else \
    ttl = redis.call('pttl', KEYS[1]); \
end; \
local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]); \
if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then \
    redis.call('rpush', KEYS[2], ARGV[2]); \
end; \
return ttl;";

/// Its unlock (RedissonFairLock.unlockInnerAsync): drops timed-out waiters,
/// releases one hold, and on release publishes to the next waiter's channel.
/// KEYS: lock, queue, timeouts, channel prefix. ARGV: message, ttl_ms, owner, now_ms.
pub const FAIR_UNLOCK: &str = "\
while true do \
    local firstThreadId2 = redis.call('lindex', KEYS[2], 0); \
    if firstThreadId2 == false then \
        break; \
    end; \
    local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2)); \
    if timeout <= tonumber(ARGV[4]) then \
        redis.call('zrem', KEYS[3], firstThreadId2); \
        redis.call('lpop', KEYS[2]); \
    else \
        break; \
    end; \
end; \
if (redis.call('exists', KEYS[1]) == 0) then \
    local nextThreadId = redis.call('lindex', KEYS[2], 0); \
    if nextThreadId ~= false then \
        redis.call('publish', KEYS[4] .. ':' .. nextThreadId, ARGV[1]); \
    end; \
    return 1; \
end; \
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
    return nil; \
end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then \
    redis.call('pexpire', KEYS[1], ARGV[2]); \
    return 0; \
end; \
redis.call('del', KEYS[1]); \
local nextThreadId = redis.call('lindex', KEYS[2], 0); \
if nextThreadId ~= false then \
    redis.call('publish', KEYS[4] .. ':' .. nextThreadId, ARGV[1]); \
end; \
return 1;";

/// Read lock of a read-write lock, the steps of RedissonReadLock: one hash
/// per lock with a `mode` field (`read` or `write`) and one count per
/// owner, plus one expiry key per read hold (`<prefix>:<n>`, n the owner's
/// hold number). A reader may enter while the mode is read (even with a
/// writer waiting: nothing queues) or while it holds the write lock itself.
/// Nil when taken, else the lock's PTTL.
/// KEYS: lock, this owner's expiry-key prefix (`<lock>:<owner>:rwlock_timeout`).
/// ARGV: ttl_ms, owner, owner's write name.
pub const RW_READ_LOCK: &str = "\
local mode = redis.call('hget', KEYS[1], 'mode') \
if mode == false then \
    redis.call('hset', KEYS[1], 'mode', 'read') \
    redis.call('hset', KEYS[1], ARGV[2], 1) \
    redis.call('set', KEYS[2] .. ':1', 1) \
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]) \
    redis.call('pexpire', KEYS[1], ARGV[1]) \
    return nil \
end \
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then \
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1) \
    local expiry = KEYS[2] .. ':' .. n \
    redis.call('set', expiry, 1) \
    redis.call('pexpire', expiry, ARGV[1]) \
    local left = redis.call('pttl', KEYS[1]) \
    redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1]))) \
    return nil \
end \
return redis.call('pttl', KEYS[1])";

/// Its unlock (RedissonReadLock.unlockInnerAsync): drops one read hold and
/// its expiry key, then, while other holders remain, walks every holder's
/// expiry keys to set the lock's PTTL to the longest one (O(holders)); the
/// last reader deletes the lock and publishes. 1 released, 0 holds remain,
/// nil when the owner holds no read lock.
/// KEYS: lock, channel, this owner's expiry-key prefix, the lock (prefix of
/// every holder's expiry keys). ARGV: message, owner.
pub const RW_READ_UNLOCK: &str = "\
local mode = redis.call('hget', KEYS[1], 'mode') \
if mode == false then \
    redis.call('publish', KEYS[2], ARGV[1]) \
    return 1 \
end \
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then \
    return nil \
end \
local left = redis.call('hincrby', KEYS[1], ARGV[2], -1) \
if left == 0 then \
    redis.call('hdel', KEYS[1], ARGV[2]) \
end \
redis.call('del', KEYS[3] .. ':' .. (left + 1)) \
if redis.call('hlen', KEYS[1]) > 1 then \
    local longest = -3 \
    for _, name in ipairs(redis.call('hkeys', KEYS[1])) do \
        local holds = tonumber(redis.call('hget', KEYS[1], name)) \
        if type(holds) == 'number' then \
            for i = holds, 1, -1 do \
                local pttl = redis.call('pttl', KEYS[4] .. ':' .. name .. ':rwlock_timeout:' .. i) \
                longest = math.max(longest, pttl) \
            end \
        end \
    end \
    if longest > 0 then \
        redis.call('pexpire', KEYS[1], longest) \
        return 0 \
    end \
    if mode == 'write' then \
        return 0 \
    end \
end \
redis.call('del', KEYS[1]) \
redis.call('publish', KEYS[2], ARGV[1]) \
return 1";

/// Write lock (RedissonWriteLock.tryLockInnerAsync): taken when the hash is
/// missing, re-entered by its own writer; nil when taken, else the PTTL.
/// KEYS: lock. ARGV: ttl_ms, owner's write name.
pub const RW_WRITE_LOCK: &str = "\
local mode = redis.call('hget', KEYS[1], 'mode') \
if mode == false then \
    redis.call('hset', KEYS[1], 'mode', 'write') \
    redis.call('hset', KEYS[1], ARGV[2], 1) \
    redis.call('pexpire', KEYS[1], ARGV[1]) \
    return nil \
end \
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1) \
    redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1])) \
    return nil \
end \
return redis.call('pttl', KEYS[1])";

/// Its unlock (RedissonWriteLock.unlockInnerAsync): the last write hold
/// deletes the lock and publishes, or turns the mode to read when the
/// writer also holds read locks. 1 released, 0 holds remain, nil otherwise.
/// KEYS: lock, channel. ARGV: message, ttl_ms, owner's write name.
pub const RW_WRITE_UNLOCK: &str = "\
local mode = redis.call('hget', KEYS[1], 'mode') \
if mode == false then \
    redis.call('publish', KEYS[2], ARGV[1]) \
    return 1 \
end \
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then \
    return nil \
end \
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then \
    redis.call('pexpire', KEYS[1], ARGV[2]) \
    return 0 \
end \
redis.call('hdel', KEYS[1], ARGV[3]) \
if redis.call('hlen', KEYS[1]) == 1 then \
    redis.call('del', KEYS[1]) \
    redis.call('publish', KEYS[2], ARGV[1]) \
else \
    redis.call('hset', KEYS[1], 'mode', 'read') \
end \
return 1";

/// Acquire of an expiring-permit semaphore, the steps of
/// RPermitExpirableSemaphore.tryAcquire: a counter of free permits and a
/// sorted set of taken permits scored by their lease deadline; expired
/// permits are returned to the counter first (and published). `OK` when
/// taken, `:<deadline>` of the permit that expires first when none is free
/// (the client waits until then or a message), nil when none can expire.
/// KEYS: counter, permits (sorted set), channel. ARGV: permits wanted,
/// lease deadline ms, now ms, the never-expires score, permit id.
pub const SEM_ACQUIRE: &str = "\
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]) \
if #expired > 0 then \
    redis.call('zrem', KEYS[2], unpack(expired)) \
    local free = redis.call('incrby', KEYS[1], #expired) \
    if tonumber(free) > 0 then \
        redis.call('publish', KEYS[3], free) \
    end \
end \
local free = redis.call('get', KEYS[1]) \
if free ~= false and tonumber(free) >= tonumber(ARGV[1]) then \
    redis.call('decrby', KEYS[1], ARGV[1]) \
    redis.call('zadd', KEYS[2], ARGV[2], ARGV[5]) \
    local ttl = redis.call('pttl', KEYS[1]) \
    if ttl > 0 then \
        redis.call('pexpire', KEYS[2], ttl) \
    end \
    return 'OK' \
end \
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES') \
if first[1] ~= nil and first[2] ~= ARGV[4] then \
    return ':' .. first[2] \
end \
return nil";

/// Its release (tryRelease of one permit): removes the permit, returns it
/// to the counter and publishes the free count. 1 released, 0 when the
/// permit was gone or had expired.
/// KEYS: counter, channel, permits. ARGV: permit id, 1, now ms.
pub const SEM_RELEASE: &str = "\
local deadline = redis.call('zscore', KEYS[3], ARGV[1]) \
if redis.call('zrem', KEYS[3], ARGV[1]) ~= 1 then \
    return 0 \
end \
local free = redis.call('incrby', KEYS[1], ARGV[2]) \
redis.call('publish', KEYS[2], free) \
if tonumber(deadline) <= tonumber(ARGV[3]) then \
    return 0 \
end \
return 1";

/// Count-down of a latch, the steps of RedissonCountDownLatch.countDown: a
/// plain counter; the count-down that reaches zero deletes it and
/// publishes the zero-count message, and awaiters subscribed to the
/// channel re-read the counter. Replies nothing (nil), as Redisson's does.
/// KEYS: counter, channel. ARGV: message.
pub const LATCH_COUNT_DOWN: &str = "\
local left = redis.call('decr', KEYS[1]) \
if left <= 0 then \
    redis.call('del', KEYS[1]) \
end \
if left == 0 then \
    redis.call('publish', KEYS[2], ARGV[1]) \
end";

/// RedissonCountDownLatch.trySetCount: sets the counter only when it does
/// not exist, and publishes the new-count message. Replies 1 when set, 0
/// when it existed.
/// KEYS: counter, channel. ARGV: message, count.
pub const LATCH_TRY_SET: &str = "\
if redis.call('exists', KEYS[1]) == 0 then \
    redis.call('set', KEYS[1], ARGV[2]) \
    redis.call('publish', KEYS[2], ARGV[1]) \
    return 1 \
end \
return 0";

/// The SHA1 of each script, as SCRIPT LOAD returned it.
#[derive(Clone, Debug)]
pub struct Scripts {
    pub compare_and_delete: String,
    pub lock: String,
    pub unlock: String,
    pub fair_lock: String,
    pub fair_unlock: String,
    pub rw_read_lock: String,
    pub rw_read_unlock: String,
    pub rw_write_lock: String,
    pub rw_write_unlock: String,
    pub sem_acquire: String,
    pub sem_release: String,
    pub latch_count_down: String,
    pub latch_try_set: String,
}

impl Scripts {
    /// SCRIPT LOADs every script.
    pub fn load(conn: &mut Conn) -> Res<Scripts> {
        let mut load = |body: &str| -> Res<String> {
            conn.call(&["SCRIPT", "LOAD", body])?
                .as_text()
                .ok_or_else(|| "SCRIPT LOAD did not return a SHA".into())
        };
        Ok(Scripts {
            compare_and_delete: load(COMPARE_AND_DELETE)?,
            lock: load(REENTRANT_LOCK)?,
            unlock: load(REENTRANT_UNLOCK)?,
            fair_lock: load(FAIR_LOCK)?,
            fair_unlock: load(FAIR_UNLOCK)?,
            rw_read_lock: load(RW_READ_LOCK)?,
            rw_read_unlock: load(RW_READ_UNLOCK)?,
            rw_write_lock: load(RW_WRITE_LOCK)?,
            rw_write_unlock: load(RW_WRITE_UNLOCK)?,
            sem_acquire: load(SEM_ACQUIRE)?,
            sem_release: load(SEM_RELEASE)?,
            latch_count_down: load(LATCH_COUNT_DOWN)?,
            latch_try_set: load(LATCH_TRY_SET)?,
        })
    }
}
