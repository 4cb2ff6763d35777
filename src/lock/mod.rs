//! The lock state machine: owner, re-entry count, fencing token and lease
//! deadline of one lock key. Pure Rust with no Redis in it, so that every rule
//! is unit- and property-tested; the Redis adapter only stores, persists and
//! replicates what this module decides.
//!
//! Time is passed in by the caller as absolute milliseconds since the Unix
//! epoch, the same clock Redis uses for key expiry. A lease covers every
//! instant up to and including its deadline, exactly like a Redis key whose
//! expire time is that deadline: the lock is free once `now > deadline`.

pub mod codec;
pub mod latch;
mod queue;
mod token;

pub use queue::{stored_reservations, Entry, EntryKind, Queue, Waiter, WaiterId};
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
    /// The connection a SESSION hold is tied to (never persisted).
    pub session: Option<u64>,
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

/// A blocked waiter that has been granted the lock and must be woken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterGrant {
    pub waiter: WaiterId,
    pub grant: Grant,
    pub owner: Box<[u8]>,
}

/// The outcome of an immediate acquire attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acquired {
    /// The caller's grant, or `None` when the lock is not available to it.
    pub grant: Option<Grant>,
    /// Queued entries of the same owner, granted as re-entries.
    pub woken: Vec<WaiterGrant>,
}

/// The caller does not hold the lock (it is free, expired, or held by someone else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotOwner;

/// A request for the lock, as ACQUIRE and FAIR make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
    /// The connection to tie the hold to (SESSION), if any.
    pub session: Option<u64>,
}

/// The state of one lock key: the hold and the wait queue.
///
/// The rule behind every method: the lock is only ever granted to the head
/// of the queue, or to anyone when the queue is empty; the current holder
/// re-enters at once. A blocked waiter never heads the queue of a free lock
/// once [`Lock::hand_off`] has run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lock {
    hold: Option<Hold>,
    queue: Queue,
}

impl Lock {
    /// A free lock with an empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// A lock restored from storage or replication.
    pub fn with_hold(hold: Hold) -> Self {
        Self {
            hold: Some(hold),
            queue: Queue::default(),
        }
    }

    /// The hold, whether or not its lease has ended (for persistence).
    pub fn stored_hold(&self) -> Option<&Hold> {
        self.hold.as_ref()
    }

    /// The hold whose lease still covers `now_ms`, if any.
    pub fn live_hold(&self, now_ms: u64) -> Option<&Hold> {
        self.hold.as_ref().filter(|hold| hold.is_live(now_ms))
    }

    /// The wait queue.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Blocked waiters plus reservations that have not run out.
    pub fn waiting(&self, now_ms: u64) -> usize {
        self.queue.waiter_count() + self.queue.live_reservation_count(now_ms)
    }

    /// True when nothing in the lock is live: the key should not exist.
    pub fn is_vacant(&self, now_ms: u64) -> bool {
        self.live_hold(now_ms).is_none()
            && self.queue.waiter_count() == 0
            && self.queue.live_reservation_count(now_ms) == 0
    }

    /// When the key should expire: the latest of the lease and the live
    /// reservations. `None` when nothing with a deadline is live.
    pub fn expire_at(&self, now_ms: u64) -> Option<u64> {
        let lease = self.live_hold(now_ms).map(|hold| hold.deadline_ms);
        let reserved = self
            .queue
            .last_reservation_deadline()
            .filter(|deadline| *deadline >= now_ms);
        lease.max(reserved)
    }

    /// The key's expire as derived from the persisted state alone (what a
    /// replica or a loaded file computes, independent of the clock).
    pub fn persisted_expire(&self) -> Option<u64> {
        let lease = self.hold.as_ref().map(|hold| hold.deadline_ms);
        lease.max(self.queue.last_reservation_deadline())
    }

    /// When a timer must look at this lock again: only locks with blocked
    /// waiters need one (at the end of the lease, or when the reservation
    /// heading the queue of a free lock runs out).
    pub fn wakeup_at(&self, now_ms: u64) -> Option<u64> {
        if self.queue.waiter_count() == 0 {
            return None;
        }
        if let Some(hold) = self.live_hold(now_ms) {
            return Some(hold.deadline_ms.saturating_add(1));
        }
        match self.queue.head() {
            Some((
                _,
                Entry {
                    kind: EntryKind::Reservation { deadline_ms },
                    ..
                },
            )) => Some(deadline_ms.saturating_add(1)),
            _ => Some(now_ms),
        }
    }

