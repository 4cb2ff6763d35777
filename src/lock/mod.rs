//! The lock state machine: owner, re-entry count, fencing token and lease
//! deadline of one lock key. Pure Rust with no Redis in it, so that every rule
//! is unit- and property-tested; the Redis adapter only stores, persists and
//! replicates what this module decides.
//!
//! Time is passed in by the caller as absolute milliseconds since the Unix
//! epoch, the same clock Redis uses for key expiry. A lease covers every
//! instant up to and including its deadline, exactly like a Redis key whose
//! expire time is that deadline: the lock is free once `now > deadline`.

mod token;

pub use token::{TokenCounter, MAX_TOKEN};

/// A ttl must be below this (2^53 ms): larger leases would overflow the
/// deadline arithmetic of clients that use doubles.
pub const TTL_LIMIT_MS: u64 = 1 << 53;

/// The longest owner name, in bytes.
pub const MAX_OWNER_LEN: usize = 512;

/// One hold on a lock: who holds it, how many times, under which token, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub owner: Box<[u8]>,
    /// Re-entry count; at least 1 while the hold exists.
    pub holds: u64,
    /// The fencing token issued when the hold began; re-entries keep it.
    pub token: u64,
    /// Absolute deadline of the lease, in ms since the epoch.
    pub deadline_ms: u64,
}

impl Hold {
    /// Whether the lease still covers `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        now_ms <= self.deadline_ms
    }

    /// Milliseconds left on the lease (0 at the deadline itself).
    pub fn remaining_ms(&self, now_ms: u64) -> u64 {
        self.deadline_ms.saturating_sub(now_ms)
    }
}

/// A successful acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub token: u64,
    pub holds: u64,
    /// True for a re-entry by the current holder, false for a new hold.
    pub reentry: bool,
}

/// The caller does not hold the lock (it is free, expired, or held by someone else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotOwner;

/// The state of one lock key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lock {
    hold: Option<Hold>,
}

impl Lock {
    /// A free lock.
    pub const fn new() -> Self {
        Self { hold: None }
    }

    /// A lock restored from storage or replication.
    pub fn with_hold(hold: Hold) -> Self {
        Self { hold: Some(hold) }
    }

    /// The hold, whether or not its lease has ended (for persistence).
    pub fn stored_hold(&self) -> Option<&Hold> {
        self.hold.as_ref()
    }

    /// The hold whose lease still covers `now_ms`, if any.
    pub fn live_hold(&self, now_ms: u64) -> Option<&Hold> {
        self.hold.as_ref().filter(|hold| hold.is_live(now_ms))
    }

    /// True when nothing in the lock is live: the key should not exist.
    pub fn is_vacant(&self, now_ms: u64) -> bool {
        self.live_hold(now_ms).is_none()
    }

    /// Acquires the lock for `owner` with a lease of `ttl_ms` from `now_ms`.
    ///
    /// A free (or expired) lock starts a new hold under a token from
    /// `next_token`; the current holder re-enters, keeping its token, with the
    /// lease reset; anyone else gets `None` and nothing changes.
    pub fn acquire(
        &mut self,
        owner: &[u8],
        ttl_ms: u64,
        now_ms: u64,
        next_token: impl FnOnce() -> u64,
    ) -> Option<Grant> {
        let deadline_ms = now_ms.saturating_add(ttl_ms);
        match self.hold.as_mut().filter(|hold| hold.is_live(now_ms)) {
            Some(hold) if *hold.owner == *owner => {
                hold.holds = hold.holds.saturating_add(1);
                hold.deadline_ms = deadline_ms;
                Some(Grant {
                    token: hold.token,
                    holds: hold.holds,
                    reentry: true,
                })
            }
            Some(_) => None,
            None => {
                let token = next_token();
                self.hold = Some(Hold {
                    owner: owner.into(),
                    holds: 1,
                    token,
                    deadline_ms,
                });
                Some(Grant {
                    token,
                    holds: 1,
                    reentry: false,
                })
            }
        }
    }

    /// Gives up one hold of `owner`; returns the holds left (0: the lock is free).
    pub fn release(&mut self, owner: &[u8], now_ms: u64) -> Result<u64, NotOwner> {
        let hold = self.owned_hold(owner, now_ms)?;
        hold.holds -= 1;
        let remaining = hold.holds;
        if remaining == 0 {
            self.hold = None;
        }
        Ok(remaining)
    }

    /// Resets the lease of `owner` to `ttl_ms` from `now_ms`; returns its token.
    pub fn renew(&mut self, owner: &[u8], ttl_ms: u64, now_ms: u64) -> Result<u64, NotOwner> {
        let hold = self.owned_hold(owner, now_ms)?;
        hold.deadline_ms = now_ms.saturating_add(ttl_ms);
        Ok(hold.token)
    }

    fn owned_hold(&mut self, owner: &[u8], now_ms: u64) -> Result<&mut Hold, NotOwner> {
        self.hold
            .as_mut()
            .filter(|hold| hold.is_live(now_ms) && *hold.owner == *owner && hold.holds > 0)
            .ok_or(NotOwner)
    }
}

#[cfg(test)]
mod tests;
