//! The lock state machine: the holders (each with exclusive and shared
//! re-entry counts, a fencing token and a lease deadline) and the FIFO wait
//! queue of one lock key. Pure Rust with no Redis in it, so that every rule
//! is unit- and property-tested; the Redis adapter only stores, persists and
//! replicates what this module decides.
//!
//! Time is passed in by the caller as absolute milliseconds since the Unix
//! epoch, the same clock Redis uses for key expiry. A lease covers every
//! instant up to and including its deadline, exactly like a Redis key whose
//! expire time is that deadline: the lock is free once `now > deadline`.

pub mod audit;
pub mod codec;
pub mod grace;
mod holders;
pub mod latch;
pub mod multi;
mod owner;
mod queue;
mod token;

pub use holders::{live_holders, Hold, Holders};
pub use owner::OwnerName;
pub use queue::{
    stored_reservations, Entry, EntryKind, Queue, Waiter, WaiterId, Want, UPGRADE_SEQ,
};
pub use token::{TokenCounter, MAX_TOKEN};

/// A ttl must be below this (2^53 ms): larger leases would overflow the
/// deadline arithmetic of clients that use doubles.
pub const TTL_LIMIT_MS: u64 = 1 << 53;

/// The longest owner name, in bytes.
pub const MAX_OWNER_LEN: usize = 512;

/// How a hold is held: alone, or beside other shared holders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Excludes every other owner (a mutex, a write lock).
    #[default]
    Exclusive,
    /// Coexists with other shared holders (a read lock, a semaphore permit).
    Shared,
}

/// A successful acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub token: u64,
    /// The owner's count in the mode just granted.
    pub holds: u64,
    /// True when the owner's token did not change (a re-entry), false for a
    /// new hold or an upgrade to exclusive.
    pub reentry: bool,
    pub mode: Mode,
}

/// A blocked waiter that has been granted the lock and must be woken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterGrant {
    pub waiter: WaiterId,
    pub grant: Grant,
    pub owner: Box<[u8]>,
    /// The connection its hold is tied to (SESSION), if any.
    pub session: Option<u64>,
}

/// The caller does not hold the lock in that mode (it is free, expired, or
/// held by someone else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotOwner;

/// A second owner asked to wait for an upgrade while another upgrade waits:
/// each would wait for the other's shared hold to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlock;

/// A request for the lock, as ACQUIRE and FAIR make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
    /// The connection to tie the hold to (SESSION), if any.
    pub session: Option<u64>,
    /// The mode and LIMIT asked for.
    pub want: Want,
}

/// One operation on a lock: its clock, its token source, which blocked
/// waiters are still there, and what it changed (for the adapter to
/// replicate, report and wake).
pub struct Step<'a> {
    pub now_ms: u64,
    next_token: &'a dyn Fn() -> u64,
    present: &'a dyn Fn(WaiterId) -> bool,
    /// Which blocked waiters are places of a multi-key request (see
    /// [`multi`]): never granted here alone.
    multi_key: &'a dyn Fn(WaiterId) -> bool,
    /// Waiters granted in this step, in grant order.
    pub woken: Vec<WaiterGrant>,
    /// Multi-key requests found at the head of the queue and grantable
    /// here: the adapter tries to grant them on all their keys at once.
    pub ready: Vec<WaiterId>,
    /// Owners whose hold began, changed or ended, each noted while the lock
    /// had several holders after the change.
    pub touched: Vec<Box<[u8]>>,
    /// A hold changed while the lock had one holder or none: `touched` does
    /// not list every change, and the whole holder set must be replicated.
    pub whole: bool,
    /// Holds dropped because their lease had ended (as they were).
    pub expired: Vec<Hold>,
    /// Whether any hold began, changed or ended.
    pub holds_changed: bool,
}

impl<'a> Step<'a> {
    pub fn new(
        now_ms: u64,
        next_token: &'a dyn Fn() -> u64,
        present: &'a dyn Fn(WaiterId) -> bool,
    ) -> Self {
        Self {
            now_ms,
            next_token,
            present,
            multi_key: &no_multi_key,
            woken: Vec::new(),
            ready: Vec::new(),
            touched: Vec::new(),
            whole: false,
            expired: Vec::new(),
            holds_changed: false,
        }
    }

    /// The same step, telling multi-key waiters apart with `multi_key`.
    pub fn with_multi_key(mut self, multi_key: &'a dyn Fn(WaiterId) -> bool) -> Self {
        self.multi_key = multi_key;
        self
    }
}

fn no_multi_key(_: WaiterId) -> bool {
    false
}