    /// An immediate acquire (ACQUIRE, or FAIR before it reserves).
    ///
    /// The holder re-enters (lease reset, same token). A free lock is granted
    /// when the queue is empty or headed by this owner's reservation; its
    /// other queued entries are then granted too, as re-entries. Otherwise
    /// nothing changes.
    pub fn acquire(
        &mut self,
        request: Request<'_>,
        now_ms: u64,
        next_token: impl FnOnce() -> u64,
        present: impl Fn(WaiterId) -> bool,
    ) -> Acquired {
        self.queue.drop_expired_reservations(now_ms);
        let deadline_ms = now_ms.saturating_add(request.ttl_ms);
        match self.hold.as_mut().filter(|hold| hold.is_live(now_ms)) {
            Some(hold) if *hold.owner == *request.owner => {
                hold.holds = hold.holds.saturating_add(1);
                hold.deadline_ms = deadline_ms;
                Acquired {
                    grant: Some(Grant {
                        token: hold.token,
                        holds: hold.holds,
                        reentry: true,
                    }),
                    woken: Vec::new(),
                }
            }
            Some(_) => Acquired::default(),
            None => {
                let head_is_mine = match self.queue.head() {
                    None => true,
                    Some((_, entry)) => {
                        *entry.owner == *request.owner
                            && matches!(entry.kind, EntryKind::Reservation { .. })
                    }
                };
                if !head_is_mine {
                    return Acquired::default();
                }
                let grant = self.start_hold(request, now_ms, next_token());
                let woken = self.absorb_owner_entries(now_ms, &present);
                Acquired {
                    grant: Some(grant),
                    woken,
                }
            }
        }
    }

    /// FAIR without BLOCK when not granted: keeps `owner`'s place as a
    /// reservation until `deadline_ms` (refreshing it in place if it has one).
    ///
    /// An owner already waiting in the queue (a blocked client of the same
    /// owner) already has its place: nothing is added.
    /// Returns whether a reservation was made or refreshed.
    pub fn reserve(&mut self, owner: &[u8], deadline_ms: u64) -> bool {
        let kind = EntryKind::Reservation { deadline_ms };
        match self.queue.reservation_of(owner) {
            Some(seq) => self.queue.replace(seq, kind),
            None if !self.queue.seqs_of(owner).is_empty() => return false,
            None => {
                self.queue.push(owner, kind);
            }
        }
        true
    }

    /// Queues a blocked waiter; an owner with a reservation waits in its
    /// place. Returns the waiter's position key.
    pub fn enqueue_waiter(&mut self, owner: &[u8], waiter: Waiter) -> u64 {
        match self.queue.reservation_of(owner) {
            Some(seq) => {
                self.queue.replace(seq, EntryKind::Waiter(waiter));
                seq
            }
            None => self.queue.push(owner, EntryKind::Waiter(waiter)),
        }
    }

    /// Removes a departed waiter (timeout, disconnect); false if not there.
    pub fn remove_waiter(&mut self, seq: u64, id: WaiterId) -> bool {
        self.queue.remove_waiter(seq, id)
    }

    /// Takes every blocked waiter out, in order (the value is going away).
    pub fn take_waiters(&mut self) -> Vec<(Box<[u8]>, Waiter)> {
        self.queue.take_waiters()
    }

    /// Gives up one hold of `owner`; returns the holds left (0: the lock is
    /// free, and [`Lock::hand_off`] should run).
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

    /// Releases every hold of a SESSION hold tied to connection `client`.
    pub fn end_session(&mut self, client: u64, now_ms: u64) -> bool {
        let tied = self
            .live_hold(now_ms)
            .is_some_and(|hold| hold.session == Some(client));
        if tied {
            self.hold = None;
        }
        tied
    }

