//! The reference designs' Lua scripts, written as they are commonly deployed
//! (the re-entrant and fair locks follow Redisson's RedissonLock and
//! RedissonFairLock scripts).

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

/// The SHA1 of each script, as SCRIPT LOAD returned it.
#[derive(Clone, Debug)]
pub struct Scripts {
    pub compare_and_delete: String,
    pub lock: String,
    pub unlock: String,
    pub fair_lock: String,
    pub fair_unlock: String,
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
        })
    }
}