/// One replicated effect on the holders (`DLOCK.SETSTATE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HolderEffect<'a> {
    /// The only holder: every other hold ends (`HOLD`).
    Only(&'a Hold),
    /// One holder's state beside the others (`HOLDER`).
    Beside(&'a Hold),
    /// One owner's holds ended (`DROP`).
    Drop(&'a [u8]),
    /// Every hold ended (`FREE`).
    Free,
}

/// The state of one lock key: its holders and its wait queue.
///
/// The rule behind every method: a new hold is only ever granted to the
/// head of the queue, or to anyone when the queue is empty, and only when it
/// is compatible with the current holders (an exclusive hold excludes every
/// other owner; shared holds coexist up to the LIMIT each asks for);
/// re-entries never queue. Holders whose lease has ended are dropped at the
/// start of every change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lock {
    holders: Holders,
    queue: Queue,
}

impl Lock {
    /// A free lock with an empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the lock is as [`Lock::new`] made it: no holder, no queue,
    /// nothing on the heap (dropping it frees nothing).
    pub fn is_bare(&self) -> bool {
        self.holders.is_empty() && self.queue.is_unallocated()
    }

    /// Every stored holder, live or not (for persistence).
    pub fn holders(&self) -> &Holders {
        &self.holders
    }

    /// Holders whose lease still covers `now_ms`, in the order their holds began.
    pub fn live_holders(&self, now_ms: u64) -> impl Iterator<Item = &Hold> + '_ {
        self.holders.iter().filter(move |hold| hold.is_live(now_ms))
    }

    /// The newest live hold: the one with the largest token among the
    /// holders (any mode) whose lease covers `now_ms`. What `DLOCK.WATCH`
    /// watches: None when the lock has no live holder.
    pub fn newest_hold(&self, now_ms: u64) -> Option<&Hold> {
        self.live_holders(now_ms).max_by_key(|hold| hold.token)
    }

    /// The live hold of `owner`.
    pub fn live_hold_of(&self, owner: &[u8], now_ms: u64) -> Option<&Hold> {
        self.holders.get(owner).filter(|hold| hold.is_live(now_ms))
    }

    /// The live holder of the lock in exclusive mode, if any.
    pub fn exclusive_holder(&self, now_ms: u64) -> Option<&Hold> {
        self.holders
            .exclusive_holder()
            .filter(|hold| hold.is_live(now_ms))
    }

    /// Owners holding the lock shared with a live lease.
    pub fn shared_owners(&self, now_ms: u64) -> usize {
        self.live_holders(now_ms)
            .filter(|hold| hold.shared > 0)
            .count()
    }

    /// The wait queue.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Blocked waiters plus reservations that have not run out.
    pub fn waiting(&self, now_ms: u64) -> usize {
        self.queue.waiter_count() + self.queue.live_reservation_count(now_ms)
    }

    fn has_live_holder(&self, now_ms: u64) -> bool {
        self.holders
            .latest_deadline()
            .is_some_and(|deadline| deadline >= now_ms)
    }

    /// True when nothing in the lock is live: the key should not exist.
    pub fn is_vacant(&self, now_ms: u64) -> bool {
        !self.has_live_holder(now_ms)
            && self.queue.waiter_count() == 0
            && self.queue.live_reservation_count(now_ms) == 0
    }

    /// When the key should expire: the latest of the leases and the live
    /// reservations. `None` when nothing with a deadline is live.
    pub fn expire_at(&self, now_ms: u64) -> Option<u64> {
        let lease = self
            .holders
            .latest_deadline()
            .filter(|deadline| *deadline >= now_ms);
        let reserved = self
            .queue
            .last_reservation_deadline()
            .filter(|deadline| *deadline >= now_ms);
        lease.max(reserved)
    }

    /// The key's expire as derived from the persisted state alone (what a
    /// replica or a loaded file computes, independent of the clock).
    pub fn persisted_expire(&self) -> Option<u64> {
        let lease = self.holders.latest_deadline();
        lease.max(self.queue.last_reservation_deadline())
    }

    /// When a timer must look at this lock again: only locks with blocked
    /// waiters need one (when the earliest lease ends, or when the
    /// reservation heading the queue runs out; at once when nothing holds
    /// the lock).
    pub fn wakeup_at(&self, now_ms: u64) -> Option<u64> {
        if self.queue.waiter_count() == 0 {
            return None;
        }
        let lease_end = self
            .holders
            .earliest_deadline()
            .map(|deadline| deadline.saturating_add(1));
        let reservation_end = match self.queue.head() {
            Some((
                _,
                Entry {
                    kind: EntryKind::Reservation { deadline_ms, .. },
                    ..
                },
            )) => Some(deadline_ms.saturating_add(1)),
            _ => None,
        };
        match (lease_end, reservation_end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (Some(at), None) | (None, Some(at)) => Some(at),
            (None, None) => Some(now_ms),
        }
    }

    /// Whether a new hold of `want` (by an owner holding nothing) is
    /// compatible with the current holders.
    fn compatible_new(&self, want: Want) -> bool {
        match want.mode {
            Mode::Exclusive => self.holders.is_empty(),
            // The permits of the shared holders and the requester's own
            // must fit in the LIMIT it asks for.
            Mode::Shared => {
                self.holders.exclusive_holder().is_none()
                    && want.limit.is_none_or(|limit| {
                        self.holders
                            .shared_weight()
                            .saturating_add(u64::from(want.weight))
                            <= u64::from(limit)
                    })
            }
        }
    }

    /// Whether `owner` may be granted `want` now, queue aside: re-entries
    /// always, an upgrade when the owner is the only holder, a new hold when
    /// compatible. Expired holders must have been dropped.
    fn grantable(&self, owner: &[u8], want: Want) -> bool {
        match self.holders.get(owner) {
            Some(hold) => match want.mode {
                Mode::Shared => true,
                Mode::Exclusive => hold.exclusive > 0 || self.holders.len() == 1,
            },
            None => self.compatible_new(want),
        }
    }

    /// Whether the queue lets a new hold of `owner` through: empty, or
    /// headed by this owner's own reservation.
    fn queue_open_to(&self, owner: &[u8]) -> bool {
        match self.queue.head() {
            None => true,
            Some((_, entry)) => {
                *entry.owner == *owner && matches!(entry.kind, EntryKind::Reservation { .. })
            }
        }
    }

    /// Records, after a change, that `owner`'s hold began, changed or
    /// ended, for replication: by name while several owners hold the lock,
    /// otherwise as a change of the whole (small) holder set.
    fn touch(&self, owner: &[u8], step: &mut Step<'_>) {
        step.holds_changed = true;
        if self.holders.is_many() {
            step.touched.push(owner.into());
        } else {
            step.whole = true;
        }
    }

    /// Drops every holder whose lease ended before now.
    fn expire_holders(&mut self, step: &mut Step<'_>) {
        if self
            .holders
            .earliest_deadline()
            .is_none_or(|deadline| deadline >= step.now_ms)
        {
            return;
        }
        for hold in self.holders.remove_expired(step.now_ms) {
            self.touch(&hold.owner, step);
            step.expired.push(hold);
        }
    }

    /// Grants `want` to `owner`, which [`Lock::grantable`] allows: a
    /// re-entry (same token), an upgrade (new token) or a new hold (new
    /// token). After a new token the caller runs
    /// [`Lock::absorb_owner_entries`].
    fn grant(
        &mut self,
        owner: &[u8],
        want: Want,
        ttl_ms: u64,
        session: Option<u64>,
        step: &mut Step<'_>,
    ) -> Grant {
        let deadline_ms = step.now_ms.saturating_add(ttl_ms);
        let reentry = self
            .holders
            .get(owner)
            .map(|hold| want.mode == Mode::Shared || hold.exclusive > 0);
        // An upgrade (exclusive after shared only) excludes everyone under a
        // new token; any other acquire of a holder keeps its token.
        let new_token = match reentry {
            Some(false) => Some((step.next_token)()),
            _ => None,
        };
        let granted = self.holders.update(owner, |hold| {
            add_one(hold, want);
            hold.deadline_ms = deadline_ms;
            if let Some(token) = new_token {
                hold.token = token;
            }
            (hold.count(want.mode), hold.token)
        });
        let grant = match granted {
            Some((holds, token)) => Grant {
                token,
                holds,
                reentry: new_token.is_none(),
                mode: want.mode,
            },
            None => {
                let token = (step.next_token)();
                let (exclusive, shared) = match want.mode {
                    Mode::Exclusive => (1, 0),
                    Mode::Shared => (0, 1),
                };
                self.holders.insert(Hold {
                    owner: owner.into(),
                    exclusive,
                    shared,
                    token,
                    deadline_ms,
                    session: session.and_then(std::num::NonZeroU64::new),
                    weight: first_weight(want),
                });
                Grant {
                    token,
                    holds: 1,
                    reentry: false,
                    mode: want.mode,
                }
            }
        };
        self.touch(owner, step);
        grant
    }

    /// An immediate acquire (ACQUIRE, or FAIR before it reserves).
    ///
    /// A holder re-enters at once (shared re-entries even past a waiting
    /// writer and whatever their LIMIT); a shared-only holder upgrades at
    /// once when it is the only holder. A new hold is granted when the queue
    /// is empty or headed by this owner's reservation and the request is
    /// compatible with the holders. Otherwise `None` and nothing changes
    /// (but holders whose lease ended are dropped).
    pub fn acquire(&mut self, request: Request<'_>, step: &mut Step<'_>) -> Option<Grant> {
        if !self.would_acquire(request, step) {
            return None;
        }
        let grant = self.grant(
            request.owner,
            request.want,
            request.ttl_ms,
            request.session,
            step,
        );
        if !grant.reentry {
            self.absorb_owner_entries(request.owner, step);
        }
        Some(grant)
    }

    /// [`Lock::acquire`] on a lock nobody holds or waits for (a new key),
    /// without the work that cannot apply there (no lease to end, no
    /// reservation to drop or absorb, no queue to respect): the request is
    /// granted its first hold under the token `next_token` issues. `None`,
    /// with nothing changed and no token issued, when the lock has a holder
    /// or a queue entry (expired or not): use [`Lock::acquire`].
    ///
    /// The lock and the grant are exactly what [`Lock::acquire`] gives; the
    /// step it would have recorded is "the whole holder set changed" (one
    /// holder now, replicated as `HOLD`) and nothing else.
    pub fn acquire_first(
        &mut self,
        request: Request<'_>,
        now_ms: u64,
        next_token: impl FnOnce() -> u64,
    ) -> Option<Grant> {
        if !self.holders.is_empty() || !self.queue.is_empty() {
            return None;
        }
        let (hold, grant) = first_hold_of(request, now_ms, next_token());
        self.holders.insert(hold);
        Some(grant)
    }

    /// The lock [`Lock::acquire_first`] makes of [`Lock::new`] under
    /// `token`, built whole (for a new key: its value is stored once, with
    /// its holder in place), and the grant.
    pub fn first_hold(request: Request<'_>, now_ms: u64, token: u64) -> (Self, Grant) {
        let (hold, grant) = first_hold_of(request, now_ms, token);
        let lock = Self {
            holders: Holders::of_one(hold),
            queue: Queue::default(),
        };
        (lock, grant)
    }

    /// [`Lock::acquire`] of the lock's only holder re-entering while nothing
    /// is queued and its lease covers `now_ms`: shared after either mode,
    /// exclusive after exclusive (not an upgrade, which takes a new token).
    /// Its count in the mode grows by one and its lease restarts at
    /// `now_ms + ttl`, under the same token. `None`, with nothing changed,
    /// in any other case: use [`Lock::acquire`].
    ///
    /// The lock and the grant are exactly what [`Lock::acquire`] gives; the
    /// step it would have recorded is "the whole holder set changed" and
    /// nothing else.
    pub fn reenter_sole(&mut self, request: Request<'_>, now_ms: u64) -> Option<Grant> {
        let hold = self.holders.single()?;
        let mode = request.want.mode;
        let reentry = *hold.owner == *request.owner
            && hold.is_live(now_ms)
            && (mode == Mode::Shared || hold.exclusive > 0)
            && self.queue.is_empty();
        if !reentry {
            return None;
        }
        let deadline_ms = now_ms.saturating_add(request.ttl_ms);
        let (holds, token) = self.holders.update(request.owner, |hold| {
            add_one(hold, request.want);
            hold.deadline_ms = deadline_ms;
            (hold.count(mode), hold.token)
        })?;
        Some(Grant {
            token,
            holds,
            reentry: true,
            mode,
        })
    }

    /// Whether [`Lock::acquire`] would grant `request` now (holders whose
    /// lease ended and expired reservations are dropped first, as it does).
    pub fn would_acquire(&mut self, request: Request<'_>, step: &mut Step<'_>) -> bool {
        self.expire_holders(step);
        self.queue.drop_expired_reservations(step.now_ms);
        let holds = self.holders.get(request.owner).is_some();
        self.grantable(request.owner, request.want) && (holds || self.queue_open_to(request.owner))
    }

    /// Whether waiter `id` heads the queue and may be granted now. Run
    /// [`Lock::hand_off`] first (it drops ended leases and departed heads).
    pub fn head_is_ready(&self, id: WaiterId) -> bool {
        match self.queue.head() {
            Some((_, entry)) => match &entry.kind {
                EntryKind::Waiter(waiter) => {
                    waiter.id == id && self.grantable(&entry.owner, waiter.want)
                }
                EntryKind::Reservation { .. } => false,
            },
            None => false,
        }
    }

    /// Grants waiter `id`, which [`Lock::head_is_ready`] allows, and takes
    /// it out of the queue; the grant is returned, not added to
    /// `step.woken` (a multi-key request is answered once, for all keys).
    pub fn grant_head(&mut self, id: WaiterId, step: &mut Step<'_>) -> Option<Grant> {
        if !self.head_is_ready(id) {
            return None;
        }
        let (seq, _) = self.queue.head()?;
        let Some(Entry {
            owner,
            kind: EntryKind::Waiter(waiter),
            ..
        }) = self.queue.remove(seq)
        else {
            return None;
        };
        let grant = self.grant(&owner, waiter.want, waiter.ttl_ms, waiter.session, step);
        if !grant.reentry {
            self.absorb_owner_entries(&owner, step);
        }
        Some(grant)
    }

    /// FAIR without BLOCK when not granted: keeps `owner`'s place as a
    /// reservation until `deadline_ms` (refreshing it in place, with the new
    /// mode and limit, if it has one).
    ///
    /// An owner already waiting in the queue (a blocked client of the same
    /// owner), or already holding the lock (an upgrade that cannot be
    /// granted), keeps no reservation. Returns whether one was made or
    /// refreshed.
    ///
    /// A new reservation records `now_ms` as the moment its owner joined
    /// the queue (for `DLOCK.INFO key FULL`); a refresh keeps the first.
    pub fn reserve(&mut self, owner: &[u8], want: Want, deadline_ms: u64, now_ms: u64) -> bool {
        let kind = EntryKind::Reservation { deadline_ms, want };
        match self.queue.reservation_of(owner) {
            Some(seq) => self.queue.replace(seq, kind),
            None if !self.queue.seqs_of(owner).is_empty() => return false,
            None if self.holders.get(owner).is_some() => return false,
            None => {
                self.queue.push(owner, kind, now_ms);
            }
        }
        true
    }

    /// Restores a persisted or replicated reservation at the tail (or
    /// refreshes the owner's), whoever holds the lock.
    pub fn restore_reservation(&mut self, owner: &[u8], want: Want, deadline_ms: u64) {
        let kind = EntryKind::Reservation { deadline_ms, want };
        match self.queue.reservation_of(owner) {
            Some(seq) => self.queue.replace(seq, kind),
            None => {
                // When it was made is not persisted: unknown.
                self.queue.push(owner, kind, 0);
            }
        }
    }

    /// Queues a blocked waiter. An owner holding the lock only shared that
    /// waits for an exclusive hold (an upgrade) waits ahead of everyone, and
    /// only one may (`Deadlock` otherwise); an owner with a reservation waits
    /// in its place; anyone else at the tail. Returns the waiter's position key.
    pub fn enqueue_waiter(
        &mut self,
        owner: &[u8],
        waiter: Waiter,
        now_ms: u64,
    ) -> Result<u64, Deadlock> {
        let upgrading = waiter.want.mode == Mode::Exclusive
            && self
                .live_hold_of(owner, now_ms)
                .is_some_and(|hold| hold.exclusive == 0);
        // A second connection of the upgrading owner waits at the tail: it
        // becomes a re-entry once the upgrade is granted.
        let second_of_upgrader = self.queue.upgrading_owner() == Some(owner);
        if upgrading && !second_of_upgrader {
            if self.queue.push_upgrade(owner, waiter, now_ms) {
                return Ok(UPGRADE_SEQ);
            }
            return Err(Deadlock);
        }
        Ok(match self.queue.reservation_of(owner) {
            Some(seq) => {
                self.queue.replace(seq, EntryKind::Waiter(waiter));
                seq
            }
            None => self.queue.push(owner, EntryKind::Waiter(waiter), now_ms),
        })
    }

    /// Whether a shared request of `owner` for `want` names another weight
    /// than the owner already has on this lock: its live shared hold's, or
    /// that of a shared request it already waits with (which would become a
    /// re-entry of that weight). One owner has one weight per lock; such a
    /// request is refused and changes nothing.
    pub fn weight_conflict(&self, owner: &[u8], want: Want, now_ms: u64) -> bool {
        if want.mode != Mode::Shared {
            return false;
        }
        let held = self
            .live_hold_of(owner, now_ms)
            .is_some_and(|hold| hold.shared > 0 && hold.weight != want.weight);
        held || self.queue.entries_of(owner).any(|entry| match &entry.kind {
            EntryKind::Waiter(waiter) => {
                waiter.want.mode == Mode::Shared && waiter.want.weight != want.weight
            }
            EntryKind::Reservation { .. } => false,
        })
    }

    /// The permits the live shared holders take together.
    pub fn shared_weight(&self, now_ms: u64) -> u64 {
        self.live_holders(now_ms).map(Hold::shared_weight).sum()
    }

    /// Whether a blocked exclusive request of `owner` would wait as an
    /// upgrade while another upgrade already waits (it would get `Deadlock`).
    pub fn upgrade_would_deadlock(&self, owner: &[u8], now_ms: u64) -> bool {
        self.queue
            .upgrading_owner()
            .is_some_and(|upgrader| upgrader != owner)
            && self
                .live_hold_of(owner, now_ms)
                .is_some_and(|hold| hold.exclusive == 0)
    }

    /// Removes a departed waiter (timeout, disconnect); false if not there.
    pub fn remove_waiter(&mut self, seq: u64, id: WaiterId) -> bool {
        self.queue.remove_waiter(seq, id)
    }

    /// Ends every hold of a value freed off Redis's main thread (see
    /// [`Holders::clear_off_main_thread`]).
    pub fn clear_holders_off_main_thread(&mut self) {
        self.holders.clear_off_main_thread();
    }

    /// Takes every blocked waiter out, in order (the value is going away).
    pub fn take_waiters(&mut self) -> Vec<(Box<[u8]>, Waiter)> {
        self.queue.take_waiters()
    }

    /// Gives up one hold of `owner` in `mode`; returns the holds left in
    /// both modes together (0: the owner holds nothing, and
    /// [`Lock::hand_off`] should run).
    pub fn release(
        &mut self,
        owner: &[u8],
        mode: Mode,
        step: &mut Step<'_>,
    ) -> Result<u64, NotOwner> {
        self.expire_holders(step);
        let held = self
            .holders
            .get(owner)
            .is_some_and(|hold| hold.count(mode) > 0);
        if !held {
            return Err(NotOwner);
        }
        let remaining = self
            .holders
            .update(owner, |hold| {
                take_one(hold, mode);
                hold.total()
            })
            .ok_or(NotOwner)?;
        self.touch(owner, step);
        Ok(remaining)
    }

    /// [`Lock::release`] of the lock's last hold, without the work the
    /// general path does for cases it cannot be in: when `owner` is the only
    /// holder, its lease covers `now_ms`, it holds exactly one hold, of
    /// `mode`, and nothing is queued (no waiter, no reservation, expired or
    /// not), that hold ends and the lock is vacant; the ended hold's token is
    /// returned. Otherwise `None` and nothing changes: use [`Lock::release`].
    ///
    /// The lock is then exactly what [`Lock::release`] followed by
    /// [`Lock::hand_off`] leaves (nothing held, nothing queued): the key is
    /// deleted.
    pub fn release_last(&mut self, owner: &[u8], mode: Mode, now_ms: u64) -> Option<u64> {
        let hold = self.holders.single()?;
        let last = *hold.owner == *owner
            && hold.is_live(now_ms)
            && hold.count(mode) == 1
            && hold.total() == 1
            && self.queue.is_empty();
        if !last {
            return None;
        }
        let token = hold.token;
        self.holders.clear_single();
        Some(token)
    }

    /// Takes back one hold of `mode` granted to `owner` under `token` whose
    /// grant never reached its client (the server dropped the reply); false
    /// when that hold is gone already or the owner holds under another token.
    pub fn revoke(&mut self, owner: &[u8], mode: Mode, token: u64, step: &mut Step<'_>) -> bool {
        self.expire_holders(step);
        let granted = self
            .holders
            .get(owner)
            .is_some_and(|hold| hold.token == token && hold.count(mode) > 0);
        if !granted {
            return false;
        }
        self.holders.update(owner, |hold| take_one(hold, mode));
        self.touch(owner, step);
        true
    }

    /// Resets the lease of `owner`'s hold (any mode) to `ttl_ms` from now;
    /// returns its token.
    pub fn renew(
        &mut self,
        owner: &[u8],
        ttl_ms: u64,
        step: &mut Step<'_>,
    ) -> Result<u64, NotOwner> {
        self.expire_holders(step);
        let deadline_ms = step.now_ms.saturating_add(ttl_ms);
        let token = self
            .holders
            .update(owner, |hold| {
                hold.deadline_ms = deadline_ms;
                hold.token
            })
            .ok_or(NotOwner)?;
        self.touch(owner, step);
        Ok(token)
    }

    /// Releases every hold tied to connection `client` (SESSION); returns
    /// the holds that ended.
    pub fn end_session(&mut self, client: u64, step: &mut Step<'_>) -> Vec<Hold> {
        self.expire_holders(step);
        let ended = self.holders.remove_session(client);
        for hold in &ended {
            self.touch(&hold.owner, step);
        }
        ended
    }

    /// Hands the lock on: drops holders whose lease ended, expired
    /// reservations and departed waiters (`present` says which waiters still
    /// wait), then grants the head of the queue while it is a blocked waiter
    /// compatible with the holders: an exclusive head stops the batch once
    /// granted (or while it cannot be), consecutive shared heads are granted
    /// together. A live reservation at the head holds the queue for its
    /// owner. Grants are added to `step.woken`.
    pub fn hand_off(&mut self, step: &mut Step<'_>) {
        self.expire_holders(step);
        self.queue.drop_expired_reservations(step.now_ms);
        while let Some((seq, entry)) = self.queue.head() {
            let EntryKind::Waiter(waiter) = &entry.kind else {
                return;
            };
            if !(step.present)(waiter.id) {
                self.queue.remove(seq);
                continue;
            }
            if (step.multi_key)(waiter.id) {
                // One place of a multi-key request: it holds the queue here
                // until it is granted on all its keys at once.
                if self.grantable(&entry.owner, waiter.want) {
                    step.ready.push(waiter.id);
                }
                return;
            }
            if !self.grantable(&entry.owner, waiter.want) {
                return;
            }
            let Some(Entry {
                owner,
                kind: EntryKind::Waiter(waiter),
                ..
            }) = self.queue.remove(seq)
            else {
                return;
            };
            let grant = self.grant(&owner, waiter.want, waiter.ttl_ms, waiter.session, step);
            let session = self.session_of(&owner);
            step.woken.push(WaiterGrant {
                waiter: waiter.id,
                grant,
                owner: owner.clone(),
                session,
            });
            if !grant.reentry {
                self.absorb_owner_entries(&owner, step);
            }
        }
    }

    /// After `owner` got a new token (a new hold or an upgrade): its
    /// reservations are fulfilled (removed), and its blocked waiters that are
    /// now re-entries (shared ones; exclusive ones when it holds exclusively)
    /// are granted, each resetting the lease to its own ttl.
    fn absorb_owner_entries(&mut self, owner: &[u8], step: &mut Step<'_>) {
        for seq in self.queue.seqs_of(owner) {
            let Some(entry) = self.queue.get(seq) else {
                continue;
            };
            let waiter = match &entry.kind {
                EntryKind::Reservation { .. } => {
                    self.queue.remove(seq);
                    continue;
                }
                EntryKind::Waiter(waiter) => waiter.clone(),
            };
            if !(step.present)(waiter.id) {
                self.queue.remove(seq);
                continue;
            }
            if (step.multi_key)(waiter.id) {
                // Granted on all its keys at once, never here alone.
                continue;
            }
            let reentry = match waiter.want.mode {
                Mode::Shared => true,
                Mode::Exclusive => self
                    .holders
                    .get(owner)
                    .is_some_and(|hold| hold.exclusive > 0),
            };
            if !reentry {
                continue;
            }
            self.queue.remove(seq);
            let deadline_ms = step.now_ms.saturating_add(waiter.ttl_ms);
            let counted = self.holders.update(owner, |hold| {
                add_one(hold, waiter.want);
                hold.deadline_ms = deadline_ms;
                (
                    hold.count(waiter.want.mode),
                    hold.token,
                    hold.session.map(std::num::NonZeroU64::get),
                )
            });
            if let Some((holds, token, session)) = counted {
                step.woken.push(WaiterGrant {
                    waiter: waiter.id,
                    grant: Grant {
                        token,
                        holds,
                        reentry: true,
                        mode: waiter.want.mode,
                    },
                    owner: owner.into(),
                    session,
                });
            }
        }
    }

    fn session_of(&self, owner: &[u8]) -> Option<u64> {
        self.holders
            .get(owner)
            .and_then(|hold| hold.session)
            .map(std::num::NonZeroU64::get)
    }

    /// The effects that bring a replica's holders to this lock's after
    /// `step`: the whole set when it has one holder or none (`Only` or
    /// `Free`, which replace every hold), or when the step changed it while
    /// it was that small (`Free`, then `Beside` for each); otherwise only the
    /// owners the step touched (`Beside` or `Drop` each), so that a change
    /// among many holders costs one effect, not one per holder.
    pub fn holder_effects(&self, step: &mut Step<'_>, mut emit: impl FnMut(HolderEffect<'_>)) {
        if let Some(hold) = self.holders.single() {
            emit(HolderEffect::Only(hold));
            return;
        }
        if self.holders.is_empty() {
            emit(HolderEffect::Free);
            return;
        }
        if step.whole {
            emit(HolderEffect::Free);
            for hold in self.holders.iter() {
                emit(HolderEffect::Beside(hold));
            }
            return;
        }
        let mut touched = std::mem::take(&mut step.touched);
        touched.sort_unstable();
        touched.dedup();
        for owner in &touched {
            match self.holders.get(owner) {
                Some(hold) => emit(HolderEffect::Beside(hold)),
                None => emit(HolderEffect::Drop(owner)),
            }
        }
    }

    /// Applies one replicated effect.
    pub fn apply_effect(&mut self, effect: HolderEffect<'_>) {
        match effect {
            HolderEffect::Only(hold) => self.apply_hold(hold.clone(), true),
            HolderEffect::Beside(hold) => self.apply_hold(hold.clone(), false),
            HolderEffect::Drop(owner) => self.apply_drop(owner),
            HolderEffect::Free => self.apply_free(),
        }
    }

    /// The persistent part: the holders (without sessions) and the
    /// reservations. Blocked waiters are connection state and stay behind.
    pub fn persistent_copy(&self) -> Lock {
        let mut holders = Holders::default();
        for hold in self.holders.iter() {
            holders.insert(Hold {
                session: None,
                ..hold.clone()
            });
        }
        Lock {
            holders,
            queue: self.queue.without_waiters(),
        }
    }

    /// Applies a replicated or persisted hold of one owner. `replace_all`:
    /// it is the only holder (every other hold ends). A token other than the
    /// owner's current one means a new hold (or an upgrade), which, as on
    /// the master, fulfils that owner's reservations.
    pub fn apply_hold(&mut self, hold: Hold, replace_all: bool) {
        let previous = self.holders.get(&hold.owner).map(|current| current.token);
        if previous != Some(hold.token) {
            for seq in self.queue.seqs_of(&hold.owner) {
                self.queue.remove(seq);
            }
        }
        if replace_all {
            self.holders.clear();
            self.holders.insert(hold);
        } else if previous.is_some() {
            let owner = hold.owner.clone();
            self.holders.update(&owner, |current| *current = hold);
        } else {
            self.holders.insert(hold);
        }
    }

    /// Applies a replicated end of one owner's holds.
    pub fn apply_drop(&mut self, owner: &[u8]) {
        self.holders.remove(owner);
    }

    /// Applies a replicated end of every hold.
    pub fn apply_free(&mut self) {
        self.holders.clear();
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn heap_bytes(&self) -> usize {
        self.holders.heap_bytes() + self.queue.heap_bytes()
    }
}