    /// Hands a free lock to the head of the queue: drops expired
    /// reservations and departed waiters (`present` says which waiters still
    /// wait), and if a blocked waiter heads the queue, grants it a new hold
    /// (new token, its own ttl) together with the other waiting entries of the
    /// same owner. Does nothing while the lock is held or a live reservation
    /// heads the queue.
    pub fn hand_off(
        &mut self,
        now_ms: u64,
        next_token: impl FnOnce() -> u64,
        present: impl Fn(WaiterId) -> bool,
    ) -> Vec<WaiterGrant> {
        if self.live_hold(now_ms).is_some() {
            return Vec::new();
        }
        self.hold = None;
        self.queue.drop_expired_reservations(now_ms);
        let (owner, waiter) = loop {
            let Some((
                seq,
                Entry {
                    kind: EntryKind::Waiter(_),
                    ..
                },
            )) = self.queue.head()
            else {
                return Vec::new();
            };
            if let Some(Entry {
                owner,
                kind: EntryKind::Waiter(waiter),
            }) = self.queue.remove(seq)
            {
                if present(waiter.id) {
                    break (owner, waiter);
                }
            }
        };
        let request = Request {
            owner: &owner,
            ttl_ms: waiter.ttl_ms,
            session: waiter.session,
        };
        let grant = self.start_hold(request, now_ms, next_token());
        let mut woken = vec![WaiterGrant {
            waiter: waiter.id,
            grant,
            owner: owner.clone(),
        }];
        woken.extend(self.absorb_owner_entries(now_ms, &present));
        woken
    }

    fn start_hold(&mut self, request: Request<'_>, now_ms: u64, token: u64) -> Grant {
        self.hold = Some(Hold {
            owner: request.owner.into(),
            holds: 1,
            token,
            deadline_ms: now_ms.saturating_add(request.ttl_ms),
            session: request.session,
        });
        Grant {
            token,
            holds: 1,
            reentry: false,
        }
    }

    /// Grants the holder's other queued entries: waiters as re-entries (each
    /// resets the lease to its ttl), reservations simply fulfilled.
    fn absorb_owner_entries(
        &mut self,
        now_ms: u64,
        present: &impl Fn(WaiterId) -> bool,
    ) -> Vec<WaiterGrant> {
        let Some(hold) = self.hold.as_mut() else {
            return Vec::new();
        };
        let mut woken = Vec::new();
        for seq in self.queue.seqs_of(&hold.owner) {
            if let Some(Entry {
                kind: EntryKind::Waiter(waiter),
                ..
            }) = self.queue.remove(seq)
            {
                if !present(waiter.id) {
                    continue;
                }
                hold.holds = hold.holds.saturating_add(1);
                hold.deadline_ms = now_ms.saturating_add(waiter.ttl_ms);
                woken.push(WaiterGrant {
                    waiter: waiter.id,
                    grant: Grant {
                        token: hold.token,
                        holds: hold.holds,
                        reentry: true,
                    },
                    owner: hold.owner.clone(),
                });
            }
        }
        woken
    }

    fn owned_hold(&mut self, owner: &[u8], now_ms: u64) -> Result<&mut Hold, NotOwner> {
        self.hold
            .as_mut()
            .filter(|hold| hold.is_live(now_ms) && *hold.owner == *owner && hold.holds > 0)
            .ok_or(NotOwner)
    }

    /// The persistent part: the hold (without its session) and the
    /// reservations. Blocked waiters are connection state and stay behind.
    pub fn persistent_copy(&self) -> Lock {
        Lock {
            hold: self.hold.clone().map(|hold| Hold {
                session: None,
                ..hold
            }),
            queue: self.queue.without_waiters(),
        }
    }

    /// Applies a replicated hold. A new token means a new hold, which (as on
    /// the master) fulfils that owner's reservations.
    pub fn apply_hold(&mut self, hold: Hold) {
        let new_hold = self.hold.as_ref().map(|current| current.token) != Some(hold.token);
        if new_hold {
            for seq in self.queue.seqs_of(&hold.owner) {
                self.queue.remove(seq);
            }
        }
        self.hold = Some(hold);
    }

    /// Applies a replicated release of the hold.
    pub fn apply_free(&mut self) {
        self.hold = None;
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn heap_bytes(&self) -> usize {
        self.hold.as_ref().map_or(0, |hold| hold.owner.len()) + self.queue.heap_bytes()
    }
}

#[cfg(test)]
mod tests;