/// The weight a new hold of `want` starts with: its WEIGHT when shared.
fn first_weight(want: Want) -> u32 {
    match want.mode {
        Mode::Exclusive => 1,
        Mode::Shared => want.weight,
    }
}

/// Adds one hold of `want` to `hold`: a first shared hold brings its
/// weight, later ones share it (one weight per owner).
fn add_one(hold: &mut Hold, want: Want) {
    match want.mode {
        Mode::Exclusive => hold.exclusive = hold.exclusive.saturating_add(1),
        Mode::Shared => {
            if hold.shared == 0 {
                hold.weight = want.weight;
            }
            hold.shared = hold.shared.saturating_add(1);
        }
    }
}

/// Takes one hold of `mode` from `hold` (which has one): the last shared
/// hold gives back every permit its weight took.
fn take_one(hold: &mut Hold, mode: Mode) {
    match mode {
        Mode::Exclusive => hold.exclusive -= 1,
        Mode::Shared => {
            hold.shared -= 1;
            if hold.shared == 0 {
                hold.weight = 1;
            }
        }
    }
}

/// The hold and grant of a request's first hold on a lock nobody holds or
/// waits for, under `token`.
fn first_hold_of(request: Request<'_>, now_ms: u64, token: u64) -> (Hold, Grant) {
    let (exclusive, shared) = match request.want.mode {
        Mode::Exclusive => (1, 0),
        Mode::Shared => (0, 1),
    };
    let hold = Hold {
        owner: request.owner.into(),
        exclusive,
        shared,
        token,
        deadline_ms: now_ms.saturating_add(request.ttl_ms),
        session: request.session.and_then(std::num::NonZeroU64::new),
        weight: first_weight(request.want),
    };
    let grant = Grant {
        token,
        holds: 1,
        reentry: false,
        mode: request.want.mode,
    };
    (hold, grant)
}

#[cfg(test)]
mod fast_path_tests;
#[cfg(test)]
mod queue_time_tests;
#[cfg(test)]
mod shared_tests;
#[cfg(test)]
mod test_ops;
#[cfg(test)]
mod tests;
